//! The trainer, written once over the arithmetic: full-batch gradient descent on p, on
//! W, or on both, by the direct or the span step.
//!
//! One step (SPEC section 3), with q = W^T p:
//!
//! ```text
//! z = scores of every training token        (direct: X q;  span: from the Gram matrices)
//! for each training sample i (in parallel, each into its own buffers):
//!     s, f = softmax(z_i), output           (model::softmax, model::output)
//!     u_i = Y_i f_i,  coef_i = l'(u_i) Y_i / n
//!     c_i = coef_i df_i/dz                  (model::grad_scores: the softmax gradient)
//! L = (sum_i l(u_i)) / n                    (summed in sample order)
//! update                                    (direct.rs: dL/dq = X^T c;  span.rs: coefficients)
//! ```
//!
//! [`Trainer`] runs in any [`Arith`]: `Trainer<F64>` is the fast trainer,
//! `Trainer<Mpfr>` the high-precision twin (truth) or the bit-exact f64 predictor. Every
//! reduction has a fixed order, so the bits do not depend on the thread count.
//!
//! Steps are taken by the one loop of [`drive()`] (every analysis that trains observes it);
//! [`record`] says what a checkpoint records, [`resume`] builds and restores the
//! resumable state, [`direct`] and [`span`] are the two engines.

use rayon::prelude::*;

use crate::arith::Arith;
use crate::config::{Config, Formulation, Method};
use crate::data::{Dataset, Params, Split};
use crate::error::{Error, Result};
use crate::io::state::State;
use crate::io::trajectory::{TrainerInfo, Trajectory};
use crate::linalg;
use crate::model::query::{Query, QueryMap};
use crate::model::token_selection::limit;
use crate::model::{self, AnyModel, Model, Softmax};
use crate::quantity::Quantity;

pub(crate) mod adam;
pub(crate) mod batch;
pub(crate) mod direct;
pub(crate) mod direction;
pub(crate) mod drive;
pub(crate) mod network;
pub(crate) mod plan;
pub(crate) mod record;
pub(crate) mod resume;
pub(crate) mod span;
pub(crate) mod step_rule;

pub use plan::{TestPath, check_memory, resolve_method};

use direct::Direct;
use drive::{Control, Event, drive};
use record::Recorder;
use span::Span;

/// The step engine: direct (d-space) or span (coefficients).
#[derive(Debug, Clone)]
pub enum Engine<R> {
    /// [`direct::Direct`].
    Direct(Direct<R>),
    /// [`span::Span`].
    Span(Box<Span<R>>),
}

pub use crate::model::Sample;

/// The trainer's state; [`Trainer::run`] drives it.
///
/// Generic over the arithmetic `A` and the model `M`: `Trainer<'_, F64, Multiclass>` is
/// the K-class model's fast trainer, monomorphised; the default `M = AnyModel` is the
/// config's choice, dispatched per sample (what the commands build from a config).
#[derive(Debug, Clone)]
pub struct Trainer<'a, A: Arith, M: Model = AnyModel> {
    /// The run's config.
    pub cfg: &'a Config,
    /// The run's data.
    pub data: &'a Dataset,
    /// The arithmetic.
    pub ar: A,
    /// The formulation of softmax, output and gradient.
    pub form: Formulation,
    /// The model (the config's `[model]`): head, outputs, loss, backward pass to the
    /// scores, predictions.
    pub model: M,
    /// The step engine.
    pub engine: Engine<A::Real>,
    /// Scores of every training token (n x T, row-major).
    pub scores: Vec<A::Real>,
    /// Attention (n x T).
    pub attention: Vec<A::Real>,
    /// Token coefficients c = coef df/dz (n x T; stable formulation).
    pub c: Vec<A::Real>,
    /// Per-sample results.
    pub samples: Vec<Sample<A::Real>>,
    /// Empirical risk of the last forward pass.
    pub loss: A::Real,
    g_train: Vec<A::Real>,
    g_test: Vec<A::Real>,
    /// The head's rows nu_c ([`Model::head_rows`]) where the prompt is in the sequence
    /// (`[model] prompt = "in-sequence"`; empty otherwise): the prompt's head values
    /// <nu_c, p> are formed from them at every forward pass.
    prompt_head: Vec<A::Real>,
    /// How the test set's scores are formed at checkpoints ([`plan::test_path`]).
    pub test_path: TestPath,
    /// The cross Gram rows of the test tokens, built at the first checkpoint that needs
    /// them ([`span::Span::test_rows`]).
    test_rows: std::sync::OnceLock<crate::arith::Prepared<A::Real>>,
    /// Steps done.
    pub step: u64,
    /// The direction tracked against the attention SVM (`[direction]`): set by
    /// [`Trainer::track_direction`] at step 0.
    pub direction: Option<Box<direction::Tracker<A::Real>>>,
    /// A minibatch run's order and batch pass (`[optimizer] batch`; `None`: full batch).
    pub batch: Option<Box<batch::Pass<A::Real>>>,
}

