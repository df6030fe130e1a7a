//! Matrix-vector kernels over any [`Arith`], with fixed reduction orders.
//!
//! Matrices are row-major slices. Work is split over threads (rayon) only along
//! independent outputs: rows for [`matvec`] (each row one [`Arith::dot`]), column blocks
//! for [`matvec_t`] (each output a sequential fma chain over the rows, in row order).
//! So every result has the same bits for every thread count and every split.

use rayon::prelude::*;

use crate::arith::{Arith, Kind, Prepared};

/// Below this many (f64-equivalent) operations, kernels stay on the calling thread.
const PAR_MIN_OPS: usize = 1 << 16;

/// Rough cost of one operation relative to an f64 fma (for the parallel threshold only).
fn op_cost<A: Arith>(ar: &A) -> usize {
    match ar.kind() {
        Kind::F64 | Kind::F32 => 1,
        Kind::Predictor | Kind::Mpfr => 64,
        Kind::Ball => 128,
    }
}

/// True when `ops` operations in `ar` are worth spreading over threads.
pub fn worth_parallel<A: Arith>(ar: &A, ops: usize) -> bool {
    ops.saturating_mul(op_cost(ar)) >= PAR_MIN_OPS && rayon::current_num_threads() > 1
}

/// Call `f(i, row_i)` for every row of width `width` of `out`; rows are independent,
/// so they may run on several threads (when `ops_per_row` makes it worthwhile).
pub fn for_each_row<A: Arith, T: Send, F>(
    ar: &A,
    out: &mut [T],
    width: usize,
    ops_per_row: usize,
    f: F,
) where
    F: Fn(usize, &mut [T]) + Sync + Send,
{
    if worth_parallel(ar, out.len() / width.max(1) * ops_per_row) {
        out.par_chunks_mut(width)
            .enumerate()
            .for_each(|(i, r)| f(i, r));
    } else {
        out.chunks_mut(width).enumerate().for_each(|(i, r)| f(i, r));
    }
}

/// `out_i = dot(m_i, v)` for the rows of `m` (`out.len()` rows of `v.len()` columns),
/// in row blocks ([`Arith::matvec`]) spread over threads when worthwhile.
pub fn matvec<A: Arith>(ar: &A, m: &[A::Real], v: &[A::Real], out: &mut [A::Real]) {
    let cols = v.len();
    let rows = out.len();
    if worth_parallel(ar, rows * cols) {
        let block = rows.div_ceil(4 * rayon::current_num_threads()).max(2);
        out.par_chunks_mut(block).enumerate().for_each(|(b, o)| {
            let i0 = b * block;
            ar.matvec(&m[i0 * cols..(i0 + o.len()) * cols], v, o)
        });
    } else {
        ar.matvec(m, v, out);
    }
}

/// `out_i = m_(start + i) . v` for the rows `start..start + out.len()` of a prepared
/// matrix ([`Arith::matvec_prepared`]): a fixed-point layout is the arithmetic's own
/// kernel (which spreads its rows over threads); otherwise [`matvec`] on those rows.
pub fn matvec_prepared<A: Arith>(
    ar: &A,
    m: &Prepared<A::Real>,
    start: usize,
    v: &[A::Real],
    out: &mut [A::Real],
) {
    if m.fixed().is_some() {
        ar.matvec_prepared(m, start, v, out);
    } else {
        let cols = m.cols();
        matvec(
            ar,
            &m.values()[start * cols..(start + out.len()) * cols],
            v,
            out,
        );
    }
}

/// Column blocks of `out` processed by [`matvec_t`]-style kernels: `f(k0, block)`.
fn for_each_column_block<A: Arith, F>(ar: &A, out: &mut [A::Real], rows: usize, f: F)
where
    F: Fn(usize, &mut [A::Real]) + Sync + Send,
{
    let cols = out.len();
    if worth_parallel(ar, rows * cols) {
        let threads = rayon::current_num_threads();
        let block = cols.div_ceil(4 * threads).max(64);
        out.par_chunks_mut(block)
            .enumerate()
            .for_each(|(b, o)| f(b * block, o));
    } else {
        f(0, out);
    }
}

/// `out = m^T v`: out_k = sum_i v_i m_ik, an fma chain over i = 0, 1, ... (from +0).
pub fn matvec_t<A: Arith>(ar: &A, m: &[A::Real], v: &[A::Real], out: &mut [A::Real]) {
    let cols = out.len();
    for_each_column_block(ar, out, v.len(), |k0, o| {
        let zero = ar.zero();
        o.iter_mut().for_each(|x| ar.set(x, &zero));
        for (i, vi) in v.iter().enumerate() {
            let row = &m[i * cols + k0..i * cols + k0 + o.len()];
            ar.axpy(vi, row, o);
        }
    });
}

