//! Matrix-vector products of MPFR numbers in fixed point, against a matrix prepared once
//! (the span step's constant Gram matrices): the kernel of [`super::Ball`]'s and the
//! MPFR twin's `matvec_prepared` (proofs-notes/certify.md, "Prepared matrices").
//!
//! # The representation
//! With `L` limbs of 64 bits, a row `i` of the matrix is held at a scale `2^s_i` (`s_i`
//! the largest MPFR exponent of the row: every `|entry| < 2^s_i`) as integers `M_ik <
//! 2^(64 L)`, `|G_ik| = (M_ik + t_ik) 2^(s_i - 64 L)` with `0 <= t_ik < 1` (truncated
//! toward zero; `t = 0` where the entry's bits fit), a sign, and `|G_ik| / 2^s_i` rounded
//! up to f64 (for the radius pass). A vector is converted the same way at its own scale
//! `2^s_v` at every product. `L = ceil((prec + 64) / 64)`: 64 bits beyond the working
//! precision.
//!
//! # The product
//! `sum_k (+-M_ik)(+-V_k)` in integers: each product of two `L`-limb numbers keeps its
//! partial products `m_a v_b 2^(64 (a + b))` with `a + b >= L - 1` (the dropped ones are
//! below `L (L - 1) / 2 * 2^(64 L)`), each added as two 64-bit halves into `u128` slots
//! without carrying (positive and negative products apart, or, for 2 to 6 limbs, in one
//! set of slots modulo 2^128: the same integer, `accumulate_signed`); the carries are
//! resolved once per row and the sum is rounded ONCE to the working precision. So
//!
//! ```text
//! |G_i v - mid_i| <= e + cols (L (L - 1) / 2 + 2) 2^(s_i + s_v - 64 L)
//! ```
//!
//! with `e` the final rounding (the ternary value's half ulp): per `k`, `|G v - G~ v~| <=
//! |G - G~| |v| + |G~| |v - v~| < 2 * 2^(s_i + s_v - 64 L)`, and the dropped partial
//! products. At 128 bits (`L = 3`) and 161 columns that is below `2^(s_i + s_v - 182)`.
//! The bits do not depend on the thread count (each row is one sum).

use gmp_mpfr_sys::mpfr;
use rayon::prelude::*;
use rug::Float;

use super::limbs::cmp_limbs;
use super::mag::Mag;

/// The largest limb count the fixed kernels take (1,024 bits of working precision).
pub const MAX_LIMBS: usize = 18;

/// The limb count for a working precision: 64 bits beyond it.
pub fn limbs_for(prec: u32) -> usize {
    (prec as usize + 64).div_ceil(64)
}

/// (negative, exponent, limbs least significant first) of an MPFR number.
pub(super) type Parts<'a> = (bool, i64, &'a [u64]);

/// A nonzero finite MPFR number as (negative, exponent, limbs least significant first):
/// value = +-(limbs / 2^(64 n)) 2^exp. `None` for zero; `Err(())` for inf and NaN.
#[inline(always)]
pub(super) fn parts(x: &Float) -> Result<Option<Parts<'_>>, ()> {
    if x.is_zero() {
        return Ok(None);
    }
    if !x.is_finite() {
        return Err(());
    }
    let raw = x.as_raw();
    // SAFETY: a regular MPFR number has ceil(prec / 64) initialised limbs that live as
    // long as `x`.
    let (n, exp, d) = unsafe {
        (
            ((*raw).prec as usize).div_ceil(64),
            (*raw).exp,
            (*raw).d.as_ptr() as *const u64,
        )
    };
    // SAFETY: as above.
    let limbs = unsafe { std::slice::from_raw_parts(d, n) };
    Ok(Some((x.is_sign_negative(), exp, limbs)))
}

