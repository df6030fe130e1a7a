//! Hardware binary64: the fast arithmetic.
//!
//! Every operation is the IEEE operation; exp and log1p come from CORE-MATH (correctly
//! rounded on every platform). The kernels keep the trait's fixed accumulator pattern;
//! on x86-64 with AVX2 and FMA (detected at run time) a compiled-for-AVX2 copy of the
//! same code runs, which changes the speed only: `f64::mul_add` is a correctly rounded
//! fma on every path (a hardware instruction, or the C library's exact `fma`).

use std::cmp::Ordering;

use super::{Arith, Kind, LANES};

/// Plain binary64 arithmetic (a zero-sized context).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct F64;

/// The fixed-pattern dot product, written once and compiled twice (portable and AVX2).
#[inline(always)]
fn dot_kernel(x: &[f64], y: &[f64]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let (xc, yc) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (a, b) in xc.zip(yc) {
        for j in 0..LANES {
            acc[j] = a[j].mul_add(b[j], acc[j]);
        }
    }
    for (j, (a, b)) in xr.iter().zip(yr).enumerate() {
        acc[j] = a.mul_add(*b, acc[j]);
    }
    combine(acc)
}

/// The balanced-tree combination of the trait's `combine` (for f64 and f32).
#[inline(always)]
pub(super) fn combine<T: Copy + std::ops::Add<Output = T>>(mut acc: [T; LANES]) -> T {
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for j in 0..width {
            acc[j] = acc[2 * j] + acc[2 * j + 1];
        }
    }
    acc[0]
}

/// `out_i = dot(m_i, v)`, row by row (portable).
#[inline(always)]
fn matvec_kernel(m: &[f64], v: &[f64], out: &mut [f64]) {
    let cols = v.len();
    for (i, o) in out.iter_mut().enumerate() {
        *o = dot_kernel(&m[i * cols..(i + 1) * cols], v);
    }
}

#[inline(always)]
fn axpy_kernel(alpha: f64, x: &[f64], y: &mut [f64]) {
    for (yk, xk) in y.iter_mut().zip(x) {
        *yk = alpha.mul_add(*xk, *yk);
    }
}

