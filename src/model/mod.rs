//! Models as parts (DESIGN.md, SPEC section 14). Every model here is token selection by
//! softmax attention ([`attention`]: scores z = X W^T p, s = softmax(z), the softmax
//! gradient) followed by a fixed head and a loss; a model owns its head values, its
//! outputs, loss, backward pass to the scores and its predictions, written once over
//! [`Arith`] (so the f64 trainer, f32, the MPFR twin, the predictor and the balls all
//! run it), and declares how many outputs a sample has.
//!
//! - [`token_selection`]: the paper's binary model (f in R, logistic loss, labels +-1);
//! - [`multiclass`]: the multi-class model of the paper's Section F (f in R^K, softmax
//!   cross-entropy, labels in [0, K)).
//!
//! The query q of either is W^T p, or the factorised query map's W_K^T (W_Q p + b_Q)
//! ([`factorised`], the `[factorised]` section; its parameters are [`blocks`]).
//!
//! The trainer ([`crate::train`]) takes a model through [`Model`]; the engines (direct
//! and span step) see only the token coefficients c = dL/dz that a model's
//! [`Model::sample`] writes, so a new head or loss needs no new engine. [`AnyModel`] is
//! the config's choice (`[model] kind`).

use ndarray::ArrayView3;

use crate::arith::Arith;
use crate::config::{Config, Formulation, ModelKind};
use crate::data::Dataset;

pub(crate) mod attention;
pub(crate) mod blocks;
pub(crate) mod caps;
pub(crate) mod encoder;
pub(crate) mod factorised;
pub(crate) mod multiclass;
pub(crate) mod network;
pub(crate) mod ops;
pub(crate) mod query;
pub(crate) mod real_setting;
pub(crate) mod token_selection;

pub use attention::{Selection, Softmax, argmax, output, scores, softmax};
pub use multiclass::Multiclass;
pub use token_selection::{TokenSelection, grad_q, grad_q_naive};

/// One sample's results of a forward and backward pass.
#[derive(Debug, Clone)]
pub struct Sample<R> {
    /// Softmax summary (top token, 1 - s_top, score gap).
    pub softmax: Softmax<R>,
    /// The binary model's output f; a K-class model's margin f_Y - max_{c != Y} f_c of the
    /// observed class Y (positive exactly where Y is the predicted class).
    pub f: R,
    /// The factor of the token coefficients: binary, coef = l'(Y f) Y / n, so that
    /// c_t = coef s_t (g_t - f); K classes, 1 / n.
    pub coef: R,
    /// Loss term of this sample.
    pub loss: R,
    /// The K outputs f_c of a K-class model (empty for the binary one).
    pub outputs: Vec<R>,
    /// Working space a model may keep between steps (the K-class model's per-class and
    /// per-token intermediates, so a step allocates nothing); empty until first used,
    /// never read across steps.
    pub scratch: Vec<R>,
}

impl<R: Clone> Sample<R> {
    /// A zero sample of a model with `outputs` outputs, in `ar`.
    pub fn new<A: Arith<Real = R>>(ar: &A, outputs: usize) -> Self {
        Sample {
            softmax: Softmax::new(ar),
            f: ar.zero(),
            coef: ar.zero(),
            loss: ar.zero(),
            outputs: if outputs > 1 {
                ar.zeros(outputs)
            } else {
                Vec::new()
            },
            scratch: Vec::new(),
        }
    }

    /// The model's outputs as [`Model::predict`] and [`Model::decide`] take them: the K
    /// outputs, or the binary f alone.
    pub fn model_outputs(&self) -> &[R] {
        match self.outputs.is_empty() {
            true => std::slice::from_ref(&self.f),
            false => &self.outputs,
        }
    }
}

/// What a model on top of token-selection attention computes, in any arithmetic.
///
/// Head values are per token and output (`outputs()` of them per token, the token's
/// values contiguous); a sample's `s` is its attention, already computed by
/// [`attention::softmax`] into `Sample::softmax`.
///
/// A model is a small value (its head's shape: the class count), shared by the
/// trainer's threads, so it is `Copy + Send + Sync`.
pub trait Model: std::fmt::Debug + Copy + Send + Sync {
    /// Outputs per sample: 1 (the binary f) or K.
    fn outputs(&self) -> usize;

    /// The config section that describes this model (`[model]`): a trainer takes a
    /// model only with a config that names it.
    fn spec(&self) -> crate::config::ModelSpec;

