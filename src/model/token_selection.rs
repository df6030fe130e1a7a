//! The paper's binary token-selection model (SPEC sections 1-3): the fixed head
//! nu in R^d, f = nu^T X^T softmax(X W^T p) = sum_t s_t g_t with g_t = <nu, x_t>, the
//! logistic loss l(Y f), labels in {+1, -1}; the naive (framework) gradient in d-space.
//!
//! The attention itself (scores, softmax, the centred output and the softmax gradient)
//! is [`super::attention`]'s, shared with every model.

use ndarray::{ArrayView2, ArrayView3};

use super::attention::{grad_scores, output};
use super::{Model, Sample};
use crate::arith::Arith;
use crate::config::Formulation;
use crate::data::Dataset;

/// The binary token-selection model (`[model] kind = "token-selection"`, the default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenSelection;

impl Model for TokenSelection {
    fn outputs(&self) -> usize {
        1
    }

    fn spec(&self) -> crate::config::ModelSpec {
        crate::config::ModelSpec::default()
    }

    fn head_values<A: Arith>(
        &self,
        ar: &A,
        data: &Dataset,
        x: ArrayView3<'_, f64>,
    ) -> Vec<A::Real> {
        head_values(ar, x, &data.head(ar))
    }

    fn sample<A: Arith>(
        &self,
        ar: &A,
        s: &[A::Real],
        g: &[A::Real],
        y: i8,
        n: usize,
        form: Formulation,
        out: &mut Sample<A::Real>,
        c: &mut [A::Real],
    ) {
        output(ar, s, g, out.softmax.top, form, &mut out.f);
        let yi = y as f64;
        let mut u = out.f.clone();
        ar.mul_f64(&mut u, yi);
        loss(ar, &u, &mut out.loss);
        loss_derivative(ar, &u, &mut out.coef);
        ar.mul_f64(&mut out.coef, yi);
        ar.div_f64(&mut out.coef, n as f64);
        if form == Formulation::Stable {
            grad_scores(ar, s, g, out.softmax.top, &out.f, &out.coef, c);
        }
    }

    fn head_rows<A: Arith>(&self, ar: &A, data: &Dataset) -> Vec<A::Real> {
        data.head(ar)
    }

    fn output_grad<A: Arith>(&self, ar: &A, out: &Sample<A::Real>, gamma: &mut [A::Real]) {
        ar.set(&mut gamma[0], &out.coef);
    }

    fn forward<A: Arith>(
        &self,
        ar: &A,
        s: &[A::Real],
        g: &[A::Real],
        top: usize,
        form: Formulation,
        f: &mut [A::Real],
    ) {
        output(ar, s, g, top, form, &mut f[0]);
    }

    fn loss<A: Arith>(&self, ar: &A, f: &[A::Real], y: i8, out: &mut A::Real) {
        let mut margin = f[0].clone();
        if y < 0 {
            ar.neg(&mut margin);
        }
        loss(ar, &margin, out);
    }

    fn naive_terms<'s, R>(&self, g: &'s [R], out: &'s Sample<R>) -> (&'s [R], &'s R) {
        (g, &out.f)
    }

    fn predict<A: Arith>(&self, ar: &A, f: &[A::Real]) -> Option<i8> {
        predict(ar, &f[0])
    }

    fn decide<A: Arith>(&self, ar: &A, f: &[A::Real], y: i8) -> Option<bool> {
        predict(ar, &f[0]).map(|s| s == y)
    }
}

pub use crate::data::head::head_values;

pub(crate) mod limit;
pub(crate) mod svm;

/// `out = coef * df/dq` for one sequence in the `Naive` formulation (backprop through
/// softmax as frameworks do it): (sum_t (s_t g_t) x_t - f sum_t s_t x_t) coef, which
/// cancels catastrophically once 1 - s_top < ~1e-8. `scratch` has length d.
#[allow(clippy::too_many_arguments)]
pub fn grad_q_naive<A: Arith>(
    ar: &A,
    x: ArrayView2<'_, f64>,
    s: &[A::Real],
    g: &[A::Real],
    f: &A::Real,
    coef: &A::Real,
    scratch: &mut [A::Real],
    out: &mut [A::Real],
) {
    let zero = ar.zero();
    for (o, b) in out.iter_mut().zip(scratch.iter_mut()) {
        ar.set(o, &zero);
        ar.set(b, &zero);
    }
    let mut sg = ar.zero();
    for (t, row) in x.rows().into_iter().enumerate() {
        let row = row.to_slice().expect("contiguous rows");
        ar.prod(&mut sg, &s[t], &g[t]);
        ar.axpy_f64(&sg, row, out);
        ar.axpy_f64(&s[t], row, scratch);
    }
    let mut fb = ar.zero();
    for (o, b) in out.iter_mut().zip(scratch.iter()) {
        ar.prod(&mut fb, f, b);
        ar.sub(o, &fb);
        ar.mul(o, coef);
    }
}

