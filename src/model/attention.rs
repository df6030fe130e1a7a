//! Token selection by softmax attention, shared by every model: scores, softmax with
//! the max subtracted, the selection status, the attention-weighted output and **the
//! softmax gradient** in token space.
//!
//! For one sequence X (T x d), q = W^T p and per-token values g_t:
//!
//! ```text
//! scores        z_t = <x_t, q>
//! attention     s_t = exp(z_t - z_top) / sum_u exp(z_u - z_top)
//! output        f   = sum_t s_t g_t
//! grad_scores   df/dz_t = s_t (g_t - f)              (the softmax gradient)
//! ```
//!
//! Two formulations ([`Formulation`], SPEC section 6). `Naive`, as frameworks compute
//! them: 1 - s_top by subtraction, f = sum s g. `Stable`, centred on the top token so that
//! nothing cancels when attention saturates: 1 - s_top = sum_{j != top} s_j, f = g_top +
//! sum_{j != top} s_j (g_j - g_top), and the token-space gradient with g_top - f formed
//! from that same small sum. Derivations and error bounds: proofs-notes/gradient.md.

use std::cmp::Ordering;

use ndarray::ArrayView2;
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
/// however saturated the attention is. (`Naive` never forms c: see [`super::grad_q_naive`].)
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
