//! Certified runs (SPEC section 11; proofs-notes/certify.md): the ball trainer encloses
//! the exact-arithmetic trajectory, and every reported quantity becomes an interval
//! `[lo, hi]` that contains the exact value, every reported decision a proved one or an
//! undecided one.
//!
//! The ball trainer ([`Ball`], the span step by default) runs through the one step loop
//! ([`drive`]) with an observer. At every forward pass the observer checks the
//! training decisions (each sample's top token: decided, a proved tie or undecided; each
//! prediction sign: proved or undecided), adds the Definition 4.1 scores to ball sums,
//! and measures the radii; at each checkpoint of [`record::schedule`] it records every
//! quantity of a trajectory checkpoint as an interval (loss, accuracies, norms, mean
//! attention and selection shares per clean and noisy samples, the cumulative sums, and
//! per training sample f, 1 - s_top, the score gap, S_i and the group masses) and
//! evaluates the test set (its prediction signs).
//!
//! An accuracy is the interval `[proved correct / n, (n - proved wrong) / n]`: a single
//! value (certified) when every sign is decided. A selection share of a group is
//! `[decided in the group / n, (decided in the group + undecided) / n]`. A tie (the top
//! score proved EQUAL to another, as at step 0 where p(0) = 0 makes every score exactly
//! 0) is a decision: no token is selected; it never makes a certificate undecided.
//!
//! The certificate decides when every decision of the final checkpoint is proved
//! (training top tokens and signs, test signs). With [`Prec::Auto`] the run is repeated
//! at 128, 256, 512 and 1024 bits until it decides.

use serde::{Deserialize, Serialize};

use crate::arith::{Arith, Ball, BallReal, DEFAULT_BALL_PREC, Kind, Mag};
use crate::config::{Config, Formulation, Group, Method};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::io::trajectory::{
    ByNoise, ClassMetrics, ClassSelection, Cumulative, PerGroup, SelectionShare, TrainerInfo,
};
use crate::model::caps::{Capability, require};
use crate::model::{AnyModel, Model, Selection};
use crate::train::drive::{Control, Event, drive};
use crate::train::{Trainer, check_memory, record, resolve_method};

/// Format tag of a certificate.
pub const FORMAT: &str = "tokensel-certificate/2";

/// The precisions `--prec auto` tries, in order (the last one is the cap).
pub const AUTO_PRECS: [u32; 4] = [128, 256, 512, 1024];

/// An f64 interval `[lo, hi]` that contains an exact value (the ends rounded outward);
/// serialised as a two-element array. Read back only as an interval: `lo <= hi`, neither
/// end NaN (a reversed or NaN interval is refused by every reader).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Interval(
    #[serde(with = "crate::io::nonfinite")] pub f64,
    #[serde(with = "crate::io::nonfinite")] pub f64,
);

impl<'de> Deserialize<'de> for Interval {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Interval, D::Error> {
        #[derive(Deserialize)]
        struct Ends(
            #[serde(with = "crate::io::nonfinite")] f64,
            #[serde(with = "crate::io::nonfinite")] f64,
        );
        let Ends(lo, hi) = Ends::deserialize(d)?;
        if !matches!(
            lo.partial_cmp(&hi),
            Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
        ) {
            return Err(serde::de::Error::custom(format!(
                "[{lo}, {hi}] is not an interval (its ends must be numbers with lo <= hi)"
            )));
        }
        Ok(Interval(lo, hi))
    }
}

impl crate::io::nonfinite::Value for Interval {
    fn put<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.serialize(s)
    }

    fn take<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Interval, D::Error> {
        Interval::deserialize(d)
    }
}

impl Interval {
    /// The enclosure of a ball, rounded outward to f64.
    pub fn of(ar: &Ball, x: &BallReal) -> Interval {
        let (lo, hi) = ar.enclose(x);
        Interval(lo, hi)
    }

    /// The interval of a known value.
    pub fn point(v: f64) -> Interval {
        Interval(v, v)
    }

    /// Lower end.
    pub fn lo(&self) -> f64 {
        self.0
    }

    /// Upper end.
    pub fn hi(&self) -> f64 {
        self.1
    }

    /// True when both ends are the same f64: the value is known to f64 precision (for
    /// a count, exactly).
    pub fn is_point(&self) -> bool {
        self.0 == self.1
    }

    /// The exact share `[count / n, (count + more) / n]` with its ends rounded OUTWARD
    /// to f64 (a count of 18 of 20 is `[0.8999999999999999, 0.9000000000000000222]`, which
    /// contains the exact 0.9; the ends are points only where the quotient is an f64:
    /// `0/n`, `n/n`, `1/2`, ...). The exact counts are in [`Count`].
    fn share(count: usize, more: usize, n: usize) -> Interval {
        Interval(
            quotient(count, n, Direction::Down),
            quotient(count + more, n, Direction::Up),
        )
    }

    /// The intersection with `[lo, hi]`, the range a quantity has in the reals (a share,
    /// a norm, 1 - s_top): an enclosure of a value known to lie in `[lo, hi]`, intersected
    /// with it, still encloses it (an enclosure of 1 - s_top that underflowed, `[-5e-324,
    /// 5e-324]`, becomes `[0, 5e-324]`).
    pub fn within(self, lo: f64, hi: f64) -> Interval {
        Interval(self.0.max(lo), self.1.min(hi))
    }
}

/// Which way [`quotient`] rounds.
#[derive(Clone, Copy)]
enum Direction {
    Down,
    Up,
}

/// `a / b` for counts (`b > 0`, both below 2^53, so exact in f64), rounded down or up: the
/// correctly rounded quotient, moved by one f64 where it lies on the wrong side of the
/// exact value (the residual `q b - a`, exact by one fma, says which side).
fn quotient(a: usize, b: usize, dir: Direction) -> f64 {
    let (a, b) = (a as f64, b as f64);
    let q = a / b;
    let residual = q.mul_add(b, -a);
    match dir {
        Direction::Down if residual > 0.0 => q.next_down(),
        Direction::Up if residual < 0.0 => q.next_up(),
        _ => q,
    }
}

/// An exact count of samples: the proved number `lo`, the most it can be `hi` (the
/// undecided samples included), of `of` samples. A count is certified where `lo == hi`.
/// Read back only with `lo <= hi <= of` and `of >= 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "CountFields")]
pub struct Count {
    /// The proved count.
    pub lo: usize,
    /// The largest count the undecided samples allow.
    pub hi: usize,
    /// Of how many samples.
    pub of: usize,
}

/// A [`Count`] as read, before its check.
#[derive(Deserialize)]
struct CountFields {
    lo: usize,
    hi: usize,
    of: usize,
}

impl TryFrom<CountFields> for Count {
    type Error = String;

    fn try_from(c: CountFields) -> std::result::Result<Count, String> {
        if c.lo <= c.hi && c.hi <= c.of && c.of >= 1 {
            Ok(Count {
                lo: c.lo,
                hi: c.hi,
                of: c.of,
            })
        } else {
            Err(format!(
                "a count needs lo <= hi <= of and of >= 1 (lo {}, hi {}, of {})",
                c.lo, c.hi, c.of
            ))
        }
    }
}

