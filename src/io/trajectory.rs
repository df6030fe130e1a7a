//! The trajectory format that every trainer emits, and the run summary.
//!
//! A [`Trajectory`] holds the config, the labels and a list of [`Checkpoint`]s
//! (log-spaced steps). Quantities are f64 whatever the trainer's precision (the twin
//! rounds its values to nearest), so trajectories of both trainers compare directly.
//! Written as JSON (everything) and CSV (one row per checkpoint). What is recorded, and
//! when, is the trainer's business (`train::record`); this module is the format.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::{Config, Formulation, Group, Method};
use crate::error::{Error, Result};
use crate::io::nonfinite::text;
use crate::io::record::{Extras, Leaves, Range, RecordParts, Value, Visitor, visit};
use crate::model::Selection;

/// Format tag written into every trajectory file (version 2: each sample's top token is
/// recorded as decided, a tie or undecided, and ties are counted apart from the groups).
pub const FORMAT: &str = "tokensel-trajectory/2";

/// One number per token group (an f64, or an enclosure: `analysis::certify`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(bound(
    serialize = "T: crate::io::nonfinite::Value",
    deserialize = "T: crate::io::nonfinite::Value"
))]
pub struct PerGroup<T = f64> {
    /// Relevant tokens.
    #[serde(rename = "R")]
    #[serde(with = "crate::io::nonfinite::value")]
    pub r: T,
    /// Weakly relevant tokens of the true class.
    #[serde(rename = "W_same")]
    #[serde(with = "crate::io::nonfinite::value")]
    pub w_same: T,
    /// Weakly relevant tokens of the opposite class.
    #[serde(rename = "W_opposite")]
    #[serde(with = "crate::io::nonfinite::value")]
    pub w_opposite: T,
    /// Irrelevant tokens.
    #[serde(rename = "I")]
    #[serde(with = "crate::io::nonfinite::value")]
    pub i: T,
}

impl<T: Copy> PerGroup<T> {
    /// From values in [`Group::ALL`] order.
    pub fn from_array(v: [T; 4]) -> Self {
        PerGroup {
            r: v[0],
            w_same: v[1],
            w_opposite: v[2],
            i: v[3],
        }
    }

    /// Values in [`Group::ALL`] order.
    pub fn to_array(self) -> [T; 4] {
        [self.r, self.w_same, self.w_opposite, self.i]
    }

    /// The value of group `g`.
    pub fn get(&self, g: Group) -> T {
        self.to_array()[g.index()]
    }
}

/// Where samples' top tokens lie: the share of samples whose top token is decided and in
/// each group, whose top token ties another token (`tie`: no group is selected), and
/// whose top token is undecided (`undecided`: an enclosure too wide to tell; 0 in every
/// arithmetic but a ball one). The six shares sum to 1. (A certificate holds intervals
/// of the shares: `analysis::certify`.)
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(bound(
    serialize = "T: crate::io::nonfinite::Value",
    deserialize = "T: crate::io::nonfinite::Value"
))]
pub struct SelectionShare<T = f64> {
    /// Decided, on a relevant token.
    #[serde(rename = "R")]
    #[serde(with = "crate::io::nonfinite::value")]
    pub r: T,
    /// Decided, on a weakly relevant token of the true class.
    #[serde(rename = "W_same")]
    #[serde(with = "crate::io::nonfinite::value")]
    pub w_same: T,
    /// Decided, on a weakly relevant token of the opposite class.
    #[serde(rename = "W_opposite")]
    #[serde(with = "crate::io::nonfinite::value")]
    pub w_opposite: T,
    /// Decided, on an irrelevant token.
    #[serde(rename = "I")]
    #[serde(with = "crate::io::nonfinite::value")]
    pub i: T,
    /// The top score ties another.
    #[serde(with = "crate::io::nonfinite::value")]
    pub tie: T,
    /// The top score is not proved greater than or equal to every other.
    #[serde(with = "crate::io::nonfinite::value")]
    pub undecided: T,
}

impl<T: Copy> SelectionShare<T> {
    /// From values in [`SelectionShare::to_array`] order.
    pub fn from_array(v: [T; 6]) -> Self {
        SelectionShare {
            r: v[0],
            w_same: v[1],
            w_opposite: v[2],
            i: v[3],
            tie: v[4],
            undecided: v[5],
        }
    }

    /// Values in order: the groups of [`Group::ALL`], then `tie`, `undecided`.
    pub fn to_array(self) -> [T; 6] {
        [
            self.r,
            self.w_same,
            self.w_opposite,
            self.i,
            self.tie,
            self.undecided,
        ]
    }

    /// The share decided on group `g`.
    pub fn get(&self, g: Group) -> T {
        self.to_array()[g.index()]
    }
}

