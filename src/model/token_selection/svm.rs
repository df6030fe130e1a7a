//! The attention SVM of the binary token-selection model (SPEC section 15), solved in f64
//! and proved optimal exactly (derivation: proofs-notes/max-margin.md).
//!
//! For a selection pattern alpha (one token per training sample) and the fixed key-query
//! matrix W = W(0):
//!
//! ```text
//! p_mm(alpha) = argmin ||p||^2  s.t.  p^T W (x_{i,alpha_i} - x_{i,t}) >= 1  (t != alpha_i, all i)
//! ```
//!
//! In span coordinates p = W X^T a (a in R^{nT}) the constraint values are D H a with
//! H = X W^T W X^T the exact Gram matrix of the tokens (integers times 2^-scale,
//! [`Gram`]) and D the n(T-1) x nT difference operator of the pattern ([`Constraints`]);
//! ||p||^2 = a^T H a. With v_c = W (x_{i,alpha_i} - x_{i,t}) and Q = D H D^T (Q_cc' =
//! v_c^T v_c'), the f64 solver ([`solve_f64`]) is an active-set method on the dual
//! (min 1/2 l^T Q l - 1^T l, l >= 0). Its support S is then re-solved EXACTLY
//! (Q_SS l_S = 1 over the integers by p-adic lifting, checked exactly; fraction-free
//! elimination as the fallback; [`certificate_for`]) and
//! the certificate (a, l) is checked exactly ([`check`]): stationarity a = D^T l (so
//! p = sum_c l_c v_c), dual feasibility l >= 0, primal feasibility D H a >= 1 and
//! complementary slackness l_c ((D H a)_c - 1) = 0. These four make p optimal (convex
//! objective, linear constraints) and unique (strictly convex), with ||p_mm||^2 =
//! a^T H a an exact rational. An infeasible pattern is certified by a Farkas vector
//! y >= 0 with sum_c y_c v_c = 0 and sum_c y_c > 0 ([`check_farkas`]).

use std::fmt;

use rug::{Integer, Rational};
use serde::Serialize;

use crate::arith::exact;
use crate::config::Group;
use crate::data::Dataset;
use crate::error::{Error, Result};

/// The most training tokens n T an SVM instance may have: the exact Gram matrix holds
/// (n T)^2 big integers (about 150 bits each for N(0, 1) data), about 100 MB at this size.
pub const MAX_TOKENS: usize = 1200;
/// The most products r d^2 the exact W(0) X^T of a dense W(0) may take (r = n T).
pub const MAX_DENSE_W_PRODUCTS: u128 = 4_000_000_000;
/// The most support constraints the exact re-solve takes (p-adic lifting, [`MAX_MINOR_BITS`]
/// / 30 digits of about |S|^2 products each; measured on 2 shared cores, d = 2000,
/// balanced layout: |S| = 101 in 0.12 s, 202 in 1.8 s, 338 in 8 s).
pub const MAX_SUPPORT: usize = 600;
/// The most support constraints the fraction-free fallback of the exact re-solve takes
/// (about |S|^3 / 6 products of integers of up to |S| b bits: 101 in 2.3 s, 202 in about
/// 40 s); past it, a failed p-adic solve (an unlucky prime) gives no certificate.
const MAX_FRACTION_FREE: usize = 150;
/// The largest bound |S| (b + log2 |S|) on the bits of a minor of Q_SS the exact
/// re-solve takes (b: the bits of the augmented system's largest entry); past it the
/// exact work is refused.
pub const MAX_MINOR_BITS: u64 = 100_000;

/// Refuse an instance past the size limits, before any work: [`MAX_TOKENS`] tokens, and
/// [`MAX_DENSE_W_PRODUCTS`] for a dense W(0). `n`, `t`, `d`: samples, tokens per sample,
/// dimension.
pub fn check_sizes(n: usize, t: usize, d: usize, dense_w: bool) -> Result<()> {
    let r = n as u128 * t as u128;
    if r > MAX_TOKENS as u128 {
        return Err(Error::TooLarge {
            field: "n_train".into(),
            reason: format!(
                "the attention SVM of {n} samples x {t} tokens = {r} tokens is over the limit of \
                 {MAX_TOKENS} tokens (the exact Gram matrix holds (n T)^2 big integers)"
            ),
        });
    }
    if t < 2 {
        return Err(Error::config(
            "layout.tokens",
            "the attention SVM needs at least 2 tokens per sample",
        ));
    }
    if dense_w && r * (d as u128) * (d as u128) > MAX_DENSE_W_PRODUCTS {
        return Err(Error::TooLarge {
            field: "d".into(),
            reason: format!(
                "the exact W(0) X^T of a dense W(0) takes n T d^2 = {} products, over the limit \
                 of {MAX_DENSE_W_PRODUCTS}",
                r * (d as u128) * (d as u128)
            ),
        });
    }
    Ok(())
}

/// The exact Gram matrix H = X W^T W X^T of the r training tokens (rows of X): H =
/// `h` 2^-`scale`, `h` integer, row-major r x r.
#[derive(Debug, Clone)]
pub struct Gram {
    /// Number of tokens r = n T.
    pub r: usize,
    /// The integer matrix (row-major).
    pub h: Vec<Integer>,
    /// H = h 2^-scale.
    pub scale: u32,
}

impl Gram {
    /// The exact Gram matrix of the rows of `x` (r rows of width `d`) under `w` (d x d,
    /// row-major; `None`: the identity): every entry a sum of products of f64 computed
    /// without rounding ([`exact::gram_f64`], and for a dense W the exact rows W x_j by
    /// [`exact::cross_gram_f64`], then [`exact::gram_exact`]).
    pub fn of_tokens(x: &[f64], d: usize, w: Option<&[f64]>) -> Gram {
        let r = x.len() / d.max(1);
        let floats = match w {
            None => exact::gram_f64(x, r, d),
            Some(w) => exact::gram_exact(&exact::cross_gram_f64(x, w, d), r, d),
        };
        // every nonzero entry is a multiple of 2^(exp - prec)
        let lowest = floats
            .iter()
            .filter(|f| !f.is_zero())
            .filter_map(|f| f.get_exp().map(|e| e as i64 - f.prec() as i64))
            .min()
            .unwrap_or(0);
        let scale = (-lowest).max(0) as u32;
        let h = floats
            .into_iter()
            .map(|mut f| {
                f <<= scale;
                f.to_integer().expect("a finite exact dyadic entry")
            })
            .collect();
        Gram { r, h, scale }
    }

    fn at(&self, i: usize, j: usize) -> &Integer {
        &self.h[i * self.r + j]
    }
}

/// The constraints of a pattern: constraint c = (i, t), t != alpha_i, numbered sample by
/// sample, tokens in order; token (i, t) is row i T + t of X.
#[derive(Debug, Clone)]
pub struct Constraints {
    /// Tokens per sample T.
    pub t: usize,
    /// The selected token alpha_i of each sample.
    pub pattern: Vec<usize>,
}

impl Constraints {
    /// The constraints of `pattern` (every entry below `t`).
    pub fn new(t: usize, pattern: Vec<usize>) -> Constraints {
        debug_assert!(pattern.iter().all(|a| *a < t));
        Constraints { t, pattern }
    }

    /// Number of constraints n (T - 1).
    pub fn count(&self) -> usize {
        self.pattern.len() * (self.t - 1)
    }

    /// Sample i and token t of constraint `c`.
    pub fn sample_token(&self, c: usize) -> (usize, usize) {
        let (i, k) = (c / (self.t - 1), c % (self.t - 1));
        (i, if k < self.pattern[i] { k } else { k + 1 })
    }

    /// Rows of X of constraint `c`: (selected token, other token).
    fn rows(&self, c: usize) -> (usize, usize) {
        let (i, t) = self.sample_token(c);
        (i * self.t + self.pattern[i], i * self.t + t)
    }

    /// Q_cc' 2^scale = v_c^T v_c' 2^scale, an integer.
    fn q(&self, g: &Gram, c: usize, e: usize) -> Integer {
        let ((a, t), (b, u)) = (self.rows(c), self.rows(e));
        let mut v = g.at(a, b).clone();
        v -= g.at(a, u);
        v -= g.at(t, b);
        v += g.at(t, u);
        v
    }

    /// a = D^T l for integer l (one entry per constraint): the selected token of sample i
    /// gets sum_t l_(i,t), the others -l_(i,t).
    pub fn transpose_apply(&self, l: &[Integer]) -> Vec<Integer> {
        let mut a = vec![Integer::new(); self.pattern.len() * self.t];
        for (c, lc) in l.iter().enumerate() {
            let (sel, other) = self.rows(c);
            a[sel] += lc;
            a[other] -= lc;
        }
        a
    }

    /// (D u)_c = u_sel - u_other for every constraint.
    fn apply(&self, u: &[Integer]) -> Vec<Integer> {
        (0..self.count())
            .map(|c| {
                let (sel, other) = self.rows(c);
                Integer::from(&u[sel] - &u[other])
            })
            .collect()
    }
}

