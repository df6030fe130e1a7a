//! The step rule of the `[optimizer]` section ([`crate::config::Optimizer`]): the factor
//! each parameter block's gradient is multiplied by, -alpha (constant-step GD) or
//! -alpha / (||G|| + eps) (normalised GD), in the run's arithmetic; Adam's step is
//! coordinate-wise (`train::adam`) and takes its learning rate and clip factor from
//! here.
//!
//! The learning rate of step k is alpha (constant schedule) or alpha ((N - k) / N) (the
//! linear schedule of an N-step run: the factor rounded, then the product rounded:
//! [`StepRule::lr`]). Clipping (`clip_norm`) multiplies every block's gradient by
//! min(clip / (total + 1e-6), 1), total the global norm ([`clip_factor`]); for GD and
//! normalised GD that factor enters the block's scalar factor (-alpha c, or
//! -alpha c / (c ||G|| + eps)) rather than each coordinate (the same step in exact
//! arithmetic; PyTorch scales the gradient tensor).
//!
//! The engines supply each block's squared gradient norm in their own coordinates
//! (the direct step from d-space vectors, the span step from its Gram matrices:
//! proofs-notes/max-margin.md, "Normalised GD in span coordinates"); the norm is
//! evaluated only under normalised GD, so a constant-step run's operations, and
//! therefore its bits, are those of the trainer without this module.

use crate::arith::Arith;
use crate::config::Config;
use crate::linalg::{self, euclidean_norm};
use crate::model::blocks::Blocks;
use crate::model::query::Grad;

use super::adam;

/// Step size alpha and, under normalised GD, its eps; the schedule's position, the
/// clip norm and Adam's hyperparameters of one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepRule {
    /// The step size alpha.
    pub alpha: f64,
    /// `Some(eps)` under normalised GD.
    pub normalized: Option<f64>,
    /// `Some((k, N))` under the linear schedule: step k of an N-step run.
    pub linear: Option<(u64, u64)>,
    /// The global norm the gradient is clipped to.
    pub clip: Option<f64>,
    /// Adam's hyperparameters (Adam and AdamW).
    pub adam: Option<super::adam::Hyper>,
}

impl StepRule {
    /// The rule of `cfg` (its step size and `[optimizer]`) at step 0.
    pub fn of(cfg: &Config) -> StepRule {
        StepRule::at(cfg, 0)
    }

    /// The rule of `cfg` at step `step` (0-based: the update from `step` to `step + 1`).
    pub fn at(cfg: &Config, step: u64) -> StepRule {
        let o = &cfg.optimizer;
        StepRule {
            alpha: cfg.step_size,
            normalized: o.is_normalized().then_some(o.eps),
            linear: (o.schedule == crate::config::Schedule::Linear).then_some((step, cfg.steps)),
            clip: o.clip_norm,
            adam: super::adam::Hyper::of(cfg),
        }
    }

    /// Constant-step gradient descent with step size `alpha`.
    pub fn constant(alpha: f64) -> StepRule {
        StepRule {
            alpha,
            normalized: None,
            linear: None,
            clip: None,
            adam: None,
        }
    }

    /// The step's learning rate: alpha, or under the linear schedule
    /// alpha ((N - k) / N), (N - k) / N rounded then the product rounded (the Hugging
    /// Face Trainer's `LambdaLR` forms the factor in Python floats and multiplies).
    pub fn lr<A: Arith>(&self, ar: &A) -> A::Real {
        let mut lr = ar.of(self.alpha);
        if let Some((k, n)) = self.linear {
            let mut f = ar.of(n.saturating_sub(k) as f64);
            ar.div(&mut f, &ar.of(n.max(1) as f64));
            ar.mul(&mut lr, &f);
        }
        lr
    }

    /// The factor of a block's gradient: -alpha, or -alpha / (norm() + eps) with `norm()`
    /// the block's gradient norm (called under normalised GD only; [`crate::linalg::scaled_norm`]). Each
    /// operation is the arithmetic's own (correctly rounded in f64, f32 and MPFR, so the
    /// predictor stays bit-identical; enclosing in balls, where a norm whose enclosure
    /// reaches 0 gives an unbounded factor: a non-finite error, never a wrong step).
    /// `Err` ([`Stopped`], naming `block`) where the factor is not a finite number: eps = 0
    /// and the norm known to be exactly 0 ([`Arith::decide_sign`]: the step is 0 / 0),
    /// or alpha / (norm + eps) beyond the arithmetic's range (a norm near 0 in f64 or
    /// f32, or an enclosure that reaches 0).
    ///
    /// `clip`: the clip factor c ([`clip_factor`]): the factor is -lr c, or
    /// -lr c / (c ||G|| + eps) (the norm of the clipped gradient).
    pub fn neg_factor<A: Arith>(
        &self,
        ar: &A,
        block: &'static str,
        clip: Option<&A::Real>,
        norm: impl FnOnce() -> A::Real,
    ) -> Result<A::Real, Stopped> {
        let mut f = self.lr(ar);
        ar.neg(&mut f);
        if let Some(c) = clip {
            ar.mul(&mut f, c);
        }
        if let Some(eps) = self.normalized {
            let mut norm = norm();
            if let Some(c) = clip {
                ar.mul(&mut norm, c);
            }
            let stopped = |norm: &A::Real| Stopped {
                block,
                norm: ar.enclose(norm),
                eps,
            };
            if eps == 0.0 && ar.decide_sign(&norm) == Some(0) {
                return Err(stopped(&norm));
            }
            let kept = norm.clone();
            ar.add_f64(&mut norm, eps);
            ar.div(&mut f, &norm);
            if !ar.is_finite(&f) {
                return Err(stopped(&kept));
            }
        }
        Ok(f)
    }
}

