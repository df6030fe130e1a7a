//! Ball arithmetic: rigorous enclosures of the exact-arithmetic trajectory (SPEC section
//! 11; proofs in proofs-notes/certify.md).
//!
//! A [`BallReal`] `[m +- r]` is the set `{x : |x - m| <= r}`: `m` an MPFR number at the
//! working precision (rounded to nearest), `r` a [`Mag`] (32-bit mantissa, wide
//! exponent, rounded up). Every operation follows Arb's contract: its result contains
//! the exact result for EVERY choice of points in its input balls. Where MPFR's ternary
//! value says the midpoint was rounded, the radius gains `e` = half an ulp of the rounded
//! midpoint (a bound of the rounding error of round-to-nearest); an exact midpoint adds
//! nothing. Rules (`e` last in each):
//!
//! ```text
//! a + b, a - b     r = ra + rb + e
//! a * b            r = |ma| rb + |mb| ra + ra rb + e
//! fma: a * b + x   r = |ma| rb + |mb| ra + ra rb + rx + e      (one rounding of m)
//! a / b            |mb| > rb proved, else r = inf;
//!                  r = (|ma| rb + |mb| ra) / (|mb| (|mb| - rb)) + e
//! exp(a)           r = exp(ma) (e^ra - 1) + e   (exp(ma) <= |m'| + e; e^r - 1 <= r + r^2 for r <= 1)
//! ln(1 + a)        1 + ma - ra > 0 proved, else r = inf;  r = ra / (1 + ma - ra) + e
//! sqrt(a)          ma - ra >= 0 proved, else r = inf;  r = ra / (sqrt(ma) + sqrt(ma - ra)) + e
//!                  (the divisor, both roots and their sum, rounded DOWN)
//! a^t (integer)    ra = 0: m = ma^t rounded to nearest (MPFR), r = e;  else the hull of
//!                  [lo^t, hi^t] (odd t or lo >= 0), [hi^t, lo^t] (even t, hi <= 0),
//!                  [0, max(|lo|, |hi|)^t] (even t, lo < 0 < hi), lo = ma - ra rounded
//!                  down, hi = ma + ra rounded up, each power rounded outward
//! ```
//!
//! Every bound is evaluated with upward rounding (and its divisors with downward
//! rounding) in [`Mag`]; proofs-notes/certify.md states each rule's proof and lists
//! every place a lower bound is needed ("Every lower bound, reviewed"). `e` is half an
//! ulp, or `2^(emin - 1)` for a result in MPFR's lowest binade (an underflow). An infinite radius is "the whole line": [`Arith::is_finite`]
//! reports it, so a trainer stops with a non-finite error.
//!
//! # Branches
//! [`Arith::cmp`] and [`Arith::sign`] compare MIDPOINTS: they serve branches between
//! expressions that are equal in the reals only (the max subtracted before exp, the
//! reference token of the centred formulas, which side of the logistic loss to
//! evaluate), where either choice gives a sound enclosure. Every reported decision goes
//! through [`Arith::decide_cmp`] / [`Arith::decide_sign`], which answer `None` where the
//! balls overlap. The review of every branch of the model and the trainer is in
//! proofs-notes/certify.md.
//!
//! # Exact inputs
//! The data are f64, so they enter exactly (radius 0), and the span step's Gram matrices
//! are computed exactly once (`exact.rs`) and rounded once to the working precision
//! ([`Arith::of_exact`]).
//!
//! # Kernels
//! [`Arith::dot`] and [`Arith::dot_f64`] sum the midpoint products EXACTLY in fixed point
//! (up to a truncation far below the last bit, counted in the radius) and round once
//! (`MidSum`); the radius pass adds the product radii in [`Mag`]. So a dot product's
//! midpoint is the correctly rounded dot product of the midpoints (not the MPFR twin's
//! fma chain: the two arithmetics' midpoints differ in the last bits, both inside the
//! enclosure). [`Arith::axpy`] and [`Arith::axpy_f64`] are one MPFR fma per element with
//! the fma rule.

use std::cmp::Ordering;

use gmp_mpfr_sys::mpfr;
use rug::Assign;
use rug::Float;
use rug::float::Round;
use rug::ops::{
    AddAssignRound, AssignRound, DivAssignRound, MulAssignRound, PowAssignRound, SubAssignRound,
};

use super::fixed::{self, FixedRows, limbs_for};
use super::limbs::{add_limbs, mul_limbs, shl_limbs, shr_limbs};
use super::mag::Mag;
use super::mpfr::{MAX_PREC, fma_nearest};
use super::{Arith, Kind, Prepared};
use crate::error::{Error, Result};

/// Smallest working precision of a ball: the data (f64) must enter exactly.
pub const MIN_BALL_PREC: u32 = 53;
/// Default working precision of the ball trainer.
pub const DEFAULT_BALL_PREC: u32 = 128;

/// The ball arithmetic at a working precision (a context; see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ball {
    prec: u32,
}

/// A ball `[mid +- rad]` (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct BallReal {
    mid: Float,
    rad: Mag,
}

impl BallReal {
    /// The midpoint.
    pub fn mid(&self) -> &Float {
        &self.mid
    }

    /// The radius.
    pub fn rad(&self) -> Mag {
        self.rad
    }

    /// The radius as an f64, rounded up (+inf beyond f64's range).
    pub fn rad_f64(&self) -> f64 {
        self.rad.to_f64_up()
    }

    /// A ball from a midpoint (kept exactly, at its own precision) and a radius.
    pub fn new(mid: Float, rad: Mag) -> BallReal {
        BallReal { mid, rad }
    }