/// Q = D H D^T in f64 (m x m, row-major): each entry the exact integer rounded once to
/// the nearest f64 and scaled by 2^-scale.
pub fn q_f64(g: &Gram, cons: &Constraints) -> Vec<f64> {
    let m = cons.count();
    let mut q = vec![0.0; m * m];
    for c in 0..m {
        for e in c..m {
            let v = rug::Float::with_val(53, &cons.q(g, c, e)) >> g.scale;
            q[c * m + e] = v.to_f64();
            q[e * m + c] = q[c * m + e];
        }
    }
    q
}

/// What the f64 active-set method ends with.
#[derive(Debug, Clone, PartialEq)]
pub enum F64Outcome {
    /// Every inactive constraint has dual gradient 1 - (Q l)_c at most the tolerance:
    /// the multipliers l (zero off the support).
    Optimal {
        /// The multipliers (one per constraint).
        lambda: Vec<f64>,
    },
    /// Constraint `c` is (numerically) a combination of the free set's with no positive
    /// coefficient: the dual is unbounded and the pattern (probably) infeasible; the
    /// exact Farkas check decides ([`check_farkas`]).
    Infeasible {
        /// The free set when it was found.
        set: Vec<usize>,
        /// The dependent constraint.
        c: usize,
    },
    /// The iteration limit was reached (cycling on a degenerate instance).
    NoConvergence,
    /// The Cholesky refactorisation of the free set after an exchange or a step back
    /// failed: constraint `c` is (numerically) dependent on the constraints `set` before
    /// it in the free set. The method cannot go on; whether the pattern is feasible is
    /// left to the exact Farkas search ([`farkas_search`]).
    FactorisationFailed {
        /// The iteration at which it failed.
        iteration: usize,
        /// The free set's constraints before `c`.
        set: Vec<usize>,
        /// The dependent constraint.
        c: usize,
    },
    /// The free set grew past the limit given to [`solve_f64`] (the exact re-solve
    /// would refuse it: [`MAX_SUPPORT`]).
    SupportOverLimit,
}

/// Dual gradient tolerance of [`solve_f64`]: stop when 1 - (Q l)_c <= this for all c.
pub const F64_TOL: f64 = 1e-10;
/// Relative pivot below which [`solve_f64`] takes a constraint as dependent on the free
/// set's: pivot^2 <= this * Q_cc.
const DEPENDENT: f64 = 1e-11;

/// The lower Cholesky factor of Q_FF, rows appended as constraints enter.
struct Chol {
    rows: Vec<Vec<f64>>,
}

impl Chol {
    /// The factor of Q_FF for the free set `free`, or `Err(k)` where the pivot of
    /// `free[k]` is (numerically) 0: that constraint depends on the k before it.
    fn of(q: &[f64], m: usize, free: &[usize]) -> std::result::Result<Chol, usize> {
        let mut ch = Chol { rows: Vec::new() };
        for (k, &c) in free.iter().enumerate() {
            let col: Vec<f64> = free[..k].iter().map(|&j| q[j * m + c]).collect();
            let l = ch.forward(&col);
            let piv2 = q[c * m + c] - l.iter().map(|v| v * v).sum::<f64>();
            if piv2 <= DEPENDENT * q[c * m + c] || piv2 <= 0.0 {
                return Err(k);
            }
            ch.push(l, piv2.sqrt());
        }
        Ok(ch)
    }

    fn push(&mut self, mut l: Vec<f64>, diag: f64) {
        l.push(diag);
        self.rows.push(l);
    }

    /// Solve L y = b.
    fn forward(&self, b: &[f64]) -> Vec<f64> {
        let mut y = Vec::with_capacity(b.len());
        for (k, row) in self.rows.iter().enumerate() {
            let s: f64 = row[..k].iter().zip(&y).map(|(a, b)| a * b).sum();
            y.push((b[k] - s) / row[k]);
        }
        y
    }

    /// Solve L^T x = y.
    fn backward(&self, y: &[f64]) -> Vec<f64> {
        let k = y.len();
        let mut x = y.to_vec();
        for i in (0..k).rev() {
            x[i] /= self.rows[i][i];
            let xi = x[i];
            for (j, xj) in x.iter_mut().enumerate().take(i) {
                *xj -= self.rows[i][j] * xi;
            }
        }
        x
    }

    /// Square of max over min diagonal entry: a lower estimate of Q_FF's condition number.
    fn condition_estimate(&self) -> f64 {
        let d = self.rows.iter().enumerate().map(|(k, r)| r[k].abs());
        let (lo, hi) = d.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        if self.rows.is_empty() {
            1.0
        } else {
            (hi / lo).powi(2)
        }
    }
}

/// The f64 result with its measured numbers.
#[derive(Debug, Clone)]
pub struct F64Solution {
    /// How it ended.
    pub outcome: F64Outcome,
    /// Iterations (constraint additions, exchanges and step-backs).
    pub iterations: usize,
    /// (max / min diagonal of the Cholesky factor of Q_SS)^2 at the end: a lower estimate
    /// of the condition number of Q_SS.
    pub condition: f64,
}

/// The iteration limit of [`solve_f64`] on `m` constraints: 20 m + 1000.
pub fn iteration_limit(m: usize) -> usize {
    20 * m + 1000
}

/// The dual active-set method (Lawson-Hanson's, for min 1/2 l^T Q l - 1^T l, l >= 0):
/// add the constraint of largest dual gradient 1 - (Q l)_c; solve Q_FF s = 1 on the free
/// set; step back to the boundary and free the constraints whose multiplier reaches 0
/// while some s_j <= 0. A constraint that is (numerically) dependent on the free set's
/// is exchanged against the first one to reach 0 along the null direction, or, with no
/// such one, reported as infeasibility. Deterministic (lowest index on ties). Stops with
/// [`F64Outcome::SupportOverLimit`] when the free set would exceed `max_free`
/// constraints, so every Cholesky factorisation is of at most `max_free` rows.
pub fn solve_f64(q: &[f64], m: usize, max_free: usize) -> F64Solution {
    let max_iter = iteration_limit(m);
    let mut lam = vec![0.0; m];
    let mut free: Vec<usize> = Vec::new();
    let mut in_free = vec![false; m];
    let mut ch = Chol { rows: Vec::new() };
    let mut it = 0;
    let done = |outcome, it, ch: &Chol| F64Solution {
        outcome,
        iterations: it,
        condition: ch.condition_estimate(),
    };
    let failed = |iteration, free: &[usize], k: usize| F64Outcome::FactorisationFailed {
        iteration,
        set: free[..k].to_vec(),
        c: free[k],
    };
    loop {
        it += 1;
        if it > max_iter {
            return done(F64Outcome::NoConvergence, max_iter, &ch);
        }
        let mut best: Option<(usize, f64)> = None;
        for c in (0..m).filter(|c| !in_free[*c]) {
            let qc = &q[c * m..(c + 1) * m];
            let w = 1.0 - free.iter().map(|&j| qc[j] * lam[j]).sum::<f64>();
            if best.is_none_or(|(_, b)| w > b) {
                best = Some((c, w));
            }
        }
        let Some((c, _)) = best.filter(|(_, w)| *w > F64_TOL) else {
            return done(F64Outcome::Optimal { lambda: lam }, it, &ch);
        };
        let col: Vec<f64> = free.iter().map(|&j| q[j * m + c]).collect();
        let l = ch.forward(&col);
        let piv2 = q[c * m + c] - l.iter().map(|v| v * v).sum::<f64>();
        if piv2 <= DEPENDENT * q[c * m + c] || piv2 <= 0.0 {
            // v_c = sum_j beta_j v_j (numerically): move along e_c - beta
            let beta = ch.backward(&l);
            let mut step: Option<(usize, f64)> = None;
            for (k, &j) in free.iter().enumerate() {
                if beta[k] > 1e-12 {
                    let r = lam[j] / beta[k];
                    if step.is_none_or(|(_, s)| r < s) {
                        step = Some((k, r));
                    }
                }
            }
            let Some((k, t)) = step else {
                return done(F64Outcome::Infeasible { set: free, c }, it, &ch);
            };
            for (kk, &j) in free.iter().enumerate() {
                lam[j] = (lam[j] - t * beta[kk]).max(0.0);
            }
            lam[free[k]] = 0.0;
            in_free[free[k]] = false;
            free.remove(k);
            lam[c] = t;
            free.push(c);
            in_free[c] = true;
            match Chol::of(q, m, &free) {
                Ok(f) => ch = f,
                Err(k) => return done(failed(it, &free, k), it, &ch),
            }
        } else {
            if free.len() >= max_free {
                return done(F64Outcome::SupportOverLimit, it, &ch);
            }
            ch.push(l, piv2.sqrt());
            free.push(c);
            in_free[c] = true;
        }
        // the inner loop: the unconstrained minimiser on the free set, stepping back
        loop {
            it += 1;
            if it > max_iter {
                return done(F64Outcome::NoConvergence, max_iter, &ch);
            }
            let s = ch.backward(&ch.forward(&vec![1.0; free.len()]));
            if s.iter().all(|v| *v > 0.0) {
                for (k, &j) in free.iter().enumerate() {
                    lam[j] = s[k];
                }
                break;
            }
            let mut alpha = 1.0f64;
            for (k, &j) in free.iter().enumerate() {
                if s[k] <= 0.0 {
                    alpha = alpha.min(lam[j] / (lam[j] - s[k]));
                }
            }
            let mut keep = Vec::with_capacity(free.len());
            for (k, &j) in free.iter().enumerate() {
                lam[j] += alpha * (s[k] - lam[j]);
                if lam[j] > 0.0 && !(s[k] <= 0.0 && lam[j] / (lam[j] - s[k]) <= alpha) {
                    keep.push(j);
                } else {
                    lam[j] = 0.0;
                    in_free[j] = false;
                }
            }
            free = keep;
            match Chol::of(q, m, &free) {
                Ok(f) => ch = f,
                Err(k) => return done(failed(it, &free, k), it, &ch),
            }
            if free.is_empty() {
                break;
            }
        }
    }
}