/// `out = coef * df/dq` for one sequence (rows of `x`), in either formulation:
/// `Stable`: X^T c with c from [`grad_scores`] (an fma chain over the tokens, the same
/// order as the trainer's X^T c); `Naive`: [`grad_q_naive`].
#[allow(clippy::too_many_arguments)]
pub fn grad_q<A: Arith>(
    ar: &A,
    x: ArrayView2<'_, f64>,
    s: &[A::Real],
    g: &[A::Real],
    top: usize,
    f: &A::Real,
    coef: &A::Real,
    form: Formulation,
    out: &mut [A::Real],
) {
    match form {
        Formulation::Naive => {
            let mut scratch = ar.zeros(out.len());
            grad_q_naive(ar, x, s, g, f, coef, &mut scratch, out);
        }
        Formulation::Stable => {
            let mut c = ar.zeros(s.len());
            grad_scores(ar, s, g, top, f, coef, &mut c);
            let zero = ar.zero();
            out.iter_mut().for_each(|o| ar.set(o, &zero));
            for (ct, row) in c.iter().zip(x.rows()) {
                ar.axpy_f64(ct, row.to_slice().expect("contiguous rows"), out);
            }
        }
    }
}

/// Logistic loss l(u) = log(1 + exp(-u)), without overflow: `out = l(u)`.
pub fn loss<A: Arith>(ar: &A, u: &A::Real, out: &mut A::Real) {
    if ar.sign(u) >= 0 {
        ar.set(out, u);
        ar.neg(out);
        ar.exp(out);
        ar.ln_1p(out);
    } else {
        let mut e = u.clone();
        ar.exp(&mut e);
        ar.ln_1p(&mut e);
        ar.set(out, u);
        ar.neg(out);
        ar.add(out, &e);
    }
}

/// Derivative l'(u) = -1 / (1 + exp(u)) = -logistic(-u), without overflow: `out = l'(u)`.
///
/// Through [`Arith::logistic`]: for u <= 0 as -1 / (1 + exp(u)), for u > 0 as -e / (1 + e)
/// with e = exp(-u), the same operations in the same order as before, so the bits of
/// f64, f32, MPFR and the predictor are unchanged; a ball encloses the increasing
/// logistic function over its whole input ball instead of evaluating a formula that
/// holds its input twice (proofs-notes/certify.md, "One occurrence").
pub fn loss_derivative<A: Arith>(ar: &A, u: &A::Real, out: &mut A::Real) {
    ar.set(out, u);
    ar.neg(out);
    ar.logistic(out);
    ar.neg(out);
}

/// Predicted label sign(f), where the sign is proved ([`Arith::decide_sign`]): the sign
/// itself in f64, f32 and MPFR (finite values); in a ball arithmetic the sign where the
/// ball excludes 0. `None` where it is not proved (an enclosure of f containing 0). A
/// prediction of 0, or one that is not decided, matches no label: it counts as wrong for
/// both classes, so an accuracy counted from a ball's predictions is a PROVED lower bound.
pub fn predict<A: Arith>(ar: &A, f: &A::Real) -> Option<i8> {
    ar.decide_sign(f)
}

#[cfg(test)]
mod tests {
    use super::super::attention::*;
    use super::*;
    use crate::arith::F64;
    use ndarray::array;

