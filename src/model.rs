//! The model, written once over the arithmetic: scores, softmax attention, output, loss
//! and **the softmax gradient**.
//!
//! For one sequence X (T x d), q = W^T p and the fixed head values g_t = <nu, x_t>:
//!
//! ```text
//! scores        z_t = <x_t, q>
//! attention     s_t = exp(z_t - z_top) / sum_u exp(z_u - z_top)
//! output        f   = sum_t s_t g_t
//! grad_scores   df/dz_t = s_t (g_t - f)              (the softmax gradient)
//! grad_q        df/dq   = sum_t df/dz_t x_t = X^T df/dz
//! ```
//!
//! Two formulations ([`Formulation`], SPEC section 6). `Naive`, as frameworks compute
//! them: 1 - s_top by subtraction, f = sum s g, and df/dq = sum (s g) x - f sum s x (two
//! d-vectors, then a cancelling difference). `Stable`, centred on the top token so that
//! nothing cancels when attention saturates: 1 - s_top = sum_{j != top} s_j, f = g_top +
//! sum_{j != top} s_j (g_j - g_top), and the token-space gradient with g_top - f formed
//! from that same small sum. Derivations and error bounds: proofs-notes/gradient.md.

use std::cmp::Ordering;

use ndarray::{ArrayView2, ArrayView3};
use serde::{Deserialize, Serialize};

use crate::arith::Arith;
pub use crate::config::Formulation;

/// What can be reported about a sample's selected token: whether its score is proved
/// greater than every other (the top token is the selected one), proved equal to another
/// one's (a tie: no token is selected), or neither (an enclosure too wide to tell).
///
/// Decided through [`Arith::decide_cmp`]: every arithmetic but a ball one decides every
/// comparison, so `Undecided` only comes from enclosures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// The top token's score is proved greater than every other token's.
    Decided,
    /// The top token's score is proved equal to another token's.
    Tie,
    /// Some comparison with the top token's score is not proved either way.
    Undecided,
}

impl Selection {
    /// A number for digests: 0 decided, 1 tie, 2 undecided.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// Summary of one softmax evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Softmax<R> {
    /// Index of the largest score (lowest index on ties; a ball arithmetic: of the
    /// midpoints): the token the max subtraction and the centred formulas use (any argmax
    /// is correct for them). Whether it is *reported* as selected is `selection`'s
    /// business.
    pub top: usize,
    /// Whether `top` is the selected token (decided), ties another, or is undecided.
    pub selection: Selection,
    /// `rest` = 1 - s_top (`Stable`: sum_{j != top} e_j / sum_u e_u; `Naive`: 1 - s_top).
    pub rest: R,
    /// Score gap z_top - max_{j != top} z_j (infinite for T = 1). In a ball arithmetic
    /// it encloses the exact gap for this `top` even where the order of the other scores
    /// is undecided, so `decide_sign(gap)` proves the selection: `Some(1)`, `top` is the
    /// unique largest score; `Some(0)`, an exact tie; `None`, undecided.
    pub gap: R,
}

impl<R> Softmax<R> {
    /// A placeholder (top 0, zero rest and gap) in `ar`.
    pub fn new<A: Arith<Real = R>>(ar: &A) -> Self {
        Softmax {
            top: 0,
            selection: Selection::Decided,
            rest: ar.zero(),
            gap: ar.zero(),
        }
    }
}

/// The head nu = (mu_{+1} - mu_{-1}) / (||mu_{+1} - mu_{-1}|| ||mu||), in `ar`.
pub fn head<A: Arith>(ar: &A, mu_pos: &[f64], mu_neg: &[f64], mu_norm: f64) -> Vec<A::Real> {
    let mut diff = ar.zeros(mu_pos.len());
    for ((v, a), b) in diff.iter_mut().zip(mu_pos).zip(mu_neg) {
        ar.diff_f64(v, *a, *b);
    }
    let mut scale = ar.zero();
    ar.dot(&diff, &diff, &mut scale);
    ar.sqrt(&mut scale);
    ar.mul_f64(&mut scale, mu_norm);
    for v in diff.iter_mut() {
        ar.div(v, &scale);
    }
    diff
}

/// Head values g_t = <nu, x_t> of every token of `x` (n, T, d), row-major (n, T).
pub fn head_values<A: Arith>(ar: &A, x: ArrayView3<'_, f64>, nu: &[A::Real]) -> Vec<A::Real> {
    let (n, t, d) = x.dim();
    let rows = x.as_slice().expect("standard layout");
    let mut g = ar.zeros(n * t);
    crate::linalg::for_each_row(ar, &mut g, 1, d, |r, gr| {
        ar.dot_f64(&rows[r * d..(r + 1) * d], nu, &mut gr[0])
    });
    g
}

/// Scores z_t = <x_t, q> for every token (rows of `x`), by [`Arith::dot_f64`].
pub fn scores<A: Arith>(ar: &A, x: ArrayView2<'_, f64>, q: &[A::Real], scores: &mut [A::Real]) {
    for (zt, row) in scores.iter_mut().zip(x.rows()) {
        ar.dot_f64(row.as_slice().expect("contiguous rows"), q, zt);
    }
}

/// Index of the largest entry (lowest index on ties).
pub fn argmax<A: Arith>(ar: &A, scores: &[A::Real]) -> usize {
    let mut top = 0;
    for (t, v) in scores.iter().enumerate() {
        if ar.cmp(v, &scores[top]) == Some(Ordering::Greater) {
            top = t;
        }
    }
    top
}

