//! The arithmetic every algorithm in tokensel is written over.
//!
//! [`Arith`] is a context (precision, exponent range) with method-style, assign-style
//! operations on its [`Arith::Real`] numbers: `x += a` is `ar.add(&mut x, &a)`, with no
//! allocation per operation (rug's `AssignRound` model). The model and the trainer are
//! written once, generic over it, and run in these arithmetics:
//!
//! - [`F64`] (`f64.rs`): plain binary64, zero cost; its kernels are vectorised with a
//!   fixed accumulator pattern;
//! - [`F32`] (`f32.rs`): hardware binary32, the arithmetic of a float32 implementation
//!   that loaded the f64 data into float32 arrays (data rounded to binary32 on entry);
//! - [`Mpfr::truth`] (`mpfr.rs`): MPFR at any precision >= 64 bits, the judge (the span
//!   step's Gram matrices enter it exactly, `exact.rs`);
//! - [`Mpfr::predictor`] (`mpfr.rs` + `predictor.rs`): MPFR at 53 bits with binary64's
//!   exponent range, subnormals and overflow emulated: it rounds every operation exactly
//!   as [`F64`] does, so it predicts the f64 trainer bit for bit;
//! - [`Ball`] (`ball.rs`, radius type [`Mag`] in `mag.rs`): rigorous enclosures `[m +-
//!   r]` whose every result contains the exact result for every point of its inputs; the
//!   span step's Gram matrices enter it exactly (`exact.rs`).
//!
//! Which of them a run computes in is a [`Choice`] (`choice.rs`): parsed once from a name
//! and an optional precision (the command line and the Python binding share it), it builds
//! the arithmetic and runs code written over any [`Arith`] in it ([`ArithVisitor`]).
//!
//! # Kernels and their fixed order
//! Every reduction goes through a kernel with a documented order that does not depend on
//! the vector width or the thread count:
//!
//! - [`Arith::dot`] / [`Arith::dot_f64`]: element k is fused into accumulator k mod
//!   [`LANES`] (`acc = fma(x_k, y_k, acc)`, one rounding, accumulators start at +0), and
//!   the accumulators are combined as a balanced binary tree in index order
//!   ((a0 + a1) + (a2 + a3)) + ... ;
//! - [`Arith::axpy`] / [`Arith::axpy_f64`]: `y_k = fma(alpha, x_k, y_k)`, element-wise;
//! - [`Arith::gemv_t_f64`] (X^T v): per output, an fma chain over the rows in order.
//!
//! A hardware fma rounds once, exactly like `mpfr_fma`, so the predictor mirrors these
//! kernels; the f64 overrides choose only the speed (runtime CPU-feature detection),
//! never the bits, and a test checks them against the portable default.

use std::cmp::Ordering;
use std::fmt::Debug;

