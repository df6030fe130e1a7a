//! The one description of a run, shared by every trainer and command.
//!
//! A [`Config`] is read from TOML as an *overlay* on the embedded default (the paper's
//! balanced setting, `src/presets/balanced.toml`): a file only names what it changes.
//! Unknown keys, wrong types and out-of-domain values are errors naming the field.
//!
//! One file per concern: the sections' structs and their serde ([`sections`] and
//! [`optimizer`] for `[optimizer]`), the presets and the TOML overlay ([`presets`]),
//! the domain checks ([`validate`]) and the data and size checks ([`sizes`]); the
//! protocol section is [`protocol`].

use serde::{Deserialize, Serialize};

mod optimizer;
mod presets;
pub(crate) mod protocol;
mod sections;
mod sizes;
mod validate;

pub use optimizer::{Optimizer, OptimizerKind, Schedule};
pub use presets::Preset;
pub use protocol::Protocol;
pub use sections::{
    Direction, FlipRule, Formulation, Group, Init, LabelRule, Layout, Method, Mode, ModelKind,
    ModelSpec, PInit, PatternSpec, Prompt, Record, Signals, WInit,
};

/// Largest amount of memory the data set (plus a dense `W`) may take, in bytes.
///
/// Larger configs are refused before anything is allocated.
pub const MAX_DATA_BYTES: u64 = 8 << 30;

/// Largest ||mu|| (and sigma) a config may ask for (see [`Config::validate`]).
pub const MAX_MU_NORM: f64 = 1e6;

/// Largest number of checkpoints per decade of steps (beyond, every step is recorded
/// anyway, and the schedule would only take longer to build).
pub const MAX_CHECKPOINTS_PER_DECADE: u32 = 1000;

/// Largest number of gradient steps a config may ask for.
pub const MAX_STEPS: u64 = 1_000_000_000;

/// Largest number of classes K of the multi-class model (labels are stored as `i8`
/// class indices; K-class data needs d >= K and K - 1 weakly relevant tokens).
pub const MAX_CLASSES: usize = 100;

/// The largest parameter count of a network model (`[model] kind = "encoder"`): 10^8
/// (the official size, d = m = 2000, has 20,020,001); the memory of a run's arithmetic
/// is checked before it starts.
pub const MAX_NETWORK_PARAMETERS: u64 = 100_000_000;

/// A complete description of one training run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Master seed; every random stream is derived from it (see [`crate::rng`]).
    pub seed: u64,
    /// Token dimension d.
    pub d: usize,
    /// Token-group layout of every sequence (T and the group sizes).
    pub layout: Layout,
    /// Number of training samples n.
    pub n_train: usize,
    /// Number of (clean) test samples.
    pub n_test: usize,
    /// Signal norm ||mu||.
    pub mu_norm: f64,
    /// How the two orthogonal class signals are chosen.
    pub signals: Signals,
    /// Weak-relevance factor rho of the W-tokens.
    pub rho: f64,
    /// Noise standard deviation sigma.
    pub sigma: f64,
    /// Label-noise rate eta, in [0, 1).
    pub eta: f64,
    /// How the true labels are drawn.
    pub labels: LabelRule,
    /// How label flips are drawn.
    pub flips: FlipRule,
    /// Gradient-descent step size alpha.
    pub step_size: f64,
    /// Number of full-batch gradient steps.
    pub steps: u64,
    /// Which parameter is trained.
    pub mode: Mode,
    /// f64 formulation of softmax and gradient.
    pub formulation: Formulation,
    /// How a step is computed: in d-space (`direct`), in the span of the training tokens
    /// (`span`, SPEC section 9; the same trajectory in exact arithmetic), or `auto`: the
    /// cheaper of the two for the run's sizes (`train::plan`).
    #[serde(default)]
    pub method: Method,
    /// Initial values of p and W.
    pub init: Init,
    /// What the trajectory records.
    pub record: Record,
    /// Which model is trained (`[model]`; the binary token-selection model when absent,
    /// and then not written, so every existing config, trajectory and digest keeps its
    /// bytes).
    #[serde(default, skip_serializing_if = "ModelSpec::is_default")]
    pub model: ModelSpec,
    /// How each step's length is chosen (`[optimizer]`; constant-step gradient descent
    /// when absent, and then not written, so every existing config, trajectory and
    /// digest keeps its bytes).
    #[serde(default, skip_serializing_if = "Optimizer::is_default")]
    pub optimizer: Optimizer,
    /// Track the run's direction against the attention SVM of a selection pattern
    /// (`[direction]`, SPEC section 15; binary model only). Absent: nothing is tracked
    /// (and nothing written, so every existing config, trajectory and digest keeps its
    /// bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// The two-phase fine-tuning protocol of the paper's Section I (`[protocol]`, SPEC
    /// section 16; read by `tokensel protocol` only, K-class model only). Absent: not
    /// written, so every existing config, trajectory and digest keeps its bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// Factorised query-key attention (`[factorised]`, SPEC section 17:
    /// `model::factorised`): q = W_K^T (W_Q p + b_Q) in place of W^T p. Absent: not
    /// written, so every existing config, trajectory and digest keeps its bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factorised: Option<crate::model::factorised::Section>,
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn presets_are_valid_and_differ_where_the_paper_says() {
        let a = Preset::Balanced.config();
        let b = Preset::LargeNoise.config();
        let c = Preset::LargeSignal.config();
        assert_eq!(a, Config::default());
        assert_eq!((b.d, b.mu_norm), (4500, 5.0));
        assert_eq!((c.d, c.mu_norm), (1000, 80.0));
        assert_eq!(b.eta, a.eta);
    }

    #[test]
    fn toml_round_trip() {
        let a = Config::default();
        let b = Config::from_toml_str(&a.to_toml(), Path::new("x")).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn flip_count_follows_decimal_intent() {
        let mut c = Config::default();
        assert_eq!(c.exact_flip_count(), 4);
        c.n_train = 30;
        c.eta = 0.1;
        assert_eq!(c.exact_flip_count(), 3);
        c.eta = 0.11;
        assert_eq!(c.exact_flip_count(), 4);
    }

    #[test]
    fn layout_groups_in_order() {
        let l = Config::default().layout;
        let g = l.groups();
        assert_eq!(g[0], Group::R);
        assert_eq!(g[1], Group::WSame);
        assert_eq!(g[2], Group::WOpposite);
        assert!(g[3..].iter().all(|&x| x == Group::I));
    }
}
