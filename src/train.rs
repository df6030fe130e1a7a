//! The fast f64 trainer: full-batch gradient descent on p (W fixed) or on W (p fixed).
//!
//! One step (SPEC section 3), with q = W^T p:
//!
//! ```text
//! for each training sample i (in order):
//!     z, s, f = forward(X_i, q)               (model::scores, softmax, output)
//!     u_i = Y_i f_i,  c_i = l'(u_i) Y_i / n
//!     v_i = c_i df_i/dq                        (model::grad_q)
//! L = (sum_i l(u_i)) / n,   dL/dq = sum_i v_i   (summed in sample order)
//! p-mode: p <- p - alpha W dL/dq               W-mode: W <- W - alpha p (dL/dq)^T
//! ```
//!
//! The twin (`crate::twin::train`) implements the same loop in MPFR.

use ndarray::{Array1, Array2};
use rayon::prelude::*;

use crate::config::{Config, Formulation, Mode, PInit, WInit};
use crate::data::{Dataset, Split};
use crate::error::{Error, Result};
use crate::linalg;
use crate::model::{self, Attention};
use crate::rng::{self, Stream};
use crate::trajectory::{self, Checkpoint, Cumulative, SampleState, TrainerInfo, Trajectory};

/// Trainable parameters. `w = None` means W = I (never stored).
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

    /// q = W^T p, accumulated row by row: q = sum_m p_m W[m, :] in order m = 0..d.
    pub fn q(&self, q: &mut [f64]) {
        match &self.w {
            None => q.copy_from_slice(self.p.as_slice().expect("contiguous")),
            Some(w) => {
                q.fill(0.0);
                for (pm, row) in self.p.iter().zip(w.rows()) {
                    linalg::axpy(*pm, row.as_slice().expect("contiguous"), q);
                }
            }
        }
    }
}

/// Forward pass of one sample: fills `z` and `s`, returns the attention summary and f.
pub fn forward(
    split: &Split,
    i: usize,
    q: &[f64],
    form: Formulation,
    z: &mut [f64],
    s: &mut [f64],
) -> (Attention, f64) {
    model::scores(split.tokens(i), q, z);
    let att = model::softmax(z, s, form);
    let g = split.g.row(i);
    let f = model::output(s, g.as_slice().expect("contiguous"), att.top, form);
    (att, f)
}

/// Accuracy of sign(f) against the true labels Y* of `split` at parameters `q`.
pub fn accuracy(split: &Split, q: &[f64], form: Formulation) -> f64 {
    let t = split.x.dim().1;
    let (mut z, mut s) = (vec![0.0; t], vec![0.0; t]);
    let correct = (0..split.len())
        .filter(|&i| {
            model::predict(forward(split, i, q, form, &mut z, &mut s).1) == split.y_true[i]
        })
        .count();
    correct as f64 / split.len() as f64
}

/// The f64 trainer's state; [`Trainer::run`] drives it.
#[derive(Debug, Clone)]
pub struct Trainer<'a> {
    cfg: &'a Config,
    data: &'a Dataset,
    /// Current parameters.
    pub params: Params,
    /// q = W^T p at the current parameters.
    pub q: Vec<f64>,
    /// dL/dq at the current parameters (after [`Trainer::forward_backward`]).
    pub grad_q: Vec<f64>,
    /// Empirical risk at the current parameters.
    pub loss: f64,
    /// Scores z, shape (n, T).
    pub z: Array2<f64>,
    /// Attention s, shape (n, T).
    pub s: Array2<f64>,
    /// Attention summary per sample.
    pub att: Vec<Attention>,
    /// Output f per sample.
    pub f: Vec<f64>,
    /// Per-sample gradient contributions v_i = c_i df_i/dq, shape (n, d).
    contrib: Array2<f64>,
    /// Per-sample work space (xbar), shape (n, d).
    scratch: Array2<f64>,
    /// Per-sample loss terms l(Y_i f_i).
    loss_terms: Vec<f64>,
    /// Steps done.
    pub step: u64,
}

