//! The radius type of [`super::Ball`]: an unsigned magnitude with a 32-bit mantissa and a
//! wide exponent, every operation rounded up (Arb's `mag_t` model, written here).
//!
//! A [`Mag`] is `man * 2^exp` with `man` in `[2^31, 2^32)` (or zero, or infinite). The
//! exponent is an `i64` clamped to `+-2^40`, far beyond MPFR's default exponent range
//! (`+-2^30`): a radius never underflows to zero (a value below `2^(MIN_EXP + 31)`
//! becomes that bound, which is larger) and overflows to [`Mag::INF`]. So a radius stays
//! an upper bound at every score gap (an f64 radius would underflow past gap ~745).

use std::cmp::Ordering;

use gmp_mpfr_sys::mpfr;
use rug::Float;
use rug::float::Round;

/// Smallest exponent kept (smaller values round up to `2^31 * 2^MIN_EXP`).
const MIN_EXP: i64 = -(1 << 40);
/// Largest exponent kept (larger values are infinite).
const MAX_EXP: i64 = 1 << 40;
/// The exponent that marks infinity.
const INF_EXP: i64 = i64::MAX;
const TOP: u64 = 1 << 31;

/// An upper bound `man * 2^exp` (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mag {
    man: u32,
    exp: i64,
}

impl Default for Mag {
    fn default() -> Self {
        Mag::ZERO
    }
}

impl Mag {
    /// Zero.
    pub const ZERO: Mag = Mag { man: 0, exp: 0 };
    /// Infinity (an unbounded radius: the ball is the whole line).
    pub const INF: Mag = Mag {
        man: u32::MAX,
        exp: INF_EXP,
    };

    /// True for zero.
    #[inline(always)]
    pub fn is_zero(self) -> bool {
        self.man == 0
    }

    /// True for infinity.
    #[inline(always)]
    pub fn is_inf(self) -> bool {
        self.exp == INF_EXP
    }

    /// `man * 2^exp` rounded up to 32 bits, clamped to the exponent range (the u64 fast
    /// path of [`Mag::round`], upward).
    #[inline(always)]
    fn normalize(man: u64, exp: i64) -> Mag {
        if man == 0 {
            return Mag::ZERO;
        }
        let lz = man.leading_zeros();
        let (mut m, mut e) = if lz >= 32 {
            (man << (lz - 32), exp - (lz - 32) as i64)
        } else {
            let shift = 32 - lz;
            let up = u64::from(man & ((1u64 << shift) - 1) != 0);
            ((man >> shift) + up, exp + shift as i64)
        };
        if m == 1 << 32 {
            m = TOP;
            e += 1;
        }
        if e > MAX_EXP {
            Mag::INF
        } else if e < MIN_EXP {
            Mag {
                man: TOP as u32,
                exp: MIN_EXP,
            }
        } else {
            Mag {
                man: m as u32,
                exp: e,
            }
        }
    }

    /// `man * 2^exp` rounded to 32 bits, up (`up`) or down, clamped to the exponent
    /// range (upward: a tiny value becomes the smallest bound, a huge one infinity;
    /// downward: a tiny value becomes zero, a huge one the largest finite bound).
    #[inline(always)]
    fn round(man: u128, exp: i64, up: bool) -> Mag {
        if man == 0 {
            return Mag::ZERO;
        }
        let bits = 128 - man.leading_zeros() as i64;
        let (mut m, mut e) = if bits > 32 {
            let shift = bits - 32;
            let mut m = (man >> shift) as u64;
            if up && man & ((1u128 << shift) - 1) != 0 {
                m += 1;
            }
            (m, exp + shift)
        } else {
            ((man as u64) << (32 - bits), exp - (32 - bits))
        };
        if m == 1 << 32 {
            m = TOP;
            e += 1;
        }
        match (e > MAX_EXP, e < MIN_EXP, up) {
            (true, _, true) => Mag::INF,
            (true, _, false) => Mag {
                man: u32::MAX,
                exp: MAX_EXP,
            },
            (_, true, true) => Mag {
                man: TOP as u32,
                exp: MIN_EXP,
            },
            (_, true, false) => Mag::ZERO,
            _ => Mag {
                man: m as u32,
                exp: e,
            },
        }
    }

    /// An exponent `e` with `self < 2^e` (`self` finite and nonzero: the mantissa is below
    /// 2^32).
    #[inline]
    pub fn exponent_bound(self) -> i64 {
        self.exp + 32
    }