    /// True when the exact value `v` lies in the ball, decided by an exact subtraction
    /// (for the tests' references; the radius is taken as
    /// [`Mag::to_float`] gives it, exact inside MPFR's exponent range).
    pub fn contains(&self, v: &Float) -> bool {
        if self.rad.is_inf() {
            return !v.is_nan();
        }
        if !self.mid.is_finite() || !v.is_finite() {
            return false;
        }
        let bounds = |f: &Float| f.get_exp().map(|e| (e as i64, e as i64 - f.prec() as i64));
        let prec = match (bounds(v), bounds(&self.mid)) {
            (Some((hv, lv)), Some((hm, lm))) => hv.max(hm) - lv.min(lm) + 2,
            _ => v.prec().max(self.mid.prec()) as i64,
        };
        let d = Float::with_val(prec.clamp(2, 1 << 24) as u32, v - &self.mid);
        d.abs() <= self.rad.to_float(64)
    }
}

/// Half an ulp of a rounded MPFR result `x` (the error bound of round-to-nearest), or
/// zero when the operation was exact (`ternary == 0`).
#[inline(always)]
fn err(x: &Float, ternary: i32) -> Mag {
    if ternary == 0 {
        return Mag::ZERO;
    }
    if x.is_zero() {
        // an underflow to zero: the exact value is below the smallest positive number
        // SAFETY: reading MPFR's global exponent range.
        return Mag::pow2(unsafe { mpfr::get_emin() } - 1);
    }
    if !x.is_finite() {
        return Mag::INF;
    }
    // x = 0.1b... 2^exp, ulp = 2^(exp - prec)
    // SAFETY: x is a regular initialised MPFR number.
    let (exp, prec) = unsafe { ((*x.as_raw()).exp, (*x.as_raw()).prec) };
    if exp <= LOW_EXP {
        // SAFETY: reading MPFR's exponent range.
        let emin = unsafe { mpfr::get_emin() };
        if exp <= emin {
            // the lowest binade: x may be the smallest positive number 2^(emin - 1)
            // reached by an underflow (from an exact value anywhere below it), whose
            // error is not a half ulp of x; 2^(emin - 1) bounds it and every rounding
            // error in this binade
            return Mag::pow2(emin - 1);
        }
    }
    Mag::pow2(exp - prec - 1)
}

/// Exponents at or below this one are checked against MPFR's `emin` by [`err`] (an
/// underflow's result lies in the lowest binade). MPFR's default `emin` is `1 - 2^30`;
/// tokensel never raises it, and [`Ball::new`] checks that it lies below this bound.
const LOW_EXP: i64 = -(1 << 24);

#[inline(always)]
fn tern(o: Ordering) -> i32 {
    o as i32
}

/// A term of a dot product: zero (skipped), finite, or not finite.
enum Term<T> {
    Zero,
    Finite(T),
    NonFinite,
}

/// A finite nonzero number as (sign, MPFR exponent, mantissa limbs, least significant
/// first, the top bit of the last limb set): value = +-(limbs / 2^(64 n)) 2^exp.
#[derive(Clone, Copy)]
struct Operand<'a> {
    neg: bool,
    exp: i64,
    limbs: &'a [u64],
}

impl<'a> Operand<'a> {
    /// The term of an MPFR number.
    #[inline(always)]
    fn of(x: &'a Float) -> Term<Operand<'a>> {
        match fixed::parts(x) {
            Err(()) => Term::NonFinite,
            Ok(None) => Term::Zero,
            Ok(Some((neg, exp, limbs))) => Term::Finite(Operand { neg, exp, limbs }),
        }
    }
}

/// An f64 as (sign, MPFR exponent, its 53-bit significand at the top of one limb).
#[inline(always)]
fn decode_f64(v: f64) -> Term<(bool, i64, [u64; 1])> {
    if v == 0.0 {
        return Term::Zero;
    }
    if !v.is_finite() {
        return Term::NonFinite;
    }
    let bits = v.to_bits();
    let (e, f) = (((bits >> 52) & 0x7ff) as i64, bits & ((1 << 52) - 1));
    // v = M 2^E with M < 2^53; normalise M to the top of a 64-bit limb:
    // v = (limb / 2^64) 2^(E + 64 - lz)
    let (m, big_e) = if e == 0 {
        (f, -1074)
    } else {
        (f | (1 << 52), e - 1075)
    };
    let lz = m.leading_zeros() as i64;
    Term::Finite((v < 0.0, big_e + 64 - lz, [m << lz]))
}

impl<'a> Operand<'a> {
    /// The operand of a decoded f64 ([`decode_f64`]).
    #[inline(always)]
    fn of_decoded(d: &'a Term<(bool, i64, [u64; 1])>) -> Term<Operand<'a>> {
        match d {
            Term::Zero => Term::Zero,
            Term::NonFinite => Term::NonFinite,
            Term::Finite((neg, exp, limb)) => Term::Finite(Operand {
                neg: *neg,
                exp: *exp,
                limbs: &limb[..],
            }),
        }
    }
}

/// The exact sum of products of midpoints in fixed point (the midpoint pass of the ball
/// dot products): with E = the largest exponent sum ex + ey of a nonzero product and L =
/// bits(len) + 1, the sum is accumulated as integer multiples of 2^base, base = E + L -
/// 64 W with W = nx + ny + 2 limbs (nx, ny: the operands' limb counts). Every product
/// below 2^E fits (the sum of len of them stays below 2^(64 W - 1)); a product whose low
/// bits fall below 2^base is truncated, an error below 2^base each, counted into the
/// radius. The sum of positive and of negative products are kept apart and subtracted
/// at the end, which rounds ONCE to the working precision (its half ulp into the
/// radius). So the midpoint is the exact dot product of the midpoints rounded once, up
/// to truncations 2^-(128 - L) below the largest product's last bit. Operands of at most
/// two limbs (up to 128 bits) take a register path with W = 6 (`two_limbs`: 128-bit
/// mantissas, 256-bit products, no GMP call); longer ones a loop over limbs (`limbs`).
/// The product radii are summed in the same pass.
struct MidSum;

impl MidSum {
    /// Sum the products of the midpoints `pairs` into `mid` (rounded to its precision)
    /// and set `rad` to the bound of the rounding and truncation plus the sum (rounded
    /// up) of each pair's product radius (the third item); false (nothing written) when
    /// an operand is not finite.
    fn sum<'a, I>(pairs: I, mid: &mut Float, rad: &mut Mag) -> bool
    where
        I: Iterator<Item = (Term<Operand<'a>>, Term<Operand<'a>>, Mag)>,
    {
        // pass 1: the nonzero products' operands (the longer one first), the largest
        // exponent sum and the limb counts; the product radii
        let (mut top, mut nx, mut ny, mut len) = (i64::MIN, 0usize, 0usize, 0usize);
        let mut terms = Vec::with_capacity(pairs.size_hint().0);
        let mut radii = Mag::ZERO;
        for (a, b, r) in pairs {
            len += 1;
            radii = radii.add_up(r);
            match (a, b) {
                (Term::NonFinite, _) | (_, Term::NonFinite) => return false,
                (Term::Finite(a), Term::Finite(b)) => {
                    top = top.max(a.exp + b.exp);
                    nx = nx.max(a.limbs.len());
                    ny = ny.max(b.limbs.len());
                    terms.push(if a.limbs.len() >= b.limbs.len() {
                        (a, b)
                    } else {
                        (b, a)
                    });
                }
                _ => {}
            }
        }
        if top == i64::MIN {
            mid.assign(0u32);
            *rad = radii;
            return true;
        }
        let big_l = (usize::BITS - len.leading_zeros()) as i64 + 1;
        let (pos, neg, base, truncated) = if nx <= 2 && ny <= 2 {
            Self::two_limbs(&terms, top, big_l)
        } else {
            Self::limbs(&terms, top, big_l, nx, ny)
        };
        let int = rug::Integer::from_digits(&pos, rug::integer::Order::Lsf)
            - rug::Integer::from_digits(&neg, rug::integer::Order::Lsf);
        let t = tern(mid.assign_round(&int, Round::Nearest));
        // SAFETY: scaling by a power of two (exact within MPFR's exponent range).
        let t2 = unsafe { mpfr::mul_2si(mid.as_raw_mut(), mid.as_raw(), base, mpfr::rnd_t::RNDN) };
        let mut r = err(mid, t).add_up(err(mid, t2)).add_up(radii);
        if truncated > 0 {
            r = r.add_up(Mag::of_f64(truncated as f64).mul_up(Mag::pow2(base)));
        }
        *rad = r;
        true
    }

