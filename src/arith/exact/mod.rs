//! Exact sums of products of f64 (and of exact dyadic numbers): the data's Gram matrices
//! computed once without any rounding, for arithmetics that take their inputs exactly
//! ([`super::Arith::of_exact`]).
//!
//! Every finite f64 is `M 2^E` with an integer `|M| < 2^53` and `-1074 <= E <= 971`, so a
//! product of two is `M_a M_b 2^(E_a + E_b)` with `|M_a M_b| < 2^106`, and a sum of `n`
//! such products is an integer multiple of `2^base` (base = the smallest `E_a + E_b`)
//! below `n 2^(top + 106)` (top = the largest `E_a + E_b`) in magnitude. [`Accumulator`]
//! holds such a sum exactly in fixed point (a "Kulisch" accumulator) in carry-save form:
//! u128 slots for the 64-bit words from `2^base` up to `2^(top + 128)`, each product split
//! into the three words it covers at its bit position and added to them without carrying
//! (positive and negative products into separate slots, so the sign costs no branch);
//! the carries are resolved once per sum. No bit is ever dropped. For data drawn from
//! N(0, 1) (exponents within about 2^-20..2^6) that is 3 to 4 slots; at worst (subnormals
//! against huge values) about 70. A product costs about 2 ns (one 64 x 64-bit multiply,
//! two shifts, three additions); `dot_rows` adds the products of a dot product into
//! exponent buckets first (no shift per product) where their exponents span few values.
//!
//! Sums of products of exact dyadic numbers held in MPFR numbers ([`dot_exact`]) are
//! formed in MPFR at a precision that holds every partial sum: with every nonzero term a
//! multiple of `2^lo` below `2^hi` in magnitude, `hi - lo + ceil(log2 n) + 1` bits. Each
//! MPFR result's ternary value is then 0 (checked in debug builds and by the tests).

mod sliced;

use rug::integer::Order;
use rug::{Float, Integer};

/// An f64 as (sign, |M|, E) with value `+-M 2^E` (zero: M = 0).
#[derive(Debug, Clone, Copy)]
struct Parts {
    neg: bool,
    man: u64,
    exp: i32,
}

fn parts(v: f64) -> Parts {
    let bits = v.to_bits();
    let neg = bits >> 63 == 1;
    let e = ((bits >> 52) & 0x7ff) as i32;
    let f = bits & ((1 << 52) - 1);
    if e == 0 {
        Parts {
            neg,
            man: f,
            exp: -1074,
        }
    } else {
        Parts {
            neg,
            man: f | (1 << 52),
            exp: e - 1075,
        }
    }
}

/// Decomposed f64 rows with their smallest and largest exponents (nonzero entries).
struct Rows {
    parts: Vec<Parts>,
    cols: usize,
    emin: i32,
    emax: i32,
}

impl Rows {
    /// # Panics
    /// On a non-finite entry (the data are finite: checked when generated or loaded).
    fn new(x: &[f64], cols: usize) -> Rows {
        let parts: Vec<Parts> = x
            .iter()
            .map(|v| {
                assert!(v.is_finite(), "exact Gram of a non-finite entry");
                parts(*v)
            })
            .collect();
        let mut parts = parts;
        let nz = parts.iter().filter(|p| p.man != 0);
        let emin = nz.clone().map(|p| p.exp).min().unwrap_or(0);
        let emax = nz.map(|p| p.exp).max().unwrap_or(0);
        // a zero adds a zero product: give it an exponent inside the accumulator's range
        for p in parts.iter_mut().filter(|p| p.man == 0) {
            p.exp = emin;
        }
        Rows {
            parts,
            cols,
            emin,
            emax,
        }
    }

    fn row(&self, i: usize) -> &[Parts] {
        &self.parts[i * self.cols..(i + 1) * self.cols]
    }
}