impl Count {
    /// The path of the count behind a share's path in a certificate or a certified
    /// checkpoint (`train_accuracy` -> `train_correct`, `test_accuracy` -> `test_correct`,
    /// `selection/...` -> `selection_counts/...`), where `quantity` names one: a claim on
    /// the share is then decided on the exact fraction, not on its rounded interval.
    pub fn behind(quantity: &str) -> Option<String> {
        let path = quantity.trim_start_matches('/');
        let (head, rest) = path.split_once('/').unwrap_or((path, ""));
        let count = match head {
            "train_accuracy" => "train_correct",
            "test_accuracy" => "test_correct",
            "selection" => "selection_counts",
            _ => return None,
        };
        Some(match rest {
            "" => count.to_string(),
            _ => format!("{count}/{rest}"),
        })
    }

    /// True when the count is known exactly.
    pub fn is_exact(&self) -> bool {
        self.lo == self.hi
    }

    /// The share as an interval with ends rounded outward (`Interval::share`).
    pub fn share(&self) -> Interval {
        Interval::share(self.lo, self.hi - self.lo, self.of)
    }
}

impl crate::io::nonfinite::Value for Count {
    fn put<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.serialize(s)
    }

    fn take<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Count, D::Error> {
        Count::deserialize(d)
    }
}

impl std::fmt::Display for Count {
    /// `18/20`, or `[17, 18]/20` where the undecided samples leave it open.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = if self.is_exact() {
            format!("{}/{}", self.lo, self.of)
        } else {
            format!("[{}, {}]/{}", self.lo, self.hi, self.of)
        };
        f.pad(&text)
    }
}

impl std::fmt::Display for Interval {
    /// `v` for a point, `[lo, hi]` otherwise (in the formatter's precision).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let one = |v: f64, f: &mut std::fmt::Formatter<'_>| match f.precision() {
            Some(p) => write!(f, "{v:.p$}"),
            None => write!(f, "{v}"),
        };
        if self.is_point() {
            one(self.0, f)
        } else {
            f.write_str("[")?;
            one(self.0, f)?;
            f.write_str(", ")?;
            one(self.1, f)?;
            f.write_str("]")
        }
    }
}

/// The working precision of a certified run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prec {
    /// One run at this many bits.
    Bits(u32),
    /// [`AUTO_PRECS`] in turn until the final checkpoint decides everything.
    Auto,
}

impl Prec {
    /// The precisions to try.
    pub fn precs(self) -> Vec<u32> {
        match self {
            Prec::Bits(b) => vec![b],
            Prec::Auto => AUTO_PRECS.to_vec(),
        }
    }
}

impl Default for Prec {
    fn default() -> Self {
        Prec::Bits(DEFAULT_BALL_PREC)
    }
}

/// Options of [`certify`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Working precision.
    pub prec: Prec,
    /// The ball trainer's step: span (the default), direct (allowed, with a warning: its
    /// radii grow about x1.2 per step on the default data), or auto.
    pub method: Method,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            prec: Prec::default(),
            method: Method::Span,
        }
    }
}

impl Options {
    /// Check, before any work, that every run these options ask for is valid: each
    /// precision a ball precision, the span step with the stable formulation, and each
    /// ball trainer's state within the memory limit.
    pub fn check(&self, cfg: &Config) -> Result<()> {
        require(cfg, "certify", &[Capability::Certify])?;
        for prec in self.prec.precs() {
            Ball::new(prec)?;
            let method = self.resolved(cfg, prec);
            if method == Method::Span && cfg.formulation == Formulation::Naive {
                return Err(Error::config(
                    "method",
                    "the span step needs the stable formulation (use --method direct for \
                     the naive one)",
                ));
            }
            check_memory(cfg, Kind::Ball, prec, method)?;
        }
        Ok(())
    }

    /// The step the ball trainer takes at `prec` (`auto` resolved).
    pub fn resolved(&self, cfg: &Config, prec: u32) -> Method {
        resolve_method(cfg, cfg.formulation, Kind::Ball, prec, self.method)
    }

    /// A warning for the direct step (its radii grow exponentially), if it is taken.
    pub fn warning(&self, cfg: &Config) -> Option<String> {
        let prec = self.prec.precs()[0];
        (self.resolved(cfg, prec) == Method::Direct).then(|| DIRECT_WARNING.to_string())
    }
}

/// The note a certificate of a direct-step run carries (and `certify` prints).
pub const DIRECT_WARNING: &str = "the direct step with balls: its radii pass through |X| |X|^T \
     (no cancellation of independent noise) and grow about x1.2 per step on the default \
     data (proofs-notes/certify.md), so decisions become undecided after a few hundred steps \
     and the run stops with a non-finite radius near step 480; the span step (default) \
     multiplies by the exact Gram matrix instead";

/// A prediction (the sign of the binary f; a K-class model's argmax) against its label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The prediction is proved and equals the label.
    Correct,
    /// The prediction is proved and differs from the label (a proved zero f, or a proved
    /// tie of the largest K-class outputs, counts here).
    Wrong,
    /// The enclosure of f contains 0 (and is not the exact 0).
    Undecided,
}

impl Decision {
    /// The decision on outputs `f` against label `y` ([`Model::decide`]: the sign of the
    /// binary f; a K-class model's proved unique argmax, a proved tie counting wrong).
    fn of(ar: &Ball, model: &AnyModel, f: &[BallReal], y: i8) -> Decision {
        match model.decide(ar, f, y) {
            Some(true) => Decision::Correct,
            Some(false) => Decision::Wrong,
            None => Decision::Undecided,
        }
    }
}

/// A training sample's enclosures at a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleEnclosure {
    /// Output f (a K-class model's margin f_Y - max_{c != Y} f_c).
    pub f: Interval,
    /// A K-class model's outputs f_0, ..., f_{K-1} (absent for the binary model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Vec<Interval>>,
    /// Its sign against the observed label.
    pub prediction: Decision,
    /// The top token (of the midpoints; selected only where `selection` is decided).
    pub top: usize,
    /// Whether `top` is proved the unique largest score, a proved tie, or undecided.
    pub selection: Selection,
    /// Score gap z_top - max_{j != top} z_j.
    pub gap: Interval,
    /// 1 - s_top.
    pub rest: Interval,
    /// Attention mass of each group.
    pub mass: PerGroup<Interval>,
    /// Definition 4.1's S_i.
    pub selection_score: Interval,
}

/// Decision counts at one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Decisions {
    /// Training samples whose prediction sign is undecided.
    pub train_signs_undecided: usize,
    /// Training samples whose top token is undecided.
    pub tops_undecided: usize,
    /// Training samples whose top score is a proved tie (a decision).
    pub ties: usize,
    /// Test samples whose prediction sign is undecided (checkpoints only).
    pub test_signs_undecided: usize,
}

impl Decisions {
    /// True when nothing is undecided.
    pub fn all_decided(&self) -> bool {
        self.train_signs_undecided == 0
            && self.tops_undecided == 0
            && self.test_signs_undecided == 0
    }
}

