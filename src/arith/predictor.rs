//! The f64 predictor's range emulation: binary64's subnormals, underflow and overflow
//! applied to a 53-bit MPFR result.
//!
//! MPFR's exponent range is huge, so a 53-bit MPFR operation rounds like binary64 only
//! while the result is normal in binary64. [`fix_binary64_range`] rounds every other
//! result as binary64 would, using the operation's ternary value so that nothing is
//! rounded twice. With it, [`super::Mpfr::predictor`] rounds every operation of the
//! trainer (fma included: `mpfr_fma` rounds once, like a hardware fma) exactly as
//! [`super::F64`] does.

use std::cmp::Ordering;

use rug::float::Round;
use rug::ops::PowAssignRound;
use rug::{Assign, Float};

/// An IEEE binary format's precision and range in MPFR's exponents (x = m 2^e with
/// 1/2 <= |m| < 1).
#[derive(Debug)]
pub(super) struct Format {
    /// Significand bits (rug's `subnormalize_ieee` picks the format by it).
    prec: u32,
    /// e of the smallest positive subnormal.
    min_sub: i64,
    /// e of the smallest positive normal number.
    min_normal: i64,
    /// The largest e of a finite number.
    max: i64,
}

/// binary64: 2^-1074 (e = -1073), 2^-1022 (e = -1021), below 2^1024.
pub(super) const BINARY64: Format = Format {
    prec: 53,
    min_sub: -1073,
    min_normal: -1021,
    max: 1024,
};

/// binary32: 2^-149 (e = -148), 2^-126 (e = -125), below 2^128.
pub(super) const BINARY32: Format = Format {
    prec: 24,
    min_sub: -148,
    min_normal: -125,
    max: 128,
};

/// Round a 53-bit result `x` (whose exact value lay on side `dir` of it) into binary64's
/// range: subnormals, underflow to +-0 and overflow to +-inf.
#[inline]
pub(super) fn fix_binary64_range(x: &mut Float, dir: Ordering) {
    fix_range(x, dir, &BINARY64);
}