/// The clip factor min(clip / (total + 1e-6), 1) of `torch.nn.utils.clip_grad_norm_`,
/// total = sqrt(sum of the blocks' squared norms) (`norms`: each block's norm, p then
/// W), evaluated as the Euclidean norm of the vector of block norms
/// ([`euclidean_norm`]), 1e-6 added, clip divided by it, and the minimum with 1 taken
/// by the arithmetic's max of the negatives (a ball encloses min(c, 1) over its whole
/// enclosure). Multiplying by a factor of exactly 1 changes no bit.
pub fn clip_factor<A: Arith>(ar: &A, clip: f64, norms: &[A::Real]) -> A::Real {
    let mut total = euclidean_norm(ar, norms);
    ar.add_f64(&mut total, 1e-6);
    let mut c = ar.of(clip);
    ar.div(&mut c, &total);
    // min(c, 1) = -max(-c, -1)
    ar.neg(&mut c);
    ar.max(&mut c, &ar.of(-1.0));
    ar.neg(&mut c);
    c
}

/// One step of `rule` on `blocks` from their gradients `grads` (one per block, in
/// declaration order; `None`: the block does not train), `clip` the clip factor
/// ([`clip_factor`]) or `None`, `adam` Adam's state (an Adam rule's; `None` otherwise):
/// every factor formed at the old blocks before any block moves (a [`Stopped`] leaves
/// them as they were), then each block moved in declaration order:
///
/// ```text
/// dense:    v <- v + f g               (an fma per entry)
/// factored: row j <- row j + (f left_j) right   (one rounded product, then an fma per
///           entry)
/// Adam:     adam::step per block, its gradient entries as rounded products
/// ```
///
/// The one block update of every trainer: the direct engine's query maps and the block
/// trainer's networks (`train::network`).
pub fn apply<A: Arith>(
    ar: &A,
    rule: &StepRule,
    clip: Option<&A::Real>,
    grads: &[Option<Grad<A::Real>>],
    blocks: &mut Blocks<A::Real>,
    adam: Option<&mut adam::State<A::Real>>,
) -> Result<(), Stopped> {
    if let Some(h) = rule.adam {
        let st = adam.expect("an Adam run's trainer holds Adam's state");
        st.t += 1;
        let s = h.scalars(ar, &rule.lr(ar), st.t);
        for ((g, v), mom) in grads.iter().zip(&mut blocks.values).zip(&mut st.moments) {
            let (Some(g), Some(mom)) = (g, mom) else {
                continue;
            };
            let scale = |g: &mut [A::Real]| {
                if let Some(c) = clip {
                    g.iter_mut().for_each(|x| ar.mul(x, c));
                }
            };
            match g {
                Grad::Dense(g) => {
                    let mut g = g.clone();
                    scale(&mut g);
                    adam::step(ar, &s, v, &g, &mut mom.m, &mut mom.v);
                }
                // an exact zero gradient: the moments stay exactly 0 and the step is
                // exactly 0 (eps > 0), AdamW's decoupled decay still applies
                Grad::Zero(n) => adam::step(ar, &s, v, &ar.zeros(*n), &mut mom.m, &mut mom.v),
                // a factored gradient row by row (row j: the rounded products
                // left_j right_k), never the whole matrix at once: the memory
                // check (`train::plan::state_bytes`) counts a block and its two
                // moments, not a dense copy of its gradient
                Grad::Outer(l, r) => {
                    let k = r.len();
                    let mut row = ar.zeros(k);
                    let rows = v.chunks_mut(k).zip(mom.m.chunks_mut(k));
                    for ((lj, (vj, mj)), sj) in l.iter().zip(rows).zip(mom.v.chunks_mut(k)) {
                        Grad::row(ar, lj, r, &mut row);
                        scale(&mut row);
                        adam::step(ar, &s, vj, &row, mj, sj);
                    }
                }
            }
        }
        return Ok(());
    }
    // every factor before any block moves (a stop leaves them as they were)
    let mut factors = Vec::with_capacity(grads.len());
    for (g, b) in grads.iter().zip(&blocks.decl) {
        factors.push(match g {
            // a gradient exactly 0 by structure: the exact update is 0 (for every
            // eps > 0, and by that limit for eps = 0), so no factor is formed
            None | Some(Grad::Zero(_)) => None,
            Some(g) => Some(rule.neg_factor(ar, b.name, clip, || g.norm(ar))?),
        });
    }
    for ((g, f), v) in grads.iter().zip(&factors).zip(&mut blocks.values) {
        let (Some(g), Some(f)) = (g, f) else {
            continue;
        };
        match g {
            Grad::Dense(g) => ar.axpy(f, g, v),
            Grad::Zero(_) => {}
            Grad::Outer(l, r) => {
                linalg::for_each_row(ar, v, r.len(), r.len(), |j, row| {
                    let mut a = ar.zero();
                    ar.prod(&mut a, f, &l[j]);
                    ar.axpy(&a, r, row);
                });
            }
        }
    }
    Ok(())
}

