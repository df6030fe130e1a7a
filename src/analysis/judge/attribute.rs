//! Attribution: which candidate's deviation from the truth the external trajectory
//! follows, record by record and quantity by quantity, and where it follows none
//! (proofs-notes/judge.md, "Diagnosis by candidate replay").
//!
//! With e(k, Q) the external's error at record k in quantity Q and c(k, Q) a
//! candidate's, the candidate's **envelope** is env(k, Q) = max(max_{j <= k} c(j, Q),
//! u_c) (its largest deviation so far, at least its dtype's unit roundoff). The external
//! stays **within** the candidate at (k, Q) when e(k, Q) <= [`FACTOR`] env(k, Q). A
//! candidate **holds** the records before its first exit. It is **too coarse** for the
//! records it holds when, in some quantity, its own largest deviation there exceeds
//! [`FACTOR`] times the external's (the external does not show the candidate's errors)
//! and either also its unit roundoff, or the external's error there is below
//! [`BELOW_DTYPE`] of it; or where the external's value is exact and the candidate's is
//! not. The candidates that hold longest without being too coarse explain those
//! records; if they hold every record, they explain the run, else the external departs
//! from rounding at the record where they stop holding.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::candidate::{Absorption, Candidate};
use crate::config::Mode;
use crate::io::external::Dtype;
use crate::quantity::Quantity;

/// The factor between the external's deviation and a candidate's that still counts as
/// following it (proofs-notes/judge.md derives it).
pub const FACTOR: f64 = 100.0;

/// The errors of a run, resolved (every scale known).
#[derive(Debug, Clone, PartialEq)]
pub struct Errors {
    /// Recorded steps.
    pub steps: Vec<u64>,
    /// The twin's largest score gap at each record.
    pub gaps: Vec<f64>,
    /// The external's error per quantity, per record.
    pub external: BTreeMap<Quantity, Vec<f64>>,
    /// Each candidate's error per quantity, per record (NaN once it has stopped).
    pub candidates: BTreeMap<Candidate, BTreeMap<Quantity, Vec<f64>>>,
    /// The record from which each candidate is unavailable (a non-finite stop).
    pub stopped_at: BTreeMap<Candidate, usize>,
    /// Errors at or below this are counted as zero: the twin's own resolution.
    pub zero_level: f64,
    /// Number of entries of each quantity (its shape's product).
    pub entries: BTreeMap<Quantity, usize>,
    /// The header's dtype: the diagnosis weighs only the candidates in it, as the
    /// proof does.
    pub dtype: Dtype,
    /// Per quantity, per record: some external value there is NaN or infinite (an
    /// infinite error of finite values, such as 1e308 against a truth of 1, is not).
    pub nonfinite: BTreeMap<Quantity, Vec<bool>>,
    /// Per quantity recorded at fewer records than the others, per record: whether
    /// the external recorded it there (a quantity not in the map is recorded at every
    /// record). Where it is not, its errors (the external's and the candidates') are NaN
    /// placeholders that nothing weighs.
    pub recorded: BTreeMap<Quantity, Vec<bool>>,
    /// The run's mode (which recorded parameters fix q, the scores' input).
    pub mode: Mode,
    /// The factorised map's parameters that fix q = W_K^T (W_Q p + b_Q) (`W_Q`, `W_K`,
    /// `b_Q` with biases, `p` where it trains); empty without `[factorised]` (there
    /// `mode` says which of p and W fix q).
    pub q_inputs: Vec<Quantity>,
    /// The trained parameter whose updates are compared with the twin's (p; q in
    /// W-mode; W_K for `[factorised]`, which every factorised run trains).
    pub trained: Quantity,
    /// Per record k: how the external's update of its trained parameter from record
    /// k - 1 to k compares with the twin's, where both records are one update apart and
    /// record that parameter (`None` elsewhere).
    pub scaled: Vec<Option<Scaled>>,
    /// The factors of the run's update that a constant scale of it may come from: the
    /// step size, and where the optimizer has them the clip threshold, Adam's bias
    /// correction (lr / (1 - beta1^t)) and the schedule's factor.
    pub scales: Vec<&'static str>,
    /// Whether a constant factor in the gradient can scale the update: `None` where the
    /// optimizer is invariant to it (Adam, AdamW, up to eps), else the words that
    /// qualify it ("" for plain GD, " (where clipping was not active)" when clipped).
    pub gradient_factor: Option<&'static str>,
}

/// The external's update Δe = e(k) - e(k - 1) of the trained parameter (p; q in
/// W-mode; W_K for `[factorised]`) against the twin's Δt over the same update: the least-squares factor r of
/// Δe ≈ r Δt and what it leaves, each relative to the twin's ||t(k)||.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scaled {
    /// r = <Δe, Δt> / <Δt, Δt>.
    #[serde(with = "crate::io::nonfinite")]
    pub ratio: f64,
    /// ||Δe - r Δt|| / ||t(k)||: the part of the external's update that is not r Δt.
    #[serde(with = "crate::io::nonfinite")]
    pub residual: f64,
    /// |r - 1| ||Δt|| / ||t(k)||: the error the factor alone makes.
    #[serde(with = "crate::io::nonfinite")]
    pub scaling: f64,
}

impl Scaled {
    /// The comparison of the updates Δe = `ext_now` - `ext_before` and Δt = `twin_now`
    /// - `twin_before` (`None` where Δt or t(k) is zero, or a value is not finite).
    pub fn of(
        ext_before: &[f64],
        ext_now: &[f64],
        twin_before: &[f64],
        twin_now: &[f64],
    ) -> Option<Scaled> {
        let de: Vec<f64> = ext_now.iter().zip(ext_before).map(|(a, b)| a - b).collect();
        let dt: Vec<f64> = twin_now
            .iter()
            .zip(twin_before)
            .map(|(a, b)| a - b)
            .collect();
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let (tt, norm) = (dot(&dt, &dt), dot(twin_now, twin_now).sqrt());
        if !(tt > 0.0 && norm > 0.0 && tt.is_finite() && norm.is_finite()) {
            return None;
        }
        let ratio = dot(&de, &dt) / tt;
        let rest: Vec<f64> = de.iter().zip(&dt).map(|(e, t)| e - ratio * t).collect();
        let s = Scaled {
            ratio,
            residual: dot(&rest, &rest).sqrt() / norm,
            scaling: (ratio - 1.0).abs() * tt.sqrt() / norm,
        };
        [s.ratio, s.residual, s.scaling]
            .iter()
            .all(|x| x.is_finite())
            .then_some(s)
    }
}

impl Errors {
    /// Number of records.
    pub fn records(&self) -> usize {
        self.steps.len()
    }

    /// Candidate `c`'s own errors in quantity `q`, per record. For `rest` = 1 - s_top the
    /// formulation of the gradient does not fix how 1 - s_top is computed (the README
    /// defines it as 1 - max(s), the naive form; the stable form sums the other
    /// tokens' weights): there the error is `pick` of the errors of both formulations
    /// in c's dtype (the larger for the envelope, the smaller for coarseness), so
    /// that `rest` never decides between the gradient's formulations.
    pub fn own(&self, c: Candidate, q: Quantity, pick: fn(f64, f64) -> f64) -> Vec<f64> {
        let mine = &self.candidates[&c][&q];
        if q != Quantity::Rest {
            return mine.clone();
        }
        let sibling = Candidate::ALL
            .into_iter()
            .find(|o| *o != c && o.dtype() == c.dtype())
            .expect("two formulations per dtype");
        match self.candidates.get(&sibling).and_then(|s| s.get(&q)) {
            Some(other) => mine
                .iter()
                .zip(other)
                .map(|(&a, &b)| if a.is_nan() { a } else { pick(a, b) })
                .collect(),
            None => mine.clone(),
        }
    }