/// Solve `a x = b` exactly for a symmetric positive semidefinite integer matrix `a`
/// (k x k, row-major) by fraction-free (Bareiss) elimination in order, skipping a zero
/// pivot (its row is then zero: the constraint depends on the earlier ones, and its
/// unknown is set to 0). Returns (x numerators, common denominator > 0): x = num / den,
/// the solution on the kept rows. `None` when a zero pivot has a nonzero row (the matrix
/// is not positive semidefinite).
///
/// Every intermediate entry is a minor of the augmented matrix (Sylvester's identity),
/// so each division is exact and the entries stay below the Hadamard bound
/// ([`ExactSize::minor_bits`]). The trailing matrix stays symmetric: only its upper
/// triangle is kept (row i holds columns i.. and the right-hand side), and the rows of a
/// step are updated in parallel (each writes its own row only: the result does not
/// depend on the thread count).
fn solve_psd(a: Vec<Integer>, k: usize, b: Vec<Integer>) -> Option<(Vec<Integer>, Integer)> {
    use rayon::prelude::*;
    // row i: a_ij for j = i..k, then b_i
    let mut rows: Vec<Vec<Integer>> = (0..k)
        .map(|i| {
            let mut r: Vec<Integer> = a[i * k + i..(i + 1) * k].to_vec();
            r.push(b[i].clone());
            r
        })
        .collect();
    drop(a);
    let mut kept = Vec::new();
    let mut prev = Integer::from(1);
    for p in 0..k {
        if rows[p][0].is_zero_int() {
            if rows[p][..k - p].iter().any(|v| !v.is_zero_int()) {
                return None;
            }
            continue;
        }
        kept.push(p);
        let (head, tail) = rows.split_at_mut(p + 1);
        let piv = &head[p];
        tail.par_iter_mut().enumerate().for_each(|(n, row)| {
            let i = p + 1 + n;
            let a_pi = &piv[i - p];
            // columns j = i..k (index j - i) and the right-hand side (index k - i)
            for (jj, v) in row.iter_mut().enumerate() {
                let j = i + jj;
                let mut t = Integer::from(&piv[0] * &*v);
                t -= Integer::from(a_pi * &piv[j - p]);
                *v = t.div_exact(&prev);
            }
        });
        prev = rows[p][0].clone();
    }
    let det = prev;
    let mut x = vec![Integer::new(); k];
    for (n, &p) in kept.iter().enumerate().rev() {
        let mut t = Integer::from(&det * &rows[p][k - p]);
        for &j in &kept[n + 1..] {
            t -= Integer::from(&rows[p][j - p] * &x[j]);
        }
        x[p] = t.div_exact(&rows[p][0]);
    }
    if det < 0 {
        for v in x.iter_mut() {
            *v = -std::mem::take(v);
        }
        return Some((x, -det));
    }
    Some((x, det))
}

/// `a x = b` exactly: [`solve_dixon`], or where it fails (an unlucky prime) and the
/// system is small enough, [`solve_psd`].
fn solve_exact(a: Vec<Integer>, k: usize, b: Vec<Integer>) -> Option<(Vec<Integer>, Integer)> {
    solve_dixon(&a, k, &b).or_else(|| {
        (k <= MAX_FRACTION_FREE)
            .then(|| solve_psd(a, k, b))
            .flatten()
    })
}

/// The prime of [`solve_dixon`]: 2^61 - 1.
const DIXON_P: u64 = (1 << 61) - 1;

fn mulmod(a: u64, b: u64) -> u64 {
    ((a as u128 * b as u128) % DIXON_P as u128) as u64
}

fn powmod(mut a: u64, mut e: u64) -> u64 {
    let mut r = 1;
    while e > 0 {
        if e & 1 == 1 {
            r = mulmod(r, a);
        }
        a = mulmod(a, a);
        e >>= 1;
    }
    r
}

/// `v` modulo `m` (> 0), in [0, m).
fn modulo(v: &Integer, m: &Integer) -> Integer {
    let mut r = Integer::from(v % m);
    if r < 0 {
        r += m;
    }
    r
}

fn residue(v: &Integer, p: &Integer) -> u64 {
    modulo(v, p).to_u64().expect("a residue below p")
}

/// The inverse of a k x k matrix modulo [`DIXON_P`] by Gauss-Jordan elimination, `None`
/// when it is singular modulo p.
fn inverse_mod(mut m: Vec<u64>, k: usize) -> Option<Vec<u64>> {
    let mut inv = vec![0u64; k * k];
    for i in 0..k {
        inv[i * k + i] = 1;
    }
    for col in 0..k {
        let piv = (col..k).find(|&r| m[r * k + col] != 0)?;
        if piv != col {
            for j in 0..k {
                m.swap(piv * k + j, col * k + j);
                inv.swap(piv * k + j, col * k + j);
            }
        }
        let f = powmod(m[col * k + col], DIXON_P - 2);
        for j in 0..k {
            m[col * k + j] = mulmod(m[col * k + j], f);
            inv[col * k + j] = mulmod(inv[col * k + j], f);
        }
        for r in (0..k).filter(|&r| r != col) {
            let g = m[r * k + col];
            if g == 0 {
                continue;
            }
            let ng = DIXON_P - g;
            for j in 0..k {
                m[r * k + j] = (m[r * k + j] + mulmod(ng, m[col * k + j])) % DIXON_P;
                inv[r * k + j] = (inv[r * k + j] + mulmod(ng, inv[col * k + j])) % DIXON_P;
            }
        }
    }
    Some(inv)
}

/// Rational reconstruction of `y` modulo `m`: (u, v) with u = v y (mod m), |u| <
/// 2^`bits`, 0 < v, by the extended Euclidean algorithm stopped at the first remainder
/// below 2^`bits` (unique when m > 2^(2 bits + 1) and such u, v with v < 2^bits exist).
fn reconstruct(y: &Integer, m: &Integer, bits: u32) -> Option<(Integer, Integer)> {
    let bound = Integer::from(1) << bits;
    let (mut r0, mut r1) = (m.clone(), modulo(y, m));
    let (mut t0, mut t1) = (Integer::new(), Integer::from(1));
    while r1.clone().abs() >= bound {
        if r1.is_zero_int() {
            return None;
        }
        let (q, r) = r0.div_rem_floor_ref(&r1).into();
        let q: Integer = q;
        r0 = std::mem::replace(&mut r1, r);
        let t: Integer = &t0 - Integer::from(&q * &t1);
        t0 = std::mem::replace(&mut t1, t);
    }
    if t1.is_zero_int() {
        return None;
    }
    if t1 < 0 {
        Some((-r1, -t1))
    } else {
        Some((r1, t1))
    }
}