impl SelectionShare {
    /// The entry a sample counts in: its group when decided, else `tie` or `undecided`
    /// (index into [`SelectionShare::to_array`]).
    pub fn index(selection: Selection, group: Group) -> usize {
        match selection {
            Selection::Decided => group.index(),
            Selection::Tie => 4,
            Selection::Undecided => 5,
        }
    }

    /// The entries' names, in [`SelectionShare::to_array`] order.
    pub const NAMES: [&str; 6] = ["R", "W_same", "W_opposite", "I", "tie", "undecided"];
}

/// A quantity for clean and for noisy training samples (`None` if the set is empty).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ByNoise<T = PerGroup> {
    /// Over clean training samples (Y = Y*).
    pub clean: Option<T>,
    /// Over noisy training samples (Y != Y*).
    pub noisy: Option<T>,
}

impl<T: Copy> ByNoise<T> {
    /// `x` for both sets.
    pub fn both(x: T) -> ByNoise<T> {
        ByNoise {
            clean: Some(x),
            noisy: Some(x),
        }
    }
}

impl<T> ByNoise<T> {
    /// Both sets' values through `f`.
    pub fn map<U>(self, f: impl Fn(T) -> U) -> ByNoise<U> {
        ByNoise {
            clean: self.clean.map(&f),
            noisy: self.noisy.map(&f),
        }
    }
}

/// State of one training sample at a checkpoint: f64 values in a trajectory,
/// enclosures in a certificate (`analysis::certify::Interval`), whose extras `X` (each
/// sample's proved prediction) stand after `outputs`, flattened into the JSON; `()`
/// (nothing) in a trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "V: crate::io::nonfinite::Value + Serialize, X: Serialize",
    deserialize = "V: crate::io::nonfinite::Value + Deserialize<'de>, X: Deserialize<'de>"
))]
pub struct SampleState<V = f64, X = ()> {
    /// Model output f(X_i) (binary); a K-class model's margin f_Y - max_{c != Y} f_c.
    #[serde(with = "crate::io::nonfinite::value")]
    pub f: V,
    /// A K-class model's outputs f_0, ..., f_{K-1} (absent for the binary model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Vec<V>>,
    /// What the sample's record carries beside its values (a certificate's prediction).
    #[serde(flatten)]
    pub proof: X,
    /// Position of the highest-attention token (the lowest one on a tie).
    pub top: usize,
    /// Whether the top token is selected (`decided`), ties another (`tie`), or is
    /// `undecided`.
    pub selection: Selection,
    /// Score gap z_top - max_{j != top} z_j.
    #[serde(with = "crate::io::nonfinite::value")]
    pub gap: V,
    /// 1 - s_top.
    #[serde(with = "crate::io::nonfinite::value")]
    pub rest: V,
    /// Attention mass sum_{t in group} s_t of each group.
    pub mass: PerGroup<V>,
    /// The paper's Definition 4.1: S_i = (sum_{t in R} s_t)(1 - sum_{t in R} s_t), with
    /// 1 - sum_R s formed as the sum of the other groups' masses (no cancellation).
    /// With the prompt in sequence the groups are the tokens' (positions 1..=T): the
    /// score is m_R (m_W_same + m_W_opposite + m_I), the prompt's attention in neither.
    #[serde(with = "crate::io::nonfinite::value")]
    pub selection_score: V,
    /// With the prompt in sequence (`[model] prompt = "in-sequence"`): the attention
    /// s_0 on the prompt itself, and whether the prompt is the top position of the
    /// whole softmax; then `top`, `selection`, `gap` and `rest` describe the tokens
    /// 1..=T alone (the softmax of their scores: which token of X is selected), and
    /// `mass` the full attention on each group's tokens (summing to 1 - s_0). Absent
    /// with a separate prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptState<V>>,
}

/// One training sample's attention on the in-sequence prompt (position 0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "V: crate::io::nonfinite::Value",
    deserialize = "V: crate::io::nonfinite::Value"
))]
pub struct PromptState<V = f64> {
    /// Attention s_0 on the prompt.
    #[serde(with = "crate::io::nonfinite::value")]
    pub attention: V,
    /// True where the prompt's score is the largest of the T + 1 (the lowest position
    /// on a tie: the prompt wins ties).
    pub top: bool,
}

/// The in-sequence prompt at a checkpoint, over clean and over noisy training samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(bound(serialize = "V: Serialize", deserialize = "V: Deserialize<'de>"))]
pub struct PromptShare<V = f64> {
    /// Mean attention s_0 on the prompt.
    pub attention: ByNoise<V>,
    /// Share of samples whose top position (of the T + 1) is the prompt.
    pub top: ByNoise<V>,
}

