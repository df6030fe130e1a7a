//! Hardware binary32: the arithmetic of a float32 implementation (SPEC section 12's
//! float32 candidate replay).
//!
//! It computes as a float32 implementation that loaded the f64 data into float32 arrays
//! would: every f64 that enters (a data entry in [`Arith::dot_f64`], [`Arith::axpy_f64`],
//! [`Arith::gemv_t_f64`], [`Arith::fma_f64`]; a constant in `add_f64`, `mul_f64`, ...)
//! is first rounded to the nearest binary32 (ties to even), then every operation rounds
//! once in binary32. The fma is `f32::mul_add` (correctly rounded: a hardware
//! instruction, or the C library's exact `fmaf`), exp and log1p are CORE-MATH's
//! `expf` / `log1pf` (correctly rounded: the same bits on every platform).
//!
//! The kernels keep the trait's fixed [`LANES`] accumulator pattern; on x86-64 with AVX2
//! and FMA (detected at run time) a compiled-for-AVX2 copy of the same code runs, which
//! changes the speed only (a test checks its bits against the portable build).

use std::cmp::Ordering;

use super::{Arith, Kind, LANES};

/// Plain binary32 arithmetic (a zero-sized context).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct F32;

/// The nearest binary32 of an f64 (ties to even; Rust's `as` conversion).
#[inline(always)]
fn r32(v: f64) -> f32 {
    v as f32
}

/// The fixed-pattern dot product of a binary32 vector with `x` converted by `conv`,
/// written once and compiled twice (portable and AVX2). `acc_j = fma(x_k, y_k, acc_j)`
/// for k = j mod LANES, then the trait's balanced tree.
#[inline(always)]
fn dot_kernel<T: Copy>(x: &[T], y: &[f32], conv: impl Fn(T) -> f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (xc, yc) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (a, b) in xc.zip(yc) {
        for j in 0..LANES {
            acc[j] = conv(a[j]).mul_add(b[j], acc[j]);
        }
    }
    for (j, (a, b)) in xr.iter().zip(yr).enumerate() {
        acc[j] = conv(*a).mul_add(*b, acc[j]);
    }
    super::f64::combine(acc)
}

/// `y_k = fma(alpha, conv(x_k), y_k)`.
#[inline(always)]
fn axpy_kernel<T: Copy>(alpha: f32, x: &[T], y: &mut [f32], conv: impl Fn(T) -> f32) {
    for (yk, xk) in y.iter_mut().zip(x) {
        *yk = alpha.mul_add(conv(*xk), *yk);
    }
}

/// `out_i = dot(m_i, v)` row by row.
#[inline(always)]
fn matvec_kernel(m: &[f32], v: &[f32], out: &mut [f32]) {
    let cols = v.len();
    for (i, o) in out.iter_mut().enumerate() {
        *o = dot_kernel(&m[i * cols..(i + 1) * cols], v, |a| a);
    }
}

