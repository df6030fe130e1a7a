//! The sections' structs and enums of a [`Config`](super::Config) and their serde: `[direction]`,
//! `[model]`, `[layout]`, the data's signals and labels, the mode, method and
//! formulation, `[init]` and `[record]`.

use serde::{Deserialize, Serialize};

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

/// Which model a run trains: the `[model]` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// The model (default: the binary token-selection model).
    #[serde(default)]
    pub kind: ModelKind,
    /// Number of classes K of the multi-class model (2 ..= [`MAX_CLASSES`](super::MAX_CLASSES)); must be 2
    /// (the default) for the binary model.
    #[serde(default = "two")]
    pub classes: usize,
    /// Where the tunable token p sits (`prompt`): a separate query (`"separate"`, the
    /// paper's model and the default, not serialised) or prepended to the sequence as
    /// position 0 (`"in-sequence"`, the rebuttal's bridge A''1; proofs-notes/prompt.md).
    #[serde(default, skip_serializing_if = "Prompt::is_separate")]
    pub prompt: Prompt,
    /// The encoder's MLP width m (`kind = "encoder"` only; absent: m = d).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlp: Option<usize>,
    /// The encoder's residual connections (`kind = "encoder"` only; absent: true, the
    /// official `use_skip_connection`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub residual: Option<bool>,
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
            mlp: None,
            residual: None,
        }
    }
}

impl ModelSpec {
    /// True for the default (the binary token-selection model).
    pub fn is_default(&self) -> bool {
        *self == ModelSpec::default()
    }

    /// True for a network model (`model::network`: a model that owns every parameter,
    /// trained by the block trainer), such as the encoder.
    pub fn is_network(&self) -> bool {
        self.kind == ModelKind::Encoder
    }

    /// The encoder's MLP width m (`mlp`, or d when absent).
    pub fn mlp_width(&self, d: usize) -> usize {
        self.mlp.unwrap_or(d)
    }

    /// The encoder's parameter count at token dimension `d`: 3 d^2 (W_qkv), 2 m d (the
    /// MLP's weights), m and d (their biases), 6 d (three LayerNorms), d and 1 (the head),
    /// d (the cls token): 3 d^2 + 2 m d + m + 9 d + 1 in all, saturating (20,020,001 at
    /// d = m = 2000, as the official code's).
    pub fn encoder_parameters(&self, d: usize) -> u64 {
        let (d, m) = (d as u64, self.mlp_width(d) as u64);
        [
            d.saturating_mul(d).saturating_mul(3),
            m.saturating_mul(d).saturating_mul(2),
            m,
            d.saturating_mul(9),
            1,
        ]
        .into_iter()
        .fold(0u64, u64::saturating_add)
    }

    /// True for the multi-class model.
    pub fn is_multiclass(&self) -> bool {
        self.kind == ModelKind::Multiclass
    }

    /// Whether `y` is a label of this model: +1 or -1, or a class index below K.
    pub fn is_label(&self, y: i8) -> bool {
        match self.is_multiclass() {
            true => (0..i64::try_from(self.classes).unwrap_or(i64::MAX)).contains(&i64::from(y)),
            false => y == 1 || y == -1,
        }
    }

    /// The labels of this model, in words (for messages).
    pub fn labels(&self) -> String {
        match self.is_multiclass() {
            true => format!("a class index 0..{}", self.classes.saturating_sub(1)),
            false => "+1 or -1".to_string(),
        }
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
    /// The authors' one-layer Transformer encoder (SPEC section 18, `model::encoder`):
    /// every parameter trained, labels in {+1, -1}, `[model] mlp` and `residual`.
    Encoder,
}

impl ModelKind {
    /// The name in configs and outputs.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::TokenSelection => "token-selection",
            ModelKind::Multiclass => "multiclass",
            ModelKind::Encoder => "encoder",
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
    /// This (binary) layout for the K-class model of SPEC section 14: each weakly
    /// relevant token of the opposite class becomes one per other class (`weak_opposite`
    /// times K - 1), so T grows by (K - 2) `weak_opposite` tokens; K = 2 keeps it. The
    /// default layout of a K-class config that sets no `[layout]`, and `cost --classes`'s.
    /// Saturating: an absurd K gives an absurd (invalid) layout, never a wrapped one.
    pub fn for_classes(self, k: usize) -> Layout {
        let extra = self.weak_opposite.saturating_mul(k.saturating_sub(2));
        Layout {
            weak_opposite: self.weak_opposite.saturating_mul(k.saturating_sub(1)),
            tokens: self.tokens.saturating_add(extra),
            ..self
        }
    }

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