/// `out = X^T v` for f64 data rows `x` (`v.len()` rows of `out.len()` columns), in the
/// order of [`matvec_t`].
pub fn matvec_t_f64<A: Arith>(ar: &A, x: &[f64], v: &[A::Real], out: &mut [A::Real]) {
    let cols = out.len();
    for_each_column_block(ar, out, v.len(), |k0, o| {
        ar.gemv_t_f64(&x[k0..], cols, v, o);
    });
}

/// Symmetric Gram matrix `G_ij = dot(b_i, b_j)` of the `rows` rows of `b` (each of
/// width `cols`): the upper triangle is computed, the lower one mirrored.
pub fn gram<A: Arith>(ar: &A, b: &[A::Real], rows: usize, cols: usize) -> Vec<A::Real> {
    let mut g = ar.zeros(rows * rows);
    for_each_row(ar, &mut g, rows, rows * cols / 2, |i, gi| {
        for j in i..rows {
            ar.dot(
                &b[i * cols..(i + 1) * cols],
                &b[j * cols..(j + 1) * cols],
                &mut gi[j],
            );
        }
    });
    mirror_upper(ar, &mut g, rows);
    g
}

/// The Gram matrix `G_ij = <x_i, x_j>` of `rows` f64 data rows of width `cols`: exact
/// and rounded once where the arithmetic takes exact inputs ([`Arith::exact_inputs`]),
/// else [`gram`] of the rows converted by [`Arith::of`] (today's bits).
pub fn data_gram<A: Arith>(ar: &A, x: &[f64], rows: usize, cols: usize) -> Vec<A::Real> {
    if ar.exact_inputs() {
        let g = crate::arith::exact::gram_f64(x, rows, cols);
        g.iter().map(|v| ar.of_exact(v)).collect()
    } else {
        gram(ar, &ar.of_slice(&x[..rows * cols]), rows, cols)
    }
}

/// The cross Gram matrix `C_ij = <a_i, b_j>` of f64 data rows (`a.len() / cols` rows of
/// `a`, `b.len() / cols` rows of `b`, row-major): exact and rounded once where the
/// arithmetic takes exact inputs, else each entry one [`Arith::dot`] of the converted
/// rows.
pub fn cross_gram<A: Arith>(ar: &A, a: &[f64], b: &[f64], cols: usize) -> Vec<A::Real> {
    if ar.exact_inputs() {
        let c = crate::arith::exact::cross_gram_f64(a, b, cols);
        return c.iter().map(|v| ar.of_exact(v)).collect();
    }
    let (ra, rb) = (ar.of_slice(a), ar.of_slice(b));
    let nb = b.len() / cols.max(1);
    let mut c = ar.zeros(a.len() / cols.max(1) * nb);
    for_each_row(ar, &mut c, nb, nb * cols, |i, ci| {
        for (j, cij) in ci.iter_mut().enumerate() {
            ar.dot(
                &ra[i * cols..(i + 1) * cols],
                &rb[j * cols..(j + 1) * cols],
                cij,
            );
        }
    });
    c
}

/// Copy the upper triangle of a square matrix into its lower triangle.
pub fn mirror_upper<A: Arith>(ar: &A, g: &mut [A::Real], rows: usize) {
    for i in 0..rows {
        for j in 0..i {
            let (lo, hi) = g.split_at_mut(i * rows);
            ar.set(&mut hi[j], &lo[j * rows + i]);
        }
    }
}

/// sqrt(quad(v)) for a quadratic form `quad` (homogeneous of degree 2, >= 0: |v|^2, or
/// v^T G v with G a Gram matrix), evaluated on v scaled by the power of two 2^k that
/// brings its largest entry (as f64) into [1, 2), and the root scaled back by 2^-k.
///
/// Scaling by a power of two is exact wherever the result is in range, so the squares
/// neither underflow nor overflow where v's entries are representable: without it, an
/// f64 gradient of norm below 2^-511 (f32: 2^-63) has a squared norm of 0, and
/// normalised GD with a tiny eps > 0 then takes a step of alpha G / eps, far longer
/// than alpha. In an arithmetic with MPFR's exponent range the scaling changes no bit
/// (every operation commutes with it); where the largest entry is 0 or not finite as
/// an f64 (the twin's values beyond f64's range), k = 0.
pub fn scaled_norm<A: Arith>(
    ar: &A,
    v: &[A::Real],
    quad: impl FnOnce(&[A::Real]) -> A::Real,
) -> A::Real {
    let m = v
        .iter()
        .map(|x| ar.to_f64(x).abs())
        .fold(0.0f64, |a, b| if b > a { b } else { a });
    let k = match m {
        m if m == 0.0 || !m.is_finite() => 0,
        m => -exponent(m),
    };
    let mut norm = if k == 0 {
        quad(v)
    } else {
        let mut w = v.to_vec();
        for x in &mut w {
            scale_pow2(ar, x, k);
        }
        quad(&w)
    };
    ar.sqrt(&mut norm);
    scale_pow2(ar, &mut norm, -k);
    norm
}

