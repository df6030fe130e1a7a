//! Adam and AdamW (`[optimizer] kind = "adam" | "adamw"`), coordinate-wise, in the run's
//! arithmetic, in the order of PyTorch's single-tensor (non-foreach, non-fused)
//! implementation (`torch/optim/adam.py`, `_single_tensor_adam`):
//!
//! ```text
//! t <- t + 1                                       (the step counter, from 0)
//! adam:  g <- g + wd p                             (L2: a rounded product, a rounded sum)
//! adamw: p <- p (1 - lr wd)                        (decoupled; 1 - lr wd rounded first)
//! m <- m + w1 (g - m)        w1 = 1 - beta1 < 0.5  (torch's m.lerp_(g, w1): its
//! m <- g - (g - m)(1 - w1)   w1 >= 0.5              two branches, each a rounded op)
//! v <- v beta2 + ((1 - beta2) g) g                 (torch's v.mul_(beta2).addcmul_(g, g,
//!                                                    value = 1 - beta2))
//! bc1 = 1 - beta1^t,  bc2 = 1 - beta2^t            (beta^t by binary powering)
//! step_size = lr / bc1
//! denom = sqrt(max(v, 0)) / sqrt(bc2) + eps
//! p <- p + (-step_size) (m / denom)                (torch's p.addcdiv_(m, denom,
//!                                                    value = -step_size))
//! ```
//!
//! `lr` is the step's learning rate (the config's `step_size`, times the linear
//! schedule's factor: `step_rule`), `g` the block's gradient after clipping
//! (`step_rule::clip_factor`). Every operation is one of the arithmetic's own, correctly
//! rounded in f64, f32 and MPFR (so the 53-bit predictor reproduces f64 bit for bit) and
//! enclosing in balls. Where this differs from PyTorch's bits: torch forms 1 - beta,
//! beta^t (Python's `**`, libm's pow) and lr / bc1 in Python floats and then runs the
//! tensor ops in the tensor's dtype (f32, possibly with fused multiply-adds in its
//! vector kernels); here every scalar is formed in the run's arithmetic, and beta^t by
//! binary powering of rounded products ([`pow`]), which is what the predictor can
//! reproduce bit for bit and a ball can enclose, but which is less accurate than
//! Python's `**` (a correctly rounded or nearly so libm pow): each squaring doubles the
//! relative error it carries, so beta^t is within about (t - 1) units of the
//! arithmetic's rounding (relative, first order) of the exact power; for beta2 = 0.999
//! around t = 1000, where beta2^t ~ 0.37, bc2 = 1 - beta2^t then carries up to a few
//! hundred f64 ulps (relative ~1e-13), and the f64 bits of a step differ from PyTorch's
//! f64 ones there. The square root takes
//! max(v, 0): v >= 0 in exact arithmetic (a sum of non-negative terms) and in every
//! rounded one, but a ball's enclosure of v may reach below 0; `max` keeps the
//! enclosure of max(v, 0) (where the clamped ball still reaches 0 the root's enclosure
//! is only as good as the ball's square root: sound, possibly wide).

use crate::arith::Arith;
use crate::config::{Config, OptimizerKind};

/// Adam's hyperparameters (from the config's `[optimizer]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hyper {
    /// beta1.
    pub beta1: f64,
    /// beta2.
    pub beta2: f64,
    /// eps (> 0).
    pub eps: f64,
    /// The weight decay.
    pub weight_decay: f64,
    /// True for AdamW (decoupled decay), false for Adam (L2 added to the gradient).
    pub decoupled: bool,
}

impl Hyper {
    /// The hyperparameters of `cfg`, `None` unless its optimizer is Adam or AdamW.
    pub fn of(cfg: &Config) -> Option<Hyper> {
        let o = &cfg.optimizer;
        o.is_adam().then(|| Hyper {
            beta1: o.beta1.unwrap_or(0.9),
            beta2: o.beta2.unwrap_or(0.999),
            eps: o.eps,
            weight_decay: o.weight_decay.unwrap_or(0.0),
            decoupled: o.kind == OptimizerKind::Adamw,
        })
    }
}

/// The first and second moments of one parameter block (zero at step 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Moments<R> {
    /// m, the moving average of the gradient.
    pub m: Vec<R>,
    /// v, the moving average of its square.
    pub v: Vec<R>,
}

impl<R: Clone> Moments<R> {
    /// Zero moments of a block of `len` coordinates.
    pub fn zeros<A: Arith<Real = R>>(ar: &A, len: usize) -> Self {
        Moments {
            m: ar.zeros(len),
            v: ar.zeros(len),
        }
    }
}

/// Adam's state beside the engine's parameters: the step counter and each trained
/// block's moments.
#[derive(Debug, Clone, PartialEq)]
pub struct State<R> {
    /// Steps taken (PyTorch's `step`).
    pub t: u64,
    /// p's moments (p- and joint mode).
    pub p: Option<Moments<R>>,
    /// W's moments, d x d row-major (W- and joint mode).
    pub w: Option<Moments<R>>,
}

/// x^t by binary powering (square-and-multiply from the lowest bit, each product
/// rounded in the arithmetic); x^0 = 1.
pub fn pow<A: Arith>(ar: &A, x: &A::Real, t: u64) -> A::Real {
    let mut acc = ar.of(1.0);
    let mut base = x.clone();
    let mut t = t;
    while t > 0 {
        if t & 1 == 1 {
            ar.mul(&mut acc, &base);
        }
        t >>= 1;
        if t > 0 {
            let b = base.clone();
            ar.mul(&mut base, &b);
        }
    }
    acc
}