    /// The candidate's envelopes per quantity, per record: running maxima of its errors
    /// ([`Errors::own`], the larger of both formulations' for `rest`), at least its
    /// dtype's unit roundoff (NaN once it has stopped).
    pub fn envelopes(&self, c: Candidate) -> BTreeMap<Quantity, Vec<f64>> {
        let floor = c.dtype().unit_roundoff();
        let stop = self.stopped_at.get(&c).copied().unwrap_or(usize::MAX);
        self.candidates[&c]
            .keys()
            .map(|&q| {
                let errs = self.own(c, q, f64::max);
                let mut run = floor;
                let env = errs
                    .iter()
                    .enumerate()
                    .map(|(k, &e)| {
                        if k >= stop {
                            return f64::NAN;
                        }
                        run = run.max(e);
                        run
                    })
                    .collect();
                (q, env)
            })
            .collect()
    }

    /// Whether the external recorded quantity `q` at record `k`.
    pub fn has(&self, q: Quantity, k: usize) -> bool {
        self.recorded.get(&q).is_none_or(|r| r[k])
    }

    /// The updates a deviation first seen at record `k` in the quantities `qs` may come
    /// from: (first, last) as [`Errors::updates`], where `first` follows the record
    /// before `k` at which one of `qs` was last recorded, the earliest of these (a
    /// quantity recorded sparsely was last seen within its limits at its own previous
    /// record; the same as [`Errors::updates`] when each is recorded at every record);
    /// `None` at step 0.
    pub fn updates_of(&self, k: usize, qs: &[Quantity]) -> Option<(u64, u64)> {
        let step = self.steps[k];
        let first = qs
            .iter()
            .map(|&q| {
                (0..k)
                    .rev()
                    .find(|&j| self.has(q, j))
                    .map_or(1, |j| self.steps[j] + 1)
            })
            .min();
        match first {
            Some(first) => (step > 0).then_some((first, step)),
            None => self.updates(k),
        }
    }

    /// The updates a deviation first seen at record `k` may come from: (first, last),
    /// counted from 1 (update u takes step u - 1 to step u); `None` at step 0.
    pub fn updates(&self, k: usize) -> Option<(u64, u64)> {
        let step = self.steps[k];
        (step > 0).then(|| (if k == 0 { 1 } else { self.steps[k - 1] + 1 }, step))
    }
}

/// Where the external first leaves a candidate's envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exit {
    /// The record's step.
    pub step: u64,
    /// The first quantity (report order) outside the envelope there.
    pub quantity: Quantity,
    /// The external's error there.
    #[serde(with = "crate::io::nonfinite")]
    pub rel_err: f64,
    /// FACTOR times the candidate's envelope there (NaN: the candidate had stopped).
    #[serde(with = "crate::io::nonfinite")]
    pub limit: f64,
}

/// Why a candidate is too coarse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Coarseness {
    /// The external's error in a quantity of two or more entries is below
    /// [`BELOW_DTYPE`] of the candidate dtype's unit roundoff, and the candidate's
    /// largest error so far over [`FACTOR`] times the external's: the external does not
    /// compute in that dtype.
    BelowDtype,
    /// The candidate's error is over [`FACTOR`] times the external's and its own unit
    /// roundoff: an error of its formulation the external does not make.
    Larger,
    /// The external's value of a quantity of two or more entries is exact (its error
    /// is at the twin's resolution) where the candidate's is not: the external does
    /// not round as the candidate does (e.g. a float64 W(0) or p(0) that float32
    /// rounds).
    Exact,
}

/// Where a candidate is too coarse for the external: its deviation so far is far larger
/// than the external's, beyond what a second rounding sequence explains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Coarse {
    /// Why.
    pub reason: Coarseness,
    /// The step where it shows first.
    pub step: u64,
    /// The quantity.
    pub quantity: Quantity,
    /// The candidate's largest error in it up to that step.
    #[serde(with = "crate::io::nonfinite")]
    pub candidate_err: f64,
    /// The external's largest error in it up to that step.
    #[serde(with = "crate::io::nonfinite")]
    pub external_err: f64,
}

/// An external error below this fraction of a candidate dtype's unit roundoff, with the
/// candidate's own largest error so far over [`FACTOR`] times the external's, is not
/// that dtype's rounding (proofs-notes/judge.md, "Too coarse"). Below it alone is no
/// evidence: a saturated attention rounds to one-hot and a saturated output to 1.0
/// exactly in every implementation of the dtype, the candidate's too.
pub const BELOW_DTYPE: f64 = 1e-3;

/// The first record before `holds` where candidate `c` is too coarse. With E_k and C_k
/// the external's and c's largest errors in a quantity over the records up to k (for
/// `rest` c's is the smaller of both formulations', [`Errors::own`]), u c's unit
/// roundoff:
/// - below the dtype: in a quantity of two or more entries the external's error at k is
///   nonzero and below [`BELOW_DTYPE`] u, and C_k > [`FACTOR`] E_k (c, rounding in
///   that dtype, errs far more than the external: the external does not round as c
///   does; where the values round almost exactly, c's errors are as small as the
///   external's and the test is silent);
/// - exact: in a quantity of two or more entries the external's error at k is zero
///   (the twin's resolution) where c's own there is not;
/// - larger: in some quantity C_k > [`FACTOR`] max(E_k, u), E_k nonzero (an error of
///   c's formulation that the external does not make, such as the naive gradient's).
fn coarse(errs: &Errors, c: Candidate, holds: usize) -> Option<Coarse> {
    let u = c.dtype().unit_roundoff();
    let own: BTreeMap<Quantity, Vec<f64>> = errs
        .external
        .keys()
        .map(|&q| (q, errs.own(c, q, f64::min)))
        .collect();
    // (E_k, C_k) per quantity: the running maxima up to the current record
    let mut run: BTreeMap<Quantity, (f64, f64)> = BTreeMap::new();
    let vector = |q: &Quantity| errs.entries[q] >= 2;
    for (k, &step) in errs.steps[..holds].iter().enumerate() {
        let here = || errs.external.iter().filter(|(q, _)| errs.has(**q, k));
        for (&q, e) in here() {
            let (ext_run, own_run) = run.entry(q).or_insert((0.0, 0.0));
            *ext_run = ext_run.max(e[k]);
            *own_run = own_run.max(own[&q][k]);
        }
        // below the dtype, or exact where c is not: a quantity of two or more entries
        // (a scalar may be that accurate by chance)
        let below = here().filter(|(q, _)| vector(q)).find_map(|(q, e)| {
            let (ext_run, own_run) = run[q];
            if e[k] > errs.zero_level && e[k] < BELOW_DTYPE * u && own_run > FACTOR * ext_run {
                Some(Coarse {
                    reason: Coarseness::BelowDtype,
                    step,
                    quantity: *q,
                    candidate_err: own_run,
                    external_err: ext_run,
                })
            } else if e[k] <= errs.zero_level && own[q][k] > errs.zero_level {
                Some(Coarse {
                    reason: Coarseness::Exact,
                    step,
                    quantity: *q,
                    candidate_err: own[q][k],
                    external_err: e[k],
                })
            } else {
                None
            }
        });
        if below.is_some() {
            return below;
        }
        for (&q, _) in here() {
            let (ext_run, own_run) = run[&q];
            if ext_run > errs.zero_level && own_run > FACTOR * ext_run.max(u) {
                return Some(Coarse {
                    reason: Coarseness::Larger,
                    step,
                    quantity: q,
                    candidate_err: own_run,
                    external_err: ext_run,
                });
            }
        }
    }
    None
}

