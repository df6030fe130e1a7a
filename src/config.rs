//! The one description of a run, shared by every trainer and command.
//!
//! A [`Config`] is read from TOML as an *overlay* on the embedded default (the paper's
//! balanced setting, `src/presets/balanced.toml`): a file only names what it changes.
//! Unknown keys, wrong types and out-of-domain values are errors naming the field.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub mod protocol;

pub use protocol::Protocol;

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

/// The `[direction]` section: which pattern's attention SVM solution a run's direction
/// is compared with at every checkpoint (`model::token_selection::limit`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Direction {
    /// `"theorem"` (clean samples their R token, noisy samples their W_{-Y*} token),
    /// `"optimal"` (alpha_i = argmax_t Y_i nu^T x_it) or a list of one token index per
    /// training sample (e.g. a run's final pattern).
    pub pattern: PatternSpec,
}

/// A selection pattern in a config: a name or the token indices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "a pattern name (\"theorem\" or \"optimal\") or a list of token indices (integers >= 0)"
)]
pub enum PatternSpec {
    /// "theorem" or "optimal".
    Named(String),
    /// One token index per training sample.
    Given(Vec<usize>),
}

/// The step rule: the `[optimizer]` section.
///
/// Every parameter block B (p; W) with gradient G_B = dL/dB takes the step
/// B <- B - alpha G_B (`kind = "gd"`) or B <- B - alpha G_B / (||G_B|| + eps)
/// (`kind = "normalized-gd"`, the norm Euclidean for p and Frobenius for W, each
/// block normalised by its own norm as the max-margin literature's public code does,
/// which adds eps = 1e-9), or the coordinate-wise Adam / AdamW step of PyTorch's
/// single-tensor implementation (`kind = "adam"`, `"adamw"`: `train::adam`), with
/// alpha = `step_size` as the learning rate. Every kind takes a learning-rate
/// `schedule` (constant, or linear decay to 0), optional gradient clipping by the
/// global norm (`clip_norm`) and optional minibatches (`batch`: `train::batch`).
///
/// The key `eps` is per kind: normalised GD's eps (default 0) added to the gradient
/// norm, or Adam's eps (default 1e-8) added to sqrt(v_hat). `beta1`, `beta2` and
/// `weight_decay` belong to Adam and AdamW only.
///
/// GD and normalised GD are stateless; Adam's moments and step counter are kept beside
/// the engine's parameters and saved in resumable state, so resumed runs stay
/// bit-identical.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(from = "RawOptimizer")]
pub struct Optimizer {
    /// The rule.
    pub kind: OptimizerKind,
    /// Normalised GD: eps >= 0 (finite), added to each block's gradient norm; 0 (the
    /// default) for the exact rule, which stops a run whose gradient is exactly 0 with
    /// a non-finite error. Adam/AdamW: eps > 0 (finite; default 1e-8) added to
    /// sqrt(v_hat); 0 is refused (a coordinate whose moments are both 0 would take the
    /// step 0 / 0). Must be 0 for `gd`.
    pub eps: f64,
    /// Adam's beta1 in [0, 1) (default 0.9; `None` for the GD kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub beta1: Option<f64>,
    /// Adam's beta2 in [0, 1) (default 0.999; `None` for the GD kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub beta2: Option<f64>,
    /// Adam's weight decay >= 0 (default 0; `None` for the GD kinds): L2 added to the
    /// gradient (`adam`, as `torch.optim.Adam`) or decoupled, p <- p (1 - lr wd) before
    /// the step (`adamw`, as `torch.optim.AdamW`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_decay: Option<f64>,
    /// The learning-rate schedule (default constant).
    #[serde(default, skip_serializing_if = "Schedule::is_constant")]
    pub schedule: Schedule,
    /// Clip the gradient to this global norm (> 0, finite) before the step, as
    /// `torch.nn.utils.clip_grad_norm_`: total = sqrt(sum of the blocks' squared norms),
    /// every block times min(clip / (total + 1e-6), 1). `None`: no clipping.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clip_norm: Option<f64>,
    /// Minibatch size, 1 <= batch <= n_train (`None`: the full batch). Each epoch a
    /// seeded permutation of the training samples is cut into consecutive batches, the
    /// last one smaller; one step is one batch, and `steps` counts batch steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<usize>,
}

/// The `[optimizer]` section as written: every key optional, resolved per kind by
/// [`Optimizer::from`].
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOptimizer {
    kind: OptimizerKind,
    #[serde(default)]
    eps: Option<f64>,
    #[serde(default)]
    beta1: Option<f64>,
    #[serde(default)]
    beta2: Option<f64>,
    #[serde(default)]
    weight_decay: Option<f64>,
    #[serde(default)]
    schedule: Schedule,
    #[serde(default)]
    clip_norm: Option<f64>,
    #[serde(default)]
    batch: Option<usize>,
}

impl From<RawOptimizer> for Optimizer {
    /// The defaults of the kind: eps 0 (GD kinds) or 1e-8 (Adam), betas 0.9 / 0.999 and
    /// weight decay 0 for Adam. Adam keys given to a GD kind are kept, so that
    /// [`Optimizer::validate`] refuses them by name.
    fn from(r: RawOptimizer) -> Optimizer {
        let adam = r.kind.is_adam();
        let or = |v: Option<f64>, d: f64| if adam { Some(v.unwrap_or(d)) } else { v };
        Optimizer {
            kind: r.kind,
            eps: r.eps.unwrap_or(if adam { ADAM_EPS } else { 0.0 }),
            beta1: or(r.beta1, 0.9),
            beta2: or(r.beta2, 0.999),
            weight_decay: or(r.weight_decay, 0.0),
            schedule: r.schedule,
            clip_norm: r.clip_norm,
            batch: r.batch,
        }
    }
}

