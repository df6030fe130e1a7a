//! MPFR arithmetic (`rug::Float`): the truth twin at any precision, and the 53-bit
//! f64 predictor.
//!
//! Every operation is one correctly rounded MPFR operation (`mpfr_fma` for the fused
//! multiply-add). In predictor mode each result is then rounded into binary64's exponent
//! range (`predictor.rs`). Data enter exactly: f64 -> MPFR is exact at >= 53 bits, and a
//! product with an f64 token entry uses the entry's exact 53-bit copy.

use std::cmp::Ordering;

use gmp_mpfr_sys::mpfr;
use rug::Float;
use rug::float::Round;
use rug::ops::{
    AddAssignRound, AssignRound, DivAssignRound, MulAssignRound, PowAssignRound, SubAssignRound,
};

use super::fixed::{self, FixedRows, limbs_for};
use super::mag::Mag;
use super::predictor::fix_binary64_range;
use super::{Arith, Kind, Prepared};
use crate::error::{Error, Result};

/// Smallest precision of the truth twin: below 64 bits it would not out-resolve f64.
pub const MIN_TRUTH_PREC: u32 = 64;
/// Largest precision the twin accepts.
pub const MAX_PREC: u32 = 1 << 20;
/// Default precision of the truth twin.
pub const DEFAULT_PREC: u32 = 256;

/// MPFR context: precision, and whether binary64's exponent range is emulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mpfr {
    prec: u32,
    f64_range: bool,
}

impl Mpfr {
    /// The truth twin at `prec` bits (MPFR's huge exponent range). Refuses less than
    /// [`MIN_TRUTH_PREC`] bits: a judge must resolve more than f64 does.
    pub fn truth(prec: u32) -> Result<Mpfr> {
        if !(MIN_TRUTH_PREC..=MAX_PREC).contains(&prec) {
            return Err(Error::argument(
                "prec",
                format!(
                    "the truth twin needs {MIN_TRUTH_PREC}..={MAX_PREC} bits, got {prec} \
                     (53 bits is the f64 predictor, not a truth twin: \
                     `tokensel twin --predictor` trains in it)"
                ),
            ));
        }
        Ok(Mpfr {
            prec,
            f64_range: false,
        })
    }

    /// The f64 predictor: 53 bits with binary64's subnormals, underflow and overflow.
    pub fn predictor() -> Mpfr {
        Mpfr {
            prec: 53,
            f64_range: true,
        }
    }

    /// The predictor for 53 bits, the truth twin otherwise.
    pub fn for_prec(prec: u32) -> Result<Mpfr> {
        if prec == 53 {
            Ok(Mpfr::predictor())
        } else {
            Mpfr::truth(prec)
        }
    }

    #[inline(always)]
    fn fix(&self, x: &mut Float, dir: Ordering) {
        if self.f64_range {
            fix_binary64_range(x, dir);
        }
    }

    #[inline(always)]
    fn fma_raw(&self, x: &mut Float, a: &Float, b: &Float) {
        let dir = fma_nearest(x, a, b);
        self.fix(x, dir.cmp(&0));
    }
}

/// `x = a * b + x` rounded once to nearest at `x`'s precision (`mpfr_fma`); returns
/// MPFR's ternary value (0 iff exact).
#[inline(always)]
pub(super) fn fma_nearest(x: &mut Float, a: &Float, b: &Float) -> i32 {
    // SAFETY: all three are initialised MPFR numbers; MPFR allows the output to alias an
    // input (here the addend).
    unsafe {
        mpfr::fma(
            x.as_raw_mut(),
            a.as_raw(),
            b.as_raw(),
            x.as_raw(),
            mpfr::rnd_t::RNDN,
        )
    }
}

impl Arith for Mpfr {
    type Real = Float;