/// Solve `a x = b` exactly for a symmetric positive semidefinite integer matrix `a` (k x
/// k, row-major) by p-adic (Dixon) lifting: the rows are kept in order unless their
/// pivot vanishes modulo p = 2^61 - 1 (a dependent constraint: its unknown is 0), the
/// kept submatrix A_KK is inverted modulo p once (O(k^3) word operations), the solution
/// is lifted one p-adic digit at a time (residual r <- (r - A_KK x_i) / p, exact), until
/// p^N exceeds 2^(2 H + 2) with H the Hadamard bound on the bits of Cramer's numerators
/// and denominator, and each entry is recovered as a rational with one common
/// denominator. The result is returned only when A_KK x = b_K holds EXACTLY (checked over
/// the integers); `None` otherwise (an unlucky prime: the caller falls back to
/// fraction-free elimination). Same contract as [`solve_psd`].
fn solve_dixon(a: &[Integer], k: usize, b: &[Integer]) -> Option<(Vec<Integer>, Integer)> {
    use rayon::prelude::*;
    let pbig = Integer::from(DIXON_P);
    // the kept rows: elimination modulo p in order, skipping zero pivots
    let mut m: Vec<u64> = a.iter().map(|v| residue(v, &pbig)).collect();
    let mut kept = Vec::new();
    for piv in 0..k {
        let d = m[piv * k + piv];
        if d == 0 {
            continue;
        }
        kept.push(piv);
        let inv = powmod(d, DIXON_P - 2);
        for i in piv + 1..k {
            let f = mulmod(m[i * k + piv], inv);
            if f == 0 {
                continue;
            }
            let nf = DIXON_P - f;
            for j in piv..k {
                m[i * k + j] = (m[i * k + j] + mulmod(nf, m[piv * k + j])) % DIXON_P;
            }
        }
    }
    let kk = kept.len();
    let sub: Vec<Integer> = kept
        .iter()
        .flat_map(|&i| kept.iter().map(move |&j| a[i * k + j].clone()))
        .collect();
    let sub_mod: Vec<u64> = sub.iter().map(|v| residue(v, &pbig)).collect();
    let c = inverse_mod(sub_mod, kk)?;
    let rhs: Vec<Integer> = kept.iter().map(|&i| b[i].clone()).collect();
    // Hadamard: every minor of [A_KK | b_K] has at most kk (bits + log2 kk / 2) bits
    let bits = sub
        .iter()
        .chain(&rhs)
        .map(|v| v.significant_bits())
        .max()
        .unwrap_or(0) as u64;
    let log_k = (usize::BITS - kk.leading_zeros()) as u64;
    let h = kk as u64 * (bits + log_k) + 1;
    let digits = (2 * h + 2).div_ceil(61) + 1;
    let mut r = rhs.clone();
    let mut digit_rows: Vec<Vec<u64>> = Vec::with_capacity(digits as usize);
    let mut pp = Integer::from(1);
    let mut xi = vec![0u64; kk];
    for _ in 0..digits {
        let rm: Vec<u64> = r.iter().map(|v| residue(v, &pbig)).collect();
        for (i, out) in xi.iter_mut().enumerate() {
            let row = &c[i * kk..(i + 1) * kk];
            let mut acc: u128 = 0;
            for (cv, rv) in row.iter().zip(&rm) {
                acc = (acc + *cv as u128 * *rv as u128) % DIXON_P as u128;
            }
            *out = acc as u64;
        }
        r.par_iter_mut().enumerate().for_each(|(i, ri)| {
            for (aij, xj) in sub[i * kk..(i + 1) * kk].iter().zip(&xi) {
                *ri -= aij * *xj;
            }
            // exact: r - A x_i = 0 modulo p
            ri.div_exact_mut(&pbig);
        });
        digit_rows.push(xi.clone());
        pp *= &pbig;
    }
    // x = sum_i x_i p^i, by Horner from the last digit
    let mut x = vec![Integer::new(); kk];
    for row in digit_rows.iter().rev() {
        for (xv, d) in x.iter_mut().zip(row) {
            *xv *= &pbig;
            *xv += *d;
        }
    }
    // one common denominator: reconstruct where the current one does not suffice
    let half = Integer::from(&pp >> 1);
    let sym = |v: Integer| if v > half { v - &pp } else { v };
    let hb = Integer::from(1) << (h as u32);
    let mut den = Integer::from(1);
    for xv in &x {
        let y = sym(modulo(&Integer::from(&den * xv), &pp));
        if y.clone().abs() < hb {
            continue;
        }
        let (_, v) = reconstruct(&y, &pp, h as u32)?;
        den *= v;
    }
    let num: Vec<Integer> = x
        .iter()
        .map(|xv| sym(modulo(&Integer::from(&den * xv), &pp)))
        .collect();
    // the exact check: A_KK num = den b_K
    for i in 0..kk {
        let mut s = Integer::new();
        for (aij, nj) in sub[i * kk..(i + 1) * kk].iter().zip(&num) {
            s += Integer::from(aij * nj);
        }
        if s != Integer::from(&den * &rhs[i]) {
            return None;
        }
    }
    let mut out = vec![Integer::new(); k];
    for (&i, v) in kept.iter().zip(num) {
        out[i] = v;
    }
    Some((out, den))
}

/// An exact KKT certificate: multipliers l = `lambda` / `den` (one per constraint) and
/// span coefficients a = `a` / `den` (one per token), p = W X^T a.
#[derive(Debug, Clone, PartialEq)]
pub struct Certificate {
    /// Multiplier numerators.
    pub lambda: Vec<Integer>,
    /// Span coefficient numerators.
    pub a: Vec<Integer>,
    /// The common denominator (> 0).
    pub den: Integer,
}

/// The size of the exact re-solve of a support: |S| and the bound |S| (b + log2 |S|) on
/// a minor's bits.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct ExactSize {
    /// Support constraints |S|.
    pub support: usize,
    /// Bits of the largest entry of the augmented system: |Q_cc'| 2^scale over the
    /// support (at most the largest diagonal one's) and the right-hand side 2^scale.
    pub entry_bits: u64,
    /// |S| (b + ceil log2 |S|): a bound on the bits of every minor (Hadamard).
    pub minor_bits: u64,
}

/// The exact re-solve's size for `support` (constraint indices); refused with
/// [`Error::TooLarge`] past [`MAX_SUPPORT`] or [`MAX_MINOR_BITS`] (before the work).
pub fn exact_size(g: &Gram, cons: &Constraints, support: &[usize]) -> Result<ExactSize> {
    let k = support.len();
    if k > MAX_SUPPORT {
        return Err(Error::TooLarge {
            field: "support".into(),
            reason: format!(
                "the f64 support has {k} constraints, over the exact re-solve's limit of \
                 {MAX_SUPPORT}"
            ),
        });
    }
    // |Q_cc'| <= sqrt(Q_cc Q_c'c') <= max_c Q_cc (positive semidefinite)
    let b = support
        .iter()
        .map(|&c| cons.q(g, c, c).significant_bits() as u64)
        .max()
        .unwrap_or(0)
        // the right-hand side 2^scale
        .max(g.scale as u64 + 1);
    let log_k = (usize::BITS - k.leading_zeros()) as u64;
    let size = ExactSize {
        support: k,
        entry_bits: b,
        minor_bits: k as u64 * (b + log_k),
    };
    if size.minor_bits > MAX_MINOR_BITS {
        return Err(Error::TooLarge {
            field: "support".into(),
            reason: format!(
                "the exact re-solve of {k} support constraints has minors of up to {} bits, \
                 over the limit of {MAX_MINOR_BITS}",
                size.minor_bits
            ),
        });
    }
    Ok(size)
}

/// The exact solution of the KKT system of `support` (constraint indices): Q_SS l_S = 1
/// solved over the integers (p-adic lifting, or fraction-free elimination where that
/// fails), l = 0 off the support, a = D^T l. `None`
/// when Q_SS is found not positive semidefinite (cannot happen for an exact Gram matrix).
pub fn certificate_for(g: &Gram, cons: &Constraints, support: &[usize]) -> Option<Certificate> {
    let k = support.len();
    let mut a = Vec::with_capacity(k * k);
    for &c in support {
        for &e in support {
            a.push(cons.q(g, c, e));
        }
    }
    // Q = Qint 2^-scale: Qint l = 2^scale 1
    let rhs = vec![Integer::from(1) << g.scale; k];
    let (x, den) = solve_exact(a, k, rhs)?;
    let mut lambda = vec![Integer::new(); cons.count()];
    for (&c, v) in support.iter().zip(x) {
        lambda[c] = v;
    }
    let a = cons.transpose_apply(&lambda);
    Some(Certificate { lambda, a, den })
}

/// The first exact check a certificate fails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum Failure {
    /// The denominator is not positive.
    Denominator,
    /// a != D^T l at this token (sample, token).
    Stationarity {
        /// Sample.
        sample: usize,
        /// Token.
        token: usize,
    },
    /// A negative multiplier.
    DualFeasibility {
        /// Sample.
        sample: usize,
        /// Token.
        token: usize,
    },
    /// A constraint with value below 1.
    PrimalFeasibility {
        /// Sample.
        sample: usize,
        /// Token.
        token: usize,
    },
    /// A constraint with a positive multiplier and a value above 1.
    ComplementarySlackness {
        /// Sample.
        sample: usize,
        /// Token.
        token: usize,
    },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Denominator => write!(f, "the denominator is not positive"),
            Failure::Stationarity { sample, token } => write!(
                f,
                "stationarity: a != D^T lambda at token {token} of sample {sample}"
            ),
            Failure::DualFeasibility { sample, token } => write!(
                f,
                "dual feasibility: negative multiplier of constraint (sample {sample}, token {token})"
            ),
            Failure::PrimalFeasibility { sample, token } => write!(
                f,
                "primal feasibility: constraint (sample {sample}, token {token}) has margin below 1"
            ),
            Failure::ComplementarySlackness { sample, token } => write!(
                f,
                "complementary slackness: constraint (sample {sample}, token {token}) has a \
                 positive multiplier and margin above 1"
            ),
        }
    }
}

/// What [`check`] proves: ||p_mm||^2 exactly, and the number of constraints at margin
/// exactly 1.
#[derive(Debug, Clone, PartialEq)]
pub struct Proved {
    /// ||p_mm||^2 = a^T H a.
    pub norm2: Rational,
    /// Constraints whose margin is exactly 1.
    pub tight: usize,
    /// Constraints with a positive multiplier.
    pub support: usize,
}