/// Adam's default eps (PyTorch's and the Hugging Face Trainer's).
pub const ADAM_EPS: f64 = 1e-8;

/// The step rules a config can name (`[optimizer] kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerKind {
    /// Constant-step full-batch gradient descent (the paper's).
    Gd,
    /// Normalised full-batch gradient descent: each block's step has length alpha
    /// (alpha ||G|| / (||G|| + eps) with eps > 0).
    NormalizedGd,
    /// Adam (`torch.optim.Adam`, weight decay as L2 added to the gradient).
    Adam,
    /// AdamW (`torch.optim.AdamW`, decoupled weight decay).
    Adamw,
}

impl OptimizerKind {
    /// True for Adam and AdamW (coordinate-wise, stateful).
    pub fn is_adam(self) -> bool {
        matches!(self, OptimizerKind::Adam | OptimizerKind::Adamw)
    }
}

/// The learning-rate schedule (`[optimizer] schedule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Schedule {
    /// alpha at every step.
    #[default]
    Constant,
    /// Linear decay to 0 without warmup (the Hugging Face Trainer's
    /// `get_linear_schedule_with_warmup` with 0 warmup steps): step k (0-based) of an
    /// N-step run uses alpha ((N - k) / N), the factor (N - k) / N rounded in the run's
    /// arithmetic, then multiplied by alpha (rounded).
    Linear,
}

impl Schedule {
    /// True for the constant schedule (the default, not written).
    pub fn is_constant(&self) -> bool {
        *self == Schedule::Constant
    }
}

impl Default for Optimizer {
    fn default() -> Self {
        Optimizer {
            kind: OptimizerKind::Gd,
            eps: 0.0,
            beta1: None,
            beta2: None,
            weight_decay: None,
            schedule: Schedule::Constant,
            clip_norm: None,
            batch: None,
        }
    }
}

impl Optimizer {
    /// True for the default (constant-step gradient descent).
    pub fn is_default(&self) -> bool {
        *self == Optimizer::default()
    }

    /// True for normalised gradient descent.
    pub fn is_normalized(&self) -> bool {
        self.kind == OptimizerKind::NormalizedGd
    }

    /// True for Adam and AdamW.
    pub fn is_adam(&self) -> bool {
        self.kind.is_adam()
    }

    /// The minibatch size of a run on `n_train` training samples: `batch` where it is
    /// below `n_train`, `None` for the full batch (no `batch`, or `batch >= n_train`: one
    /// batch of every sample is the full-batch run, bit for bit, and is taken as it).
    pub fn minibatch(&self, n_train: usize) -> Option<usize> {
        self.batch.filter(|&b| b < n_train)
    }

    /// True where the run (on `n_train` training samples) is not full-batch gradient
    /// descent of the paper's kind in a way the span step cannot express: Adam
    /// (coordinate-wise), minibatches or clipping. Such runs take the direct step
    /// (`train::plan::resolve_method`).
    pub fn needs_direct(&self, n_train: usize) -> bool {
        self.span_refusal(n_train).is_some()
    }

    /// True where the run's steps (on `n_train` training samples) are not full-batch
    /// steps whose p <-> W relation is Lemma A.6's (Adam, minibatches or clipping).
    pub fn breaks_lemma_a6(&self, n_train: usize) -> bool {
        self.needs_direct(n_train)
    }

