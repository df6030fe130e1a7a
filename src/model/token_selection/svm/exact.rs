//! The exact stage of the attention SVM: the f64 support re-solved over the integers
//! (p-adic lifting, fraction-free elimination as the fallback), the rational KKT
//! certificate and its exact checks, and the exact Farkas vectors.

use std::fmt;

use rug::{Integer, Rational};
use serde::Serialize;

use super::{Constraints, Gram, MAX_MINOR_BITS, MAX_SUPPORT};
use crate::error::{Error, Result};

/// The most support constraints the fraction-free fallback of the exact re-solve takes
/// (about |S|^3 / 6 products of integers of up to |S| b bits: 101 in 2.3 s, 202 in about
/// 40 s); past it, a failed p-adic solve (an unlucky prime) gives no certificate.
const MAX_FRACTION_FREE: usize = 150;
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

/// The exact Farkas vector on the constraints `set` ([`farkas_search`](super::farkas_search)'s passive set):
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

/// Zero tests of exact integers.
pub(super) trait IsZero {
    /// Whether the integer is 0.
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
}