/// Relative radii at one step: rad / |mid| componentwise for the positive quantities
/// (attention, 1 - s_top, the loss), normwise (largest radius / largest |mid|) for the
/// signed ones (scores, outputs, q), which cross zero; and the bits lost: the working
/// precision plus log2 of the largest of them, from 0 (the radii are the midpoints' own
/// rounding) to the precision (a relative radius of 1 or more, or an infinite one: no
/// bit is left). Each is rounded up to f64; one beyond f64's range (a ball around an
/// underflowed value, a radius past f64's exponents) is infinite, written `"inf"`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Radius {
    /// Training scores (normwise).
    #[serde(with = "crate::io::nonfinite")]
    pub scores: f64,
    /// Attention (componentwise).
    #[serde(with = "crate::io::nonfinite")]
    pub attention: f64,
    /// 1 - s_top (componentwise).
    #[serde(with = "crate::io::nonfinite")]
    pub rest: f64,
    /// Outputs f of the training samples (normwise).
    #[serde(with = "crate::io::nonfinite")]
    pub output: f64,
    /// The empirical risk.
    #[serde(with = "crate::io::nonfinite")]
    pub loss: f64,
    /// q = W^T p (normwise; checkpoints only).
    #[serde(with = "crate::io::nonfinite::option")]
    pub q: Option<f64>,
    /// The largest of the above.
    #[serde(with = "crate::io::nonfinite")]
    pub largest: f64,
    /// prec + log2(largest), between 0 and prec.
    pub bits_lost: f64,
}

/// Everything a trajectory checkpoint records, as enclosures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CertifiedCheckpoint {
    /// Number of gradient steps done.
    pub step: u64,
    /// Empirical risk.
    pub train_loss: Interval,
    /// Training accuracy: [proved correct / n, (n - proved wrong) / n], ends rounded
    /// outward.
    pub train_accuracy: Interval,
    /// The exact counts behind it: proved correct, at most correct, of n.
    pub train_correct: Count,
    /// Test accuracy (true labels), likewise.
    pub test_accuracy: Interval,
    /// The exact counts behind it.
    pub test_correct: Count,
    /// ||q||.
    pub q_norm: Interval,
    /// ||dL/dq||.
    pub grad_norm: Interval,
    /// Mean attention mass per group over clean and noisy samples.
    pub attention: ByNoise<PerGroup<Interval>>,
    /// Shares of clean and noisy samples whose top token is decided in each group, ties,
    /// or is undecided (a group's share counts the undecided samples in its upper end).
    pub selection: ByNoise<SelectionShare<Interval>>,
    /// The exact counts behind the shares.
    pub selection_counts: ByNoise<SelectionShare<Count>>,
    /// Cumulative Definition 4.1 sums up to this step.
    pub cumulative: Cumulative<Interval>,
    /// Decision counts.
    pub decisions: Decisions,
    /// Relative radii and bits lost.
    pub radius: Radius,
    /// Per training sample.
    pub samples: Vec<SampleEnclosure>,
    /// A K-class run's per-class metrics (`io::trajectory::ClassMetrics`) as intervals
    /// (absent for the binary model): each share `[proved / n, (proved + undecided) /
    /// n]` over the class's samples, the per-class mean S_i enclosed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<ClassMetrics<Interval>>,
    /// The run's direction against the attention SVM (`[direction]`), enclosed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<CertifiedDirection>,
}

/// A checkpoint's direction record (`io::trajectory::DirectionPoint`) as enclosures of
/// the exact run's values: theta_mm enters as balls around its exact rational
/// coordinates, the minimum and maximum over constraints as balls that enclose them
/// whatever the undecided orders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CertifiedDirection {
    /// 1 - corr(tau) (`None` at theta = theta0).
    pub one_minus_corr: Option<Interval>,
    /// ||theta||.
    pub norm: Interval,
    /// The normalised margin (`None` at theta = 0).
    pub margin: Option<Interval>,
    /// The support's deviation (`None` unless min m > 0 is proved).
    pub support_deviation: Option<Interval>,
    /// Training samples whose top token is proved to be alpha_i: proved, at most (the
    /// undecided ones added), of n.
    pub on_pattern: Count,
}

/// The first decision that was not proved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Undecided {
    /// The step.
    pub step: u64,
    /// What: "top token of training sample i", "sign of f of training sample i", "sign
    /// of f of test sample i".
    pub what: String,
}

/// Steps at which some training sample's top score was a proved tie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Ties {
    /// Number of such steps.
    pub steps: u64,
    /// The first.
    pub first: Option<u64>,
    /// The last.
    pub last: Option<u64>,
}

/// One run at one precision (`--prec auto` makes several).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Working precision.
    pub prec_bits: u32,
    /// The final checkpoint decided everything.
    pub decided: bool,
    /// The first undecided decision, if any.
    pub first_undecided: Option<Undecided>,
    /// Why the run stopped before its last step (a radius or value became non-finite;
    /// `--prec auto` then tries the next precision), if it did.
    #[serde(default)]
    pub stopped: Option<String>,
}

/// The certificate of `tokensel certify`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Certificate {
    /// Always [`FORMAT`].
    pub format: String,
    /// The ball trainer (kind `ball`, its precision, formulation and method).
    pub trainer: TrainerInfo,
    /// The run's config.
    pub config: Config,
    /// True when every decision of the final checkpoint is proved (training top tokens,
    /// where a proved tie counts as decided, and prediction signs; test signs).
    pub decided: bool,
    /// Final training accuracy, ends rounded outward (certified where `train_correct`
    /// is exact).
    pub train_accuracy: Interval,
    /// The exact counts behind it.
    pub train_correct: Count,
    /// Final test accuracy.
    pub test_accuracy: Interval,
    /// The exact counts behind it.
    pub test_correct: Count,
    /// Final selection shares.
    pub selection: ByNoise<SelectionShare<Interval>>,
    /// The exact counts behind them.
    pub selection_counts: ByNoise<SelectionShare<Count>>,
    /// The first decision not proved (training decisions at every step, test signs at
    /// the checkpoints).
    pub first_undecided: Option<Undecided>,
    /// Steps with a proved tie.
    pub ties: Ties,
    /// Largest relative radius over the run ([`Radius::largest`]; `"inf"` past f64's
    /// range).
    #[serde(with = "crate::io::nonfinite")]
    pub largest_rel_radius: f64,
    /// The step where it was reached.
    pub largest_at_step: u64,
    /// The bits lost there (0 to the precision).
    pub bits_lost: f64,
    /// The runs made (one unless `--prec auto`).
    pub attempts: Vec<Attempt>,
    /// Notes for the reader (the step-0 tie, the direct step's radii).
    pub notes: Vec<String>,
    /// Every checkpoint of the schedule.
    pub checkpoints: Vec<CertifiedCheckpoint>,
    /// What the checkpoints' direction intervals refer to: the attention SVM solution
    /// of the config's `[direction]` pattern, proved before the run (absent without
    /// that section).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<crate::model::token_selection::limit::LimitSummary>,
}

impl Certificate {
    /// The final checkpoint.
    pub fn last(&self) -> &CertifiedCheckpoint {
        self.checkpoints.last().expect("the schedule has step 0")
    }