/// X^T v on a column block of f64 rows: per output, an fma chain over the rows in order
/// from +0 (one axpy per row, as the trait's default).
#[inline(always)]
fn gemv_t_kernel(x: &[f64], stride: usize, v: &[f32], out: &mut [f32]) {
    let n = out.len();
    out.fill(0.0);
    for (i, vi) in v.iter().enumerate() {
        axpy_kernel(*vi, &x[i * stride..i * stride + n], out, r32);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! The portable kernels compiled with AVX2 and FMA enabled (same code, same bits).
    use super::r32;

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn dot(x: &[f32], y: &[f32]) -> f32 {
        super::dot_kernel(x, y, |a| a)
    }
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn dot_f64(x: &[f64], y: &[f32]) -> f32 {
        super::dot_kernel(x, y, r32)
    }
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
        super::axpy_kernel(alpha, x, y, |a| a)
    }
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn axpy_f64(alpha: f32, x: &[f64], y: &mut [f32]) {
        super::axpy_kernel(alpha, x, y, r32)
    }
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn matvec(m: &[f32], v: &[f32], out: &mut [f32]) {
        super::matvec_kernel(m, v, out)
    }
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn gemv_t(x: &[f64], stride: usize, v: &[f32], out: &mut [f32]) {
        super::gemv_t_kernel(x, stride, v, out)
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2_fma() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// Run the AVX2 copy of a kernel where the CPU has AVX2 and FMA, the portable one
/// otherwise (the same bits either way).
macro_rules! dispatch {
    ($avx:expr, $portable:expr) => {{
        #[cfg(target_arch = "x86_64")]
        let fast = has_avx2_fma();
        #[cfg(not(target_arch = "x86_64"))]
        let fast = false;
        if fast {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU supports AVX2 and FMA (checked above).
            let r = unsafe { $avx };
            #[cfg(not(target_arch = "x86_64"))]
            let r = unreachable!();
            r
        } else {
            $portable
        }
    }};
}

impl Arith for F32 {
    type Real = f32;

    fn kind(&self) -> Kind {
        Kind::F32
    }
    fn prec(&self) -> u32 {
        24
    }
    hardware_scalar_ops!(
        f32,
        r32,
        core_math::expf,
        core_math::log1pf,
        core_math::erff,
        std::f32::consts::PI
    );
    /// CORE-MATH's `powf` (correctly rounded for every binary32 input, subnormals
    /// included) while `t` is a binary32 exactly (t <= 2^24); beyond (Adam at more than
    /// 2^24 steps), MPFR's pow at 24 bits rounded into binary32's range by its ternary
    /// value: also correctly rounded (not CORE-MATH's `pow` in f64 rounded to binary32,
    /// which would round twice).
    fn pow_u64(&self, x: &mut f32, t: u64) {
        *x = if t <= 1 << 24 {
            core_math::powf(*x, t as f32)
        } else {
            super::predictor::pow_in_format(*x as f64, t, &super::predictor::BINARY32) as f32
        };
    }
    /// The binary32 bits as 8 hex digits.
    fn to_exact_string(&self, x: &f32) -> String {
        format!("{:08x}", x.to_bits())
    }
    fn parse_exact(&self, s: &str) -> Option<f32> {
        (s.len() == 8)
            .then(|| u32::from_str_radix(s, 16).ok().map(f32::from_bits))
            .flatten()
    }

    #[inline]
    fn dot(&self, x: &[f32], y: &[f32], out: &mut f32) {
        assert_eq!(x.len(), y.len(), "dot: length mismatch");
        *out = dispatch!(avx2::dot(x, y), dot_kernel(x, y, |a| a));
    }
    #[inline]
    fn dot_f64(&self, x: &[f64], y: &[f32], out: &mut f32) {
        assert_eq!(x.len(), y.len(), "dot: length mismatch");
        *out = dispatch!(avx2::dot_f64(x, y), dot_kernel(x, y, r32));
    }
    #[inline]
    fn axpy(&self, alpha: &f32, x: &[f32], y: &mut [f32]) {
        assert_eq!(x.len(), y.len(), "axpy: length mismatch");
        dispatch!(avx2::axpy(*alpha, x, y), axpy_kernel(*alpha, x, y, |a| a))
    }
    #[inline]
    fn axpy_f64(&self, alpha: &f32, x: &[f64], y: &mut [f32]) {
        assert_eq!(x.len(), y.len(), "axpy: length mismatch");
        dispatch!(avx2::axpy_f64(*alpha, x, y), axpy_kernel(*alpha, x, y, r32))
    }
    #[inline]
    fn matvec(&self, m: &[f32], v: &[f32], out: &mut [f32]) {
        assert!(m.len() >= out.len() * v.len(), "matvec: m too short");
        dispatch!(avx2::matvec(m, v, out), matvec_kernel(m, v, out))
    }
    #[inline]
    fn gemv_t_f64(&self, x: &[f64], stride: usize, v: &[f32], out: &mut [f32]) {
        if let Some(last) = v.len().checked_sub(1) {
            assert!(x.len() >= last * stride + out.len(), "gemv_t: x too short");
        }
        dispatch!(
            avx2::gemv_t(x, stride, v, out),
            gemv_t_kernel(x, stride, v, out)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{self, Stream};
    use rug::Float;
    use rug::float::Round;

    /// Random binary32 values over `2^-lo..2^hi` in magnitude, both signs.
    fn spread(r: &mut rand_chacha::ChaCha20Rng, lo: i32, hi: i32) -> f32 {
        let e = (rng::uniform(r) * (hi + lo) as f64) as i32 - lo;
        let v = (1.0 + rng::uniform(r)) * 2f64.powi(e);
        let v = if rng::uniform(r) < 0.5 { -v } else { v };
        v as f32
    }

    /// +, -, * and fma of binary32 values are the correctly rounded results, checked two
    /// ways. (1) Against MPFR: the exact value (200 bits hold a b + c exactly for these
    /// exponents) rounded once to 24 bits (the operands keep results normal in binary32).
    /// (2) For +, - and *, against the f64 operation rounded to f32, which is the
    /// correctly rounded binary32 result: a product of two 24-bit significands has at
    /// most 48 bits, so the f64 product is exact and the only rounding is the last one;
    /// a sum or difference may be rounded in f64 first, but rounding to 53 bits and then
    /// to 24 equals rounding once to 24 whenever 53 >= 2 * 24 + 2 (Figueroa's theorem on
    /// innocuous double rounding for +, -, *, / and sqrt).
    #[test]
    fn ops_are_correctly_rounded_binary32() {
        let ar = F32;
        let mut r = rng::stream(31, Stream::Init);
        let rn24 = |v: &Float| Float::with_val_round(24, v, Round::Nearest).0.to_f32();
        for _ in 0..50_000 {
            let (a, b, c) = (
                spread(&mut r, 40, 40),
                spread(&mut r, 40, 40),
                spread(&mut r, 40, 40),
            );
            let (fa, fb) = (Float::with_val(200, a), Float::with_val(200, b));
            let mut x = a;
            ar.add(&mut x, &b);
            assert_eq!(x.to_bits(), ((a as f64 + b as f64) as f32).to_bits());
            assert_eq!(
                x.to_bits(),
                rn24(&Float::with_val(200, &fa + &fb)).to_bits()
            );
            let mut x = a;
            ar.sub(&mut x, &b);
            assert_eq!(x.to_bits(), ((a as f64 - b as f64) as f32).to_bits());
            assert_eq!(
                x.to_bits(),
                rn24(&Float::with_val(200, &fa - &fb)).to_bits()
            );
            let mut x = 0.0;
            ar.prod(&mut x, &a, &b);
            assert_eq!(x.to_bits(), ((a as f64 * b as f64) as f32).to_bits());
            let mut x = c;
            ar.fma(&mut x, &a, &b);
            let want = Float::with_val(200, &fa * &fb) + c;
            assert_eq!(x.to_bits(), rn24(&want).to_bits(), "fma {a} {b} {c}");
            // a data entry is rounded to binary32 first, then fused
            let v = a as f64 * (1.0 + 2f64.powi(-40));
            let mut y = c;
            ar.fma_f64(&mut y, &b, v);
            let want = Float::with_val(200, v as f32) * &fb + c;
            assert_eq!(y.to_bits(), rn24(&want).to_bits());
        }
    }

    /// exp and log1p are the 24-bit MPFR results rounded to nearest (correct rounding),
    /// over the range where the results stay normal binary32 values (exp of -87..88;
    /// log1p of -0.99..1e30) plus tiny arguments.
    #[test]
    fn exp_and_log1p_are_correctly_rounded() {
        let ar = F32;
        let mut r = rng::stream(32, Stream::Init);
        let rounded = |v: Float| Float::with_val_round(24, &v, Round::Nearest).0.to_f32();
        for k in 0..40_000 {
            let t = rng::uniform(&mut r);
            let xe = (-87.0 + 175.0 * t) as f32;
            let mut y = xe;
            ar.exp(&mut y);
            let want = rounded(Float::with_val(200, xe).exp());
            assert_eq!(y.to_bits(), want.to_bits(), "exp({xe})");
            let xl = if k % 2 == 0 {
                (-0.99 + 1.98 * t) as f32
            } else {
                2f64.powf(-30.0 + 130.0 * t) as f32
            };
            let mut y = xl;
            ar.ln_1p(&mut y);
            let want = rounded(Float::with_val(200, xl).ln_1p());
            assert_eq!(y.to_bits(), want.to_bits(), "log1p({xl})");
        }
    }

    /// The dispatched kernels (AVX2 + FMA where the CPU has them) give the bits of the
    /// portable build, around every multiple of LANES, on spread magnitudes.
    #[test]
    fn dispatched_kernels_have_the_portable_bits() {
        let ar = F32;
        let mut r = rng::stream(33, Stream::Init);
        for len in (0..3 * LANES + 3).chain([1000, 2001]) {
            let x64: Vec<f64> = (0..len)
                .map(|k| spread(&mut r, 30, 30) as f64 * (1.0 + 1e-9 * k as f64))
                .collect();
            let x: Vec<f32> = x64.iter().map(|v| *v as f32).collect();
            let y: Vec<f32> = (0..len).map(|_| spread(&mut r, 30, 30)).collect();
            let mut out = 0.0;
            ar.dot(&x, &y, &mut out);
            assert_eq!(out.to_bits(), dot_kernel(&x, &y, |a| a).to_bits());
            ar.dot_f64(&x64, &y, &mut out);
            assert_eq!(out.to_bits(), dot_kernel(&x64, &y, r32).to_bits());
            // the trait's generic default (one fma per element, tree combination)
            let mut acc: [f32; LANES] = [0.0; LANES];
            for (k, (a, b)) in x64.iter().zip(&y).enumerate() {
                ar.fma_f64(&mut acc[k % LANES], b, *a);
            }
            let mut want = 0.0;
            ar.combine(&mut acc, &mut want);
            assert_eq!(out.to_bits(), want.to_bits(), "dot_f64 vs default, {len}");
            let m: Vec<f32> = [&x, &y, &x]
                .iter()
                .flat_map(|r| r.iter().copied())
                .collect();
            let mut o = [0.0; 3];
            ar.matvec(&m, &y, &mut o);
            let w = [
                dot_kernel(&x, &y, |a| a),
                dot_kernel(&y, &y, |a| a),
                dot_kernel(&x, &y, |a| a),
            ];
            assert_eq!(o.map(f32::to_bits), w.map(f32::to_bits));
            let (mut y1, mut y2) = (y.clone(), y.clone());
            ar.axpy_f64(&0.3, &x64, &mut y1);
            axpy_kernel(0.3, &x64, &mut y2, r32);
            assert_eq!(y1, y2);
            if len > 2 {
                let v = [0.7f32, -1.3e-5, 2.5e3];
                let stride = len;
                let x3: Vec<f64> = (0..3 * stride).map(|k| x64[k % len] * 1.5).collect();
                let (mut o1, mut o2) = (vec![0.0; len - 2], vec![1.0; len - 2]);
                ar.gemv_t_f64(&x3[2..], stride, &v, &mut o1);
                for (j, o) in o2.iter_mut().enumerate() {
                    *o = 0.0;
                    for (i, vi) in v.iter().enumerate() {
                        *o = vi.mul_add(x3[2 + i * stride + j] as f32, *o);
                    }
                }
                assert_eq!(o1, o2, "gemv_t {len}");
            }
        }
    }

    /// The exact text round-trips every bit pattern class (signed zeros, subnormals,
    /// infinities) and rejects other lengths.
    #[test]
    fn exact_text_round_trips() {
        let ar = F32;
        for v in [
            0.0f32,
            -0.0,
            1.5,
            f32::from_bits(1),
            f32::MAX,
            f32::NEG_INFINITY,
        ] {
            let s = ar.to_exact_string(&v);
            assert_eq!(ar.parse_exact(&s).unwrap().to_bits(), v.to_bits());
        }
        assert!(ar.parse_exact("3f80").is_none());
    }
}