    /// Why the span step cannot take this optimizer on `n_train` training samples (for
    /// error messages), `None` where it can.
    pub fn span_refusal(&self, n_train: usize) -> Option<&'static str> {
        if self.is_adam() {
            Some(
                "Adam is coordinate-wise in the parameters' own coordinates, which the span \
                 step's coefficients do not have: use method = \"direct\" or \"auto\"",
            )
        } else if self.minibatch(n_train).is_some() {
            Some(
                "minibatches are taken by the direct step only: use method = \"direct\" or \
                 \"auto\"",
            )
        } else if self.clip_norm.is_some() {
            Some(
                "gradient clipping is taken by the direct step only: use method = \"direct\" \
                 or \"auto\"",
            )
        } else {
            None
        }
    }

    /// Its name in outputs: `gd`, or `normalized-gd` (with `eps` when it is not 0), or
    /// e.g. `adamw (lr 5e-5, betas 0.9/0.999, eps 1e-8, wd 0)`; then the schedule, clip
    /// and batch where they are not the defaults (`linear`, `clip 1`, `batch 16`).
    /// `lr` is the config's `step_size` (`alpha`).
    pub fn name_with(&self, lr: Option<f64>) -> String {
        let mut s = match (self.kind, self.eps) {
            (OptimizerKind::Gd, _) => "gd".to_string(),
            (OptimizerKind::NormalizedGd, 0.0) => "normalized-gd".to_string(),
            (OptimizerKind::NormalizedGd, e) => format!("normalized-gd (eps = {e:e})"),
            (k, e) => format!(
                "{} ({}betas {}/{}, eps {}, wd {}",
                if k == OptimizerKind::Adam {
                    "adam"
                } else {
                    "adamw"
                },
                lr.map_or(String::new(), |lr| format!("lr {}, ", short(lr))),
                short(self.beta1.unwrap_or(0.9)),
                short(self.beta2.unwrap_or(0.999)),
                short(e),
                short(self.weight_decay.unwrap_or(0.0)),
            ),
        };
        let mut extra = Vec::new();
        if self.schedule == Schedule::Linear {
            extra.push("linear".to_string());
        }
        if let Some(c) = self.clip_norm {
            extra.push(format!("clip {}", short(c)));
        }
        if let Some(b) = self.batch {
            extra.push(format!("batch {b}"));
        }
        if self.is_adam() {
            for e in extra {
                s.push_str(", ");
                s.push_str(&e);
            }
            s.push(')');
        } else if !extra.is_empty() {
            s.push_str(&format!(" [{}]", extra.join(", ")));
        }
        s
    }

    /// Its name in outputs without the learning rate ([`Optimizer::name_with`]; Adam's
    /// name leaves `lr` out).
    pub fn name(&self) -> String {
        self.name_with(None)
    }

    /// Every key's domain (`n_train`: the batch's upper bound; `method`: the span step
    /// refuses Adam, minibatches and clipping).
    fn validate(&self, n_train: usize, method: Method) -> Result<()> {
        let adam = self.is_adam();
        if adam {
            if !(self.eps.is_finite() && self.eps > 0.0) {
                return Err(Error::config(
                    "optimizer.eps",
                    format!(
                        "Adam's eps must be finite and > 0 (eps = 0 lets a coordinate whose \
                         moments are both 0 take the step 0 / 0), got {}",
                        self.eps
                    ),
                ));
            }
        } else if !(self.eps.is_finite() && self.eps >= 0.0) {
            return Err(Error::config(
                "optimizer.eps",
                format!("must be finite and >= 0, got {}", self.eps),
            ));
        }
        if self.kind == OptimizerKind::Gd && self.eps != 0.0 {
            return Err(Error::config(
                "optimizer.eps",
                format!(
                    "applies to kind = \"normalized-gd\", \"adam\" and \"adamw\" only (got {} \
                     with kind = \"gd\")",
                    self.eps
                ),
            ));
        }
        for (key, v) in [
            ("optimizer.beta1", self.beta1),
            ("optimizer.beta2", self.beta2),
            ("optimizer.weight_decay", self.weight_decay),
        ] {
            let Some(v) = v else { continue };
            if !adam {
                return Err(Error::config(
                    key,
                    "applies to kind = \"adam\" and \"adamw\" only",
                ));
            }
            let ok = match key {
                "optimizer.weight_decay" => v.is_finite() && v >= 0.0,
                _ => (0.0..1.0).contains(&v),
            };
            if !ok {
                let domain = match key {
                    "optimizer.weight_decay" => "finite and >= 0",
                    _ => "in [0, 1)",
                };
                return Err(Error::config(key, format!("must be {domain}, got {v}")));
            }
        }
        if let Some(c) = self.clip_norm
            && !(c.is_finite() && c > 0.0)
        {
            return Err(Error::config(
                "optimizer.clip_norm",
                format!("must be finite and > 0, got {c}"),
            ));
        }
        if let Some(b) = self.batch
            && !(1..=n_train).contains(&b)
        {
            return Err(Error::config(
                "optimizer.batch",
                format!("must be in 1..=n_train = 1..={n_train}, got {b}"),
            ));
        }
        if method == Method::Span
            && let Some(why) = self.span_refusal(n_train)
        {
            return Err(Error::config("method", format!("method = \"span\": {why}")));
        }
        Ok(())
    }
}

/// A number in outputs: the shortest text that reads back as `v` (`5e-5`, `0.9`, `1`).
fn short(v: f64) -> String {
    let plain = format!("{v}");
    let sci = format!("{v:e}");
    if sci.len() < plain.len() { sci } else { plain }
}

/// Which model a run trains: the `[model]` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// The model (default: the binary token-selection model).
    #[serde(default)]
    pub kind: ModelKind,
    /// Number of classes K of the multi-class model (2 ..= [`MAX_CLASSES`]); must be 2
    /// (the default) for the binary model.
    #[serde(default = "two")]
    pub classes: usize,
    /// Where the tunable token p sits (`prompt`): a separate query (`"separate"`, the
    /// paper's model and the default, not serialised) or prepended to the sequence as
    /// position 0 (`"in-sequence"`, the rebuttal's bridge A''1; proofs-notes/prompt.md).
    #[serde(default, skip_serializing_if = "Prompt::is_separate")]
    pub prompt: Prompt,
}

/// Where the tunable token p sits (`[model] prompt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Prompt {
    /// p is a separate query: scores z_t = <x_t, W^T p> over the T tokens (the paper's
    /// model).
    #[default]
    Separate,
    /// p is also token 0 of the attended sequence [p; X]: T + 1 positions, the prompt's
    /// score <p, W^T p> and head values <nu_c, p> (proofs-notes/prompt.md).
    InSequence,
}

impl Prompt {
    /// True for the default (`"separate"`).
    pub fn is_separate(&self) -> bool {
        *self == Prompt::Separate
    }

    /// The name in configs and outputs.
    pub fn name(self) -> &'static str {
        match self {
            Prompt::Separate => "separate",
            Prompt::InSequence => "in-sequence",
        }
    }
}

fn two() -> usize {
    2
}

impl Default for ModelSpec {
    fn default() -> Self {
        ModelSpec {
            kind: ModelKind::TokenSelection,
            classes: 2,
            prompt: Prompt::Separate,
        }
    }
}

impl ModelSpec {
    /// True for the default (the binary token-selection model).
    pub fn is_default(&self) -> bool {
        *self == ModelSpec::default()
    }

