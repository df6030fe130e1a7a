//! Double-double rebuilds of the twin's dense d-space values: q = W^T p where W(0) is
//! dense, and W itself (proofs-notes/judge.md, "The dense references").
//!
//! The twin keeps W as span factors (joint: W = W(0) + B^T M X; W-mode: W = W(0) +
//! p(0) (X^T a)^T). Rebuilding W in 256-bit MPFR costs (r + 1) d^2 MPFR operations (about
//! a minute at d = 2000); here every entry is accumulated as an unevaluated pair hi + lo
//! of f64 from the factors split into pairs, with error-free products (an fma) and
//! error-free sums, so each entry is within ~n^2 u^2 (n terms, u = 2^-53) of the value of
//! the twin's factors, far below the rounding of any float32 or float64 implementation.
//! The bounds are computed with the values ([`Bound`]) and reported.
//!
//! Kernels run element-wise over contiguous rows (the same operations on every entry),
//! with a copy compiled for AVX2 and FMA chosen at run time: the same bits either way
//! (`f64::mul_add` is correctly rounded in both).

use rayon::prelude::*;
use rug::Float;

/// Unit roundoff of f64, 2^-53.
const U: f64 = f64::EPSILON / 2.0;

/// A vector of double-double values hi + lo.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DdVec {
    /// Leading parts.
    pub hi: Vec<f64>,
    /// Trailing parts (not normalised: |lo| may exceed half an ulp of hi).
    pub lo: Vec<f64>,
}

impl DdVec {
    /// `n` zeros.
    pub fn zeros(n: usize) -> DdVec {
        DdVec {
            hi: vec![0.0; n],
            lo: vec![0.0; n],
        }
    }

    /// Exact f64 values (lo = 0).
    pub fn exact(v: &[f64]) -> DdVec {
        DdVec {
            hi: v.to_vec(),
            lo: vec![0.0; v.len()],
        }
    }

    /// MPFR values split into hi = RN(x), lo = RN(x - hi): |x - hi - lo| <= u^2 |x|
    /// (1 + u) (x - hi is exact in MPFR at x's precision).
    pub fn of_floats(v: &[Float]) -> DdVec {
        let (hi, lo) = v.iter().map(split).unzip();
        DdVec { hi, lo }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.hi.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.hi.is_empty()
    }

    /// The 2-norm of the values (hi + lo rounded), in f64.
    pub fn norm(&self) -> f64 {
        self.hi
            .iter()
            .zip(&self.lo)
            .map(|(h, l)| (h + l) * (h + l))
            .sum::<f64>()
            .sqrt()
    }
}

/// hi = RN(x), lo = RN(x - hi).
pub fn split(x: &Float) -> (f64, f64) {
    let hi = x.to_f64();
    if !hi.is_finite() {
        return (hi, 0.0);
    }
    let mut r = x.clone();
    r -= hi;
    (hi, r.to_f64())
}

