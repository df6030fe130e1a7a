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
use rug::{Assign, Float};

/// Round a 53-bit result `x` (whose exact value lay on side `dir` of it) into binary64's
/// range: subnormals, underflow to +-0 and overflow to +-inf.
#[inline]
pub(super) fn fix_binary64_range(x: &mut Float, dir: Ordering) {
    if !x.is_normal() {
        return;
    }
    // MPFR exponent: x = m 2^e with 1/2 <= |m| < 1; 2^-1074 has e = -1073.
    let e = x.get_exp().unwrap_or(0);
    if e < -1073 {
        // |x| < 2^-1074: rounds to 2^-1074 above the midpoint 2^-1075, to 0 below; at the
        // midpoint, the ternary value tells on which side the exact value was.
        let neg = x.is_sign_negative();
        let above_mid = e == -1074 && {
            let mid = Float::with_val(53, Float::i_exp(1, -1075));
            match x.cmp_abs(&mid) {
                Some(Ordering::Greater) => true,
                // the exact value lay beyond the midpoint iff x was rounded toward 0
                Some(Ordering::Equal) => {
                    (!neg && dir == Ordering::Less) || (neg && dir == Ordering::Greater)
                }
                _ => false,
            }
        };
        let v = if above_mid { f64::from_bits(1) } else { 0.0 };
        x.assign(if neg { -v } else { v });
    } else if e < -1021 {
        x.subnormalize_ieee_round(dir, Round::Nearest);
    } else if e > 1024 {
        // a 53-bit |x| >= 2^1024 is above f64::MAX = (1 - 2^-53) 2^1024
        x.assign(if x.is_sign_negative() {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
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