/// The scalar operations shared by the hardware arithmetics ([`F64`], [`F32`]): every
/// operation is the IEEE operation of the type `$t`; an f64 argument is converted by
/// `$c` (the identity for f64, rounding to nearest for f32); exp, log1p and erf are the
/// CORE-MATH functions `$exp`, `$log1p` and `$erf`, pi the type's constant `$pi`.
/// Expands to items of an `impl Arith` block.
macro_rules! hardware_scalar_ops {
    ($t:ty, $c:expr, $exp:path, $log1p:path, $erf:path, $pi:expr) => {
        #[inline(always)]
        fn zero(&self) -> $t {
            0.0
        }
        #[inline(always)]
        fn of(&self, v: f64) -> $t {
            $c(v)
        }
        #[inline(always)]
        fn to_f64(&self, x: &$t) -> f64 {
            *x as f64
        }
        #[inline(always)]
        fn enclose(&self, x: &$t) -> (f64, f64) {
            (*x as f64, *x as f64)
        }
        #[inline(always)]
        fn set(&self, x: &mut $t, a: &$t) {
            *x = *a;
        }
        #[inline(always)]
        fn set_f64(&self, x: &mut $t, v: f64) {
            *x = $c(v);
        }
        #[inline(always)]
        fn add(&self, x: &mut $t, a: &$t) {
            *x += *a;
        }
        #[inline(always)]
        fn add_f64(&self, x: &mut $t, v: f64) {
            *x += $c(v);
        }
        #[inline(always)]
        fn sub(&self, x: &mut $t, a: &$t) {
            *x -= *a;
        }
        #[inline(always)]
        fn mul(&self, x: &mut $t, a: &$t) {
            *x *= *a;
        }
        #[inline(always)]
        fn mul_f64(&self, x: &mut $t, v: f64) {
            *x *= $c(v);
        }
        #[inline(always)]
        fn div(&self, x: &mut $t, a: &$t) {
            *x /= *a;
        }
        #[inline(always)]
        fn div_f64(&self, x: &mut $t, v: f64) {
            *x /= $c(v);
        }
        #[inline(always)]
        fn diff(&self, x: &mut $t, a: &$t, b: &$t) {
            *x = *a - *b;
        }
        #[inline(always)]
        fn diff_f64(&self, x: &mut $t, a: f64, b: f64) {
            *x = $c(a) - $c(b);
        }
        #[inline(always)]
        fn prod(&self, x: &mut $t, a: &$t, b: &$t) {
            *x = *a * *b;
        }
        #[inline(always)]
        fn fma(&self, x: &mut $t, a: &$t, b: &$t) {
            *x = a.mul_add(*b, *x);
        }
        #[inline(always)]
        fn fma_f64(&self, x: &mut $t, a: &$t, v: f64) {
            *x = a.mul_add($c(v), *x);
        }
        #[inline(always)]
        fn neg(&self, x: &mut $t) {
            *x = -*x;
        }
        #[inline(always)]
        fn exp(&self, x: &mut $t) {
            *x = $exp(*x);
        }
        #[inline(always)]
        fn ln_1p(&self, x: &mut $t) {
            *x = $log1p(*x);
        }
        #[inline(always)]
        fn erf(&self, x: &mut $t) {
            *x = $erf(*x);
        }
        #[inline(always)]
        fn pi(&self) -> $t {
            $pi
        }
        #[inline(always)]
        fn sqrt(&self, x: &mut $t) {
            *x = x.sqrt();
        }
        #[inline(always)]
        fn cmp(&self, a: &$t, b: &$t) -> Option<Ordering> {
            a.partial_cmp(b)
        }
        #[inline(always)]
        fn sign(&self, x: &$t) -> i8 {
            if *x > 0.0 {
                1
            } else if *x < 0.0 {
                -1
            } else {
                0
            }
        }
        #[inline(always)]
        fn is_finite(&self, x: &$t) -> bool {
            x.is_finite()
        }
    };
}

mod ball;
mod choice;
pub(crate) mod exact;
mod exp;
mod f32;
mod f64;
mod fixed;
mod limbs;
mod mag;
mod mpfr;
mod predictor;

pub use self::ball::{Ball, BallReal, DEFAULT_BALL_PREC, MIN_BALL_PREC};
pub use self::choice::{ArithVisitor, Choice};
pub use self::f32::F32;
pub use self::f64::{F64, dot, norm};
pub use self::mag::Mag;
pub use self::mpfr::{DEFAULT_PREC, MAX_PREC, Mpfr, normwise_rel_err, rel_err};

/// Number of accumulators of the dot-product kernels (the fixed pattern).
pub const LANES: usize = 16;

/// A row-major matrix prepared for repeated products with vectors ([`Arith::prepare`],
/// [`Arith::matvec_prepared`]): its values and, in the arithmetics that have one (the
/// ball arithmetic, the MPFR twin), its fixed-point layout (`fixed.rs`).
#[derive(Debug, Clone)]
pub struct Prepared<R> {
    values: Vec<R>,
    cols: usize,
    fixed: Option<std::sync::Arc<fixed::FixedRows>>,
}

impl<R> Prepared<R> {
    /// The values as they are (no fixed-point layout).
    pub fn plain(values: Vec<R>, cols: usize) -> Prepared<R> {
        Prepared {
            values,
            cols,
            fixed: None,
        }
    }