/// X^T v on a column block, four rows per pass over the block: each output's fma chain
/// over the rows still runs in row order from +0, so the bits are those of the trait's
/// default (one axpy per row).
#[inline(always)]
fn gemv_t_kernel(x: &[f64], stride: usize, v: &[f64], out: &mut [f64]) {
    let n = out.len();
    out.fill(0.0);
    let row = |i: usize| &x[i * stride..i * stride + n];
    let mut i = 0;
    while i + 4 <= v.len() {
        let (r0, r1, r2, r3) = (row(i), row(i + 1), row(i + 2), row(i + 3));
        let (v0, v1, v2, v3) = (v[i], v[i + 1], v[i + 2], v[i + 3]);
        for (j, o) in out.iter_mut().enumerate() {
            let mut a = v0.mul_add(r0[j], *o);
            a = v1.mul_add(r1[j], a);
            a = v2.mul_add(r2[j], a);
            *o = v3.mul_add(r3[j], a);
        }
        i += 4;
    }
    for (k, vk) in v.iter().enumerate().skip(i) {
        axpy_kernel(*vk, row(k), out);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{LANES, combine};

    /// Accumulators of one row: lane l lives in register l / 4, position l % 4.
    type Acc = [__m256d; LANES / 4];

    #[inline(always)]
    fn lanes(acc: Acc) -> [f64; LANES] {
        // SAFETY: [__m256d; 4] and [f64; 16] have the same size and layout.
        unsafe { std::mem::transmute::<Acc, [f64; LANES]>(acc) }
    }

    /// Two rows' dot products with one vector, interleaved for twice the independent fma
    /// chains; each row keeps the lane pattern (and bits) of the portable kernel.
    #[target_feature(enable = "avx2,fma")]
    fn dot2(x0: &[f64], x1: &[f64], y: &[f64]) -> (f64, f64) {
        let n = y.len();
        assert!(x0.len() >= n && x1.len() >= n);
        let full = n / LANES * LANES;
        let zero = _mm256_setzero_pd();
        let (mut a0, mut a1): (Acc, Acc) = ([zero; 4], [zero; 4]);
        let mut k = 0;
        while k < full {
            for r in 0..LANES / 4 {
                // SAFETY: k + 4 r + 4 <= full <= n <= every slice's length (asserted).
                unsafe {
                    let v = _mm256_loadu_pd(y.as_ptr().add(k + 4 * r));
                    let p = _mm256_loadu_pd(x0.as_ptr().add(k + 4 * r));
                    let q = _mm256_loadu_pd(x1.as_ptr().add(k + 4 * r));
                    a0[r] = _mm256_fmadd_pd(p, v, a0[r]);
                    a1[r] = _mm256_fmadd_pd(q, v, a1[r]);
                }
            }
            k += LANES;
        }
        let (mut l0, mut l1) = (lanes(a0), lanes(a1));
        for (j, k) in (full..n).enumerate() {
            l0[j] = x0[k].mul_add(y[k], l0[j]);
            l1[j] = x1[k].mul_add(y[k], l1[j]);
        }
        (combine(l0), combine(l1))
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn matvec(m: &[f64], v: &[f64], out: &mut [f64]) {
        let cols = v.len();
        let rows = out.len();
        let mut pairs = out.chunks_exact_mut(2);
        for (p, o) in pairs.by_ref().enumerate() {
            let i = 2 * p;
            let (a, b) = dot2(
                &m[i * cols..(i + 1) * cols],
                &m[(i + 1) * cols..(i + 2) * cols],
                v,
            );
            o[0] = a;
            o[1] = b;
        }
        if let [last] = pairs.into_remainder() {
            let i = rows - 1;
            *last = super::dot_kernel(&m[i * cols..(i + 1) * cols], v);
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn dot(x: &[f64], y: &[f64]) -> f64 {
        super::dot_kernel(x, y)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn axpy(alpha: f64, x: &[f64], y: &mut [f64]) {
        super::axpy_kernel(alpha, x, y)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn gemv_t(x: &[f64], stride: usize, v: &[f64], out: &mut [f64]) {
        super::gemv_t_kernel(x, stride, v, out)
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2_fma() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// `sum_k x_k y_k` in the fixed [`LANES`] order (see [`super`]).
///
/// # Panics
/// If the slices differ in length (a programming error).
#[inline]
pub fn dot(x: &[f64], y: &[f64]) -> f64 {
    assert_eq!(x.len(), y.len(), "dot: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked above).
        return unsafe { avx2::dot(x, y) };
    }
    dot_kernel(x, y)
}

/// `y_k = fma(alpha, x_k, y_k)`.
#[inline]
pub fn axpy(alpha: f64, x: &[f64], y: &mut [f64]) {
    assert_eq!(x.len(), y.len(), "axpy: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked above).
        return unsafe { avx2::axpy(alpha, x, y) };
    }
    axpy_kernel(alpha, x, y)
}

/// `out_i = dot(m_i, v)` (see [`Arith::matvec`]).
#[inline]
pub fn matvec(m: &[f64], v: &[f64], out: &mut [f64]) {
    assert!(m.len() >= out.len() * v.len(), "matvec: m too short");
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked above).
        return unsafe { avx2::matvec(m, v, out) };
    }
    matvec_kernel(m, v, out)
}

/// X^T v on a column block (see [`Arith::gemv_t_f64`]).
#[inline]
pub fn gemv_t(x: &[f64], stride: usize, v: &[f64], out: &mut [f64]) {
    if let Some(last) = v.len().checked_sub(1) {
        assert!(x.len() >= last * stride + out.len(), "gemv_t: x too short");
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked above).
        return unsafe { avx2::gemv_t(x, stride, v, out) };
    }
    gemv_t_kernel(x, stride, v, out)
}

/// Euclidean norm `sqrt(dot(x, x))`.
#[inline]
pub fn norm(x: &[f64]) -> f64 {
    dot(x, x).sqrt()
}

impl Arith for F64 {
    type Real = f64;

    fn kind(&self) -> Kind {
        Kind::F64
    }
    fn prec(&self) -> u32 {
        53
    }
    hardware_scalar_ops!(
        f64,
        |v: f64| v,
        core_math::exp,
        core_math::log1p,
        core_math::erf,
        std::f64::consts::PI
    );
    /// CORE-MATH's `pow` (correctly rounded, subnormals included) while `t` is an f64
    /// exactly (t <= 2^53); beyond, MPFR's pow rounded into binary64's range (the
    /// predictor's: also correctly rounded).
    fn pow_u64(&self, x: &mut f64, t: u64) {
        *x = if t <= 1 << 53 {
            core_math::pow(*x, t as f64)
        } else {
            super::predictor::pow_in_format(*x, t, &super::predictor::BINARY64)
        };
    }
    fn to_exact_string(&self, x: &f64) -> String {
        format!("{:016x}", x.to_bits())
    }
    fn parse_exact(&self, s: &str) -> Option<f64> {
        u64::from_str_radix(s, 16).ok().map(f64::from_bits)
    }

    #[inline]
    fn dot(&self, x: &[f64], y: &[f64], out: &mut f64) {
        *out = dot(x, y);
    }
    #[inline]
    fn dot_f64(&self, x: &[f64], y: &[f64], out: &mut f64) {
        *out = dot(x, y);
    }
    #[inline]
    fn axpy(&self, alpha: &f64, x: &[f64], y: &mut [f64]) {
        axpy(*alpha, x, y);
    }
    #[inline]
    fn axpy_f64(&self, alpha: &f64, x: &[f64], y: &mut [f64]) {
        axpy(*alpha, x, y);
    }
    #[inline]
    fn matvec(&self, m: &[f64], v: &[f64], out: &mut [f64]) {
        matvec(m, v, out);
    }
    #[inline]
    fn gemv_t_f64(&self, x: &[f64], stride: usize, v: &[f64], out: &mut [f64]) {
        gemv_t(x, stride, v, out);
    }
    #[inline]
    fn norm_f64(&self, x: &[f64]) -> f64 {
        norm(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{self, Stream};

    /// The dispatched kernels (AVX2 + FMA where the CPU has them) give the bits of the
    /// portable build of the same code, on lengths around every multiple of LANES and on
    /// magnitudes spread over 2^-60..2^60 (so that the order of the sums matters). The
    /// predictor tests check the same kernels against MPFR's trait defaults.
    #[test]
    fn dispatched_kernels_have_the_portable_bits() {
        let mut r = rng::stream(5, Stream::Init);
        for len in (0..3 * LANES + 3).chain([1000, 2001]) {
            let mut x = vec![0.0; len];
            let mut y = vec![0.0; len];
            rng::fill_normal(&mut r, 1.0, &mut x);
            rng::fill_normal(&mut r, 1.0, &mut y);
            for (k, v) in x.iter_mut().enumerate() {
                *v *= 2f64.powi((k % 7) as i32 * 20 - 60);
            }
            assert_eq!(dot(&x, &y).to_bits(), dot_kernel(&x, &y).to_bits(), "{len}");
            // three rows (two interleaved, one alone) against the single-row kernel
            let m: Vec<f64> = [&x, &y, &x]
                .iter()
                .flat_map(|r| r.iter().copied())
                .collect();
            let mut o = [0.0; 3];
            matvec(&m, &y, &mut o);
            let want = [dot_kernel(&x, &y), dot_kernel(&y, &y), dot_kernel(&x, &y)];
            assert_eq!(o.map(f64::to_bits), want.map(f64::to_bits), "matvec {len}");
            let (mut y1, mut y2) = (y.clone(), y.clone());
            axpy(0.3, &x, &mut y1);
            axpy_kernel(0.3, &x, &mut y2);
            assert_eq!(y1, y2);
            // X^T v with 3 rows of stride len + 5, on the block starting at column 2
            if len > 2 {
                let x3: Vec<f64> = (0..3 * (len + 5))
                    .map(|k| x[k % len] * (k as f64 + 0.5))
                    .collect();
                let v = [0.7, -1.3e-5, 2.5e3];
                let (mut o1, mut o2) = (vec![0.0; len - 2], vec![1.0; len - 2]);
                gemv_t(&x3[2..], len + 5, &v, &mut o1);
                for (j, o) in o2.iter_mut().enumerate() {
                    *o = 0.0;
                    for (i, vi) in v.iter().enumerate() {
                        *o = vi.mul_add(x3[2 + i * (len + 5) + j], *o);
                    }
                }
                assert_eq!(o1, o2, "gemv_t len {len}");
            }
        }
    }
}