/// Sums of the Definition 4.1 score S_i(tau') over steps tau' = 0..=tau and over the
/// samples of each set (clean / noisy training samples; true class +1 / -1). (A
/// certificate holds enclosures of them: `analysis::certify`.)
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(bound(
    serialize = "T: crate::io::nonfinite::Value",
    deserialize = "T: crate::io::nonfinite::Value"
))]
pub struct Cumulative<T = f64> {
    /// Over clean samples.
    #[serde(with = "crate::io::nonfinite::value")]
    pub clean: T,
    /// Over noisy samples.
    #[serde(with = "crate::io::nonfinite::value")]
    pub noisy: T,
    /// Over samples of true class +1.
    #[serde(with = "crate::io::nonfinite::value")]
    pub class_pos: T,
    /// Over samples of true class -1.
    #[serde(with = "crate::io::nonfinite::value")]
    pub class_neg: T,
}

impl<T: Copy> Cumulative<T> {
    /// From values in field order (clean, noisy, class +1, class -1).
    pub fn from_array(v: [T; 4]) -> Self {
        Cumulative {
            clean: v[0],
            noisy: v[1],
            class_pos: v[2],
            class_neg: v[3],
        }
    }
}

impl Cumulative {
    /// Per-sample ratio of the clean to the noisy cumulative score,
    /// (clean / |C|) / (noisy / |N|) (`None` without noisy samples or before any
    /// noisy score).
    pub fn clean_to_noisy(&self, n_clean: usize, n_noisy: usize) -> Option<f64> {
        (n_clean > 0 && n_noisy > 0 && self.noisy > 0.0)
            .then(|| (self.clean / n_clean as f64) / (self.noisy / n_noisy as f64))
    }
}

/// Everything recorded at one step: f64 values in a trajectory; in a certificate
/// (`analysis::certify`) the same record over enclosures (`V` an interval), with its
/// proof `X` ([`crate::io::record::Extras`]: the exact counts behind the shares, the
/// decisions, the radii; each sample's prediction; the direction's `on_pattern` as an
/// exact count) kept apart from the values and flattened into the JSON after
/// `cumulative`. A trajectory's `X` is `()`: nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "V: crate::io::nonfinite::Value + Serialize, X: Serialize, \
                 X::Sample: Serialize, X::Pattern: crate::io::nonfinite::Value",
    deserialize = "V: crate::io::nonfinite::Value + Deserialize<'de>, X: Deserialize<'de>, \
                   X::Sample: Deserialize<'de>, X::Pattern: crate::io::nonfinite::Value"
))]
pub struct Checkpoint<V: Value = f64, X: Extras<V> = ()> {
    /// Number of gradient steps done.
    pub step: u64,
    /// Empirical logistic risk on the training set.
    #[serde(with = "crate::io::nonfinite::value")]
    pub train_loss: V,
    /// Mean loss on the test set (recorded by the network models, the encoder; absent
    /// for the token-selection models, whose record predates it).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::io::nonfinite::value_option"
    )]
    pub test_loss: Option<V>,
    /// Fraction of training samples with sign(f) = Y (observed labels).
    #[serde(with = "crate::io::nonfinite::value")]
    pub train_accuracy: V,
    /// Fraction of test samples with sign(f) = Y*.
    #[serde(with = "crate::io::nonfinite::value")]
    pub test_accuracy: V,
    /// ||q|| with q = W^T p.
    #[serde(with = "crate::io::nonfinite::value")]
    pub q_norm: V,
    /// ||dL/dq||.
    #[serde(with = "crate::io::nonfinite::value")]
    pub grad_norm: V,
    /// Mean attention mass per group.
    pub attention: ByNoise<PerGroup<V>>,
    /// Fraction of samples whose top token is decided in each group, ties, or is
    /// undecided.
    pub selection: ByNoise<SelectionShare<V>>,
    /// Cumulative Definition 4.1 scores up to this step.
    pub cumulative: Cumulative<V>,
    /// What the record carries beside its values (a certificate's proof; nothing in a
    /// trajectory).
    #[serde(flatten)]
    pub proof: X,
    /// Per training sample.
    pub samples: Vec<SampleState<V, X::Sample>>,
    /// A K-class run's per-class metrics (absent for the binary model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<ClassMetrics<V>>,
    /// The run's direction against the attention SVM's solution (absent unless the
    /// config has a `[direction]` section).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<DirectionPoint<V, X::Pattern>>,
    /// The attention on the in-sequence prompt (absent with a separate prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptShare<V>>,
}