    /// The sums of the positive and of the negative products of `terms` in fixed point,
    /// in `W = nx + ny + 2` limbs above `2^base` (`base = top + big_l - 64 W`), and the
    /// number of products truncated below `2^base` (the struct docs).
    fn limbs(
        terms: &[(Operand<'_>, Operand<'_>)],
        top: i64,
        big_l: i64,
        nx: usize,
        ny: usize,
    ) -> (Vec<u64>, Vec<u64>, i64, u64) {
        let w = nx + ny + 2;
        let base = top + big_l - 64 * w as i64;
        // the sums of the positive and of the negative products
        let mut acc = [vec![0u64; w], vec![0u64; w]];
        let mut prod = vec![0u64; nx + ny];
        let mut tmp = vec![0u64; nx + ny + 1];
        let mut truncated = 0u64;
        for (a, b) in terms {
            let np = a.limbs.len() + b.limbs.len();
            mul_limbs(a.limbs, b.limbs, &mut prod[..np]);
            // the product's value: prod / 2^(64 np) 2^(ea + eb); its last bit at
            // ea + eb - 64 np, that is `shift` bits above base
            let shift = a.exp + b.exp - 64 * np as i64 - base;
            let acc = &mut acc[usize::from(a.neg != b.neg)];
            if shift >= 0 {
                let (o, bit) = ((shift / 64) as usize, (shift % 64) as u32);
                shl_limbs(&prod[..np], bit, &mut tmp[..np + 1]);
                // limbs of tmp beyond w - o are zero (the product is below 2^(64 w - L))
                let m = (np + 1).min(w - o);
                debug_assert!(tmp[m..np + 1].iter().all(|l| *l == 0));
                let carry = add_limbs(&mut acc[o..], &tmp[..m]);
                debug_assert!(!carry);
            } else {
                truncated += 1;
                let drop = (-shift) as usize;
                if drop >= 64 * np {
                    continue;
                }
                let (q, bit) = (drop / 64, (drop % 64) as u32);
                let m = np - q;
                shr_limbs(&prod[q..np], bit, &mut tmp[..m]);
                let carry = add_limbs(acc, &tmp[..m]);
                debug_assert!(!carry);
            }
        }
        let [pos, neg] = acc;
        (pos, neg, base, truncated)
    }