impl<'a, A: Arith> Trainer<'a, A> {
    /// A trainer at step 0 with the config's initial parameters (exactly converted), in
    /// the config's method.
    pub fn new(cfg: &'a Config, data: &'a Dataset, ar: A, form: Formulation) -> Result<Self> {
        Trainer::with_method(cfg, data, ar, form, cfg.method)
    }

    /// [`Trainer::new`] with an explicit method.
    pub fn with_method(
        cfg: &'a Config,
        data: &'a Dataset,
        ar: A,
        form: Formulation,
        method: Method,
    ) -> Result<Self> {
        Trainer::from_params(cfg, data, ar, form, method, &Params::init(cfg))
    }

    /// A trainer at step 0 from explicit initial parameters `init` (f64, converted
    /// exactly; `init.w` must be `None` exactly when the config's W is the identity in
    /// p-mode), in `method` (`auto` resolved for this arithmetic and formulation:
    /// [`resolve_method`]).
    pub fn from_params(
        cfg: &'a Config,
        data: &'a Dataset,
        ar: A,
        form: Formulation,
        method: Method,
        init: &Params,
    ) -> Result<Self> {
        Trainer::with_model(cfg, data, ar, form, method, init, AnyModel::of(cfg))
    }

    /// Train for `cfg.steps` steps in the config's formulation and method, recording the
    /// checkpoints of [`record::schedule`]. `progress(step)` is called after each update.
    pub fn run(
        cfg: &Config,
        data: &Dataset,
        ar: A,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Trajectory> {
        let mut tr = Trainer::new(cfg, data, ar, cfg.formulation)?;
        tr.record(None, &mut |tr, _| {
            progress(tr.step);
            Ok(())
        })
    }
}

impl<'a, A: Arith, M: Model> Trainer<'a, A, M> {
    /// [`Trainer::from_params`] with the model `model` given as a type: it must be the
    /// model `cfg`'s `[model]` section names ([`Model::spec`]), and `data` must have that
    /// config's shapes, labels and head; either mismatch is a config error.
    pub fn with_model(
        cfg: &'a Config,
        data: &'a Dataset,
        ar: A,
        form: Formulation,
        method: Method,
        init: &Params,
        model: M,
    ) -> Result<Self> {
        if cfg.model.is_network() {
            return Err(Error::config(
                "model.kind",
                crate::model::network::refusal(cfg),
            ));
        }
        if model.spec() != cfg.model.head() {
            return Err(Error::config(
                "model",
                format!(
                    "the model given ({:?}) is not the config's [model] section ({:?})",
                    model.spec(),
                    cfg.model
                ),
            ));
        }
        check_data(cfg, data)?;
        let method = match cfg.factorised {
            // the query map runs in the direct step (config validation refuses span)
            Some(_) => Method::Direct,
            None => resolve_method(cfg, form, ar.kind(), ar.prec(), method),
        };
        let in_sequence = cfg.model.in_sequence();
        if in_sequence && (method == Method::Span || form == Formulation::Naive) {
            return Err(Error::config(
                "model.prompt",
                "the prompt in sequence is implemented in the direct step's stable \
                 formulation only (the span step's Gram matrices assume fixed tokens)",
            ));
        }
        if in_sequence
            && (cfg.optimizer.minibatch(cfg.n_train).is_some() || cfg.direction.is_some())
        {
            return Err(Error::config(
                "model.prompt",
                "the prompt in sequence is implemented for full-batch runs without direction \
                 tracking only",
            ));
        }
        if method == Method::Span
            && let Some(why) = cfg.optimizer.span_refusal(cfg.n_train)
        {
            return Err(Error::config("method", format!("the span step: {why}")));
        }
        if method == Method::Span && form == Formulation::Naive {
            return Err(Error::config(
                "method",
                "the span step needs the stable formulation (the naive gradient's error is a \
                 d-space cancellation)",
            ));
        }
        let (n, t, d) = data.train.x.dim();
        if init.p.len() != d || init.w.is_some() != cfg.dense_w() {
            return Err(Error::config(
                "init",
                "initial parameters do not fit the config",
            ));
        }
        let x = train_rows(data);
        // positions per sample: T, or T + 1 with the prompt as position 0
        let pos = cfg.model.positions(t);
        let engine = match method {
            Method::Span if cfg.factorised.is_none() => {
                Engine::Span(Box::new(Span::new(&ar, init, cfg.mode, x)))
            }
            _ => {
                let map = Query::of_config(&ar, cfg, init);
                Engine::Direct(Direct::new(&ar, map, form, n, cfg.optimizer.is_adam()))
            }
        };
        let k = model.outputs();
        let batch = cfg.optimizer.minibatch(n).map(|b| {
            Box::new(batch::Pass {
                order: batch::Order::new(cfg.seed, n, b),
                full_steps: record::schedule(cfg.steps, cfg.record.checkpoints_per_decade),
                idx: Vec::new(),
                scores: Vec::new(),
                c: Vec::new(),
                samples: Vec::new(),
                loss: ar.zero(),
            })
        });
        Ok(Trainer {
            cfg,
            data,
            ar,
            form,
            engine,
            scores: ar.zeros(n * pos),
            attention: ar.zeros(n * pos),
            c: ar.zeros(n * pos),
            samples: vec![Sample::new(&ar, k); n],
            loss: ar.zero(),
            g_train: with_prompt_slot(
                &ar,
                model.head_values(&ar, data, data.train.x.view()),
                t * k,
                if in_sequence { k } else { 0 },
            ),
            g_test: model.head_values(&ar, data, data.test.x.view()),
            prompt_head: match in_sequence {
                true => model.head_rows(&ar, data),
                false => Vec::new(),
            },
            test_path: plan::test_path(cfg, ar.kind(), method),
            test_rows: std::sync::OnceLock::new(),
            step: 0,
            model,
            direction: None,
            batch,
        })
    }

