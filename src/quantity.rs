//! The one vocabulary of the quantities that runs record and analyses compare: one name
//! each, used by compare, judge, the external-trajectory format, the saturation sweep
//! and every report.
//!
//! For a run at step t (the forward pass at the parameters after t updates), with
//! q = W^T p:
//!
//! | name | shape | what |
//! | --- | --- | --- |
//! | `p` | (d) | the trainable token p |
//! | `W_Q` | (m, d) | the factorised map's query weight (`[factorised]` only) |
//! | `W_K` | (m, d) | the factorised map's key weight (`[factorised]` only) |
//! | `b_Q` | (m) | the factorised map's query bias (`[factorised]` with `bias` only) |
//! | `b_K` | (m) | the factorised map's key bias (`[factorised]` with `bias` only; see below) |
//! | `q` | (d) | q = W^T p (W_K^T (W_Q p + b_Q) for `[factorised]`) |
//! | `W` | (d, d) | the key-query matrix (scores = X W^T p); not a quantity of a `[factorised]` config |
//! | `scores` | (n, T) | scores z_t = <x_t, q> of the training tokens |
//! | `attention` | (n, T) | softmax of the scores |
//! | `rest` | (n) | 1 - s_top of each training sample |
//! | `output` | (n), or (n, K) | the model's outputs of each training sample: the binary f, or a K-class model's f_0, ..., f_{K-1} |
//! | `grad_q` | (d) | the gradient with respect to q: dL/dq (df/dq for one sequence in the saturation sweep) |
//! | `loss` | () | the empirical risk (logistic; the cross-entropy for K classes) |
//!
//! For a `[factorised]` config (SPEC section 17: z_it = (W_Q p + b_Q)^T (W_K x_it +
//! b_K)) `p` is the query token (a block: trained with `train_p`), `q` is the effective
//! query W_K^T (W_Q p + b_Q) that the attention core reads (z_it = <x_it, q> + <b_K, u>
//! with u = W_Q p + b_Q), `grad_q` is dL/dq of that core, and `scores` include the
//! shift <b_K, u> that every score of a sample carries. `W` has no meaning there (with
//! biases no d x d matrix gives the scores; without them W_Q^T W_K would, but the run
//! never forms it): it is refused ([`Quantity::missing`]); the blocks `W_Q`, `W_K`,
//! `b_Q`, `b_K` are the quantities, named as the blocks and their NPY exports
//! (`W_Q0.npy`, ...), each measured normwise as W is. tokensel keeps `b_K` exactly at its
//! initial value (its exact gradient is 0: a shift of every score of a sample, which the
//! softmax cancels); an implementation that forms b_K's gradient moves it by rounding
//! noise, measured as any other block's error (normwise, against the twin's exact b_K).

use serde::{Deserialize, Serialize};

use crate::arith::Arith;
use crate::config::Config;
use crate::model::{AnyModel, Model};
use crate::train::{Engine, Trainer};

/// The values a quantity can take (the exact value; a rounded one may reach the ends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    /// Any real number.
    Real,
    /// [0, 1] (a softmax share).
    Unit,
    /// [0, +inf) (a loss).
    NonNegative,
}

impl Range {
    /// Whether `v` lies in the range.
    pub fn contains(self, v: f64) -> bool {
        match self {
            Range::Real => v.is_finite(),
            Range::Unit => (0.0..=1.0).contains(&v),
            Range::NonNegative => v >= 0.0 && v.is_finite(),
        }
    }
}

/// How a quantity's error against a reference is measured (`compare`, and the
/// relative errors of its reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// The largest relative error of an entry, max_k |a_k - b_k| / |b_k|.
    Componentwise,
    /// The relative error of the whole vector, ||a - b|| / ||b||.
    Normwise,
    /// Per training sample (a row of T entries), max_t |a_t - b_t| / max_t |b_t|; the
    /// largest over the samples.
    SampleNormwise,
}