/// The exact sum of products of f64 pairs (module docs), in carry-save form: the sum is
/// `(sum_k pos_k 2^(64 k) - sum_k neg_k 2^(64 k)) 2^base`, each slot a u128 that takes
/// 64-bit pieces of products without carrying (a slot receives at most one piece per
/// product, below 2^64, so it cannot overflow before 2^64 products). A product
/// `M_a M_b < 2^106` at bit offset `s = E_a + E_b - base` is split into the three 64-bit
/// words of `M_a M_b 2^(s mod 64)` added at slot `s / 64`; the sign only chooses the
/// array (no branch on the data). The carries are resolved once, in `value`.
///
/// Products go to `SETS` independent copies in turn (product `j` into copy `j mod
/// SETS`), so consecutive additions to the same slot do not wait for each other.
#[derive(Debug, Clone)]
pub struct Accumulator {
    /// For each copy, pos slots then neg slots (`SETS * 2 * len` entries).
    slots: Vec<u128>,
    len: usize,
    base: i64,
    /// Scratch of [`dot_rows`]: two sets of exponent buckets.
    buckets: Vec<i128>,
}

/// Independent copies of the slots in an [`Accumulator`].
const SETS: usize = 4;

impl Accumulator {
    /// An accumulator for sums of at most `n` products whose exponent sums E_a + E_b lie
    /// in `lo..=hi`.
    fn new(lo: i64, hi: i64, n: usize) -> Accumulator {
        debug_assert!(
            (n as u128) < 1 << 62,
            "the copies' sum of a slot stays below 2^128"
        );
        // a product at offset s <= hi - lo touches slots s / 64 .. s / 64 + 2
        let len = ((hi - lo) as usize) / 64 + 3;
        Accumulator {
            slots: vec![0; SETS * 2 * len],
            len,
            base: lo,
            buckets: Vec::new(),
        }
    }

    fn clear(&mut self) {
        self.slots.iter_mut().for_each(|w| *w = 0);
    }

    /// The largest bit offset of a product (exponent sums `base..=base + span`).
    fn span(&self) -> usize {
        (self.len - 3) * 64 + 63
    }

    /// Add `+-v 2^(base + at)` exactly (`v < 2^127`, `at <= span`), into copy 0: `v
    /// 2^(at mod 64)` covers three words from slot `at / 64`, each piece below 2^64.
    #[inline]
    fn add_wide(&mut self, neg: bool, v: u128, at: usize) {
        debug_assert!(v < 1 << 127 && at <= self.span());
        let (k, bit) = (at / 64, (at % 64) as u32);
        let low = v << bit;
        let high = if bit == 0 {
            0
        } else {
            (v >> (128 - bit)) as u64
        };
        let off = k + self.len * usize::from(neg);
        let s = &mut self.slots[off..off + 3];
        s[0] += low as u64 as u128;
        s[1] += low >> 64;
        s[2] += high as u128;
    }

    /// Add `+-(a.man b.man) 2^(a.exp + b.exp)` exactly, into copy `set` (< [`SETS`]).
    #[inline(always)]
    fn add_product(&mut self, set: usize, a: Parts, b: Parts) {
        let p = a.man as u128 * b.man as u128;
        let shift = (a.exp as i64 + b.exp as i64 - self.base) as usize;
        let (k, bit) = (shift / 64, (shift % 64) as u32);
        // the low 128 bits of p 2^bit, and the bits above (p < 2^106, bit < 64)
        let low = p << bit;
        let high = ((p >> 1) >> (127 - bit)) as u64;
        let off = k + self.len * (2 * set + usize::from(a.neg != b.neg));
        let s = &mut self.slots[off..off + 3];
        s[0] += low as u64 as u128;
        s[1] += low >> 64;
        s[2] += high as u128;
    }

