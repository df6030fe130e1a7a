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