impl<V: Value, X: Extras<V>> Checkpoint<V, X> {
    /// A checkpoint of the record `parts` with `n` samples, every value 0 and every
    /// optional part present (both sets of samples, every class; claims' schema visits
    /// it: `experiments::schema`).
    pub fn blank(parts: &crate::io::record::RecordParts, n: usize) -> Self {
        let z = V::point(0.0);
        let k = parts.classes;
        Checkpoint {
            step: 0,
            train_loss: z,
            test_loss: parts.test_loss.then_some(z),
            train_accuracy: z,
            test_accuracy: z,
            q_norm: z,
            grad_norm: z,
            attention: ByNoise::both(PerGroup::from_array([z; 4])),
            selection: ByNoise::both(SelectionShare::from_array([z; 6])),
            cumulative: Cumulative::from_array([z; 4]),
            proof: X::blank(),
            samples: (0..n)
                .map(|_| SampleState {
                    f: z,
                    outputs: k.map(|k| vec![z; k]),
                    proof: X::blank_sample(),
                    top: 0,
                    selection: Selection::Decided,
                    gap: z,
                    rest: z,
                    mass: PerGroup::from_array([z; 4]),
                    selection_score: z,
                    prompt: parts.prompt.then_some(PromptState {
                        attention: z,
                        top: false,
                    }),
                })
                .collect(),
            classes: k.map(|k| ClassMetrics {
                train_accuracy: vec![Some(z); k],
                test_accuracy: vec![Some(z); k],
                test_tie: z,
                test_undecided: z,
                selection: ByNoise::both(ClassSelection::from_array([z; 7])),
                selection_score: vec![Some(z); k],
            }),
            direction: parts.direction.then(|| DirectionPoint {
                one_minus_corr: Some(z),
                norm: z,
                margin: Some(z),
                support_deviation: Some(z),
                on_pattern: X::blank_pattern(),
            }),
            prompt: parts.prompt.then_some(PromptShare {
                attention: ByNoise::both(z),
                top: ByNoise::both(z),
            }),
        }
    }
}

impl DirectionPoint {
    /// Its CSV column names, in field order.
    pub const NAMES: [&'static str; 5] = [
        "direction_one_minus_corr",
        "direction_norm",
        "direction_margin",
        "direction_support_deviation",
        "direction_on_pattern",
    ];
}

/// Where a run's trained parameter theta points at a checkpoint, against the proved
/// attention SVM solution theta_mm of the config's pattern (`Trajectory::direction`;
/// theta is p in p-mode, q = W^T p in W- and joint mode). Computed in the run's
/// arithmetic and rounded; in a certificate enclosures of the exact run's values, and
/// `on_pattern` (`P`) the exact count of samples on the pattern.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "V: crate::io::nonfinite::Value, P: crate::io::nonfinite::Value",
    deserialize = "V: crate::io::nonfinite::Value, P: crate::io::nonfinite::Value"
))]
pub struct DirectionPoint<V = f64, P = V> {
    /// 1 - corr(tau), corr = <theta - theta0, theta_mm> / (||theta - theta0||
    /// ||theta_mm||), formed as ||u / ||u|| - v / ||v|| ||^2 / 2 (no cancellation near
    /// corr = 1); `None` where theta = theta0 (step 0).
    #[serde(with = "crate::io::nonfinite::value_option")]
    pub one_minus_corr: Option<V>,
    /// ||theta||.
    #[serde(with = "crate::io::nonfinite::value")]
    pub norm: V,
    /// The normalised margin min_{i, t != alpha_i} (z_{i,alpha_i} - z_{i,t}) / ||theta||
    /// (tends to 1 / ||theta_mm|| where the direction converges to theta_mm's);
    /// `None` where theta = 0.
    #[serde(with = "crate::io::nonfinite::value_option")]
    pub margin: Option<V>,
    /// max over the SVM's support constraints c of m_c / min_c' m_c' - 1, m_c the
    /// constraint values z_{i,alpha_i} - z_{i,t}: 0 when the support constraints are
    /// the tightest and equally tight, as at theta_mm; `None` while some m_c <= 0 (the
    /// pattern not yet selected).
    #[serde(with = "crate::io::nonfinite::value_option")]
    pub support_deviation: Option<V>,
    /// The share of training samples whose top token is proved to be alpha_i.
    #[serde(with = "crate::io::nonfinite::value")]
    pub on_pattern: P,
}

