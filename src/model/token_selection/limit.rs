//! The max-margin limit of a run (SPEC section 15, proofs-notes/max-margin.md): the
//! attention SVM's solution of a selection pattern, PROVED optimal by [`super::svm`],
//! as the direction a run's trained parameter is compared with, and the predictions
//! that limit makes without running to infinity.
//!
//! The direction lives where the trained parameter does:
//!
//! - p-mode: p in R^d, the SVM of p^T W(0) (x_{i,alpha_i} - x_{i,t}) >= 1 (W(0) as
//!   configured);
//! - W- and joint mode: q = W^T p, the SVM of q^T (x_{i,alpha_i} - x_{i,t}) >= 1 (W = I).
//!   In W-mode W - W(0) = p0 G^T is rank one, the Frobenius-min W-SVM's solution is
//!   W_mm = p0 q_mm^T / ||p0||^2, and corr_F(W - W(0), W_mm) = corr(q - q0, q_mm)
//!   (proofs-notes/max-margin.md): one number for both.
//!
//! Either way the constraint values are score differences z_{i,alpha_i} - z_{i,t}, so
//! a run's normalised margin comes from its own scores.

use rug::{Float, Integer};
use serde::{Deserialize, Serialize};

use super::svm::{self, PATTERN_PREC, PatternChoice, Verdict};
use crate::arith::{Arith, Ball};
use crate::config::{Config, Mode};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::model::{Model, Selection};

/// The space a run's direction is tracked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Space {
    /// p itself (p-mode), under the configured W(0).
    P,
    /// q = W^T p (W- and joint mode), under W = I.
    Q,
}

/// A vector of exact rationals `num_j 2^shift / den`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExactVector {
    /// Numerators.
    pub num: Vec<Integer>,
    /// Binary exponent common to every entry.
    pub shift: i64,
    /// Common denominator (> 0).
    pub den: Integer,
}

impl ExactVector {
    /// Entry j rounded into `ar` (the numerator and the denominator rounded once each at
    /// a common power of two, then divided: an enclosure in ball arithmetic).
    pub fn entries<A: Arith>(&self, ar: &A) -> Vec<A::Real> {
        // num 2^shift / den = (num 2^(shift - k)) / (den 2^-k), den 2^-k in [1, 2)
        let k = self.den.significant_bits() as i64 - 1;
        let scaled = |v: &Integer, e: i64| {
            let mut f = Float::with_val(v.significant_bits().max(1), v);
            // exact: a shift of the exponent
            if e >= 0 {
                f <<= e as u32;
            } else {
                f >>= (-e) as u32;
            }
            f
        };
        let den = ar.of_exact(&scaled(&self.den, -k));
        self.num
            .iter()
            .map(|v| {
                let mut x = ar.of_exact(&scaled(v, self.shift - k));
                ar.div(&mut x, &den);
                x
            })
            .collect()
    }
}

/// Integers at one common binary exponent: `v_j = out_j 2^shift` exactly (`v` exact
/// dyadic floats).
fn common_scale(v: &[Float]) -> (Vec<Integer>, i64) {
    let shift = v
        .iter()
        .filter(|f| !f.is_zero())
        .filter_map(|f| f.get_exp().map(|e| e as i64 - f.prec() as i64))
        .min()
        .unwrap_or(0);
    let out = v
        .iter()
        .map(|f| {
            let mut g = Float::with_val(f.prec() + 64, f);
            if shift < 0 {
                g <<= (-shift) as u32;
            } else {
                g >>= shift as u32;
            }
            g.to_integer().expect("a finite dyadic at its own scale")
        })
        .collect();
    (out, shift)
}

/// `sum_r c_r rows_r` (rows of `rows.len() / c.len()` integers): exact.
fn combine(c: &[Integer], rows: &[Integer]) -> Vec<Integer> {
    let d = rows.len() / c.len().max(1);
    let mut out = vec![Integer::new(); d];
    for (cr, row) in c.iter().zip(rows.chunks(d.max(1))) {
        if cr.cmp0() == std::cmp::Ordering::Equal {
            continue;
        }
        for (o, v) in out.iter_mut().zip(row) {
            *o += Integer::from(cr * v);
        }
    }
    out
}

/// The local-optimality test of SPEC section 15: every support token scores below its
/// sample's selected token under gamma_it = Y_i nu^T x_it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalOptimality {
    /// "locally optimal", "not locally optimal" or "undecided" (a comparison the
    /// 128-bit balls do not decide).
    pub verdict: String,
    /// The first support constraint that fails or is undecided: (sample, token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<[usize; 2]>,
}

