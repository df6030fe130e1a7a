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

//!
//! The module is split by concern: `solver.rs` the f64 stage (the dual active-set method
//! and the Farkas search, non-negative least squares over one shared inner step),
//! `exact.rs` the exact lifting and checks of the certificate, `report.rs` what
//! `tokensel svm` prints and serialises. This file holds the instance (sizes, the exact
//! Gram matrix, the pattern's constraints, the pattern) and [`solve`], which runs the
//! stages in order.

mod exact;
mod report;
mod solver;

use rug::Integer;

use crate::arith::exact as exact_arith;
use crate::config::Group;
use crate::data::Dataset;
use crate::error::{Error, Result};

pub use self::exact::{
    Certificate, ExactSize, Failure, Proved, certificate_for, check, check_farkas, exact_size,
    farkas_for, farkas_on,
};
pub use self::report::{Report, report, w0_map};
pub use self::solver::{
    F64Outcome, F64Solution, farkas_search, iteration_limit, q_f64, solve_f64, stop_description,
};

/// The most training tokens n T an SVM instance may have: the exact Gram matrix holds
/// (n T)^2 big integers (about 150 bits each for N(0, 1) data), about 100 MB at this size.
pub const MAX_TOKENS: usize = 1200;
/// The most products r d^2 the exact W(0) X^T of a dense W(0) may take (r = n T).
pub const MAX_DENSE_W_PRODUCTS: u128 = 4_000_000_000;
/// The most support constraints the exact re-solve takes (p-adic lifting, [`MAX_MINOR_BITS`]
/// / 30 digits of about |S|^2 products each; measured on 2 shared cores, d = 2000,
/// balanced layout: |S| = 101 in 0.12 s, 202 in 1.8 s, 338 in 8 s).
pub const MAX_SUPPORT: usize = 600;
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
    /// without rounding ([`exact_arith::gram_f64`], and for a dense W the exact rows W x_j by
    /// [`exact_arith::cross_gram_f64`], then [`exact_arith::gram_exact`]).
    pub fn of_tokens(x: &[f64], d: usize, w: Option<&[f64]>) -> Gram {
        let r = x.len() / d.max(1);
        let floats = match w {
            None => exact_arith::gram_f64(x, r, d),
            Some(w) => exact_arith::gram_exact(&exact_arith::cross_gram_f64(x, w, d), r, d),
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

/// [`farkas_search`] in f64, then [`farkas_on`] exactly on the set it found: a Farkas
/// vector that passed the exact check, or `None` (also where that set is past the exact
/// re-solve's limits, [`exact_size`]).
fn search_farkas(g: &Gram, cons: &Constraints, q: &[f64], m: usize) -> Option<Vec<Integer>> {
    let set = farkas_search(q, m)?;
    exact_size(g, cons, &set).ok()?;
    farkas_on(g, cons, &set)
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