    /// Read a certificate (`certificate.json`, `certify --json`) and check what a reader
    /// relies on: the format [`FORMAT`], at least one checkpoint, the run's description
    /// (see `check_run`: a ball trainer at a ball's precision, a valid config, every
    /// radius a non-negative number or infinity, every step named within the config's
    /// `steps`), checkpoint steps strictly increasing, a sample list of `n_train` entries
    /// each, the bits lost within 0..=prec (every interval is checked as it is read:
    /// [`Interval`], [`Count`]).
    pub fn from_json(text: &str, path: &std::path::Path) -> Result<Certificate> {
        let bad = |message: String| Error::Parse {
            what: "certificate",
            path: path.to_path_buf(),
            message,
        };
        #[derive(Deserialize)]
        struct Head {
            format: Option<serde_json::Value>,
        }
        let head: Head = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        match head.format.as_ref().and_then(|f| f.as_str()) {
            Some(FORMAT) => {}
            Some(other) => {
                return Err(bad(format!(
                    "format `{other}`: this tokensel reads `{FORMAT}`"
                )));
            }
            None => return Err(bad(format!("no `format` (expected `{FORMAT}`)"))),
        }
        let c: Certificate = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if c.checkpoints.is_empty() {
            return Err(bad("no checkpoint".into()));
        }
        c.check_run().map_err(bad)?;
        let prec = c.trainer.prec_bits as f64;
        let mut last = None;
        for k in &c.checkpoints {
            // (a step past the config's was refused by `check_run`)
            if last.is_some_and(|s| k.step <= s) {
                return Err(bad(format!(
                    "checkpoint steps must increase (step {})",
                    k.step
                )));
            }
            last = Some(k.step);
            if k.samples.len() != c.config.n_train {
                return Err(bad(format!(
                    "the checkpoint at step {} has {} samples, the config {}",
                    k.step,
                    k.samples.len(),
                    c.config.n_train
                )));
            }
            if !(0.0..=prec).contains(&k.radius.bits_lost) {
                return Err(bad(format!(
                    "bits lost {} at step {} outside 0..={prec}",
                    k.radius.bits_lost, k.step
                )));
            }
        }
        if !(0.0..=prec).contains(&c.bits_lost) {
            return Err(bad(format!("bits lost {} outside 0..={prec}", c.bits_lost)));
        }
        if c.direction.is_some() != c.config.direction.is_some()
            || c.checkpoints
                .iter()
                .any(|k| k.direction.is_some() != c.config.direction.is_some())
        {
            return Err(bad(
                "direction records and the config's [direction] section: one without the other"
                    .into(),
            ));
        }
        if let Some(d) = &c.direction {
            d.check(c.config.n_train, c.config.layout.tokens)
                .map_err(bad)?;
        }
        Ok(c)
    }
}

impl Certificate {
    /// The checks on what the certificate says of its run, whatever produced it (an
    /// edited file): the trainer is the ball arithmetic at
    /// [`MIN_BALL_PREC`](crate::arith::MIN_BALL_PREC)..=[`MAX_PREC`](crate::arith::MAX_PREC)
    /// bits (so is every attempt), the config is valid, every radius is a non-negative
    /// number or `"inf"` (never NaN), and every step it names (checkpoints, the largest
    /// radius, ties, the first undecided decision) is within the config's `steps`. The
    /// message names the offending field.
    fn check_run(&self) -> std::result::Result<(), String> {
        use crate::arith::{MAX_PREC, MIN_BALL_PREC};
        if self.trainer.kind != Kind::Ball {
            return Err(format!(
                "`trainer.kind` is `{}`: a certificate is made by the `ball` trainer",
                self.trainer.kind.name()
            ));
        }
        let precs = std::iter::once(("trainer.prec_bits".to_string(), self.trainer.prec_bits))
            .chain(
                self.attempts
                    .iter()
                    .enumerate()
                    .map(|(i, a)| (format!("attempts[{i}].prec_bits"), a.prec_bits)),
            );
        for (field, prec) in precs {
            if !(MIN_BALL_PREC..=MAX_PREC).contains(&prec) {
                return Err(format!(
                    "`{field}` {prec} is outside a ball's {MIN_BALL_PREC}..={MAX_PREC} bits"
                ));
            }
        }
        self.config
            .validate()
            .map_err(|e| format!("its `config` is not valid: {e}"))?;
        let radius = |field: String, r: f64| {
            if r.is_nan() || r < 0.0 {
                Err(format!(
                    "`{field}` is {r}: a radius is a non-negative number or \"inf\""
                ))
            } else {
                Ok(())
            }
        };
        radius("largest_rel_radius".into(), self.largest_rel_radius)?;
        for (i, k) in self.checkpoints.iter().enumerate() {
            let r = &k.radius;
            for (name, v) in [
                ("scores", Some(r.scores)),
                ("attention", Some(r.attention)),
                ("rest", Some(r.rest)),
                ("output", Some(r.output)),
                ("loss", Some(r.loss)),
                ("q", r.q),
                ("largest", Some(r.largest)),
            ] {
                if let Some(v) = v {
                    radius(format!("checkpoints[{i}].radius.{name}"), v)?;
                }
            }
            if r.bits_lost.is_nan() {
                return Err(format!("`checkpoints[{i}].radius.bits_lost` is NaN"));
            }
            r.check_consistent(self.trainer.prec_bits)
                .map_err(|e| format!("`checkpoints[{i}].radius.{e}"))?;
            if r.largest > self.largest_rel_radius {
                return Err(format!(
                    "`checkpoints[{i}].radius.largest` {:e} exceeds `largest_rel_radius` {:e} \
                     (the largest over every step)",
                    r.largest, self.largest_rel_radius
                ));
            }
        }
        let steps = self.config.steps;
        let mut named: Vec<(String, u64)> = self
            .checkpoints
            .iter()
            .enumerate()
            .map(|(i, k)| (format!("checkpoints[{i}].step"), k.step))
            .collect();
        named.push(("largest_at_step".into(), self.largest_at_step));
        named.extend(self.ties.first.map(|s| ("ties.first".to_string(), s)));
        named.extend(self.ties.last.map(|s| ("ties.last".to_string(), s)));
        named.extend(
            self.first_undecided
                .as_ref()
                .map(|u| ("first_undecided.step".to_string(), u.step)),
        );
        for (i, a) in self.attempts.iter().enumerate() {
            named.extend(
                a.first_undecided
                    .as_ref()
                    .map(|u| (format!("attempts[{i}].first_undecided.step"), u.step)),
            );
        }
        for (field, step) in named {
            if step > steps {
                return Err(format!(
                    "`{field}` {step} is past the run's {steps} steps (`config.steps`)"
                ));
            }
        }
        Ok(())
    }
}

/// The bits lost of a relative radius `rel` at `prec` bits, as an f64 (`plot`'s per
/// quantity curves): prec + log2(rel) within 0..=prec, `prec` for a relative radius of
/// 1 or more or an infinite one (as [`Radius::bits_lost`]).
pub fn bits_lost_of(prec: u32, rel: f64) -> f64 {
    let p = prec as f64;
    if rel.is_nan() || rel >= 1.0 {
        return p;
    }
    if rel <= 0.0 {
        return 0.0;
    }
    (p + core_math::log2(rel)).clamp(0.0, p)
}

