//! The high-precision twin: the same trainer in MPFR (`rug::Float`) at any precision.
//!
//! [`model`] and [`train`] mirror `crate::model` and `crate::train` function by function
//! and operation by operation: every f64 operation there is one rounded MPFR operation
//! here, in the same order (products and sums are rounded separately; no fused
//! multiply-add). Two arithmetic modes ([`Arith`]):
//!
//! - **truth** (any precision, >= 113 bits recommended; default 256): the judge of
//!   accuracy, run with the centred (`Stable`) formulas;
//! - **f64 predictor** (53 bits with the binary64 exponent range and subnormals
//!   emulated): every operation rounds exactly as the f64 trainer's does.
//!
//! The data are the f64 data of [`crate::data::Dataset`]; f64 -> MPFR is exact, and
//! products with a token entry use `mpfr_mul_d` (no conversion).

use std::cmp::Ordering;

use rug::float::Round;
use rug::ops::{AddAssignRound, AssignRound, DivAssignRound, MulAssignRound, SubAssignRound};
use rug::{Assign, Float};

pub mod model;
pub mod train;

/// Smallest precision the twin accepts.
pub const MIN_PREC: u32 = 24;
/// Largest precision the twin accepts.
pub const MAX_PREC: u32 = 1 << 20;
/// Default precision of the truth twin.
pub const DEFAULT_PREC: u32 = 256;

/// Largest memory the twin's MPFR state may take, in bytes (refused beyond, before
/// anything is allocated).
pub const MAX_TWIN_BYTES: u64 = 12 << 30;

/// Approximate bytes of a twin run's MPFR values: p, q, the gradient and scratch (4d),
/// per-sample contributions (n d), scores and attention (2 n T), W (d^2 unless W = I in
/// p-mode); each MPFR number takes 32 bytes plus its limbs.
pub fn twin_bytes(cfg: &crate::Config, prec: u32) -> u64 {
    let per = 32 + 8 * prec.div_ceil(64) as u128;
    let (n, t, d) = (
        cfg.n_train as u128,
        cfg.layout.tokens as u128,
        cfg.d as u128,
    );
    let dense_w =
        !(cfg.mode == crate::config::Mode::P && cfg.init.w == crate::config::WInit::Identity);
    let count = 4 * d + n * d + 2 * n * t + if dense_w { d * d } else { 0 };
    (count * per).min(u64::MAX as u128) as u64
}

/// Refuse a twin run whose MPFR state would exceed [`MAX_TWIN_BYTES`].
pub fn check_twin_memory(cfg: &crate::Config, prec: u32) -> crate::Result<()> {
    let bytes = twin_bytes(cfg, prec);
    if bytes > MAX_TWIN_BYTES {
        return Err(crate::Error::config(
            "prec",
            format!(
                "the twin at {prec} bits needs about {:.1} GiB for d = {}, n = {} (limit {} GiB)",
                bytes as f64 / (1u64 << 30) as f64,
                cfg.d,
                cfg.n_train,
                MAX_TWIN_BYTES >> 30
            ),
        ));
    }
    Ok(())
}

/// The twin's arithmetic: precision and exponent-range emulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arith {
    prec: u32,
    f64_range: bool,
}

impl Arith {
    /// Truth mode at `prec` bits (MPFR's huge exponent range: no underflow in practice).
    pub fn truth(prec: u32) -> crate::Result<Arith> {
        if !(MIN_PREC..=MAX_PREC).contains(&prec) {
            return Err(crate::Error::config(
                "prec",
                format!("must lie in {MIN_PREC}..={MAX_PREC} bits, got {prec}"),
            ));
        }
        Ok(Arith {
            prec,
            f64_range: false,
        })
    }

    /// The f64 predictor: 53 bits, binary64 subnormals and underflow emulated after
    /// every operation.
    pub fn f64_predictor() -> Arith {
        Arith {
            prec: 53,
            f64_range: true,
        }
    }

    /// Precision in bits.
    pub fn prec(&self) -> u32 {
        self.prec
    }

    /// True in f64-predictor mode.
    pub fn emulates_f64(&self) -> bool {
        self.f64_range
    }

    /// A new zero at this precision.
    pub fn zero(&self) -> Float {
        Float::new(self.prec)
    }

    /// `n` zeros.
    pub fn zeros(&self, n: usize) -> Vec<Float> {
        vec![self.zero(); n]
    }

    /// An exact copy of an f64 (exact at any precision >= 53; rounded below that).
    pub fn from_f64(&self, v: f64) -> Float {
        let mut x = self.zero();
        self.set(&mut x, v);
        x
    }