/// Check a KKT certificate exactly (module docs): stationarity a = D^T l, l >= 0,
/// D H a >= 1, l_c ((D H a)_c - 1) = 0. `Ok`: p = W X^T a is THE optimum of the SVM of
/// `cons`'s pattern, with its exact ||p||^2; `Err`: the first check that fails (in the
/// order stationarity, dual, primal, slackness; constraints in order).
pub fn check(
    g: &Gram,
    cons: &Constraints,
    cert: &Certificate,
) -> std::result::Result<Proved, Failure> {
    let m = cons.count();
    if cert.den <= 0 || cert.lambda.len() != m || cert.a.len() != g.r {
        return Err(Failure::Denominator);
    }
    let dt = cons.transpose_apply(&cert.lambda);
    if let Some(j) = (0..g.r).find(|&j| dt[j] != cert.a[j]) {
        return Err(Failure::Stationarity {
            sample: j / cons.t,
            token: j % cons.t,
        });
    }
    let at = |c: usize| {
        let (sample, token) = cons.sample_token(c);
        (sample, token)
    };
    if let Some(c) = (0..m).find(|&c| cert.lambda[c] < 0) {
        let (sample, token) = at(c);
        return Err(Failure::DualFeasibility { sample, token });
    }
    // u = h a (integers); margin_c = (D u)_c / (den 2^scale)
    let u: Vec<Integer> = (0..g.r)
        .map(|i| {
            let mut s = Integer::new();
            for (hij, aj) in g.h[i * g.r..(i + 1) * g.r].iter().zip(&cert.a) {
                if !aj.is_zero_int() {
                    s += Integer::from(hij * aj);
                }
            }
            s
        })
        .collect();
    let margins = cons.apply(&u);
    let one = Integer::from(&cert.den << g.scale);
    if let Some(c) = (0..m).find(|&c| margins[c] < one) {
        let (sample, token) = at(c);
        return Err(Failure::PrimalFeasibility { sample, token });
    }
    if let Some(c) = (0..m).find(|&c| cert.lambda[c] > 0 && margins[c] != one) {
        let (sample, token) = at(c);
        return Err(Failure::ComplementarySlackness { sample, token });
    }
    let mut num = Integer::new();
    for (aj, uj) in cert.a.iter().zip(&u) {
        num += Integer::from(aj * uj);
    }
    let den = Integer::from(cert.den.square_ref()) << g.scale;
    Ok(Proved {
        norm2: Rational::from((num, den)),
        tight: margins.iter().filter(|v| **v == one).count(),
        support: cert.lambda.iter().filter(|v| **v > 0).count(),
    })
}

/// Check a Farkas certificate of infeasibility exactly: y >= 0 (integers, one per
/// constraint), sum_c y_c > 0 and ||sum_c y_c v_c||^2 = a^T H a = 0 with a = D^T y. Then
/// every p has sum_c y_c p^T v_c = 0 < sum_c y_c, so some constraint p^T v_c >= 1 fails:
/// the pattern's SVM has no feasible point.
pub fn check_farkas(g: &Gram, cons: &Constraints, y: &[Integer]) -> bool {
    if y.len() != cons.count() || y.iter().any(|v| *v < 0) || y.iter().all(|v| v.is_zero_int()) {
        return false;
    }
    let a = cons.transpose_apply(y);
    let mut s = Integer::new();
    for i in (0..g.r).filter(|i| !a[*i].is_zero_int()) {
        for j in (0..g.r).filter(|j| !a[*j].is_zero_int()) {
            s += Integer::from(g.at(i, j) * &a[i]) * &a[j];
        }
    }
    s.is_zero_int()
}

/// The exact Farkas vector of the f64 solver's infeasibility report: solve Q_FF beta =
/// Q_Fc exactly and take y = e_c - beta (scaled to integers). `None` when the exact
/// solve fails.
pub fn farkas_for(g: &Gram, cons: &Constraints, set: &[usize], c: usize) -> Option<Vec<Integer>> {
    let k = set.len();
    let mut a = Vec::with_capacity(k * k);
    for &i in set {
        for &j in set {
            a.push(cons.q(g, i, j));
        }
    }
    let rhs: Vec<Integer> = set.iter().map(|&i| cons.q(g, i, c)).collect();
    let (beta, den) = solve_exact(a, k, rhs)?;
    let mut y = vec![Integer::new(); cons.count()];
    y[c] = den;
    for (&j, b) in set.iter().zip(beta) {
        y[j] = -b;
    }
    Some(y)
}

/// Search a Farkas vector in f64, for a pattern whose f64 solve did not end optimal:
/// the nonnegative least-squares problem min ||A y - b||^2, y >= 0, with A's columns
/// (v_c, 1) and b = (0, 1) (Gram matrix Q + 1 1^T, A^T b = 1), by Lawson and Hanson's
/// active-set method. Its residual is 1 - sum_c y_c at the end, 0 exactly when some
/// y >= 0 has sum_c y_c v_c = 0 and sum_c y_c = 1 (a Farkas vector); then the columns
/// of the final passive set are independent and the exact [`farkas_on`] recovers y.
/// Returns that passive set when the residual is below 1e-9, `None` otherwise (no
/// Farkas vector found: a feasible pattern, or one f64 cannot resolve). At most
/// [`iteration_limit`] iterations.
pub fn farkas_search(q: &[f64], m: usize) -> Option<Vec<usize>> {
    let gq: Vec<f64> = q.iter().map(|v| v + 1.0).collect();
    let max_iter = iteration_limit(m);
    let mut y = vec![0.0; m];
    let mut passive: Vec<usize> = Vec::new();
    let mut in_p = vec![false; m];
    let mut it = 0;
    loop {
        it += 1;
        if it > max_iter {
            return None;
        }
        // the gradient w = A^T (b - A y) = 1 - G y off the passive set
        let best = (0..m)
            .filter(|c| !in_p[*c])
            .map(|c| {
                let row = &gq[c * m..(c + 1) * m];
                (c, 1.0 - passive.iter().map(|&j| row[j] * y[j]).sum::<f64>())
            })
            .fold(None, |b: Option<(usize, f64)>, (c, w)| match b {
                Some((_, bw)) if bw >= w => b,
                _ => Some((c, w)),
            });
        let Some((t, _)) = best.filter(|(_, w)| *w > 1e-12) else {
            break;
        };
        passive.push(t);
        in_p[t] = true;
        loop {
            it += 1;
            if it > max_iter {
                return None;
            }
            let ch = Chol::of(&gq, m, &passive).ok()?;
            let z = ch.backward(&ch.forward(&vec![1.0; passive.len()]));
            if z.iter().all(|v| *v > 0.0) {
                for (k, &j) in passive.iter().enumerate() {
                    y[j] = z[k];
                }
                break;
            }
            let mut alpha = 1.0f64;
            for (k, &j) in passive.iter().enumerate() {
                if z[k] <= 0.0 {
                    alpha = alpha.min(y[j] / (y[j] - z[k]));
                }
            }
            let mut keep = Vec::with_capacity(passive.len());
            for (k, &j) in passive.iter().enumerate() {
                y[j] += alpha * (z[k] - y[j]);
                if y[j] > 0.0 && !(z[k] <= 0.0 && y[j] / (y[j] - z[k]) <= alpha) {
                    keep.push(j);
                } else {
                    y[j] = 0.0;
                    in_p[j] = false;
                }
            }
            passive = keep;
            if passive.is_empty() {
                break;
            }
        }
    }
    let residual = 1.0 - passive.iter().map(|&j| y[j]).sum::<f64>();
    (residual.abs() < 1e-9 && !passive.is_empty()).then_some(passive)
}

/// The exact Farkas vector on the constraints `set` ([`farkas_search`]'s passive set):
/// (Q_SS + 1 1^T) y = 1 solved over the integers (Q 2^scale is integer: (Q_int +
/// 2^scale) y = 2^scale 1), y = 0 off `set`; returned (as integers, the common
/// denominator dropped and divided by their greatest common divisor) only when every entry is >= 0 and [`check_farkas`] holds
/// exactly, `None` otherwise.
pub fn farkas_on(g: &Gram, cons: &Constraints, set: &[usize]) -> Option<Vec<Integer>> {
    let k = set.len();
    let one = Integer::from(1) << g.scale;
    let mut a = Vec::with_capacity(k * k);
    for &i in set {
        for &j in set {
            a.push(cons.q(g, i, j) + &one);
        }
    }
    let (x, den) = solve_exact(a, k, vec![one; k])?;
    if den <= 0 || x.iter().any(|v| *v < 0) {
        return None;
    }
    // any positive multiple is a Farkas vector: the smallest integer one
    let gcd = x.iter().fold(Integer::new(), |acc, v| acc.gcd(v));
    let mut y = vec![Integer::new(); cons.count()];
    for (&c, v) in set.iter().zip(x) {
        y[c] = if gcd > 1 { v.div_exact(&gcd) } else { v };
    }
    check_farkas(g, cons, &y).then_some(y)
}

/// Which pattern the SVM is solved for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternChoice {
    /// alpha_i = argmax_t Y_i nu^T x_it (ties refused).
    Optimal,
    /// Theorem 4.1's: clean samples the (first) relevant token R, noisy samples the
    /// (first) weakly relevant token of the opposite class W_{-Y*}.
    Theorem,
    /// Given indices.
    Given(Vec<usize>),
}

impl PatternChoice {
    /// Its name in output: "optimal", "theorem" or "given".
    pub fn name(&self) -> &'static str {
        match self {
            PatternChoice::Optimal => "optimal",
            PatternChoice::Theorem => "theorem",
            PatternChoice::Given(_) => "given",
        }
    }
}

/// Precision of the balls that decide the optimal pattern's argmax.
pub const PATTERN_PREC: u32 = 128;