impl<'a> Trainer<'a> {
    /// A trainer at step 0 with the config's initial parameters.
    pub fn new(cfg: &'a Config, data: &'a Dataset) -> Self {
        let (n, t, d) = data.train.x.dim();
        let params = Params::init(cfg);
        let mut q = vec![0.0; d];
        params.q(&mut q);
        Trainer {
            cfg,
            data,
            params,
            q,
            grad_q: vec![0.0; d],
            loss: f64::NAN,
            z: Array2::zeros((n, t)),
            s: Array2::zeros((n, t)),
            att: vec![
                Attention {
                    top: 0,
                    rest: 0.0,
                    gap: 0.0
                };
                n
            ],
            f: vec![0.0; n],
            contrib: Array2::zeros((n, d)),
            scratch: Array2::zeros((n, d)),
            loss_terms: vec![0.0; n],
            step: 0,
        }
    }

    /// Replace the parameters (and recompute q); the step counter is kept.
    pub fn set_params(&mut self, params: Params) {
        self.params = params;
        self.params.q(&mut self.q);
    }

    /// Evaluate loss, per-sample states and dL/dq at the current parameters.
    ///
    /// Samples are processed in parallel (rayon), each into its own buffers; the loss
    /// terms and the per-sample gradients v_i are then summed in sample order, so the
    /// result is bit-identical for every thread count.
    pub fn forward_backward(&mut self) -> Result<()> {
        let train = &self.data.train;
        let form = self.cfg.formulation;
        let (n, t, d) = train.x.dim();
        let q = &self.q;
        self.z
            .as_slice_mut()
            .expect("standard layout")
            .par_chunks_mut(t)
            .zip(
                self.s
                    .as_slice_mut()
                    .expect("standard layout")
                    .par_chunks_mut(t),
            )
            .zip(
                self.contrib
                    .as_slice_mut()
                    .expect("standard layout")
                    .par_chunks_mut(d),
            )
            .zip(
                self.scratch
                    .as_slice_mut()
                    .expect("standard layout")
                    .par_chunks_mut(d),
            )
            .zip(self.att.par_iter_mut())
            .zip(self.f.par_iter_mut())
            .zip(self.loss_terms.par_iter_mut())
            .enumerate()
            .for_each(|(i, ((((((z, s), v), scratch), att), f), loss_i))| {
                let (a, fi) = forward(train, i, q, form, z, s);
                let y = train.y[i] as f64;
                let u = y * fi;
                *loss_i = model::loss(u);
                let coef = (model::loss_derivative(u) * y) / n as f64;
                let g = train.g.row(i);
                model::grad_q(
                    train.tokens(i),
                    s,
                    g.as_slice().expect("contiguous"),
                    &a,
                    fi,
                    coef,
                    form,
                    scratch,
                    v,
                );
                *att = a;
                *f = fi;
            });
        if let Some(i) = self.f.iter().position(|f| !f.is_finite()) {
            return Err(self.non_finite("f", Some(i)));
        }
        let mut loss_sum = 0.0;
        for l in &self.loss_terms {
            loss_sum += l;
        }
        self.loss = loss_sum / n as f64;
        self.grad_q.fill(0.0);
        for v in self.contrib.rows() {
            for (gk, vk) in self.grad_q.iter_mut().zip(v) {
                *gk += vk;
            }
        }
        if !self.loss.is_finite() {
            return Err(self.non_finite("loss", None));
        }
        if let Some(k) = self.grad_q.iter().position(|g| !g.is_finite()) {
            let sample = self.contrib.column(k).iter().position(|v| !v.is_finite());
            return Err(self.non_finite("grad_q", sample));
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

    /// One gradient step from the gradient of the last [`Trainer::forward_backward`].
    ///
    /// p-mode: p_m -= alpha (W dL/dq)_m. W-mode: W[m, k] -= (alpha p_m) (dL/dq)_k.
    /// Joint: both, with both gradients taken at the current (p, W).
    pub fn update(&mut self) -> Result<()> {
        let alpha = self.cfg.step_size;
        let g = &self.grad_q;
        match self.cfg.mode {
            Mode::P => match &self.params.w {
                None => linalg::axpy(-alpha, g, self.params.p.as_slice_mut().expect("c")),
                Some(w) => {
                    for (pm, row) in self.params.p.iter_mut().zip(w.rows()) {
                        *pm -= alpha * linalg::dot(row.as_slice().expect("contiguous"), g);
                    }
                }
            },
            Mode::W => {
                let w = self.params.w.as_mut().expect("W-mode stores W");
                for (pm, mut row) in self.params.p.iter().zip(w.rows_mut()) {
                    let a = alpha * pm;
                    for (wk, gk) in row.iter_mut().zip(g) {
                        *wk -= a * gk;
                    }
                }
            }
            Mode::Joint => {
                // both gradients at the current point: row m of W and p_m only meet here
                let w = self.params.w.as_mut().expect("joint mode stores W");
                for (pm, mut row) in self.params.p.iter_mut().zip(w.rows_mut()) {
                    let dp = alpha * linalg::dot(row.as_slice().expect("contiguous"), g);
                    let a = alpha * *pm;
                    for (wk, gk) in row.iter_mut().zip(g) {
                        *wk -= a * gk;
                    }
                    *pm -= dp;
                }
            }
        }
        self.params.q(&mut self.q);
        self.step += 1;
        if self.q.iter().any(|v| !v.is_finite()) {
            return Err(self.non_finite("q", None));
        }
        Ok(())
    }

    /// Attention mass per group of training sample `i` (last forward pass).
    pub fn mass(&self, i: usize) -> trajectory::PerGroup {
        let s = self.s.row(i);
        trajectory::group_mass(s.as_slice().expect("contiguous"), &self.data.groups)
    }

    /// Definition 4.1 scores S_i of every training sample (last forward pass).
    pub fn selection_scores(&self) -> Vec<f64> {
        (0..self.f.len())
            .map(|i| trajectory::selection_score(&self.mass(i)))
            .collect()
    }

    /// Record a checkpoint from the last [`Trainer::forward_backward`] (evaluates the
    /// test set); `cumulative` holds the Definition 4.1 sums up to this step.
    pub fn checkpoint(&self, cumulative: Cumulative) -> Checkpoint {
        let groups = &self.data.groups;
        let samples = (0..self.f.len())
            .map(|i| {
                let mass = self.mass(i);
                SampleState {
                    f: self.f[i],
                    top: self.att[i].top,
                    gap: self.att[i].gap,
                    rest: self.att[i].rest,
                    mass,
                    selection_score: trajectory::selection_score(&mass),
                }
            })
            .collect();
        Checkpoint::new(
            self.step,
            self.loss,
            accuracy(&self.data.test, &self.q, self.cfg.formulation),
            linalg::norm(&self.q),
            linalg::norm(&self.grad_q),
            cumulative,
            samples,
            groups,
            &self.data.train.y,
            &self.data.train.y_true,
        )
    }

    /// Train for `cfg.steps` steps, recording the checkpoints of
    /// [`trajectory::schedule`]. `progress(step)` is called every 100 steps and at the end.
    pub fn run(cfg: &Config, data: &Dataset, progress: &mut dyn FnMut(u64)) -> Result<Trajectory> {
        let schedule = trajectory::schedule(cfg.steps, cfg.record.checkpoints_per_decade);
        let mut next = schedule.iter().peekable();
        let mut tr = Trainer::new(cfg, data);
        let mut checkpoints = Vec::with_capacity(schedule.len());
        let mut cumulative = Cumulative::default();
        let (y, y_true) = (&data.train.y, &data.train.y_true);
        loop {
            tr.forward_backward()?;
            cumulative.add(&tr.selection_scores(), y, y_true);
            if next.peek() == Some(&&tr.step) {
                checkpoints.push(tr.checkpoint(cumulative));
                next.next();
            }
            if tr.step == cfg.steps {
                break;
            }
            tr.update()?;
            if tr.step.is_multiple_of(100) {
                progress(tr.step);
            }
        }
        progress(tr.step);
        Ok(Trajectory {
            format: trajectory::FORMAT.to_string(),
            trainer: TrainerInfo {
                kind: "f64".into(),
                prec_bits: 53,
                formulation: cfg.formulation,
            },
            config: cfg.clone(),
            y_true: data.train.y_true.clone(),
            y: data.train.y.clone(),
            checkpoints,
        })
    }
}