/// A K-class run's metrics per class, and its selection groups relative to each sample's
/// classes (SPEC section 14). Over f64 in a trajectory; over enclosures
/// (`analysis::certify::Interval`) in a certificate, where each share is the interval of
/// the proved counts (an undecided argmax or top token in the upper end).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(serialize = "V: Serialize", deserialize = "V: Deserialize<'de>"))]
pub struct ClassMetrics<V = f64> {
    /// Per observed class c: the share of training samples labelled c whose predicted
    /// class (the proved unique argmax of f) is c (`None`: no sample labelled c).
    pub train_accuracy: Vec<Option<V>>,
    /// Per true class c: the share of test samples of class c predicted c.
    pub test_accuracy: Vec<Option<V>>,
    /// Shares of the test set whose largest output ties another (no class predicted) or
    /// is not proved (an enclosure).
    pub test_tie: V,
    /// See `test_tie`.
    pub test_undecided: V,
    /// Where the training samples' top tokens lie, for clean and for noisy samples:
    /// R, W of the true class, W of the observed class (noisy samples only: the weak
    /// token that carries their label's signal), W of another class, I, tie, undecided.
    pub selection: ByNoise<ClassSelection<V>>,
    /// Per true class c: the mean Definition 4.1 score S_i of the training samples of
    /// class c at this step (`None`: no such sample).
    pub selection_score: Vec<Option<V>>,
}

/// The shares of [`ClassMetrics::selection`] (f64, or enclosures in a certificate).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(bound(serialize = "V: Serialize", deserialize = "V: Deserialize<'de>"))]
pub struct ClassSelection<V = f64> {
    /// The relevant token (R).
    #[serde(rename = "R")]
    pub r: V,
    /// A weak token of the true class (W_{Y*}).
    #[serde(rename = "W_true")]
    pub w_true: V,
    /// A weak token of the observed class Y != Y* (W_Y).
    #[serde(rename = "W_observed")]
    pub w_observed: V,
    /// A weak token of a class other than Y* and Y.
    #[serde(rename = "W_other")]
    pub w_other: V,
    /// An irrelevant token (I).
    #[serde(rename = "I")]
    pub i: V,
    /// The top score ties another.
    pub tie: V,
    /// The top score is not proved the largest.
    pub undecided: V,
}

impl ClassSelection {
    /// The entries' names, in [`ClassSelection::to_array`] order.
    pub const NAMES: [&str; 7] = [
        "R",
        "W_true",
        "W_observed",
        "W_other",
        "I",
        "tie",
        "undecided",
    ];

    /// The entry of [`ClassSelection::NAMES`] a training sample counts in: `tie` or
    /// `undecided` by its `selection`, else by the group of its top token `top`: R,
    /// `W_true` (a weak token of its true class `y_true`), `W_observed` (of its observed
    /// class `y`), `W_other`, I.
    pub fn slot(
        cfg: &Config,
        group: Group,
        selection: Selection,
        (y, y_true): (i8, i8),
        top: usize,
    ) -> usize {
        match selection {
            Selection::Tie => 5,
            Selection::Undecided => 6,
            Selection::Decided => match group {
                Group::R => 0,
                Group::WSame => 1,
                Group::I => 4,
                Group::WOpposite => match crate::data::class_of_token(cfg, y_true, top) {
                    Some(c) if c == y as usize => 2,
                    _ => 3,
                },
            },
        }
    }
}

impl<V: Copy> ClassSelection<V> {
    /// The shares in [`ClassSelection::NAMES`] order.
    pub fn to_array(self) -> [V; 7] {
        [
            self.r,
            self.w_true,
            self.w_observed,
            self.w_other,
            self.i,
            self.tie,
            self.undecided,
        ]
    }

    /// From shares in [`ClassSelection::NAMES`] order.
    pub fn from_array(v: [V; 7]) -> Self {
        ClassSelection {
            r: v[0],
            w_true: v[1],
            w_observed: v[2],
            w_other: v[3],
            i: v[4],
            tie: v[5],
            undecided: v[6],
        }
    }
}

/// Which trainer produced a trajectory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainerInfo {
    /// The arithmetic: "f64", "f32", "predictor", "mpfr" or "ball".
    pub kind: crate::arith::Kind,
    /// Significand precision in bits (53 for f64).
    pub prec_bits: u32,
    /// Softmax/gradient formulation.
    pub formulation: Formulation,
    /// How each step was computed: direct or span (`auto` resolved).
    pub method: Method,
}

/// A whole training trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// Always [`FORMAT`].
    pub format: String,
    /// The trainer.
    pub trainer: TrainerInfo,
    /// The run's config.
    pub config: Config,
    /// True training labels Y*.
    pub y_true: Vec<i8>,
    /// Observed training labels Y.
    pub y: Vec<i8>,
    /// Recorded checkpoints, in increasing step order.
    pub checkpoints: Vec<Checkpoint>,
    /// The attention SVM solution the run's direction is compared with, and the hardmax
    /// limit's predictions (absent unless the config has a `[direction]` section).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<crate::model::token_selection::limit::LimitSummary>,
}

