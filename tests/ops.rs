//! The encoder's operations (`model::ops`: LayerNorm, the exact GELU, a dense layer with
//! bias, the residual sum, the naive and the stable logistic loss), each with its
//! backward pass, in every arithmetic:
//! - the f64 predictor (53-bit MPFR) gives f64's bits for every output of every operation;
//! - every backward pass is the derivative of its forward pass: checked against
//!   Richardson-extrapolated central differences of the forward pass in the 512-bit twin;
//! - a 128-bit ball of every output contains the 1024-bit twin's value.

mod common;

use rug::Float;
use tokensel::prelude::models::ops;
use tokensel::prelude::rng::Stream;
use tokensel::prelude::{Arith, Ball, F64, Formulation, Mpfr, rng};

/// Width of the vectors (and of the dense layer's input; its output has `OUT` entries).
const K: usize = 12;
const OUT: usize = 5;

/// The inputs: x (K), gamma (K), beta (K), W (OUT x K), b (OUT), dy (K), dz (OUT), and the
/// margins u of the loss: exact f64 values drawn from a seeded stream, or those values in
/// an arithmetic ([`Inputs::to`]).
struct Inputs<R> {
    x: Vec<R>,
    gamma: Vec<R>,
    beta: Vec<R>,
    w: Vec<R>,
    b: Vec<R>,
    dy: Vec<R>,
    dz: Vec<R>,
    u: Vec<R>,
}

impl Inputs<f64> {
    /// The values in `ar` (exactly: each arithmetic here holds every f64 used).
    fn to<A: Arith>(&self, ar: &A) -> Inputs<A::Real> {
        let c = |v: &[f64]| ar.of_slice(v);
        Inputs {
            x: c(&self.x),
            gamma: c(&self.gamma),
            beta: c(&self.beta),
            w: c(&self.w),
            b: c(&self.b),
            dy: c(&self.dy),
            dz: c(&self.dz),
            u: c(&self.u),
        }
    }
}

fn draw(seed: u64) -> Inputs<f64> {
    let mut r = rng::stream(seed, Stream::Init);
    let mut v = |n: usize, scale: f64, shift: f64| -> Vec<f64> {
        (0..n)
            .map(|_| shift + scale * (2.0 * rng::uniform(&mut r) - 1.0))
            .collect()
    };
    Inputs {
        x: v(K, 3.0, 0.4),
        gamma: v(K, 0.5, 1.0),
        beta: v(K, 0.3, 0.0),
        w: v(OUT * K, 0.3, 0.0),
        b: v(OUT, 0.2, 0.0),
        dy: v(K, 1.0, 0.0),
        dz: v(OUT, 1.0, 0.0),
        // margins from -40 to 40: the naive loss' exp(-u) stays finite in f64
        u: v(9, 40.0, 0.0),
    }
}

/// Every output of every operation and backward pass on `inp`, in `ar`, in one list.
fn all_outputs<A: Arith>(ar: &A, inp: &Inputs<f64>) -> Vec<A::Real> {
    let Inputs {
        x,
        gamma,
        beta,
        w,
        b,
        dy,
        dz,
        u,
    } = inp.to(ar);
    let mut out = Vec::new();
    let ln = ops::layer_norm(ar, &x, &gamma, &beta, 1e-5);
    let g = ops::layer_norm_backward(ar, &ln, &gamma, &dy);
    out.extend(ln.y.iter().cloned());
    out.extend(g.x);
    out.extend(g.gamma);
    out.extend(g.beta);
    let mut h = x.clone();
    ops::gelu(ar, &mut h);
    out.extend(h);
    out.extend(ops::gelu_backward(ar, &x, &dy));
    out.extend(ops::dense(ar, &w, &x, &b));
    let dg = ops::dense_backward(ar, &w, &x, &dz);
    out.extend(dg.x);
    out.extend(dg.w);
    out.extend(dg.b);
    out.extend(ops::residual(ar, &x, &dy));
    for u in &u {
        for form in [Formulation::Naive, Formulation::Stable] {
            out.push(ops::loss(ar, form, u));
            out.push(ops::loss_derivative(ar, form, u));
        }
    }
    out
}

#[test]
fn the_predictor_gives_f64s_bits_for_every_operation() {
    let predictor = Mpfr::predictor();
    for seed in 0..20 {
        let inp = draw(900 + seed);
        let a = all_outputs(&F64, &inp);
        let b = all_outputs(&predictor, &inp);
        assert_eq!(a.len(), b.len());
        for (k, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(x.is_finite(), "seed {seed}, output {k}: {x}");
            assert_eq!(
                x.to_bits(),
                predictor.to_f64(y).to_bits(),
                "seed {seed}, output {k}: f64 {x:e}, predictor {}",
                predictor.to_f64(y)
            );
        }
    }
}

#[test]
fn balls_enclose_the_1024_bit_twin() {
    // The twin's own error over these few operations is below 2^-1000 relative, far
    // inside a 128-bit ball's rounding of at least 2^-129 relative per operation: a twin
    // value outside a ball is the ball's error.
    let (ball, twin) = (Ball::new(128).unwrap(), Mpfr::truth(1024).unwrap());
    for seed in 0..10 {
        let inp = draw(950 + seed);
        let a = all_outputs(&ball, &inp);
        let b = all_outputs(&twin, &inp);
        for (k, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                x.contains(y),
                "seed {seed}, output {k}: twin {y} outside the ball {x:?}"
            );
            assert!(
                x.rad_f64() <= 1e-25 * (1.0 + y.to_f64().abs()),
                "seed {seed}, output {k}: the ball is wide: {x:?}"
            );
        }
    }
}

