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

use std::collections::BTreeMap;
use std::path::Path;

use ndarray::{Array1, Array2};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::arith::{Arith, Kind};
use crate::config::{Config, Formulation, Method, Mode, PInit, WInit};
use crate::data::{Dataset, Split};
use crate::error::{Error, Result};
use crate::io::trajectory::{
    self, Checkpoint, Cumulative, PerGroup, SampleState, TrainerInfo, Trajectory,
};
use crate::linalg;
use crate::model::{self, Attention};
use crate::rng::{self, Stream};

pub mod direct;
pub mod span;

use direct::Direct;
use span::Span;

/// Initial parameters in f64 (the data of a run). `w = None` means W = I.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// The token p.
    pub p: Array1<f64>,
    /// The key-query matrix W (d x d), or `None` for the identity.
    pub w: Option<Array2<f64>>,
}

impl Params {
    /// Initial parameters of `cfg` (p from `init.p`, W from `init.w`), from the `init`
    /// stream: p first, then W row by row.
    pub fn init(cfg: &Config) -> Params {
        let d = cfg.d;
        let mut r = rng::stream(cfg.seed, Stream::Init);
        let mut p = Array1::zeros(d);
        if cfg.init.p == PInit::Gaussian {
            rng::fill_normal(
                &mut r,
                cfg.init.p_scale,
                p.as_slice_mut().expect("contiguous"),
            );
        }
        let w = match (cfg.mode, cfg.init.w) {
            (Mode::P, WInit::Identity) => None,
            (_, WInit::Identity) => Some(Array2::eye(d)),
            (_, WInit::KaimingUniform) => {
                let bound = 1.0 / (d as f64).sqrt();
                Some(Array2::from_shape_simple_fn((d, d), || {
                    (2.0 * rng::uniform(&mut r) - 1.0) * bound
                }))
            }
        };
        Params { p, w }
    }
}

/// The step engine: direct (d-space) or span (coefficients).
#[derive(Debug, Clone)]
pub enum Engine<R> {
    /// [`direct::Direct`].
    Direct(Direct<R>),
    /// [`span::Span`].
    Span(Span<R>),
}

/// Per-sample results of the last forward pass.
#[derive(Debug, Clone)]
pub struct Sample<R> {
    /// Attention summary (top token, 1 - s_top, score gap).
    pub att: Attention<R>,
    /// Output f.
    pub f: R,
    /// coef = l'(Y f) Y / n.
    pub coef: R,
    /// Loss term l(Y f).
    pub loss: R,
}

