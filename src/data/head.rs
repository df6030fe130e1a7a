//! The fixed linear heads, computed in any arithmetic from the class signals: the binary
//! head nu in R^d (SPEC section 1) and the multi-class head nu in R^{d x K} (SPEC
//! section 14), and their values g_t = <nu, x_t> on every token.

use ndarray::{Array1, ArrayView3};

use crate::arith::Arith;

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

/// The multi-class head nu_c = (mu_c - mean_c' mu_c') / (||mu_0 - mu_1|| ||mu||), c in
/// [0, K) (SPEC section 14: ||mu_0 - mu_1|| = sqrt(2) ||mu|| for orthogonal signals of
/// equal norm; written with the same norm as the binary [`head`], so that at K = 2
/// nu_0 = -nu_1 = nu / 2 in exact arithmetic), in `ar`; `nu[c * d + k]`, class-major.
pub fn multiclass_head<A: Arith>(ar: &A, signals: &[Array1<f64>], mu_norm: f64) -> Vec<A::Real> {
    let (k, d) = (signals.len(), signals[0].len());
    let mut mean = ar.zeros(d);
    for mu in signals {
        for (m, v) in mean.iter_mut().zip(mu) {
            ar.add_f64(m, *v);
        }
    }
    for m in mean.iter_mut() {
        ar.div_f64(m, k as f64);
    }
    let mut diff = ar.zeros(d);
    for ((v, a), b) in diff.iter_mut().zip(&signals[0]).zip(&signals[1]) {
        ar.diff_f64(v, *a, *b);
    }
    let mut scale = ar.zero();
    ar.dot(&diff, &diff, &mut scale);
    ar.sqrt(&mut scale);
    ar.mul_f64(&mut scale, mu_norm);
    let mut nu = ar.zeros(k * d);
    for (mu, row) in signals.iter().zip(nu.chunks_mut(d)) {
        for ((v, x), m) in row.iter_mut().zip(mu).zip(&mean) {
            ar.set_f64(v, *x);
            ar.sub(v, m);
            ar.div(v, &scale);
        }
    }
    nu
}

/// Head values G_{t,c} = <nu_c, x_t> of every token of `x` (n, T, d) and class of the
/// class-major head `nu` (K x d), row-major (n, T, K).
pub fn multiclass_head_values<A: Arith>(
    ar: &A,
    x: ArrayView3<'_, f64>,
    nu: &[A::Real],
) -> Vec<A::Real> {
    let (n, t, d) = x.dim();
    let k = nu.len() / d;
    let rows = x.as_slice().expect("standard layout");
    let mut g = ar.zeros(n * t * k);
    crate::linalg::for_each_row(ar, &mut g, k, k * d, |r, gr| {
        for (c, gc) in gr.iter_mut().enumerate() {
            ar.dot_f64(&rows[r * d..(r + 1) * d], &nu[c * d..(c + 1) * d], gc);
        }
    });
    g
}
