//! The f64 stage of the attention SVM: the dual active-set method ([`solve_f64`]) and
//! the f64 Farkas search ([`farkas_search`]), both Lawson and Hanson's active-set method
//! for a non-negative least-squares problem over one shared inner step ([`inner_step`]).

use super::{Constraints, Gram};

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
    /// exact Farkas check decides ([`check_farkas`](super::check_farkas)).
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
    /// would refuse it: [`MAX_SUPPORT`](super::MAX_SUPPORT)).
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
            if inner_step(&s, &mut free, &mut lam, &mut in_free) {
                break;
            }
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

/// One step of the inner loop of Lawson and Hanson's active-set method, shared by
/// [`solve_f64`] (on the dual multipliers) and [`farkas_search`] (on the Farkas
/// weights): `s` is the unconstrained minimiser on the set `set` (`s[k]` for the
/// constraint `set[k]`). Where every `s[k] > 0`, the iterate takes it on the set
/// (`x[set[k]] = s[k]`) and the step returns `true` (the inner loop ends). Otherwise the
/// iterate moves toward `s` by the largest `alpha <= 1` keeping it nonnegative
/// (`alpha = min x_j / (x_j - s_k)` over `s_k <= 0`), and the constraints whose weight
/// reaches 0 there leave the set (their weight set to 0, `in_set` cleared); returns
/// `false`. The set keeps its order.
fn inner_step(s: &[f64], set: &mut Vec<usize>, x: &mut [f64], in_set: &mut [bool]) -> bool {
    if s.iter().all(|v| *v > 0.0) {
        for (k, &j) in set.iter().enumerate() {
            x[j] = s[k];
        }
        return true;
    }
    let mut alpha = 1.0f64;
    for (k, &j) in set.iter().enumerate() {
        if s[k] <= 0.0 {
            alpha = alpha.min(x[j] / (x[j] - s[k]));
        }
    }
    let mut keep = Vec::with_capacity(set.len());
    for (k, &j) in set.iter().enumerate() {
        x[j] += alpha * (s[k] - x[j]);
        if x[j] > 0.0 && !(s[k] <= 0.0 && x[j] / (x[j] - s[k]) <= alpha) {
            keep.push(j);
        } else {
            x[j] = 0.0;
            in_set[j] = false;
        }
    }
    *set = keep;
    false
}

/// Search a Farkas vector in f64, for a pattern whose f64 solve did not end optimal:
/// the nonnegative least-squares problem min ||A y - b||^2, y >= 0, with A's columns
/// (v_c, 1) and b = (0, 1) (Gram matrix Q + 1 1^T, A^T b = 1), by Lawson and Hanson's
/// active-set method. Its residual is 1 - sum_c y_c at the end, 0 exactly when some
/// y >= 0 has sum_c y_c v_c = 0 and sum_c y_c = 1 (a Farkas vector); then the columns
/// of the final passive set are independent and the exact [`farkas_on`](super::farkas_on) recovers y.
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
            if inner_step(&z, &mut passive, &mut y, &mut in_p) {
                break;
            }
            if passive.is_empty() {
                break;
            }
        }
    }
    let residual = 1.0 - passive.iter().map(|&j| y[j]).sum::<f64>();
    (residual.abs() < 1e-9 && !passive.is_empty()).then_some(passive)
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