impl Radius {
    /// `largest` is the largest of the parts and `bits_lost` its bits of `prec`: both are
    /// derived from the parts when the certificate is written (`radius`), so a reader
    /// refuses a certificate where they disagree. `bits_lost` comes from the exact radius
    /// and `largest` is that radius rounded up to f64 (exact for a 32-bit mantissa inside
    /// f64's normal range): within that range the two agree to 1e-9 bits (the logarithms'
    /// rounding is ~1e-13); below it `largest` only bounds it (`bits_lost` is at most
    /// what `largest` gives). The error names the field after `radius.`.
    fn check_consistent(&self, prec: u32) -> std::result::Result<(), String> {
        let parts = [
            self.scores,
            self.attention,
            self.rest,
            self.output,
            self.loss,
        ];
        // (NaN was refused before this check)
        let max = parts.into_iter().chain(self.q).fold(0.0, f64::max);
        if self.largest != max {
            return Err(format!(
                "largest` is {:e} but the largest of the radii beside it is {max:e}",
                self.largest
            ));
        }
        let want = bits_lost_of(prec, self.largest);
        let tol = 1e-9;
        let normal = self.largest >= f64::MIN_POSITIVE || self.largest == 0.0;
        if self.bits_lost > want + tol || (normal && self.bits_lost < want - tol) {
            return Err(format!(
                "bits_lost` is {} but `largest` {:e} at {prec} bits gives {want}",
                self.bits_lost, self.largest
            ));
        }
        Ok(())
    }
}

/// The largest componentwise relative radius rad / |mid| (an exact zero counts 0, a
/// ball around 0 infinity).
fn componentwise<'a>(xs: impl Iterator<Item = &'a BallReal>) -> Mag {
    xs.fold(Mag::ZERO, |m, x| {
        m.max(x.rad().div_up(Mag::of_float_lower(x.mid())))
    })
}

/// The normwise relative radius max rad / max |mid|.
fn normwise<'a>(xs: impl Iterator<Item = &'a BallReal>) -> Mag {
    let (r, m) = xs.fold((Mag::ZERO, Mag::ZERO), |(r, m), x| {
        (r.max(x.rad()), m.max(Mag::of_float_lower(x.mid())))
    });
    r.div_up(m)
}

/// prec + log2(rel) (MPFR's correctly rounded log2), between 0 and prec: a relative
/// radius of 1 or more (or an infinite one, or one past MPFR's exponents) has lost every
/// bit of the precision.
fn bits_lost(prec: u32, rel: Mag) -> f64 {
    if rel.is_zero() {
        return 0.0;
    }
    let l = rel.to_float(64).log2().to_f64();
    if !l.is_finite() || l >= 0.0 {
        return prec as f64;
    }
    (prec as f64 + l).clamp(0.0, prec as f64)
}

/// The relative radii of a ball trainer's last forward pass (q: at checkpoints), and
/// the largest as a bound.
fn radius(tr: &Trainer<'_, Ball>, q: Option<&[BallReal]>) -> (Radius, Mag) {
    let prec = tr.ar.prec();
    let parts = [
        normwise(tr.scores.iter()),
        componentwise(tr.attention.iter()),
        componentwise(tr.samples.iter().map(|s| &s.softmax.rest)),
        // the binary f; a K-class model's margin and its K outputs
        normwise(
            tr.samples
                .iter()
                .flat_map(|s| std::iter::once(&s.f).chain(&s.outputs)),
        ),
        componentwise(std::iter::once(&tr.loss)),
    ];
    let q = q.map(|q| normwise(q.iter()));
    let largest = parts
        .iter()
        .chain(q.iter())
        .fold(Mag::ZERO, |m, r| m.max(*r));
    let r = Radius {
        scores: parts[0].to_f64_up(),
        attention: parts[1].to_f64_up(),
        rest: parts[2].to_f64_up(),
        output: parts[3].to_f64_up(),
        loss: parts[4].to_f64_up(),
        q: q.map(Mag::to_f64_up),
        largest: largest.to_f64_up(),
        bits_lost: bits_lost(prec, largest),
    };
    (r, largest)
}

/// The ball sum of `xs` divided by their count (`None` for no values).
fn mean<'a>(ar: &Ball, xs: impl Iterator<Item = &'a BallReal>) -> Option<BallReal> {
    let mut sum = ar.zero();
    let mut n = 0usize;
    for x in xs {
        ar.add(&mut sum, x);
        n += 1;
    }
    (n > 0).then(|| {
        ar.div_f64(&mut sum, n as f64);
        sum
    })
}

/// What the observer keeps between steps.
struct Observer {
    schedule: Vec<u64>,
    /// Ball sums of S_i per set (clean, noisy, class +1, class -1).
    cumulative: [BallReal; 4],
    first_undecided: Option<Undecided>,
    ties: Ties,
    largest: (Mag, u64),
    checkpoints: Vec<CertifiedCheckpoint>,
}

impl Observer {
    fn new(ar: &Ball, cfg: &Config) -> Observer {
        Observer {
            schedule: record::schedule(cfg.steps, cfg.record.checkpoints_per_decade),
            cumulative: std::array::from_fn(|_| ar.zero()),
            first_undecided: None,
            ties: Ties::default(),
            largest: (Mag::ZERO, 0),
            checkpoints: Vec::new(),
        }
    }

    fn undecided(&mut self, step: u64, what: impl FnOnce() -> String) {
        if self.first_undecided.is_none() {
            self.first_undecided = Some(Undecided { step, what: what() });
        }
    }

    /// Observe the forward pass at `tr.step`.
    fn forward(&mut self, tr: &Trainer<'_, Ball>) {
        let ar = tr.ar;
        let step = tr.step;
        let (y, y_true) = (&tr.data.train.y, &tr.data.train.y_true);
        // training decisions at every step
        let mut decisions = Decisions::default();
        let predictions: Vec<Decision> = tr
            .samples
            .iter()
            .zip(y)
            .map(|(s, yi)| Decision::of(&ar, &tr.model, s.model_outputs(), *yi))
            .collect();
        for (i, (s, p)) in tr.samples.iter().zip(&predictions).enumerate() {
            match s.softmax.selection {
                Selection::Undecided => {
                    decisions.tops_undecided += 1;
                    self.undecided(step, || format!("top token of training sample {i}"));
                }
                Selection::Tie => decisions.ties += 1,
                Selection::Decided => {}
            }
            if *p == Decision::Undecided {
                decisions.train_signs_undecided += 1;
                let what = prediction_name(tr.cfg);
                self.undecided(step, || format!("{what} of training sample {i}"));
            }
        }
        if decisions.ties > 0 {
            self.ties.steps += 1;
            self.ties.first.get_or_insert(step);
            self.ties.last = Some(step);
        }
        // Definition 4.1 sums (ball sums over the steps so far)
        let scores = tr.selection_score_values();
        let first = tr.cfg.model.first_label();
        for ((si, yi), ti) in scores.iter().zip(y).zip(y_true) {
            let set = if yi == ti { 0 } else { 1 };
            let class = if *ti == first { 2 } else { 3 };
            ar.add(&mut self.cumulative[set], si);
            ar.add(&mut self.cumulative[class], si);
        }
        let at_checkpoint = self.schedule.binary_search(&step).is_ok();
        let q = at_checkpoint.then(|| tr.q());
        let (rad, largest) = radius(tr, q.as_deref());
        if largest.cmp_value(self.largest.0) == std::cmp::Ordering::Greater {
            self.largest = (largest, step);
        }
        if let Some(q) = q {
            let c = self.checkpoint(tr, &q, &scores, &predictions, decisions, rad);
            self.checkpoints.push(c);
        }
    }

