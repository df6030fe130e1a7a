//! exp(x) correctly rounded to nearest, in fixed point, for MPFR numbers of 64 to
//! [`MAX_PREC`] bits with `2^-64 <= |x| < 2^21`: the softmax's exponentials of the MPFR
//! twin and of the ball midpoints, about four times cheaper than `mpfr_exp` at 128 and
//! 256 bits. Where it cannot PROVE the rounding it answers `None` and the caller calls
//! MPFR, so its results are MPFR's, bit for bit, with the same ternary value
//! (proofs-notes/certify.md, "Fast exp").
//!
//! # The evaluation
//! With `F = 64 w` fraction bits, `w = ceil((p + 64) / 64)` (`p` the precision; a unit `u
//! = 2^-F`), `x` is read exactly in fixed point (its last bit is at or above `2^(-63 - p)`
//! > `2^-F`), `k = floor(x / ln 2)` and `r = x - k ln 2` in `[0, ln 2)` with ln 2 to `F +
//! 64` bits (`|k| < 2^22`: an error below `2^-(F + 42)`), truncated to `F` bits: `|r~ -
//! r| < 1.001 u`. With `r = j1 2^-8 + j2 2^-16 + j3 2^-24 + r4`, `r4 < 2^-24`:
//!
//! ```text
//! exp(r) = T1[j1] T2[j2] T3[j3] sum_{n <= N} r4^n / n!    (Tm[j] = exp(j 2^(-8 m)))
//! ```
//!
//! `N` the least with `24 (N + 1) + log2((N + 1)!) >= F + 1` (the tail below `u / 2`), the
//! series by Horner's rule. Every table entry, coefficient and product is truncated
//! (rounded toward zero), so each computed value is at most its exact value and above it
//! minus: `2.51 u` for the series (`2 u` per Horner step damped by `r4`, plus the tail), `5
//! u` for `T1 T2`, `8.02 u` for `T1 T2 T3`, `14.1 u` for the product with the series; with
//! the reduction's `2.01 u` (`exp(r~) / exp(r) <= exp(1.001 u)`), the computed `Y` is
//! within `16.2 u` of `exp(r)`.
//!
//! # Rounding: Ziv's test
//! With `E = 32 u` (twice the bound), `Y` decides the rounding when the `d` bits it drops
//! to keep `p` (`d >= 65`) are, below the round bit, more than `E` from both `0` and the
//! round bit's weight: then `exp(r)` and `Y` round to the same `p`-bit number, which is
//! not within `E` of `Y`, so the ternary value (the side of `exp(x)` it lies on) is
//! proved too. Otherwise (a chance of about `2^-58` per call) MPFR decides.

use std::cmp::Ordering;
use std::sync::OnceLock;

use gmp_mpfr_sys::mpfr;
use rug::Float;
use rug::float::Round;

use super::fixed;
use super::limbs::{add_limbs, cmp_limbs, mul_limbs, shl_limbs, shr_limbs, sub_limbs};

/// Fraction limbs at most (`F <= 512` bits).
const MAX_W: usize = 8;
/// Largest precision the fixed-point path takes (64 guard bits under `F`).
pub const MAX_PREC: u32 = 64 * MAX_W as u32 - 64;
/// Smallest precision it takes (below it MPFR's own exp is as cheap).
pub const MIN_PREC: u32 = 64;
/// The margin of Ziv's test, in units of `2^-F` (module docs: twice the error bound).
const MARGIN: u64 = 32;
/// Bits per table level, and levels.
const TABLE_BITS: u32 = 8;
const LEVELS: usize = 3;

/// The constants of one limb count `w`, every value truncated to `F = 64 w` fraction
/// bits in `w + 1` limbs (the last one the integer part).
struct Consts {
    /// ln 2 to `F + 64` fraction bits (`w + 1` limbs, no integer part).
    ln2: Vec<u64>,
    /// `tables[m][j] = exp(j 2^(-8 (m + 1)))`, `w + 1` limbs each.
    tables: [Vec<u64>; LEVELS],
    /// `1 / n!` for `n = 0..=N`, `w + 1` limbs each.
    coef: Vec<u64>,
}