    /// [`Self::limbs`] for operands of at most two limbs (precisions up to 128 bits), in
    /// registers: every operand as a 128-bit mantissa M (value M 2^(e - 128)), every
    /// product as four limbs (value P 2^(ea + eb - 256)), six limbs of sums (W = 6).
    fn two_limbs(
        terms: &[(Operand<'_>, Operand<'_>)],
        top: i64,
        big_l: i64,
    ) -> (Vec<u64>, Vec<u64>, i64, u64) {
        const W: usize = 6;
        let base = top + big_l - 64 * W as i64;
        let mut acc = [[0u64; W]; 2];
        let mut truncated = 0u64;
        let man = |o: &Operand<'_>| -> u128 {
            match o.limbs {
                [l] => (*l as u128) << 64,
                [l0, l1] => ((*l1 as u128) << 64) | *l0 as u128,
                _ => unreachable!("at most two limbs"),
            }
        };
        for (a, b) in terms {
            let (ma, mb) = (man(a), man(b));
            let (ah, al) = ((ma >> 64) as u64 as u128, ma as u64 as u128);
            let (bh, bl) = ((mb >> 64) as u64 as u128, mb as u64 as u128);
            let (ll, lh, hl, hh) = (al * bl, al * bh, ah * bl, ah * bh);
            // below 3 * 2^64
            let middle = (ll >> 64) + (lh as u64 as u128) + (hl as u64 as u128);
            // the high half of a product below 2^256
            let upper = hh + (lh >> 64) + (hl >> 64) + (middle >> 64);
            let p = [ll as u64, middle as u64, upper as u64, (upper >> 64) as u64];
            let shift = a.exp + b.exp - 256 - base;
            let acc = &mut acc[usize::from(a.neg != b.neg)];
            if shift >= 0 {
                // P 2^bit in five limbs at limb o; o + 5 <= W since P 2^shift < 2^(64 W - L)
                let (o, bit) = ((shift / 64) as usize, (shift % 64) as u32);
                let mut v = [0u64; 5];
                shl_limbs(&p, bit, &mut v);
                debug_assert!(o + 5 <= W || v[W - o..].iter().all(|l| *l == 0));
                let m = 5.min(W - o);
                let carry = add_limbs(&mut acc[o..], &v[..m]);
                debug_assert!(!carry);
            } else {
                truncated += 1;
                let drop = (-shift) as usize;
                if drop >= 256 {
                    continue;
                }
                let (q, bit) = (drop / 64, (drop % 64) as u32);
                let mut v = [0u64; 4];
                shr_limbs(&p[q..], bit, &mut v[..4 - q]);
                let carry = add_limbs(acc, &v[..4 - q]);
                debug_assert!(!carry);
            }
        }
        let [pos, neg] = acc;
        (pos.to_vec(), neg.to_vec(), base, truncated)
    }
}

/// `x = x + a` rounded to nearest; returns the ternary value.
#[inline(always)]
fn add_mid(x: &mut Float, a: &Float) -> i32 {
    tern(x.add_assign_round(a, Round::Nearest))
}

/// The radius of a product of balls before rounding: |ma| rb + |mb| ra + ra rb.
#[inline(always)]
fn prod_rad(a: &BallReal, b: &BallReal) -> Mag {
    match (a.rad.is_zero(), b.rad.is_zero()) {
        (true, true) => Mag::ZERO,
        (true, false) => Mag::of_float(&a.mid).mul_up(b.rad),
        (false, true) => Mag::of_float(&b.mid).mul_up(a.rad),
        (false, false) => Mag::of_float(&a.mid)
            .mul_up(b.rad)
            .add_up(Mag::of_float(&b.mid).mul_up(a.rad))
            .add_up(a.rad.mul_up(b.rad)),
    }
}

/// A lower bound of |m| - r (zero when it cannot be proved positive).
#[inline]
fn gap_lower(m: &Float, r: Mag) -> Mag {
    Mag::of_float_lower(m).sub_lower(r)
}

/// A bound of the logistic function 1 / (1 + exp(-v)) at `prec` bits: a lower bound for
/// `Round::Down`, an upper bound for `Round::Up`, every operation rounded so (exp(-v) the
/// opposite way, 1 + it the opposite way, the reciprocal the bound's way). An overflow of
/// exp(-v) gives +inf (down: the bound 0) or the largest finite number (up: a tiny
/// positive bound); both are bounds.
fn logistic_bound(v: &Float, prec: u32, dir: Round) -> Float {
    let inner = match dir {
        Round::Down => Round::Up,
        _ => Round::Down,
    };
    let mut e = Float::with_val(prec, -v);
    // MPFR's directed exp (`exp.rs`: by the fixed-point path where it proves it)
    super::exp::exp_in(&mut e, inner);
    e.add_assign_round(1u32, inner);
    let mut q = Float::with_val(prec, 1);
    q.div_assign_round(&e, dir);
    q
}

impl Ball {
    /// The ball `[m +- r]` that contains the interval `[lo, hi]` (`lo <= hi`): `m` the
    /// midpoint rounded to nearest at the working precision, `r` the larger distance from
    /// `m` to an end, rounded up.
    pub fn hull(&self, lo: &Float, hi: &Float) -> BallReal {
        debug_assert!(lo <= hi);
        let p = lo.prec().max(hi.prec()).max(self.prec) + 2;
        let mut m = Float::new(self.prec);
        m.assign_round(Float::with_val(p, lo + hi) / 2u32, Round::Nearest);
        let up = |v: Float| Mag::of_float(&v);
        let r = up(Float::with_val_round(p, hi - &m, Round::Up).0).max(up(Float::with_val_round(
            p,
            &m - lo,
            Round::Up,
        )
        .0));
        BallReal { mid: m, rad: r }
    }

    /// The ball arithmetic at `prec` bits ([`MIN_BALL_PREC`]..=[`MAX_PREC`]).
    pub fn new(prec: u32) -> Result<Ball> {
        if !(MIN_BALL_PREC..=MAX_PREC).contains(&prec) {
            return Err(Error::argument(
                "prec",
                format!("a ball needs {MIN_BALL_PREC}..={MAX_PREC} bits, got {prec}"),
            ));
        }
        // SAFETY: reading MPFR's exponent range.
        let emin = unsafe { mpfr::get_emin() };
        assert!(
            emin < LOW_EXP,
            "MPFR's exponent range was narrowed (emin {emin}): the ball's rounding term needs \
             emin below {LOW_EXP}"
        );
        Ok(Ball { prec })
    }