/// Normalised GD could not form a block's factor alpha / (||G|| + eps)
/// ([`StepRule::neg_factor`]); nothing has moved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stopped {
    /// The parameter block: "p" or "W".
    pub block: &'static str,
    /// The norm ||G|| as the arithmetic holds it: its value twice, or an enclosure.
    pub norm: (f64, f64),
    /// The config's eps.
    pub eps: f64,
}

impl Stopped {
    /// The trainer's error at step `step`.
    pub fn error(self, step: u64) -> crate::error::Error {
        let num = |v: f64| match v {
            0.0 => "0".to_string(),
            v => format!("{v:e}"),
        };
        let norm = match self.norm {
            (lo, hi) if lo == hi => num(lo),
            (lo, hi) => format!("enclosed in [{}, {}]", num(lo), num(hi)),
        };
        let eps = match self.eps {
            0.0 => "0".to_string(),
            e => format!("{e:e}"),
        };
        crate::error::Error::NormalizedStep {
            step,
            block: self.block,
            norm,
            eps,
            advice: self.advice(),
        }
    }

    /// What would let the step be taken: where the norm's enclosure is unbounded, no
    /// eps bounds the factor (alpha / (||G|| + eps) with ||G|| unbounded below): only a
    /// higher precision of the enclosure; else a larger eps, naming the max-margin
    /// code's 1e-9 only where eps is below it, and, for an enclosure reaching 0, a
    /// higher precision too.
    fn advice(self) -> String {
        let (lo, hi) = self.norm;
        let prec = "a higher precision of the enclosure (judge --enclosure-prec, certify --prec)";
        if !(lo.is_finite() && hi.is_finite()) {
            return format!(
                "the enclosure of the norm is unbounded, so no optimizer.eps bounds it; {prec} may keep it bounded"
            );
        }
        let eps = if self.eps < MAX_MARGIN_EPS {
            "a larger optimizer.eps (the max-margin code's 1e-9) bounds it by alpha / eps"
        } else {
            "a larger optimizer.eps bounds it by alpha / eps"
        };
        if lo == hi {
            eps.to_string()
        } else {
            format!("{eps}, or {prec} narrows the enclosure away from 0")
        }
    }
}

/// The eps of the max-margin repository's normalised GD (`1e-9` added to the gradient
/// norm), named in [`Stopped`]'s advice where the config's eps is smaller.
const MAX_MARGIN_EPS: f64 = 1e-9;

#[cfg(test)]
mod tests {
    use super::*;

    /// The stop's advice fits the configured eps: the max-margin code's 1e-9 is named
    /// only where eps is below it; with eps = 1e-9 a larger eps (a finite norm) or a
    /// higher precision (an unbounded enclosure, which no eps bounds) is advised.
    #[test]
    fn the_stop_advice_fits_the_configured_eps() {
        let msg = |norm: (f64, f64), eps: f64| {
            Stopped {
                block: "p",
                norm,
                eps,
            }
            .error(7)
            .to_string()
        };
        let mm = "the max-margin code's 1e-9";
        let zero = msg((0.0, 0.0), 0.0);
        assert!(
            zero.contains("optimizer.eps = 0 is not a finite number"),
            "{zero}"
        );
        assert!(
            zero.contains(&format!("a larger optimizer.eps ({mm}) bounds it")),
            "{zero}"
        );
        assert!(!zero.contains("--enclosure-prec"), "{zero}");
        let f32 = msg((1e-30, 1e-30), 1e-9);
        assert!(f32.contains("optimizer.eps = 1e-9 is not"), "{f32}");
        assert!(!f32.contains(mm), "{f32}");
        assert!(
            f32.contains("a larger optimizer.eps bounds it by alpha / eps"),
            "{f32}"
        );
        let ball = msg((f64::NEG_INFINITY, f64::INFINITY), 1e-9);
        assert!(
            !ball.contains(mm) && !ball.contains("a larger optimizer.eps"),
            "{ball}"
        );
        assert!(ball.contains("no optimizer.eps bounds it"), "{ball}");
        assert!(ball.contains("--enclosure-prec"), "{ball}");
        let ball0 = msg((f64::NEG_INFINITY, f64::INFINITY), 0.0);
        assert!(!ball0.contains(mm), "{ball0}");
        let near0 = msg((-1e-300, 1e-300), 0.0);
        assert!(
            near0.contains(mm) && near0.contains("--enclosure-prec"),
            "{near0}"
        );
    }
}