    /// The checkpoint of the forward pass at `tr.step`.
    fn checkpoint(
        &mut self,
        tr: &Trainer<'_, Ball>,
        q: &[BallReal],
        scores: &[BallReal],
        predictions: &[Decision],
        mut decisions: Decisions,
        radius: Radius,
    ) -> CertifiedCheckpoint {
        let ar = tr.ar;
        let step = tr.step;
        let iv = |x: &BallReal| Interval::of(&ar, x);
        // a quantity that lies in [0, 1] in the reals (1 - s_top, attention masses)
        let share = |x: &BallReal| iv(x).within(0.0, 1.0);
        let (y, y_true) = (&tr.data.train.y, &tr.data.train.y_true);
        let groups = &tr.data.groups;
        let n = tr.samples.len();
        let masses: Vec<[BallReal; 4]> = (0..n).map(|i| tr.group_mass(i)).collect();
        let samples: Vec<SampleEnclosure> = tr
            .samples
            .iter()
            .enumerate()
            .map(|(i, s)| SampleEnclosure {
                f: iv(&s.f),
                outputs: (!s.outputs.is_empty()).then(|| s.outputs.iter().map(iv).collect()),
                prediction: predictions[i],
                top: s.softmax.top,
                selection: s.softmax.selection,
                gap: iv(&s.softmax.gap),
                rest: share(&s.softmax.rest),
                mass: PerGroup::from_array(std::array::from_fn(|g| share(&masses[i][g]))),
                selection_score: iv(&scores[i]).within(0.0, 0.25),
            })
            .collect();
        // the test set
        let f_test = tr.test_outputs(Some(q));
        let test: Vec<Decision> = f_test
            .chunks(tr.model.outputs())
            .zip(&tr.data.test.y_true)
            .map(|(f, y)| Decision::of(&ar, &tr.model, f, *y))
            .collect();
        for (i, d) in test.iter().enumerate() {
            if *d == Decision::Undecided {
                decisions.test_signs_undecided += 1;
                let what = prediction_name(tr.cfg);
                self.undecided(step, || format!("{what} of test sample {i}"));
            }
        }
        let correct = |ds: &[Decision]| {
            let count = |want| ds.iter().filter(|d| **d == want).count();
            let (correct, wrong) = (count(Decision::Correct), count(Decision::Wrong));
            Count {
                lo: correct,
                hi: ds.len() - wrong,
                of: ds.len(),
            }
        };
        let (train_correct, test_correct) = (correct(predictions), correct(&test));
        let norm = |v: &[BallReal]| {
            let mut s = ar.zero();
            ar.dot(v, v, &mut s);
            ar.sqrt(&mut s);
            iv(&s).within(0.0, f64::INFINITY)
        };
        let noisy = |i: usize| y[i] != y_true[i];
        let by_noise = |want_noisy: bool| (0..n).filter(move |i| noisy(*i) == want_noisy);
        let attention = |want_noisy: bool| {
            let per: Vec<Option<BallReal>> = (0..4)
                .map(|g| mean(&ar, by_noise(want_noisy).map(|i| &masses[i][g])))
                .collect();
            per[0].is_some().then(|| {
                PerGroup::from_array(std::array::from_fn(|g| {
                    share(per[g].as_ref().expect("same set"))
                }))
            })
        };
        let selection = |want_noisy: bool| {
            let set: Vec<usize> = by_noise(want_noisy).collect();
            (!set.is_empty()).then(|| counts_of(&samples, &set, groups))
        };
        let selection_counts = ByNoise {
            clean: selection(false),
            noisy: selection(true),
        };
        let sum = |k: usize| iv(&self.cumulative[k]).within(0.0, f64::INFINITY);
        let classes = tr
            .cfg
            .model
            .is_multiclass()
            .then(|| class_metrics(tr, &samples, &f_test, scores));
        CertifiedCheckpoint {
            step,
            train_loss: iv(&tr.loss).within(0.0, f64::INFINITY),
            train_accuracy: train_correct.share(),
            train_correct,
            test_accuracy: test_correct.share(),
            test_correct,
            q_norm: norm(q),
            grad_norm: norm(&tr.grad_q()),
            attention: ByNoise {
                clean: attention(false),
                noisy: attention(true),
            },
            selection: selection_counts
                .map(|c| SelectionShare::from_array(c.to_array().map(|k| k.share()))),
            selection_counts,
            cumulative: Cumulative {
                clean: sum(0),
                noisy: sum(1),
                class_pos: sum(2),
                class_neg: sum(3),
            },
            decisions,
            radius,
            classes,
            direction: tr.direction_values(q).map(|v| {
                let undecided = tr
                    .samples
                    .iter()
                    .filter(|s| s.softmax.selection == Selection::Undecided)
                    .count();
                CertifiedDirection {
                    one_minus_corr: v.one_minus_corr.as_ref().map(|x| iv(x).within(0.0, 2.0)),
                    norm: iv(&v.norm).within(0.0, f64::INFINITY),
                    margin: v.margin.as_ref().map(iv),
                    support_deviation: v
                        .support_deviation
                        .as_ref()
                        .map(|x| iv(x).within(0.0, f64::INFINITY)),
                    on_pattern: Count {
                        lo: v.on_pattern,
                        hi: v.on_pattern + undecided,
                        of: n,
                    },
                }
            }),
            samples,
        }
    }
}