impl Consts {
    fn new(w: usize) -> Consts {
        let f = 64 * w as u32;
        let work = f + 256;
        let trunc = |v: Float, frac: u32, limbs: usize| -> Vec<u64> {
            let scaled = v << frac;
            let int = scaled.to_integer_round(Round::Down).expect("finite").0;
            let mut out = int.to_digits::<u64>(rug::integer::Order::Lsf);
            out.resize(limbs, 0);
            debug_assert!(out.len() == limbs);
            out
        };
        let ln2 = trunc(
            Float::with_val(work, rug::float::Constant::Log2),
            f + 64,
            w + 1,
        );
        let tables = std::array::from_fn(|m| {
            let step = TABLE_BITS * (m as u32 + 1);
            (0..1u32 << TABLE_BITS)
                .flat_map(|j| {
                    let v = (Float::with_val(work, j) >> step).exp();
                    trunc(v, f, w + 1)
                })
                .collect()
        });
        // N: 24 (N + 1) + log2((N + 1)!) >= F + 1
        let mut n = 0u32;
        let mut log_fact = 0f64;
        loop {
            log_fact += ((n + 1) as f64).log2();
            if (LEVELS as u32 * TABLE_BITS) as f64 * (n + 1) as f64 + log_fact >= (f + 1) as f64 {
                break;
            }
            n += 1;
        }
        let mut fact = Float::with_val(work, 1);
        let mut coef = Vec::new();
        for k in 0..=n {
            if k > 0 {
                fact *= k;
            }
            coef.extend(trunc(Float::with_val(work, 1) / &fact, f, w + 1));
        }
        Consts { ln2, tables, coef }
    }

    /// The constants of `w` limbs, made on first use.
    ///
    /// They are made under MPFR's widest exponent range (the range is the calling
    /// thread's; restored after): a caller's narrowed range would otherwise underflow
    /// the small table entries and coefficients, or overflow their scaling, and the
    /// wrong constants would be kept for the whole process.
    fn of(w: usize) -> &'static Consts {
        static ALL: [OnceLock<Consts>; MAX_W + 1] = [const { OnceLock::new() }; MAX_W + 1];
        ALL[w].get_or_init(|| Consts::in_widest_range(w))
    }

    /// [`Consts::new`] under MPFR's widest exponent range, the calling thread's range
    /// restored after.
    fn in_widest_range(w: usize) -> Consts {
        // SAFETY: reading and setting the calling thread's MPFR exponent range; the
        // widest range is valid, and the old one is put back before returning.
        let (emin, emax) = unsafe { (mpfr::get_emin(), mpfr::get_emax()) };
        unsafe {
            mpfr::set_emin(mpfr::get_emin_min());
            mpfr::set_emax(mpfr::get_emax_max());
        }
        let c = Consts::new(w);
        unsafe {
            mpfr::set_emin(emin);
            mpfr::set_emax(emax);
        }
        c
    }
}

/// `floor(a b / 2^F)` of two `N`-limb fixed-point numbers (`F = 64 (N - 1)` fraction
/// bits; the product's integer part below 2^64): the exact `2N`-limb product
/// (`ball::mul_limbs`), its limbs `N - 1 .. 2N - 1` kept. Sized at compile time for each
/// `N` (the loops unroll; no copy of variable length).
#[inline(always)]
fn mul_fix_n<const N: usize>(a: &[u64; N], b: &[u64; N]) -> [u64; N] {
    let mut prod = [[0u64; N]; 2];
    let flat = prod.as_flattened_mut();
    mul_limbs(a, b, flat);
    debug_assert!(
        flat[2 * N - 1] == 0,
        "the product's integer part is below 2^64"
    );
    let mut out = [0u64; N];
    out.copy_from_slice(&flat[N - 1..2 * N - 1]);
    out
}