    /// Positions a sample's attention covers: T, or T + 1 with the prompt in sequence
    /// (position 0 the prompt, positions 1..=T the tokens).
    pub fn positions(&self) -> usize {
        self.cfg.model.positions(self.data.train.x.dim().1)
    }

    /// True where the prompt is position 0 of every sequence (`[model] prompt =
    /// "in-sequence"`).
    pub fn in_sequence(&self) -> bool {
        !self.prompt_head.is_empty()
    }

    /// The prompt token's head values <nu_c, p> at the current p (`outputs()` values),
    /// each the dot product the tokens' head values take; empty with a separate prompt.
    pub fn prompt_head_values(&self) -> Vec<A::Real> {
        if !self.in_sequence() {
            return Vec::new();
        }
        let ar = &self.ar;
        let p = self.p();
        let d = p.len();
        self.prompt_head
            .chunks(d)
            .map(|nu| {
                let mut v = ar.zero();
                ar.dot(&p, nu, &mut v);
                v
            })
            .collect()
    }

    /// The method of the engine (`auto` resolved).
    pub fn method(&self) -> Method {
        match self.engine {
            Engine::Direct(_) => Method::Direct,
            Engine::Span(_) => Method::Span,
        }
    }

    /// Evaluate scores, attention, outputs, the loss and the token coefficients at the
    /// current parameters (and, in the direct method, dL/dq).
    ///
    /// Under minibatches (`[optimizer] batch`) the step's forward and backward pass
    /// cover its batch only ([`batch::Pass`]: the batch's mean loss and gradient, the
    /// scores of no other sample computed), and its samples' scores and attention are
    /// written to the trainer's rows of those samples; at the record's checkpoint steps
    /// a forward pass over every training sample comes first, so that what a checkpoint
    /// records (loss, accuracies, attention) describes the full training set
    /// ([`Trainer::full_forward`]).
    pub fn forward_backward(&mut self) -> Result<()> {
        if self.batch.is_none() {
            return self.full_pass(true);
        }
        if self.full_forward() {
            self.full_pass(false)?;
        }
        self.batch_pass()
    }