    /// True for the multi-class model.
    pub fn is_multiclass(&self) -> bool {
        self.kind == ModelKind::Multiclass
    }

    /// True where the prompt is token 0 of the attended sequence (`prompt =
    /// "in-sequence"`).
    pub fn in_sequence(&self) -> bool {
        self.prompt == Prompt::InSequence
    }

    /// The head and loss this section names, without the prompt's position (what a
    /// [`crate::model::Model`] declares: the prompt's position is the trainer's).
    pub fn head(&self) -> ModelSpec {
        ModelSpec {
            prompt: Prompt::Separate,
            ..*self
        }
    }

    /// Positions a sample's attention covers: T, or T + 1 with the prompt in sequence.
    pub fn positions(&self, tokens: usize) -> usize {
        tokens + usize::from(self.in_sequence())
    }

    /// The label of the first class: +1 for the binary model, class 0 of K (the class
    /// whose samples' Definition 4.1 sum is `class_pos`, the rest's `class_neg`).
    pub fn first_label(&self) -> i8 {
        if self.is_multiclass() { 0 } else { 1 }
    }
}

/// The models a config can name (`[model] kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// The paper's binary model: f = nu^T X^T softmax(X W^T p) in R, logistic loss,
    /// labels in {+1, -1} (SPEC sections 1-3).
    #[default]
    TokenSelection,
    /// The multi-class model of the paper's Section F (SPEC section 14): a fixed head nu
    /// in R^{d x K}, f in R^K, softmax cross-entropy, labels in [0, K).
    Multiclass,
}

impl ModelKind {
    /// The name in configs and outputs.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::TokenSelection => "token-selection",
            ModelKind::Multiclass => "multiclass",
        }
    }
}

/// Token groups of a sequence, in position order R, W_{Y*}, W_{-Y*}, I.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    /// Sequence length T; must equal the sum of the group sizes.
    pub tokens: usize,
    /// Relevant tokens: x = mu_{Y*} + eps.
    pub relevant: usize,
    /// Weakly relevant tokens of the true class: x = rho mu_{Y*} + eps.
    pub weak_same: usize,
    /// Weakly relevant tokens of the opposite class: x = rho mu_{-Y*} + eps.
    pub weak_opposite: usize,
    /// Irrelevant tokens: x = eps.
    pub irrelevant: usize,
}

/// One of the four token groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Group {
    /// Relevant (R).
    R,
    /// Weakly relevant, true class (W_{Y*}).
    WSame,
    /// Weakly relevant, opposite class (W_{-Y*}).
    WOpposite,
    /// Irrelevant (I).
    I,
}

impl Group {
    /// All groups in layout order.
    pub const ALL: [Group; 4] = [Group::R, Group::WSame, Group::WOpposite, Group::I];

    /// Stable name used in JSON/CSV output.
    pub fn name(self) -> &'static str {
        match self {
            Group::R => "R",
            Group::WSame => "W_same",
            Group::WOpposite => "W_opposite",
            Group::I => "I",
        }
    }

    /// Index in [`Group::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl Layout {
    /// Group sizes in [`Group::ALL`] order.
    pub fn sizes(&self) -> [usize; 4] {
        [
            self.relevant,
            self.weak_same,
            self.weak_opposite,
            self.irrelevant,
        ]
    }

    /// The group of token position `t` (0-based).
    pub fn group_of(&self, t: usize) -> Group {
        let mut end = 0;
        for (g, size) in Group::ALL.into_iter().zip(self.sizes()) {
            end += size;
            if t < end {
                return g;
            }
        }
        Group::I
    }

    /// The group of every position, in order.
    pub fn groups(&self) -> Vec<Group> {
        (0..self.tokens).map(|t| self.group_of(t)).collect()
    }
}

/// Choice of the class signals mu_{+1}, mu_{-1}.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signals {
    /// mu_{+1} = ||mu|| e_1, mu_{-1} = ||mu|| e_2 (the official code).
    Axis,
    /// A random orthonormal pair (Gram-Schmidt on Gaussian vectors), scaled by ||mu||.
    Random,
}

/// How the true training labels Y* are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LabelRule {
    /// Y* = +1 or -1 with probability 1/2 each.
    Random,
    /// The first ceil(n/2) samples +1, the rest -1 (the official code's later version).
    HalfSplit,
}

/// How the noisy training labels are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlipRule {
    /// Exactly ceil(eta n) labels flipped, at uniformly random positions.
    Exact,
    /// Each label flipped independently with probability eta.
    Bernoulli,
    /// The first floor(m/2) samples of each class, m = ceil(eta n) (the official code's
    /// later version; deterministic).
    PerClassFirst,
}

/// Which parameter gradient descent moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// Train the token p, W fixed.
    #[serde(rename = "p")]
    P,
    /// Train the key-query matrix W, p fixed.
    #[serde(rename = "W", alias = "w")]
    W,
    /// Train p and W together (the official code's later version).
    #[serde(rename = "joint")]
    Joint,
}

impl Mode {
    /// Stable name used in outputs (as in config files): `p`, `W`, `joint`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::P => "p",
            Mode::W => "W",
            Mode::Joint => "joint",
        }
    }
}

/// How a gradient step is computed (SPEC section 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// The cheaper of the two for the run's sizes, where the formulation allows it:
    /// resolved by the cost model of `train::plan` when a trainer is built (the default).
    #[default]
    Auto,
    /// In d-space: scores X q, gradient X^T c, update of p and W (O(nTd) per step, plus
    /// O(d^2) when W is dense).
    Direct,
    /// In the span of the training tokens: coefficients and Gram matrices, O((nT)^2) per
    /// step whatever d, after a one-time precompute. Needs the stable formulation.
    Span,
}