    /// `[mid +- rad]` with `mid` rounded to the working precision (the rounding added to
    /// the radius).
    pub fn ball(&self, mid: &Float, rad: Mag) -> BallReal {
        let mut m = Float::new(self.prec);
        let t = tern(m.assign_round(mid, Round::Nearest));
        let e = err(&m, t);
        BallReal {
            mid: m,
            rad: rad.add_up(e),
        }
    }
}

impl Arith for Ball {
    type Real = BallReal;

    fn kind(&self) -> Kind {
        Kind::Ball
    }
    fn prec(&self) -> u32 {
        self.prec
    }
    #[inline]
    fn zero(&self) -> BallReal {
        BallReal {
            mid: Float::new(self.prec),
            rad: Mag::ZERO,
        }
    }
    /// The midpoint rounded to nearest.
    #[inline]
    fn to_f64(&self, x: &BallReal) -> f64 {
        x.mid.to_f64()
    }
    /// `[m - r, m + r]` rounded outward (infinite ends for an infinite radius).
    fn enclose(&self, x: &BallReal) -> (f64, f64) {
        if x.rad.is_inf() || x.mid.is_nan() {
            return (f64::NEG_INFINITY, f64::INFINITY);
        }
        let r = x.rad.to_float(64);
        let mut lo = x.mid.clone();
        lo.sub_assign_round(&r, Round::Down);
        let mut hi = x.mid.clone();
        hi.add_assign_round(&r, Round::Up);
        (lo.to_f64_round(Round::Down), hi.to_f64_round(Round::Up))
    }
    #[inline]
    fn set(&self, x: &mut BallReal, a: &BallReal) {
        let t = tern(x.mid.assign_round(&a.mid, Round::Nearest));
        x.rad = a.rad.add_up(err(&x.mid, t));
    }
    #[inline]
    fn set_f64(&self, x: &mut BallReal, v: f64) {
        let t = tern(x.mid.assign_round(v, Round::Nearest));
        x.rad = err(&x.mid, t);
    }
    #[inline]
    fn add(&self, x: &mut BallReal, a: &BallReal) {
        let t = add_mid(&mut x.mid, &a.mid);
        x.rad = x.rad.add_up(a.rad).add_up(err(&x.mid, t));
    }
    #[inline]
    fn add_f64(&self, x: &mut BallReal, v: f64) {
        let t = tern(x.mid.add_assign_round(v, Round::Nearest));
        x.rad = x.rad.add_up(err(&x.mid, t));
    }
    #[inline]
    fn sub(&self, x: &mut BallReal, a: &BallReal) {
        let t = tern(x.mid.sub_assign_round(&a.mid, Round::Nearest));
        x.rad = x.rad.add_up(a.rad).add_up(err(&x.mid, t));
    }
    #[inline]
    fn mul(&self, x: &mut BallReal, a: &BallReal) {
        let r = prod_rad(x, a);
        let t = tern(x.mid.mul_assign_round(&a.mid, Round::Nearest));
        x.rad = r.add_up(err(&x.mid, t));
    }
    #[inline]
    fn mul_f64(&self, x: &mut BallReal, v: f64) {
        let r = Mag::of_f64(v).mul_up(x.rad);
        let t = tern(x.mid.mul_assign_round(v, Round::Nearest));
        x.rad = r.add_up(err(&x.mid, t));
    }
    fn div(&self, x: &mut BallReal, a: &BallReal) {
        // lower bounds of |mb| and |mb| - rb; the quotient is unbounded unless > 0
        let den_gap = gap_lower(&a.mid, a.rad);
        let r = if den_gap.is_zero() {
            Mag::INF
        } else if a.rad.is_zero() {
            x.rad.div_up(Mag::of_float_lower(&a.mid))
        } else {
            let num = Mag::of_float(&x.mid)
                .mul_up(a.rad)
                .add_up(Mag::of_float(&a.mid).mul_up(x.rad));
            num.div_up(Mag::of_float_lower(&a.mid).mul_lower(den_gap))
        };
        let t = tern(x.mid.div_assign_round(&a.mid, Round::Nearest));
        x.rad = r.add_up(err(&x.mid, t));
    }
    fn div_f64(&self, x: &mut BallReal, v: f64) {
        let r = if v == 0.0 || !v.is_finite() {
            Mag::INF
        } else {
            // |v| rounded down to 32 bits is a lower bound of the divisor
            x.rad.div_up(Mag::of_float_lower(&Float::with_val(53, v)))
        };
        let t = tern(x.mid.div_assign_round(v, Round::Nearest));
        x.rad = r.add_up(err(&x.mid, t));
    }
    #[inline]
    fn diff(&self, x: &mut BallReal, a: &BallReal, b: &BallReal) {
        let t = tern(x.mid.assign_round(&a.mid - &b.mid, Round::Nearest));
        x.rad = a.rad.add_up(b.rad).add_up(err(&x.mid, t));
    }
    #[inline]
    fn diff_f64(&self, x: &mut BallReal, a: f64, b: f64) {
        // a enters exactly (prec >= 53); one rounding of a - b
        let t0 = tern(x.mid.assign_round(a, Round::Nearest));
        debug_assert_eq!(t0, 0);
        let t = tern(x.mid.sub_assign_round(b, Round::Nearest));
        x.rad = err(&x.mid, t);
    }
    #[inline]
    fn prod(&self, x: &mut BallReal, a: &BallReal, b: &BallReal) {
        let r = prod_rad(a, b);
        let t = tern(x.mid.assign_round(&a.mid * &b.mid, Round::Nearest));
        x.rad = r.add_up(err(&x.mid, t));
    }
    #[inline]
    fn fma(&self, x: &mut BallReal, a: &BallReal, b: &BallReal) {
        let r = prod_rad(a, b).add_up(x.rad);
        let t = fma_nearest(&mut x.mid, &a.mid, &b.mid);
        x.rad = r.add_up(err(&x.mid, t));
    }
    #[inline]
    fn fma_f64(&self, x: &mut BallReal, a: &BallReal, v: f64) {
        let r = Mag::of_f64(v).mul_up(a.rad).add_up(x.rad);
        let b = Float::with_val(53, v);
        let t = fma_nearest(&mut x.mid, &a.mid, &b);
        x.rad = r.add_up(err(&x.mid, t));
    }
    #[inline]
    fn neg(&self, x: &mut BallReal) {
        rug::ops::NegAssign::neg_assign(&mut x.mid);
    }
    fn exp(&self, x: &mut BallReal) {
        let r = x.rad;
        // MPFR's correctly rounded exp (`exp.rs`: by the fixed-point path where it
        // proves the rounding, the same bits and ternary value)
        let t = tern(super::exp::exp_in(&mut x.mid, Round::Nearest));
        let e = err(&x.mid, t);
        x.rad = if r.is_zero() {
            e
        } else {
            // exp(m) <= |m'| + e; e^r - 1 <= r + r^2 for r <= 1 (the series' tail
            // sum_{k>=2} r^k / k! <= r^2 (e - 2)), else MPFR's expm1 rounded up
            let expm1 = if r.cmp_value(Mag::pow2(0)) != Ordering::Greater {
                r.mul_add_up(r, r)
            } else {
                let mut f = r.to_float(64);
                f.exp_m1_round(Round::Up);
                Mag::of_float(&f)
            };
            Mag::of_float(&x.mid).add_up(e).mul_up(expm1).add_up(e)
        };
    }
    /// erf is Lipschitz with constant 2 / sqrt(pi) < 1.1284 (its derivative
    /// 2 exp(-t^2) / sqrt(pi) is largest at 0): the radius grows by at most 1.13 r, and
    /// the midpoint's rounding adds its error (proofs-notes/ops.md).
    fn erf(&self, x: &mut BallReal) {
        let r = x.rad;
        let t = tern(x.mid.erf_round(Round::Nearest));
        let e = err(&x.mid, t);
        x.rad = if r.is_zero() {
            e
        } else {
            r.mul_up(Mag::of_f64(1.13)).add_up(e)
        };
    }
    fn pi(&self) -> BallReal {
        let (mid, t) = Float::with_val_round(self.prec, rug::float::Constant::Pi, Round::Nearest);
        let rad = err(&mid, tern(t));
        BallReal { mid, rad }
    }
    fn ln_1p(&self, x: &mut BallReal) {
        let r = if x.rad.is_zero() {
            Mag::ZERO
        } else {
            // a lower bound of 1 + m - r (> 0 needed)
            let one_m = Float::with_val_round(64, &x.mid + 1u32, Round::Down).0;
            if one_m.is_sign_negative() || one_m.is_zero() {
                Mag::INF
            } else {
                x.rad.div_up(gap_lower(&one_m, x.rad))
            }
        };
        let t = tern(x.mid.ln_1p_round(Round::Nearest));
        x.rad = r.add_up(err(&x.mid, t));
    }
    fn sqrt(&self, x: &mut BallReal) {
        let r = if x.rad.is_zero() {
            Mag::ZERO
        } else if x.mid.is_sign_negative() || x.mid.is_zero() {
            Mag::INF
        } else {
            // m - r >= 0 proved by a lower bound; r / (sqrt(m) + sqrt(m - r)) with the
            // DIVISOR a lower bound: each square root of a lower bound rounded down, and
            // their sum rounded down (proofs-notes/certify.md, the sqrt rule)
            let m_lo = Mag::of_float_lower(&x.mid);
            if m_lo.cmp_value(x.rad) == Ordering::Less {
                Mag::INF
            } else {
                let sqrt_lo = |v: Mag| {
                    // a lower bound of v as an MPFR number (exact inside MPFR's range)
                    let mut f = v.to_float_down(64);
                    f.sqrt_round(Round::Down);
                    Mag::of_float_lower(&f)
                };
                let den = sqrt_lo(m_lo).add_lower(sqrt_lo(m_lo.sub_lower(x.rad)));
                x.rad.div_up(den)
            }
        };
        let t = tern(x.mid.sqrt_round(Round::Nearest));
        x.rad = r.add_up(err(&x.mid, t));
    }
    /// x^t: a point ball (radius 0, as the config's beta enters) gets MPFR's correctly
    /// rounded power and its half ulp; a ball with a radius gets the hull of the power
    /// over [m - r, m + r] (ends widened outward at 8 more bits), whose ends are powers
    /// of the interval's ends rounded outward: y^t is increasing for odd t and for
    /// y >= 0, decreasing for even t and y <= 0, and for even t over an interval around
    /// 0 lies in [0, max(|lo|, |hi|)^t] (module docs, the a^t rule).
    fn pow_u64(&self, x: &mut BallReal, t: u64) {
        if t == 0 {
            // y^0 = 1 for every point (an infinite radius included)
            *x = self.of(1.0);
            return;
        }
        if x.rad.is_zero() {
            let tn = tern(x.mid.pow_assign_round(t, Round::Nearest));
            x.rad = err(&x.mid, tn);
            return;
        }
        if !self.is_finite(x) {
            return;
        }
        let p = self.prec + 8;
        let r = x.rad.to_float(64);
        let lo = Float::with_val_round(p, &x.mid - &r, Round::Down).0;
        let hi = Float::with_val_round(p, &x.mid + &r, Round::Up).0;
        let power = |v: &Float, dir: Round| {
            let mut f = v.clone();
            f.pow_assign_round(t, dir);
            f
        };
        let (a, b) = if t % 2 == 1 || !lo.is_sign_negative() {
            (power(&lo, Round::Down), power(&hi, Round::Up))
        } else if hi.is_sign_negative() || hi.is_zero() {
            (power(&hi, Round::Down), power(&lo, Round::Up))
        } else {
            let top = if lo.cmp_abs(&hi) == Some(Ordering::Greater) {
                &lo
            } else {
                &hi
            };
            (Float::with_val(p, 0), power(top, Round::Up))
        };
        if a.is_finite() && b.is_finite() {
            *x = self.hull(&a, &b);
        } else {
            x.rad = Mag::INF;
        }
    }
    /// The logistic function 1 / (1 + exp(-x)) over the whole ball: it is increasing, so
    /// the exact values lie in [sigma(m - r), sigma(m + r)]; each end is evaluated with
    /// rounding directed outward (`logistic_bound`), and the interval becomes a ball
    /// ([`Ball::hull`]). One occurrence of the input, where the formula's two (exp(-x)
    /// in a numerator and a denominator, or 1 + exp(-x) against 1) would be counted as
    /// independent (proofs-notes/certify.md, "One occurrence").
    fn logistic(&self, x: &mut BallReal) {
        if !self.is_finite(x) {
            // no bound on the input: sigma is in [0, 1]
            *x = self.hull(
                &Float::with_val(self.prec, 0),
                &Float::with_val(self.prec, 1),
            );
            return;
        }
        let p = self.prec + 8;
        let r = x.rad.to_float(64);
        let lo_in = Float::with_val_round(p, &x.mid - &r, Round::Down).0;
        let hi_in = Float::with_val_round(p, &x.mid + &r, Round::Up).0;
        let lo = logistic_bound(&lo_in, p, Round::Down);
        let hi = logistic_bound(&hi_in, p, Round::Up);
        *x = self.hull(&lo, &hi);
    }
    /// The midpoint as an exact ball (radius 0).
    fn point(&self, x: &BallReal) -> BallReal {
        BallReal {
            mid: x.mid.clone(),
            rad: Mag::ZERO,
        }
    }
    /// The order of the MIDPOINTS (module docs: for branches between expressions equal
    /// in the reals only).
    #[inline]
    fn cmp(&self, a: &BallReal, b: &BallReal) -> Option<Ordering> {
        a.mid.partial_cmp(&b.mid)
    }
    /// The sign of the MIDPOINT (module docs).
    #[inline]
    fn sign(&self, x: &BallReal) -> i8 {
        match x.mid.cmp0() {
            Some(Ordering::Greater) => 1,
            Some(Ordering::Less) => -1,
            _ => 0,
        }
    }
    /// The order where the balls are disjoint; `Some(Equal)` only for two exact (radius
    /// 0) equal values; `None` otherwise.
    fn decide_cmp(&self, a: &BallReal, b: &BallReal) -> Option<Ordering> {
        if !self.is_finite(a) || !self.is_finite(b) {
            return None;
        }
        if a.rad.is_zero() && b.rad.is_zero() {
            return a.mid.partial_cmp(&b.mid);
        }
        // |ma - mb| rounded toward zero (a lower bound with the exact sign)
        let d = Float::with_val_round(64, &a.mid - &b.mid, Round::Zero).0;
        if Mag::of_float_lower(&d).cmp_value(a.rad.add_up(b.rad)) == Ordering::Greater {
            d.cmp0()
        } else {
            None
        }
    }
    /// The sign where the ball excludes 0; `Some(0)` only for the exact zero.
    fn decide_sign(&self, x: &BallReal) -> Option<i8> {
        if !self.is_finite(x) {
            return None;
        }
        if x.mid.is_zero() {
            return x.rad.is_zero().then_some(0);
        }
        (Mag::of_float_lower(&x.mid).cmp_value(x.rad) == Ordering::Greater).then(|| self.sign(x))
    }
    /// A ball that contains max(u, v) for every u in `x` and v in `a`: the ball whose
    /// upper end is proved larger (it contains max(u, v): that is at least its own point
    /// and at most its upper end), else the hull of the two balls.
    fn max(&self, x: &mut BallReal, a: &BallReal) {
        if !self.is_finite(x) || !self.is_finite(a) {
            // no bound: the larger midpoint (where comparable), an infinite radius
            if a.mid > x.mid {
                x.mid.clone_from(&a.mid);
            }
            x.rad = Mag::INF;
            return;
        }
        let p = self.prec + 64;
        // each radius as an upper and a lower bound (equal inside MPFR's exponent range)
        let (r_x, r_x_lo) = (x.rad.to_float(64), x.rad.to_float_down(64));
        let (r_a, r_a_lo) = (a.rad.to_float(64), a.rad.to_float_down(64));
        let hi = |m: &Float, r: &Float, dir| Float::with_val_round(p, m + r, dir).0;
        let lo = |m: &Float, r: &Float, dir| Float::with_val_round(p, m - r, dir).0;
        // lower and upper bounds of each upper end m + r
        let (hx_d, hx_u) = (
            hi(&x.mid, &r_x_lo, Round::Down),
            hi(&x.mid, &r_x, Round::Up),
        );
        let (ha_d, ha_u) = (
            hi(&a.mid, &r_a_lo, Round::Down),
            hi(&a.mid, &r_a, Round::Up),
        );
        if ha_d >= hx_u {
            x.mid.clone_from(&a.mid);
            x.rad = a.rad;
            return;
        }
        if hx_d >= ha_u {
            return;
        }
        // hull [max(lo_x, lo_a), max(hi_x, hi_a)], rounded outward
        let l = lo(&x.mid, &r_x, Round::Down).max(&lo(&a.mid, &r_a, Round::Down));
        let h = hx_u.max(&ha_u);
        *x = self.hull(&l, &h);
    }
    #[inline]
    fn is_finite(&self, x: &BallReal) -> bool {
        x.mid.is_finite() && !x.rad.is_inf()
    }
    /// `<midpoint in MPFR's hex> +- <radius>` (the radius as [`Mag::to_exact_string`]).
    fn to_exact_string(&self, x: &BallReal) -> String {
        format!(
            "{} +- {}",
            x.mid.to_string_radix(16, None),
            x.rad.to_exact_string()
        )
    }
    fn parse_exact(&self, s: &str) -> Option<BallReal> {
        let (m, r) = s.split_once(" +- ")?;
        let mid = Float::with_val(self.prec, Float::parse_radix(m, 16).ok()?);
        Some(BallReal {
            mid,
            rad: Mag::parse_exact(r)?,
        })
    }
    /// True: the span step's Gram matrices enter exactly.
    fn exact_inputs(&self) -> bool {
        true
    }
    /// The exact value rounded once to the working precision (radius: its half ulp).
    fn of_exact(&self, v: &Float) -> BallReal {
        self.ball(v, Mag::ZERO)
    }