impl Checkpoint {
    /// Every number of the checkpoint as f64, in a fixed order (for digests): the leaves
    /// of [`crate::io::record::visit`] in its order ([`crate::io::record::Leaf::number`]: an absent value
    /// NaN, a selection its [`Selection::code`], a flag 0 or 1) but the per-set means
    /// `attention.*` and `selection.*` (derived from the samples' records, and never in
    /// the digest), with the in-sequence prompt's leaves (`samples.prompt.*`, then
    /// `prompt.*`) last, so a separate prompt's digests did not change when they came.
    pub fn numbers(&self) -> Vec<f64> {
        let (mut head, mut tail) = (Vec::new(), Vec::new());
        // the bound of a top token plays no part in a digest
        for (path, leaf) in Leaves::of(self, usize::MAX).0 {
            if path.starts_with("attention.") || path.starts_with("selection.") {
                continue;
            }
            match path.starts_with("samples.prompt.") || path.starts_with("prompt.") {
                true => tail.push(leaf.number()),
                false => head.push(leaf.number()),
            }
        }
        head.extend(tail);
        head
    }
}

/// A CSV row of a checkpoint: its leaves but the samples' (checkpoint-level quantities
/// only), in visit order, with their column names.
#[derive(Default)]
struct CsvRow {
    /// Column names.
    head: Vec<String>,
    /// Values (an absent one empty).
    row: Vec<String>,
    /// How many leaves of each path were seen (a class's index).
    seen: std::collections::HashMap<String, usize>,
}

impl CsvRow {
    /// The column of leaf `path` (`None`: a sample's, not in the CSV): the path with `_`
    /// for `.`, but `cumulative_S_<set>`, the per-class lists `<name>_class_<c>`,
    /// `class_selection_<set>_<entry>` and the test set's `test_tie`, `test_undecided`.
    fn push(&mut self, path: &str, value: String) {
        if path.starts_with("samples.") {
            return;
        }
        let seen = self.seen.entry(path.to_string()).or_insert(0);
        let c = *seen;
        *seen += 1;
        let name = match path.strip_prefix("classes.") {
            Some(list @ ("train_accuracy" | "test_accuracy" | "selection_score")) => {
                format!("{list}_class_{c}")
            }
            Some(rest) if rest.starts_with("selection.") => format!("class_{rest}"),
            Some(rest) => rest.to_string(),
            None => match path.strip_prefix("cumulative.") {
                Some(set) => format!("cumulative_S_{set}"),
                None => path.to_string(),
            },
        };
        self.head.push(name.replace('.', "_"));
        self.row.push(value);
    }
}

impl Visitor for CsvRow {
    fn count(&mut self, path: &str, v: u64) {
        self.push(path, v.to_string());
    }
    fn real(&mut self, path: &str, _: Range, v: f64) {
        self.push(path, text(v));
    }
    fn optional(&mut self, path: &str, _: Range, v: Option<f64>) {
        self.push(path, v.map(text).unwrap_or_default());
    }
    fn index(&mut self, path: &str, _: usize, v: usize) {
        self.push(path, v.to_string());
    }
    fn category(&mut self, path: &str, names: &'static [&'static str], v: u8) {
        self.push(path, names[usize::from(v)].to_string());
    }
    fn flag(&mut self, path: &str, v: bool) {
        self.push(path, v.to_string());
    }
}

/// Check a run's recorded checkpoints against its config: at least one, the first step
/// 0, steps strictly increasing, each holding `n_train` samples and exactly the optional parts of the
/// config's record ([`RecordParts::of`]: per-class metrics and K outputs per sample for
/// a K-class model, the prompt's records for the in-sequence prompt, a direction record
/// for `[direction]`), every leaf within its range (`io::record::check`). The error says
/// what is wrong (trajectories, state files and certificates are all checked by it);
/// then the checks of the extras ([`Extras::check`]: a certificate's counts).
pub(crate) fn check_checkpoints<V: Value, X: Extras<V>>(
    config: &Config,
    checkpoints: &[Checkpoint<V, X>],
) -> std::result::Result<(), String> {
    let (n, tokens) = (config.n_train, config.layout.tokens);
    if checkpoints.is_empty() {
        return Err("no checkpoints (a run records at least step 0)".into());
    }
    // every writer records step 0 first (the recorder's and certify's schedules start
    // at 0, a state holds the checkpoints before it, a run stopped before step 0 writes
    // nothing)
    if checkpoints[0].step != 0 {
        return Err(format!(
            "the first checkpoint is step {}: a run records step 0 first",
            checkpoints[0].step
        ));
    }
    if checkpoints.windows(2).any(|w| w[0].step >= w[1].step) {
        return Err("checkpoint steps are not strictly increasing".into());
    }
    let last = checkpoints[checkpoints.len() - 1].step;
    if last > config.steps {
        return Err(format!(
            "checkpoint {last} is past the run's {} steps (`config.steps`)",
            config.steps
        ));
    }
    let parts = RecordParts::of(config);
    for c in checkpoints {
        if c.samples.len() != n {
            return Err(format!(
                "checkpoint {} holds {} samples, the config's n_train {n}",
                c.step,
                c.samples.len()
            ));
        }
        parts
            .check(c)
            .map_err(|m| format!("checkpoint {}: {m}", c.step))?;
        crate::io::record::check(c, tokens).map_err(|m| format!("checkpoint {}: {m}", c.step))?;
        X::check(c, config).map_err(|m| format!("checkpoint {}: {m}", c.step))?;
    }
    Ok(())
}