/// `out = floor(D 2^(64 L - scale + exp - 64 n))` for the limbs `d` (n of them) of a
/// number `D / 2^(64 n) 2^exp` with `exp <= scale`, in `out.len() = L` limbs; true when
/// bits were dropped.
pub(super) fn place(d: &[u64], exp: i64, scale: i64, out: &mut [u64]) -> bool {
    let (l, n) = (out.len() as i64, d.len() as i64);
    let shift = 64 * (l - n) - (scale - exp);
    out.fill(0);
    let (words, bits) = (shift.div_euclid(64), shift.rem_euclid(64) as u32);
    let mut dropped = false;
    // source limb j lands at out[j + words] (low part) and out[j + words + 1] (high)
    for (j, &limb) in d.iter().enumerate() {
        let lo_at = j as i64 + words;
        let lo = if bits == 0 { limb } else { limb << bits };
        let hi = if bits == 0 { 0 } else { limb >> (64 - bits) };
        for (at, part) in [(lo_at, lo), (lo_at + 1, hi)] {
            if part == 0 {
                continue;
            }
            if (0..l).contains(&at) {
                out[at as usize] |= part;
            } else if at < 0 {
                dropped = true;
            } else {
                debug_assert!(false, "a value above its scale");
            }
        }
    }
    dropped
}

/// Rows (or one vector) in fixed point (module docs).
#[derive(Debug, Clone)]
struct Fixed {
    limbs: usize,
    /// Per row: the scale exponent `s` (every `|entry| < 2^s`); `None` for a zero row.
    scale: Vec<Option<i64>>,
    /// `L` limbs per entry, row-major.
    man: Vec<u64>,
    /// Per entry: negative.
    neg: Vec<bool>,
    /// Per entry: `|entry| / 2^s` rounded up (0 for zero).
    abs: Vec<f64>,
    /// Per entry: 1 where bits fell below the last limb (the entry is truncated), else 0.
    inexact: Vec<f64>,
    /// Per entry: the index of its lowest nonzero limb (`L` for zero).
    low: Vec<u8>,
    /// Per row: some entry of the row is truncated (a 1 in `inexact`), so the products
    /// need not scan `inexact` where none is.
    row_inexact: Vec<bool>,
}

impl Fixed {
    /// `values` (their MPFR numbers through `mid`) as `rows` rows of `cols` entries;
    /// `None` where an entry is not finite.
    fn new<T>(
        values: &[T],
        mid: impl Fn(&T) -> &Float,
        cols: usize,
        limbs: usize,
    ) -> Option<Fixed> {
        let rows = values.len().checked_div(cols).unwrap_or(0);
        let mut f = Fixed {
            limbs,
            scale: Vec::with_capacity(rows),
            man: vec![0; values.len() * limbs],
            neg: vec![false; values.len()],
            abs: vec![0.0; values.len()],
            inexact: vec![0.0; values.len()],
            low: vec![limbs as u8; values.len()],
            row_inexact: vec![false; rows],
        };
        for i in 0..rows {
            let row = &values[i * cols..(i + 1) * cols];
            let mut scale = None::<i64>;
            for x in row {
                if let Some((_, e, _)) = parts(mid(x)).ok()? {
                    scale = Some(scale.map_or(e, |s| s.max(e)));
                }
            }
            f.scale.push(scale);
            let Some(s) = scale else { continue };
            for (k, x) in row.iter().enumerate() {
                let at = i * cols + k;
                let x = mid(x);
                if let Some((neg, e, d)) = parts(x).ok()? {
                    let man = &mut f.man[at * limbs..(at + 1) * limbs];
                    if place(d, e, s, man) {
                        f.inexact[at] = 1.0;
                        f.row_inexact[i] = true;
                    }
                    f.low[at] = man.iter().position(|w| *w != 0).unwrap_or(limbs) as u8;
                    f.neg[at] = neg;
                    f.abs[at] = scaled_up(x, s);
                }
            }
        }
        Some(f)
    }
}

/// The floor of every nonzero scaled magnitude ([`scaled_up`], [`scaled_mag`]): a value
/// below it is raised to it (an upper bound still), so a product of two is at least
/// 2^-1000, never subnormal, and the f64 sums of the radius pass are bounded by their
/// relative rounding alone ([`inflate`]).
const FLOOR: f64 = 1.0
    / (1u128 << 100) as f64
    / (1u128 << 100) as f64
    / (1u128 << 100) as f64
    / (1u128 << 100) as f64
    / (1u128 << 100) as f64;