/// The Euclidean norm |v|, by [`scaled_norm`] of the dot product.
pub fn euclidean_norm<A: Arith>(ar: &A, v: &[A::Real]) -> A::Real {
    scaled_norm(ar, v, |w| {
        let mut s = ar.zero();
        ar.dot(w, w, &mut s);
        s
    })
}

/// floor(log2 m) of a finite m > 0 (subnormals included), exactly.
fn exponent(m: f64) -> i32 {
    let bits = m.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i32;
    match e {
        0 => -1074 + (63 - (bits & ((1 << 52) - 1)).leading_zeros() as i32),
        e => e - 1023,
    }
}

/// x <- x 2^k, by factors 2^j with |j| <= 126: powers of two that are normal numbers in
/// binary32 too (F32 rounds the factor to binary32), so each product is exact wherever
/// it stays in range.
fn scale_pow2<A: Arith>(ar: &A, x: &mut A::Real, k: i32) {
    let mut k = k;
    while k != 0 {
        let step = k.clamp(-126, 126);
        ar.mul_f64(x, f64::from_bits(((step + 1023) as u64) << 52));
        k -= step;
    }
}

/// The orthogonal factor Q (m x k, row-major) of the QR factorisation of the row-major
/// f64 matrix `a` (m x k, m >= k) by Householder reflections, its columns multiplied by
/// sign(R_jj) (PyTorch's `orthogonal_`: Q of the factorisation whose R has a positive
/// diagonal; a zero R_jj zeroes its column, as torch's `sign(0) = 0` does).
///
/// Reflection j maps the column a_j[j..] to -sign(a_jj) |a_j[j..]| e_1 (v = x -
/// alpha e_1, so nothing cancels in v_0); Q = H_0 H_1 ... H_{k-1} applied to the first
/// k columns of the identity. Every sum is sequential in index order (one thread): the
/// same bits on every machine. Backward stable (Higham, Accuracy and Stability of
/// Numerical Algorithms, Theorem 19.4): |Q^T Q - I| is O(m k u), u = 2^-53.
pub fn householder_q(a: &[f64], m: usize, k: usize) -> Vec<f64> {
    debug_assert!(m >= k && a.len() == m * k);
    let mut r = a.to_vec();
    let mut refl: Vec<(Vec<f64>, f64)> = Vec::with_capacity(k);
    let mut sign = vec![0.0; k];
    for j in 0..k {
        let mut v: Vec<f64> = (j..m).map(|i| r[i * k + j]).collect();
        let norm = v.iter().fold(0.0, |s, x| x.mul_add(*x, s)).sqrt();
        if norm == 0.0 {
            refl.push((v, 0.0));
            continue;
        }
        let alpha = -norm.copysign(v[0]);
        v[0] -= alpha;
        let beta = 2.0 / v.iter().fold(0.0, |s, x| x.mul_add(*x, s));
        apply_reflection(&mut r[j * k..], k, j, &v, beta);
        // R_jj = alpha after the reflection
        sign[j] = alpha.signum();
        refl.push((v, beta));
    }
    let mut q = vec![0.0; m * k];
    for j in 0..k {
        q[j * k + j] = 1.0;
    }
    for (j, (v, beta)) in refl.iter().enumerate().rev() {
        apply_reflection(&mut q[j * k..], k, 0, v, *beta);
    }
    for row in q.chunks_mut(k) {
        for (x, s) in row.iter_mut().zip(&sign) {
            *x *= s;
        }
    }
    q
}