/// Check a run's record against its config: its checkpoints ([`check_checkpoints`])
/// and its direction summary, present exactly where the config has `[direction]` and
/// consistent with the data's sizes (trajectories and certificates alike).
pub(crate) fn check_record<V: Value, X: Extras<V>>(
    config: &Config,
    checkpoints: &[Checkpoint<V, X>],
    direction: Option<&crate::model::token_selection::limit::LimitSummary>,
) -> std::result::Result<(), String> {
    check_checkpoints(config, checkpoints)?;
    if direction.is_some() != config.direction.is_some() {
        return Err(
            "the direction summary and the config's [direction] section: one without the other"
                .into(),
        );
    }
    match direction {
        Some(d) => d.check(config.n_train, config.layout.tokens),
        None => Ok(()),
    }
}

impl Trajectory {
    /// The last checkpoint.
    pub fn last(&self) -> &Checkpoint {
        self.checkpoints
            .last()
            .expect("a trajectory has checkpoint 0")
    }

    /// SHA-256 (hex) of the bit patterns of every recorded f64, little endian, in
    /// checkpoint order: equal digests mean bit-identical trajectories.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        for c in &self.checkpoints {
            for v in c.numbers() {
                h.update(v.to_bits().to_le_bytes());
            }
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The trajectory as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("trajectory serialises")
    }

    /// Parse a trajectory from JSON text.
    pub fn from_json(text: &str, origin: &Path) -> Result<Trajectory> {
        let t: Trajectory = serde_json::from_str(text).map_err(|e| Error::Parse {
            what: "trajectory",
            path: origin.to_path_buf(),
            message: e.to_string(),
        })?;
        let bad = |message: String| Error::Parse {
            what: "trajectory",
            path: origin.to_path_buf(),
            message,
        };
        if t.format != FORMAT {
            return Err(bad(format!(
                "format `{}` is not `{FORMAT}` (a trajectory of an older tokensel: run it again)",
                t.format
            )));
        }
        t.config
            .validate()
            .map_err(|e| bad(format!("its config is not valid: {e}")))?;
        let n = t.config.n_train;
        if t.y.len() != n || t.y_true.len() != n {
            return Err(bad(format!("labels do not have n_train = {n} entries")));
        }
        // the labels the config's model takes
        for (name, labels) in [("y", &t.y), ("y_true", &t.y_true)] {
            if let Some(i) = labels.iter().position(|&y| !t.config.model.is_label(y)) {
                return Err(bad(format!(
                    "`{name}[{i}]` = {} is not a label of this model ({})",
                    labels[i],
                    t.config.model.labels()
                )));
            }
        }
        check_record(&t.config, &t.checkpoints, t.direction.as_ref()).map_err(bad)?;
        Ok(t)
    }

    /// One CSV row per checkpoint (non-finite values spelled as in `io::nonfinite`,
    /// an absent value empty): the checkpoint's leaves in visit order but the samples'
    /// ([`crate::io::record::visit`]): step, loss, accuracies, norms, the cumulative
    /// scores, the mean attention mass per group and the selection shares (per group,
    /// tie, undecided) for clean and noisy samples, then a K-class run's per-class
    /// metrics, the direction record and the in-sequence prompt's shares.
    pub fn to_csv(&self) -> String {
        let tokens = self.config.layout.tokens;
        let mut out = String::new();
        for (i, c) in self.checkpoints.iter().enumerate() {
            let mut row = CsvRow::default();
            visit(c, tokens, &mut row);
            if i == 0 {
                out += &(row.head.join(",") + "\n");
            }
            out += &(row.row.join(",") + "\n");
        }
        out
    }

    /// The output set of a run (`run --out`, `twin --out`): `trajectory.csv` and
    /// `trajectory.json`, published together by `io::publish`.
    pub fn files(&self) -> Vec<(String, Vec<u8>)> {
        vec![
            ("trajectory.csv".into(), self.to_csv().into_bytes()),
            ("trajectory.json".into(), self.to_json().into_bytes()),
        ]
    }
}