/// How the external trajectory relates to one candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    /// The candidate.
    pub candidate: Candidate,
    /// Its own largest deviation from the truth, per quantity (over the records it ran).
    pub own_max: BTreeMap<Quantity, f64>,
    /// The largest ratio e / (FACTOR env) over every record (<= 1: within everywhere).
    #[serde(with = "crate::io::nonfinite")]
    pub max_ratio: f64,
    /// Records (from the first) the external stays within this candidate.
    pub holds: usize,
    /// Where it first leaves it (none: within at every record).
    pub exit: Option<Exit>,
    /// Too coarse for the records it holds (none: not).
    pub coarse: Option<Coarse>,
    /// It explains the whole run.
    pub explains: bool,
    /// Where its replay absorbed updates.
    pub absorption: Absorption,
    /// The step and message of a non-finite stop of its replay.
    pub stopped: Option<(u64, String)>,
}

/// What a departure from every explanation looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// At step 0, before any update: other data, initial parameters, head or forward pass.
    WrongData,
    /// After updates: a wrong gradient, sign, step size, head, or lost updates.
    WrongModel,
    /// A NaN or infinite external value where the truth is finite.
    NonFinite,
}

impl Cause {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Cause::WrongData => "wrong data or initial parameters",
            Cause::WrongModel => "wrong model or data",
            Cause::NonFinite => "non-finite values",
        }
    }
}

/// Where the records locate a departure: a stage named only where the records
/// exclude the others (the quantities before it recorded and within the limits, the
/// ones it computes outside; a stage that reads the data is told with it), else
/// [`Located::Unexplained`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "stage")]
pub enum Located {
    /// At step 0 a recorded parameter is not the data's initial one.
    InitialParameters {
        /// The parameter.
        quantity: Quantity,
    },
    /// The forward pass: `right` is within the limits at the step, `wrong`, computed
    /// from it, is not.
    ForwardPass {
        /// The last recorded quantity before the fault, right.
        right: Quantity,
        /// The first one after it, wrong.
        wrong: Quantity,
    },
    /// The outputs are right, the loss is not (the gradient not wrong: within the
    /// limits, or not recorded).
    Loss,
    /// The attention and the outputs are right, dL/dq is not (the loss not wrong).
    Gradient,
    /// The outputs and the attention are right, the loss and dL/dq are not.
    LossAndGradient,
    /// The external's trained parameter is right before the update and its update is
    /// `ratio` times the truth's, to within what rounding explains.
    ScaledUpdate {
        /// The factor.
        #[serde(with = "crate::io::nonfinite")]
        ratio: f64,
        /// dL/dq was recorded and right before the update: the gradient is excluded.
        gradient_right: bool,
        /// Neither the scores at the same step nor a later record of the parameter is
        /// recorded: a parameter stored otherwise is not excluded.
        #[serde(default)]
        stored_not_excluded: bool,
    },
    /// The trained parameter and dL/dq are right before the update, the parameter after
    /// it is not: the optimizer's step.
    Update {
        /// As in [`Located::ScaledUpdate`].
        #[serde(default)]
        stored_not_excluded: bool,
    },
    /// A recorded parameter is wrong while what is computed from it is right (the
    /// scores at the same step, or the parameter's next record) and nothing computed
    /// from it at that step is wrong: the parameter was stored otherwise than the one
    /// the run computed with, or an update moved it where the recorded quantities do
    /// not see it (a direction the scores cannot see, or undone by the next update).
    /// The records do not tell the two apart; both are told.
    StoredOtherwise {
        /// The parameter.
        quantity: Quantity,
        /// The quantity computed from it that is right at the same step, if any.
        right_same_step: Option<Quantity>,
        /// The step of a later record where the parameter is right again, if any.
        right_again: Option<u64>,
    },
    /// The trained parameter did not change while the explaining replays' did.
    LostUpdates,
    /// The records do not tell the cause.
    Unexplained,
}

/// Where the external departs from every rounding explanation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Departure {
    /// What it looks like.
    pub cause: Cause,
    /// Where the records locate it.
    pub located: Located,
    /// The step of the first record that no candidate explains.
    pub step: u64,
    /// The updates it may come from (first, last; counted from 1), none at step 0.
    pub updates: Option<(u64, u64)>,
    /// The first quantity (report order) outside every envelope there.
    pub quantity: Quantity,
    /// Every quantity outside every envelope there.
    pub quantities: Vec<Quantity>,
    /// The external's error in `quantity` there.
    #[serde(with = "crate::io::nonfinite")]
    pub rel_err: f64,
    /// The widest limit (FACTOR times an envelope) of the candidates it is judged
    /// against, in `quantity`.
    #[serde(with = "crate::io::nonfinite")]
    pub limit: f64,
    /// The twin's largest score gap there.
    #[serde(with = "crate::io::nonfinite")]
    pub score_gap: f64,
}

/// The diagnosis: which candidates explain the run or the records before a departure,
/// and the departure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// The candidates that explain the run (no departure) or the records before it.
    pub explained_by: Vec<Candidate>,
    /// The last step they explain (none: not even the first record).
    pub explained_until: Option<u64>,
    /// Where the external leaves them (none: they explain the run).
    pub departure: Option<Departure>,
    /// Every candidate in the header's dtype is too coarse: the external is more
    /// accurate than each.
    pub more_accurate: bool,
    /// Candidates of the other dtype that the records do not exclude: not too coarse,
    /// and holding at least as many records as `explained_by` (only the header's dtype
    /// rules them out; `to_separate` says what to record to tell them apart).
    pub not_excluded: Vec<Candidate>,
    /// What to record to tell apart the candidates that fit (empty: they are told
    /// apart, or one fits).
    pub to_separate: Vec<String>,
    /// The diagnosis in words.
    pub summary: String,
}

/// The largest error over records `range` (0 when empty; NaN skipped).
fn max_over(errs: &[f64], range: std::ops::Range<usize>) -> f64 {
    errs[range]
        .iter()
        .copied()
        .filter(|e| !e.is_nan())
        .fold(0.0, f64::max)
}