    /// True where the last forward pass covered every training sample: always in a
    /// full-batch run; at the record's checkpoint steps under minibatches.
    pub fn full_forward(&self) -> bool {
        self.batch
            .as_ref()
            .is_none_or(|bp| bp.full_steps.binary_search(&self.step).is_ok())
    }

    /// The current step's batch (sorted sample indices) under minibatches, `None` in a
    /// full-batch run.
    pub fn batch_indices(&self) -> Option<&[usize]> {
        self.batch.as_ref().map(|bp| bp.idx.as_slice())
    }

    /// The forward pass of one minibatch step and its backward pass (direct engine).
    fn batch_pass(&mut self) -> Result<()> {
        let ar = self.ar;
        let (n, t, d) = self.data.train.x.dim();
        let k = self.model.outputs();
        let x = train_rows(self.data);
        let bp = self.batch.as_mut().expect("a minibatch run");
        bp.idx = bp.order.at(self.step);
        let idx = &bp.idx;
        let b = idx.len();
        let gathered;
        let (xb, gb, yb): (&[f64], Vec<A::Real>, Vec<i8>) = if b == n {
            (x, self.g_train.clone(), self.data.train.y.to_vec())
        } else {
            let mut rows = Vec::with_capacity(b * t * d);
            let mut g = Vec::with_capacity(b * t * k);
            for &i in idx {
                rows.extend_from_slice(&x[i * t * d..(i + 1) * t * d]);
                g.extend_from_slice(&self.g_train[i * t * k..(i + 1) * t * k]);
            }
            gathered = rows;
            (
                &gathered[..],
                g,
                idx.iter().map(|&i| self.data.train.y[i]).collect(),
            )
        };
        bp.scores.resize(b * t, ar.zero());
        bp.c.resize(b * t, ar.zero());
        bp.samples.resize(b, Sample::new(&ar, k));
        let e = match &mut self.engine {
            Engine::Direct(e) => e,
            Engine::Span(_) => unreachable!("minibatches take the direct step"),
        };
        e.scores(&ar, xb, t, &mut bp.scores);
        let mut att = ar.zeros(b * t);
        let (form, m) = (self.form, &self.model);
        let scores = &bp.scores;
        let body = |(j, ((sj, cj), sample)): SampleItem<'_, A::Real>| {
            let span = j * t..(j + 1) * t;
            let gj = &gb[span.start * k..span.end * k];
            model::softmax(&ar, &scores[span], sj, form, &mut sample.softmax);
            m.sample(&ar, sj, gj, yb[j], b, form, sample, cj);
        };
        if linalg::worth_parallel(&ar, b * t * 16) {
            att.par_chunks_mut(t)
                .zip(bp.c.par_chunks_mut(t))
                .zip(bp.samples.par_iter_mut())
                .enumerate()
                .for_each(body);
        } else {
            att.chunks_mut(t)
                .zip(bp.c.chunks_mut(t))
                .zip(bp.samples.iter_mut())
                .enumerate()
                .for_each(body);
        }
        if let Some(j) = bp
            .samples
            .iter()
            .position(|s| !ar.is_finite(&s.f) || !s.outputs.iter().all(|v| ar.is_finite(v)))
        {
            let i = idx[j];
            return Err(self.non_finite(Quantity::Output, Some(i)));
        }
        let mut sum = ar.zero();
        for s in &bp.samples {
            ar.add(&mut sum, &s.loss);
        }
        ar.div_f64(&mut sum, b as f64);
        bp.loss = sum;
        e.backward(&ar, form, m, xb, t, &att, &gb, &bp.samples, &bp.c);
        // the batch's rows of the full-set buffers (the same bits a full pass gives them)
        for (j, &i) in idx.iter().enumerate() {
            for (dst, src) in self.attention[i * t..(i + 1) * t]
                .iter_mut()
                .zip(&att[j * t..(j + 1) * t])
            {
                ar.set(dst, src);
            }
            for (dst, src) in self.scores[i * t..(i + 1) * t]
                .iter_mut()
                .zip(&bp.scores[j * t..(j + 1) * t])
            {
                ar.set(dst, src);
            }
        }
        if !ar.is_finite(&bp.loss) {
            return Err(self.non_finite(Quantity::Loss, None));
        }
        if !e.grad_q.iter().all(|v| ar.is_finite(v)) {
            return Err(self.non_finite(Quantity::GradQ, None));
        }
        Ok(())
    }