/// Softmax of `scores` into `s`, with the max subtracted first.
///
/// e_t = exp(z_t - c) with c = z_top as an exact number ([`Arith::point`]: in a ball its
/// midpoint), except that the point arithmetics set e_top = 1 exactly; E = e_top +
/// sum_{j != top} e_j summed in token order, s_t = e_t / E. The formulations differ only
/// in how `rest` = 1 - s_top is
/// formed. The top token's [`Selection`] compares its score with every other through
/// [`Arith::decide_cmp`].
pub fn softmax<A: Arith>(
    ar: &A,
    scores: &[A::Real],
    s: &mut [A::Real],
    form: Formulation,
    att: &mut Softmax<A::Real>,
) {
    let top = argmax(ar, scores);
    let zmax = &scores[top];
    // the shift: the top score as an exact number (itself in the point arithmetics, so
    // e_top = exp(0) = 1 exactly there; a ball's midpoint, so no term holds the top
    // score's radius twice: softmax is the same for every real shift)
    let shift = ar.point(zmax);
    let mut others = ar.zero();
    // max_{j != top} z_j by `Arith::max`: a ball arithmetic encloses it even where the
    // order of the other scores is not decided
    let mut second: Option<A::Real> = None;
    let (mut tie, mut undecided) = (false, false);
    for (t, (zt, st)) in scores.iter().zip(s.iter_mut()).enumerate() {
        if t == top && ar.kind() != crate::arith::Kind::Ball {
            // a point arithmetic: exp(z_top - z_top) = 1, set exactly (also where z_top
            // is infinite, so a diverging run's bits are those it always had)
            ar.set_f64(st, 1.0);
        } else {
            ar.diff(st, zt, &shift);
            ar.exp(st);
        }
        if t != top {
            match ar.decide_cmp(zmax, zt) {
                Some(Ordering::Greater) => {}
                Some(Ordering::Equal) => tie = true,
                _ => undecided = true,
            }
            ar.add(&mut others, st);
            match &mut second {
                None => second = Some(zt.clone()),
                Some(m) => ar.max(m, zt),
            }
        }
    }
    let mut total = s[top].clone();
    ar.add(&mut total, &others);
    for st in s.iter_mut() {
        ar.div(st, &total);
    }
    match form {
        Formulation::Naive => {
            ar.set_f64(&mut att.rest, 1.0);
            ar.sub(&mut att.rest, &s[top]);
        }
        Formulation::Stable => {
            ar.set(&mut att.rest, &others);
            ar.div(&mut att.rest, &total);
        }
    }
    att.top = top;
    att.selection = match (undecided, tie) {
        (true, _) => Selection::Undecided,
        (false, true) => Selection::Tie,
        (false, false) => Selection::Decided,
    };
    match &second {
        Some(m) => ar.diff(&mut att.gap, zmax, m),
        None => ar.set_f64(&mut att.gap, f64::INFINITY),
    }
}

/// `sum_{j != top} s_j (g_j - g_top)` in token order: f - g_top without cancellation.
fn centred_sum<A: Arith>(ar: &A, s: &[A::Real], g: &[A::Real], top: usize) -> A::Real {
    let mut acc = ar.zero();
    let mut t = ar.zero();
    for (j, (sj, gj)) in s.iter().zip(g).enumerate() {
        if j != top {
            ar.diff(&mut t, gj, &g[top]);
            ar.fma(&mut acc, sj, &t);
        }
    }
    acc
}

/// Output f = sum_t s_t g_t.
///
/// `Naive`: the plain sum in token order. `Stable`: g_top + sum_{j != top} s_j (g_j -
/// g_top). Its absolute error is a few ulps of max_t |g_t| (not of f: when f is much
/// smaller than the g_t, the relative error can be larger; proofs-notes/gradient.md).
pub fn output<A: Arith>(
    ar: &A,
    s: &[A::Real],
    g: &[A::Real],
    top: usize,
    form: Formulation,
    f: &mut A::Real,
) {
    match form {
        Formulation::Naive => {
            ar.set_f64(f, 0.0);
            for (st, gt) in s.iter().zip(g) {
                ar.fma(f, st, gt);
            }
        }
        Formulation::Stable => {
            let acc = centred_sum(ar, s, g, top);
            ar.set(f, &g[top]);
            ar.add(f, &acc);
        }
    }
}

/// **The softmax gradient** in token space, scaled: `c_t = coef * s_t (g_t - f)` =
/// coef * df/dz_t, so that coef * df/dq = X^T c.
///
/// `Stable` only: for t != top, g_t - f is rounded directly (it is of order one); for
/// the top token, g_top - f is the negated centred sum, so no coefficient cancels
/// however saturated the attention is. (`Naive` never forms c: see [`grad_q_naive`].)
pub fn grad_scores<A: Arith>(
    ar: &A,
    s: &[A::Real],
    g: &[A::Real],
    top: usize,
    f: &A::Real,
    coef: &A::Real,
    c: &mut [A::Real],
) {
    let mut top_gap = centred_sum(ar, s, g, top);
    ar.neg(&mut top_gap);
    for (t, (ct, (st, gt))) in c.iter_mut().zip(s.iter().zip(g)).enumerate() {
        if t == top {
            ar.set(ct, &top_gap);
        } else {
            ar.diff(ct, gt, f);
        }
        ar.mul(ct, st);
        ar.mul(ct, coef);
    }
}

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