impl std::fmt::Display for Method {
    /// The name, padded to the formatter's width.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

impl Method {
    /// Stable name used in outputs.
    pub fn name(self) -> &'static str {
        match self {
            Method::Auto => "auto",
            Method::Direct => "direct",
            Method::Span => "span",
        }
    }
}

/// The f64 formulation of softmax, 1 - s and df/dq (SPEC section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Formulation {
    /// Max-subtracted softmax, `1 - s_top`, f = sum s g, and the backprop gradient
    /// `sum s g x - f sum s x` (what most frameworks compute).
    Naive,
    /// Max-subtracted softmax, `1 - s_top` as the sum of the others, f centred on the top
    /// token, and the token-space gradient s_t (g_t - f) with g_top - f formed from the
    /// centred sum (see `model::grad_scores`).
    Stable,
}

/// Initial parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Init {
    /// Initial p.
    pub p: PInit,
    /// Scale of a Gaussian p: p ~ N(0, p_scale^2 I_d).
    pub p_scale: f64,
    /// Initial W.
    pub w: WInit,
}

/// Initial value of p.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PInit {
    /// p(0) = 0 (uniform attention; the paper's default).
    Zero,
    /// p(0) ~ N(0, p_scale^2 I_d) from the `init` stream.
    Gaussian,
}

/// Initial value of W.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WInit {
    /// W(0) = I (the paper's first version).
    Identity,
    /// Entries U(-1/sqrt(d), 1/sqrt(d)) from the `init` stream (PyTorch's Kaiming-uniform).
    KaimingUniform,
}

/// What the trajectory records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Checkpoints per decade of steps (log spacing); step 0 and the last step are
    /// always recorded.
    pub checkpoints_per_decade: u32,
}

/// A named embedded configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// The paper's balanced setting, Figure 3(a): the default.
    Balanced,
    /// Large noise (harmful overfitting), Figure 3(b).
    LargeNoise,
    /// Large signal (no overfitting), Figure 3(c).
    LargeSignal,
    /// The label-noise sweep setting (d = 6000, ||mu|| = 100, rho = 0.05, n = 100).
    LabelNoiseSweep,
    /// The official code as of 2025: p and W trained jointly from a Kaiming-uniform W.
    OfficialFinal,
}

impl Preset {
    /// All presets.
    pub const ALL: [Preset; 5] = [
        Preset::Balanced,
        Preset::LargeNoise,
        Preset::LargeSignal,
        Preset::LabelNoiseSweep,
        Preset::OfficialFinal,
    ];

    /// The preset's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Balanced => "balanced",
            Preset::LargeNoise => "large-noise",
            Preset::LargeSignal => "large-signal",
            Preset::LabelNoiseSweep => "label-noise-sweep",
            Preset::OfficialFinal => "official-final",
        }
    }

    /// Look a preset up by name.
    pub fn from_name(name: &str) -> Result<Preset> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| {
                let names: Vec<_> = Preset::ALL.iter().map(|p| p.name()).collect();
                Error::argument(
                    "preset",
                    format!("unknown preset `{name}` (known: {})", names.join(", ")),
                )
            })
    }

    /// The preset's TOML overlay text.
    pub fn toml(self) -> &'static str {
        match self {
            Preset::Balanced => BALANCED_TOML,
            Preset::LargeNoise => include_str!("presets/large_noise.toml"),
            Preset::LargeSignal => include_str!("presets/large_signal.toml"),
            Preset::LabelNoiseSweep => include_str!("presets/label_noise_sweep.toml"),
            Preset::OfficialFinal => include_str!("presets/official_final.toml"),
        }
    }

    /// The preset as a validated config.
    pub fn config(self) -> Config {
        Config::from_toml_str(self.toml(), Path::new(self.name()))
            .expect("embedded presets are valid (tested)")
    }
}

const BALANCED_TOML: &str = include_str!("presets/balanced.toml");

impl Default for Config {
    /// The paper's balanced setting (`src/presets/balanced.toml`).
    fn default() -> Self {
        let table: toml::Table = toml::from_str(BALANCED_TOML).expect("embedded default parses");
        table.try_into().expect("embedded default is complete")
    }
}

/// Deep-merge `overlay` into `base` (tables merge key by key, other values replace).
fn merge(base: &mut toml::Table, overlay: toml::Table) {
    for (key, value) in overlay {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(key, v);
            }
        }
    }
}

impl Config {
    /// Parse a TOML overlay on the default config and validate it.
    ///
    /// `origin` names the source in error messages.
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<Config> {
        Config::from_toml_str_over(text, origin, BALANCED_TOML)
    }

    /// Parse a TOML overlay on a preset and validate it.
    pub fn from_toml_str_over_preset(text: &str, origin: &Path, preset: Preset) -> Result<Config> {
        let mut base: toml::Table = toml::from_str(BALANCED_TOML).expect("embedded default parses");
        let preset_table: toml::Table = toml::from_str(preset.toml()).expect("presets parse");
        merge(&mut base, preset_table);
        let base_text = toml::to_string(&base).expect("table serialises");
        Config::from_toml_str_over(text, origin, &base_text)
    }