/// A quantity of the model, by its one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Quantity {
    /// The trainable token p (d).
    #[serde(rename = "p")]
    P,
    /// The factorised map's query weight W_Q (m, d) (the blocks come before q, which
    /// they fix: a departure in a block is named by the block).
    #[serde(rename = "W_Q")]
    WQ,
    /// The factorised map's key weight W_K (m, d).
    #[serde(rename = "W_K")]
    WK,
    /// The factorised map's query bias b_Q (m).
    #[serde(rename = "b_Q")]
    BQ,
    /// The factorised map's key bias b_K (m): kept exactly at its initial value by
    /// tokensel (its exact gradient is 0).
    #[serde(rename = "b_K")]
    BK,
    /// q = W^T p (d).
    #[serde(rename = "q")]
    Q,
    /// The key-query matrix W (d, d).
    #[serde(rename = "W")]
    W,
    /// Scores of the training tokens (n, T).
    #[serde(rename = "scores")]
    Scores,
    /// Attention: the softmax of each sample's scores (n, T).
    #[serde(rename = "attention")]
    Attention,
    /// 1 - s_top of each training sample (n).
    #[serde(rename = "rest")]
    Rest,
    /// The outputs of each training sample: the binary f (n), a K-class model's K
    /// outputs f_c (n, K).
    #[serde(rename = "output")]
    Output,
    /// The gradient with respect to q (d).
    #[serde(rename = "grad_q")]
    GradQ,
    /// The empirical risk (a scalar).
    #[serde(rename = "loss")]
    Loss,
}

impl Quantity {
    /// Every quantity, in report order.
    pub const ALL: [Quantity; 13] = [
        Quantity::P,
        Quantity::WQ,
        Quantity::WK,
        Quantity::BQ,
        Quantity::BK,
        Quantity::Q,
        Quantity::W,
        Quantity::Scores,
        Quantity::Attention,
        Quantity::Rest,
        Quantity::Output,
        Quantity::GradQ,
        Quantity::Loss,
    ];

    /// Its one name (keys in files and reports).
    pub fn name(self) -> &'static str {
        match self {
            Quantity::P => "p",
            Quantity::Q => "q",
            Quantity::W => "W",
            Quantity::WQ => "W_Q",
            Quantity::WK => "W_K",
            Quantity::BQ => "b_Q",
            Quantity::BK => "b_K",
            Quantity::Scores => "scores",
            Quantity::Attention => "attention",
            Quantity::Rest => "rest",
            Quantity::Output => "output",
            Quantity::GradQ => "grad_q",
            Quantity::Loss => "loss",
        }
    }

    /// The quantity with this name.
    pub fn from_name(name: &str) -> Option<Quantity> {
        Quantity::ALL.into_iter().find(|q| q.name() == name)
    }

    /// Every name, comma separated (for messages).
    pub fn names() -> String {
        Quantity::ALL.map(Quantity::name).join(", ")
    }

    /// The parameter block this quantity is (`W_Q`, `W_K`, `b_Q`, `b_K`: the factorised
    /// map's blocks, by their names), `None` for the others.
    pub fn block(self) -> Option<&'static str> {
        matches!(
            self,
            Quantity::WQ | Quantity::WK | Quantity::BQ | Quantity::BK
        )
        .then(|| self.name())
    }

    /// `None` where a run of `cfg` has this quantity, else why not (for messages): the
    /// blocks `W_Q`, `W_K` (and `b_Q`, `b_K`) exist only in a `[factorised]` config
    /// (the biases only with `bias = true`), and `W` does not exist there (no d x d
    /// matrix gives its scores; module docs).
    pub fn missing(self, cfg: &Config) -> Option<String> {
        match (self, cfg.factorised) {
            (Quantity::W, Some(_)) => Some(
                "a [factorised] config has no W: its scores are (W_Q p + b_Q)^T (W_K x + b_K), \
                 which no d x d matrix W gives with biases (and which the run never forms as \
                 W_Q^T W_K without them); record the blocks W_Q, W_K (b_Q, b_K) and q instead"
                    .into(),
            ),
            (Quantity::BQ | Quantity::BK, Some(f)) if !f.bias => Some(format!(
                "the config's [factorised] section has bias = false: there is no `{}`",
                self.name()
            )),
            (q, None) if q.block().is_some() => Some(format!(
                "`{}` is a block of the factorised query map, and this config has no \
                 [factorised] section (its parameters are p and W)",
                q.name()
            )),
            _ => None,
        }
    }

    /// Shape of one step's value in a run of `cfg`; the outputs per sample are the
    /// model's ([`Model::outputs`]: (n) for the binary model, (n, K) for K classes). A
    /// factorised block's shape in a config without `[factorised]` is (0) (it has no
    /// such quantity: [`Quantity::missing`]).
    pub fn shape(self, cfg: &Config) -> Vec<usize> {
        let (n, t, d) = (cfg.n_train, cfg.tokens(), cfg.d);
        let m = cfg.factorised.map_or(0, |f| f.m);
        match self {
            Quantity::P | Quantity::Q | Quantity::GradQ => vec![d],
            Quantity::W => vec![d, d],
            Quantity::WQ | Quantity::WK => vec![m, d],
            Quantity::BQ | Quantity::BK => vec![m],
            Quantity::Scores | Quantity::Attention => vec![n, t],
            Quantity::Rest => vec![n],
            Quantity::Output => match AnyModel::of(cfg).outputs() {
                1 => vec![n],
                k => vec![n, k],
            },
            Quantity::Loss => vec![],
        }
    }

    /// The values it takes ([`Range`]): attention and rest are softmax shares, the loss
    /// is nonnegative.
    pub fn range(self) -> Range {
        match self {
            Quantity::Attention | Quantity::Rest => Range::Unit,
            Quantity::Loss => Range::NonNegative,
            _ => Range::Real,
        }
    }

    /// How its error is measured ([`Measure`]): the d-space vectors normwise, the scores
    /// normwise per sample, the rest entry by entry.
    pub fn measure(self) -> Measure {
        match self {
            Quantity::P
            | Quantity::Q
            | Quantity::W
            | Quantity::WQ
            | Quantity::WK
            | Quantity::BQ
            | Quantity::BK
            | Quantity::GradQ => Measure::Normwise,
            Quantity::Scores => Measure::SampleNormwise,
            Quantity::Attention | Quantity::Rest | Quantity::Output | Quantity::Loss => {
                Measure::Componentwise
            }
        }
    }

    /// True for the d-space quantities (p, q, W, grad_q), which a span trainer rebuilds
    /// from its coefficients.
    pub fn in_d_space(self) -> bool {
        matches!(
            self,
            Quantity::P | Quantity::Q | Quantity::W | Quantity::GradQ
        )
    }
}