/// A K-class run's [`ClassMetrics`] as intervals (the f64 recorder's
/// `Trainer::class_metrics` over proved counts): a per-class accuracy is `[proved
/// correct / n_c, (proved correct + undecided) / n_c]` (an argmax proved unique and equal
/// to the label is correct; a proved tie is not), the test set's tie share `[ties / n,
/// (ties + undecided) / n]` and its undecided share `[undecided / n, undecided / n]` (the
/// certificate's own count, as [`SelectionShare::undecided`]); the selection slots over
/// clean and noisy samples as the binary selection counts (a decided top token in its
/// slot, the undecided ones in every slot's upper end); the per-class mean S_i the ball
/// mean of the class's samples, within [0, 1/4]. `samples` the checkpoint's enclosures,
/// `test_f` the test outputs (K per sample), `scores` the training S_i balls.
fn class_metrics(
    tr: &Trainer<'_, Ball>,
    samples: &[SampleEnclosure],
    test_f: &[BallReal],
    scores: &[BallReal],
) -> ClassMetrics<Interval> {
    use crate::model::multiclass::argmax_status;
    let ar = tr.ar;
    let k = tr.cfg.model.classes;
    let (y, y_true) = (&tr.data.train.y, &tr.data.train.y_true);
    // the share of the samples of each class (by `labels`) whose status is decided and
    // `hit`, plus the undecided ones in the upper end
    let per_class = |labels: &[i8], status: &[(usize, Selection)]| -> Vec<Option<Interval>> {
        (0..k)
            .map(|c| {
                let of: Vec<usize> = (0..labels.len())
                    .filter(|&i| labels[i] as usize == c)
                    .collect();
                let count = |want: Selection| {
                    of.iter()
                        .filter(|&&i| {
                            status[i].1 == want && (want != Selection::Decided || status[i].0 == c)
                        })
                        .count()
                };
                (!of.is_empty()).then(|| {
                    Interval::share(
                        count(Selection::Decided),
                        count(Selection::Undecided),
                        of.len(),
                    )
                })
            })
            .collect()
    };
    let train: Vec<(usize, Selection)> = tr
        .samples
        .iter()
        .map(|s| argmax_status(&ar, &s.outputs))
        .collect();
    let test: Vec<(usize, Selection)> = test_f.chunks(k).map(|f| argmax_status(&ar, f)).collect();
    let n_test = test.len();
    let test_count = |want: Selection| test.iter().filter(|p| p.1 == want).count();
    let test_undecided = test_count(Selection::Undecided);
    // each training sample's slot among ClassSelection's seven (`None`: undecided)
    let slot = |i: usize| -> Option<usize> {
        let s = &samples[i];
        match s.selection {
            Selection::Tie => Some(5),
            Selection::Undecided => None,
            Selection::Decided => Some(match tr.data.groups[s.top] {
                Group::R => 0,
                Group::WSame => 1,
                Group::I => 4,
                Group::WOpposite => match crate::data::class_of_token(tr.cfg, y_true[i], s.top) {
                    Some(c) if c == y[i] as usize => 2,
                    _ => 3,
                },
            }),
        }
    };
    let selection = |want_noisy: bool| {
        let set: Vec<usize> = (0..samples.len())
            .filter(|&i| (y[i] != y_true[i]) == want_noisy)
            .collect();
        (!set.is_empty()).then(|| {
            let mut decided = [0usize; 7];
            let mut undecided = 0usize;
            for &i in &set {
                match slot(i) {
                    Some(j) => decided[j] += 1,
                    None => undecided += 1,
                }
            }
            let mut shares: [Interval; 7] =
                std::array::from_fn(|j| Interval::share(decided[j], undecided, set.len()));
            shares[6] = Interval::share(undecided, 0, set.len());
            ClassSelection::from_array(shares)
        })
    };
    let selection_score = (0..k)
        .map(|c| {
            mean(
                &ar,
                (0..y_true.len())
                    .filter(|&i| y_true[i] as usize == c)
                    .map(|i| &scores[i]),
            )
            .map(|m| Interval::of(&ar, &m).within(0.0, 0.25))
        })
        .collect();
    ClassMetrics {
        train_accuracy: per_class(y, &train),
        test_accuracy: per_class(&tr.data.test.y_true, &test),
        test_tie: Interval::share(test_count(Selection::Tie), test_undecided, n_test),
        test_undecided: Interval::share(test_undecided, 0, n_test),
        selection: ByNoise {
            clean: selection(false),
            noisy: selection(true),
        },
        selection_score,
    }
}

/// What a prediction is called in `cfg`'s model: "sign of f" (binary) or "argmax of f"
/// (K classes).
fn prediction_name(cfg: &Config) -> &'static str {
    if cfg.model.is_multiclass() {
        "argmax of f"
    } else {
        "sign of f"
    }
}

/// The selection counts of the samples `set` (module docs): a group's proved count, and
/// at most that plus the undecided samples.
fn counts_of(
    samples: &[SampleEnclosure],
    set: &[usize],
    groups: &[Group],
) -> SelectionShare<Count> {
    let mut decided = [0usize; 4];
    let (mut ties, mut undecided) = (0usize, 0usize);
    for &i in set {
        let s = &samples[i];
        match s.selection {
            Selection::Decided => decided[groups[s.top].index()] += 1,
            Selection::Tie => ties += 1,
            Selection::Undecided => undecided += 1,
        }
    }
    let of = set.len();
    let count = |lo: usize, more: usize| Count {
        lo,
        hi: lo + more,
        of,
    };
    SelectionShare {
        r: count(decided[0], undecided),
        w_same: count(decided[1], undecided),
        w_opposite: count(decided[2], undecided),
        i: count(decided[3], undecided),
        tie: count(ties, undecided),
        undecided: count(undecided, 0),
    }
}

/// One certified run of `cfg` at `prec` bits (`progress(step)` after each update).
fn run_at(
    cfg: &Config,
    data: &Dataset,
    prec: u32,
    opts: &Options,
    progress: &mut dyn FnMut(u64),
) -> Result<Certificate> {
    let ar = Ball::new(prec)?;
    let method = opts.resolved(cfg, prec);
    let mut tr = Trainer::with_method(cfg, data, ar, cfg.formulation, method)?;
    let mut direction = None;
    if let Some(choice) = crate::model::token_selection::limit::choice_of(cfg) {
        let limit = crate::model::token_selection::limit::Limit::of_config(cfg, data, &choice)?;
        tr.track_direction(&limit)?;
        direction = Some(limit.summary);
    }
    let mut obs = Observer::new(&ar, cfg);
    let ran = drive(&mut tr, cfg.steps, |tr, event| {
        match event {
            Event::Forward => obs.forward(tr),
            Event::Update => progress(tr.step),
        }
        Ok(Control::Continue)
    });
    // an enclosure that blew up (a ball became infinite: every bit lost) ends the run;
    // the checkpoints before it stay certified and are kept (a certificate of part of
    // the run), unless none was reached
    let stopped = match ran {
        Ok(_) => None,
        Err(Error::NonFinite {
            step,
            quantity,
            sample,
        }) if !obs.checkpoints.is_empty() => Some(format!(
            "the enclosure blew up at step {step}: the ball of {quantity}{} became \
             non-finite (every bit of {prec} lost); the checkpoints to step {} are \
             certified, the rest of the run is not",
            sample.map_or(String::new(), |i| format!(" of training sample {i}")),
            obs.checkpoints.last().map_or(0, |k| k.step)
        )),
        // normalised GD's factor alpha / (||G|| + eps) unbounded: a norm's ball reaches 0
        Err(e @ Error::NormalizedStep { .. }) if !obs.checkpoints.is_empty() => Some(format!(
            "the enclosure stopped: {e}; the checkpoints to step {} are certified, the rest \
             of the run is not",
            obs.checkpoints.last().map_or(0, |k| k.step)
        )),
        Err(e) => return Err(e),
    };
    let last = obs
        .checkpoints
        .last()
        .expect("the schedule has step 0, and a run stopped before it returned");
    let decided = stopped.is_none() && last.decisions.all_decided();
    let mut notes = Vec::new();
    if let Some(first) = obs.ties.first {
        notes.push(format!(
            "proved ties at {} step(s), first {first}, last {}: the top score is proved EQUAL \
             to another (at step 0 with p(0) = 0 every score is exactly 0), so no token is \
             selected; a tie is a decision, not an undecided one, and does not make the \
             certificate undecided",
            obs.ties.steps,
            obs.ties.last.unwrap_or(first)
        ));
    }
    if method == Method::Direct {
        notes.push(DIRECT_WARNING.to_string());
    }
    let (largest, at) = obs.largest;
    Ok(Certificate {
        format: FORMAT.to_string(),
        trainer: tr.info(),
        config: cfg.clone(),
        decided,
        train_accuracy: last.train_accuracy,
        train_correct: last.train_correct,
        test_accuracy: last.test_accuracy,
        test_correct: last.test_correct,
        selection: last.selection,
        selection_counts: last.selection_counts,
        first_undecided: obs.first_undecided.clone(),
        ties: obs.ties,
        largest_rel_radius: largest.to_f64_up(),
        largest_at_step: at,
        bits_lost: bits_lost(prec, largest),
        attempts: vec![Attempt {
            prec_bits: prec,
            decided,
            first_undecided: obs.first_undecided.clone(),
            stopped,
        }],
        notes,
        checkpoints: obs.checkpoints,
        direction,
    })
}