    /// The exact value as an MPFR number (of just enough precision).
    fn value(&self) -> Float {
        // resolve the carries of each array into 64-bit words
        let words = |slots: &[u128]| {
            let mut out = Vec::with_capacity(slots.len() + 2);
            let mut carry = 0u128;
            for s in slots {
                // carry <= 2^64 + 1 and the low half of s < 2^64: no overflow
                let v = carry + (*s as u64 as u128);
                out.push(v as u64);
                carry = (v >> 64) + (s >> 64);
            }
            out.push(carry as u64);
            out.push((carry >> 64) as u64);
            out
        };
        // sum the copies slot by slot (each below 2^126 for fewer than 2^62 products)
        let len = self.len;
        let mut pos = vec![0u128; len];
        let mut neg = vec![0u128; len];
        for copy in self.slots.chunks(2 * len) {
            for k in 0..len {
                pos[k] += copy[k];
                neg[k] += copy[len + k];
            }
        }
        let int = Integer::from_digits(&words(&pos), Order::Lsf)
            - Integer::from_digits(&words(&neg), Order::Lsf);
        // the precision of the odd part: the same number, whatever the base, has the
        // same precision (the sliced path and the bucket path agree to the last field)
        let zeros = int.find_one(0).unwrap_or(0);
        let bits = (int.significant_bits() - zeros).max(1);
        let mut f = Float::with_val(bits, &int);
        debug_assert!(f == int, "the integer fits its precision");
        // 2^base scaling is exact (within MPFR's exponent range for f64 data)
        f <<= self.base as i32;
        f
    }
}

/// The exact dot product of two f64 vectors.
pub fn dot_f64(x: &[f64], y: &[f64]) -> Float {
    let (rx, ry) = (Rows::new(x, x.len()), Rows::new(y, y.len()));
    let mut acc = accumulator_for(&rx, &ry);
    dot_rows(&mut acc, rx.row(0), ry.row(0))
}

fn accumulator_for(a: &Rows, b: &Rows) -> Accumulator {
    Accumulator::new((a.emin + b.emin) as i64, (a.emax + b.emax) as i64, a.cols)
}

/// The most exponent buckets [`dot_rows`] sums products into before the accumulator.
const MAX_BUCKETS: usize = 512;

/// The exact dot product of two decomposed rows.
///
/// Where the rows' exponent sums span at most [`MAX_BUCKETS`] values and the rows are
/// shorter than 2^20 (so a bucket's sum of products below 2^106 stays below 2^126 in
/// magnitude: no overflow of an i128), each product `M_a M_b` is added as a signed
/// integer to the bucket of its exponent sum `E_a + E_b`: no shift per product; the
/// buckets, exact integers, then go into the accumulator at their bit positions
/// ([`Accumulator::add_wide`]). Otherwise every product goes into the accumulator.
/// Either way the result is the exact sum.
fn dot_rows(acc: &mut Accumulator, a: &[Parts], b: &[Parts]) -> Float {
    acc.clear();
    let span = acc.span();
    if span < MAX_BUCKETS && a.len() < 1 << 20 {
        let base = acc.base;
        let width = span + 1;
        let mut buckets = std::mem::take(&mut acc.buckets);
        buckets.clear();
        buckets.resize(2 * width, 0);
        let (b0, b1) = buckets.split_at_mut(width);
        let sets = [b0, b1];
        let mut chunks = a.chunks_exact(2).zip(b.chunks_exact(2));
        for (pa, pb) in &mut chunks {
            for k in 0..2 {
                let (x, y) = (pa[k], pb[k]);
                let p = (x.man as u128 * y.man as u128) as i128;
                let s = -i128::from(x.neg != y.neg);
                let at = (x.exp as i64 + y.exp as i64 - base) as usize;
                sets[k][at] += (p ^ s) - s;
            }
        }
        let tail = a.len() / 2 * 2;
        for (x, y) in a[tail..].iter().zip(&b[tail..]) {
            let p = (x.man as u128 * y.man as u128) as i128;
            let s = -i128::from(x.neg != y.neg);
            let at = (x.exp as i64 + y.exp as i64 - base) as usize;
            sets[0][at] += (p ^ s) - s;
        }
        for (at, (u, w)) in sets[0].iter().zip(sets[1].iter()).enumerate() {
            let v = u + w;
            if v != 0 {
                acc.add_wide(v < 0, v.unsigned_abs(), at);
            }
        }
        acc.buckets = buckets;
        return acc.value();
    }
    let mut chunks = a.chunks_exact(SETS).zip(b.chunks_exact(SETS));
    for (pa, pb) in &mut chunks {
        for set in 0..SETS {
            acc.add_product(set, pa[set], pb[set]);
        }
    }
    let tail = a.len() / SETS * SETS;
    for (p, q) in a[tail..].iter().zip(&b[tail..]) {
        acc.add_product(0, *p, *q);
    }
    acc.value()
}