/// The pattern `choice` on `data`'s training split (binary model).
///
/// `Optimal`: the head values Y_i nu^T x_it through the model's [`super::head_values`]
/// in ball arithmetic at [`PATTERN_PREC`] bits, each argmax PROVED (every other token's
/// ball lies below the largest); a tie or an undecided comparison is refused with
/// [`Error::InvalidArgument`] (`pattern`: the pattern is not defined) naming the sample.
/// `Theorem`: by the data's groups. `Given`: checked (n entries, each below T).
///
/// Every refusal is an [`Error::InvalidArgument`] named `pattern`: each caller says
/// what the pattern was to it (the CLI's `--pattern` or its pattern file, a config's
/// `direction.pattern`, the bindings' `pattern` argument).
pub fn pattern(data: &Dataset, choice: &PatternChoice) -> Result<Vec<usize>> {
    use crate::arith::{Arith, Ball};
    use crate::model::Model;
    let (n, t) = (data.train.len(), data.groups.len());
    match choice {
        PatternChoice::Given(p) => {
            if p.len() != n {
                return Err(Error::argument(
                    "pattern",
                    format!(
                        "the pattern file has {} entries, the training set {n} samples",
                        p.len()
                    ),
                ));
            }
            if let Some((i, a)) = p.iter().enumerate().find(|(_, a)| **a >= t) {
                return Err(Error::argument(
                    "pattern",
                    format!("entry {i} is {a}, not a token index below T = {t}"),
                ));
            }
            Ok(p.clone())
        }
        PatternChoice::Theorem => {
            let first = |grp: Group| data.groups.iter().position(|g| *g == grp);
            let (r, w) = (first(Group::R), first(Group::WOpposite));
            (0..n)
                .map(|i| {
                    let (want, name) = match data.train.is_noisy(i) {
                        false => (r, "R"),
                        true => (w, "W_opposite"),
                    };
                    want.ok_or_else(|| {
                        Error::argument(
                            "pattern",
                            format!(
                                "the theorem pattern needs a {name} token; the layout has none"
                            ),
                        )
                    })
                })
                .collect()
        }
        PatternChoice::Optimal => {
            let ar = Ball::new(PATTERN_PREC)?;
            let g = super::TokenSelection.head_values(&ar, data, data.train.x.view());
            (0..n)
                .map(|i| {
                    let mut s: Vec<_> = g[i * t..(i + 1) * t].to_vec();
                    if data.train.y[i] < 0 {
                        s.iter_mut().for_each(|v| ar.neg(v));
                    }
                    match proved_argmax(&ar, &s) {
                        Ok(best) => Ok(best),
                        Err((best, u)) => Err(Error::argument(
                            "pattern",
                            format!(
                                "the optimal pattern is not defined at training sample {i}: tokens \
                                 {best} and {u} are not separated by Y_i nu^T x at {PATTERN_PREC}-bit \
                                 balls (a tie or nearly); give the pattern as a file"
                            ),
                        )),
                    }
                })
                .collect()
        }
    }
}

/// How the exact stage ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The certificate passed every exact check: p_mm of the pattern is proved.
    ProvedOptimal {
        /// What was proved.
        proved: Proved,
        /// The certificate.
        certificate: Certificate,
    },
    /// A check failed (the f64 support was not the optimal one, or a rounding of the
    /// f64 solution chose a wrong active set): nothing is claimed.
    NotProved {
        /// The first failed check.
        failure: Failure,
    },
    /// The f64 solver or the exact re-solve could not produce a certificate.
    NoCertificate {
        /// Why.
        reason: String,
    },
    /// An exact Farkas vector proves the pattern's SVM infeasible.
    Infeasible {
        /// y >= 0 (integers, one per constraint) with sum_c y_c v_c = 0, sum_c y_c > 0.
        farkas: Vec<Integer>,
    },
}

/// Everything [`solve`] computed.
#[derive(Debug, Clone)]
pub struct Solved {
    /// The exact Gram matrix of the tokens.
    pub gram: Gram,
    /// The pattern's constraints.
    pub constraints: Constraints,
    /// The f64 stage.
    pub f64: F64Solution,
    /// The f64 support (constraints with a positive multiplier), or the free set of an
    /// infeasibility report.
    pub support: Vec<usize>,
    /// The size of the exact re-solve.
    pub exact: Option<ExactSize>,
    /// The exact verdict.
    pub verdict: Verdict,
}

/// Solve the attention SVM of `pattern` on the tokens `x` (n T rows of width `d`,
/// sample-major) under `w` (`None`: W = I): the exact Gram matrix, the f64 active-set
/// solve, the exact re-solve of its support and the exact checks (module docs). Sizes
/// are checked by [`check_sizes`] first and the exact re-solve by [`exact_size`]
/// ([`Error::TooLarge`] before that work).
pub fn solve(
    x: &[f64],
    t: usize,
    d: usize,
    w: Option<&[f64]>,
    pattern: Vec<usize>,
) -> Result<Solved> {
    let n = pattern.len();
    check_sizes(n, t, d, w.is_some())?;
    if x.len() != n * t * d || pattern.iter().any(|a| *a >= t) {
        return Err(Error::Mismatch {
            what: "attention SVM".into(),
            reason: format!(
                "{} token values and a pattern of {n} for T = {t}, d = {d}",
                x.len()
            ),
        });
    }
    let gram = Gram::of_tokens(x, d, w);
    let cons = Constraints::new(t, pattern);
    let m = cons.count();
    let q = q_f64(&gram, &cons);
    let sol = solve_f64(&q, m, MAX_SUPPORT);
    let (support, exact, verdict) = match &sol.outcome {
        F64Outcome::Optimal { lambda } => {
            let support: Vec<usize> = (0..m).filter(|c| lambda[*c] > 0.0).collect();
            let size = exact_size(&gram, &cons, &support)?;
            let verdict = match certificate_for(&gram, &cons, &support) {
                None => Verdict::NoCertificate {
                    reason: "the exact re-solve found Q_SS not positive semidefinite".into(),
                },
                Some(cert) => match check(&gram, &cons, &cert) {
                    Ok(proved) => Verdict::ProvedOptimal {
                        proved,
                        certificate: cert,
                    },
                    Err(failure) => Verdict::NotProved { failure },
                },
            };
            (support, Some(size), verdict)
        }
        F64Outcome::Infeasible { set, c } => {
            let size = exact_size(&gram, &cons, set)?;
            let verdict = match farkas_for(&gram, &cons, set, *c)
                .filter(|y| check_farkas(&gram, &cons, y))
                .or_else(|| search_farkas(&gram, &cons, &q, m))
            {
                Some(y) => Verdict::Infeasible { farkas: y },
                None => Verdict::NoCertificate {
                    reason: format!(
                        "f64 found constraint {c} dependent on {} others with no positive \
                         coefficient, but no Farkas vector passed the exact check: \
                         feasibility undecided",
                        set.len()
                    ),
                },
            };
            (set.clone(), Some(size), verdict)
        }
        F64Outcome::SupportOverLimit => {
            return Err(Error::TooLarge {
                field: "support".into(),
                reason: format!(
                    "the f64 active set grew past {MAX_SUPPORT} constraints, the exact \
                     re-solve's limit (refused before the exact work)"
                ),
            });
        }
        F64Outcome::NoConvergence | F64Outcome::FactorisationFailed { .. } => {
            let what = stop_description(&sol.outcome, &cons).unwrap_or_default();
            // the free set when it failed (the dependent constraint last)
            let free = match &sol.outcome {
                F64Outcome::FactorisationFailed { set, c, .. } => {
                    set.iter().copied().chain([*c]).collect()
                }
                _ => Vec::new(),
            };
            match search_farkas(&gram, &cons, &q, m) {
                Some(y) => (free, None, Verdict::Infeasible { farkas: y }),
                None => (
                    free,
                    None,
                    Verdict::NoCertificate {
                        reason: format!(
                            "{what}; no Farkas vector was found that passes the exact check \
                             either: feasibility undecided"
                        ),
                    },
                ),
            }
        }
    };
    Ok(Solved {
        gram,
        constraints: cons,
        f64: sol,
        support,
        exact,
        verdict,
    })
}

/// How the f64 active-set method stopped where it ended neither optimal nor with an
/// infeasibility report: its iteration limit, or the Cholesky refactorisation that
/// failed (the iteration and the dependent constraint). `None` for the other outcomes.
pub fn stop_description(outcome: &F64Outcome, cons: &Constraints) -> Option<String> {
    let limit = iteration_limit(cons.count());
    match outcome {
        F64Outcome::FactorisationFailed { iteration, set, c } => {
            let (i, t) = cons.sample_token(*c);
            Some(format!(
                "the f64 active-set method stopped at iteration {iteration} (of at most \
                 {limit}): the Cholesky refactorisation of its free set failed, constraint \
                 (sample {i}, token {t}) being numerically dependent on the {} before it",
                set.len()
            ))
        }
        F64Outcome::NoConvergence => Some(format!(
            "the f64 active-set method reached its limit of {limit} iterations without \
             converging"
        )),
        _ => None,
    }
}

