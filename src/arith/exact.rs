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
//! two shifts, three additions).
//!
//! Sums of products of exact dyadic numbers held in MPFR numbers ([`dot_exact`]) are
//! formed in MPFR at a precision that holds every partial sum: with every nonzero term a
//! multiple of `2^lo` below `2^hi` in magnitude, `hi - lo + ceil(log2 n) + 1` bits. Each
//! MPFR result's ternary value is then 0 (checked in debug builds and by the tests).

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
        }
    }

    fn clear(&mut self) {
        self.slots.iter_mut().for_each(|w| *w = 0);
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
        let bits = int.significant_bits().max(1);
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

fn dot_rows(acc: &mut Accumulator, a: &[Parts], b: &[Parts]) -> Float {
    acc.clear();
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

/// The exact Gram matrix `G_ij = <x_i, x_j>` of `rows` f64 rows of width `cols`
/// (row-major, symmetric), rows computed in parallel.
pub fn gram_f64(x: &[f64], rows: usize, cols: usize) -> Vec<Float> {
    use rayon::prelude::*;
    let r = Rows::new(&x[..rows * cols], cols);
    let upper: Vec<Vec<Float>> = (0..rows)
        .into_par_iter()
        .map(|i| {
            let mut acc = accumulator_for(&r, &r);
            (i..rows)
                .map(|j| dot_rows(&mut acc, r.row(i), r.row(j)))
                .collect()
        })
        .collect();
    mirror(upper, rows)
}

/// The exact cross Gram matrix `C_ij = <a_i, b_j>` of f64 rows `a` (`a.len() / cols`
/// rows) and `b` (`b.len() / cols` rows), row-major, rows computed in parallel.
pub fn cross_gram_f64(a: &[f64], b: &[f64], cols: usize) -> Vec<Float> {
    use rayon::prelude::*;
    let (ra, rb) = (Rows::new(a, cols), Rows::new(b, cols));
    let (na, nb) = (a.len() / cols.max(1), b.len() / cols.max(1));
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