/// Certify `cfg`'s run: the ball trainer at each precision of `opts.prec` in turn until
/// the final checkpoint decides everything (module docs). `progress(prec, step)` after
/// each update. A run stopped by a non-finite radius or value (the enclosure lost every
/// bit) counts as undecided, and the next precision is tried; at the last precision the
/// certificate of the checkpoints reached is returned, undecided, with
/// [`Certificate::stopped`] saying where it blew up ([`Error::NonFinite`] when it blew up
/// before the first checkpoint).
pub fn certify(
    cfg: &Config,
    data: &Dataset,
    opts: &Options,
    progress: &mut dyn FnMut(u32, u64),
) -> Result<Certificate> {
    require(cfg, "certify", &[Capability::Certify])?;
    let precs = opts.prec.precs();
    let mut attempts = Vec::new();
    for (k, &prec) in precs.iter().enumerate() {
        let last = k + 1 == precs.len();
        let mut cert = match run_at(cfg, data, prec, opts, &mut |s| progress(prec, s)) {
            Ok(mut cert) if cert.stopped().is_some() && !last => {
                attempts.append(&mut cert.attempts);
                continue;
            }
            Ok(cert) => cert,
            Err(e @ (Error::NonFinite { .. } | Error::NormalizedStep { .. })) if !last => {
                attempts.push(Attempt {
                    prec_bits: prec,
                    decided: false,
                    first_undecided: None,
                    stopped: Some(e.to_string()),
                });
                continue;
            }
            Err(e) => return Err(e),
        };
        attempts.append(&mut cert.attempts);
        if cert.decided || last {
            cert.attempts = attempts;
            return Ok(cert);
        }
    }
    unreachable!("at least one precision")
}

impl Certificate {
    /// Why the run of the certificate's precision stopped before its last step (its
    /// enclosure blew up), if it did: the certificate then covers the checkpoints before
    /// that step only, and is undecided.
    pub fn stopped(&self) -> Option<&str> {
        self.attempts.last().and_then(|a| a.stopped.as_deref())
    }
}

impl std::fmt::Display for Certificate {
    /// The readable summary of `tokensel certify`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.config;
        let mut out = format!(
            "tokensel certify: ball arithmetic at {} bits, {} step, {} steps{}, seed {}, {}-mode, d = {}, n = {}, n_test = {}\n\
             every interval encloses the exact-arithmetic value (ends rounded outward to f64)\n\n",
            self.trainer.prec_bits,
            self.trainer.method.name(),
            c.steps,
            match c.optimizer.is_default() {
                true => String::new(),
                false => format!(" of {}", c.optimizer.name()),
            },
            c.seed,
            c.mode.name(),
            c.d,
            c.n_train,
            c.n_test
        );
        out += &format!(
            "  {:>7}  {:<24}{:>12}{:>12}  {:>9}{:>6}{:>12}{:>6}\n",
            "step",
            "train loss",
            "train acc",
            "test acc",
            "undecided",
            "ties",
            "rel radius",
            "bits"
        );
        for k in &self.checkpoints {
            let d = &k.decisions;
            let undecided = d.train_signs_undecided + d.tops_undecided + d.test_signs_undecided;
            out += &format!(
                "  {:>7}  {:<24}{:>12}{:>12}  {:>9}{:>6}{:>12.2e}{:>6.0}\n",
                k.step,
                format!("{:.10}", k.train_loss.lo()),
                k.train_correct.to_string(),
                k.test_correct.to_string(),
                undecided,
                d.ties,
                k.radius.largest,
                k.radius.bits_lost
            );
        }
        let verdict = |c: &Count| {
            let v = c.share();
            if c.is_exact() {
                format!("{c} = {:.4} (certified)", v.lo().midpoint(v.hi()))
            } else {
                format!("{c} = [{:.4}, {:.4}] (undecided samples)", v.lo(), v.hi())
            }
        };
        out += &format!(
            "\n  certificate at step {}:\n    train accuracy  {}\n    test accuracy   {}\n",
            self.last().step,
            verdict(&self.train_correct),
            verdict(&self.test_correct)
        );
        if let Some(d) = &self.last().direction {
            let ivl = |x: &Option<Interval>| match x {
                Some(i) => format!("[{:.6e}, {:.6e}]", i.lo(), i.hi()),
                None => "-".into(),
            };
            out += &format!(
                "    direction against the attention SVM: 1 - corr in {}, normalised margin in \
                 {}, on the pattern {}\n",
                ivl(&d.one_minus_corr),
                ivl(&d.margin),
                d.on_pattern
            );
        }
        for (set, counts) in [
            ("clean", &self.selection_counts.clean),
            ("noisy", &self.selection_counts.noisy),
        ] {
            if let Some(s) = counts {
                let parts: Vec<String> = SelectionShare::<f64>::NAMES
                    .iter()
                    .zip(s.to_array())
                    .filter(|(_, c)| c.hi > 0)
                    .map(|(name, c)| format!("{name} {c}"))
                    .collect();
                out += &format!("    {set} samples' top token: {}\n", parts.join(", "));
            }
        }
        out += &match &self.first_undecided {
            None => {
                let what = match prediction_name(&self.config) {
                    "sign of f" => "sign",
                    _ => "argmax of f",
                };
                format!(
                    "    every decision proved: each training top token and {what} at every step, each test {what} at every checkpoint\n"
                )
            }
            Some(u) => format!(
                "    first undecided decision: step {}, {}\n",
                u.step, u.what
            ),
        };
        out += &format!(
            "    largest relative radius {:.3e} at step {}: {:.0} of {} bits lost{}\n",
            self.largest_rel_radius,
            self.largest_at_step,
            self.bits_lost,
            self.trainer.prec_bits,
            if self.bits_lost >= self.trainer.prec_bits as f64 {
                " (every bit: some value's enclosure is as wide as the value or wider)"
            } else {
                ""
            }
        );
        if self.attempts.len() > 1 {
            let tried: Vec<String> = self
                .attempts
                .iter()
                .map(|a| match (&a.stopped, a.decided) {
                    (Some(why), _) => format!("{} bits: stopped ({why})", a.prec_bits),
                    (None, true) => format!("{} bits: decided", a.prec_bits),
                    (None, false) => format!("{} bits: undecided", a.prec_bits),
                })
                .collect();
            out += &format!("    precisions tried: {}\n", tried.join("; "));
        }
        for note in &self.notes {
            out += &format!("    note: {note}\n");
        }
        out += &if let Some(why) = self.stopped() {
            format!("\n  verdict: STOPPED: {why}\n")
        } else if self.decided {
            "\n  verdict: DECIDED: every decision of the final checkpoint is proved\n".to_string()
        } else {
            "\n  verdict: UNDECIDED: some decision of the final checkpoint is not proved (see the intervals)\n".to_string()
        };
        f.write_str(&out)
    }
}
