//! The fast path of the exact Gram matrices: f64 rows cut into integer slices whose
//! products binary64 sums exactly (vector kernels), the few entries the slices do not
//! hold added through the exact [`Accumulator`].
//!
//! # The split
//! Row `a` has entries `M 2^E` ([`Parts`]). With its top `T_a` (the largest `E +
//! bitlen(M)` over its nonzero entries: every `|a_k| < 2^T_a`) and the slice width `w`,
//! its grid starts at `L_a = T_a - P w` (P = [`SLICES`]). An entry with `E >= L_a` is the
//! integer `N = M 2^(E - L_a) < 2^(P w)` times `2^L_a`, and `N = sum_p n_p 2^(w p)` with
//! `0 <= n_p < 2^w`: its slices are `+-n_p`, exact in binary64. An entry with `E < L_a`
//! (a small entry: its remainder) is split as `h + r`: `h` keeps the bits of `M` at or
//! above `2^L_a` (sliced as above), `r = a_k - h` the bits below (`M mod 2^(L_a - E)`
//! times `2^E`, exact). For two rows, from `a b = h_a h_b + r_a b + h_a r_b` entry by entry:
//!
//! ```text
//! <a, b> = sum_{p,q} S_pq 2^(L_a + L_b + w (p + q))
//!        + sum_{k in R_a} r_{a,k} b_k + sum_{k in R_b} h_{a,k} r_{b,k}
//! S_pq   = sum_k n^a_{k,p} n^b_{k,q}
//! ```
//!
//! where `R_a` holds the entries of `a` with a nonzero remainder (about 0.3% of N(0, 1)
//! data at d = 2000).
//!
//! # Why binary64 sums the slices exactly
//! Every term of `S_pq` is an integer below `2^(2w)` in magnitude, and with `2w +
//! ceil(log2 d) <= 53` (the width [`width`] chooses) every partial sum of the `d` terms,
//! in any order and any grouping, is an integer below `2^53`: binary64 multiplies and
//! adds them without rounding. So the vector kernels' lane count, their fusion (fma or
//! multiply-then-add) and their summation order cannot change a bit, and the run-time
//! CPU check chooses only the speed. The nine `S_pq` (below `2^53`) and the remainder
//! products then enter the exact accumulator at their bit positions: the result is the
//! exact dot product, the same number as [`super::dot_rows`] gives.

use super::{Accumulator, Parts, Rows};
use rug::Float;

/// Slices per entry.
const SLICES: usize = 3;
/// Entries per kernel step (zero-padded to a multiple).
const STEP: usize = 8;
/// Rows longer than this (ceil(log2 d) > 21, slice width below 16 bits) take the
/// accumulator path.
const MAX_LOG_COLS: u32 = 21;

/// The slice width for rows of `cols` entries: the largest `w` with `2w + ceil(log2
/// cols) <= 53` (module docs), or `None` for rows too long (width below 16 bits).
fn width(cols: usize) -> Option<u32> {
    let log = usize::BITS - cols.saturating_sub(1).leading_zeros();
    (log <= MAX_LOG_COLS).then(|| (53 - log) / 2)
}

/// How rows of one width are sliced and their slice sums formed: the slice width `w`,
/// the entries per slice run (`padded`, a multiple of the kernel step) and the fastest
/// kernel this CPU runs.
#[derive(Clone, Copy)]
pub(super) struct Slicing {
    w: u32,
    padded: usize,
    kernel: Kernel,
}

impl Slicing {
    /// The slicing of rows of `cols` entries, `None` for rows too long ([`width`]).
    pub(super) fn for_cols(cols: usize) -> Option<Slicing> {
        Some(Slicing {
            w: width(cols)?,
            padded: cols.div_ceil(STEP) * STEP,
            kernel: kernel(),
        })
    }

    /// The bytes of one sliced row's slices.
    pub(super) fn row_bytes(&self) -> usize {
        SLICES * self.padded * std::mem::size_of::<f64>()
    }