/// The trainer's state; [`Trainer::run`] drives it.
#[derive(Debug, Clone)]
pub struct Trainer<'a, A: Arith> {
    /// The run's config.
    pub cfg: &'a Config,
    /// The run's data.
    pub data: &'a Dataset,
    /// The arithmetic.
    pub ar: A,
    /// The formulation of softmax, output and gradient.
    pub form: Formulation,
    /// The step engine.
    pub engine: Engine<A::Real>,
    /// Scores of every training token (n x T, row-major).
    pub z: Vec<A::Real>,
    /// Attention (n x T).
    pub s: Vec<A::Real>,
    /// Token coefficients c = coef df/dz (n x T; stable formulation).
    pub c: Vec<A::Real>,
    /// Per-sample results.
    pub samples: Vec<Sample<A::Real>>,
    /// Empirical risk of the last forward pass.
    pub loss: A::Real,
    g_train: Vec<A::Real>,
    g_test: Vec<A::Real>,
    /// Steps done.
    pub step: u64,
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
    /// p-mode).
    pub fn from_params(
        cfg: &'a Config,
        data: &'a Dataset,
        ar: A,
        form: Formulation,
        method: Method,
        init: &Params,
    ) -> Result<Self> {
        if method == Method::Span && form == Formulation::Naive {
            return Err(Error::config(
                "method",
                "the span step needs the stable formulation (the naive gradient's error is a \
                 d-space cancellation)",
            ));
        }
        let (n, t, d) = data.train.x.dim();
        let dense_w = !(cfg.mode == Mode::P && cfg.init.w == WInit::Identity);
        if init.p.len() != d || init.w.is_some() != dense_w {
            return Err(Error::config(
                "init",
                "initial parameters do not fit the config",
            ));
        }
        let x = train_rows(data);
        let engine = match method {
            Method::Direct => Engine::Direct(Direct::new(&ar, init, form, n)),
            Method::Span => Engine::Span(Span::new(&ar, init, cfg.mode, x)),
        };
        let nu = model::head(
            &ar,
            data.mu_pos.as_slice().expect("contiguous"),
            data.mu_neg.as_slice().expect("contiguous"),
            data.mu_norm,
        );
        Ok(Trainer {
            cfg,
            data,
            ar,
            form,
            engine,
            z: ar.zeros(n * t),
            s: ar.zeros(n * t),
            c: ar.zeros(n * t),
            samples: vec![
                Sample {
                    att: Attention::new(&ar),
                    f: ar.zero(),
                    coef: ar.zero(),
                    loss: ar.zero(),
                };
                n
            ],
            loss: ar.zero(),
            g_train: model::head_values(&ar, data.train.x.view(), &nu),
            g_test: model::head_values(&ar, data.test.x.view(), &nu),
            step: 0,
        })
    }

    /// The method of the engine.
    pub fn method(&self) -> Method {
        match self.engine {
            Engine::Direct(_) => Method::Direct,
            Engine::Span(_) => Method::Span,
        }
    }

    /// Evaluate scores, attention, outputs, the loss and the token coefficients at the
    /// current parameters (and, in the direct method, dL/dq).
    pub fn forward_backward(&mut self) -> Result<()> {
        let ar = self.ar;
        let t = self.data.train.x.dim().1;
        let x = train_rows(self.data);
        match &self.engine {
            Engine::Direct(e) => e.scores(&ar, x, t, &mut self.z),
            Engine::Span(e) => e.scores(&ar, &mut self.z),
        }
        let n = self.samples.len();
        let (form, y, g) = (self.form, &self.data.train.y, &self.g_train);
        let z = &self.z;
        let body = |(i, ((si, ci), sample)): SampleItem<'_, A::Real>| {
            let span = i * t..(i + 1) * t;
            let gi = &g[span.clone()];
            model::softmax(&ar, &z[span], si, form, &mut sample.att);
            model::output(&ar, si, gi, sample.att.top, form, &mut sample.f);
            let yi = y[i] as f64;
            let mut u = sample.f.clone();
            ar.mul_f64(&mut u, yi);
            model::loss(&ar, &u, &mut sample.loss);
            model::loss_derivative(&ar, &u, &mut sample.coef);
            ar.mul_f64(&mut sample.coef, yi);
            ar.div_f64(&mut sample.coef, n as f64);
            if form == Formulation::Stable {
                model::grad_scores(&ar, si, gi, sample.att.top, &sample.f, &sample.coef, ci);
            }
        };
        let items = self
            .s
            .chunks_mut(t)
            .zip(self.c.chunks_mut(t))
            .zip(self.samples.iter_mut());
        if linalg::worth_parallel(&ar, n * t * 16) {
            self.s
                .par_chunks_mut(t)
                .zip(self.c.par_chunks_mut(t))
                .zip(self.samples.par_iter_mut())
                .enumerate()
                .for_each(body);
        } else {
            items.enumerate().for_each(body);
        }
        if let Some(i) = self.samples.iter().position(|s| !ar.is_finite(&s.f)) {
            return Err(self.non_finite("f", Some(i)));
        }
        let mut sum = ar.zero();
        for s in &self.samples {
            ar.add(&mut sum, &s.loss);
        }
        ar.div_f64(&mut sum, n as f64);
        self.loss = sum;
        if !ar.is_finite(&self.loss) {
            return Err(self.non_finite("loss", None));
        }
        if let Engine::Direct(e) = &mut self.engine {
            e.backward(&ar, form, x, t, &self.s, g, &self.samples, &self.c);
            if !e.grad_q.iter().all(|v| ar.is_finite(v)) {
                return Err(self.non_finite("grad_q", None));
            }
        }
        Ok(())
    }

    fn non_finite(&self, quantity: &'static str, sample: Option<usize>) -> Error {
        Error::NonFinite {
            step: self.step,
            quantity,
            sample,
        }
    }

    /// One gradient step from the last [`Trainer::forward_backward`].
    pub fn update(&mut self) -> Result<()> {
        let ar = self.ar;
        let alpha = self.cfg.step_size;
        let finite = match &mut self.engine {
            Engine::Direct(e) => {
                e.update(&ar, self.cfg.mode, alpha);
                e.q.iter().all(|v| ar.is_finite(v))
            }
            Engine::Span(e) => {
                e.update(&ar, alpha, &self.c);
                e.a.iter().chain(&e.m).all(|v| ar.is_finite(v))
            }
        };
        self.step += 1;
        if !finite {
            return Err(self.non_finite("q", None));
        }
        Ok(())
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
            Engine::Direct(e) => e.p.clone(),
            Engine::Span(e) => e.p_only(&self.ar),
        }
    }

    /// p and W at the current parameters (W `None` for the identity).
    pub fn params(&self) -> (Vec<A::Real>, Option<Vec<A::Real>>) {
        match &self.engine {
            Engine::Direct(e) => (e.p.clone(), e.w.clone()),
            Engine::Span(e) => e.params(&self.ar, train_rows(self.data)),
        }
    }

    /// Test accuracy: the share of test samples whose sign(f) is Y*, at parameters `q`,
    /// with f evaluated in this arithmetic (its sign, not the sign of f rounded to f64).
    pub fn test_accuracy(&self, q: &[A::Real]) -> f64 {
        self.test_metrics(q).0
    }

    /// Test accuracy (as [`Trainer::test_accuracy`]) and test loss (the mean logistic
    /// loss of Y* f over the test set, each term evaluated in this arithmetic and
    /// rounded, summed in f64 in sample order).
    pub fn test_metrics(&self, q: &[A::Real]) -> (f64, f64) {
        let ar = self.ar;
        let split: &Split = &self.data.test;
        let (n, t, d) = split.x.dim();
        let g = &self.g_test;
        let mut out = vec![(0u8, 0.0f64); n];
        linalg::for_each_row(&ar, &mut out, 1, t * d, |i, res| {
            let mut z = ar.zeros(t);
            let mut s = ar.zeros(t);
            let mut att = Attention::new(&ar);
            let mut f = ar.zero();
            model::scores(&ar, split.tokens(i), q, &mut z);
            model::softmax(&ar, &z, &mut s, self.form, &mut att);
            model::output(&ar, &s, &g[i * t..(i + 1) * t], att.top, self.form, &mut f);
            let y = split.y_true[i];
            let mut margin = f.clone();
            if y < 0 {
                ar.neg(&mut margin);
            }
            let mut l = ar.zero();
            model::loss(&ar, &margin, &mut l);
            res[0] = (u8::from(model::predict(&ar, &f) == y), ar.to_f64(&l));
        });
        let correct = out.iter().map(|r| r.0 as usize).sum::<usize>();
        let loss = out.iter().map(|r| r.1).sum::<f64>() / n as f64;
        (correct as f64 / n as f64, loss)
    }

    /// Group masses of training sample `i`, summed in this arithmetic in token order.
    fn group_mass(&self, i: usize) -> [A::Real; 4] {
        let ar = &self.ar;
        let groups = &self.data.groups;
        let t = groups.len();
        let mut m: [A::Real; 4] = std::array::from_fn(|_| ar.zero());
        for (st, grp) in self.s[i * t..(i + 1) * t].iter().zip(groups) {
            ar.add(&mut m[grp.index()], st);
        }
        m
    }

    /// Attention mass per group of training sample `i` (last forward pass), rounded.
    pub fn mass(&self, i: usize) -> PerGroup {
        PerGroup::from_array(self.group_mass(i).map(|m| self.ar.to_f64(&m)))
    }

    /// Definition 4.1 scores S_i = m_R (m_W_same + m_W_opposite + m_I) of every training
    /// sample (1 - m_R as the sum of the other groups: no cancellation), rounded.
    pub fn selection_scores(&self) -> Vec<f64> {
        let ar = &self.ar;
        (0..self.samples.len())
            .map(|i| {
                let [r, mut ws, wo, irr] = self.group_mass(i);
                ar.add(&mut ws, &wo);
                ar.add(&mut ws, &irr);
                ar.mul(&mut ws, &r);
                ar.to_f64(&ws)
            })
            .collect()
    }

    /// Record a checkpoint from the last [`Trainer::forward_backward`] (evaluates the
    /// test set); `cumulative` holds the Definition 4.1 sums up to this step.
    pub fn checkpoint(&self, cumulative: Cumulative) -> Checkpoint {
        let ar = &self.ar;
        let scores = self.selection_scores();
        let samples = self
            .samples
            .iter()
            .enumerate()
            .map(|(i, s)| SampleState {
                f: ar.to_f64(&s.f),
                top: s.att.top,
                gap: ar.to_f64(&s.att.gap),
                rest: ar.to_f64(&s.att.rest),
                mass: self.mass(i),
                selection_score: scores[i],
            })
            .collect();
        let q = self.q();
        let correct = self
            .samples
            .iter()
            .zip(&self.data.train.y)
            .filter(|(s, y)| model::predict(ar, &s.f) == **y)
            .count();
        Checkpoint::new(
            self.step,
            ar.to_f64(&self.loss),
            correct as f64 / self.samples.len() as f64,
            self.test_accuracy(&q),
            ar.norm_f64(&q),
            ar.norm_f64(&self.grad_q()),
            cumulative,
            samples,
            &self.data.groups,
            &self.data.train.y,
            &self.data.train.y_true,
        )
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

    /// Train for `cfg.steps` steps in the config's formulation and method, recording the
    /// checkpoints of [`trajectory::schedule`]. `progress(step)` is called as it goes.
    pub fn run(
        cfg: &Config,
        data: &Dataset,
        ar: A,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Trajectory> {
        let mut tr = Trainer::new(cfg, data, ar, cfg.formulation)?;
        tr.run_from(None, None, progress)
    }

    /// Drive the trainer to `cfg.steps`: from step 0, or from a saved [`State`]; with
    /// `save = Some((path, every))`, the state is written atomically every `every` steps
    /// and at the end. A resumed run is bit-identical to an uninterrupted one.
    pub fn run_from(
        &mut self,
        resume: Option<State>,
        save: Option<(&Path, u64)>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Trajectory> {
        let cfg = self.cfg;
        let schedule = trajectory::schedule(cfg.steps, cfg.record.checkpoints_per_decade);
        let mut checkpoints = Vec::with_capacity(schedule.len());
        let mut cumulative = Cumulative::default();
        if let Some(state) = resume {
            self.restore(&state)?;
            checkpoints = state.checkpoints;
            cumulative = state.cumulative;
        }
        let start = self.step;
        let mut next = schedule.iter().filter(|s| **s >= start).peekable();
        let (y, y_true) = (&self.data.train.y, &self.data.train.y_true);
        loop {
            self.forward_backward()?;
            cumulative.add(&self.selection_scores(), y, y_true);
            if next.peek() == Some(&&self.step) {
                checkpoints.push(self.checkpoint(cumulative));
                next.next();
            }
            if self.step == cfg.steps {
                break;
            }
            self.update()?;
            if let Some((path, every)) = save
                && (self.step.is_multiple_of(every) || self.step == cfg.steps)
            {
                self.state(cumulative, &checkpoints).save(path)?;
            }
            progress(self.step);
        }
        progress(self.step);
        Ok(Trajectory {
            format: trajectory::FORMAT.to_string(),
            trainer: self.info(),
            config: cfg.clone(),
            y_true: self.data.train.y_true.clone(),
            y: self.data.train.y.clone(),
            checkpoints,
        })
    }

    /// The resumable state after the last update: step, the engine's parameters (exact
    /// text), the Definition 4.1 sums and the checkpoints so far.
    pub fn state(&self, cumulative: Cumulative, checkpoints: &[Checkpoint]) -> State {
        let ar = &self.ar;
        let text = |v: &[A::Real]| v.iter().map(|x| ar.to_exact_string(x)).collect::<Vec<_>>();
        let mut values = BTreeMap::new();
        match &self.engine {
            Engine::Direct(e) => {
                values.insert("p".to_string(), text(&e.p));
                if let Some(w) = &e.w {
                    values.insert("W".to_string(), text(w));
                }
            }
            Engine::Span(e) => {
                values.insert("a".to_string(), text(&e.a));
                values.insert("M".to_string(), text(&e.m));
            }
        }
        State {
            format: STATE_FORMAT.to_string(),
            config: self.cfg.clone(),
            trainer: self.info(),
            step: self.step,
            values,
            cumulative,
            checkpoints: checkpoints.to_vec(),
            source: None,
        }
    }

    /// Restore the engine's parameters and the step from a state, after checking that it
    /// belongs to this run (config, arithmetic, formulation, method).
    pub fn restore(&mut self, st: &State) -> Result<()> {
        st.check(self.cfg, &self.info())?;
        let ar = self.ar;
        let read = |name: &str, into: &mut Vec<A::Real>| -> Result<()> {
            let v = st
                .values
                .get(name)
                .ok_or_else(|| state_error(&st.source, format!("`{name}` is missing")))?;
            if v.len() != into.len() {
                return Err(state_error(
                    &st.source,
                    format!(
                        "`{name}` has {} entries, this run needs {}",
                        v.len(),
                        into.len()
                    ),
                ));
            }
            for (x, s) in into.iter_mut().zip(v) {
                *x = ar
                    .parse_exact(s)
                    .ok_or_else(|| state_error(&st.source, format!("bad `{name}` value `{s}`")))?;
            }
            Ok(())
        };
        match &mut self.engine {
            Engine::Direct(e) => {
                read("p", &mut e.p)?;
                if let Some(w) = &mut e.w {
                    read("W", w)?;
                }
                e.compute_q(&ar);
            }
            Engine::Span(e) => {
                read("a", &mut e.a)?;
                read("M", &mut e.m)?;
            }
        }
        self.step = st.step;
        Ok(())
    }
}

/// One sample's slot in the per-sample loop: index, (attention, coefficients), results.
type SampleItem<'b, R> = (usize, ((&'b mut [R], &'b mut [R]), &'b mut Sample<R>));