/// The scalars of one Adam step (module docs), in the arithmetic.
#[derive(Debug, Clone)]
pub struct Scalars<R> {
    /// -lr / bc1.
    neg_step_size: R,
    /// sqrt(bc2).
    bc2_sqrt: R,
    /// w1 = 1 - beta1, and 1 - w1.
    w1: R,
    one_minus_w1: R,
    /// beta2 and 1 - beta2.
    beta2: R,
    c2: R,
    /// eps.
    eps: R,
    /// Adam: wd (L2); AdamW: 1 - lr wd (decoupled); `None` with wd = 0.
    l2: Option<R>,
    decay: Option<R>,
    /// Whether w1 < 0.5 (torch's lerp branch).
    small_w1: bool,
}

impl Hyper {
    /// The scalars of step `t` (1-based: after the counter's increment) at learning
    /// rate `lr`.
    pub fn scalars<A: Arith>(&self, ar: &A, lr: &A::Real, t: u64) -> Scalars<A::Real> {
        let one = ar.of(1.0);
        let one_minus = |b: &A::Real| {
            let mut r = one.clone();
            ar.sub(&mut r, b);
            r
        };
        let (b1, b2) = (ar.of(self.beta1), ar.of(self.beta2));
        let bc1 = one_minus(&pow(ar, &b1, t));
        let mut bc2_sqrt = one_minus(&pow(ar, &b2, t));
        ar.sqrt(&mut bc2_sqrt);
        let mut neg_step_size = lr.clone();
        ar.div(&mut neg_step_size, &bc1);
        ar.neg(&mut neg_step_size);
        let w1 = one_minus(&b1);
        let one_minus_w1 = one_minus(&w1);
        let (mut l2, mut decay) = (None, None);
        if self.weight_decay != 0.0 {
            let wd = ar.of(self.weight_decay);
            if self.decoupled {
                let mut lw = lr.clone();
                ar.mul(&mut lw, &wd);
                decay = Some(one_minus(&lw));
            } else {
                l2 = Some(wd);
            }
        }
        Scalars {
            neg_step_size,
            bc2_sqrt,
            small_w1: (1.0 - self.beta1).abs() < 0.5,
            w1,
            one_minus_w1,
            c2: one_minus(&b2),
            beta2: b2,
            eps: ar.of(self.eps),
            l2,
            decay,
        }
    }
}

/// One Adam step of a block: `param` moved, its moments `m` and `v` updated, from the
/// block's (clipped) gradient `grad` (module docs). Coordinates are independent: the result does not
/// depend on their order or the thread count.
pub fn step<A: Arith>(
    ar: &A,
    s: &Scalars<A::Real>,
    param: &mut [A::Real],
    grad: &[A::Real],
    m: &mut [A::Real],
    v: &mut [A::Real],
) {
    let zero = ar.zero();
    let it = param
        .iter_mut()
        .zip(grad)
        .zip(m.iter_mut().zip(v.iter_mut()));
    for ((p, g), (m, v)) in it {
        let mut g = g.clone();
        if let Some(wd) = &s.l2 {
            let mut t = p.clone();
            ar.mul(&mut t, wd);
            ar.add(&mut g, &t);
        }
        if let Some(decay) = &s.decay {
            ar.mul(p, decay);
        }
        // m.lerp_(g, w1)
        let mut diff = g.clone();
        ar.sub(&mut diff, m);
        if s.small_w1 {
            ar.mul(&mut diff, &s.w1);
            ar.add(m, &diff);
        } else {
            ar.mul(&mut diff, &s.one_minus_w1);
            let mut r = g.clone();
            ar.sub(&mut r, &diff);
            ar.set(m, &r);
        }
        // v.mul_(beta2).addcmul_(g, g, value = 1 - beta2)
        ar.mul(v, &s.beta2);
        let mut sq = s.c2.clone();
        ar.mul(&mut sq, &g);
        ar.mul(&mut sq, &g);
        ar.add(v, &sq);
        // denom = sqrt(max(v, 0)) / sqrt(bc2) + eps
        let mut denom = v.clone();
        ar.max(&mut denom, &zero);
        ar.sqrt(&mut denom);
        ar.div(&mut denom, &s.bc2_sqrt);
        ar.add(&mut denom, &s.eps);
        // p.addcdiv_(m, denom, value = -step_size)
        let mut u = m.clone();
        ar.div(&mut u, &denom);
        ar.mul(&mut u, &s.neg_step_size);
        ar.add(p, &u);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arith::{F64, Mpfr};

    /// Binary powering: exact where every product is (powers of 1/2), and within the
    /// first-order bound (t - 1) u (u = 2^-53) of the twin's value otherwise (each
    /// squaring doubles the relative error: s_j = 2 s_(j-1) + u, so x^(2^j) carries
    /// (2^j - 1) u, and the products of the set bits add theirs plus one u each), with
    /// 1% for the second-order terms.
    #[test]
    fn binary_powering() {
        assert_eq!(pow(&F64, &0.5, 10), 0.5f64.powi(10));
        assert_eq!(pow(&F64, &0.9, 0), 1.0);
        assert_eq!(pow(&F64, &0.9, 1), 0.9);
        let ar = Mpfr::truth(256).unwrap();
        for t in [2u64, 3, 7, 1000, 123_457] {
            let got = pow(&F64, &0.999, t);
            let want = ar.to_f64(&pow(&ar, &ar.of(0.999), t));
            let bound = 1.01 * (t - 1) as f64 * (f64::EPSILON / 2.0) * want;
            assert!((got - want).abs() <= bound, "t {t}: {got:e} vs {want:e}");
        }
    }
}