/// Sliced forms of every row of `r` (the sliced path, `sliced.rs`), or `None` where it
/// does not apply: rows too short to pay for it, too long for an exact slice width, or
/// slices that would take more than [`MAX_SLICED_BYTES`].
fn sliced_rows(r: &Rows, rows: usize) -> Option<(sliced::Slicing, Vec<sliced::SlicedRow>)> {
    use rayon::prelude::*;
    let sl = sliced::Slicing::for_cols(r.cols)?;
    let bytes = rows as u128 * sl.row_bytes() as u128;
    if r.cols < MIN_SLICED_COLS || bytes > MAX_SLICED_BYTES {
        return None;
    }
    let s = (0..rows)
        .into_par_iter()
        .map(|i| sl.row(r.row(i)))
        .collect();
    Some((sl, s))
}

/// Rows of `a` per block of the sliced cross Gram (their slices stay in the L2 cache).
const SLICED_BLOCK: usize = 8;
/// Rows shorter than this take the bucket path (the slices' set-up would not pay).
const MIN_SLICED_COLS: usize = 16;
/// The most memory the sliced forms of a matrix's rows may take (three times the data).
const MAX_SLICED_BYTES: u128 = 1 << 30;

/// The exact Gram matrix `G_ij = <x_i, x_j>` of `rows` f64 rows of width `cols`
/// (row-major, symmetric), rows computed in parallel.
pub fn gram_f64(x: &[f64], rows: usize, cols: usize) -> Vec<Float> {
    use rayon::prelude::*;
    let r = Rows::new(&x[..rows * cols], cols);
    let upper: Vec<Vec<Float>> = match sliced_rows(&r, rows) {
        Some((sl, s)) => {
            let low = sliced::low_range(s.iter().map(|r| r.low()));
            (0..rows)
                .into_par_iter()
                .map(|i| {
                    let mut acc = sl.accumulator(&r, &r, low, low);
                    (i..rows)
                        .map(|j| sl.dot(&mut acc, r.row(i), &s[i], r.row(j), &s[j]))
                        .collect()
                })
                .collect()
        }
        None => (0..rows)
            .into_par_iter()
            .map(|i| {
                let mut acc = accumulator_for(&r, &r);
                (i..rows)
                    .map(|j| dot_rows(&mut acc, r.row(i), r.row(j)))
                    .collect()
            })
            .collect(),
    };
    mirror(upper, rows)
}