/// s + e = a + b exactly (Knuth's TwoSum).
#[inline(always)]
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// `acc += (ah + al) * (xh + xl)` element-wise (`xl` absent: exact f64 `xh`):
/// p + e = ah xh exactly (an fma), the small terms ah xl + al xh added to e, the
/// product's leading part added to the accumulator's by TwoSum, and the rest to its
/// trailing part.
#[inline(always)]
fn axpy_kernel(ah: f64, al: f64, xh: &[f64], xl: Option<&[f64]>, h: &mut [f64], l: &mut [f64]) {
    let n = h.len();
    let (xh, h, l) = (&xh[..n], &mut h[..n], &mut l[..n]);
    match xl {
        Some(xl) => {
            let xl = &xl[..n];
            for k in 0..n {
                let p = ah * xh[k];
                let e = ah.mul_add(xh[k], -p);
                let t = e + ah.mul_add(xl[k], al * xh[k]);
                let (s, c) = two_sum(h[k], p);
                h[k] = s;
                l[k] += c + t;
            }
        }
        None => {
            for k in 0..n {
                let p = ah * xh[k];
                let e = ah.mul_add(xh[k], -p);
                let t = al.mul_add(xh[k], e);
                let (s, c) = two_sum(h[k], p);
                h[k] = s;
                l[k] += c + t;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! The portable kernel compiled with AVX2 and FMA enabled (same code, same bits).

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn axpy(
        ah: f64,
        al: f64,
        xh: &[f64],
        xl: Option<&[f64]>,
        h: &mut [f64],
        l: &mut [f64],
    ) {
        super::axpy_kernel(ah, al, xh, xl, h, l)
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2_fma() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// [`axpy_kernel`], the AVX2 copy where the CPU has AVX2 and FMA.
fn axpy(ah: f64, al: f64, xh: &[f64], xl: Option<&[f64]>, h: &mut [f64], l: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked above).
        return unsafe { avx2::axpy(ah, al, xh, xl, h, l) };
    }
    axpy_kernel(ah, al, xh, xl, h, l)
}

/// Column-block width of the parallel accumulations (each block is an independent set
/// of outputs; the order of the sums within an output never depends on it).
const BLOCK: usize = 256;

/// `out = sum_i a_i rows_i` (+ `out`'s initial value), with `rows` the `a.len()` rows of
/// width `out.len()`: exact f64 rows (`rows_lo` `None`) or double-double rows. Each
/// output is a sequential accumulation over i = 0, 1, ..., its columns split over
/// threads.
pub fn accumulate_rows(a: &DdVec, rows_hi: &[f64], rows_lo: Option<&[f64]>, out: &mut DdVec) {
    let cols = out.len();
    let DdVec { hi, lo } = out;
    hi.par_chunks_mut(BLOCK)
        .zip(lo.par_chunks_mut(BLOCK))
        .enumerate()
        .for_each(|(b, (h, l))| {
            let k0 = b * BLOCK;
            let k1 = k0 + h.len();
            for i in 0..a.len() {
                let xh = &rows_hi[i * cols + k0..i * cols + k1];
                let xl = rows_lo.map(|x| &x[i * cols + k0..i * cols + k1]);
                axpy(a.hi[i], a.lo[i], xh, xl, h, l);
            }
        });
}

/// A rigorous bound on the 2-norm (Frobenius for W) of the difference between a
/// double-double rebuild and the exact value of the twin's factors it is formed from,
/// with the norm of that value (proofs-notes/judge.md derives the constants).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// The bound on ||rebuild - value||.
    pub abs: f64,
    /// ||rebuild|| (as rounded to f64).
    pub norm: f64,
}

impl Bound {
    /// The bound relative to the value's norm (infinite for a zero value with a nonzero
    /// bound).
    pub fn relative(&self) -> f64 {
        if self.abs == 0.0 {
            0.0
        } else {
            self.abs / self.norm
        }
    }
}

/// K_n = 1.03 (n + 1)(n + 4) + 12: the constant of an accumulation of n double-double
/// products (judge.md), times 1.01 for the f64 evaluation of the bound itself.
fn k(n: usize) -> f64 {
    let n = n as f64;
    1.01 * (1.03 * (n + 1.0) * (n + 4.0) + 12.0)
}

/// q = W(0)^T p + X^T v (v empty: W(0)^T p only) for `w0` (d x d, row-major), p and v
/// from the twin (MPFR values split into pairs), `x` the r x d data rows.
pub fn q_dense(w0: &[f64], p: &[Float], x: &[f64], v: &[Float]) -> (DdVec, Bound) {
    let d = p.len();
    let (p, v) = (DdVec::of_floats(p), DdVec::of_floats(v));
    let mut q = DdVec::zeros(d);
    accumulate_rows(&p, w0, None, &mut q);
    if !v.is_empty() {
        accumulate_rows(&v, x, None, &mut q);
    }
    // |W0|^T |p| <= ||W0||_F ||p||, |X|^T |v| <= ||X||_F ||v|| (2-norms of vectors)
    let fro = |m: &[f64]| m.iter().map(|a| a * a).sum::<f64>().sqrt();
    let terms = fro(w0) * p.norm() + if v.is_empty() { 0.0 } else { fro(x) * v.norm() };
    let bound = Bound {
        abs: k(d + v.len()) * U * U * terms,
        norm: q.norm(),
    };
    (q, bound)
}

/// W = W(0) + B^T N, N = M X (joint mode): `basis` B ((r+1) x d) and `m` M ((r+1) x r)
/// from the twin, `x` the r x d data rows, `w0` W(0) (d x d). Rows of W in parallel.
pub fn w_joint(w0: &[f64], basis: &[Float], m: &[Float], x: &[f64]) -> (DdVec, Bound) {
    let d = w0.len().isqrt();
    let rows = basis.len() / d;
    let r = x.len() / d;
    // N_i = sum_j M_ij x_j, each row in double-double; ||(|M| |X|)_i|| <= sum_j
    // |M_ij| ||x_j|| for the bound
    let mut n = DdVec::zeros(rows * d);
    let n_abs: Vec<f64> = {
        let m = DdVec::of_floats(m);
        let x_norms: Vec<f64> = x.chunks(d).map(crate::arith::norm).collect();
        n.hi.par_chunks_mut(d)
            .zip(n.lo.par_chunks_mut(d))
            .enumerate()
            .for_each(|(i, (h, l))| {
                for j in 0..r {
                    let (ah, al) = (m.hi[i * r + j], m.lo[i * r + j]);
                    axpy(ah, al, &x[j * d..(j + 1) * d], None, h, l);
                }
            });
        (0..rows)
            .map(|i| {
                (0..r)
                    .map(|j| m.hi[i * r + j].abs() * x_norms[j])
                    .sum::<f64>()
            })
            .collect()
    };
    // B^T as columns: W[row, :] = W0[row, :] + sum_i B[i, row] N_i
    let b = DdVec::of_floats(basis);
    let mut w = DdVec::exact(w0);
    w.hi.par_chunks_mut(d)
        .zip(w.lo.par_chunks_mut(d))
        .enumerate()
        .for_each(|(row, (h, l))| {
            for i in 0..rows {
                let (ah, al) = (b.hi[i * d + row], b.lo[i * d + row]);
                axpy(
                    ah,
                    al,
                    &n.hi[i * d..(i + 1) * d],
                    Some(&n.lo[i * d..(i + 1) * d]),
                    h,
                    l,
                );
            }
        });
    let b_norms: Vec<f64> = b.hi.chunks(d).map(crate::arith::norm).collect();
    let terms: f64 = crate::arith::norm(w0)
        + b_norms
            .iter()
            .zip(&n_abs)
            .map(|(bi, ni)| bi * ni)
            .sum::<f64>();
    let bound = Bound {
        abs: (k(rows) + k(r) + 5.0) * U * U * terms,
        norm: w.norm(),
    };
    (w, bound)
}

/// W = W(0) + p(0) v^T (W-mode: v = X^T a from the twin).
pub fn w_rank_one(w0: &[f64], p0: &[f64], v: &[Float]) -> (DdVec, Bound) {
    let d = p0.len();
    let v = DdVec::of_floats(v);
    let mut w = DdVec::exact(w0);
    w.hi.par_chunks_mut(d)
        .zip(w.lo.par_chunks_mut(d))
        .enumerate()
        .for_each(|(row, (h, l))| axpy(p0[row], 0.0, &v.hi, Some(&v.lo), h, l));
    let bound = Bound {
        abs: k(1) * U * U * (crate::arith::norm(w0) + crate::arith::norm(p0) * v.norm()),
        norm: w.norm(),
    };
    (w, bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arith::{Arith, Mpfr};
    use crate::config::{Formulation, Method, Mode, PInit, Preset, WInit};
    use crate::data::{Dataset, Params};
    use crate::linalg;
    use crate::rng::{self, Stream};
    use crate::train::drive::{Control, drive};
    use crate::train::{Engine, Trainer, train_rows};

    /// ||hi + lo - t||_2 evaluated in MPFR.
    fn distance(v: &DdVec, t: &[Float]) -> f64 {
        let mut acc = Float::with_val(64, 0.0);
        for ((h, l), x) in v.hi.iter().zip(&v.lo).zip(t) {
            let mut d = x.clone();
            d -= h;
            d -= l;
            acc += Float::with_val(64, d.square_ref());
        }
        acc.sqrt().to_f64()
    }

    /// The double-double rebuilds of q and W from a 256-bit twin's factors, after a few
    /// steps of joint and W-mode, are within their stated bounds of the twin's own MPFR
    /// rebuilds (whose error, ~2^-250 relative, is far below the bounds), and the
    /// bounds are far below f64's rounding.
    #[test]
    fn rebuilds_agree_with_the_twins_mpfr_values() {
        for mode in [Mode::Joint, Mode::W] {
            let mut cfg = Preset::Balanced.config();
            (cfg.d, cfg.n_train, cfg.n_test, cfg.steps) = (24, 3, 2, 5);
            (cfg.mode, cfg.step_size) = (mode, 0.05);
            (cfg.init.p, cfg.init.w) = (PInit::Gaussian, WInit::KaimingUniform);
            cfg.validate().unwrap();
            let data = Dataset::generate(&cfg);
            let ar = Mpfr::truth(256).unwrap();
            let mut tr =
                Trainer::with_method(&cfg, &data, ar, Formulation::Stable, Method::Span).unwrap();
            drive(&mut tr, 5, |_, _| Ok(Control::Continue)).unwrap();
            let params = Params::init(&cfg);
            let w0 = params.w.as_ref().unwrap().as_slice().unwrap();
            let p0 = params.p.as_slice().unwrap();
            let x = train_rows(&data);
            let Engine::Span(e) = &tr.engine else {
                unreachable!()
            };
            let (w, bound) = match e.joint_factors() {
                Some((basis, m)) => w_joint(w0, basis, m, x),
                None => {
                    let mut v = ar.zeros(cfg.d);
                    linalg::matvec_t_f64(&ar, x, &e.a[1..], &mut v);
                    w_rank_one(w0, p0, &v)
                }
            };
            let (p, w_mp) = tr.params();
            let dist = distance(&w, &w_mp.unwrap());
            assert!(dist <= bound.abs, "{mode:?} W: {dist:e} > {:e}", bound.abs);
            assert!(bound.relative() < 1e-26, "{:e}", bound.relative());
            if let Some((basis, m)) = e.joint_factors() {
                let rows = basis.len() / cfg.d;
                let mut bp = ar.zeros(rows);
                linalg::matvec(&ar, basis, &p, &mut bp);
                let mut v = ar.zeros(rows - 1);
                linalg::matvec_t(&ar, m, &bp, &mut v);
                let (q, bound) = q_dense(w0, &p, x, &v);
                let dist = distance(&q, &tr.q());
                assert!(dist <= bound.abs, "q: {dist:e} > {:e}", bound.abs);
                assert!(bound.relative() < 1e-26, "{:e}", bound.relative());
            }
        }
    }

    /// An accumulation of products with cancellation agrees with a 400-bit MPFR sum to
    /// within the stated bound, and the bound is not vacuous (the error is nonzero in
    /// plain f64 and far below it in double-double).
    #[test]
    fn accumulation_is_within_its_bound() {
        let mut r = rng::stream(7, Stream::Init);
        let (rows, cols) = (300, 40);
        let mut x = vec![0.0; rows * cols];
        rng::fill_normal(&mut r, 1.0, &mut x);
        let mut a = vec![0.0; rows];
        rng::fill_normal(&mut r, 1.0, &mut a);
        // a_i as 200-bit values with tails below f64's last bit
        let a_mp: Vec<Float> = a
            .iter()
            .map(|v| {
                let mut f = Float::with_val(200, *v);
                f *= Float::with_val(200, 1.0 + 1e-20);
                f
            })
            .collect();
        let a_dd = DdVec::of_floats(&a_mp);
        let mut out = DdVec::zeros(cols);
        accumulate_rows(&a_dd, &x, None, &mut out);
        let mut worst: f64 = 0.0;
        for k in 0..cols {
            let mut exact = Float::with_val(400, 0.0);
            let mut abs = 0.0;
            for i in 0..rows {
                exact += Float::with_val(400, &a_mp[i] * x[i * cols + k]);
                abs += (a[i] * x[i * cols + k]).abs();
            }
            let mut err = exact.clone();
            err -= out.hi[k];
            err -= out.lo[k];
            worst = worst.max(err.to_f64().abs() / abs);
        }
        assert!(worst > 0.0 && worst <= k(rows) * U * U, "{worst:e}");
        assert!(worst < 1e-28, "{worst:e}");
    }
}
