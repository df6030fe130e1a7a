//! The f64 model: scores, softmax attention, output, loss and the softmax gradient.
//!
//! For one sequence X (T x d), q = W^T p and the fixed head values g_t = <nu, x_t>:
//!
//! ```text
//! scores    z_t = <x_t, q>
//! attention s_t = exp(z_t - z_top) / sum_u exp(z_u - z_top)
//! output    f   = sum_t s_t g_t
//! grad_q    df/dq = sum_t s_t (g_t - f) x_t
//! ```
//!
//! Two formulations of the last three lines ([`Formulation`], SPEC section 6):
//! `Naive` as frameworks compute them, `Stable` centred on the top token so that
//! nothing cancels when the attention saturates. Derivations: proofs-notes/gradient.md.
//! The high-precision twin (`crate::twin::model`) mirrors this file function by function.

use ndarray::ArrayView2;

pub use crate::config::Formulation;
use crate::linalg;

/// Summary of one softmax evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attention {
    /// Index of the largest score (lowest index on ties): the selected token.
    pub top: usize,
    /// 1 - s_top. `Stable`: sum_{j != top} e_j / sum_u e_u (no cancellation);
    /// `Naive`: the rounded difference 1 - s_top.
    pub rest: f64,
    /// Score gap z_top - max_{j != top} z_j (infinite for T = 1).
    pub gap: f64,
}

/// Scores z_t = <x_t, q> for every token (rows of `x`), in [`linalg::dot`] order.
pub fn scores(x: ArrayView2<'_, f64>, q: &[f64], z: &mut [f64]) {
    for (zt, row) in z.iter_mut().zip(x.rows()) {
        *zt = linalg::dot(row.as_slice().expect("contiguous rows"), q);
    }
}

/// Index of the largest entry (lowest index on ties).
pub fn argmax(z: &[f64]) -> usize {
    let mut top = 0;
    for (t, &v) in z.iter().enumerate() {
        if v > z[top] {
            top = t;
        }
    }
    top
}

/// Softmax of `z` into `s`, with the max subtracted first.
///
/// e_t = exp(z_t - z_top) (so e_top = 1), S = e_top + sum_{j != top} e_j summed in
/// token order, s_t = e_t / S. The formulations differ only in how `rest` = 1 - s_top
/// is formed.
pub fn softmax(z: &[f64], s: &mut [f64], form: Formulation) -> Attention {
    let top = argmax(z);
    let zmax = z[top];
    let mut others = 0.0;
    let mut second = f64::NEG_INFINITY;
    for (t, (&zt, st)) in z.iter().zip(s.iter_mut()).enumerate() {
        if t == top {
            *st = 1.0;
        } else {
            *st = core_math::exp(zt - zmax);
            others += *st;
            second = second.max(zt);
        }
    }
    let total = 1.0 + others;
    for st in s.iter_mut() {
        *st /= total;
    }
    let rest = match form {
        Formulation::Naive => 1.0 - s[top],
        Formulation::Stable => others / total,
    };
    Attention {
        top,
        rest,
        gap: zmax - second,
    }
}

/// Output f = sum_t s_t g_t.
///
/// `Naive`: the plain sum in token order. `Stable`: g_top + sum_{j != top} s_j (g_j - g_top),
/// accurate to a few ulps of f however small 1 - s_top is.
pub fn output(s: &[f64], g: &[f64], top: usize, form: Formulation) -> f64 {
    match form {
        Formulation::Naive => s.iter().zip(g).fold(0.0, |acc, (st, gt)| acc + st * gt),
        Formulation::Stable => {
            let gt = g[top];
            let mut acc = 0.0;
            for (j, (sj, gj)) in s.iter().zip(g).enumerate() {
                if j != top {
                    acc += sj * (gj - gt);
                }
            }
            gt + acc
        }
    }
}