    /// `2^e` (exact).
    #[inline(always)]
    pub fn pow2(e: i64) -> Mag {
        Mag::normalize(TOP, e.clamp(MIN_EXP - 64, MAX_EXP + 64) - 31)
    }

    /// An upper bound of `|v|` (infinite for a non-finite `v`).
    #[inline]
    pub fn of_f64(v: f64) -> Mag {
        if !v.is_finite() {
            return Mag::INF;
        }
        let bits = v.abs().to_bits();
        let (e, m) = ((bits >> 52) as i64, bits & ((1 << 52) - 1));
        if e == 0 {
            // subnormal (or zero): m 2^-1074
            Mag::normalize(m, -1074)
        } else {
            Mag::normalize(m | (1 << 52), e - 1075)
        }
    }

    /// An upper bound of `|x|` for an MPFR number (infinite for inf and NaN).
    #[inline]
    pub fn of_float(x: &Float) -> Mag {
        Mag::of_float_dir(x, true)
    }

    /// A lower bound of `|x|` (zero for zero; infinite for inf and NaN).
    #[inline]
    pub fn of_float_lower(x: &Float) -> Mag {
        Mag::of_float_dir(x, false)
    }

    #[inline(always)]
    fn of_float_dir(x: &Float, up: bool) -> Mag {
        if x.is_zero() {
            return Mag::ZERO;
        }
        if !x.is_finite() {
            return Mag::INF;
        }
        let raw = x.as_raw();
        // SAFETY: a regular MPFR number has ceil(prec / 64) limbs, the most significant
        // one last with its top bit set; x = 0.b1b2... 2^exp.
        let (top, rest_nonzero, exp) = unsafe {
            let n = ((*raw).prec as usize).div_ceil(64);
            let d = (*raw).d.as_ptr();
            let top = *d.add(n - 1);
            let mut rest = top & 0xffff_ffff != 0;
            for k in 0..n - 1 {
                rest |= *d.add(k) != 0;
            }
            (top, rest, (*raw).exp)
        };
        let m = (top >> 32) + u64::from(up && rest_nonzero);
        Mag::normalize(m, exp - 32)
    }

    /// This bound as an MPFR number of `prec >= 32` bits, rounded up when it leaves
    /// MPFR's exponent range (an overflow gives +inf, an underflow the smallest positive
    /// number: both still upper bounds).
    pub fn to_float(self, prec: u32) -> Float {
        if self.is_inf() {
            return Float::with_val(prec, f64::INFINITY);
        }
        let mut f = Float::with_val(prec.max(32), self.man);
        if self.man != 0 {
            // SAFETY: f is an initialised MPFR number; in-place scaling is allowed.
            unsafe {
                mpfr::mul_2si(f.as_raw_mut(), f.as_raw(), self.exp, mpfr::rnd_t::RNDU);
            }
        }
        f
    }

    /// This bound as an MPFR number of `prec >= 32` bits, rounded DOWN when it leaves
    /// MPFR's exponent range (an overflow gives the largest finite number, an underflow
    /// zero: both lower bounds), for the places that need a lower bound of a radius
    /// (proofs-notes/certify.md, "The radius type").
    pub fn to_float_down(self, prec: u32) -> Float {
        if self.is_inf() {
            return Float::with_val(prec, f64::INFINITY);
        }
        let mut f = Float::with_val(prec.max(32), self.man);
        if self.man != 0 {
            // SAFETY: f is an initialised MPFR number; in-place scaling is allowed.
            unsafe {
                mpfr::mul_2si(f.as_raw_mut(), f.as_raw(), self.exp, mpfr::rnd_t::RNDD);
            }
        }
        f
    }

    /// An upper bound of this magnitude as an f64 (+inf beyond f64's range).
    pub fn to_f64_up(self) -> f64 {
        self.to_float(32).to_f64_round(Round::Up)
    }

    /// `self + b`, rounded up.
    #[inline(always)]
    pub fn add_up(self, b: Mag) -> Mag {
        if self.is_zero() {
            return b;
        }
        if b.is_zero() {
            return self;
        }
        if self.is_inf() || b.is_inf() {
            return Mag::INF;
        }
        let (hi, lo) = if self.exp >= b.exp {
            (self, b)
        } else {
            (b, self)
        };
        let d = hi.exp - lo.exp;
        if d >= 32 {
            // lo < 2^(lo.exp + 32) <= 2^hi.exp: one unit of hi's mantissa
            Mag::normalize(hi.man as u64 + 1, hi.exp)
        } else {
            Mag::normalize(((hi.man as u64) << d) + lo.man as u64, lo.exp)
        }
    }