/// The end-of-run summary printed by `tokensel run --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Training accuracy against the observed labels Y.
    #[serde(with = "crate::io::nonfinite")]
    pub train_accuracy: f64,
    /// Test accuracy against the true labels Y*.
    #[serde(with = "crate::io::nonfinite")]
    pub test_accuracy: f64,
    /// Final empirical risk.
    #[serde(with = "crate::io::nonfinite")]
    pub train_loss: f64,
    /// Final mean loss on the test set (a network model's record; absent otherwise).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::io::nonfinite::option"
    )]
    pub test_loss: Option<f64>,
    /// Steps done.
    pub steps: u64,
    /// Master seed.
    pub seed: u64,
    /// Fraction of clean / noisy training samples whose top token is decided in each
    /// group, ties, or is undecided.
    pub selection: ByNoise<SelectionShare>,
    /// Mean attention mass per group at the end.
    pub attention: ByNoise,
    /// Number of noisy training samples.
    pub n_noisy: usize,
    /// SHA-256 of the trajectory's f64 bits ([`Trajectory::digest`]).
    pub trajectory_digest: String,
    /// The arithmetic the run trained in (`f64`, `f32`, `mpfr`, ...).
    pub arith: crate::arith::Kind,
    /// The config of the run.
    pub config: Config,
    /// A K-class run's per-class metrics at the last checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<ClassMetrics>,
    /// The run's direction at its end against the attention SVM (`[direction]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<DirectionEnd>,
    /// The attention on the in-sequence prompt at the end (absent with a separate
    /// prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptShare>,
}

/// A run's direction at its end and the limit it is compared with ([`Summary`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionEnd {
    /// The limit (the exact ||p_mm||^2 and the pattern are in the trajectory).
    pub limit: DirectionLimit,
    /// The last checkpoint's direction record.
    pub last: DirectionPoint,
}

/// The numbers of a [`crate::model::token_selection::limit::LimitSummary`] a summary
/// repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionLimit {
    /// theorem, optimal or given.
    pub pattern_choice: String,
    /// "p" or "q".
    pub space: crate::model::token_selection::limit::Space,
    /// ||theta_mm||.
    pub norm: f64,
    /// 1 / ||theta_mm||.
    pub limit_margin: f64,
    /// Support constraints.
    pub support: usize,
    /// All constraints n (T - 1).
    pub constraints: usize,
    /// The local-optimality test's verdict.
    pub local_optimality: String,
    /// Whether that verdict is "locally optimal" (proved; "undecided" is false): the
    /// number a claim reads.
    pub locally_optimal: bool,
    /// How many training samples are not proved on the pattern at the end (the length
    /// of `off_pattern_at_end`: 0 when the run ends in the pattern; null where the
    /// trajectory has no end record).
    pub off_pattern_count: Option<usize>,
    /// The hardmax limit's train accuracy (observed labels).
    pub limit_train_accuracy: f64,
    /// The hardmax limit's test accuracy (Y*).
    pub limit_test_accuracy: f64,
    /// Its undecided test samples.
    pub limit_test_undecided: usize,
    /// Training samples not proved on the pattern at the end.
    pub off_pattern_at_end: Vec<usize>,
    /// The pattern alpha (one token index per training sample).
    pub pattern: Vec<usize>,
}

impl Summary {
    /// Summarise a trajectory by its last checkpoint.
    pub fn of(t: &Trajectory) -> Summary {
        let c = t.last();
        Summary {
            train_accuracy: c.train_accuracy,
            test_accuracy: c.test_accuracy,
            train_loss: c.train_loss,
            test_loss: c.test_loss,
            steps: c.step,
            seed: t.config.seed,
            selection: c.selection,
            attention: c.attention,
            n_noisy: t.y.iter().zip(&t.y_true).filter(|(a, b)| a != b).count(),
            trajectory_digest: t.digest(),
            arith: t.trainer.kind,
            config: t.config.clone(),
            classes: c.classes.clone(),
            prompt: c.prompt,
            direction: t
                .direction
                .as_ref()
                .zip(c.direction)
                .map(|(d, last)| DirectionEnd {
                    limit: DirectionLimit {
                        pattern_choice: d.pattern_choice.clone(),
                        space: d.space,
                        norm: d.norm,
                        limit_margin: d.limit_margin,
                        support: d.support.len(),
                        constraints: d.constraints,
                        local_optimality: d.local_optimality.verdict.clone(),
                        locally_optimal: d.local_optimality.verdict == "locally optimal",
                        off_pattern_count: d.off_pattern_at_end.as_ref().map(Vec::len),
                        limit_train_accuracy: d.limit_train_accuracy,
                        limit_test_accuracy: d.limit_test_accuracy,
                        limit_test_undecided: d.limit_test_undecided,
                        off_pattern_at_end: d.off_pattern_at_end.clone().unwrap_or_default(),
                        pattern: d.pattern.clone(),
                    },
                    last,
                }),
        }
    }
}