    /// `row` sliced (module docs).
    pub(super) fn row(&self, row: &[Parts]) -> SlicedRow {
        let mut out = SlicedRow::default();
        self.fill(&mut out, row);
        out
    }

    /// The grid bottom `L = T - SLICES w` of `row` (module docs), `None` for a row of
    /// zeros.
    pub(super) fn bottom(&self, row: &[Parts]) -> Option<i64> {
        let top = row
            .iter()
            .filter(|p| p.man != 0)
            .map(|p| p.exp as i64 + (64 - p.man.leading_zeros()) as i64)
            .max();
        top.map(|t| t - SLICES as i64 * self.w as i64)
    }

    /// [`Slicing::row`] into the buffers of `out`.
    pub(super) fn fill(&self, out: &mut SlicedRow, row: &[Parts]) {
        let (w, padded) = (self.w, self.padded);
        out.slices.clear();
        out.slices.resize(SLICES * padded, 0.0);
        out.rems.clear();
        out.low = self.bottom(row);
        let Some(low) = out.low else { return };
        let mask = (1u128 << w) - 1;
        for (k, x) in row.iter().enumerate() {
            if x.man == 0 {
                continue;
            }
            let (h, r) = split(*x, low);
            if r.man != 0 {
                out.rems.push(k as u32);
            }
            if h.man == 0 {
                continue;
            }
            // h = N 2^low with N < 2^(SLICES w): E + bitlen(M) <= top
            let e = h.exp as i64;
            let n = if e >= low {
                (h.man as u128) << (e - low)
            } else {
                (h.man >> (low - e)) as u128
            };
            let sign = if x.neg { -1.0 } else { 1.0 };
            for p in 0..SLICES {
                let piece = (n >> (w as usize * p)) & mask;
                out.slices[p * padded + k] = sign * piece as f64;
            }
        }
    }

    /// An accumulator that holds every term of [`Slicing::dot`] for rows of `a` and `b`
    /// (grid bottoms in `la` and `lb`): the products' exponent sums and the slice sums'
    /// positions.
    pub(super) fn accumulator(
        &self,
        a: &Rows,
        b: &Rows,
        la: (i64, i64),
        lb: (i64, i64),
    ) -> Accumulator {
        let lo = (a.emin as i64 + b.emin as i64).min(la.0 + lb.0);
        // a slice sum is below 2^53 <= 2^106 at position L_a + L_b + w (p + q)
        let top = la.1 + lb.1 + 2 * (SLICES as i64 - 1) * self.w as i64;
        let hi = (a.emax as i64 + b.emax as i64).max(top);
        Accumulator::new(lo, hi, 2 * a.cols + SLICES * SLICES)
    }

    /// The exact dot product of rows `a` and `b` (their entries, and their sliced forms)
    /// by the split of the module docs.
    pub(super) fn dot(
        &self,
        acc: &mut Accumulator,
        a: &[Parts],
        sa: &SlicedRow,
        b: &[Parts],
        sb: &SlicedRow,
    ) -> Float {
        acc.clear();
        let (Some(la), Some(lb)) = (sa.low, sb.low) else {
            // a row of zeros
            return acc.value();
        };
        let sums = (self.kernel)(&sa.slices, &sb.slices, self.padded);
        for p in 0..SLICES {
            for q in 0..SLICES {
                // an integer below 2^53 in magnitude: exact as i64
                let v = sums[p * SLICES + q] as i64;
                if v != 0 {
                    let at = la + lb + self.w as i64 * (p + q) as i64 - acc.base;
                    acc.add_wide(v < 0, v.unsigned_abs() as u128, at as usize);
                }
            }
        }
        for &k in &sa.rems {
            let k = k as usize;
            let (_, r) = split(a[k], la);
            if b[k].man != 0 {
                acc.add_product(0, r, b[k]);
            }
        }
        for &k in &sb.rems {
            let k = k as usize;
            let (_, r) = split(b[k], lb);
            let (h, _) = split(a[k], la);
            if h.man != 0 {
                acc.add_product(0, h, r);
            }
        }
        acc.value()
    }
}