/// What a run's direction is compared with, as recorded in its trajectory (and what the
/// run ended in, filled in at its end).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitSummary {
    /// How the pattern was chosen: theorem, optimal or given.
    pub pattern_choice: String,
    /// The selected token alpha_i of every training sample.
    pub pattern: Vec<usize>,
    /// Where the direction lives: "p" (p-mode) or "q" (W- and joint mode).
    pub space: Space,
    /// Always "proved optimal" (an unproved SVM is refused before the run).
    pub verdict: String,
    /// ||p_mm||^2, exact: "num/den".
    pub norm_sq_exact: String,
    /// ||p_mm||, rounded.
    pub norm: f64,
    /// 1 / ||p_mm||: the limit of the normalised margin.
    pub limit_margin: f64,
    /// Number of constraints n (T - 1).
    pub constraints: usize,
    /// The support constraints (positive multiplier): (sample, token).
    pub support: Vec<[usize; 2]>,
    /// The local-optimality test.
    pub local_optimality: LocalOptimality,
    /// Train accuracy of the hardmax classifier along p_mm (every sample selects its
    /// alpha_i: proved by the SVM's constraints), against the observed labels.
    pub limit_train_accuracy: f64,
    /// Test accuracy of the hardmax classifier along p_mm, against Y*; test samples
    /// whose top token or sign the 128-bit balls do not decide count as wrong.
    pub limit_test_accuracy: f64,
    /// Test samples whose hardmax prediction is undecided.
    pub limit_test_undecided: usize,
    /// At the run's last checkpoint: the training samples whose top token is not proved
    /// to be their alpha_i (empty: the run ends in the pattern). Absent before the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_pattern_at_end: Option<Vec<usize>>,
}

impl LimitSummary {
    /// Check a summary read from a file against itself and its run's sizes (`n`
    /// training samples of `t` tokens): the pattern and the support in range, the
    /// constraint count, and ||p_mm|| and 1 / ||p_mm|| as [`Limit::of_config`] rounds
    /// them from the exact ||p_mm||^2. The error says what does not fit.
    pub fn check(&self, n: usize, t: usize) -> std::result::Result<(), String> {
        if self.pattern.len() != n || self.pattern.iter().any(|a| *a >= t) {
            return Err(format!(
                "the direction summary's pattern is not one token index below T = {t} per \
                 training sample ({n})"
            ));
        }
        if self.constraints != n * t.saturating_sub(1) {
            return Err(format!(
                "the direction summary has {} constraints; n (T - 1) = {}",
                self.constraints,
                n * t.saturating_sub(1)
            ));
        }
        if let Some([i, k]) = self
            .support
            .iter()
            .find(|[i, k]| *i >= n || *k >= t || self.pattern[*i] == *k)
        {
            return Err(format!(
                "the direction summary's support holds ({i}, {k}), not a constraint of its \
                 pattern"
            ));
        }
        for (name, v) in [
            ("limit_train_accuracy", self.limit_train_accuracy),
            ("limit_test_accuracy", self.limit_test_accuracy),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!(
                    "the direction summary's {name} {v} is outside [0, 1]"
                ));
            }
        }
        if let Some(i) = self.off_pattern_at_end.iter().flatten().find(|i| **i >= n) {
            return Err(format!(
                "the direction summary's off_pattern_at_end holds {i}, not a training sample \
                 (n = {n})"
            ));
        }
        let norm_sq = self
            .norm_sq_exact
            .split_once('/')
            .and_then(|(a, b)| Some((a.parse::<Integer>().ok()?, b.parse::<Integer>().ok()?)))
            .filter(|(a, b)| *a > 0 && *b > 0)
            .map(rug::Rational::from)
            .ok_or("the direction summary's norm_sq_exact is not a positive num/den")?;
        let (norm, margin) = rounded_norms(&norm_sq);
        if norm.to_bits() != self.norm.to_bits() || margin.to_bits() != self.limit_margin.to_bits()
        {
            return Err(format!(
                "the direction summary's norm {} and limit_margin {} are not sqrt and 1 / sqrt \
                 of its norm_sq_exact ({norm}, {margin})",
                self.norm, self.limit_margin
            ));
        }
        Ok(())
    }
}

/// ||p_mm|| and 1 / ||p_mm|| as recorded, from the exact ||p_mm||^2.
fn rounded_norms(norm_sq: &rug::Rational) -> (f64, f64) {
    let norm = norm_sq.to_f64().sqrt();
    let mut f = Float::with_val(256, norm_sq);
    f.sqrt_mut();
    f.recip_mut();
    (norm, f.to_f64())
}