/// [`farkas_search`] in f64, then [`farkas_on`] exactly on the set it found: a Farkas
/// vector that passed the exact check, or `None` (also where that set is past the exact
/// re-solve's limits, [`exact_size`]).
fn search_farkas(g: &Gram, cons: &Constraints, q: &[f64], m: usize) -> Option<Vec<Integer>> {
    let set = farkas_search(q, m)?;
    exact_size(g, cons, &set).ok()?;
    farkas_on(g, cons, &set)
}

/// The attention SVM of `cfg`'s binary model on `data` for the pattern `choice`: sizes
/// refused before any work ([`check_sizes`]), W = W(0) of the config (the identity map
/// whether or not it is stored), the f64 solve, the exact proof, and the report
/// `tokensel svm` prints.
pub fn report(
    cfg: &crate::config::Config,
    data: &Dataset,
    choice: &PatternChoice,
) -> Result<Report> {
    cfg.binary_only("svm (the attention SVM of the binary model)")?;
    cfg.separate_prompt_only("svm (the attention SVM of fixed tokens)")?;
    let d = cfg.d;
    let dense = cfg.init.w == crate::config::WInit::KaimingUniform;
    check_sizes(cfg.n_train, cfg.layout.tokens, d, dense)?;
    let w = w0_map(cfg);
    let pattern = pattern(data, choice)?;
    let x = data.train.x.as_slice().expect("standard layout");
    let solved = solve(x, cfg.layout.tokens, d, w.as_deref(), pattern)?;
    Ok(Report::new(data, choice, d, w.is_some(), &solved))
}

/// W(0) of `cfg` (row-major) as the SVM's map, or `None` where it is the identity
/// (whether or not the config stores it: W- and joint mode store W(0) = I).
pub fn w0_map(cfg: &crate::config::Config) -> Option<Vec<f64>> {
    let init = crate::data::Params::init(cfg);
    init.w
        .filter(|w| {
            !w.indexed_iter()
                .all(|((i, j), v)| *v == if i == j { 1.0 } else { 0.0 })
        })
        .map(|w| w.iter().copied().collect())
}

/// The index of the largest of `v` where every other entry is PROVED below it
/// (`Ok`), or `Err((best, u))`: the largest midpoint's index and the first entry `u`
/// not proved below it (a tie, or balls too wide to decide). `v` nonempty.
pub fn proved_argmax<A: crate::arith::Arith>(
    ar: &A,
    v: &[A::Real],
) -> std::result::Result<usize, (usize, usize)> {
    let best = (0..v.len())
        .max_by(|&a, &b| {
            ar.to_f64(&v[a])
                .total_cmp(&ar.to_f64(&v[b]))
                .then(b.cmp(&a))
        })
        .expect("a nonempty vector");
    match (0..v.len())
        .find(|&u| u != best && ar.decide_cmp(&v[best], &v[u]) != Some(std::cmp::Ordering::Greater))
    {
        None => Ok(best),
        Some(u) => Err((best, u)),
    }
}

/// `q` as a decimal rounded toward zero to `sig` significant digits.
pub fn decimal_down(q: &Rational, sig: u32) -> String {
    if *q <= 0 {
        return if *q == 0 {
            "0".into()
        } else {
            // toward zero: the magnitude rounded down
            format!("-{}", decimal_down(&Rational::from(-q), sig))
        };
    }
    // e: the decimal exponent with 10^e <= q < 10^(e+1)
    let mut e = q.to_f64().log10().floor() as i64;
    let pow = |k: i64| -> Rational {
        let p = Integer::from(Integer::u_pow_u(10, k.unsigned_abs() as u32));
        if k >= 0 {
            Rational::from(p)
        } else {
            Rational::from((Integer::from(1), p))
        }
    };
    while pow(e) > *q {
        e -= 1;
    }
    while pow(e + 1) <= *q {
        e += 1;
    }
    let k = sig as i64 - 1 - e; // digits after the point
    let scaled: Rational = q * pow(k);
    let digits = scaled.floor().numer().to_string();
    place_point(&digits, k)
}

/// `digits` * 10^-k as decimal text.
fn place_point(digits: &str, k: i64) -> String {
    if k <= 0 {
        return format!("{digits}{}", "0".repeat((-k) as usize));
    }
    let k = k as usize;
    let padded = if digits.len() <= k {
        format!("{}{digits}", "0".repeat(k + 1 - digits.len()))
    } else {
        digits.to_string()
    };
    let (int, frac) = padded.split_at(padded.len() - k);
    format!("{int}.{frac}")
}

/// An exact rational as JSON: numerator and denominator as decimal strings.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ExactRational {
    /// Numerator.
    pub num: String,
    /// Denominator (> 0).
    pub den: String,
}

impl From<&Rational> for ExactRational {
    fn from(q: &Rational) -> Self {
        ExactRational {
            num: q.numer().to_string(),
            den: q.denom().to_string(),
        }
    }
}

/// The selected tokens' groups among clean and noisy samples.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GroupCount {
    /// Group name (R, W_same, W_opposite, I).
    pub group: &'static str,
    /// Clean samples whose selected token is in it.
    pub clean: usize,
    /// Noisy samples whose selected token is in it.
    pub noisy: usize,
}

/// One constraint of a certificate: sample, token and its exact coefficient.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Entry {
    /// Sample.
    pub sample: usize,
    /// Token (not the selected one).
    pub token: usize,
    /// The coefficient (an integer, or a multiplier's exact rational).
    pub value: ExactRational,
}

/// What `tokensel svm` prints (readable or JSON).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// "svm".
    pub command: &'static str,
    /// optimal, theorem or given.
    pub pattern: &'static str,
    /// The selected token of each sample.
    pub selected: Vec<usize>,
    /// Training samples n.
    pub samples: usize,
    /// Tokens per sample T.
    pub tokens: usize,
    /// Dimension d.
    pub d: usize,
    /// "identity" or "dense W(0)".
    pub w: &'static str,
    /// Constraints n (T - 1).
    pub constraints: usize,
    /// The pattern by group, clean and noisy.
    pub groups: Vec<GroupCount>,
    /// The f64 stage: "optimal", "infeasible", "no convergence" (its iteration limit) or
    /// "factorisation failed" (a Cholesky refactorisation of its free set failed; the
    /// reason names the iteration and the dependent constraint).
    pub f64_outcome: &'static str,
    /// Its iterations.
    pub f64_iterations: usize,
    /// How it stopped where it ended neither optimal nor infeasible (the iteration
    /// limit, or the refactorisation that failed: [`stop_description`]).
    pub f64_stop: Option<String>,
    /// Its support size (optimal), or the size of its free set when it stopped
    /// (infeasible: the constraints the Farkas vector is sought on).
    pub f64_support: usize,
    /// Its ||p||^2 = sum of multipliers (f64), where it ended optimal.
    pub f64_norm2: Option<f64>,
    /// Lower estimate of cond(Q_SS) (squared ratio of the Cholesky factor's diagonal).
    pub f64_condition_estimate: f64,
    /// The exact re-solve's size.
    pub exact: Option<ExactSize>,
    /// "proved optimal", "infeasible (proved)" (an exact Farkas vector), "not proved" (a
    /// failed exact check) or "feasibility undecided" (the f64 stage ended neither
    /// optimal nor with a Farkas vector that passed the exact check).
    pub verdict: &'static str,
    /// The failed check or the missing certificate's reason (not proved).
    pub reason: Option<String>,
    /// The failed check, as data.
    pub failure: Option<Failure>,
    /// ||p_mm||^2 exactly (proved optimal).
    pub norm2: Option<ExactRational>,
    /// ||p_mm||^2 rounded down to 15 significant digits.
    pub norm2_decimal_down: Option<String>,
    /// ||p_mm|| = the f64 square root of ||p_mm||^2 rounded to nearest (not exact).
    pub norm_approx: Option<f64>,
    /// The minimum margin min_c p_mm^T v_c, exactly 1 when proved.
    pub min_margin: Option<ExactRational>,
    /// Constraints at margin exactly 1.
    pub tight: Option<usize>,
    /// Constraints with a positive exact multiplier.
    pub support: Option<usize>,
    /// |f64 ||p||^2 - exact| / exact.
    pub f64_relative_error: Option<f64>,
    /// The support's multipliers l_c exactly (proved optimal).
    pub multipliers: Vec<Entry>,
    /// The Farkas vector's nonzero entries (proved infeasible).
    pub farkas: Vec<Entry>,
}