/// The sliced form of one row: its slices (`SLICES` runs of `padded` values), its grid
/// bottom `L` (`None` for a row of zeros) and the entries with a remainder.
#[derive(Debug, Clone, Default)]
pub(super) struct SlicedRow {
    slices: Vec<f64>,
    low: Option<i64>,
    rems: Vec<u32>,
}

/// `x` at the grid bottom `low`: (the part at or above `2^low`, the remainder below).
#[inline]
fn split(x: Parts, low: i64) -> (Parts, Parts) {
    let zero = Parts { man: 0, ..x };
    let e = x.exp as i64;
    if e >= low {
        return (x, zero);
    }
    let sh = low - e;
    if sh >= 64 {
        return (zero, x);
    }
    let mask = (1u64 << sh) - 1;
    (
        Parts {
            man: x.man & !mask,
            ..x
        },
        Parts {
            man: x.man & mask,
            ..x
        },
    )
}

impl SlicedRow {
    /// The grid bottom (`None` for a row of zeros).
    pub(super) fn low(&self) -> Option<i64> {
        self.low
    }
}

/// The kernel: the nine sums `S_pq` of two sliced rows (`padded` a multiple of
/// [`STEP`]).
type Kernel = fn(&[f64], &[f64], usize) -> [f64; SLICES * SLICES];

/// The nine slice sums (module docs: exact in any order), portably.
fn slice_sums_portable(a: &[f64], b: &[f64], padded: usize) -> [f64; SLICES * SLICES] {
    assert!(
        a.len() >= SLICES * padded && b.len() >= SLICES * padded && padded.is_multiple_of(STEP)
    );
    let (a0, rest) = a.split_at(padded);
    let (a1, a2) = rest.split_at(padded);
    let (b0, rest) = b.split_at(padded);
    let (b1, b2) = rest.split_at(padded);
    let mut acc = [[0.0f64; STEP]; SLICES * SLICES];
    let chunks = a0
        .chunks_exact(STEP)
        .zip(a1.chunks_exact(STEP))
        .zip(a2.chunks_exact(STEP))
        .zip(b0.chunks_exact(STEP))
        .zip(b1.chunks_exact(STEP))
        .zip(b2.chunks_exact(STEP));
    for (((((x0, x1), x2), y0), y1), y2) in chunks {
        let xs = [x0, x1, x2];
        let ys = [y0, y1, y2];
        for p in 0..SLICES {
            for q in 0..SLICES {
                let s = &mut acc[p * SLICES + q];
                for l in 0..STEP {
                    s[l] += xs[p][l] * ys[q][l];
                }
            }
        }
    }
    acc.map(|s| s.iter().sum())
}