/// `b <- (I - beta v v^T) b` on the columns `c0..` of the row-major matrix `b` (rows of
/// width `k`, as many rows as `v` has entries): per column, w = beta <v, b_c> summed in
/// row order, then b_c -= w v.
fn apply_reflection(b: &mut [f64], k: usize, c0: usize, v: &[f64], beta: f64) {
    for c in c0..k {
        let dot = v
            .iter()
            .enumerate()
            .fold(0.0, |s, (i, vi)| vi.mul_add(b[i * k + c], s));
        let w = beta * dot;
        for (i, vi) in v.iter().enumerate() {
            b[i * k + c] = (-w).mul_add(*vi, b[i * k + c]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arith::{F32, F64, Mpfr};

    /// The scaled norm of vectors whose squares underflow or overflow in f64 (and f32):
    /// within 4 ulps of the exact value (three roundings: the dot product of n = 3
    /// terms, the root, none in the power-of-two scalings), where the plain |v|^2
    /// would be 0 or infinite; the twin's value agrees.
    #[test]
    fn scaled_norm_survives_under_and_overflow() {
        let dot = |v: &[f64]| {
            let mut s = 0.0;
            F64.dot(v, v, &mut s);
            s
        };
        for scale in [1e-320, 5e-300, 1e-200, 1.0, 1e200, 1e300] {
            let v = [3.0 * scale, -4.0 * scale, 0.0];
            let n = scaled_norm(&F64, &v, dot);
            let want = 5.0 * scale;
            let ulps = ((n - want) / want).abs() / f64::EPSILON;
            // subnormal inputs carry fewer digits: 3e-320 and 4e-320 are exact only to
            // 2^-1074
            let tol = if scale < 1e-300 {
                1e-3 / f64::EPSILON
            } else {
                4.0
            };
            assert!(ulps <= tol, "scale {scale:e}: {n:e} vs {want:e}");
        }
        // f32: squares of 3e-30 underflow; 3e-44 and 4e-44 are subnormal (scaled by
        // 2^149 > binary32's largest power of two, in steps)
        let n = scaled_norm(&F32, &[3.0 * 2f32.powi(-147), 4.0 * 2f32.powi(-147)], |v| {
            let mut s = 0.0f32;
            F32.dot(v, v, &mut s);
            s
        });
        assert_eq!(n, 5.0 * 2f32.powi(-147));
        let v32 = [3e-30f32, 4e-30];
        let n = scaled_norm(&F32, &v32, |v| {
            let mut s = 0.0f32;
            F32.dot(v, v, &mut s);
            s
        });
        assert!((n / 5e-30 - 1.0).abs() < 4.0 * f32::EPSILON, "{n:e}");
        let ar = Mpfr::truth(128).unwrap();
        let v: Vec<_> = [3e-200, 4e-200].iter().map(|x| ar.of(*x)).collect();
        let n = scaled_norm(&ar, &v, |v| {
            let mut s = ar.zero();
            ar.dot(v, v, &mut s);
            s
        });
        assert!((ar.to_f64(&n) / 5e-200 - 1.0).abs() < 4.0 * f64::EPSILON);
        assert_eq!(exponent(f64::MIN_POSITIVE), -1022);
        assert_eq!(exponent(5e-324), -1074);
        assert_eq!(exponent(1.5), 0);
        assert_eq!(exponent(f64::MAX), 1023);
    }

    /// Householder's Q is orthonormal and Q^T A is upper triangular with a positive
    /// diagonal (the factor PyTorch's `orthogonal_` returns). Bound (Higham, Theorem
    /// 19.4): |Q^T Q - I| and the entries of Q^T A below the diagonal (relative to |A|)
    /// are at most c m k u with a small constant c; asserted with c = 8, u = 2^-53. A
    /// missed sign flip or reflection is wrong by O(1).
    #[test]
    fn householder_q_is_orthonormal_and_triangularises() {
        let mut r = crate::rng::stream(3, crate::rng::Stream::Init);
        for (m, k) in [(1, 1), (2, 2), (7, 3), (40, 40), (64, 17)] {
            let mut a = vec![0.0; m * k];
            crate::rng::fill_normal(&mut r, 1.0, &mut a);
            let q = householder_q(&a, m, k);
            let tol = 8.0 * (m * k) as f64 * f64::EPSILON / 2.0;
            let amax = a.iter().fold(0.0f64, |s, x| s.max(x.abs()));
            for i in 0..k {
                for j in 0..k {
                    let qq: f64 = (0..m).map(|l| q[l * k + i] * q[l * k + j]).sum();
                    let want = if i == j { 1.0 } else { 0.0 };
                    assert!((qq - want).abs() <= tol, "{m}x{k}: (Q^T Q)_{i}{j} = {qq:e}");
                    let qa: f64 = (0..m).map(|l| q[l * k + i] * a[l * k + j]).sum();
                    if i > j {
                        assert!(
                            qa.abs() <= tol * amax * m as f64,
                            "{m}x{k}: R_{i}{j} = {qa:e}"
                        );
                    } else if i == j {
                        assert!(qa > 0.0, "{m}x{k}: R_{i}{i} = {qa:e} not positive");
                    }
                }
            }
        }
        // a known case: A = [[3, 1], [4, 2]]: q_0 = (3, 4) / 5, q_1 = (-4, 3) / 5 (R_11 =
        // 2/5 > 0)
        let q = householder_q(&[3.0, 1.0, 4.0, 2.0], 2, 2);
        for (x, want) in q.iter().zip([0.6, -0.8, 0.8, 0.6]) {
            assert!((x - want).abs() <= 4.0 * f64::EPSILON, "{q:?}");
        }
    }
}