/// The nT x d training rows of `data`, row-major.
pub fn train_rows(data: &Dataset) -> &[f64] {
    data.train.x.as_slice().expect("standard layout")
}

/// Largest memory a trainer's state may take, in bytes (refused beyond, before
/// anything is allocated).
pub const MAX_STATE_BYTES: u64 = 12 << 30;

/// Approximate bytes of a trainer's numbers at `prec` bits in `method`: parameters and
/// d-space buffers (direct: p, q, dL/dq, W when dense, n d for the naive gradient), or
/// the Gram matrices, coefficients and basis (span), plus scores and head values of the
/// training and test sets. An MPFR number takes 32 bytes plus its limbs; f64 8 bytes.
pub fn state_bytes(cfg: &Config, kind: Kind, prec: u32, method: Method) -> u64 {
    let per = match kind {
        Kind::F64 => 8,
        _ => 32 + 8 * prec.div_ceil(64) as u128,
    };
    let (n, t, d) = (
        cfg.n_train as u128,
        cfg.layout.tokens as u128,
        cfg.d as u128,
    );
    let r = n * t;
    let dense_w = !(cfg.mode == Mode::P && cfg.init.w == WInit::Identity);
    let w = if dense_w { d * d } else { 0 };
    let common = 4 * r + cfg.n_test as u128 * t;
    let count = match method {
        Method::Direct => {
            let naive = if cfg.formulation == Formulation::Naive {
                n * d
            } else {
                0
            };
            3 * d + w + naive
        }
        // G, K, M, the basis (and X's rows while the Gram matrices are formed), W(0)
        Method::Span => 3 * (r + 1) * (r + 1) + 2 * (r + 1) * d + w + 3 * d,
    };
    ((common + count) * per).min(u64::MAX as u128) as u64
}