/// The fit of every candidate and the diagnosis. `absorption`, `stops`: each
/// candidate's; `frozen[k]`: the external's trained parameter is bitwise unchanged from
/// record k - 1 to k; `moved[c][k]`: candidate c's changed.
pub fn attribute(
    errs: &Errors,
    absorption: &BTreeMap<Candidate, Absorption>,
    stops: &BTreeMap<Candidate, (u64, String)>,
    frozen: &[bool],
    moved: &BTreeMap<Candidate, Vec<bool>>,
) -> (Vec<Fit>, Diagnosis) {
    let records = errs.records();
    let mut fits = Vec::new();
    let mut envs = BTreeMap::new();
    for &c in errs.candidates.keys() {
        let env = errs.envelopes(c);
        let stop = errs.stopped_at.get(&c).copied().unwrap_or(records);
        let ratio = |k: usize, q: Quantity| {
            if k >= stop {
                f64::INFINITY
            } else {
                errs.external[&q][k] / (FACTOR * env[&q][k])
            }
        };
        let mut holds = records;
        let mut exit = None;
        let mut max_ratio: f64 = 0.0;
        for (k, &step) in errs.steps.iter().enumerate() {
            for &q in errs.external.keys().filter(|&&q| errs.has(q, k)) {
                let r = ratio(k, q);
                max_ratio = max_ratio.max(r);
                if r > 1.0 && exit.is_none() {
                    holds = k;
                    exit = Some(Exit {
                        step,
                        quantity: q,
                        rel_err: errs.external[&q][k],
                        limit: FACTOR * env[&q][k],
                    });
                }
            }
        }
        let coarse = coarse(errs, c, holds);
        let own_max = errs.candidates[&c]
            .iter()
            .map(|(&q, e)| (q, max_over(e, 0..stop)))
            .collect();
        fits.push(Fit {
            candidate: c,
            own_max,
            max_ratio,
            holds,
            exit,
            coarse,
            explains: false,
            absorption: absorption.get(&c).copied().unwrap_or_default(),
            stopped: stops.get(&c).cloned(),
        });
        envs.insert(c, env);
    }
    // within the header's dtype (the proof's too): the longest-holding candidates
    // that are not too coarse (or, if every one is, the longest-holding ones: the
    // external is more accurate than each)
    let own_dtype: Vec<&Fit> = fits
        .iter()
        .filter(|f| f.candidate.dtype() == errs.dtype)
        .collect();
    let fine: Vec<&Fit> = own_dtype
        .iter()
        .copied()
        .filter(|f| f.coarse.is_none())
        .collect();
    let more_accurate = fine.is_empty();
    let pool: Vec<&Fit> = if more_accurate { own_dtype } else { fine };
    let best = pool.iter().map(|f| f.holds).max().unwrap_or(0);
    let chosen: Vec<Candidate> = pool
        .iter()
        .filter(|f| f.holds == best)
        .map(|f| f.candidate)
        .collect();
    let explains_all = best == records;
    for f in &mut fits {
        f.explains = explains_all && chosen.contains(&f.candidate);
    }
    // the other dtype's candidates the records themselves do not exclude
    let not_excluded: Vec<Candidate> = fits
        .iter()
        .filter(|f| f.candidate.dtype() != errs.dtype && f.coarse.is_none())
        .filter(|f| f.holds > 0 && f.holds >= best)
        .map(|f| f.candidate)
        .collect();
    let explained_until = (best > 0).then(|| errs.steps[best - 1]);
    let departure = (!explains_all).then(|| departure(errs, &envs, &chosen, best, frozen, moved));
    let to_separate = to_separate(errs, &chosen, &not_excluded, best);
    let summary = summary(
        errs,
        &Told {
            chosen: &chosen,
            until: explained_until,
            departure: departure.as_ref(),
            more_accurate,
            not_excluded: &not_excluded,
            not_excluded_holds: not_excluded
                .iter()
                .map(|c| {
                    fits.iter()
                        .find(|f| f.candidate == *c)
                        .map_or(0, |f| f.holds)
                })
                .collect(),
            to_separate: &to_separate,
        },
        &fits,
    );
    (
        fits,
        Diagnosis {
            explained_by: chosen,
            explained_until,
            departure,
            more_accurate,
            not_excluded,
            to_separate,
            summary,
        },
    )
}

/// What the summary tells besides the fits.
struct Told<'a> {
    chosen: &'a [Candidate],
    until: Option<u64>,
    departure: Option<&'a Departure>,
    more_accurate: bool,
    not_excluded: &'a [Candidate],
    /// The records each of `not_excluded` holds (the same order).
    not_excluded_holds: Vec<usize>,
    to_separate: &'a [String],
}

/// What to record to tell apart the candidates that fit the first `best` records:
/// both formulations (they differ first in dL/dq, where the attention saturates), or
/// the header's dtype and the other where nothing recorded is inexact at the first
/// record (a vector quantity inexact from step 0 on, such as the outputs or the
/// attention, whose float64 values are far more accurate than float32 rounding).
fn to_separate(
    errs: &Errors,
    chosen: &[Candidate],
    not_excluded: &[Candidate],
    best: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    let stable = |c: &&Candidate| c.formulation() == crate::config::Formulation::Stable;
    if chosen.iter().any(|c| stable(&c)) && !chosen.iter().all(|c| stable(&c)) {
        let gap = errs.gaps[..best.max(1).min(errs.gaps.len())]
            .iter()
            .copied()
            .fold(0.0, f64::max);
        out.push(if errs.external.contains_key(&Quantity::GradQ) {
            format!(
                "the softmax gradient's formulations: they differ where the attention saturates, and the largest score gap of the records they explain is {gap:.1}: no record of these separates the two (a run whose scores saturate does)"
            )
        } else {
            format!(
                "the softmax gradient's formulations: record grad_q (they differ in it first, where the attention saturates; the largest score gap of the records they explain is {gap:.1})"
            )
        });
    }
    // nothing recorded at the first record is inexact (a vector: p(0) = 0, W(0)): the
    // records cannot tell the dtypes apart, an output or the attention there can
    let inexact0 = errs
        .external
        .iter()
        .any(|(q, e)| errs.entries[q] >= 2 && e.first().is_some_and(|&x| x > errs.zero_level));
    if !not_excluded.is_empty() && !inexact0 {
        let other = not_excluded[0].dtype().name();
        out.push(format!(
            "{} and {other} rounding: record `output` or `attention` from step 0 on (inexact there; a {} value is far more accurate than {} rounding)",
            errs.dtype.name(),
            Dtype::Float64.name(),
            Dtype::Float32.name()
        ));
    }
    out
}

/// The departure at record `k` from the candidates `chosen` (`frozen`, `moved`: as
/// [`attribute`]'s).
fn departure(
    errs: &Errors,
    envs: &BTreeMap<Candidate, BTreeMap<Quantity, Vec<f64>>>,
    chosen: &[Candidate],
    k: usize,
    frozen: &[bool],
    moved: &BTreeMap<Candidate, Vec<bool>>,
) -> Departure {
    // per quantity: the external's error over the widest limit among the chosen
    let widest = |q: Quantity| {
        chosen
            .iter()
            .map(|c| FACTOR * envs[c][&q][k])
            .filter(|l| !l.is_nan())
            .fold(0.0, f64::max)
    };
    let ratio = |q: Quantity| errs.external[&q][k] / widest(q);
    // the quantities recorded at record k
    let here: Vec<Quantity> = errs
        .external
        .keys()
        .copied()
        .filter(|&q| errs.has(q, k))
        .collect();
    let quantities: Vec<Quantity> = here.iter().copied().filter(|&q| ratio(q) > 1.0).collect();
    let quantity = quantities.first().copied().unwrap_or_else(|| {
        *here
            .iter()
            .max_by(|a, b| ratio(**a).total_cmp(&ratio(**b)))
            .expect("at least one quantity at every record")
    });
    let rel_err = errs.external[&quantity][k];
    let updates = if quantities.is_empty() {
        errs.updates_of(k, &[quantity])
    } else {
        errs.updates_of(k, &quantities)
    };
    let nonfinite = errs
        .nonfinite
        .get(&quantity)
        .and_then(|v| v.get(k))
        .copied()
        .unwrap_or(false);
    let cause = if nonfinite {
        Cause::NonFinite
    } else if updates.is_none() {
        Cause::WrongData
    } else {
        Cause::WrongModel
    };
    let lost = k > 0
        && frozen.get(k).copied().unwrap_or(false)
        && chosen.iter().all(|c| {
            moved
                .get(c)
                .and_then(|m| m.get(k))
                .copied()
                .unwrap_or(false)
        });
    let located = match cause {
        Cause::NonFinite => Located::Unexplained,
        _ if lost => Located::LostUpdates,
        _ => {
            // the same test at another record j (None: no candidate's limit there)
            let outside_at = |q: Quantity, j: usize| {
                let lim = chosen
                    .iter()
                    .map(|c| FACTOR * envs[c][&q][j])
                    .filter(|l| !l.is_nan())
                    .fold(0.0, f64::max);
                (lim > 0.0).then(|| errs.external[&q][j] > lim)
            };
            locate(errs, k, &|q| ratio(q) > 1.0, &outside_at, widest)
        }
    };
    Departure {
        cause,
        located,
        step: errs.steps[k],
        updates,
        quantity,
        quantities,
        rel_err,
        limit: widest(quantity),
        score_gap: errs.gaps[k],
    }
}