/// The limit a run is compared with: the pattern's proved SVM solution.
#[derive(Debug, Clone)]
pub struct Limit {
    /// The summary recorded with the run.
    pub summary: LimitSummary,
    /// p_mm (or q_mm) exactly, in the tracked space.
    pub direction: ExactVector,
    /// The support constraints: (sample, token).
    pub support: Vec<(usize, usize)>,
}

/// The pattern a config names: "theorem", "optimal" or a list.
pub fn choice_of(cfg: &Config) -> Option<PatternChoice> {
    use crate::config::PatternSpec;
    cfg.direction.as_ref().map(|d| match &d.pattern {
        PatternSpec::Named(s) if s == "optimal" => PatternChoice::Optimal,
        PatternSpec::Named(_) => PatternChoice::Theorem,
        PatternSpec::Given(v) => PatternChoice::Given(v.clone()),
    })
}

/// The tracked space of a mode.
pub fn space_of(mode: Mode) -> Space {
    match mode {
        Mode::P => Space::P,
        _ => Space::Q,
    }
}

/// Refuse, before any work, a config whose SVM is too large for [`svm::check_sizes`].
pub fn check_sizes(cfg: &Config) -> Result<()> {
    if cfg.direction.is_none() {
        return Ok(());
    }
    let dense =
        space_of(cfg.mode) == Space::P && cfg.init.w == crate::config::WInit::KaimingUniform;
    svm::check_sizes(cfg.n_train, cfg.tokens(), cfg.d, dense)
}

impl Limit {
    /// Solve and prove the SVM of `cfg`'s `[direction]` pattern on `data` (binary model)
    /// and the hardmax predictions along it. An infeasible pattern is an
    /// [`Error::InvalidConfig`] (`direction.pattern`); an SVM not proved optimal is
    /// refused ([`Error::Refused`]): a run is compared only with a proved limit.
    pub fn of_config(cfg: &Config, data: &Dataset, choice: &PatternChoice) -> Result<Limit> {
        check_sizes(cfg)?;
        let space = space_of(cfg.mode);
        let (n, t, d) = data.train.x.dim();
        // the p-space map is W(0) (None: the identity); the q-space one is I
        let w: Option<Vec<f64>> = match space {
            Space::Q => None,
            Space::P => svm::w0_map(cfg),
        };
        let pattern = svm::pattern(data, choice).map_err(|e| match e {
            Error::InvalidArgument { name, reason } if name == "pattern" => Error::InvalidConfig {
                field: "direction.pattern".into(),
                reason: reason.replace(
                    "give the pattern as a file",
                    "give the pattern as a list of token indices",
                ),
            },
            e => e,
        })?;
        let x = data.train.x.as_slice().expect("standard layout");
        let solved = svm::solve(x, t, d, w.as_deref(), pattern.clone())?;
        let (proved, cert) = match solved.verdict {
            Verdict::ProvedOptimal {
                proved,
                certificate,
            } => (proved, certificate),
            Verdict::Infeasible { .. } => {
                return Err(Error::config(
                    "direction.pattern",
                    format!(
                        "the attention SVM of the {} pattern is infeasible (an exact Farkas \
                         vector proves it: `tokensel svm` prints it): no direction selects \
                         that pattern",
                        choice.name()
                    ),
                ));
            }
            Verdict::NotProved { failure } => {
                return Err(Error::Refused(format!(
                    "the attention SVM of the {} pattern was not proved optimal ({failure}); \
                     a run's direction is compared only with a proved limit",
                    choice.name()
                )));
            }
            Verdict::NoCertificate { reason } => {
                return Err(Error::Refused(format!(
                    "the attention SVM of the {} pattern has no certificate ({reason}); a \
                     run's direction is compared only with a proved limit",
                    choice.name()
                )));
            }
        };
        // p_mm = W sum_r a_r x_r / den, exactly
        let rows: Vec<Float> = match &w {
            None => x.iter().map(|v| Float::with_val(53, *v)).collect(),
            Some(w) => crate::arith::exact::cross_gram_f64(x, w, d),
        };
        let (rows, shift) = common_scale(&rows);
        let direction = ExactVector {
            num: combine(&cert.a, &rows),
            shift,
            den: cert.den.clone(),
        };
        // q_mm = W^T p_mm scores the test tokens (q_mm = p_mm where W = I)
        let q = match &w {
            None => direction.clone(),
            Some(w) => {
                let (wi, ws) = common_scale(
                    &w.iter()
                        .map(|v| Float::with_val(53, *v))
                        .collect::<Vec<_>>(),
                );
                // q_k = sum_j W_jk p_j: rows of W weighted by p
                ExactVector {
                    num: combine(&direction.num, &wi),
                    shift: direction.shift + ws,
                    den: direction.den.clone(),
                }
            }
        };
        let cons = svm::Constraints::new(t, pattern.clone());
        let support: Vec<(usize, usize)> = (0..cons.count())
            .filter(|c| cert.lambda[*c] > 0)
            .map(|c| cons.sample_token(c))
            .collect();
        let ar = Ball::new(PATTERN_PREC)?;
        let model = super::TokenSelection;
        let g_train = model.head_values(&ar, data, data.train.x.view());
        let local_optimality =
            local_optimality(&ar, &g_train, &data.train.y, t, &pattern, &support);
        let train_correct = (0..n)
            .filter(|&i| ar.decide_sign(&g_train[i * t + pattern[i]]) == Some(data.train.y[i]))
            .count();
        let (test_correct, test_undecided) = hardmax_test(&ar, data, &q);
        let (norm, limit_margin) = rounded_norms(&proved.norm2);
        let norm_sq_exact = format!("{}/{}", proved.norm2.numer(), proved.norm2.denom());
        let n_test = data.test.y_true.len();
        Ok(Limit {
            summary: LimitSummary {
                pattern_choice: choice.name().into(),
                pattern,
                space,
                verdict: "proved optimal".into(),
                norm_sq_exact,
                norm,
                limit_margin,
                constraints: cons.count(),
                support: support.iter().map(|&(i, t)| [i, t]).collect(),
                local_optimality,
                limit_train_accuracy: train_correct as f64 / n as f64,
                limit_test_accuracy: test_correct as f64 / n_test.max(1) as f64,
                limit_test_undecided: test_undecided,
                off_pattern_at_end: None,
            },
            direction,
            support,
        })
    }
}