    /// The values, row-major.
    pub fn values(&self) -> &[R] {
        &self.values
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.values.len().checked_div(self.cols).unwrap_or(0)
    }

    /// The fixed-point layout, where the arithmetic made one.
    pub fn fixed(&self) -> Option<&fixed::FixedRows> {
        self.fixed.as_deref()
    }
}

/// Which arithmetic a trainer runs in (recorded in trajectories and cost tables).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Kind {
    /// Hardware binary64.
    #[serde(rename = "f64")]
    F64,
    /// Hardware binary32 (the data rounded to binary32 on entry).
    #[serde(rename = "f32")]
    F32,
    /// MPFR at 53 bits with binary64's range: the bit-exact f64 predictor.
    #[serde(rename = "predictor", alias = "mpfr-f64-predictor")]
    Predictor,
    /// MPFR at a chosen precision: the truth twin.
    #[serde(rename = "mpfr")]
    Mpfr,
    /// Ball arithmetic (MPFR midpoints, rounded-up radii): rigorous enclosures.
    #[serde(rename = "ball")]
    Ball,
}

impl std::fmt::Display for Kind {
    /// The name, padded to the formatter's width.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

impl Kind {
    /// Stable name used in outputs: `f64`, `f32`, `predictor`, `mpfr`, `ball`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::F64 => "f64",
            Kind::F32 => "f32",
            Kind::Predictor => "predictor",
            Kind::Mpfr => "mpfr",
            Kind::Ball => "ball",
        }
    }
}