    /// `self + b`, rounded DOWN (a lower bound of the sum, for divisors).
    #[inline(always)]
    pub fn add_lower(self, b: Mag) -> Mag {
        if self.is_zero() {
            return b;
        }
        if b.is_zero() {
            return self;
        }
        if self.is_inf() || b.is_inf() {
            return Mag::INF;
        }
        let (hi, lo) = if self.exp >= b.exp {
            (self, b)
        } else {
            (b, self)
        };
        let d = hi.exp - lo.exp;
        if d >= 64 {
            // lo is below one unit of hi's mantissa: hi itself is a lower bound
            hi
        } else {
            Mag::round(((hi.man as u128) << d) + lo.man as u128, lo.exp, false)
        }
    }

    /// `self * b`, rounded up.
    #[inline(always)]
    pub fn mul_up(self, b: Mag) -> Mag {
        if self.is_zero() || b.is_zero() {
            return Mag::ZERO;
        }
        if self.is_inf() || b.is_inf() {
            return Mag::INF;
        }
        Mag::normalize(self.man as u64 * b.man as u64, self.exp + b.exp)
    }

    /// `self * b` rounded DOWN (for lower bounds; infinity times nonzero stays infinite).
    #[inline(always)]
    pub fn mul_lower(self, b: Mag) -> Mag {
        if self.is_zero() || b.is_zero() {
            return Mag::ZERO;
        }
        if self.is_inf() || b.is_inf() {
            return Mag::INF;
        }
        Mag::round(self.man as u128 * b.man as u128, self.exp + b.exp, false)
    }

    /// A lower bound of `self - b` (zero where `self <= b`; `self` must be finite).
    #[inline]
    pub fn sub_lower(self, b: Mag) -> Mag {
        if b.is_zero() {
            return self;
        }
        if self.cmp_value(b) != Ordering::Greater {
            return Mag::ZERO;
        }
        // self > b and both normalized: self.exp >= b.exp
        let d = self.exp - b.exp;
        if d >= 64 {
            // b < 2^(b.exp + 32) <= one unit of self's mantissa
            Mag::round(self.man as u128 - 1, self.exp, false)
        } else {
            let v = ((self.man as u128) << d) - b.man as u128;
            Mag::round(v, b.exp, false)
        }
    }

    /// `self * b + c`, rounded up.
    #[inline(always)]
    pub fn mul_add_up(self, b: Mag, c: Mag) -> Mag {
        self.mul_up(b).add_up(c)
    }

    /// `self / b` rounded up, where `b` is a LOWER bound of the divisor (infinite for a
    /// zero `b`).
    #[inline]
    pub fn div_up(self, b: Mag) -> Mag {
        if self.is_zero() {
            return Mag::ZERO;
        }
        if b.is_zero() || self.is_inf() {
            return Mag::INF;
        }
        if b.is_inf() {
            // self / inf = 0, but b is a lower bound: keep a sound tiny bound
            return Mag::normalize(1, MIN_EXP);
        }
        let num = (self.man as u64) << 32;
        let q = num.div_ceil(b.man as u64);
        Mag::normalize(q, self.exp - b.exp - 32)
    }

    /// The larger of two bounds.
    #[inline]
    pub fn max(self, b: Mag) -> Mag {
        if self.cmp_value(b) == Ordering::Less {
            b
        } else {
            self
        }
    }