/// Refuse a run whose state (see [`state_bytes`]) would exceed [`MAX_STATE_BYTES`].
pub fn check_memory(cfg: &Config, kind: Kind, prec: u32, method: Method) -> Result<()> {
    let bytes = state_bytes(cfg, kind, prec, method);
    if bytes > MAX_STATE_BYTES {
        return Err(Error::TooLarge {
            field: "prec".into(),
            reason: format!(
                "a {} run at {prec} bits ({} method) needs about {:.1} GiB for d = {}, n = {} \
                 (limit {} GiB)",
                kind.name(),
                method.name(),
                bytes as f64 / (1u64 << 30) as f64,
                cfg.d,
                cfg.n_train,
                MAX_STATE_BYTES >> 30
            ),
        });
    }
    Ok(())
}

/// Format tag of trainer state files.
pub const STATE_FORMAT: &str = "tokensel-state/2";

/// A resumable snapshot of a run (see [`Trainer::run_from`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Always [`STATE_FORMAT`].
    pub format: String,
    /// The run's config (a resumed run must use the same).
    pub config: Config,
    /// The trainer (arithmetic, precision, formulation, method).
    pub trainer: TrainerInfo,
    /// Steps done.
    pub step: u64,
    /// The engine's parameters by name (`p`, `W` direct; `a`, `M` span), exact text.
    pub values: BTreeMap<String, Vec<String>>,
    /// Definition 4.1 sums over steps 0..step-1.
    pub cumulative: Cumulative,
    /// Checkpoints recorded so far.
    pub checkpoints: Vec<Checkpoint>,
    /// The file this state was read from (for error messages; not stored).
    #[serde(skip)]
    pub source: Option<std::path::PathBuf>,
}