/// A real arithmetic: a context plus assign-style operations on its numbers.
///
/// Every operation rounds once (to nearest, ties to even) in the context's precision;
/// [`Arith::fma`] rounds `a * b + x` once. Elementary functions are correctly rounded.
pub trait Arith: Copy + Send + Sync + Debug + 'static {
    /// The number type.
    type Real: Clone + Send + Sync + Debug;

    /// Which arithmetic this is.
    fn kind(&self) -> Kind;
    /// Precision in bits (53 for f64 and the predictor, 24 for f32).
    fn prec(&self) -> u32;
    /// A new zero.
    fn zero(&self) -> Self::Real;
    /// `n` zeros.
    fn zeros(&self, n: usize) -> Vec<Self::Real> {
        vec![self.zero(); n]
    }
    /// An f64, converted: exactly in every arithmetic of at least 53 bits (f64, MPFR,
    /// the predictor); rounded to the nearest binary32 in [`F32`] (as a float32
    /// implementation loading f64 data would).
    fn of(&self, v: f64) -> Self::Real {
        let mut x = self.zero();
        self.set_f64(&mut x, v);
        x
    }
    /// A vector of f64, converted as [`Arith::of`].
    fn of_slice(&self, v: &[f64]) -> Vec<Self::Real> {
        v.iter().map(|x| self.of(*x)).collect()
    }
    /// The nearest f64 (ties to even).
    fn to_f64(&self, x: &Self::Real) -> f64;
    /// An f64 interval `(lo, hi)` that contains the value `x` stands for, rounded
    /// outward: `(x, x)` for f64 and f32 (exact), MPFR's value rounded down and up.
    fn enclose(&self, x: &Self::Real) -> (f64, f64);

    /// `x = a`.
    fn set(&self, x: &mut Self::Real, a: &Self::Real);
    /// `x = v` (converted as [`Arith::of`]).
    fn set_f64(&self, x: &mut Self::Real, v: f64);
    /// `x += a`.
    fn add(&self, x: &mut Self::Real, a: &Self::Real);
    /// `x += v`.
    fn add_f64(&self, x: &mut Self::Real, v: f64);
    /// `x -= a`.
    fn sub(&self, x: &mut Self::Real, a: &Self::Real);
    /// `x *= a`.
    fn mul(&self, x: &mut Self::Real, a: &Self::Real);
    /// `x *= v`.
    fn mul_f64(&self, x: &mut Self::Real, v: f64);
    /// `x /= a`.
    fn div(&self, x: &mut Self::Real, a: &Self::Real);
    /// `x /= v`.
    fn div_f64(&self, x: &mut Self::Real, v: f64);
    /// `x = a - b`.
    fn diff(&self, x: &mut Self::Real, a: &Self::Real, b: &Self::Real);
    /// `x = a - v`.
    fn diff_f64(&self, x: &mut Self::Real, a: f64, b: f64);
    /// `x = a * b`.
    fn prod(&self, x: &mut Self::Real, a: &Self::Real, b: &Self::Real);
    /// `x = a * b + x`, rounded once.
    fn fma(&self, x: &mut Self::Real, a: &Self::Real, b: &Self::Real);
    /// `x = a * v + x`, rounded once.
    fn fma_f64(&self, x: &mut Self::Real, a: &Self::Real, v: f64);
    /// `x = -x` (exact).
    fn neg(&self, x: &mut Self::Real);
    /// `x = exp(x)`.
    fn exp(&self, x: &mut Self::Real);
    /// `x = log(1 + x)`.
    fn ln_1p(&self, x: &mut Self::Real);
    /// `x = sqrt(x)`.
    fn sqrt(&self, x: &mut Self::Real);
    /// `x = erf(x)`: correctly rounded in [`F64`] (CORE-MATH's `erf`), [`F32`]
    /// (CORE-MATH's `erff`) and MPFR (`mpfr_erf`; in the predictor then rounded into
    /// binary64's range, so it keeps [`F64`]'s bits); a ball encloses erf of every point
    /// of its input (`proofs-notes/ops.md`). The exact GELU's (`model::ops`).
    fn erf(&self, x: &mut Self::Real);
    /// pi rounded to nearest in this arithmetic (a ball: enclosed).
    fn pi(&self) -> Self::Real;
    /// `x = x^t` for an integer `t >= 0` (x^0 = 1 for every x, NaN included): correctly
    /// rounded in [`F64`] (CORE-MATH's `pow`), [`F32`] (CORE-MATH's `powf`) and MPFR
    /// (`mpfr_pow_ui`; in the predictor then rounded into binary64's range, so it keeps
    /// [`F64`]'s bits); a ball encloses the power of every point of its input. Adam's
    /// bias corrections 1 - beta^t (`train::adam`).
    fn pow_u64(&self, x: &mut Self::Real, t: u64);
    /// `x = 1 / (1 + exp(-x))`, the logistic function, without overflow: for `x >= 0` as
    /// `1 / (1 + exp(-x))`, else as `exp(x) / (1 + exp(x))` (one exp, one addition, one
    /// division in this arithmetic's rounding). A ball arithmetic overrides it with the
    /// enclosure of the increasing function over the whole ball (each formula holds its
    /// input twice, which a ball evaluation would count as two independent inputs).
    fn logistic(&self, x: &mut Self::Real) {
        if self.sign(x) >= 0 {
            self.neg(x);
            self.exp(x);
            self.add_f64(x, 1.0);
            let mut q = self.of(1.0);
            self.div(&mut q, x);
            self.set(x, &q);
        } else {
            self.exp(x);
            let mut den = x.clone();
            self.add_f64(&mut den, 1.0);
            self.div(x, &den);
        }
    }
    /// Total order for finite values, `None` with a NaN. A ball arithmetic compares
    /// midpoints: for branches between expressions that are equal in the reals only (the
    /// max subtracted before exp, the reference token of the centred formulas); a
    /// REPORTED order uses [`Arith::decide_cmp`].
    fn cmp(&self, a: &Self::Real, b: &Self::Real) -> Option<Ordering>;
    /// `x = max(x, a)`: the larger value (`x` kept on ties and NaN). A ball arithmetic
    /// returns a ball that contains max(u, v) for every u in `x` and v in `a`, so a
    /// maximum over values whose order is not decided is still enclosed.
    fn max(&self, x: &mut Self::Real, a: &Self::Real) {
        if self.cmp(a, x) == Some(Ordering::Greater) {
            self.set(x, a);
        }
    }
    /// A point of `x`'s value as an exact number: `x` itself in the point arithmetics; a
    /// ball's midpoint with radius 0. For shifts that every real number serves equally
    /// (the max subtracted before exp in softmax, which any common shift leaves
    /// unchanged): a ball then shifts by an exact number instead of by a ball, so the
    /// radius of the top score does not enter every term twice.
    fn point(&self, x: &Self::Real) -> Self::Real {
        x.clone()
    }
    /// Sign: 1, -1, or 0 for zero (and NaN).
    ///
    /// For branches between expressions that are equal in the reals only (which side of
    /// the logistic loss to evaluate); a REPORTED sign uses [`Arith::decide_sign`].
    fn sign(&self, x: &Self::Real) -> i8;
    /// The order of `a` and `b` where it is proved, `None` where it is not (a ball
    /// arithmetic whose balls overlap). `Some(Equal)` only for values known to be equal.
    /// Every reported decision between two values (the top token) goes through this.
    fn decide_cmp(&self, a: &Self::Real, b: &Self::Real) -> Option<Ordering> {
        self.cmp(a, b)
    }
    /// The sign of `x` where it is proved (1, -1, or 0 for a value known to be zero),
    /// `None` where it is not. Every reported sign (a prediction) goes through this.
    fn decide_sign(&self, x: &Self::Real) -> Option<i8> {
        self.is_finite(x).then(|| self.sign(x))
    }
    /// True unless infinite or NaN.
    fn is_finite(&self, x: &Self::Real) -> bool;
    /// Exact text of a value that [`Arith::parse_exact`] reads back bit for bit.
    fn to_exact_string(&self, x: &Self::Real) -> String;
    /// Parse [`Arith::to_exact_string`]'s output.
    fn parse_exact(&self, s: &str) -> Option<Self::Real>;

    /// True for arithmetics that take the data's Gram matrices exactly: computed once
    /// without rounding ([`exact`]) and rounded once by [`Arith::of_exact`] (the ball
    /// arithmetic). False (the default): the Gram matrices are formed in the
    /// arithmetic's own kernels ([`Arith::dot`]), today's bits.
    fn exact_inputs(&self) -> bool {
        false
    }
    /// An exact value (a dyadic rational held in an MPFR number of enough precision)
    /// rounded into this arithmetic; only called where [`Arith::exact_inputs`] is true
    /// (the default rounds to the nearest f64 first).
    fn of_exact(&self, v: &rug::Float) -> Self::Real {
        self.of(v.to_f64())
    }

    /// `out = sum_k x_k y_k` in the fixed [`LANES`] order (module docs).
    fn dot(&self, x: &[Self::Real], y: &[Self::Real], out: &mut Self::Real) {
        dot_by_fma(self, x, y, out);
    }

    /// `out = sum_k x_k y_k` with f64 `x` (the data), in the fixed [`LANES`] order.
    fn dot_f64(&self, x: &[f64], y: &[Self::Real], out: &mut Self::Real) {
        debug_assert_eq!(x.len(), y.len());
        let mut acc: [Self::Real; LANES] = std::array::from_fn(|_| self.zero());
        for (k, (a, b)) in x.iter().zip(y).enumerate() {
            self.fma_f64(&mut acc[k % LANES], b, *a);
        }
        self.combine(&mut acc, out);
    }

    /// Combine the [`LANES`] accumulators as a balanced tree in index order:
    /// ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ...
    fn combine(&self, acc: &mut [Self::Real; LANES], out: &mut Self::Real) {
        let mut width = LANES;
        while width > 1 {
            width /= 2;
            for j in 0..width {
                // slot j was consumed at an earlier j, slots 2j, 2j+1 are still intact
                acc.swap(j, 2 * j);
                let (lo, hi) = acc.split_at_mut(2 * j + 1);
                self.add(&mut lo[j], &hi[0]);
            }
        }
        self.set(out, &acc[0]);
    }

    /// `y_k = fma(alpha, x_k, y_k)` for every k.
    fn axpy(&self, alpha: &Self::Real, x: &[Self::Real], y: &mut [Self::Real]) {
        debug_assert_eq!(x.len(), y.len());
        for (yk, xk) in y.iter_mut().zip(x) {
            self.fma(yk, alpha, xk);
        }
    }

    /// `y_k = fma(alpha, x_k, y_k)` for every k, with f64 `x` (the data).
    fn axpy_f64(&self, alpha: &Self::Real, x: &[f64], y: &mut [Self::Real]) {
        debug_assert_eq!(x.len(), y.len());
        for (yk, xk) in y.iter_mut().zip(x) {
            self.fma_f64(yk, alpha, *xk);
        }
    }

    /// `m` (`m.len() / cols` rows of `cols`, row-major) prepared for repeated products
    /// ([`Arith::matvec_prepared`]): the default keeps the values; the ball arithmetic
    /// and the MPFR twin also lay it out in fixed point (`fixed.rs`).
    fn prepare(&self, m: Vec<Self::Real>, cols: usize) -> Prepared<Self::Real> {
        Prepared::plain(m, cols)
    }

    /// `out_i = m_(start + i) . v` for the rows `start..start + out.len()` of a prepared
    /// matrix: the default is [`Arith::matvec`] on those rows (the same bits as before
    /// preparing); an arithmetic with a fixed-point layout sums in fixed point and rounds
    /// once per row (spreading the rows over threads itself: `linalg::matvec_prepared`
    /// splits only the default).
    fn matvec_prepared(
        &self,
        m: &Prepared<Self::Real>,
        start: usize,
        v: &[Self::Real],
        out: &mut [Self::Real],
    ) {
        let cols = m.cols;
        self.matvec(&m.values[start * cols..(start + out.len()) * cols], v, out);
    }

    /// `out_i = dot(m_i, v)` for the `out.len()` rows of `m` (each row as [`Arith::dot`]).
    fn matvec(&self, m: &[Self::Real], v: &[Self::Real], out: &mut [Self::Real]) {
        let cols = v.len();
        for (i, o) in out.iter_mut().enumerate() {
            self.dot(&m[i * cols..(i + 1) * cols], v, o);
        }
    }

    /// A column block of X^T v: `out_j = sum_i v_i x[i * stride + j]` for j < out.len(),
    /// as an fma chain over i = 0, 1, ... starting from +0 (`x` starts at the block's
    /// first column; rows are `stride` apart).
    fn gemv_t_f64(&self, x: &[f64], stride: usize, v: &[Self::Real], out: &mut [Self::Real]) {
        let zero = self.zero();
        out.iter_mut().for_each(|o| self.set(o, &zero));
        let len = out.len();
        for (i, vi) in v.iter().enumerate() {
            self.axpy_f64(vi, &x[i * stride..i * stride + len], out);
        }
    }

    /// `out = sqrt(dot(x, x))`, rounded to f64.
    fn norm_f64(&self, x: &[Self::Real]) -> f64 {
        let mut out = self.zero();
        self.dot(x, x, &mut out);
        self.sqrt(&mut out);
        self.to_f64(&out)
    }
}

/// The trait's default dot product: element k fused into accumulator k mod [`LANES`]
/// by [`Arith::fma`], then [`Arith::combine`].
fn dot_by_fma<A: Arith>(ar: &A, x: &[A::Real], y: &[A::Real], out: &mut A::Real) {
    debug_assert_eq!(x.len(), y.len());
    let mut acc: [A::Real; LANES] = std::array::from_fn(|_| ar.zero());
    for (k, (a, b)) in x.iter().zip(y).enumerate() {
        ar.fma(&mut acc[k % LANES], a, b);
    }
    ar.combine(&mut acc, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree combination is ((a0 + a1) + (a2 + a3)) + ..., for any LANES.
    #[test]
    fn combine_is_a_balanced_tree_in_index_order() {
        let ar = F64;
        let mut acc: [f64; LANES] = std::array::from_fn(|j| 1.0 + j as f64 * 1e15);
        let mut level: Vec<f64> = acc.to_vec();
        while level.len() > 1 {
            level = level.chunks(2).map(|p| p[0] + p[1]).collect();
        }
        let mut out = 0.0;
        ar.combine(&mut acc, &mut out);
        assert_eq!(out.to_bits(), level[0].to_bits());
    }
}