    fn from_toml_str_over(text: &str, origin: &Path, base: &str) -> Result<Config> {
        let parse_err = |message: String| Error::Parse {
            what: "config",
            path: origin.to_path_buf(),
            message,
        };
        let overlay: toml::Table = toml::from_str(text).map_err(|e| parse_err(e.to_string()))?;
        let mut table: toml::Table = toml::from_str(base).expect("embedded default parses");
        merge(&mut table, overlay);
        let config: Config = Config::deserialize(toml::Value::Table(table))
            .map_err(|e| parse_err(e.to_string().trim_end().to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// The config as TOML text (round-trips through [`Config::from_toml_str`]).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("config serialises")
    }

    /// Sequence length T.
    pub fn tokens(&self) -> usize {
        self.layout.tokens
    }

    /// Number of training labels flipped under [`FlipRule::Exact`]: ceil(eta n).
    ///
    /// eta n is rounded to the nearest integer first when it is within 1e-9 of it, so
    /// that the decimal intent of eta (0.1 * 30 = 3, not 4) wins over binary rounding.
    pub fn exact_flip_count(&self) -> usize {
        let x = self.eta * self.n_train as f64;
        let r = x.round();
        if (x - r).abs() <= 1e-9 * x.max(1.0) {
            r as usize
        } else {
            x.ceil() as usize
        }
    }

    /// Bytes the data set (train and test tokens) and a dense W would take (saturating
    /// at `u64::MAX`; [`Config::data_gib`] gives the size past it).
    pub fn data_bytes(&self) -> u64 {
        let tokens = (self.n_train as u128 + self.n_test as u128)
            .saturating_mul(self.layout.tokens as u128)
            .saturating_mul(self.d as u128);
        let w = match self.dense_w() {
            true => (self.d as u128).saturating_mul(self.d as u128),
            false => 0,
        };
        tokens
            .saturating_add(w)
            .saturating_mul(8)
            .min(u64::MAX as u128) as u64
    }

    /// [`Config::data_bytes`] in GiB, computed in f64 so that it does not saturate (for
    /// messages).
    pub fn data_gib(&self) -> f64 {
        let tokens =
            (self.n_train as f64 + self.n_test as f64) * self.layout.tokens as f64 * self.d as f64;
        let w = match (self.mode, self.init.w) {
            (Mode::P, WInit::Identity) => 0.0,
            _ => self.d as f64 * self.d as f64,
        };
        (tokens + w) * 8.0 / (1u64 << 30) as f64
    }

    /// Check every field's domain; the error names the first bad field.
    pub fn validate(&self) -> Result<()> {
        let finite = |field: &str, v: f64| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(Error::config(field, format!("must be finite, got {v}")))
            }
        };
        if self.d == 0 {
            return Err(Error::config("d", "must be at least 1"));
        }
        if self.signals == Signals::Axis && self.d < 2 {
            return Err(Error::config(
                "d",
                "axis signals mu_{+1} = ||mu|| e_1, mu_{-1} = ||mu|| e_2 need d >= 2",
            ));
        }
        if self.signals == Signals::Random && self.d < 2 {
            return Err(Error::config("d", "two orthogonal signals need d >= 2"));
        }
        crate::seeds::check("seed", self.seed)?;
        self.optimizer.validate(self.n_train, self.method)?;
        if let Some(f) = &self.factorised {
            f.validate(self)?;
        }
        if let Some(p) = &self.protocol {
            let classes = if self.model.is_multiclass() {
                self.model.classes
            } else {
                0
            };
            p.validate(classes)?;
        }
        let l = &self.layout;
        if l.tokens == 0 {
            return Err(Error::config("layout.tokens", "must be at least 1"));
        }
        // summed in u128: four usize sizes cannot overflow it, so sizes whose sum wraps
        // usize (and would equal `tokens` modulo 2^64) are refused, not accepted
        let sum: u128 = l.sizes().iter().map(|&s| s as u128).sum();
        if sum != l.tokens as u128 {
            return Err(Error::config(
                "layout",
                format!(
                    "group sizes relevant + weak_same + weak_opposite + irrelevant = {} + {} + {} + {} = {sum} must equal tokens = {}",
                    l.relevant, l.weak_same, l.weak_opposite, l.irrelevant, l.tokens
                ),
            ));
        }
        if self.n_train == 0 {
            return Err(Error::config("n_train", "must be at least 1"));
        }
        if self.n_test == 0 {
            return Err(Error::config("n_test", "must be at least 1"));
        }
        finite("mu_norm", self.mu_norm)?;
        if self.mu_norm <= 0.0 {
            return Err(Error::config("mu_norm", "must be > 0 (nu divides by it)"));
        }
        finite("rho", self.rho)?;
        if !(0.0..=1.0).contains(&self.rho) {
            return Err(Error::config(
                "rho",
                format!(
                    "the weak-relevance factor must lie in [0, 1], got {}",
                    self.rho
                ),
            ));
        }
        if self.mu_norm > MAX_MU_NORM || self.sigma > MAX_MU_NORM {
            return Err(Error::config(
                "mu_norm",
                format!(
                    "||mu|| and sigma must be at most {MAX_MU_NORM:e} (got {:e}, {:e}): scores \
                     x.q grow like their square times |q| and overflow f64 long before 1e154",
                    self.mu_norm, self.sigma
                ),
            ));
        }
        finite("sigma", self.sigma)?;
        if self.sigma < 0.0 {
            return Err(Error::config("sigma", "must be >= 0"));
        }
        finite("eta", self.eta)?;
        if !(0.0..1.0).contains(&self.eta) {
            return Err(Error::config(
                "eta",
                format!("must lie in [0, 1), got {}", self.eta),
            ));
        }
        finite("step_size", self.step_size)?;
        if self.step_size <= 0.0 {
            return Err(Error::config("step_size", "must be > 0"));
        }
        if self.steps > MAX_STEPS {
            return Err(Error::config(
                "steps",
                format!("must be at most {MAX_STEPS}"),
            ));
        }
        finite("init.p_scale", self.init.p_scale)?;
        if self.init.p_scale < 0.0 {
            return Err(Error::config("init.p_scale", "must be >= 0"));
        }
        let p_zero = self.init.p == PInit::Zero || self.init.p_scale == 0.0;
        // without biases, p = 0 gives u = W_Q p = 0: W_K's gradient u (dL/dq)^T and W_Q's
        // (W_K dL/dq) p^T are 0, and p's W_Q^T W_K dL/dq is 0 too when p is fixed or W_Q(0)
        // = 0 (the zero-query init): nothing ever moves
        let stuck = |f: &&crate::model::factorised::Section| {
            p_zero
                && !f.bias
                && (!f.train_p || f.init == crate::model::factorised::QkInit::ZeroQuery)
        };
        if let Some(f) = self.factorised.as_ref().filter(stuck) {
            return Err(Error::config(
                "init.p",
                format!(
                    "[factorised] without biases from p = 0{}: u = W_Q p = 0, so W_K's gradient \
                     u (dL/dq)^T and W_Q's (W_K dL/dq) p^T are 0{}, and nothing moves at any \
                     step. Set init.p = \"gaussian\" with init.p_scale > 0, or bias = true",
                    if f.train_p {
                        " and W_Q(0) = 0"
                    } else {
                        " with p fixed"
                    },
                    if f.train_p {
                        ", as is p's W_Q^T W_K dL/dq"
                    } else {
                        ""
                    }
                ),
            ));
        }
        if self.mode == Mode::W && p_zero && self.factorised.is_none() {
            return Err(Error::config(
                "init.p",
                "mode = \"W\" trains W with p fixed; p = 0 gives dL/dW = p (dL/dq)^T = 0. \
                 Set init.p = \"gaussian\" with init.p_scale > 0",
            ));
        }
        if self.mode == Mode::Joint
            && (self.init.p == PInit::Zero || self.init.p_scale == 0.0)
            && self.optimizer.is_normalized()
            && self.optimizer.eps == 0.0
        {
            return Err(Error::config(
                "optimizer.eps",
                "normalised GD with eps = 0 divides each block's gradient by its norm, and in \
                 joint mode from p(0) = 0 the gradient with respect to W at step 0, \
                 p (dL/dq)^T, is exactly 0: the step alpha G / ||G|| is undefined there. Set \
                 optimizer.eps > 0, or init.p = \"gaussian\" with init.p_scale > 0",
            ));
        }
        if self.method == Method::Span && self.formulation == Formulation::Naive {
            return Err(Error::config(
                "method",
                "method = \"span\" needs formulation = \"stable\": the naive gradient's \
                 error is a d-space cancellation that the span step does not perform",
            ));
        }
        self.validate_model()?;
        self.validate_direction()?;
        if !(1..=MAX_CHECKPOINTS_PER_DECADE).contains(&self.record.checkpoints_per_decade) {
            return Err(Error::config(
                "record.checkpoints_per_decade",
                format!(
                    "must lie in 1..={MAX_CHECKPOINTS_PER_DECADE} (every step is recorded from \
                     {MAX_CHECKPOINTS_PER_DECADE} per decade on)"
                ),
            ));
        }
        self.check_limits()
    }