    /// The exact sum of the midpoint products (`MidSum`) rounded once, plus the
    /// product radii.
    fn dot(&self, x: &[BallReal], y: &[BallReal], out: &mut BallReal) {
        debug_assert_eq!(x.len(), y.len());
        let pairs = x
            .iter()
            .zip(y)
            .map(|(a, b)| (Operand::of(&a.mid), Operand::of(&b.mid), prod_rad(a, b)));
        if !MidSum::sum(pairs, &mut out.mid, &mut out.rad) {
            super::dot_by_fma(self, x, y, out);
        }
    }

    /// As [`Arith::dot`], with exact f64 entries `x`.
    fn dot_f64(&self, x: &[f64], y: &[BallReal], out: &mut BallReal) {
        debug_assert_eq!(x.len(), y.len());
        let decoded: Vec<_> = x.iter().map(|v| decode_f64(*v)).collect();
        let pairs = decoded.iter().zip(x).zip(y).map(|((a, v), b)| {
            let r = match b.rad.is_zero() {
                true => Mag::ZERO,
                false => Mag::of_f64(*v).mul_up(b.rad),
            };
            (Operand::of_decoded(a), Operand::of(&b.mid), r)
        });
        if !MidSum::sum(pairs, &mut out.mid, &mut out.rad) {
            let xs: Vec<BallReal> = x.iter().map(|v| self.of(*v)).collect();
            super::dot_by_fma(self, &xs, y, out);
        }
    }