    /// The fixed head values of every token of `x` (n, T, d), row-major (n, T,
    /// outputs), in `ar` (from `data`'s signals or its supplied head).
    fn head_values<A: Arith>(&self, ar: &A, data: &Dataset, x: ArrayView3<'_, f64>)
    -> Vec<A::Real>;

    /// One training sample of n, with label `y`: its outputs (`out.f`, `out.outputs`),
    /// loss term, coefficient factor, and (stable formulation) the token coefficients
    /// `c` = (1/n) dl/dz.
    #[allow(clippy::too_many_arguments)]
    fn sample<A: Arith>(
        &self,
        ar: &A,
        s: &[A::Real],
        g: &[A::Real],
        y: i8,
        n: usize,
        form: Formulation,
        out: &mut Sample<A::Real>,
        c: &mut [A::Real],
    );

    /// The fixed head as rows nu_c in `ar`, `outputs()` rows of d (binary: nu; K
    /// classes: nu_0, ..., nu_{K-1}): the prompt token's head values G_0c = <nu_c, p>
    /// where p is in the sequence (proofs-notes/prompt.md).
    fn head_rows<A: Arith>(&self, ar: &A, data: &Dataset) -> Vec<A::Real>;

    /// dL/df of one sample after its [`Model::sample`] (the 1/n included), into `gamma`
    /// (`outputs()` values): binary, l'(Y f) Y / n (= `out.coef`); K classes,
    /// (softmax(f) - e_Y) / n. What the in-sequence prompt's head term of dL/dp needs.
    fn output_grad<A: Arith>(&self, ar: &A, out: &Sample<A::Real>, gamma: &mut [A::Real]);

    /// The outputs `f` (`outputs()` values) of one sample with attention `s` and top
    /// token `top` (no gradient: the test set).
    fn forward<A: Arith>(
        &self,
        ar: &A,
        s: &[A::Real],
        g: &[A::Real],
        top: usize,
        form: Formulation,
        f: &mut [A::Real],
    );

    /// The loss of outputs `f` for label `y`.
    fn loss<A: Arith>(&self, ar: &A, f: &[A::Real], y: i8, out: &mut A::Real);

    /// The terms of one sample's naive (d-space, framework) gradient after its
    /// [`Model::sample`] in the `Naive` formulation, with `g` the sample's head values:
    /// per-token values v (T) and a centre vbar such that coef (sum_t (s_t v_t) x_t -
    /// vbar sum_t s_t x_t) is its dL/dq ([`token_selection::grad_q_naive`]). Binary:
    /// v = g, vbar = f. K classes: v = h (h_t = sum_c gamma_c G_tc), vbar = sum_t s_t h_t
    /// (SPEC section 14: the binary gradient with g_t -> h_t).
    fn naive_terms<'s, R>(&self, g: &'s [R], out: &'s Sample<R>) -> (&'s [R], &'s R);

    /// The predicted label where it is proved ([`Arith::decide_sign`],
    /// [`Arith::decide_cmp`]): binary, sign(f) (0 for f = 0); K classes, the unique
    /// largest output. `None` where not proved (an enclosure too wide, or a tie of the
    /// largest outputs), which matches no label: an accuracy counted from a ball's
    /// predictions is a proved lower bound.
    fn predict<A: Arith>(&self, ar: &A, f: &[A::Real]) -> Option<i8>;

    /// Whether outputs `f` are proved to predict label `y` (`Some(true)`), proved not to
    /// (`Some(false)`: another label, or a proved tie of the largest outputs, which
    /// predicts none), or neither (`None`: an enclosure too wide to tell).
    fn decide<A: Arith>(&self, ar: &A, f: &[A::Real], y: i8) -> Option<bool>;
}

/// The model a config names (`[model] kind`), dispatched to its implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnyModel {
    /// The binary token-selection model.
    TokenSelection(TokenSelection),
    /// The multi-class model.
    Multiclass(Multiclass),
}

impl AnyModel {
    /// The model of `cfg`'s `[model]` section; a network model (the encoder) is none of
    /// these: its binary head's shape (one output) stands for it here, and the trainer
    /// refuses it (`Trainer::from_params`; the block trainer runs it).
    pub fn of(cfg: &Config) -> AnyModel {
        match cfg.model.kind {
            ModelKind::TokenSelection | ModelKind::Encoder => {
                AnyModel::TokenSelection(TokenSelection)
            }
            ModelKind::Multiclass => AnyModel::Multiclass(Multiclass {
                classes: cfg.model.classes,
            }),
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $m:ident => $e:expr) => {
        match $self {
            AnyModel::TokenSelection($m) => $e,
            AnyModel::Multiclass($m) => $e,
        }
    };
}

impl Model for AnyModel {
    fn outputs(&self) -> usize {
        dispatch!(self, m => m.outputs())
    }

    fn spec(&self) -> crate::config::ModelSpec {
        dispatch!(self, m => m.spec())
    }

    fn head_values<A: Arith>(
        &self,
        ar: &A,
        data: &Dataset,
        x: ArrayView3<'_, f64>,
    ) -> Vec<A::Real> {
        dispatch!(self, m => m.head_values(ar, data, x))
    }

    fn sample<A: Arith>(
        &self,
        ar: &A,
        s: &[A::Real],
        g: &[A::Real],
        y: i8,
        n: usize,
        form: Formulation,
        out: &mut Sample<A::Real>,
        c: &mut [A::Real],
    ) {
        dispatch!(self, m => m.sample(ar, s, g, y, n, form, out, c))
    }

    fn head_rows<A: Arith>(&self, ar: &A, data: &Dataset) -> Vec<A::Real> {
        dispatch!(self, m => m.head_rows(ar, data))
    }

    fn output_grad<A: Arith>(&self, ar: &A, out: &Sample<A::Real>, gamma: &mut [A::Real]) {
        dispatch!(self, m => m.output_grad(ar, out, gamma))
    }

    fn forward<A: Arith>(
        &self,
        ar: &A,
        s: &[A::Real],
        g: &[A::Real],
        top: usize,
        form: Formulation,
        f: &mut [A::Real],
    ) {
        dispatch!(self, m => m.forward(ar, s, g, top, form, f))
    }

    fn loss<A: Arith>(&self, ar: &A, f: &[A::Real], y: i8, out: &mut A::Real) {
        dispatch!(self, m => m.loss(ar, f, y, out))
    }

    fn naive_terms<'s, R>(&self, g: &'s [R], out: &'s Sample<R>) -> (&'s [R], &'s R) {
        dispatch!(self, m => m.naive_terms(g, out))
    }

    fn predict<A: Arith>(&self, ar: &A, f: &[A::Real]) -> Option<i8> {
        dispatch!(self, m => m.predict(ar, f))
    }

    fn decide<A: Arith>(&self, ar: &A, f: &[A::Real], y: i8) -> Option<bool> {
        dispatch!(self, m => m.decide(ar, f, y))
    }
}