/// The series by Horner's rule and its product with the three table entries (module
/// docs), in `N = w + 1` limbs: `((T1[j1] T2[j2]) T3[j3]) S`, each product truncated
/// ([`mul_fix_n`]); the result in the first `N` limbs.
fn evaluate<const N: usize>(rf: &[u64], idx: [usize; LEVELS], c: &Consts) -> [u64; MAX_W + 1] {
    let limbs = |v: &[u64]| -> [u64; N] { v[..N].try_into().expect("N limbs") };
    let n_terms = c.coef.len() / N;
    let coef = |n: usize| limbs(&c.coef[n * N..(n + 1) * N]);
    let r = limbs(rf);
    let mut s = coef(n_terms - 1);
    for n in (0..n_terms - 1).rev() {
        s = mul_fix_n(&s, &r);
        let carry = add_limbs(&mut s, &coef(n));
        debug_assert!(!carry);
    }
    let entry = |m: usize| limbs(&c.tables[m][idx[m] * N..(idx[m] + 1) * N]);
    let t12 = mul_fix_n(&entry(0), &entry(1));
    let y = mul_fix_n(&mul_fix_n(&t12, &entry(2)), &s);
    let mut out = [0u64; MAX_W + 1];
    out[..N].copy_from_slice(&y);
    out
}

/// `v * k` for a small `k` into `out` (`out.len() = v.len() + 1`).
fn mul_small(v: &[u64], k: u64, out: &mut [u64]) {
    let mut carry = 0u64;
    for (o, &x) in out.iter_mut().zip(v) {
        let t = x as u128 * k as u128 + carry as u128;
        *o = t as u64;
        carry = (t >> 64) as u64;
    }
    out[v.len()] = carry;
}

/// `x = exp(x)` rounded in `mode` at `x`'s precision, with MPFR's ternary value as an
/// ordering of the result against the exact value: MPFR's `exp_round`, bit for bit, by
/// the fixed-point evaluation where it proves the rounding, else by MPFR itself.
pub(super) fn exp_in(x: &mut Float, mode: Round) -> Ordering {
    exp_round(x, mode).unwrap_or_else(|| x.exp_round(mode))
}

/// The fixed-point part of [`exp_in`]: the result where the evaluation proves it (module
/// docs; down and toward zero, up and away from zero coincide for the positive exp);
/// `None`, `x` unchanged, where it does not (outside `64..=`[`MAX_PREC`] bits, `|x|`
/// outside `[2^-64, 2^21)`, a result outside MPFR's exponent range, Ziv's test
/// undecided).
fn exp_round(x: &mut Float, mode: Round) -> Option<Ordering> {
    let p = x.prec();
    if !(MIN_PREC..=MAX_PREC).contains(&p) {
        return None;
    }
    let (neg, e, xl) = fixed::parts(x).ok()??;
    if !(-63..=21).contains(&e) {
        return None;
    }
    let w = (p as usize + 64).div_ceil(64);
    let c = Consts::of(w);
    let f = 64 * w as i64;
    // |x| in fixed point with F + 64 fraction bits (w + 2 limbs: one integer limb)
    let mut ax = [0u64; MAX_W + 2];
    // scale 64: out = floor(|x| 2^(64 (w + 2) - 64)) = floor(|x| 2^(F + 64))
    if fixed::place(xl, e, 64, &mut ax[..w + 2]) {
        return None; // bits below 2^-(F + 64): cannot happen for |x| >= 2^-64
    }
    // k = floor(x / ln 2), estimated in f64 and corrected
    let top = (xl[xl.len() - 1] as f64) * 2f64.powi(e as i32 - 64);
    let xf = if neg { -top } else { top };
    let mut k = (xf * std::f64::consts::LOG2_E).floor() as i64;
    let mut r = [0u64; MAX_W + 2];
    let mut kl = [0u64; MAX_W + 3];
    // ln 2 as held (F + 64 fraction bits) in the w + 2 limbs of r
    let mut ln2 = [0u64; MAX_W + 2];
    ln2[..w + 1].copy_from_slice(&c.ln2);
    let mut tries = 0;
    loop {
        tries += 1;
        if tries > 4 {
            return None;
        }
        // r = (+-|x|) - k ln 2 as P - Q with P, Q >= 0
        mul_small(&c.ln2, k.unsigned_abs(), &mut kl[..w + 2]);
        let (pp, qq): (&[u64], &[u64]) = match (neg, k >= 0) {
            (false, true) => (&ax[..w + 2], &kl[..w + 2]),
            (true, false) => (&kl[..w + 2], &ax[..w + 2]),
            (false, false) => {
                // x >= 0, k < 0: r = |x| + |k| ln 2 >= ln 2: k too small
                k += 1;
                continue;
            }
            (true, true) => {
                // x < 0, k >= 0: r < 0
                k -= 1;
                continue;
            }
        };
        if cmp_limbs(pp, qq) == Ordering::Less {
            k -= 1;
            continue;
        }
        r[..w + 2].copy_from_slice(pp);
        sub_limbs(&mut r[..w + 2], qq);
        // r < ln 2 (as held)
        if cmp_limbs(&r[..w + 2], &ln2[..w + 2]) != Ordering::Less {
            k += 1;
            continue;
        }
        break;
    }
    // r~: F fraction bits (drop the lowest limb), w + 1 limbs, integer part 0
    let mut rf = [0u64; MAX_W + 1];
    rf[..w].copy_from_slice(&r[1..w + 1]);
    // the table indices from the top fraction limb, r4 below 2^-24
    let hi = rf[w - 1];
    let idx = [
        (hi >> 56) as usize,
        ((hi >> 48) & 0xff) as usize,
        ((hi >> 40) & 0xff) as usize,
    ];
    rf[w - 1] = hi & ((1u64 << 40) - 1);
    let y = match w {
        2 => evaluate::<3>(&rf, idx, c),
        3 => evaluate::<4>(&rf, idx, c),
        4 => evaluate::<5>(&rf, idx, c),
        5 => evaluate::<6>(&rf, idx, c),
        6 => evaluate::<7>(&rf, idx, c),
        7 => evaluate::<8>(&rf, idx, c),
        _ => evaluate::<9>(&rf, idx, c),
    };
    round_into(&y[..w + 1], f, k, p, mode, x)
}