impl Report {
    /// The report of `solved` on `data` with pattern `choice`.
    pub fn new(
        data: &Dataset,
        choice: &PatternChoice,
        d: usize,
        dense_w: bool,
        solved: &Solved,
    ) -> Report {
        let cons = &solved.constraints;
        let groups = Group::ALL
            .iter()
            .map(|&grp| {
                let count = |noisy: bool| {
                    cons.pattern
                        .iter()
                        .enumerate()
                        .filter(|(i, a)| {
                            data.train.is_noisy(*i) == noisy && data.groups[**a] == grp
                        })
                        .count()
                };
                GroupCount {
                    group: grp.name(),
                    clean: count(false),
                    noisy: count(true),
                }
            })
            .collect();
        let f64_norm2 = match &solved.f64.outcome {
            F64Outcome::Optimal { lambda } => Some(lambda.iter().sum()),
            _ => None,
        };
        let entry = |c: usize, value: ExactRational| {
            let (sample, token) = cons.sample_token(c);
            Entry {
                sample,
                token,
                value,
            }
        };
        let mut r = Report {
            command: "svm",
            pattern: choice.name(),
            selected: cons.pattern.clone(),
            samples: cons.pattern.len(),
            tokens: cons.t,
            d,
            w: if dense_w { "dense W(0)" } else { "identity" },
            constraints: cons.count(),
            groups,
            f64_outcome: match solved.f64.outcome {
                F64Outcome::Optimal { .. } => "optimal",
                F64Outcome::Infeasible { .. } => "infeasible",
                F64Outcome::NoConvergence => "no convergence",
                F64Outcome::FactorisationFailed { .. } => "factorisation failed",
                F64Outcome::SupportOverLimit => "support over the limit",
            },
            f64_iterations: solved.f64.iterations,
            f64_stop: stop_description(&solved.f64.outcome, cons),
            f64_support: solved.support.len(),
            f64_norm2,
            f64_condition_estimate: solved.f64.condition,
            exact: solved.exact,
            verdict: "not proved",
            reason: None,
            failure: None,
            norm2: None,
            norm2_decimal_down: None,
            norm_approx: None,
            min_margin: None,
            tight: None,
            support: None,
            f64_relative_error: None,
            multipliers: Vec::new(),
            farkas: Vec::new(),
        };
        match &solved.verdict {
            Verdict::ProvedOptimal {
                proved,
                certificate,
            } => {
                r.verdict = "proved optimal";
                r.norm2 = Some((&proved.norm2).into());
                r.norm2_decimal_down = Some(decimal_down(&proved.norm2, 15));
                r.norm_approx = Some(proved.norm2.to_f64().sqrt());
                r.min_margin = Some((&Rational::from(1)).into());
                r.tight = Some(proved.tight);
                r.support = Some(proved.support);
                r.f64_relative_error = f64_norm2.map(|v| {
                    let diff = Rational::from_f64(v).expect("finite") - &proved.norm2;
                    (diff / &proved.norm2).abs().to_f64()
                });
                r.multipliers = (0..cons.count())
                    .filter(|c| certificate.lambda[*c] > 0)
                    .map(|c| {
                        let q = Rational::from((
                            certificate.lambda[c].clone(),
                            certificate.den.clone(),
                        ));
                        entry(c, (&q).into())
                    })
                    .collect();
            }
            Verdict::NotProved { failure } => {
                r.reason = Some(failure.to_string());
                r.failure = Some(failure.clone());
            }
            Verdict::NoCertificate { reason } => {
                r.reason = Some(reason.clone());
                // the f64 stage found neither an optimum nor a checked infeasibility
                if !matches!(solved.f64.outcome, F64Outcome::Optimal { .. }) {
                    r.verdict = "feasibility undecided";
                }
            }
            Verdict::Infeasible { farkas } => {
                r.verdict = "infeasible (proved)";
                r.farkas = (0..cons.count())
                    .filter(|c| !farkas[*c].is_zero_int())
                    .map(|c| entry(c, (&Rational::from(farkas[c].clone())).into()))
                    .collect();
            }
        }
        r
    }

    /// True for "proved optimal".
    pub fn proved(&self) -> bool {
        self.verdict == "proved optimal"
    }

    /// True where the question is answered with a proof: "proved optimal" or
    /// "infeasible (proved)" (exit code 0; "not proved" and "feasibility undecided" exit
    /// with 1).
    pub fn decided(&self) -> bool {
        self.proved() || self.verdict == "infeasible (proved)"
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "attention SVM, {} pattern: n = {} samples, T = {} tokens, d = {}, W = {}, {} constraints",
            self.pattern, self.samples, self.tokens, self.d, self.w, self.constraints
        )?;
        writeln!(f, "selected tokens by group (clean / noisy samples):")?;
        for g in &self.groups {
            writeln!(f, "  {:<10} {:>5} / {}", g.group, g.clean, g.noisy)?;
        }
        let set = match self.f64_outcome {
            "optimal" => "support constraints",
            _ => "constraints in the free set",
        };
        write!(
            f,
            "f64 active set: {} after {} iterations, {} {set}",
            self.f64_outcome, self.f64_iterations, self.f64_support
        )?;
        if let Some(v) = self.f64_norm2 {
            write!(f, ", ||p||^2 = {v:e}")?;
        }
        writeln!(
            f,
            ", cond(Q_SS) >= {:.3e} (estimate)",
            self.f64_condition_estimate
        )?;
        if let Some(stop) = &self.f64_stop {
            writeln!(f, "  {stop}")?;
        }
        if let Some(e) = &self.exact {
            writeln!(
                f,
                "exact re-solve: {} constraints, entries of up to {} bits, minors of at most {} bits",
                e.support, e.entry_bits, e.minor_bits
            )?;
        }
        writeln!(f, "verdict: {}", self.verdict)?;
        if let Some(reason) = &self.reason {
            writeln!(f, "  failed: {reason}")?;
        }
        if let (Some(n2), Some(norm), Some(tight), Some(support)) = (
            &self.norm2_decimal_down,
            self.norm_approx,
            self.tight,
            self.support,
        ) {
            writeln!(
                f,
                "  ||p_mm||^2 = {n2}... (exact rational in --json; digits rounded down)"
            )?;
            writeln!(f, "  ||p_mm||   = {norm:.12e} (f64 square root, rounded)")?;
            writeln!(
                f,
                "  min margin = 1 exactly: {tight} constraints at margin 1, {support} with a positive multiplier; \
                 all {} constraints >= 1",
                self.constraints
            )?;
        }
        if let Some(e) = self.f64_relative_error {
            writeln!(f, "  f64 ||p||^2 relative error: {e:.3e}")?;
        }
        if !self.farkas.is_empty() {
            writeln!(
                f,
                "  Farkas certificate on {} constraints: y >= 0, sum y_c v_c = 0, sum y_c > 0 (exact)",
                self.farkas.len()
            )?;
            for e in self.farkas.iter().take(10) {
                writeln!(
                    f,
                    "    sample {} token {}: y = {}",
                    e.sample, e.token, e.value.num
                )?;
            }
        }
        Ok(())
    }
}

/// Zero tests of exact integers.
trait IsZero {
    fn is_zero_int(&self) -> bool;
}

impl IsZero for Integer {
    fn is_zero_int(&self) -> bool {
        self.cmp0() == std::cmp::Ordering::Equal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i64]) -> Vec<Integer> {
        v.iter().map(|x| Integer::from(*x)).collect()
    }

    fn ratios(x: &(Vec<Integer>, Integer)) -> Vec<Rational> {
        x.0.iter()
            .map(|n| Rational::from((n.clone(), x.1.clone())))
            .collect()
    }

    /// Both exact solvers give the same rational solution: on a Gram matrix of rank 2
    /// with a dependent third row (its unknown 0), and on a full-rank one whose solution
    /// has a large common denominator (checked by substitution).
    #[test]
    fn p_adic_and_fraction_free_solvers_agree() {
        // V = (1, 0), (0, 1), (1, 1): Q = V V^T, b = Q (1, 1, 0)
        let q = ints(&[1, 0, 1, 0, 1, 1, 1, 1, 2]);
        let b = ints(&[1, 1, 2]);
        let dixon = solve_dixon(&q, 3, &b).unwrap();
        let ff = solve_psd(q.clone(), 3, b.clone()).unwrap();
        assert_eq!(ratios(&dixon), ratios(&ff));
        assert_eq!(ratios(&dixon), [1, 1, 0].map(Rational::from));
        // V: 5 rows of width 5 with entries up to 2^40, Q = V V^T, b = 2^60 1
        let v: Vec<i64> = (0..25)
            .map(|k| ((k * 7919 + 13) % 1_000_003) * (1 << (k % 40)) - (1 << 39))
            .collect();
        let q: Vec<Integer> = (0..25)
            .map(|e| {
                let (i, j) = (e / 5, e % 5);
                (0..5)
                    .map(|k| Integer::from(v[i * 5 + k]) * v[j * 5 + k])
                    .sum()
            })
            .collect();
        let b = vec![Integer::from(1) << 60; 5];
        let dixon = solve_dixon(&q, 5, &b).unwrap();
        let ff = solve_psd(q.clone(), 5, b.clone()).unwrap();
        assert_eq!(ratios(&dixon), ratios(&ff));
        for i in 0..5 {
            let s: Integer = (0..5)
                .map(|j| Integer::from(&q[i * 5 + j] * &dixon.0[j]))
                .sum();
            assert_eq!(s, Integer::from(&dixon.1 * &b[i]));
        }
    }

    /// Decimal text rounded toward zero, at both ends of the point.
    #[test]
    fn decimals_round_toward_zero() {
        let q = |n: i64, d: i64| Rational::from((n, d));
        assert_eq!(decimal_down(&q(2, 3), 5), "0.66666");
        assert_eq!(decimal_down(&q(-2, 3), 5), "-0.66666");
        assert_eq!(decimal_down(&q(5, 1), 3), "5.00");
        assert_eq!(decimal_down(&q(123_456, 1), 3), "123000");
        assert_eq!(decimal_down(&q(1, 1000), 2), "0.0010");
        assert_eq!(decimal_down(&q(0, 1), 2), "0");
    }
}