    /// Both formulations agree with the definitions away from saturation, to a bound of
    /// a few ulps of the O(1) quantities (1e-15 here).
    #[test]
    fn formulations_agree_away_from_saturation() {
        let ar = F64;
        let x = array![[1.0, 0.5, -0.2], [0.3, -1.0, 0.4], [-0.7, 0.2, 0.9]];
        let q = [0.4, -0.3, 0.8];
        let g = [0.2, -0.1, 0.05];
        let mut sc = [0.0; 3];
        scores(&ar, x.view(), &q, &mut sc);
        let (mut s1, mut s2) = ([0.0; 3], [0.0; 3]);
        let (mut a1, mut a2) = (Softmax::new(&ar), Softmax::new(&ar));
        softmax(&ar, &sc, &mut s1, Formulation::Naive, &mut a1);
        softmax(&ar, &sc, &mut s2, Formulation::Stable, &mut a2);
        assert_eq!(s1, s2);
        assert!((a1.rest - a2.rest).abs() < 1e-15);
        let (mut f1, mut f2) = (0.0, 0.0);
        output(&ar, &s1, &g, a1.top, Formulation::Naive, &mut f1);
        output(&ar, &s2, &g, a2.top, Formulation::Stable, &mut f2);
        assert!((f1 - f2).abs() < 1e-15);
        let (mut o1, mut b) = ([0.0; 3], [0.0; 3]);
        grad_q_naive(&ar, x.view(), &s1, &g, &f1, &1.0, &mut b, &mut o1);
        let mut c = [0.0; 3];
        grad_scores(&ar, &s2, &g, a2.top, &f2, &1.0, &mut c);
        for k in 0..3 {
            // the definition sum_t s_t (g_t - f) x_t
            let want: f64 = (0..3).map(|t| s1[t] * (g[t] - f1) * x[[t, k]]).sum();
            let stable: f64 = (0..3).map(|t| c[t] * x[[t, k]]).sum();
            assert!((o1[k] - want).abs() < 1e-15, "{k}");
            assert!((stable - want).abs() < 1e-15, "{k}");
        }
    }

    /// The selection status: decided when the top score is greater than every other,
    /// a tie when another score equals it (wherever that token is), with the lowest
    /// index kept as `top`; T = 1 is decided.
    #[test]
    fn ties_are_reported() {
        let ar = F64;
        let status = |z: &[f64]| {
            let mut s = vec![0.0; z.len()];
            let mut att = Softmax::new(&ar);
            softmax(&ar, z, &mut s, Formulation::Stable, &mut att);
            (att.top, att.selection)
        };
        assert_eq!(status(&[1.0, 3.0, 2.0]), (1, Selection::Decided));
        assert_eq!(status(&[1.0, 3.0, 2.0, 3.0]), (1, Selection::Tie));
        assert_eq!(status(&[0.0; 8]), (0, Selection::Tie));
        assert_eq!(status(&[-0.0, 0.0]), (0, Selection::Tie));
        assert_eq!(status(&[5.0]), (0, Selection::Decided));
        assert_eq!(status(&[1.0, 1.0 + f64::EPSILON]), (1, Selection::Decided));
    }

    /// A prediction is the sign of f in the trainer's own arithmetic: an MPFR f far below
    /// f64's range (|f| < 2^-1075 rounds to 0 in f64) still counts with its sign.
    #[test]
    fn predictions_use_the_sign_in_the_trainers_arithmetic() {
        let ar = crate::arith::Mpfr::truth(256).unwrap();
        let tiny = rug::Float::with_val(256, rug::Float::i_exp(1, -2000));
        assert_eq!(ar.to_f64(&tiny), 0.0);
        assert_eq!(predict(&ar, &tiny), Some(1));
        assert_eq!(predict(&ar, &(-tiny)), Some(-1));
        assert_eq!(predict(&ar, &ar.zero()), Some(0));
        // a ball counts a prediction only where its sign is proved
        use crate::arith::{Ball, BallReal, Mag};
        let ball = Ball::new(128).unwrap();
        let f = |r: f64| BallReal::new(rug::Float::with_val(128, 1e-3), Mag::of_f64(r));
        assert_eq!(predict(&ball, &f(1e-4)), Some(1));
        assert_eq!(predict(&ball, &f(1e-2)), None);
    }

    /// l and l' against their closed forms at 0 and the overflow ends, and l' against a
    /// central difference of l (truncation O(h^2) ~ 1e-12, rounding ~ 1e-16 / h = 1e-10).
    #[test]
    fn loss_is_stable_at_both_ends() {
        let ar = F64;
        let l = |u: f64| {
            let mut o = 0.0;
            loss(&ar, &u, &mut o);
            o
        };
        let dl = |u: f64| {
            let mut o = 0.0;
            loss_derivative(&ar, &u, &mut o);
            o
        };
        assert!((l(0.0) - std::f64::consts::LN_2).abs() < 1e-16);
        assert_eq!(l(-1000.0), 1000.0);
        assert!(l(1000.0) == 0.0);
        assert_eq!(dl(-1000.0), -1.0);
        assert!((dl(0.0) + 0.5).abs() < 1e-16);
        let h = 1e-6;
        for u in [-3.0, -0.5, 0.7, 4.0] {
            let fd = (l(u + h) - l(u - h)) / (2.0 * h);
            assert!((fd - dl(u)).abs() < 1e-9);
        }
    }
}