impl<A: Arith> Trainer<'_, A> {
    /// The value of quantity `q` at the trainer's current step (the last forward and
    /// backward pass), in its arithmetic, row-major in the order of [`Quantity::shape`]:
    /// the one accessor from a quantity to a trainer's value (compare, judge). `output`
    /// is the model's outputs of each sample ([`crate::model::Sample::model_outputs`]: the
    /// binary f, or a K-class model's K outputs). `None` for `W` where the trainer keeps
    /// W = I without storing it, and for a quantity the config does not have
    /// ([`Quantity::missing`]: a factorised block without `[factorised]`). p, q, W and
    /// grad_q are rebuilt by a span trainer (see [`Trainer::params`] for the cost); the
    /// factorised blocks are the direct engine's (the only engine of `[factorised]`).
    pub fn quantity(&self, q: Quantity) -> Option<Vec<A::Real>> {
        Some(match q {
            Quantity::P => self.p(),
            Quantity::Q => self.q(),
            Quantity::W => return self.params().1,
            Quantity::Scores => self.scores.clone(),
            Quantity::Attention => self.attention.clone(),
            Quantity::Rest => self
                .samples
                .iter()
                .map(|s| s.softmax.rest.clone())
                .collect(),
            Quantity::Output => self
                .samples
                .iter()
                .flat_map(|s| s.model_outputs().iter().cloned())
                .collect(),
            Quantity::GradQ => self.grad_q(),
            Quantity::Loss => vec![self.loss.clone()],
            Quantity::WQ | Quantity::WK | Quantity::BQ | Quantity::BK => {
                let Engine::Direct(e) = &self.engine else {
                    return None;
                };
                let b = &e.fact()?.blocks;
                let name = q.name();
                return b.has(name).then(|| b.get(name).to_vec());
            }
        })
    }
}

impl std::fmt::Display for Quantity {
    /// The name, padded to the formatter's width.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are unique, round-trip, and are what serde writes.
    #[test]
    fn one_name_each() {
        for q in Quantity::ALL {
            assert_eq!(Quantity::from_name(q.name()), Some(q));
            assert_eq!(serde_json::to_value(q).unwrap(), q.name());
            assert_eq!(format!("{q:<10}|"), format!("{:<10}|", q.name()));
        }
        assert_eq!(Quantity::from_name("z"), None);
    }