    /// The size limits, checked after every key's domain (bad input, exit 2, is found
    /// first), in one fixed order whatever the other keys hold: the protocol's pool in
    /// memory, the data set in memory, then the protocol's seeds and phase-1 work
    /// (`Protocol::check_limits`). Each is a refusal ([`Error::TooLarge`], exit 3) naming
    /// the largest of the sizes that make it (`n_test` where n_test is the largest), so
    /// one over-limit input gets one answer.
    fn check_limits(&self) -> Result<()> {
        let sizes = [
            ("d", self.d),
            ("layout.tokens", self.layout.tokens),
            ("n_train", self.n_train),
            ("n_test", self.n_test),
        ];
        if let Some(p) = &self.protocol {
            // the pool: the clean block, the noisy block and the test set, all held at once
            let pool = (p.n_clean as u128 + self.n_train as u128 + self.n_test as u128)
                .saturating_mul(self.layout.tokens as u128)
                .saturating_mul(self.d as u128)
                .saturating_mul(8);
            if pool > MAX_DATA_BYTES as u128 {
                let mut with_pool = sizes.to_vec();
                with_pool.push(("protocol.n_clean", p.n_clean));
                return Err(Error::TooLarge {
                    field: largest(&with_pool).into(),
                    reason: format!(
                        "the pool (n_clean + n_train + n_test) * tokens * d = ({} + {} + {}) \
                         * {} * {} values needs {:.3e} bytes, more than the limit of {} GiB",
                        p.n_clean,
                        self.n_train,
                        self.n_test,
                        self.layout.tokens,
                        self.d,
                        pool as f64,
                        MAX_DATA_BYTES >> 30
                    ),
                });
            }
        }
        let bytes = self.data_bytes();
        if bytes > MAX_DATA_BYTES {
            return Err(Error::TooLarge {
                field: largest(&sizes).into(),
                reason: format!(
                    "the data set (n_train + n_test) * tokens * d{}{} needs {} GiB, more than the limit of {} GiB",
                    self.data_sizes_text(),
                    if self.dense_w() {
                        " plus d * d for W"
                    } else {
                        ""
                    },
                    match self.data_gib() {
                        g if g < 1e6 => format!("{g:.2}"),
                        g => format!("{g:.3e}"),
                    },
                    MAX_DATA_BYTES >> 30
                ),
            });
        }
        if let Some(p) = &self.protocol {
            let classes = self.model.classes;
            p.check_limits(classes, self.d)?;
        }
        Ok(())
    }