/// `out = coef * df/dq` for one sequence: **the softmax gradient**.
///
/// `Naive`:  df/dq = sum_t (s_t g_t) x_t - f sum_t s_t x_t (backprop through softmax);
/// cancels catastrophically once 1 - s_top < ~1e-8.
///
/// `Stable`: df/dq = sum_{j != top} s_j (g_j - g_top) (x_j - xbar), with
/// xbar = x_top + sum_{j != top} s_j (x_j - x_top) (= sum_t s_t x_t).
///
/// `scratch` must have length d (it holds xbar, or sum_t s_t x_t).
#[allow(clippy::too_many_arguments)]
pub fn grad_q(
    x: ArrayView2<'_, f64>,
    s: &[f64],
    g: &[f64],
    att: &Attention,
    f: f64,
    coef: f64,
    form: Formulation,
    scratch: &mut [f64],
    out: &mut [f64],
) {
    let row = |t: usize| x.row(t).to_slice().expect("contiguous rows");
    match form {
        Formulation::Naive => {
            out.fill(0.0);
            scratch.fill(0.0);
            for t in 0..s.len() {
                linalg::axpy(s[t] * g[t], row(t), out);
                linalg::axpy(s[t], row(t), scratch);
            }
            for (o, b) in out.iter_mut().zip(scratch.iter()) {
                *o = coef * (*o - f * b);
            }
        }
        Formulation::Stable => {
            let top = att.top;
            let xt = row(top);
            scratch.copy_from_slice(xt);
            for j in (0..s.len()).filter(|&j| j != top) {
                let sj = s[j];
                for ((b, xj), xk) in scratch.iter_mut().zip(row(j)).zip(xt) {
                    *b += sj * (xj - xk);
                }
            }
            out.fill(0.0);
            for j in (0..s.len()).filter(|&j| j != top) {
                let w = coef * (s[j] * (g[j] - g[top]));
                for ((o, xj), b) in out.iter_mut().zip(row(j)).zip(scratch.iter()) {
                    *o += w * (xj - b);
                }
            }
        }
    }
}

/// Logistic loss l(u) = log(1 + exp(-u)), without overflow.
pub fn loss(u: f64) -> f64 {
    if u >= 0.0 {
        core_math::log1p(core_math::exp(-u))
    } else {
        -u + core_math::log1p(core_math::exp(u))
    }
}

/// Derivative l'(u) = -1 / (1 + exp(u)), without overflow.
pub fn loss_derivative(u: f64) -> f64 {
    if u >= 0.0 {
        let e = core_math::exp(-u);
        -e / (1.0 + e)
    } else {
        -1.0 / (1.0 + core_math::exp(u))
    }
}

/// Predicted label sign(f) (0 counts as wrong for both classes).
pub fn predict(f: f64) -> i8 {
    if f > 0.0 {
        1
    } else if f < 0.0 {
        -1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn formulations_agree_away_from_saturation() {
        let x = array![[1.0, 0.5, -0.2], [0.3, -1.0, 0.4], [-0.7, 0.2, 0.9]];
        let q = [0.4, -0.3, 0.8];
        let g = [0.2, -0.1, 0.05];
        let mut z = [0.0; 3];
        scores(x.view(), &q, &mut z);
        let (mut s1, mut s2) = ([0.0; 3], [0.0; 3]);
        let a1 = softmax(&z, &mut s1, Formulation::Naive);
        let a2 = softmax(&z, &mut s2, Formulation::Stable);
        assert_eq!(s1, s2);
        assert!((a1.rest - a2.rest).abs() < 1e-15);
        let f1 = output(&s1, &g, a1.top, Formulation::Naive);
        let f2 = output(&s2, &g, a2.top, Formulation::Stable);
        assert!((f1 - f2).abs() < 1e-15);
        let (mut o1, mut o2, mut b) = ([0.0; 3], [0.0; 3], [0.0; 3]);
        grad_q(
            x.view(),
            &s1,
            &g,
            &a1,
            f1,
            1.0,
            Formulation::Naive,
            &mut b,
            &mut o1,
        );
        grad_q(
            x.view(),
            &s2,
            &g,
            &a2,
            f2,
            1.0,
            Formulation::Stable,
            &mut b,
            &mut o2,
        );
        // the definition sum_t s_t (g_t - f) x_t
        for k in 0..3 {
            let want: f64 = (0..3).map(|t| s1[t] * (g[t] - f1) * x[[t, k]]).sum();
            assert!((o1[k] - want).abs() < 1e-15, "{k}");
            assert!((o2[k] - want).abs() < 1e-15, "{k}");
        }
    }

    #[test]
    fn loss_is_stable_at_both_ends() {
        assert!((loss(0.0) - std::f64::consts::LN_2).abs() < 1e-16);
        assert_eq!(loss(-1000.0), 1000.0);
        assert!(loss(1000.0) == 0.0);
        assert_eq!(loss_derivative(-1000.0), -1.0);
        assert!((loss_derivative(0.0) + 0.5).abs() < 1e-16);
        let h = 1e-6;
        for u in [-3.0, -0.5, 0.7, 4.0] {
            let fd = (loss(u + h) - loss(u - h)) / (2.0 * h);
            assert!((fd - loss_derivative(u)).abs() < 1e-9);
        }
    }
}