    /// Compare the values of two magnitudes.
    pub fn cmp_value(self, b: Mag) -> Ordering {
        match (self.is_zero(), b.is_zero()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        // normalized: the exponent orders first (infinity has the largest)
        self.exp.cmp(&b.exp).then(self.man.cmp(&b.man))
    }

    /// Exact text: `0`, `inf`, or `<man in hex>p<exp>`.
    pub fn to_exact_string(self) -> String {
        if self.is_zero() {
            "0".into()
        } else if self.is_inf() {
            "inf".into()
        } else {
            format!("{:08x}p{}", self.man, self.exp)
        }
    }

    /// Parse [`Mag::to_exact_string`]'s output (a normalized mantissa in range).
    pub fn parse_exact(s: &str) -> Option<Mag> {
        match s {
            "0" => return Some(Mag::ZERO),
            "inf" => return Some(Mag::INF),
            _ => {}
        }
        let (m, e) = s.split_once('p')?;
        let man = u32::from_str_radix(m, 16).ok()?;
        let exp: i64 = e.parse().ok()?;
        (man as u64 >= TOP && (MIN_EXP..=MAX_EXP).contains(&exp)).then_some(Mag { man, exp })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{self, Stream};

    fn exact(m: Mag) -> Float {
        m.to_float(64)
    }

    /// |a - b| / |a| in f64.
    fn rel(a: &Float, b: &Float) -> f64 {
        let d = Float::with_val(256, a - b);
        (d / a).abs().to_f64()
    }

    /// Every operation's result is >= the exact result and within 2^-30 of it relatively
    /// (two roundings up of 2^-31 each at most), on random values over a wide exponent
    /// range, including results past MPFR's own range boundaries being clamped upward.
    #[test]
    fn operations_round_up_and_stay_tight() {
        let mut r = rng::stream(41, Stream::Init);
        let draw = |r: &mut _| {
            let e = (rng::uniform(r) * 4000.0 - 2000.0) as i64;
            let v = Mag::of_f64(1.0 + rng::uniform(r));
            Mag::normalize(v.man as u64, v.exp + e)
        };
        for _ in 0..20_000 {
            let (a, b) = (draw(&mut r), draw(&mut r));
            let (fa, fb) = (exact(a), exact(b));
            let checks = [
                (a.add_up(b), Float::with_val(256, &fa + &fb)),
                (a.mul_up(b), Float::with_val(256, &fa * &fb)),
                (a.div_up(b), Float::with_val(256, &fa / &fb)),
            ];
            // lower bounds: at most the exact value, within 2^-30 relatively (the
            // difference only where it is not tiny against the operands)
            let low = Float::with_val(256, exact(a.mul_lower(b)));
            let want = Float::with_val(256, &fa * &fb);
            assert!(low <= want && rel(&want, &low) <= 2f64.powi(-30));
            let low = Float::with_val(256, exact(a.add_lower(b)));
            let want = Float::with_val(256, &fa + &fb);
            assert!(
                low <= want && rel(&want, &low) <= 2f64.powi(-30),
                "add_lower"
            );
            let (big, small) = if fa > fb { (a, b) } else { (b, a) };
            let d = Float::with_val(256, exact(big) - exact(small));
            let low = Float::with_val(256, exact(big.sub_lower(small)));
            assert!(low <= d, "sub_lower is a lower bound");
            if d > Float::with_val(256, exact(big) / 1024) {
                assert!(rel(&d, &low) <= 2f64.powi(-30));
            }
            for (k, (got, want)) in checks.into_iter().enumerate() {
                let g = Float::with_val(256, exact(got));
                assert!(g >= want, "op {k} rounds up");
                let rel = rel(&want, &g);
                assert!(rel <= 2f64.powi(-30), "op {k}: rel {rel}");
            }
        }
    }

    /// Upper and lower bounds of MPFR numbers bracket them; f64 bounds too.
    #[test]
    fn conversions_bracket_the_value() {
        let mut r = rng::stream(42, Stream::Init);
        for _ in 0..5000 {
            let v = (rng::uniform(&mut r) - 0.5)
                * 2f64.powi((rng::uniform(&mut r) * 200.0) as i32 - 100);
            let x = Float::with_val(200, v) / 3;
            let (up, lo) = (Mag::of_float(&x), Mag::of_float_lower(&x));
            assert!(exact(up) >= x.clone().abs() && exact(lo) <= x.clone().abs());
            assert!(exact(Mag::of_f64(v)) >= v.abs());
        }
        assert!(Mag::of_f64(f64::from_bits(1)).to_f64_up() >= f64::from_bits(1));
        assert_eq!(Mag::pow2(-5).to_f64_up(), 2f64.powi(-5));
        let tiny = Mag::pow2(-(1 << 35));
        assert!(
            !tiny.is_zero() && tiny.to_float(64) > 0,
            "no underflow to 0"
        );
        assert!(Mag::pow2(1 << 41).is_inf());
        // beyond MPFR's exponent range: `to_float` rounds up, `to_float_down` down
        let below = Mag::pow2(-(1i64 << 35));
        assert!(below.to_float(64) > 0 && below.to_float_down(64) == 0);
        let above = Mag::pow2(1i64 << 35);
        assert!(above.to_float(64).is_infinite());
        let top = above.to_float_down(64);
        assert!(top.is_finite() && top > 0);
        let mid = Mag::of_f64(0.3);
        assert_eq!(mid.to_float(64), mid.to_float_down(64));
        let s = Mag::of_f64(0.3).to_exact_string();
        assert_eq!(Mag::parse_exact(&s), Some(Mag::of_f64(0.3)));
    }
}