/// Round `Y 2^(k - F)` (`Y` the `w + 1` limbs `y`, within `MARGIN / 2` units of the
/// exact value) to `p` bits into `x` in `mode` (to nearest, down or up; the value is
/// positive, so toward zero is down and away from zero up) where Ziv's test decides
/// (module docs); the ordering of the result against the exact value.
fn round_into(y: &[u64], f: i64, k: i64, p: u32, mode: Round, x: &mut Float) -> Option<Ordering> {
    let top_limb = y.iter().rposition(|l| *l != 0)?;
    let bitlen = 64 * top_limb as i64 + 64 - y[top_limb].leading_zeros() as i64;
    let d = bitlen - p as i64; // bits dropped
    if d < 8 {
        return None;
    }
    // to nearest, L = Y mod 2^(d - 1) (below the round bit); directed, L = Y mod 2^d:
    // MARGIN < L < 2^bits - MARGIN, else undecided (a boundary within the margin)
    let nearest = matches!(mode, Round::Nearest);
    let bits = if nearest { d - 1 } else { d };
    let (q, b) = ((bits / 64) as usize, (bits % 64) as u32);
    let low_mask = |i: usize| -> u64 {
        if i < q {
            u64::MAX
        } else if i == q {
            (1u64 << b).wrapping_sub(1)
        } else {
            0
        }
    };
    let low = |i: usize| y.get(i).copied().unwrap_or(0) & low_mask(i);
    let above_margin = (1..=q).any(|i| low(i) != 0) || low(0) > MARGIN;
    // 2^bits - 1 - L: the complement of L in `bits` bits
    let comp = |i: usize| !y.get(i).copied().unwrap_or(0) & low_mask(i);
    let below_top = (1..=q).any(|i| comp(i) != 0) || comp(0) >= MARGIN;
    if !(above_margin && below_top) {
        return None;
    }
    let up = match mode {
        Round::Nearest => (y[(d - 1) as usize / 64] >> ((d - 1) % 64)) & 1 == 1,
        Round::Down | Round::Zero => false,
        _ => true,
    };
    // m = floor(Y / 2^d) (+ 1 when rounding up): p bits, or p + 1 after a carry
    let n = (p as usize).div_ceil(64);
    let (dq, db) = ((d / 64) as usize, (d % 64) as u32);
    let mut m = [0u64; MAX_W + 2];
    let src = &y[dq..];
    shr_limbs(src, db, &mut m[..src.len()]);
    let mut exp = bitlen - f + k;
    if up && add_limbs(&mut m[..n + 1], &[1]) {
        return None;
    }
    let mbits = {
        let tl = m.iter().rposition(|l| *l != 0)?;
        64 * tl as i64 + 64 - m[tl].leading_zeros() as i64
    };
    if mbits == p as i64 + 1 {
        // rounded up to a power of two: 2^p -> 2^(p - 1) at the next exponent
        m.iter_mut().for_each(|l| *l = 0);
        m[(p as usize - 1) / 64] = 1u64 << ((p - 1) % 64);
        exp += 1;
    } else if mbits != p as i64 {
        return None;
    }
    // SAFETY: reading MPFR's exponent range.
    let (emin, emax) = unsafe { (mpfr::get_emin(), mpfr::get_emax()) };
    if exp < emin || exp > emax {
        return None;
    }
    // the p bits at the top of n limbs
    let mut limbs = [0u64; MAX_W + 2];
    shl_limbs(&m[..n], (64 * n as u32 - p) % 64, &mut limbs[..n + 1]);
    let raw = x.as_raw_mut();
    // SAFETY: `x` is a regular MPFR number of precision p with n initialised limbs;
    // writing a normalised mantissa (top bit set, the bits below p zero), a positive
    // sign and an exponent inside the current range gives a regular number.
    unsafe {
        let d = std::slice::from_raw_parts_mut((*raw).d.as_ptr(), n);
        d.copy_from_slice(&limbs[..n]);
        (*raw).exp = exp;
        (*raw).sign = 1;
    }
    Some(if up {
        Ordering::Greater
    } else {
        Ordering::Less
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{self, Stream};

    /// The fixed-point exp gives MPFR's result and ternary value, bit for bit, in every
    /// rounding mode (to nearest, down, up, toward zero), at 64 to
    /// 448 bits, on random arguments over the whole domain (both signs, |x| from 2^-64
    /// to 2^21), arguments near multiples of ln 2 (r near 0 and near ln 2, where the
    /// table index and the binade change) and near the domain's ends; and it decides
    /// (does not fall back) for nearly all of them.
    #[test]
    fn matches_mpfr_bit_for_bit() {
        let mut r = rng::stream(68, Stream::Init);
        let (mut fast, mut total) = (0u32, 0u32);
        for p in [
            64u32, 65, 100, 127, 128, 129, 191, 192, 200, 255, 256, 257, 320, 384, 448,
        ] {
            let ln2 = Float::with_val(p + 64, rug::float::Constant::Log2);
            for case in 0..600 {
                let u = rng::uniform(&mut r);
                let sign = if rng::uniform(&mut r) < 0.5 { -1 } else { 1 };
                let mut x = match case % 4 {
                    0 => {
                        // random mantissa, exponent -63..=21
                        let e = (rng::uniform(&mut r) * 85.0) as i32 - 63;
                        let mut m = Float::with_val(p, u);
                        m += Float::with_val(p, rng::uniform(&mut r)) >> 60u32;
                        Float::with_val(p, m << e) * sign
                    }
                    1 => {
                        // k ln 2 + tiny: r near 0 (or near ln 2 from below)
                        let k = ((rng::uniform(&mut r) * 2000.0) as i32 - 1000).max(1) * sign;
                        let tiny = Float::with_val(p, u) >> (p / 2);
                        Float::with_val(p, &ln2 * k) + tiny * sign
                    }
                    2 => {
                        // a table boundary: j 2^-8 + tiny
                        let j = (u * 177.0) as u32;
                        Float::with_val(p, j) / 256u32 + (Float::with_val(p, u) >> 200u32)
                    }
                    _ => {
                        // the domain's ends
                        let e = if u < 0.5 { -63 } else { 20 };
                        Float::with_val(p, 1.0 + u) << e
                    }
                };
                if x.is_zero() {
                    x = Float::with_val(p, 1);
                }
                let mode = [Round::Nearest, Round::Down, Round::Up, Round::Zero]
                    [case % 4 / 2 * 2 + (case / 4) % 2];
                let mut want = x.clone();
                let tw = want.exp_round(mode);
                let mut got = x.clone();
                total += 1;
                match exp_round(&mut got, mode) {
                    Some(tg) => {
                        fast += 1;
                        assert_eq!(got, want, "p {p}, x {x}, {mode:?}");
                        assert_eq!(got.prec(), p);
                        assert_eq!(tg, tw, "ternary, p {p}, x {x}, {mode:?}");
                    }
                    None => assert_eq!(got, x, "unchanged on fallback"),
                }
            }
        }
        assert!(
            fast as f64 >= 0.99 * total as f64,
            "{fast} of {total} decided"
        );
    }

    /// Ziv's test declines where `Y` is within the margin of a rounding boundary: just
    /// above a representable number (`L <= MARGIN`) and just below a midpoint (`L >=
    /// 2^(d - 1) - MARGIN`), at 128 bits (w = 3: `d = 65`); and decides one unit further.
    #[test]
    fn ziv_declines_near_a_boundary() {
        let (w, p) = (3usize, 128u32);
        let f = 64 * w as i64;
        // Y = 2^F + L: one at F fraction bits, d = F + 1 - p = 65 bits dropped
        let with_low = |low: u64| [low, 0, 0, 1];
        let run = |y: [u64; 4]| {
            let mut x = Float::with_val(p, 1);
            round_into(&y, f, 0, p, Round::Nearest, &mut x)
        };
        assert_eq!(run(with_low(MARGIN)), None);
        assert_eq!(run(with_low(MARGIN + 1)), Some(Ordering::Less));
        // L = 2^64 - 1 - c: c < MARGIN declines; L here is y[0] as a whole
        assert_eq!(run(with_low(u64::MAX - (MARGIN - 1))), None);
        assert_eq!(run(with_low(u64::MAX - MARGIN)), Some(Ordering::Less));
    }

    /// The constants do not depend on the exponent range in force when they are made:
    /// under a narrowed range (emin = -5, emax = 150), [`Consts::of`]'s maker gives the
    /// constants of the default range, bit for bit, and puts the narrowed range back (a
    /// narrowed range underflowed the small entries or panicked, and `of` keeps what
    /// it first made for the whole process).
    #[test]
    fn constants_ignore_a_narrowed_exponent_range() {
        let want = Consts::new(3);
        // SAFETY: this thread's range, restored below.
        let (emin, emax) = unsafe { (mpfr::get_emin(), mpfr::get_emax()) };
        unsafe {
            mpfr::set_emin(-5);
            mpfr::set_emax(150);
        }
        let got = Consts::in_widest_range(3);
        let kept = unsafe { (mpfr::get_emin(), mpfr::get_emax()) };
        unsafe {
            mpfr::set_emin(emin);
            mpfr::set_emax(emax);
        }
        assert_eq!(kept, (-5, 150), "the caller's range is put back");
        assert_eq!(got.ln2, want.ln2);
        assert_eq!(got.tables, want.tables);
        assert_eq!(got.coef, want.coef);
    }

    /// Outside the domain it declines: 0, tiny and huge arguments, inf, NaN, 53 bits.
    #[test]
    fn declines_outside_its_domain() {
        for v in [0.0, 1e-30, 3e6, -3e6, f64::INFINITY, f64::NAN] {
            let mut x = Float::with_val(128, v);
            assert_eq!(exp_round(&mut x, Round::Nearest), None, "{v}");
        }
        assert_eq!(
            exp_round(&mut Float::with_val(53, 1.5), Round::Nearest),
            None
        );
        assert_eq!(
            exp_round(&mut Float::with_val(MAX_PREC + 1, 1.5), Round::Nearest),
            None
        );
    }
}