/// Where the records locate a departure at record `k` ([`Located`]): `outside(q)` is
/// true where the external's `q` is outside the limits there, `limit(q)` the widest
/// limit. A quantity counts as right only where it is recorded at `k` and within.
///
/// A wrong parameter is named a wrong step or update only where its consequences are
/// wrong too: where the scores at the same step (computed from it) are recorded and
/// right, or its next record is right again (`outside_at(q, j)`: the test at record j,
/// `None` without a limit there), and nothing computed from it at this step is wrong,
/// it was stored otherwise or moved where the recorded quantities do not see it (both
/// told: the records do not tell them apart); with something computed from it wrong,
/// unexplained; where neither is recorded, the step or update is told with a storing
/// error beside it.
fn locate(
    errs: &Errors,
    k: usize,
    outside: &dyn Fn(Quantity) -> bool,
    outside_at: &dyn Fn(Quantity, usize) -> Option<bool>,
    limit: impl Fn(Quantity) -> f64,
) -> Located {
    use Quantity::{Attention, BK, BQ, GradQ, Loss, Output, P, Q, Rest, Scores, W, WK, WQ};
    let rec = |q: Quantity| errs.external.contains_key(&q) && errs.has(q, k);
    let wrong = |q: Quantity| rec(q) && outside(q);
    let right = |q: Quantity| rec(q) && !outside(q);
    // (the factorised blocks before the q they fix)
    let params = [P, WQ, WK, BQ, BK, Q, W];
    let factorised = !errs.q_inputs.is_empty();
    // the recorded parameter that fixes q (W^T p; W_K^T (W_Q p + b_Q) for
    // [factorised]) at this record, right
    let q_from = if right(Q) {
        Some(Q)
    } else if factorised {
        errs.q_inputs.iter().all(|&q| right(q)).then_some(WK)
    } else {
        match errs.mode {
            Mode::P if right(P) => Some(P),
            Mode::W if right(W) => Some(W),
            Mode::Joint if right(P) && right(W) => Some(W),
            _ => None,
        }
    };
    if let Some(&p) = params.iter().find(|&&q| wrong(q)) {
        if errs.steps[k] == 0 {
            return Located::InitialParameters { quantity: p };
        }
        // its consequences: the scores at this step, its next record
        // (q = W^T p is computed from p where W is fixed or right)
        let q_too = if factorised {
            errs.q_inputs.contains(&p)
        } else {
            p == P && errs.mode != Mode::W && !wrong(W)
        };
        let same = [Scores, Q]
            .into_iter()
            .filter(|&s| s != Q || q_too)
            .find(|&s| rec(s));
        let same_right = same.filter(|&s| !outside(s));
        let next = errs.external.get(&p).and_then(|_| {
            (k + 1..errs.records())
                .find(|&j| errs.has(p, j))
                .and_then(|j| outside_at(p, j).map(|o| (j, o)))
        });
        let right_again = next.filter(|&(_, o)| !o).map(|(j, _)| errs.steps[j]);
        let consistent = same.is_some_and(outside) || next.is_some_and(|(_, o)| o);
        // anything computed from the parameter at this step that is wrong
        let downstream_wrong = [Scores, Attention, Rest, Output, Loss, GradQ]
            .into_iter()
            .any(wrong)
            || (p != Q && wrong(Q));
        if same_right.is_some() || right_again.is_some() {
            if consistent || downstream_wrong {
                return Located::Unexplained;
            }
            return Located::StoredOtherwise {
                quantity: p,
                right_same_step: same_right,
                right_again,
            };
        }
        let stored_not_excluded = !consistent;
        // one update from a right record: is it a multiple of the truth's?
        let tq = errs.trained;
        let one_update = k > 0 && errs.steps[k - 1] + 1 == errs.steps[k];
        let before =
            |q: Quantity| one_update && errs.external.contains_key(&q) && errs.has(q, k - 1);
        if p == tq && before(tq) {
            let lim = limit(tq);
            if let Some(s) = errs.scaled[k].filter(|s| s.residual <= lim && s.scaling > lim) {
                // (a factorised block's gradient, e.g. u (dL/dq)^T, is not excluded
                // by a right dL/dq: it is not recorded)
                return Located::ScaledUpdate {
                    ratio: s.ratio,
                    gradient_right: before(GradQ) && !factorised,
                    stored_not_excluded,
                };
            }
            if before(GradQ) {
                return Located::Update {
                    stored_not_excluded,
                };
            }
        }
        return Located::Unexplained;
    }
    // the forward pass: the first wrong quantity after the last right one
    let chain: [(Quantity, &[Quantity]); 4] = [
        (Scores, &[]),
        (Attention, &[Scores]),
        (Rest, &[Scores]),
        (Output, &[Attention, Scores]),
    ];
    if let Some((q, before)) = chain.iter().find(|(q, _)| wrong(*q)) {
        let upstream = before.iter().copied().find(|&b| right(b)).or(q_from);
        return match upstream {
            Some(r) => Located::ForwardPass {
                right: r,
                wrong: *q,
            },
            None => Located::Unexplained,
        };
    }
    match (wrong(Loss), wrong(GradQ)) {
        (true, false) if right(Output) => Located::Loss,
        (false, true) if right(Output) && right(Attention) => Located::Gradient,
        (true, true) if right(Output) && right(Attention) => Located::LossAndGradient,
        _ => Located::Unexplained,
    }
}