/// `|x| / 2^s` rounded up to f64 (`x` finite, nonzero, `|x| < 2^s`): in `[2^-500, 1]`.
fn scaled_up(x: &Float, s: i64) -> f64 {
    let mut t = Float::with_val_round(64, x.abs_ref(), rug::float::Round::Up).0;
    // SAFETY: scaling an initialised MPFR number in place, rounded up.
    unsafe {
        mpfr::mul_2si(t.as_raw_mut(), t.as_raw(), -s, mpfr::rnd_t::RNDU);
    }
    t.to_f64_round(rug::float::Round::Up).max(FLOOR)
}

/// A matrix prepared for fixed-point products (module docs), with, for ball matrices,
/// each row's largest entry radius.
#[derive(Debug, Clone)]
pub struct FixedRows {
    rows: usize,
    cols: usize,
    fixed: Fixed,
    /// Per row: the largest entry radius.
    rad: Vec<Mag>,
    /// Per entry: its radius / 2^(the row's radius scale), rounded up (0 for exact).
    rad_scaled: Vec<f64>,
    /// Per row: the radius scale (`rad < 2^scale`), `None` where every entry is exact.
    rad_scale: Vec<Option<i64>>,
}

impl FixedRows {
    /// The rows of `values` (`rows x cols`, row-major; MPFR numbers through `mid`, their
    /// radii through `rad`) at `limbs` limbs; `None` where an entry is not finite or the
    /// limb count is outside `2..=MAX_LIMBS`.
    pub fn new<T>(
        values: &[T],
        mid: impl Fn(&T) -> &Float,
        rad: impl Fn(&T) -> Mag,
        cols: usize,
        limbs: usize,
    ) -> Option<FixedRows> {
        if !(2..=MAX_LIMBS).contains(&limbs) || cols == 0 {
            return None;
        }
        let rows = values.len() / cols;
        let fixed = Fixed::new(values, mid, cols, limbs)?;
        let rads: Vec<Mag> = values.iter().map(&rad).collect();
        let mut row_rad = Vec::with_capacity(rows);
        let mut rad_scaled = vec![0.0; values.len()];
        let mut rad_scale = Vec::with_capacity(rows);
        for i in 0..rows {
            let r = &rads[i * cols..(i + 1) * cols];
            let top = r.iter().fold(Mag::ZERO, |m, x| m.max(*x));
            row_rad.push(top);
            if top.is_zero() || top.is_inf() {
                rad_scale.push(None);
                continue;
            }
            let scale = top.exponent_bound();
            for (k, x) in r.iter().enumerate() {
                rad_scaled[i * cols + k] = scaled_mag(*x, scale);
            }
            rad_scale.push(Some(scale));
        }
        Some(FixedRows {
            rows,
            cols,
            fixed,
            rad: row_rad,
            rad_scaled,
            rad_scale,
        })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Limbs per entry.
    pub fn limbs(&self) -> usize {
        self.fixed.limbs
    }
}

/// The result of one row's product: the midpoint (rounded once to nearest at its
/// precision), MPFR's ternary value, and the bound of everything but that rounding (the
/// truncations; for balls the radius terms too).
pub struct RowResult {
    /// Ternary value of the final rounding.
    pub ternary: i32,
    /// The truncation bound (module docs) plus, for balls, the radius terms.
    pub bound: Mag,
}

/// A vector's radii for the radius pass of a ball product: `r_k / 2^s_r` rounded up to
/// f64 and the scale `s_r`; `None` when every radius is zero.
pub struct VectorRadii {
    scaled: Vec<f64>,
    scale: i64,
    /// Upper bound of sum_k r_k.
    sum: Mag,
}

impl VectorRadii {
    /// The radii `rads` of a vector (module docs).
    pub fn new(rads: &[Mag]) -> Option<VectorRadii> {
        let top = rads.iter().fold(Mag::ZERO, |m, r| m.max(*r));
        if top.is_zero() {
            return None;
        }
        if top.is_inf() {
            return Some(VectorRadii {
                scaled: Vec::new(),
                scale: 0,
                sum: Mag::INF,
            });
        }
        // r / 2^s in (0, 1] with s = the exponent of the largest radius
        let scale = top.exponent_bound();
        let scaled: Vec<f64> = rads.iter().map(|r| scaled_mag(*r, scale)).collect();
        let sum = upper_sum(&scaled).mul_up(Mag::pow2(scale));
        Some(VectorRadii { scaled, scale, sum })
    }
}

/// `r / 2^scale` rounded up to f64, in `[2^-500, 1]` (0 for zero), for a finite radius
/// `r < 2^scale`.
fn scaled_mag(r: Mag, scale: i64) -> f64 {
    if r.is_zero() {
        return 0.0;
    }
    r.mul_up(Mag::pow2(-scale)).to_f64_up().max(FLOOR)
}

/// An upper bound of `sum_k x_k` for nonnegative f64 `x` (each 0 or in `[2^-500, 1]`)
/// summed in f64 ([`inflate`]).
fn upper_sum(x: &[f64]) -> Mag {
    let s: f64 = x.iter().sum();
    inflate(s, x.len())
}

/// An upper bound of the exact value of an f64 sum or dot product `S^` of `n`
/// nonnegative terms computed in any order, the factors each 0 or in `[2^-500, 1]`, so
/// no product or partial sum is subnormal and every rounding errs by at most `u`
/// relatively: `S <= S^ / (1 - gamma_(n + 4))`, `gamma_k = k u / (1 - k u)` (Higham,
/// Accuracy and Stability, section 3.1; the `+ 4` covers the combining tree of the
/// lanes), bounded by `S^ (1 + 4 (n + 4) u)` for `(n + 4) u <= 1/4`, rounded up. Zero for
/// `S^ = 0` (all terms zero: a nonzero term is at least 2^-1000).
fn inflate(s: f64, n: usize) -> Mag {
    let n = n as f64 + 4.0;
    let u = f64::EPSILON / 2.0;
    debug_assert!(n * u <= 0.25);
    let factor = (1.0 + 4.0 * n * u).next_up();
    Mag::of_f64(s).mul_up(Mag::of_f64(factor))
}

/// A vector in fixed point for one product.
pub struct Vector {
    fixed: Fixed,
}

impl Vector {
    /// `v` (MPFR numbers through `mid`) at `limbs` limbs; `None` where an entry is not
    /// finite.
    pub fn new<T>(v: &[T], mid: impl Fn(&T) -> &Float, limbs: usize) -> Option<Vector> {
        let fixed = Fixed::new(v, mid, v.len().max(1), limbs)?;
        Some(Vector { fixed })
    }
}

/// `out_i = row_(start + i) . v` for the rows `start..start + out.len()` of `m` (in
/// parallel over rows where worthwhile, the same bits for every thread count), each
/// rounded once into the MPFR number of `out[i]` (through `mid`, at its precision);
/// `f(out_i, result)` is called after each row on the same thread (the ball sets its
/// radius there). `radii`: a ball vector's radii (their pass is added to each bound).
pub fn matvec<T: Send, M, F>(
    m: &FixedRows,
    v: &Vector,
    radii: Option<&VectorRadii>,
    start: usize,
    out: &mut [T],
    mid: M,
    f: F,
) where
    M: Fn(&mut T) -> &mut Float + Sync + Send,
    F: Fn(&mut T, RowResult) + Sync + Send,
{
    debug_assert_eq!(m.fixed.limbs, v.fixed.limbs);
    debug_assert_eq!(v.fixed.abs.len(), m.cols);
    let body = |(i, o): (usize, &mut T)| {
        let r = row_product(m, start + i, v, radii, mid(o));
        f(o, r);
    };
    let work = out.len() * m.cols * m.fixed.limbs * m.fixed.limbs;
    if work >= 1 << 15 && rayon::current_num_threads() > 1 {
        out.par_iter_mut().enumerate().for_each(body);
    } else {
        out.iter_mut().enumerate().for_each(body);
    }
}

/// One row's product into `out` (module docs).
fn row_product(
    m: &FixedRows,
    row: usize,
    v: &Vector,
    radii: Option<&VectorRadii>,
    out: &mut Float,
) -> RowResult {
    let (cols, l) = (m.cols, m.fixed.limbs);
    let (sm, sv) = (m.fixed.scale[row], v.fixed.scale[0]);
    let mut bound = Mag::ZERO;
    let mut ternary = 0;
    match (sm, sv) {
        (Some(sm), Some(sv)) => {
            let man = &m.fixed.man[row * cols * l..(row + 1) * cols * l];
            let neg = &m.fixed.neg[row * cols..(row + 1) * cols];
            let mut slots = [[0u128; MAX_LIMBS + 2]; 2];
            let (vm, vn) = (&v.fixed.man[..], &v.fixed.neg[..]);
            match l {
                2 => accumulate_signed::<2>(man, neg, vm, vn, &mut slots),
                3 => accumulate_signed::<3>(man, neg, vm, vn, &mut slots),
                4 => accumulate_signed::<4>(man, neg, vm, vn, &mut slots),
                5 => accumulate_signed::<5>(man, neg, vm, vn, &mut slots),
                6 => accumulate_signed::<6>(man, neg, vm, vn, &mut slots),
                _ => accumulate(l, man, neg, vm, vn, &mut slots),
            }
            // slot p holds the partial products at limb position p + L - 1
            let base = sm + sv - 128 * l as i64 + 64 * (l as i64 - 1);
            ternary = round_slots(&slots, l + 1, base, out);
            bound = truncation(m, row, v).mul_up(Mag::pow2(sm + sv - 64 * l as i64));
        }
        _ => out.assign_zero(),
    }
    // the radius terms: sum_k |v_k| r(G_ik) + sum_k |G_ik| r(v_k) + sum_k r(G_ik) r(v_k)
    let range = row * cols..(row + 1) * cols;
    let rm = m.rad[row];
    if rm.is_inf() {
        bound = Mag::INF;
    } else if let (Some(sr), Some(sv)) = (m.rad_scale[row], sv) {
        let s = super::f64::dot(&m.rad_scaled[range.clone()], &v.fixed.abs);
        bound = bound.add_up(inflate(s, cols).mul_up(Mag::pow2(sr + sv)));
    }
    if let Some(r) = radii {
        if r.sum.is_inf() {
            bound = Mag::INF;
        } else {
            if let Some(sm) = sm {
                let s = super::f64::dot(&m.fixed.abs[range], &r.scaled);
                bound = bound.add_up(inflate(s, cols).mul_up(Mag::pow2(sm + r.scale)));
            }
            if !rm.is_zero() {
                bound = bound.add_up(rm.mul_up(r.sum));
            }
        }
    }
    RowResult { ternary, bound }
}

/// The truncation bound of one row's product in units of `2^(s_m + s_v - 64 L)` (module
/// docs), counted where it can be nonzero: `L (L - 1) / 2` for each product whose dropped
/// partial products are not all zero (the lowest nonzero limbs of its two factors at
/// positions adding to at most `L - 2`), `sum |v_k| / 2^s_v` over the truncated entries
/// (each off by less than `2^(s_m - 64 L)`) and `sum |m_k| / 2^s_m` over the truncated
/// vector entries, the sums in f64 with their rounding bound. Zero for exact inputs (the
/// step-0 products of the span step stay exact balls).
fn truncation(m: &FixedRows, row: usize, v: &Vector) -> Mag {
    let (cols, l) = (m.cols, m.fixed.limbs);
    let range = row * cols..(row + 1) * cols;
    let low = &m.fixed.low[range.clone()];
    let dropped = low
        .iter()
        .zip(&v.fixed.low)
        .filter(|(a, b)| (**a as usize) + (**b as usize) + 2 <= l)
        .count();
    let mut t = Mag::of_f64((dropped * (l * (l - 1) / 2)) as f64);
    if m.fixed.row_inexact[row] {
        let inexact_m = &m.fixed.inexact[range.clone()];
        t = t.add_up(inflate(super::f64::dot(inexact_m, &v.fixed.abs), cols));
    }
    if v.fixed.row_inexact.first().copied().unwrap_or(false) {
        let abs_m = &m.fixed.abs[range];
        t = t.add_up(inflate(super::f64::dot(abs_m, &v.fixed.inexact), cols));
    }
    t
}

/// Zero an MPFR number (keeping its precision).
trait AssignZero {
    fn assign_zero(&mut self);
}

impl AssignZero for Float {
    fn assign_zero(&mut self) {
        rug::Assign::assign(self, 0u32);
    }
}

/// The kept partial products of `sum_k (+-m_k)(+-v_k)` (`l` limbs each) into the slots
/// (module docs): slot `p` (of `l + 1`) takes the halves at limb position `p + l - 1`.
/// Inlined where `l` is a constant (`row_product`'s common limb counts), so the loops
/// unroll.
#[inline(always)]
fn accumulate(
    l: usize,
    man: &[u64],
    neg: &[bool],
    vman: &[u64],
    vneg: &[bool],
    slots: &mut [[u128; MAX_LIMBS + 2]; 2],
) {
    for ((a, b), (na, nb)) in man
        .chunks_exact(l)
        .zip(vman.chunks_exact(l))
        .zip(neg.iter().zip(vneg))
    {
        let side = &mut slots[usize::from(na != nb)];
        for (i, &ai) in a.iter().enumerate() {
            for (j, &bj) in b.iter().enumerate().skip(l - 1 - i) {
                let p = ai as u128 * bj as u128;
                let at = i + j + 1 - l;
                side[at] += p as u64 as u128;
                side[at + 1] += p >> 64;
            }
        }
    }
}

/// [`accumulate`] for a constant limb count `L`, with the same kept partial products
/// and the same exact sums, faster: one set of `L + 1` slots taken modulo 2^128 (a
/// negative product subtracted, a positive one added, chosen once per column), so the
/// slots stay in registers where the two-sided form read and wrote them through a
/// pointer chosen per product. Each slot's exact value `pos_p - neg_p` has magnitude
/// below `cols * 2 L * 2^64 < 2^127` (`cols < 2^56`), so its residue modulo 2^128 read
/// as an `i128` IS that value; it is written back to the side of its sign, and
/// [`round_slots`] sees the same integer `sum_p (pos_p - neg_p) 2^(64 p)` as before: the
/// same rounded result, bit for bit (`fixed::tests` checks both kernels against each
/// other).
#[inline(always)]
fn accumulate_signed<const L: usize>(
    man: &[u64],
    neg: &[bool],
    vman: &[u64],
    vneg: &[bool],
    slots: &mut [[u128; MAX_LIMBS + 2]; 2],
) {
    debug_assert!(neg.len() < 1 << 56);
    let mut acc = [0u128; MAX_LIMBS + 2];
    for ((a, b), (na, nb)) in man
        .chunks_exact(L)
        .zip(vman.chunks_exact(L))
        .zip(neg.iter().zip(vneg))
    {
        let a: &[u64; L] = a.try_into().expect("L limbs");
        let b: &[u64; L] = b.try_into().expect("L limbs");
        if na != nb {
            column::<L, true>(a, b, &mut acc);
        } else {
            column::<L, false>(a, b, &mut acc);
        }
    }
    for p in 0..=L {
        let v = acc[p] as i128;
        if v >= 0 {
            slots[0][p] = v as u128;
        } else {
            slots[1][p] = v.unsigned_abs();
        }
    }
}

/// One column's kept partial products (those at limb position `L - 1` and above) added
/// to (`NEG` false) or subtracted from (`NEG` true) the slots, modulo 2^128.
#[inline(always)]
fn column<const L: usize, const NEG: bool>(
    a: &[u64; L],
    b: &[u64; L],
    acc: &mut [u128; MAX_LIMBS + 2],
) {
    for (i, &ai) in a.iter().enumerate() {
        for (j, &bj) in b.iter().enumerate().skip(L - 1 - i) {
            let p = ai as u128 * bj as u128;
            let at = i + j + 1 - L;
            if NEG {
                acc[at] = acc[at].wrapping_sub(p as u64 as u128);
                acc[at + 1] = acc[at + 1].wrapping_sub(p >> 64);
            } else {
                acc[at] = acc[at].wrapping_add(p as u64 as u128);
                acc[at + 1] = acc[at + 1].wrapping_add(p >> 64);
            }
        }
    }
}

/// Resolve the carries of the `n` slots of both signs, subtract, and round the
/// difference `sum_p (pos_p - neg_p) 2^(64 p) 2^base` once into `out`; the ternary value.
fn round_slots(slots: &[[u128; MAX_LIMBS + 2]; 2], n: usize, base: i64, out: &mut Float) -> i32 {
    // each side as limbs: n slots of u128 -> n + 2 limbs
    let limbs = |side: &[u128]| {
        let mut w = [0u64; MAX_LIMBS + 4];
        let mut carry: u128 = 0;
        for (p, s) in side.iter().take(n).enumerate() {
            let t = carry + (*s as u64 as u128);
            w[p] = t as u64;
            carry = (t >> 64) + (*s >> 64);
        }
        w[n] = carry as u64;
        w[n + 1] = (carry >> 64) as u64;
        w
    };
    let (pos, negs) = (limbs(&slots[0]), limbs(&slots[1]));
    let len = n + 2;
    let (big, small, negative) = if cmp_limbs(&pos[..len], &negs[..len]).is_ge() {
        (pos, negs, false)
    } else {
        (negs, pos, true)
    };
    let mut d = [0u64; MAX_LIMBS + 4];
    let mut borrow = false;
    for p in 0..len {
        let (t1, b1) = big[p].overflowing_sub(small[p]);
        let (t2, b2) = t1.overflowing_sub(u64::from(borrow));
        d[p] = t2;
        borrow = b1 | b2;
    }
    debug_assert!(!borrow);
    let z = rug::Integer::from_digits(&d[..len], rug::integer::Order::Lsf);
    // SAFETY: out and z are initialised; mpfr_set_z_2exp rounds z 2^base once.
    let t = unsafe { mpfr::set_z_2exp(out.as_raw_mut(), z.as_raw(), base, mpfr::rnd_t::RNDN) };
    if negative {
        rug::ops::NegAssign::neg_assign(out);
        -t
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row's sum before its rounding: with a 4096-bit output the final rounding is
    /// exact, so the output's distance from the exact dot product is the truncation
    /// alone, which must stay within `cols (L (L - 1) / 2 + 2) 2^(s_m + s_v - 64 L)`, for
    /// 2 to 9 limbs, spread magnitudes (entries far below the row's scale lose bits),
    /// signs and exact cancellation.
    #[test]
    fn the_truncation_bound_holds_before_rounding() {
        use crate::rng::{self, Stream};
        let mut r = rng::stream(66, Stream::Init);
        let mut seen_inexact = false;
        for prec in [53u32, 64, 128, 200, 256, 512] {
            let l = limbs_for(prec);
            for cols in [1usize, 5, 16, 161] {
                let draw = |r: &mut rand_chacha::ChaCha20Rng| {
                    let e = (rng::uniform(r) * 200.0) as i32 - 100;
                    let mut x = Float::with_val(prec, rng::uniform(r) - 0.5);
                    x += Float::with_val(prec, rng::uniform(r)) >> 70u32;
                    x << e
                };
                let mut m: Vec<Float> = (0..2 * cols).map(|_| draw(&mut r)).collect();
                let v: Vec<Float> = (0..cols).map(|_| draw(&mut r)).collect();
                if cols > 2 {
                    m[1] = Float::with_val(prec, -&m[0]);
                }
                let rows = FixedRows::new(&m, |x| x, |_| Mag::ZERO, cols, l).unwrap();
                let vec = Vector::new(&v, |x| x, l).unwrap();
                for i in 0..2 {
                    let mut out = Float::new(4096);
                    let res = row_product(&rows, i, &vec, None, &mut out);
                    assert_eq!(res.ternary, 0, "a 4096-bit output holds the sum");
                    let exact = m[i * cols..(i + 1) * cols]
                        .iter()
                        .zip(&v)
                        .fold(Float::new(8192), |a, (x, y)| {
                            a + Float::with_val(8192, x * y)
                        });
                    let d = Float::with_val(8192, &out - &exact).abs();
                    seen_inexact |= !d.is_zero();
                    let sm = m[i * cols..(i + 1) * cols]
                        .iter()
                        .filter_map(|x| x.get_exp())
                        .max();
                    let sv = v.iter().filter_map(|x| x.get_exp()).max();
                    let bound = match (sm, sv) {
                        (Some(a), Some(b)) => Float::with_val(
                            64,
                            Float::i_exp(
                                ((l * (l - 1) / 2 + 2) * cols) as i32,
                                a + b - 64 * l as i32,
                            ),
                        ),
                        _ => Float::new(64),
                    };
                    assert!(
                        d <= bound,
                        "prec {prec}, cols {cols}, row {i}: {d} > {bound}"
                    );
                    // the kernel's own bound covers the error and is within the stated one
                    let own = res.bound.to_float(64);
                    assert!(d <= own && own <= Float::with_val(64, &bound * 1.001));
                }
            }
        }
        assert!(seen_inexact, "some sums truncated: the bound was exercised");
    }

    /// The constant-limb kernel ([`accumulate_signed`], what `row_product` runs for 2 to
    /// 6 limbs) sums exactly the integer of the two-sided kernel ([`accumulate`]): both
    /// read through [`round_slots`] into 4096 bits (exact) agree, for 2 to 6 limbs, up to
    /// 2,000 columns, random signs, all-ones limbs (the largest partial products and
    /// carries) and a row that cancels to zero.
    #[test]
    fn the_constant_limb_kernel_sums_the_same_integer() {
        use crate::rng::{self, Stream};
        let mut r = rng::stream(67, Stream::Init);
        fn check<const L: usize>(r: &mut rand_chacha::ChaCha20Rng, cols: usize, case: u32) {
            let limb = |r: &mut rand_chacha::ChaCha20Rng| match case {
                0 => (rng::uniform(r) * 2f64.powi(64)) as u64 ^ ((rng::uniform(r) * 4096.0) as u64),
                _ => u64::MAX,
            };
            let mut man: Vec<u64> = (0..cols * L).map(|_| limb(r)).collect();
            let mut vman: Vec<u64> = (0..cols * L).map(|_| limb(r)).collect();
            let mut neg: Vec<bool> = (0..cols).map(|_| rng::uniform(r) < 0.5).collect();
            let mut vneg: Vec<bool> = (0..cols).map(|_| rng::uniform(r) < 0.5).collect();
            if case == 2 && cols >= 2 {
                // column 1 the negation of column 0 and the rest zero: the row is 0
                man.copy_within(..L, L);
                vman.copy_within(..L, L);
                neg[1] = neg[0];
                vneg[1] = !vneg[0];
                vman[2 * L..].iter_mut().for_each(|w| *w = 0);
            }
            let mut old = [[0u128; MAX_LIMBS + 2]; 2];
            accumulate(L, &man, &neg, &vman, &vneg, &mut old);
            let mut new = [[0u128; MAX_LIMBS + 2]; 2];
            accumulate_signed::<L>(&man, &neg, &vman, &vneg, &mut new);
            let (mut a, mut b) = (Float::new(4096), Float::new(4096));
            let ta = round_slots(&old, L + 1, 0, &mut a);
            let tb = round_slots(&new, L + 1, 0, &mut b);
            assert_eq!((ta, tb), (0, 0), "4096 bits hold the sums");
            assert_eq!(a, b, "limbs {L}, cols {cols}, case {case}");
        }
        for cols in [1usize, 2, 7, 161, 2000] {
            for case in 0..3 {
                check::<2>(&mut r, cols, case);
                check::<3>(&mut r, cols, case);
                check::<4>(&mut r, cols, case);
                check::<5>(&mut r, cols, case);
                check::<6>(&mut r, cols, case);
            }
        }
    }

    /// `place` puts a number's bits at its scale, exactly where they fit, and says when
    /// bits fell below the last limb.
    #[test]
    fn place_shifts_exactly() {
        let x = Float::with_val(128, 3) / 7u32;
        let (_, e, d) = parts(&x).unwrap().unwrap();
        for scale in [e, e + 1, e + 63, e + 64, e + 65, e + 200] {
            let mut out = [0u64; 3];
            let dropped = place(d, e, scale, &mut out);
            let m = rug::Integer::from_digits(&out, rug::integer::Order::Lsf);
            // |x| 2^(192 - scale), floored
            let want = Float::with_val(512, &x) << (192 - scale) as i32;
            let (want_int, _) = want.to_integer_round(rug::float::Round::Down).unwrap();
            assert_eq!(m, want_int, "scale {scale}");
            let exact = Float::with_val(512, &want_int) == want;
            assert_eq!(dropped, !exact, "scale {scale}");
        }
    }
}