/// The nine slice sums in explicit vector registers: nine accumulators of `$lanes`
/// lanes, three slices of each row loaded per step and multiplied pairwise by fma.
/// Expands to the body of a `#[target_feature]` function of `(a, b, padded)`.
#[cfg(target_arch = "x86_64")]
macro_rules! vector_slice_sums {
    ($a:ident, $b:ident, $padded:ident, $lanes:expr, $zero:ident, $load:ident, $fma:ident, $store:ident) => {{
        use std::arch::x86_64::*;
        assert!(
            $a.len() >= SLICES * $padded
                && $b.len() >= SLICES * $padded
                && $padded.is_multiple_of($lanes)
        );
        let mut acc = [$zero(); SLICES * SLICES];
        let (pa, pb) = ($a.as_ptr(), $b.as_ptr());
        let mut k = 0;
        while k < $padded {
            // SAFETY: k + lanes <= padded, so every load reads inside the slices of
            // `a` and `b` (lengths asserted above).
            let (x, y) = unsafe {
                (
                    [
                        $load(pa.add(k)),
                        $load(pa.add($padded + k)),
                        $load(pa.add(2 * $padded + k)),
                    ],
                    [
                        $load(pb.add(k)),
                        $load(pb.add($padded + k)),
                        $load(pb.add(2 * $padded + k)),
                    ],
                )
            };
            for p in 0..SLICES {
                for q in 0..SLICES {
                    acc[p * SLICES + q] = $fma(x[p], y[q], acc[p * SLICES + q]);
                }
            }
            k += $lanes;
        }
        acc.map(|v| {
            let mut lanes = [0.0f64; $lanes];
            // SAFETY: `lanes` holds exactly one vector.
            unsafe { $store(lanes.as_mut_ptr(), v) };
            lanes.iter().sum::<f64>()
        })
    }};
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn slice_sums_avx512(a: &[f64], b: &[f64], padded: usize) -> [f64; SLICES * SLICES] {
    vector_slice_sums!(
        a,
        b,
        padded,
        8,
        _mm512_setzero_pd,
        _mm512_loadu_pd,
        _mm512_fmadd_pd,
        _mm512_storeu_pd
    )
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn slice_sums_avx2(a: &[f64], b: &[f64], padded: usize) -> [f64; SLICES * SLICES] {
    vector_slice_sums!(
        a,
        b,
        padded,
        4,
        _mm256_setzero_pd,
        _mm256_loadu_pd,
        _mm256_fmadd_pd,
        _mm256_storeu_pd
    )
}

/// The fastest kernel this CPU runs (every kernel gives the same exact sums).
fn kernel() -> Kernel {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has AVX-512F and FMA (checked above).
            return |a, b, n| unsafe { slice_sums_avx512(a, b, n) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            return |a, b, n| unsafe { slice_sums_avx2(a, b, n) };
        }
    }
    slice_sums_portable
}

/// The grid bottoms' range (smallest, largest) of sliced rows (0 for rows of zeros).
pub(super) fn low_range(lows: impl Iterator<Item = Option<i64>>) -> (i64, i64) {
    lows.flatten()
        .fold(None, |acc: Option<(i64, i64)>, l| {
            Some(acc.map_or((l, l), |(lo, hi)| (lo.min(l), hi.max(l))))
        })
        .unwrap_or((0, 0))
}

#[cfg(test)]
mod tests {
    use super::super::{accumulator_for, cross_gram_f64, dot_rows, gram_f64};
    use super::*;
    use crate::rng::{self, Stream};

    /// Rows that stress the split: N(0, 1)-like entries, entries far below the row's top
    /// (remainders, subnormals), entries whose slices are all `2^w - 1` (the largest
    /// slice sums the width allows), zeros and whole rows of zeros.
    fn rows(seed: u64, n: usize, cols: usize) -> Vec<f64> {
        let mut r = rng::stream(seed, Stream::Init);
        let mut x = Vec::with_capacity(n * cols);
        for i in 0..n {
            for _ in 0..cols {
                let u = rng::uniform(&mut r);
                let v = rng::uniform(&mut r) - 0.5;
                x.push(match i % 5 {
                    // a row of zeros
                    4 if n > 4 => 0.0,
                    // all mantissa bits set: every slice is 2^w - 1 (or its top part)
                    3 => f64::from_bits(0x3fff_ffff_ffff_ffff) * if u < 0.5 { -1.0 } else { 1.0 },
                    _ if u < 0.02 => 0.0,
                    _ if u < 0.04 => v * 1e-9,
                    _ if u < 0.05 => f64::from_bits(1 + (u * 1e9) as u64),
                    _ if u < 0.06 => v * 2f64.powi(60),
                    _ => v * 4.0,
                });
            }
        }
        x
    }

    /// The sliced dot product equals the accumulator's (bucket path) on every pair of
    /// rows, at widths that leave a partial kernel step (33, 1001), at the width where
    /// the slice width drops by one (2048 -> 2049), and with one row holding every kind
    /// of entry; every kernel this CPU runs gives the same slice sums.
    #[test]
    fn sliced_dots_are_the_exact_dots() {
        for (cols, n) in [(16usize, 6usize), (33, 6), (1001, 5), (2048, 5), (2049, 5)] {
            let x = rows(cols as u64, n, cols);
            let r = Rows::new(&x, cols);
            let sl = Slicing::for_cols(cols).expect("a sliced width");
            assert_eq!(sl.w, (53 - (usize::BITS - (cols - 1).leading_zeros())) / 2);
            let padded = sl.padded;
            let s: Vec<SlicedRow> = (0..n).map(|i| sl.row(r.row(i))).collect();
            assert!(
                s.iter().any(|sr| !sr.rems.is_empty()),
                "remainders are taken"
            );
            let low = low_range(s.iter().map(|r| r.low()));
            let mut acc = sl.accumulator(&r, &r, low, low);
            let mut plain = accumulator_for(&r, &r);
            for i in 0..n {
                for j in 0..n {
                    let got = sl.dot(&mut acc, r.row(i), &s[i], r.row(j), &s[j]);
                    let want = dot_rows(&mut plain, r.row(i), r.row(j));
                    assert_eq!(got, want, "cols {cols}, rows {i} {j}");
                    assert_eq!(got.prec(), want.prec(), "the same precision");
                    let (si, sj) = (&s[i].slices, &s[j].slices);
                    let portable = slice_sums_portable(si, sj, padded);
                    assert_eq!(kernel()(si, sj, padded), portable);
                    #[cfg(target_arch = "x86_64")]
                    if std::arch::is_x86_feature_detected!("avx2")
                        && std::arch::is_x86_feature_detected!("fma")
                    {
                        // SAFETY: the CPU has AVX2 and FMA (checked above).
                        assert_eq!(unsafe { slice_sums_avx2(si, sj, padded) }, portable);
                    }
                }
            }
        }
    }

    /// The largest slice sums the width allows stay exact: rows of `cols` entries that
    /// all have every mantissa bit set give `S_pq = cols (2^w - 1)^2` or near it, which
    /// must be below 2^53 (a width one bit wider would round them and this test fails).
    #[test]
    fn the_widest_slice_sums_are_exact() {
        for cols in [2047usize, 2048] {
            let x = vec![f64::from_bits(0x3fff_ffff_ffff_ffff); cols];
            let rows2: Vec<f64> = x.iter().chain(&x).copied().collect();
            let c = cross_gram_f64(&rows2, &x, cols);
            let mut want = Float::new(5000);
            for v in &x {
                want += Float::with_val(106, &Float::with_val(53, *v) * *v);
            }
            assert_eq!(c[0], want);
            assert_eq!(c[1], want);
        }
    }

    /// The Gram helpers take the sliced path at these sizes and agree with the bucket
    /// path entry by entry.
    #[test]
    fn gram_helpers_agree_with_the_bucket_path() {
        let (n, m, cols) = (7usize, 4usize, 300usize);
        let a = rows(7, n, cols);
        let b = rows(8, m, cols);
        let (ra, rb) = (Rows::new(&a, cols), Rows::new(&b, cols));
        assert!(Slicing::for_cols(cols).is_some() && cols >= super::super::MIN_SLICED_COLS);
        let c = cross_gram_f64(&a, &b, cols);
        let g = gram_f64(&a, n, cols);
        let mut acc = accumulator_for(&ra, &rb);
        let mut acc2 = accumulator_for(&ra, &ra);
        for i in 0..n {
            for j in 0..m {
                assert_eq!(c[i * m + j], dot_rows(&mut acc, ra.row(i), rb.row(j)));
            }
            for j in 0..n {
                assert_eq!(g[i * n + j], dot_rows(&mut acc2, ra.row(i), ra.row(j)));
            }
        }
    }
}