    /// The forward pass over every training sample, and with `backward` the gradient
    /// (direct method).
    fn full_pass(&mut self, backward: bool) -> Result<()> {
        let ar = self.ar;
        let tokens = self.data.train.x.dim().1;
        let t = self.positions();
        let x = train_rows(self.data);
        let prompt = self.in_sequence();
        if prompt {
            // the prompt's head values at the current p, position 0 of every sample
            let g0 = self.prompt_head_values();
            let k = g0.len();
            for gi in self.g_train.chunks_mut(t * k) {
                for (dst, v) in gi.iter_mut().zip(&g0) {
                    ar.set(dst, v);
                }
            }
        }
        match &self.engine {
            Engine::Direct(e) if prompt => e.scores_in_sequence(&ar, x, tokens, &mut self.scores),
            Engine::Direct(e) => e.scores(&ar, x, tokens, &mut self.scores),
            Engine::Span(e) => e.scores(&ar, &mut self.scores),
        }
        let n = self.samples.len();
        let (form, y, g) = (self.form, &self.data.train.y, &self.g_train);
        let (scores, m) = (&self.scores, &self.model);
        let k = m.outputs();
        let body = |(i, ((si, ci), sample)): SampleItem<'_, A::Real>| {
            let span = i * t..(i + 1) * t;
            let gi = &g[span.start * k..span.end * k];
            model::softmax(&ar, &scores[span], si, form, &mut sample.softmax);
            m.sample(&ar, si, gi, y[i], n, form, sample, ci);
        };
        let items = self
            .attention
            .chunks_mut(t)
            .zip(self.c.chunks_mut(t))
            .zip(self.samples.iter_mut());
        if linalg::worth_parallel(&ar, n * t * 16) {
            self.attention
                .par_chunks_mut(t)
                .zip(self.c.par_chunks_mut(t))
                .zip(self.samples.par_iter_mut())
                .enumerate()
                .for_each(body);
        } else {
            items.enumerate().for_each(body);
        }
        if let Some(i) = self
            .samples
            .iter()
            .position(|s| !ar.is_finite(&s.f) || !s.outputs.iter().all(|v| ar.is_finite(v)))
        {
            return Err(self.non_finite(Quantity::Output, Some(i)));
        }
        let mut sum = ar.zero();
        for s in &self.samples {
            ar.add(&mut sum, &s.loss);
        }
        ar.div_f64(&mut sum, n as f64);
        self.loss = sum;
        if !ar.is_finite(&self.loss) {
            return Err(self.non_finite(Quantity::Loss, None));
        }
        if let (true, true, Engine::Direct(e)) = (backward, prompt, &mut self.engine) {
            e.backward_in_sequence(
                &ar,
                m,
                x,
                tokens,
                &self.attention,
                &self.prompt_head,
                &self.samples,
                &self.c,
            );
            if !e.grad_q.iter().all(|v| ar.is_finite(v)) {
                return Err(self.non_finite(Quantity::GradQ, None));
            }
        } else if let (true, Engine::Direct(e)) = (backward, &mut self.engine) {
            e.backward(
                &ar,
                form,
                m,
                x,
                t,
                &self.attention,
                g,
                &self.samples,
                &self.c,
            );
            if !e.grad_q.iter().all(|v| ar.is_finite(v)) {
                return Err(self.non_finite(Quantity::GradQ, None));
            }
        }
        Ok(())
    }

    fn non_finite(&self, quantity: Quantity, sample: Option<usize>) -> Error {
        Error::NonFinite {
            step: self.step,
            quantity: quantity.name(),
            sample,
        }
    }

    /// One gradient step from the last [`Trainer::forward_backward`].
    pub fn update(&mut self) -> Result<()> {
        let ar = self.ar;
        let rule = step_rule::StepRule::at(self.cfg, self.step);
        let moved = match &mut self.engine {
            Engine::Direct(e) => e
                .update(&ar, &rule)
                .map(|_| e.q.iter().all(|v| ar.is_finite(v))),
            Engine::Span(e) => e
                .update(&ar, &rule, &self.c)
                .map(|_| e.a.iter().chain(&e.m).all(|v| ar.is_finite(v))),
        };
        let finite = moved.map_err(|stopped| stopped.error(self.step))?;
        self.step += 1;
        if !finite {
            return Err(self.non_finite(Quantity::Q, None));
        }
        Ok(())
    }

    /// Track the run's direction against `limit` from here (step 0 only: theta0 is the
    /// initial parameter).
    pub fn track_direction(&mut self, limit: &limit::Limit) -> Result<()> {
        if self.step != 0 {
            return Err(Error::config(
                "direction",
                "direction tracking starts at step 0 (theta0 is the initial parameter)",
            ));
        }
        let theta0 = self.direction_theta(limit.summary.space);
        self.direction = Some(Box::new(direction::Tracker::new(&self.ar, limit, theta0)));
        Ok(())
    }

    /// The tracked parameter: p (`Space::P`) or q = W^T p (`Space::Q`).
    pub fn direction_theta(&self, space: limit::Space) -> Vec<A::Real> {
        match space {
            limit::Space::P => self.p(),
            limit::Space::Q => self.q(),
        }
    }

    /// q = W^T p at the current parameters (rebuilt from the coefficients in span).
    pub fn q(&self) -> Vec<A::Real> {
        match &self.engine {
            Engine::Direct(e) => e.q.clone(),
            Engine::Span(e) => e.q(&self.ar, train_rows(self.data)),
        }
    }

    /// dL/dq of the last forward pass (X^T c; the direct engine's own in direct mode).
    pub fn grad_q(&self) -> Vec<A::Real> {
        match &self.engine {
            Engine::Direct(e) => e.grad_q.clone(),
            Engine::Span(_) => {
                let mut g = self.ar.zeros(self.cfg.d);
                linalg::matvec_t_f64(&self.ar, train_rows(self.data), &self.c, &mut g);
                g
            }
        }
    }

    /// p at the current parameters (in span, rebuilt without W: use this where W is not
    /// needed, as [`Self::params`] rebuilds W at O(r d^2) in joint mode).
    pub fn p(&self) -> Vec<A::Real> {
        match &self.engine {
            Engine::Direct(e) => e.p().to_vec(),
            Engine::Span(e) => e.p_only(&self.ar),
        }
    }

    /// Every parameter block at the current parameters, rounded to f64, in declaration
    /// order, as (name, shape, row-major values): the direct engine's query-map blocks
    /// (`W` where dense and `p`; the factorised map's `W_Q`, `W_K`, `b_Q`, `b_K`, `p`),
    /// the span engine's W (where dense) and p in d-space ([`Trainer::params`]), by the
    /// linear map's names.
    pub fn blocks(&self) -> Vec<(&'static str, Vec<usize>, Vec<f64>)> {
        let ar = &self.ar;
        match &self.engine {
            Engine::Direct(e) => e.map.blocks().to_f64(ar),
            Engine::Span(_) => {
                let (p, w) = self.params();
                let f64s = |v: &[A::Real]| v.iter().map(|x| ar.to_f64(x)).collect();
                let d = p.len();
                let mut out = Vec::new();
                if let Some(w) = w {
                    out.push(("W", vec![d, d], f64s(&w)));
                }
                out.push(("p", vec![d], f64s(&p)));
                out
            }
        }
    }

    /// p and W at the current parameters (W `None` for the identity).
    pub fn params(&self) -> (Vec<A::Real>, Option<Vec<A::Real>>) {
        match &self.engine {
            Engine::Direct(e) => (e.p().to_vec(), e.w().map(<[_]>::to_vec)),
            Engine::Span(e) => e.params(&self.ar, train_rows(self.data)),
        }
    }

    /// Test accuracy: the share of test samples whose sign(f) is Y*, with f evaluated in
    /// this arithmetic (its sign, not the sign of f rounded to f64); `q` is the current
    /// q = W^T p ([`Trainer::q`]), used where the test scores are formed from it
    /// ([`Trainer::test_outputs`]).
    pub fn test_accuracy(&self, q: &[A::Real]) -> f64 {
        self.test_metrics(q).0
    }

    /// Test accuracy (as [`Trainer::test_accuracy`]) and test loss (the mean loss of the
    /// model's outputs for Y* over the test set: logistic or cross-entropy, each term
    /// evaluated in this arithmetic and rounded, summed in f64 in sample order).
    pub fn test_metrics(&self, q: &[A::Real]) -> (f64, f64) {
        self.test_metrics_of(&self.test_outputs(Some(q)))
    }

    /// [`Trainer::test_metrics`] of the test outputs `f` ([`Trainer::test_outputs`]).
    pub fn test_metrics_of(&self, f: &[A::Real]) -> (f64, f64) {
        let ar = self.ar;
        let y_true = &self.data.test.y_true;
        let k = self.model.outputs();
        let mut correct = 0usize;
        let mut loss = 0.0;
        for (fi, y) in f.chunks(k).zip(y_true) {
            let mut l = ar.zero();
            self.model.loss(&ar, fi, *y, &mut l);
            correct += usize::from(self.model.predict(&ar, fi) == Some(*y));
            loss += ar.to_f64(&l);
        }
        let n = y_true.len();
        (correct as f64 / n as f64, loss / n as f64)
    }

    /// The outputs of every test sample at the current parameters, row-major (n,
    /// outputs): the binary model's f, a K-class model's f_0, ..., f_{K-1}. The test scores are
    /// `X_test q` (d-space; `q` the current q if given, else rebuilt) or `C a` with the
    /// span step's cross Gram rows, built at the first call ([`TestPath`]); softmax and
    /// output as for the training samples, in this arithmetic.
    pub fn test_outputs(&self, q: Option<&[A::Real]>) -> Vec<A::Real> {
        let ar = self.ar;
        let split: &Split = &self.data.test;
        let (n, t, d) = split.x.dim();
        let g = &self.g_test;
        let scores = match (&self.engine, self.test_path) {
            (Engine::Span(e), TestPath::CrossGram) => {
                let x_test = split.x.as_slice().expect("standard layout");
                let rows = self
                    .test_rows
                    .get_or_init(|| e.test_rows(&ar, train_rows(self.data), x_test));
                let mut z = ar.zeros(n * t);
                e.test_scores(&ar, rows, &mut z);
                Some(z)
            }
            _ => None,
        };
        let rebuilt;
        let q = match (&scores, q) {
            (Some(_), _) => &[][..],
            (None, Some(q)) => q,
            (None, None) => {
                rebuilt = self.q();
                &rebuilt[..]
            }
        };
        let k = self.model.outputs();
        let mut out = ar.zeros(n * k);
        let ops = if scores.is_some() { 4 * t * k } else { t * d };
        // the prompt in sequence: its score <p, q> and head values, position 0
        let prompt = self.in_sequence().then(|| {
            let p = self.p();
            let mut z0 = ar.zero();
            ar.dot(&p, q, &mut z0);
            (z0, self.prompt_head_values())
        });
        let pos = t + usize::from(prompt.is_some());
        // the factorised map's shift <b_K, u> of every score
        let shift = match &self.engine {
            Engine::Direct(e) => e.score_shift().cloned(),
            Engine::Span(_) => None,
        };
        linalg::for_each_row(&ar, &mut out, k, ops, |i, fi| {
            let mut z = ar.zeros(pos);
            let mut s = ar.zeros(pos);
            let mut att = Softmax::new(&ar);
            let off = pos - t;
            match &scores {
                Some(all) => {
                    for (zt, v) in z.iter_mut().zip(&all[i * t..(i + 1) * t]) {
                        ar.set(zt, v);
                    }
                }
                None => {
                    model::scores(&ar, split.tokens(i), q, &mut z[off..]);
                    if let Some(shift) = &shift {
                        z[off..].iter_mut().for_each(|v| ar.add(v, shift));
                    }
                }
            }
            let gi = &g[i * t * k..(i + 1) * t * k];
            let with_prompt;
            let gi = match &prompt {
                None => gi,
                Some((z0, g0)) => {
                    ar.set(&mut z[0], z0);
                    with_prompt = [&g0[..], gi].concat();
                    &with_prompt[..]
                }
            };
            model::softmax(&ar, &z, &mut s, self.form, &mut att);
            self.model.forward(&ar, &s, gi, att.top, self.form, fi);
        });
        out
    }

    /// Which trainer this is, for trajectories.
    pub fn info(&self) -> TrainerInfo {
        TrainerInfo {
            kind: self.ar.kind(),
            prec_bits: self.ar.prec(),
            formulation: self.form,
            method: self.method(),
        }
    }

    /// Drive the trainer to `cfg.steps`, recording its trajectory ([`Recorder`]): from
    /// step 0, or from a saved [`State`] (checked against this run first); a trajectory
    /// over its size limit is refused first ([`record::check_size`]). After each
    /// update `after_update(trainer, recorder)` is called (progress, state saving: see
    /// [`Trainer::state`]). A resumed run is bit-identical to an uninterrupted one.
    pub fn record(
        &mut self,
        resume: Option<&State>,
        after_update: &mut dyn FnMut(&Self, &Recorder) -> Result<()>,
    ) -> Result<Trajectory> {
        record::check_size(self.cfg)?;
        if let (Some(choice), None) = (limit::choice_of(self.cfg), &self.direction) {
            let limit = limit::Limit::of_config(self.cfg, self.data, &choice)?;
            self.track_direction(&limit)?;
        }
        let mut rec = match resume {
            Some(st) => self.restore(st)?,
            None => Recorder::new(self.cfg),
        };
        drive(self, self.cfg.steps, |tr, event| {
            match event {
                Event::Forward => rec.observe(tr),
                Event::Update => after_update(tr, &rec)?,
            }
            Ok(Control::Continue)
        })?;
        Ok(rec.trajectory(self))
    }
}