    /// The `[direction]` section: the binary model, a known pattern name, or one token
    /// index below T per training sample.
    fn validate_direction(&self) -> Result<()> {
        let Some(dir) = &self.direction else {
            return Ok(());
        };
        if self.model.is_multiclass() {
            return Err(Error::config(
                "direction",
                "direction tracking compares with the attention SVM of the binary model; \
                 remove [direction] for a K-class run",
            ));
        }
        match &dir.pattern {
            PatternSpec::Named(s) if s == "theorem" || s == "optimal" => Ok(()),
            PatternSpec::Named(s) => Err(Error::config(
                "direction.pattern",
                format!("must be \"theorem\", \"optimal\" or a list of token indices, got {s:?}"),
            )),
            PatternSpec::Given(v) if v.len() != self.n_train => Err(Error::config(
                "direction.pattern",
                format!(
                    "has {} entries; the training set has {} samples",
                    v.len(),
                    self.n_train
                ),
            )),
            PatternSpec::Given(v) => match v.iter().position(|a| *a >= self.layout.tokens) {
                Some(i) => Err(Error::config(
                    "direction.pattern",
                    format!(
                        "entry {i} is {}, not a token index below T = {}",
                        v[i], self.layout.tokens
                    ),
                )),
                None => Ok(()),
            },
        }
    }

    /// `[model] prompt = "in-sequence"` against the rest: the direct engine in the stable
    /// formulation, full batch, no direction tracking (what is implemented for a prompt
    /// that moves with p; everything else is refused, not computed wrongly).
    fn validate_prompt(&self) -> Result<()> {
        if !self.model.in_sequence() {
            return Ok(());
        }
        let why = |key: &str, what: &str| {
            Err(Error::config(
                key,
                format!("[model] prompt = \"in-sequence\" {what}"),
            ))
        };
        if self.method == Method::Span {
            return why(
                "method",
                "needs the direct step: the span step's Gram matrices assume fixed tokens, \
                 and the prompt token p moves (set method = \"direct\" or \"auto\")",
            );
        }
        if self.formulation == Formulation::Naive {
            return why(
                "formulation",
                "is implemented in the stable formulation only (the naive gradient's d-space \
                 form has no prompt row)",
            );
        }
        if self.optimizer.minibatch(self.n_train).is_some() {
            return why(
                "optimizer.batch",
                "is implemented for full-batch steps only (remove optimizer.batch)",
            );
        }
        if self.direction.is_some() {
            return why(
                "direction",
                "has no attention SVM (the SVM's tokens are fixed; remove [direction])",
            );
        }
        Ok(())
    }

    /// The `[model]` section against the rest: K in range, d >= K signals, K - 1 weakly
    /// relevant tokens per multiple (one per other class), the stable formulation.
    fn validate_model(&self) -> Result<()> {
        self.validate_prompt()?;
        let m = &self.model;
        let k = m.classes;
        if !m.is_multiclass() {
            if k != 2 {
                return Err(Error::config(
                    "model.classes",
                    format!(
                        "the binary token-selection model has 2 classes (got {k}); set \
                         model.kind = \"multiclass\" for K classes"
                    ),
                ));
            }
            return Ok(());
        }
        if !(2..=MAX_CLASSES).contains(&k) {
            return Err(Error::config(
                "model.classes",
                format!("must lie in 2..={MAX_CLASSES}, got {k}"),
            ));
        }
        if self.d < k {
            return Err(Error::config(
                "d",
                format!(
                    "K = {k} orthogonal class signals need d >= {k}, got d = {}",
                    self.d
                ),
            ));
        }
        if !self.layout.weak_opposite.is_multiple_of(k - 1) {
            return Err(Error::config(
                "layout.weak_opposite",
                format!(
                    "the multi-class data has one weakly relevant token per other class: \
                     weak_opposite must be a multiple of K - 1 = {} (got {})",
                    k - 1,
                    self.layout.weak_opposite
                ),
            ));
        }
        if self.formulation == Formulation::Naive {
            return Err(Error::config(
                "formulation",
                "the multi-class model trains in the stable formulation only (its naive \
                 gradient is replayed by judge as a candidate explanation, not a run's \
                 formulation)",
            ));
        }
        Ok(())
    }

    /// The sizes (n_train + n_test) * tokens * d, as in the message of the data limit.
    fn data_sizes_text(&self) -> String {
        format!(
            " = ({} + {}) * {} * {}",
            self.n_train, self.n_test, self.layout.tokens, self.d
        )
    }

    /// Whether the run stores W as a dense d x d matrix: anything but W = I in p-mode,
    /// and never with a `[factorised]` map (which has no W).
    pub fn dense_w(&self) -> bool {
        !(self.mode == Mode::P && self.init.w == WInit::Identity) && self.factorised.is_none()
    }
}

/// The key of the largest size in `sizes` (the first of equal ones): the one a size
/// limit names.
fn largest(sizes: &[(&'static str, usize)]) -> &'static str {
    sizes
        .iter()
        .fold(sizes[0], |best, s| if s.1 > best.1 { *s } else { best })
        .0
}

#[cfg(test)]
mod tests {
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