    /// Each output one [`Arith::dot_f64`] over its column: the exact sum of the midpoint
    /// products rounded once (the trait's fma chain rounds once per row).
    fn gemv_t_f64(&self, x: &[f64], stride: usize, v: &[BallReal], out: &mut [BallReal]) {
        let mut column = vec![0.0; v.len()];
        for (j, o) in out.iter_mut().enumerate() {
            for (i, c) in column.iter_mut().enumerate() {
                *c = x[i * stride + j];
            }
            self.dot_f64(&column, v, o);
        }
    }

    /// The values and their fixed-point layout (`fixed.rs`; up to 1,024 bits).
    fn prepare(&self, m: Vec<BallReal>, cols: usize) -> Prepared<BallReal> {
        let fixed = FixedRows::new(&m, |b| &b.mid, |b| b.rad, cols, limbs_for(self.prec));
        Prepared {
            values: m,
            cols,
            fixed: fixed.map(std::sync::Arc::new),
        }
    }

    /// In fixed point against the prepared rows (`fixed.rs`): each midpoint the sum of
    /// the products rounded once; each radius the rounding, the truncation bound and
    /// sum_k (|m_k| r(v_k) + |v_k| r(m_k) + r(m_k) r(v_k)) (bounded through each row's
    /// largest entry radius), summed in f64 with its rounding bound.
    fn matvec_prepared(
        &self,
        m: &Prepared<BallReal>,
        start: usize,
        v: &[BallReal],
        out: &mut [BallReal],
    ) {
        let limbs = limbs_for(self.prec);
        let vector = fixed::Vector::new(v, |b| &b.mid, limbs);
        let (Some(f), Some(vector)) = (m.fixed(), vector) else {
            let cols = m.cols;
            return self.matvec(&m.values[start * cols..(start + out.len()) * cols], v, out);
        };
        let rads: Vec<Mag> = v.iter().map(|b| b.rad).collect();
        let radii = fixed::VectorRadii::new(&rads);
        fixed::matvec(
            f,
            &vector,
            radii.as_ref(),
            start,
            out,
            |o| &mut o.mid,
            |o, r| o.rad = r.bound.add_up(err(&o.mid, r.ternary)),
        );
    }

    fn axpy(&self, alpha: &BallReal, x: &[BallReal], y: &mut [BallReal]) {
        debug_assert_eq!(x.len(), y.len());
        for (yk, xk) in y.iter_mut().zip(x) {
            let r = prod_rad(alpha, xk).add_up(yk.rad);
            let t = fma_nearest(&mut yk.mid, &alpha.mid, &xk.mid);
            yk.rad = r.add_up(err(&yk.mid, t));
        }
    }

    fn axpy_f64(&self, alpha: &BallReal, x: &[f64], y: &mut [BallReal]) {
        debug_assert_eq!(x.len(), y.len());
        let mut xk = Float::new(53);
        for (yk, a) in y.iter_mut().zip(x) {
            rug::Assign::assign(&mut xk, *a);
            let r = if alpha.rad.is_zero() {
                yk.rad
            } else {
                Mag::of_f64(*a).mul_up(alpha.rad).add_up(yk.rad)
            };
            let t = fma_nearest(&mut yk.mid, &alpha.mid, &xk);
            yk.rad = r.add_up(err(&yk.mid, t));
        }
    }
}