fn state_error(source: &Option<std::path::PathBuf>, message: String) -> Error {
    Error::Parse {
        what: "trainer state",
        path: source.clone().unwrap_or_else(|| "(state in memory)".into()),
        message,
    }
}

impl State {
    /// Write atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string(self).expect("state serialises");
        trajectory::write_atomic(path, text.as_bytes())
    }

    /// Read a state file.
    pub fn load(path: &Path) -> Result<State> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let parse = |message: String| Error::Parse {
            what: "trainer state",
            path: path.to_path_buf(),
            message,
        };
        let mut st: State = serde_json::from_str(&text).map_err(|e| parse(e.to_string()))?;
        st.source = Some(path.to_path_buf());
        if st.format != STATE_FORMAT {
            return Err(parse(format!(
                "format `{}` is not `{STATE_FORMAT}`",
                st.format
            )));
        }
        Ok(st)
    }

    /// Refuse to resume under another config, arithmetic, formulation or method.
    pub fn check(&self, cfg: &Config, trainer: &TrainerInfo) -> Result<()> {
        let file = self
            .source
            .as_ref()
            .map_or("the saved state".to_string(), |p| {
                format!("`{}`", p.display())
            });
        let mismatch = |what: &str| {
            Err(Error::config(
                "resume",
                format!("{file} has another {what} than this run"),
            ))
        };
        if &self.config != cfg {
            return mismatch("config");
        }
        if &self.trainer != trainer {
            return mismatch("trainer (arithmetic, precision, formulation or method)");
        }
        if self.step > cfg.steps {
            return mismatch("step count");
        }
        Ok(())
    }
}