/// The exact cross Gram matrix `C_ij = <a_i, b_j>` of f64 rows `a` (`a.len() / cols`
/// rows) and `b` (`b.len() / cols` rows), row-major, rows computed in parallel. Where
/// the sliced path applies (`sliced.rs`: the rows of `b` are sliced once, each row of
/// `a` as it comes), it gives the same numbers faster.
pub fn cross_gram_f64(a: &[f64], b: &[f64], cols: usize) -> Vec<Float> {
    use rayon::prelude::*;
    let (ra, rb) = (Rows::new(a, cols), Rows::new(b, cols));
    let (na, nb) = (a.len() / cols.max(1), b.len() / cols.max(1));
    // each row of b is sliced once and used na times: worth it from two rows of a
    if let Some((sl, sb)) = (na >= 2).then(|| sliced_rows(&rb, nb)).flatten() {
        let lb = sliced::low_range(sb.iter().map(|r| r.low()));
        // the grid bottoms of a's rows, for the accumulator's range
        let la = sliced::low_range((0..na).map(|i| sl.bottom(ra.row(i))));
        // blocks of a's rows against each row of b in turn: b's slices are read from
        // memory once per block, not once per row
        let blocks: Vec<usize> = (0..na).step_by(SLICED_BLOCK).collect();
        return blocks
            .into_par_iter()
            .map_init(
                || (sl.accumulator(&ra, &rb, la, lb), Vec::new()),
                |(acc, sa), start| {
                    let rows = start..(start + SLICED_BLOCK).min(na);
                    sa.resize_with(rows.len(), sliced::SlicedRow::default);
                    for (s, i) in sa.iter_mut().zip(rows.clone()) {
                        sl.fill(s, ra.row(i));
                    }
                    let mut out = vec![Float::new(1); rows.len() * nb];
                    for (j, sbj) in sb.iter().enumerate() {
                        for (k, i) in rows.clone().enumerate() {
                            out[k * nb + j] = sl.dot(acc, ra.row(i), &sa[k], rb.row(j), sbj);
                        }
                    }
                    out
                },
            )
            .flatten_iter()
            .collect();
    }
    (0..na)
        .into_par_iter()
        .flat_map_iter(|i| {
            let mut acc = accumulator_for(&ra, &rb);
            (0..nb)
                .map(|j| dot_rows(&mut acc, ra.row(i), rb.row(j)))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `W^T v` exactly for an f64 vector `v` (length `d`) and a `d x d` f64 matrix `w`
/// (row-major): `out_k = sum_m v_m W[m, k]`.
pub fn vec_mat_f64(v: &[f64], w: &[f64], d: usize) -> Vec<Float> {
    let mut wt = vec![0.0; d * d];
    for m in 0..d {
        for k in 0..d {
            wt[k * d + m] = w[m * d + k];
        }
    }
    cross_gram_f64(&v[..d], &wt, d)
}

/// The exact Gram matrix of `rows` rows of exact dyadic numbers (width `cols`), each
/// entry by [`dot_exact`], rows computed in parallel.
pub fn gram_exact(b: &[Float], rows: usize, cols: usize) -> Vec<Float> {
    use rayon::prelude::*;
    let row = |i: usize| &b[i * cols..(i + 1) * cols];
    let upper: Vec<Vec<Float>> = (0..rows)
        .into_par_iter()
        .map(|i| (i..rows).map(|j| dot_exact(row(i), row(j))).collect())
        .collect();
    mirror(upper, rows)
}

/// The full symmetric matrix from its upper triangle's rows (`upper[i]` holds j >= i).
fn mirror(upper: Vec<Vec<Float>>, rows: usize) -> Vec<Float> {
    let mut g = vec![Float::new(1); rows * rows];
    for (i, ui) in upper.into_iter().enumerate() {
        for (k, v) in ui.into_iter().enumerate() {
            let j = i + k;
            g[j * rows + i] = v.clone();
            g[i * rows + j] = v;
        }
    }
    g
}

/// Exponent bounds of a nonzero exact value: it is a multiple of `2^lo` below `2^hi`.
fn bounds(v: &Float) -> Option<(i64, i64)> {
    let hi = v.get_exp()? as i64;
    Some((hi - v.prec() as i64, hi))
}

/// The exact dot product of exact dyadic numbers `x` and `y` (module docs: MPFR at a
/// precision that holds every partial sum).
pub fn dot_exact(x: &[Float], y: &[Float]) -> Float {
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for (a, b) in x.iter().zip(y) {
        if let (Some((la, ha)), Some((lb, hb))) = (bounds(a), bounds(b)) {
            lo = lo.min(la + lb);
            hi = hi.max(ha + hb);
        }
    }
    if lo > hi {
        return Float::new(1);
    }
    let log_n = (usize::BITS - x.len().leading_zeros()) as i64;
    let prec = (hi - lo + log_n + 1).clamp(1, rug::float::prec_max() as i64) as u32;
    let mut acc = Float::new(prec);
    for (a, b) in x.iter().zip(y) {
        let t = super::mpfr::fma_nearest(&mut acc, a, b);
        debug_assert_eq!(t, 0, "an exact partial sum");
    }
    acc
}

/// The exact dot product of f64 `x` with exact dyadic numbers `y`.
pub fn dot_f64_exact(x: &[f64], y: &[Float]) -> Float {
    let xs: Vec<Float> = x.iter().map(|v| Float::with_val(53, *v)).collect();
    dot_exact(&xs, y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{self, Stream};

    /// The bucket path of `dot_rows` (exponent sums spanning fewer than MAX_BUCKETS
    /// values: data like N(0, 1) draws with a few large entries, zeros and exact
    /// cancellation) gives the exact sum, the same as the accumulator alone, at lengths
    /// that leave one product outside the two bucket sets' pairs (odd lengths).
    #[test]
    fn bucketed_sums_are_exact() {
        let mut r = rng::stream(52, Stream::Init);
        for len in [1usize, 2, 5, 333, 2000] {
            let mut draw = |big: bool| {
                let u = rng::uniform(&mut r);
                let v = (u - 0.5) * if big { 40.0 } else { 1.0 } * rng::uniform(&mut r);
                if u < 0.03 { 0.0 } else { v }
            };
            let mut x: Vec<f64> = (0..len).map(|k| draw(k % 97 == 0)).collect();
            let mut y: Vec<f64> = (0..len).map(|k| draw(k % 89 == 0)).collect();
            if len > 2 {
                // x_0 y_0 + x_1 y_1 cancels exactly
                (x[1], y[1]) = (x[0], -y[0]);
            }
            let (rx, ry) = (Rows::new(&x, len), Rows::new(&y, len));
            let mut acc = accumulator_for(&rx, &ry);
            assert!(acc.span() < MAX_BUCKETS, "the bucket path is taken");
            let got = dot_rows(&mut acc, rx.row(0), ry.row(0));
            let mut want = Float::new(5000);
            for (a, b) in x.iter().zip(&y) {
                want += Float::with_val(106, &Float::with_val(53, *a) * *b);
            }
            assert_eq!(got, want, "len {len}");
            // the accumulator alone (every product at its bit position) agrees
            acc.clear();
            for (p, q) in rx.row(0).iter().zip(ry.row(0)) {
                acc.add_product(0, *p, *q);
            }
            assert_eq!(acc.value(), want, "len {len}");
        }
    }

    /// The accumulator's sums equal MPFR sums at 5000 bits (exact for these ranges), on
    /// values spread over 2^-1074..2^900 with zeros and cancellation (x and -x both
    /// present), at lengths that fill the accumulator's copies unevenly, and the Gram
    /// helpers agree with it entry by entry.
    #[test]
    fn exact_sums_match_wide_mpfr() {
        let mut r = rng::stream(51, Stream::Init);
        for len in [1usize, 3, 7, 64, 301] {
            for spread in [10, 200, 1900] {
                let draw = |r: &mut _| {
                    let e = (rng::uniform(r) * spread as f64) as i32 - spread / 2;
                    let v = (rng::uniform(r) - 0.5) * 2f64.powi(e.clamp(-1070, 900));
                    let u = rng::uniform(r);
                    if u < 0.05 {
                        f64::from_bits(1 + (rng::uniform(r) * 1e6) as u64)
                    } else if u < 0.1 {
                        0.0
                    } else {
                        v
                    }
                };
                let x: Vec<f64> = (0..len).map(|_| draw(&mut r)).collect();
                let mut x = x;
                let mut y: Vec<f64> = (0..len).map(|_| draw(&mut r)).collect();
                if len > 2 {
                    // x_0 y_0 + x_1 y_1 cancels exactly
                    (x[1], y[1]) = (x[0], -y[0]);
                }
                let mut want = Float::new(5000);
                for (a, b) in x.iter().zip(&y) {
                    want += Float::with_val(106, &Float::with_val(53, *a) * *b);
                }
                let got = dot_f64(&x, &y);
                assert_eq!(got, want, "len {len} spread {spread}");
                let xs: Vec<Float> = x.iter().map(|v| Float::with_val(53, *v)).collect();
                assert_eq!(dot_f64_exact(&y, &xs), want);
                let rows: Vec<f64> = x.iter().chain(&y).copied().collect();
                let g = gram_f64(&rows, 2, len);
                assert_eq!(g[1], want);
                assert_eq!(g[2], want);
                assert_eq!(g[0], dot_f64(&x, &x));
                let c = cross_gram_f64(&rows, &y, len);
                assert_eq!(c[0], want);
            }
        }
    }
}