/// Compare `grad` with the Richardson derivative of `f` at every coordinate. With h =
/// 2^-24 the truncation error is h^4 |f^(5)| / 480 < 2^-96 |f^(5)|, and the rounding error
/// 2^-512 |f| / h negligible: a tolerance of 1e-20 (1 + |g|) leaves |f^(5)| up to about
/// 4e8; a backward pass that misses a term is wrong by O(1).
fn check_gradient(what: &str, f: &dyn Fn(&[Float]) -> Float, theta: &[Float], grad: &[Float]) {
    let h = Float::with_val(512, Float::i_exp(1, -24));
    for (j, g) in grad.iter().enumerate() {
        let r = common::richardson(f, theta, j, &h);
        let err = Float::with_val(512, &r - g).abs().to_f64();
        assert!(
            err <= 1e-20 * (1.0 + g.to_f64().abs()),
            "{what}, coordinate {j}: backward {g:.20e}, Richardson {r:.20e} (error {err:e})"
        );
    }
}

/// <c, v> in the twin.
fn inner(ar: &Mpfr, c: &[Float], v: &[Float]) -> Float {
    let mut s = ar.zero();
    for (a, b) in c.iter().zip(v) {
        s += Float::with_val(512, a * b);
    }
    s
}

#[test]
fn every_backward_pass_is_the_derivative_of_its_forward_pass() {
    let ar = Mpfr::truth(512).unwrap();
    for seed in 0..3 {
        let Inputs {
            x,
            gamma,
            beta,
            w,
            b,
            dy,
            dz,
            u,
        } = draw(970 + seed).to(&ar);
        // LayerNorm: L = <dy, LN(x; gamma, beta)>, theta = (x, gamma, beta)
        let theta: Vec<Float> = [x.clone(), gamma.clone(), beta.clone()].concat();
        let f_ln = |t: &[Float]| {
            let ln = ops::layer_norm(&ar, &t[..K], &t[K..2 * K], &t[2 * K..], 1e-5);
            inner(&ar, &dy, &ln.y)
        };
        let ln = ops::layer_norm(&ar, &x, &gamma, &beta, 1e-5);
        let g = ops::layer_norm_backward(&ar, &ln, &gamma, &dy);
        check_gradient(
            "layer_norm",
            &f_ln,
            &theta,
            &[g.x, g.gamma, g.beta].concat(),
        );
        // GELU: L = <dy, GELU(x)>
        let f_gelu = |t: &[Float]| {
            let mut v = t.to_vec();
            ops::gelu(&ar, &mut v);
            inner(&ar, &dy, &v)
        };
        check_gradient("gelu", &f_gelu, &x, &ops::gelu_backward(&ar, &x, &dy));
        // dense: L = <dz, W x + b>, theta = (W, x, b)
        let theta: Vec<Float> = [w.clone(), x.clone(), b.clone()].concat();
        let f_dense = |t: &[Float]| {
            let y = ops::dense(
                &ar,
                &t[..OUT * K],
                &t[OUT * K..OUT * K + K],
                &t[OUT * K + K..],
            );
            inner(&ar, &dz, &y)
        };
        let dg = ops::dense_backward(&ar, &w, &x, &dz);
        check_gradient("dense", &f_dense, &theta, &[dg.w, dg.x, dg.b].concat());
        // the loss, both formulations
        for u in u {
            for form in [Formulation::Naive, Formulation::Stable] {
                let f_loss = |t: &[Float]| ops::loss(&ar, form, &t[0]);
                let d = ops::loss_derivative(&ar, form, &u);
                check_gradient(
                    &format!("loss {form:?} at {u}"),
                    &f_loss,
                    std::slice::from_ref(&u),
                    &[d],
                );
            }
        }
    }
}

#[test]
fn gelu_and_the_loss_take_their_known_values() {
    // GELU(0) = 0, GELU'(0) = 1/2, GELU(u) -> u for large u and -> 0 for very negative u;
    // l(0) = log 2 and l'(0) = -1/2 in both formulations; the naive loss overflows to inf
    // at u = -800 in f64 where the stable one is 800
    let mut z = vec![0.0, 40.0, -40.0];
    ops::gelu(&F64, &mut z);
    assert_eq!(z, vec![0.0, 40.0, -0.0]);
    assert_eq!(ops::gelu_derivative(&F64, &0.0), 0.5);
    for form in [Formulation::Naive, Formulation::Stable] {
        assert_eq!(ops::loss(&F64, form, &0.0), std::f64::consts::LN_2);
        assert_eq!(ops::loss_derivative(&F64, form, &0.0), -0.5);
    }
    assert_eq!(ops::loss(&F64, Formulation::Naive, &-800.0), f64::INFINITY);
    assert_eq!(ops::loss(&F64, Formulation::Stable, &-800.0), 800.0);
}

#[test]
fn pi_is_rounded_to_nearest_and_enclosed() {
    use tokensel::prelude::F32;
    assert_eq!(F64.pi(), std::f64::consts::PI);
    assert_eq!(F32.pi(), std::f32::consts::PI);
    let predictor = Mpfr::predictor();
    assert_eq!(predictor.to_f64(&predictor.pi()), std::f64::consts::PI);
    let exact = Float::with_val(4096, rug::float::Constant::Pi);
    for prec in [64, 128, 256] {
        let ball = Ball::new(prec).unwrap().pi();
        assert!(ball.contains(&exact), "{prec} bits: {ball:?}");
        assert!(
            ball.rad_f64() <= 2f64.powi(2 - prec as i32),
            "{prec} bits: {ball:?}"
        );
    }
}