/// Round a result `x` at `f`'s precision (whose exact value lay on side `dir` of it)
/// into `f`'s range: subnormals, underflow to +-0 and overflow to +-inf.
#[inline(always)]
fn fix_range(x: &mut Float, dir: Ordering, f: &Format) {
    if !x.is_normal() {
        return;
    }
    let e = x.get_exp().unwrap_or(0) as i64;
    if e < f.min_sub {
        // below the smallest subnormal s: rounds to s above the midpoint s / 2, to 0
        // below; at the midpoint, the ternary value tells on which side the exact value
        // was.
        let neg = x.is_sign_negative();
        let above_mid = e == f.min_sub - 1 && {
            let mid = Float::with_val(f.prec, Float::i_exp(1, (f.min_sub - 2) as i32));
            match x.cmp_abs(&mid) {
                Some(Ordering::Greater) => true,
                // the exact value lay beyond the midpoint iff x was rounded toward 0
                Some(Ordering::Equal) => {
                    (!neg && dir == Ordering::Less) || (neg && dir == Ordering::Greater)
                }
                _ => false,
            }
        };
        if above_mid {
            x.assign(Float::i_exp(1, (f.min_sub - 1) as i32));
        } else {
            x.assign(0u32);
        }
        if neg {
            rug::ops::NegAssign::neg_assign(x);
        }
    } else if e < f.min_normal {
        x.subnormalize_ieee_round(dir, Round::Nearest);
    } else if e > f.max {
        // a |x| >= 2^max at the format's precision is above its largest finite number
        x.assign(if x.is_sign_negative() {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
}

/// `x^t` correctly rounded in the format `f` (binary64 or binary32; `x` one of its
/// numbers), with its subnormals, underflow and overflow: MPFR's `mpfr_pow_ui` at `f`'s
/// precision (correctly rounded in MPFR's exponent range), then rounded into `f`'s range
/// by its ternary value (so nothing is rounded twice). x^0 = 1 for every x, NaN included.
pub(super) fn pow_in_format(x: f64, t: u64, f: &Format) -> f64 {
    let mut y = Float::with_val(f.prec, x);
    debug_assert!(x.is_nan() || y == x, "{x} is not a number of the format");
    let dir = y.pow_assign_round(t, Round::Nearest);
    fix_range(&mut y, dir, f);
    y.to_f64()
}

#[cfg(test)]
mod tests {
    use crate::arith::{Arith, F64, Mpfr};
    use crate::rng::{self, Stream};

    /// Every operation of the predictor rounds like binary64 in the normal, subnormal,
    /// underflow and overflow ranges (products, quotients, sums, fused multiply-adds of
    /// random magnitudes, exp into the subnormal range against CORE-MATH).
    #[test]
    fn predictor_ops_match_binary64() {
        let ar = Mpfr::predictor();
        let mut r = rng::stream(9, Stream::Init);
        let mut x = ar.zero();
        let mut special = vec![
            (f64::from_bits(1), 0.5),
            (f64::from_bits(1), 0.75),
            (f64::from_bits(3), 0.5),
            (f64::MIN_POSITIVE, 0.5 + f64::EPSILON),
            (f64::MAX, 2.0),
            (f64::MAX, 1.0 + f64::EPSILON),
        ];
        for _ in 0..20000 {
            let e1 = (rng::uniform(&mut r) * 1400.0 - 700.0) as i32;
            let e2 = (rng::uniform(&mut r) * 1400.0 - 700.0) as i32;
            let a = (1.0 + rng::uniform(&mut r)) * 2f64.powi(e1);
            let b = (rng::uniform(&mut r) - 0.5) * 2f64.powi(e2);
            special.push((a, b));
        }
        for (a, b) in special {
            let (fa, fb) = (ar.of(a), ar.of(b));
            ar.prod(&mut x, &fa, &fb);
            assert_eq!(x.to_f64().to_bits(), (a * b).to_bits(), "{a:e} * {b:e}");
            ar.set_f64(&mut x, a);
            ar.div_f64(&mut x, b);
            assert_eq!(x.to_f64().to_bits(), (a / b).to_bits(), "{a:e} / {b:e}");
            ar.set_f64(&mut x, a * 1e-300);
            ar.add_f64(&mut x, b * 1e-300);
            let want = a * 1e-300 + b * 1e-300;
            assert_eq!(x.to_f64().to_bits(), want.to_bits(), "sum");
            let c = b * 1e-300;
            ar.set_f64(&mut x, c);
            ar.fma_f64(&mut x, &fa, b * 1e-10);
            let want = a.mul_add(b * 1e-10, c);
            assert_eq!(x.to_f64().to_bits(), want.to_bits(), "fma {a:e} {b:e}");
            let mut y = 0.0;
            F64.set_f64(&mut y, c);
            F64.fma(&mut y, &a, &(b * 1e-10));
            assert_eq!(y.to_bits(), want.to_bits());
        }
        for k in 0..2000 {
            let v = -700.0 - 0.025 * k as f64;
            ar.set_f64(&mut x, v);
            ar.exp(&mut x);
            assert_eq!(
                x.to_f64().to_bits(),
                core_math::exp(v).to_bits(),
                "exp({v})"
            );
        }
    }

    /// Powers into the subnormal and underflow ranges: the predictor's (MPFR's pow rounded
    /// into binary64's range) equal CORE-MATH's correctly rounded `pow`, and MPFR's pow
    /// rounded into binary32's range ([`super::pow_in_format`], f32 beyond t = 2^24)
    /// equals CORE-MATH's `powf`, at bases in [0.5, 1) and t placing x^t around the
    /// smallest normal and subnormal numbers of each format.
    #[test]
    fn powers_round_into_each_format_as_core_math() {
        let ar = Mpfr::predictor();
        let mut x = ar.zero();
        for k in 0..4000u32 {
            let b = 0.5 + k as f64 / 8000.0 + 1e-7;
            for target in [1020.0, 1060.0, 1074.0, 1075.0, 1080.0] {
                let t = (target / -b.log2()).round() as u64;
                ar.set_f64(&mut x, b);
                ar.pow_u64(&mut x, t);
                let want = core_math::pow(b, t as f64);
                assert_eq!(x.to_f64().to_bits(), want.to_bits(), "{b}^{t}");
            }
            let b32 = b as f32;
            for target in [125.0, 140.0, 149.0, 150.0, 152.0] {
                let t = (target / -(b32 as f64).log2()).round() as u64;
                let got = super::pow_in_format(b32 as f64, t, &super::BINARY32) as f32;
                let want = core_math::powf(b32, t as f32);
                assert_eq!(got.to_bits(), want.to_bits(), "{b32}^{t}");
            }
        }
    }

    /// The predictor's kernels (the trait's portable defaults, in MPFR) give the bits of
    /// the f64 kernels (dispatched to AVX2 + FMA where the CPU has them).
    #[test]
    fn predictor_kernels_match_f64_kernels() {
        let ar = Mpfr::predictor();
        let mut r = rng::stream(11, Stream::Init);
        for len in [0, 1, 15, 16, 17, 33, 200, 2001] {
            let mut x = vec![0.0; len];
            let mut y = vec![0.0; len];
            rng::fill_normal(&mut r, 1.0, &mut x);
            rng::fill_normal(&mut r, 1.0, &mut y);
            for (k, v) in x.iter_mut().enumerate() {
                *v *= 2f64.powi((k % 5) as i32 * 30 - 60);
            }
            let ym = ar.of_slice(&y);
            let mut out = ar.zero();
            ar.dot_f64(&x, &ym, &mut out);
            assert_eq!(out.to_f64().to_bits(), crate::arith::dot(&x, &y).to_bits());
            ar.dot(&ar.of_slice(&x), &ym, &mut out);
            assert_eq!(out.to_f64().to_bits(), crate::arith::dot(&x, &y).to_bits());
            let mut y64 = y.clone();
            let mut ymm = ym.clone();
            F64.axpy_f64(&-0.7, &x, &mut y64);
            ar.axpy_f64(&ar.of(-0.7), &x, &mut ymm);
            for (a, b) in y64.iter().zip(&ymm) {
                assert_eq!(a.to_bits(), b.to_f64().to_bits());
            }
        }
    }
}