    /// A factorised config's blocks `W_Q`, `W_K`, `b_Q`, `b_K` are the map's own (shape
    /// and values after an update), `W` is not a quantity there, and the blocks are not
    /// quantities of a config without `[factorised]`.
    #[test]
    fn the_factorised_blocks_are_the_maps() {
        use crate::arith::F64;
        use crate::config::Mode;
        use crate::data::Dataset;
        use crate::model::factorised::{QkInit, Section};
        let mut cfg = Config {
            d: 24,
            n_train: 6,
            n_test: 4,
            steps: 3,
            mode: Mode::W,
            ..Config::default()
        };
        cfg.factorised = Some(Section {
            m: 5,
            bias: true,
            train_p: false,
            init: QkInit::Linear,
            scale: None,
        });
        cfg.validate().unwrap();
        let data = Dataset::generate(&cfg);
        let mut tr = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
        tr.forward_backward().unwrap();
        tr.update().unwrap();
        tr.forward_backward().unwrap();
        let blocks = tr.blocks();
        for q in [Quantity::WQ, Quantity::WK, Quantity::BQ, Quantity::BK] {
            assert_eq!(q.missing(&cfg), None);
            let v = tr.quantity(q).unwrap();
            let (_, shape, want) = blocks.iter().find(|(n, _, _)| *n == q.name()).unwrap();
            assert_eq!(&q.shape(&cfg), shape, "{q}");
            assert_eq!(&v, want, "{q}");
        }
        assert!(Quantity::W.missing(&cfg).is_some());
        assert!(tr.quantity(Quantity::W).is_none());
        cfg.factorised = None;
        assert!(Quantity::WQ.missing(&cfg).is_some());
        assert_eq!(Quantity::W.missing(&cfg), None);
    }

    /// The accessor gives every quantity of a trainer its declared shape and range, in
    /// each mode and for the binary and the K = 3 model (`output`: n values, or n K),
    /// after a few steps (a wrong field, a margin for the outputs or a missing W fails).
    #[test]
    fn the_accessor_has_the_declared_shape_and_range() {
        use crate::arith::F64;
        use crate::config::{Mode, ModelKind, PInit, WInit};
        use crate::data::Dataset;
        for (mode, k) in [(Mode::P, 1), (Mode::W, 1), (Mode::Joint, 1), (Mode::W, 3)] {
            let mut cfg = Config {
                d: 24,
                n_train: 6,
                n_test: 4,
                steps: 3,
                mode,
                ..Config::default()
            };
            cfg.init.p = PInit::Gaussian;
            cfg.init.p_scale = 0.5;
            if mode != Mode::P {
                cfg.init.w = WInit::KaimingUniform;
            }
            if k > 1 {
                cfg.model.kind = ModelKind::Multiclass;
                cfg.model.classes = k;
                // one weak token of each other class (T grown accordingly)
                let extra = (k - 1) * cfg.layout.weak_opposite.max(1) - cfg.layout.weak_opposite;
                cfg.layout.weak_opposite += extra;
                cfg.layout.tokens += extra;
            }
            cfg.validate().unwrap();
            let data = Dataset::generate(&cfg);
            let mut tr = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
            tr.forward_backward().unwrap();
            for _ in 0..cfg.steps {
                tr.update().unwrap();
                tr.forward_backward().unwrap();
            }
            for q in Quantity::ALL {
                if q.missing(&cfg).is_some() {
                    assert!(tr.quantity(q).is_none(), "{q} {mode:?}: not the config's");
                    continue;
                }
                let Some(v) = tr.quantity(q) else {
                    assert_eq!((q, mode), (Quantity::W, Mode::P), "only p-mode keeps W = I");
                    continue;
                };
                let len: usize = q.shape(&cfg).iter().product();
                assert_eq!(v.len(), len, "{q} {mode:?} K = {k}");
                assert!(v.iter().all(|x| q.range().contains(*x)), "{q}: {v:?}");
            }
            let out = tr.quantity(Quantity::Output).unwrap();
            for (i, s) in tr.samples.iter().enumerate() {
                assert_eq!(&out[i * k..(i + 1) * k], s.model_outputs());
            }
        }
    }
}