/// The local-optimality test on the 128-bit head values `g` (n T): for each support
/// constraint (i, t), Y_i g_it < Y_i g_{i, alpha_i}, proved.
fn local_optimality(
    ar: &Ball,
    g: &[<Ball as Arith>::Real],
    y: &[i8],
    t: usize,
    pattern: &[usize],
    support: &[(usize, usize)],
) -> LocalOptimality {
    use std::cmp::Ordering;
    for &(i, k) in support {
        let (mut sel, mut other) = (g[i * t + pattern[i]].clone(), g[i * t + k].clone());
        if y[i] < 0 {
            ar.neg(&mut sel);
            ar.neg(&mut other);
        }
        match ar.decide_cmp(&other, &sel) {
            Some(Ordering::Less) => {}
            Some(_) => {
                return LocalOptimality {
                    verdict: "not locally optimal".into(),
                    at: Some([i, k]),
                };
            }
            None => {
                return LocalOptimality {
                    verdict: "undecided".into(),
                    at: Some([i, k]),
                };
            }
        }
    }
    LocalOptimality {
        verdict: "locally optimal".into(),
        at: None,
    }
}

/// The hardmax classifier along `q` (exact) on the test set, in 128-bit balls: each
/// sample's top token (every other token's score proved below it) and the sign of its
/// head value against Y*. Returns (correct, undecided).
fn hardmax_test(ar: &Ball, data: &Dataset, q: &ExactVector) -> (usize, usize) {
    use rayon::prelude::*;
    let (n, t, d) = data.test.x.dim();
    let qb = q.entries(ar);
    let x = data.test.x.as_slice().expect("standard layout");
    let g = super::TokenSelection.head_values(ar, data, data.test.x.view());
    let verdicts: Vec<Option<bool>> = (0..n)
        .into_par_iter()
        .map(|i| {
            let z: Vec<_> = (0..t)
                .map(|k| {
                    let mut s = ar.zero();
                    let row = (i * t + k) * d;
                    ar.dot_f64(&x[row..row + d], &qb, &mut s);
                    s
                })
                .collect();
            let best = svm::proved_argmax(ar, &z).ok()?;
            ar.decide_sign(&g[i * t + best])
                .filter(|s| *s != 0)
                .map(|s| s == data.test.y_true[i])
        })
        .collect();
    (
        verdicts.iter().filter(|v| **v == Some(true)).count(),
        verdicts.iter().filter(|v| v.is_none()).count(),
    )
}

/// The training samples whose top token at a checkpoint (`tops[i]`: its top token and
/// selection) is not proved to be `pattern[i]`.
pub fn off_pattern(tops: &[(usize, Selection)], pattern: &[usize]) -> Vec<usize> {
    tops.iter()
        .zip(pattern)
        .enumerate()
        .filter(|(_, ((top, sel), a))| !(*sel == Selection::Decided && top == *a))
        .map(|(i, _)| i)
        .collect()
}