/// One sample's slot in the per-sample loop: index, (attention, coefficients), results.
type SampleItem<'b, R> = (usize, ((&'b mut [R], &'b mut [R]), &'b mut Sample<R>));

/// `data` has the shapes, labels and head of `cfg`'s model: (n, T, d) tokens for both
/// splits, labels +-1 (binary) or class indices below K, and a (K, d) head exactly for
/// the K-class model (a data set made for another config is refused, not indexed past
/// its end).
fn check_data(cfg: &Config, data: &Dataset) -> Result<()> {
    let bad = |reason: String| {
        Err(Error::Mismatch {
            what: "the data set and the config".into(),
            reason,
        })
    };
    let (t, d) = (cfg.tokens(), cfg.d);
    for (name, split, n) in [
        ("train", &data.train, cfg.n_train),
        ("test", &data.test, cfg.n_test),
    ] {
        if split.x.dim() != (n, t, d) || split.y.len() != n || split.y_true.len() != n {
            return bad(format!(
                "the {name} split has tokens {:?} and {} labels, the config ({n}, {t}, {d}) \
                 and {n}",
                split.x.dim(),
                split.y.len()
            ));
        }
        if let Some(y) = split
            .y
            .iter()
            .chain(&split.y_true)
            .find(|&&y| !cfg.model.is_label(y))
        {
            return bad(format!(
                "the {name} split has label {y}, not a label of the config's model"
            ));
        }
    }
    let rows = data.nu_classes.as_ref().map(|nu| nu.dim());
    let want = cfg.model.is_multiclass().then_some((cfg.model.classes, d));
    if rows != want {
        return bad(format!(
            "the data's K-class head is {rows:?}, the config's model needs {want:?}"
        ));
    }
    Ok(())
}

/// Head values `g` (rows of `width` per sample) with `slot` zero values before each row:
/// the prompt's head values (position 0) where the prompt is in the sequence, written at
/// each forward pass; `g` itself for `slot` = 0.
fn with_prompt_slot<A: Arith>(ar: &A, g: Vec<A::Real>, width: usize, slot: usize) -> Vec<A::Real> {
    if slot == 0 || width == 0 {
        return g;
    }
    let mut out = Vec::with_capacity(g.len() / width * (width + slot));
    for row in g.chunks(width) {
        out.extend((0..slot).map(|_| ar.zero()));
        out.extend_from_slice(row);
    }
    out
}

/// The nT x d training rows of `data`, row-major.
pub fn train_rows(data: &Dataset) -> &[f64] {
    data.train.x.as_slice().expect("standard layout")
}