    /// In f64-predictor mode, round a 53-bit result into binary64's range: subnormals
    /// (with the ternary value `dir` of the operation, so there is no double rounding),
    /// underflow to +-0 and overflow to +-inf.
    #[inline]
    fn fix(&self, x: &mut Float, dir: Ordering) {
        if !self.f64_range || !x.is_normal() {
            return;
        }
        // MPFR exponent: x = m 2^e with 1/2 <= |m| < 1; 2^-1074 has e = -1073.
        let e = x.get_exp().unwrap_or(0);
        if e < -1073 {
            // |x| < 2^-1074: rounds to 2^-1074 above the midpoint 2^-1075, to 0 below;
            // at the midpoint, the ternary value tells on which side the exact value was.
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

    /// `out = src`, rounded to nearest.
    #[inline]
    pub fn set<Src>(&self, out: &mut Float, src: Src)
    where
        Float: AssignRound<Src, Round = Round, Ordering = Ordering>,
    {
        let dir = out.assign_round(src, Round::Nearest);
        self.fix(out, dir);
    }

    /// `out += v`, rounded.
    #[inline]
    pub fn add<V>(&self, out: &mut Float, v: V)
    where
        Float: AddAssignRound<V, Round = Round, Ordering = Ordering>,
    {
        let dir = out.add_assign_round(v, Round::Nearest);
        self.fix(out, dir);
    }

    /// `out -= v`, rounded.
    #[inline]
    pub fn sub<V>(&self, out: &mut Float, v: V)
    where
        Float: SubAssignRound<V, Round = Round, Ordering = Ordering>,
    {
        let dir = out.sub_assign_round(v, Round::Nearest);
        self.fix(out, dir);
    }

    /// `out *= v`, rounded.
    #[inline]
    pub fn mul<V>(&self, out: &mut Float, v: V)
    where
        Float: MulAssignRound<V, Round = Round, Ordering = Ordering>,
    {
        let dir = out.mul_assign_round(v, Round::Nearest);
        self.fix(out, dir);
    }

    /// `out /= v`, rounded.
    #[inline]
    pub fn div<V>(&self, out: &mut Float, v: V)
    where
        Float: DivAssignRound<V, Round = Round, Ordering = Ordering>,
    {
        let dir = out.div_assign_round(v, Round::Nearest);
        self.fix(out, dir);
    }

    /// `x = exp(x)`, correctly rounded.
    #[inline]
    pub fn exp(&self, x: &mut Float) {
        let dir = x.exp_round(Round::Nearest);
        self.fix(x, dir);
    }

    /// `x = log(1 + x)`, correctly rounded.
    #[inline]
    pub fn ln_1p(&self, x: &mut Float) {
        let dir = x.ln_1p_round(Round::Nearest);
        self.fix(x, dir);
    }

    /// `x = sqrt(x)`, correctly rounded.
    #[inline]
    pub fn sqrt(&self, x: &mut Float) {
        let dir = x.sqrt_round(Round::Nearest);
        self.fix(x, dir);
    }
}

/// Relative error |a - b| / |b| of an f64 `a` against a twin value `b`, evaluated in
/// MPFR at `b`'s precision (0 when both are 0, infinite when only `b` is 0).
pub fn rel_err(a: f64, b: &Float) -> f64 {
    if b.is_zero() {
        return if a == 0.0 { 0.0 } else { f64::INFINITY };
    }
    let mut diff = Float::with_val(b.prec().max(64), a);
    diff -= b;
    diff /= b;
    diff.abs().to_f64()
}

/// Normwise relative error ||a - b|| / ||b|| of an f64 vector against a twin vector,
/// evaluated in MPFR (so it stays meaningful when b is far below f64's range).
pub fn normwise_rel_err(a: &[f64], b: &[Float]) -> f64 {
    let prec = b.first().map_or(64, |v| v.prec().max(64));
    let (mut num, mut den) = (Float::new(prec), Float::new(prec));
    let mut diff = Float::new(prec);
    for (x, y) in a.iter().zip(b) {
        diff.assign(*x);
        diff -= y;
        diff.square_mut();
        num += &diff;
        diff.assign(y.square_ref());
        den += &diff;
    }
    if den.is_zero() {
        return if num.is_zero() { 0.0 } else { f64::INFINITY };
    }
    num /= &den;
    num.sqrt().to_f64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{self, Stream};

    /// The f64 emulation rounds like binary64 in the normal, subnormal, underflow and
    /// overflow ranges (products, quotients, sums of random magnitudes).
    #[test]
    fn f64_predictor_ops_match_binary64() {
        let ar = Arith::f64_predictor();
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
            let fa = ar.from_f64(a);
            ar.set(&mut x, &fa * b);
            assert_eq!(x.to_f64().to_bits(), (a * b).to_bits(), "{a:e} * {b:e}");
            ar.set(&mut x, a);
            ar.div(&mut x, b);
            assert_eq!(x.to_f64().to_bits(), (a / b).to_bits(), "{a:e} / {b:e}");
            ar.set(&mut x, a * 1e-300);
            ar.add(&mut x, b * 1e-300);
            assert_eq!(
                x.to_f64().to_bits(),
                (a * 1e-300 + b * 1e-300).to_bits(),
                "sum"
            );
        }
        // exp into the subnormal range and to underflow, against CORE-MATH
        for k in 0..2000 {
            let v = -700.0 - 0.025 * k as f64;
            ar.set(&mut x, v);
            ar.exp(&mut x);
            assert_eq!(
                x.to_f64().to_bits(),
                core_math::exp(v).to_bits(),
                "exp({v})"
            );
        }
    }
}