/// What a departure's [`Located`] says, in words (`dep` at record `k`).
fn located_text(errs: &Errors, dep: &Departure, k: usize, chosen: &[Candidate]) -> String {
    let before = if k > 0 { errs.steps[k - 1] } else { 0 };
    let step = dep.step;
    let tq = errs.trained.name();
    match &dep.located {
        Located::InitialParameters { quantity } => format!(
            "the initial parameters: `{quantity}` at step 0 is not the data's (read or recorded otherwise)"
        ),
        Located::ForwardPass { right, wrong } => {
            // a stage that reads the data cannot be told from other data
            let part = match wrong {
                Quantity::Scores => "the scores x_t^T W^T p, or the data they read (X)",
                Quantity::Attention | Quantity::Rest => "the softmax",
                _ => "the outputs from the attention (the head), or the data it reads (X, nu)",
            };
            format!(
                "the forward pass ({part}): `{right}` is right at step {step} and `{wrong}`, computed from it, is not"
            )
        }
        Located::Loss => format!(
            "the loss, or the labels it reads: `output` is right at step {step} and `loss`, computed from it, is not"
        ),
        Located::Gradient => format!(
            "the gradient, or the data it reads (X): `attention` and `output` are right at step {step} and `grad_q`, computed from them, is not"
        ),
        Located::LossAndGradient => format!(
            "the loss and its gradient, or the data they read (X, labels): `attention` and `output` are right at step {step} and `loss` and `grad_q` are not"
        ),
        Located::ScaledUpdate {
            ratio,
            gradient_right,
            stored_not_excluded,
        } => {
            let scale = either(&errs.scales.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            let what = match (*ratio < 0.0, *gradient_right) {
                (true, true) => format!("the update's sign (`{tq}` and `grad_q` are right at step {before})"),
                (false, true) => format!("{scale} (`{tq}` and `grad_q` are right at step {before})"),
                (true, false) if !errs.q_inputs.is_empty() => format!(
                    "the sign of `{tq}`'s update or of its gradient (`{tq}` is right at step {before})"
                ),
                (true, false) => format!(
                    "the update's sign, or the gradient's (`{tq}` is right at step {before}; record grad_q to tell them apart)"
                ),
                (false, false) if !errs.q_inputs.is_empty() => match errs.gradient_factor {
                    Some(q) => format!(
                        "{scale} of `{tq}`, or a constant factor in `{tq}`'s gradient{q} (`{tq}` is right at step {before}; its gradient is not a recorded quantity)"
                    ),
                    None => format!("{scale} of `{tq}` (`{tq}` is right at step {before})"),
                },
                (false, false) => match errs.gradient_factor {
                    Some(q) => format!(
                        "{scale}, or a constant factor in the gradient{q} (`{tq}` is right at step {before}; record grad_q to tell them apart)"
                    ),
                    // Adam's update does not see a constant factor in the gradient
                    None => format!("{scale} (`{tq}` is right at step {before})"),
                },
            };
            format!(
                "{what}: the update from step {before} to {step} is {ratio:.6} times the truth's, to within what rounding explains{}",
                stored_text(*stored_not_excluded, tq, step)
            )
        }
        Located::Update {
            stored_not_excluded,
        } => format!(
            "the update: `{tq}` and `grad_q` are right at step {before} and `{tq}` is not at step {step} (the optimizer's step from them){}",
            stored_text(*stored_not_excluded, tq, step)
        ),
        Located::StoredOtherwise {
            quantity,
            right_same_step,
            right_again,
        } => {
            let mut why = Vec::new();
            if let Some(s) = right_same_step {
                why.push(format!("`{s}`, computed from it, is right at step {step}"));
            }
            if let Some(a) = right_again {
                why.push(format!("`{quantity}` is right again at step {a}"));
            }
            format!(
                "`{quantity}` at step {step} is outside while {}: `{quantity}` stored otherwise, or an update that moved `{quantity}` where the recorded quantities do not see it (the records do not tell them apart)",
                why.join(", and ")
            )
        }
        Located::LostUpdates => format!(
            "the external's trained parameter did not change from step {before} to {step} while the {} replay's did: updates were lost, not absorbed",
            chosen
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(" and ")
        ),
        Located::Unexplained if dep.updates.is_none() => "the cause is unexplained: the records do not exclude other data, initial parameters, head or forward pass, or a quantity computed or stored in another precision".into(),
        Located::Unexplained => "the cause is unexplained: the records do not exclude a wrong model or data (gradient, sign, step size, head), lost updates, a parameter stored otherwise, or a quantity computed or stored in another precision".into(),
    }
}

/// Beside a wrong step or update where nothing computed from the parameter is
/// recorded after it: the storing error the records do not exclude.
fn stored_text(not_excluded: bool, tq: &str, step: u64) -> String {
    if not_excluded {
        format!(
            "; or `{tq}` at step {step} stored otherwise (neither `scores` at step {step} nor a later `{tq}` is recorded to tell them apart)"
        )
    } else {
        String::new()
    }
}

/// An error for the summary: 4 significant digits, or "beyond f64's range" for an
/// infinite error of finite values (e.g. 1e308 where the truth is 1e-10).
fn error_text(e: f64) -> String {
    if e.is_infinite() {
        format!("beyond {:.1e} (f64's range)", f64::MAX)
    } else {
        format!("{e:.3e}")
    }
}

/// "a", "a or b", "a, b or c".
fn either(items: &[String]) -> String {
    match items {
        [] => "nothing".into(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// The diagnosis in words.
fn summary(errs: &Errors, t: &Told<'_>, fits: &[Fit]) -> String {
    let (chosen, until, departure) = (t.chosen, t.until, t.departure);
    let names: Vec<String> = chosen.iter().map(|c| c.describe().to_string()).collect();
    let who = either(&names);
    let apart = if chosen.len() > 1 {
        " (the records do not tell these apart)"
    } else {
        ""
    };
    let mut accuracy = if t.more_accurate {
        format!(
            "; the external is more accurate than every {} candidate (each is too coarse for it)",
            errs.dtype.name()
        )
    } else {
        String::new()
    };
    if !t.not_excluded.is_empty() {
        // each candidate with the records its own row of the table holds
        let reach = |h: usize| {
            if h == errs.records() {
                "the whole run".to_string()
            } else {
                format!("the records up to step {}", errs.steps[h.max(1) - 1])
            }
        };
        let same = t.not_excluded_holds.windows(2).all(|w| w[0] == w[1]);
        let fit = if same {
            let names: Vec<String> = t
                .not_excluded
                .iter()
                .map(|c| c.describe().to_string())
                .collect();
            format!(
                "{} also fit{} {}",
                either(&names),
                if names.len() == 1 { "s" } else { "" },
                reach(t.not_excluded_holds[0])
            )
        } else {
            let each: Vec<String> = t
                .not_excluded
                .iter()
                .zip(&t.not_excluded_holds)
                .map(|(c, &h)| format!("{} {}", c.describe(), reach(h)))
                .collect();
            format!("also fitting: {}", each.join(", "))
        };
        accuracy.push_str(&format!(
            "; {fit}: the records do not exclude {} (only the header's dtype {} does; if the run computed or stored a quantity in {}, its header is wrong)",
            if t.not_excluded.len() == 1 { "it" } else { "them" },
            errs.dtype.name(),
            t.not_excluded[0].dtype().name()
        ));
    }
    if !t.to_separate.is_empty() {
        accuracy.push_str(&format!("; to tell apart {}", t.to_separate.join("; and ")));
    }
    let accuracy = accuracy.as_str();
    // absorption is told where it explains records: before a departure, up to `until`
    let told = |s: u64| departure.is_none() || until.is_some_and(|u| s <= u);
    let absorbed: Vec<String> = fits
        .iter()
        .filter(|f| chosen.contains(&f.candidate))
        .filter_map(|f| {
            f.absorption.first_partial.filter(|&s| told(s)).map(|s| {
                format!(
                    "the {} replay absorbs updates from update {s}{}",
                    f.candidate,
                    f.absorption.first_total.map_or(String::new(), |t| format!(
                        " (every coordinate from update {t})"
                    ))
                )
            })
        })
        .collect();
    let absorbed = if absorbed.is_empty() {
        String::new()
    } else {
        format!("; {}", absorbed.join("; "))
    };
    let Some(dep) = departure else {
        return format!("explained by {who}{apart}{accuracy}{absorbed}");
    };
    let before = match until {
        Some(s) => format!("{who} explains the records up to step {s}{apart}{absorbed}; then "),
        None => String::new(),
    };
    let limit = if dep.limit > 0.0 && dep.rel_err.is_infinite() {
        format!(
            "beyond any multiple of the widest limit {:.2e} ({}x a replay's deviation)",
            dep.limit, FACTOR
        )
    } else if dep.limit > 0.0 && (dep.rel_err / dep.limit).is_infinite() {
        // the ratio is past f64's range (a finite error over a tiny limit): say so
        // rather than print "inf times"
        format!(
            "more than 1.8e308 times the widest limit {:.2e} ({}x a replay's deviation)",
            dep.limit, FACTOR
        )
    } else if dep.limit > 0.0 {
        format!(
            "{:.1e} times the widest limit {:.2e} ({}x a replay's deviation)",
            dep.rel_err / dep.limit,
            dep.limit,
            FACTOR
        )
    } else {
        "no candidate ran there".into()
    };
    let others: Vec<&str> = dep
        .quantities
        .iter()
        .filter(|q| **q != dep.quantity)
        .map(|q| q.name())
        .collect();
    let also = if others.is_empty() {
        String::new()
    } else {
        format!("; also outside: {}", others.join(", "))
    };
    let k = errs.steps.iter().position(|&s| s == dep.step).unwrap_or(0);
    let located = located_text(errs, dep, k, chosen);
    let head = match (dep.cause, dep.updates) {
        (Cause::NonFinite, _) => format!(
            "non-finite values at step {} in `{}` where the truth is finite",
            dep.step, dep.quantity
        ),
        (_, None) => format!(
            "not explained by {} rounding at step 0 (before any update), first in `{}`: error {}, {limit}{also}: {located}",
            errs.dtype.name(),
            dep.quantity,
            error_text(dep.rel_err)
        ),
        (_, Some((a, b))) => {
            let when = if a == b {
                format!("at update {b}")
            } else {
                format!("from an update between {a} and {b} (first seen at step {b})")
            };
            format!(
                "not explained by {} rounding {when}, first in `{}`: error {}, {limit}{also}: {located}",
                errs.dtype.name(),
                dep.quantity,
                error_text(dep.rel_err)
            )
        }
    };
    format!("{before}{head}{accuracy}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Errors of one quantity (p) at steps 0, 1, 2, 5: the external's, and the
    /// candidates' in report order (f64 stable, f64 naive, f32 stable, f32 naive), the
    /// header's dtype float64.
    fn errors(external: [f64; 4], cands: [[f64; 4]; 4]) -> Errors {
        quantities(Dtype::Float64, &[(Quantity::P, external, cands)])
    }

    /// One quantity's errors: the external's and the four candidates'.
    type Row4 = (Quantity, [f64; 4], [[f64; 4]; 4]);

    /// Errors of several quantities (each of 40 entries) under the header's `dtype`.
    fn quantities(dtype: Dtype, qs: &[Row4]) -> Errors {
        let mut external = BTreeMap::new();
        let mut candidates: BTreeMap<Candidate, BTreeMap<Quantity, Vec<f64>>> = BTreeMap::new();
        for (q, e, cands) in qs {
            external.insert(*q, e.to_vec());
            for (c, v) in Candidate::ALL.into_iter().zip(cands) {
                candidates.entry(c).or_default().insert(*q, v.to_vec());
            }
        }
        Errors {
            steps: vec![0, 1, 2, 5],
            gaps: vec![0.0; 4],
            nonfinite: external
                .iter()
                .map(|(q, e): (&Quantity, &Vec<f64>)| {
                    (*q, e.iter().map(|x| x.is_infinite()).collect())
                })
                .collect(),
            external,
            candidates,
            stopped_at: BTreeMap::new(),
            zero_level: 1e-60,
            entries: qs.iter().map(|(q, ..)| (*q, 40)).collect(),
            dtype,
            recorded: BTreeMap::new(),
            mode: Mode::P,
            q_inputs: Vec::new(),
            trained: Quantity::P,
            scaled: vec![None; 4],
            scales: vec!["the step size"],
            gradient_factor: Some(""),
        }
    }

    fn diagnose(e: &Errors) -> (Vec<Fit>, Diagnosis) {
        let moved = Candidate::ALL.map(|c| (c, vec![true; 4])).into();
        attribute(e, &BTreeMap::new(), &BTreeMap::new(), &[false; 4], &moved)
    }

    const F64: [f64; 4] = [0.0, 1e-16, 2e-16, 3e-16];
    const F32: [f64; 4] = [0.0, 1e-7, 1e-7, 2e-7];

    /// float64-sized errors are explained by both f64 replays (they do not differ here),
    /// the f32 replays being too coarse (the external is below their dtype's rounding);
    /// float32-sized ones by the f32 replays, having left the f64 ones at step 0.
    #[test]
    fn rounding_is_explained_by_its_dtype() {
        let (fits, d) = diagnose(&errors([0.0, 3e-16, 1e-16, 5e-16], [F64, F64, F32, F32]));
        assert_eq!(d.explained_by, [Candidate::F64Stable, Candidate::F64Naive]);
        assert!(d.departure.is_none() && !d.more_accurate);
        assert_eq!(
            fits[2].coarse.as_ref().unwrap().reason,
            Coarseness::BelowDtype
        );
        assert!(fits[0].explains && !fits[2].explains);
        let f32_run = |e| quantities(Dtype::Float32, &[(Quantity::P, e, [F64, F64, F32, F32])]);
        let (fits, d) = diagnose(&f32_run([1e-7, 3e-7, 1e-7, 4e-7]));
        assert_eq!(d.explained_by, [Candidate::F32Stable, Candidate::F32Naive]);
        assert_eq!(fits[0].holds, 0);
        assert_eq!(fits[0].exit.as_ref().unwrap().step, 0);
        assert!(d.not_excluded.is_empty(), "{}", d.summary);
    }

    /// Issue 27: a float64 run recording only p (exact at step 0: p(0) = 0) with a
    /// small fault (errors of 1e-9, far above float64 rounding, within 100x float32's)
    /// departs from the float64 candidates, the header's dtype, as the proof reads it;
    /// float32 rounding is not named as the cause but listed as fitting too (the
    /// records do not exclude it), with what to record to tell them apart. An exact
    /// vector quantity where the float32 replays are inexact (W(0)) excludes them.
    #[test]
    fn the_headers_dtype_is_judged_and_the_other_listed() {
        let small = [0.0, 1e-9, 2e-9, 5e-9];
        let (fits, d) = diagnose(&errors(small, [F64, F64, F32, F32]));
        assert!(
            d.explained_by.iter().all(|c| c.dtype() == Dtype::Float64),
            "{}",
            d.summary
        );
        let dep = d.departure.as_ref().expect("departs from float64 rounding");
        assert_eq!((dep.cause, dep.step), (Cause::WrongModel, 1));
        assert!(dep.limit < 1e-12, "the float64 limit: {}", dep.limit);
        assert_eq!(d.not_excluded, [Candidate::F32Stable, Candidate::F32Naive]);
        assert!(fits.iter().all(|f| !f.explains));
        assert!(
            d.summary.contains("not explained by float64 rounding"),
            "{}",
            d.summary
        );
        assert!(
            d.summary.contains("also fit the whole run"),
            "{}",
            d.summary
        );
        assert!(
            d.summary.contains("record `output` or `attention`"),
            "{}",
            d.summary
        );
        assert!(!d.summary.starts_with("explained by"), "{}", d.summary);
        // W exact at every record (p-mode: W(0) does not train), the f32 replays' not
        let exact = [0.0; 4];
        let rounded = [3e-8; 4];
        let e = quantities(
            Dtype::Float64,
            &[
                (Quantity::P, small, [F64, F64, F32, F32]),
                (Quantity::W, exact, [exact, exact, rounded, rounded]),
            ],
        );
        let (fits, d) = diagnose(&e);
        assert!(d.not_excluded.is_empty(), "{}", d.summary);
        let c = fits[2]
            .coarse
            .as_ref()
            .expect("f32 excluded by the exact W");
        assert_eq!(
            (c.reason, c.quantity, c.step),
            (Coarseness::Exact, Quantity::W, 0)
        );
        assert!(d.to_separate.iter().all(|t| !t.contains("float32")));
    }

    /// Issue 27: rest = 1 - max(s) (the naive form of 1 - s_top) with the stable
    /// gradient: rest follows the naive replay, p the stable one; each quantity is
    /// judged against either formulation's rest, so the stable replay explains the run
    /// (it was "a wrong model or data"), and a naive replay whose p errs far more than
    /// the external's is still too coarse.
    #[test]
    fn rest_does_not_couple_the_formulations() {
        let naive_p = [0.0, 1e-16, 1e-8, 2e-8];
        let naive_rest = [0.0, 1e-10, 1e-9, 1e-9];
        let e = quantities(
            Dtype::Float64,
            &[
                (Quantity::P, F64, [F64, naive_p, F32, F32]),
                (Quantity::Rest, naive_rest, [F64, naive_rest, F32, F32]),
            ],
        );
        let (fits, d) = diagnose(&e);
        assert_eq!(d.explained_by, [Candidate::F64Stable], "{}", d.summary);
        assert!(d.departure.is_none(), "{}", d.summary);
        let c = fits[1].coarse.as_ref().unwrap();
        assert_eq!((c.reason, c.quantity), (Coarseness::Larger, Quantity::P));
    }

    /// Issue 27: a finite external value whose error overflows f64 (p = 1e308) is a
    /// departure in the model, not "non-finite values"; a real infinity still is.
    #[test]
    fn a_huge_finite_value_is_not_non_finite() {
        let mut e = errors([0.0, f64::INFINITY, 0.0, 0.0], [F64, F64, F32, F32]);
        e.nonfinite.insert(Quantity::P, vec![false; 4]);
        let (_, d) = diagnose(&e);
        assert_eq!(d.departure.as_ref().unwrap().cause, Cause::WrongModel);
        assert!(!d.summary.contains("non-finite"), "{}", d.summary);
        assert!(d.summary.contains("f64's range"), "{}", d.summary);
    }

    /// W recorded at steps 0 and 5 only (records 0 and 3), p at all four: a deviation
    /// in W at step 5 dates from update 1 (W's previous record), not 3; the NaN
    /// placeholders where W is not recorded weigh nothing (no exit, no coarseness).
    #[test]
    fn a_sparse_quantity_departs_from_its_own_previous_record() {
        const F64: [f64; 4] = [1e-16; 4];
        const F32: [f64; 4] = [1e-7; 4];
        let nan = f64::NAN;
        let mut e = quantities(
            Dtype::Float64,
            &[
                (
                    Quantity::P,
                    [0.0, 1e-16, 1e-16, 1e-16],
                    [F64, F64, F32, F32],
                ),
                (
                    Quantity::W,
                    [0.0, nan, nan, 1e-9],
                    [
                        [1e-16, nan, nan, 1e-16],
                        [1e-16, nan, nan, 1e-16],
                        [1e-7, nan, nan, 1e-7],
                        [1e-7, nan, nan, 1e-7],
                    ],
                ),
            ],
        );
        e.recorded
            .insert(Quantity::W, vec![true, false, false, true]);
        let (_, d) = diagnose(&e);
        let dep = d.departure.unwrap();
        assert_eq!(
            (dep.cause, dep.step, dep.quantity, dep.updates),
            (Cause::WrongModel, 5, Quantity::W, Some((1, 5)))
        );
        assert_eq!(d.explained_until, Some(2));
        assert!(d.summary.contains("between 1 and 5"), "{}", d.summary);
        // without the fault: explained, the placeholders silent
        e.external.get_mut(&Quantity::W).unwrap()[3] = 1e-16;
        let (_, d) = diagnose(&e);
        assert!(d.departure.is_none(), "{}", d.summary);
    }

    /// A deviation FACTOR times beyond the envelope departs at its record, with the
    /// update range from the previous record; exactly at the limit it does not.
    #[test]
    fn departures_count_updates() {
        let limit = FACTOR * 2e-16;
        let (_, d) = diagnose(&errors([0.0, 1e-16, limit, 3e-16], [F64, F64, F32, F32]));
        assert!(d.departure.is_none(), "{}", d.summary);
        let (_, d) = diagnose(&errors([0.0, 1e-16, 1e-16, 1e-9], [F64, F64, F32, F32]));
        let dep = d.departure.unwrap();
        assert_eq!(
            (dep.cause, dep.step, dep.updates),
            (Cause::WrongModel, 5, Some((3, 5)))
        );
        assert_eq!(d.explained_until, Some(2));
        assert!(d.summary.contains("between 3 and 5"), "{}", d.summary);
        let (_, d) = diagnose(&errors([1e-9, 1e-16, 1e-16, 1e-16], [F64, F64, F32, F32]));
        let dep = d.departure.unwrap();
        assert_eq!((dep.cause, dep.updates), (Cause::WrongData, None));
        assert!(d.explained_by.iter().all(|c| c.dtype() == Dtype::Float64));
        let (_, d) = diagnose(&errors(
            [0.0, f64::INFINITY, 0.0, 0.0],
            [F64, F64, F32, F32],
        ));
        assert_eq!(d.departure.unwrap().cause, Cause::NonFinite);
    }

    /// A naive replay whose gradient errs far beyond the external's (saturation the
    /// external does not show) is too coarse: the stable replay alone explains the run;
    /// the other way round, the stable replay is left where the naive error appears.
    #[test]
    fn the_naive_formulation_is_told_apart() {
        let naive = [0.0, 1e-16, 1e-8, 2e-8];
        let (fits, d) = diagnose(&errors([0.0, 1e-16, 2e-16, 1e-16], [F64, naive, F32, F32]));
        assert_eq!(d.explained_by, [Candidate::F64Stable]);
        let c = fits[1].coarse.as_ref().unwrap();
        assert_eq!((c.reason, c.step), (Coarseness::Larger, 2));
        let (_, d) = diagnose(&errors([0.0, 1e-16, 3e-8, 1e-8], [F64, naive, F32, F32]));
        assert_eq!(d.explained_by, [Candidate::F64Naive]);
    }

    /// A saturated float32 run: after step 0 its attention rounds to one-hot and errs
    /// by 3e-15, far below 1e-3 u, as the f32 replays' own (the external is the
    /// f32-stable replay itself): not too coarse, explained by float32 rounding; a
    /// float64 run under the same header, 1e5 times below the replays, is more accurate.
    #[test]
    fn saturated_values_below_the_dtype_are_not_coarse() {
        let sat = [3e-8, 3e-15, 3e-15, 3e-15];
        let e = quantities(
            Dtype::Float32,
            &[(Quantity::Attention, sat, [F64, F64, sat, sat])],
        );
        let (fits, d) = diagnose(&e);
        assert!(fits[2].coarse.is_none() && fits[3].coarse.is_none());
        assert_eq!(d.explained_by, [Candidate::F32Stable, Candidate::F32Naive]);
        assert!(!d.more_accurate && d.departure.is_none(), "{}", d.summary);
        let e = quantities(
            Dtype::Float32,
            &[(
                Quantity::Attention,
                [3e-17, 3e-20, 3e-20, 3e-20],
                [F64, F64, sat, sat],
            )],
        );
        let (fits, d) = diagnose(&e);
        let c = fits[2].coarse.as_ref().unwrap();
        assert_eq!((c.reason, c.step), (Coarseness::BelowDtype, 0));
        assert!(d.more_accurate, "{}", d.summary);
    }

    /// A stopped candidate explains nothing from its stop on.
    #[test]
    fn a_stopped_candidate_holds_until_its_stop() {
        let mut e = quantities(
            Dtype::Float32,
            &[(Quantity::P, [1e-7, 3e-7, 1e-7, 4e-7], [F64, F64, F32, F32])],
        );
        e.stopped_at.insert(Candidate::F32Naive, 2);
        let (fits, d) = diagnose(&e);
        assert_eq!(fits[3].holds, 2);
        assert_eq!(d.explained_by, [Candidate::F32Stable]);
    }

    /// Issue 40 (item 4): each candidate the records do not exclude is told with the
    /// records its own row holds. Here the float64 replays hold step 0 only (the
    /// external's 1e-10 at step 1 is past them), the f32-stable replay the whole run and
    /// the f32-naive one steps 0-1 (it leaves at step 2): the summary said both "also
    /// fit the whole run", the table beside it showing f32-naive leave at step 2.
    #[test]
    fn each_not_excluded_candidate_is_told_its_own_reach() {
        let e = errors(
            [0.0, 1e-10, 1e-5, 1e-5],
            [F64, F64, [0.0, 1e-7, 1e-6, 1e-6], [0.0, 1e-8, 1e-8, 1e-8]],
        );
        let (fits, d) = diagnose(&e);
        assert_eq!(d.explained_until, Some(0));
        assert_eq!(d.not_excluded, [Candidate::F32Stable, Candidate::F32Naive]);
        assert_eq!((fits[2].holds, fits[3].holds), (4, 2));
        assert_eq!(fits[3].exit.as_ref().map(|x| x.step), Some(2));
        assert!(
            d.summary.contains(
                "also fitting: float32 rounding (stable softmax gradient) the whole run, float32 rounding with the naive softmax gradient the records up to step 1"
            ),
            "{}",
            d.summary
        );
    }
}