    fn kind(&self) -> Kind {
        if self.f64_range {
            Kind::Predictor
        } else {
            Kind::Mpfr
        }
    }
    fn prec(&self) -> u32 {
        self.prec
    }
    #[inline]
    fn zero(&self) -> Float {
        Float::new(self.prec)
    }
    #[inline]
    fn to_f64(&self, x: &Float) -> f64 {
        x.to_f64()
    }
    fn enclose(&self, x: &Float) -> (f64, f64) {
        (x.to_f64_round(Round::Down), x.to_f64_round(Round::Up))
    }
    #[inline]
    fn set(&self, x: &mut Float, a: &Float) {
        let dir = x.assign_round(a, Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn set_f64(&self, x: &mut Float, v: f64) {
        let dir = x.assign_round(v, Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn add(&self, x: &mut Float, a: &Float) {
        let dir = x.add_assign_round(a, Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn add_f64(&self, x: &mut Float, v: f64) {
        let dir = x.add_assign_round(v, Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn sub(&self, x: &mut Float, a: &Float) {
        let dir = x.sub_assign_round(a, Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn mul(&self, x: &mut Float, a: &Float) {
        let dir = x.mul_assign_round(a, Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn mul_f64(&self, x: &mut Float, v: f64) {
        let dir = x.mul_assign_round(v, Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn div(&self, x: &mut Float, a: &Float) {
        let dir = x.div_assign_round(a, Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn div_f64(&self, x: &mut Float, v: f64) {
        let dir = x.div_assign_round(v, Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn diff(&self, x: &mut Float, a: &Float, b: &Float) {
        let dir = x.assign_round(a - b, Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn diff_f64(&self, x: &mut Float, a: f64, b: f64) {
        let dir = x.assign_round(a, Round::Nearest);
        self.fix(x, dir);
        let dir = x.sub_assign_round(b, Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn prod(&self, x: &mut Float, a: &Float, b: &Float) {
        let dir = x.assign_round(a * b, Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn fma(&self, x: &mut Float, a: &Float, b: &Float) {
        self.fma_raw(x, a, b);
    }
    #[inline]
    fn fma_f64(&self, x: &mut Float, a: &Float, v: f64) {
        let b = Float::with_val(53, v);
        self.fma_raw(x, a, &b);
    }
    #[inline]
    fn neg(&self, x: &mut Float) {
        rug::ops::NegAssign::neg_assign(x);
    }
    #[inline]
    fn exp(&self, x: &mut Float) {
        // the truth twin: the fixed-point exp where it proves MPFR's rounding (`exp.rs`,
        // the same bits and ternary value); the predictor keeps MPFR's (binary64's range)
        let dir = if self.f64_range {
            x.exp_round(Round::Nearest)
        } else {
            super::exp::exp_in(x, Round::Nearest)
        };
        self.fix(x, dir);
    }
    #[inline]
    fn ln_1p(&self, x: &mut Float) {
        let dir = x.ln_1p_round(Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn sqrt(&self, x: &mut Float) {
        let dir = x.sqrt_round(Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn erf(&self, x: &mut Float) {
        let dir = x.erf_round(Round::Nearest);
        self.fix(x, dir);
    }
    fn pi(&self) -> Float {
        let (mut x, dir) =
            Float::with_val_round(self.prec, rug::float::Constant::Pi, Round::Nearest);
        self.fix(&mut x, dir);
        x
    }
    /// `mpfr_pow_ui`, correctly rounded (the predictor: then into binary64's range).
    fn pow_u64(&self, x: &mut Float, t: u64) {
        let dir = x.pow_assign_round(t, Round::Nearest);
        self.fix(x, dir);
    }
    #[inline]
    fn cmp(&self, a: &Float, b: &Float) -> Option<Ordering> {
        a.partial_cmp(b)
    }
    #[inline]
    fn sign(&self, x: &Float) -> i8 {
        match x.cmp0() {
            Some(Ordering::Greater) => 1,
            Some(Ordering::Less) => -1,
            _ => 0,
        }
    }
    #[inline]
    fn is_finite(&self, x: &Float) -> bool {
        x.is_finite()
    }
    fn to_exact_string(&self, x: &Float) -> String {
        x.to_string_radix(16, None)
    }
    fn parse_exact(&self, s: &str) -> Option<Float> {
        Float::parse_radix(s, 16)
            .ok()
            .map(|v| Float::with_val(self.prec, v))
    }

    /// The truth twin takes the span step's Gram matrices exactly (computed without
    /// rounding, then rounded once: at least as accurate as its own fma chains, and
    /// about 4x cheaper to form); the predictor keeps its kernels (it must round as f64).
    fn exact_inputs(&self) -> bool {
        !self.f64_range
    }
    /// The exact value rounded once to nearest at the twin's precision.
    fn of_exact(&self, v: &Float) -> Float {
        Float::with_val(self.prec, v)
    }

    /// The truth twin lays the matrix out in fixed point (`fixed.rs`, up to 1,024 bits);
    /// the predictor keeps the values (it must round as the f64 trainer does).
    fn prepare(&self, m: Vec<Float>, cols: usize) -> Prepared<Float> {
        let fixed = (!self.f64_range)
            .then(|| FixedRows::new(&m, |x| x, |_| Mag::ZERO, cols, limbs_for(self.prec)))
            .flatten();
        Prepared {
            values: m,
            cols,
            fixed: fixed.map(std::sync::Arc::new),
        }
    }

    /// The truth twin: in fixed point against the prepared rows, each row's sum rounded
    /// once (within `cols (L (L - 1) / 2 + 2) 2^(s_m + s_v - 64 L)` of the exact dot
    /// product before that rounding: `fixed.rs`), not the fma chain of [`Arith::dot`].
    ///
    /// That bound is absolute (relative to the largest entries of the row and of `v`),
    /// so a row whose sum is far below them (a tiny p(0) against the data's scale, or
    /// cancellation) could lose its significant bits. Where the bound exceeds the
    /// result's ulp at this precision (or the result is 0 with a nonzero bound), the row
    /// is summed again by MPFR's correctly rounded dot product (`mpfr_dot`): every
    /// value the twin returns is then within one rounding of the exact product plus at
    /// most one ulp.
    fn matvec_prepared(&self, m: &Prepared<Float>, start: usize, v: &[Float], out: &mut [Float]) {
        let vector = fixed::Vector::new(v, |x| x, limbs_for(self.prec));
        match (m.fixed(), vector) {
            (Some(f), Some(vector)) => {
                let prec = self.prec as i64;
                let mut rows: Vec<(Float, bool)> = out
                    .iter_mut()
                    .map(|o| (std::mem::replace(o, Float::new(o.prec())), false))
                    .collect();
                let below_ulp = |x: &Float, bound: Mag| match x.get_exp() {
                    _ if bound.is_zero() => true,
                    Some(e) => bound.cmp_value(Mag::pow2(e as i64 - prec)) != Ordering::Greater,
                    None => false,
                };
                fixed::matvec(
                    f,
                    &vector,
                    None,
                    start,
                    &mut rows,
                    |o| &mut o.0,
                    |o, r| o.1 = !below_ulp(&o.0, r.bound),
                );
                let cols = m.cols;
                for (i, (o, (value, redo))) in out.iter_mut().zip(rows).enumerate() {
                    *o = value;
                    if redo {
                        let row = &m.values[(start + i) * cols..(start + i + 1) * cols];
                        let dir = o.assign_round(Float::dot(row.iter().zip(v)), Round::Nearest);
                        self.fix(o, dir);
                    }
                }
            }
            _ => {
                let cols = m.cols;
                self.matvec(&m.values[start * cols..(start + out.len()) * cols], v, out);
            }
        }
    }

    /// With f64 data, the token entries are copied once into a reusable 53-bit number
    /// (exact), then fused as in the default kernel.
    fn dot_f64(&self, x: &[f64], y: &[Float], out: &mut Float) {
        debug_assert_eq!(x.len(), y.len());
        let mut acc: [Float; super::LANES] = std::array::from_fn(|_| self.zero());
        let mut xk = Float::new(53);
        for (k, (a, b)) in x.iter().zip(y).enumerate() {
            rug::Assign::assign(&mut xk, *a);
            self.fma_raw(&mut acc[k % super::LANES], b, &xk);
        }
        self.combine(&mut acc, out);
    }

    fn axpy_f64(&self, alpha: &Float, x: &[f64], y: &mut [Float]) {
        debug_assert_eq!(x.len(), y.len());
        let mut xk = Float::new(53);
        for (yk, a) in y.iter_mut().zip(x) {
            rug::Assign::assign(&mut xk, *a);
            self.fma_raw(yk, alpha, &xk);
        }
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
        rug::Assign::assign(&mut diff, *x);
        diff -= y;
        diff.square_mut();
        num += &diff;
        rug::Assign::assign(&mut diff, y.square_ref());
        den += &diff;
    }
    if den.is_zero() {
        return if num.is_zero() { 0.0 } else { f64::INFINITY };
    }
    num /= &den;
    num.sqrt().to_f64()
}
