//! The `[optimizer]` section: the step rule, its kind and schedule, its names in
//! outputs and its domain checks.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

use super::Method;

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
    pub(super) fn validate(&self, n_train: usize, method: Method) -> Result<()> {
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
