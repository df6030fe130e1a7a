//! The twin trainer: `crate::train` in MPFR, step for step on the same f64 data.
//!
//! Read side by side with `src/train.rs`. The head nu and the values g_t = <nu, x_t>
//! are recomputed here in the twin's arithmetic from the f64 signals and tokens (the
//! data); the initial parameters are the f64 trainer's, converted exactly.

use std::path::Path;

use rug::Float;
use serde::{Deserialize, Serialize};

use super::Arith;
use super::model::{self, Attention, Work};
use crate::config::{Config, Formulation, Mode};
use crate::data::{Dataset, Split};
use crate::error::{Error, Result};
use crate::train::Params;
use crate::trajectory::{
    self, Checkpoint, Cumulative, PerGroup, SampleState, TrainerInfo, Trajectory,
};

/// The head nu and g_t = <nu, x_t> for every token of `split`, in `ar` (mirror of
/// `Dataset::generate`).
pub fn head_values(ar: &Arith, data: &Dataset, split: &Split, w: &mut Work) -> Vec<Float> {
    let d = data.mu_pos.len();
    let mut diff = ar.zeros(d);
    for ((v, a), b) in diff.iter_mut().zip(&data.mu_pos).zip(&data.mu_neg) {
        ar.set(v, *a);
        ar.sub(v, *b);
    }
    let mut scale = ar.zero();
    model::dot(ar, &diff, &diff, w, &mut scale);
    ar.sqrt(&mut scale);
    ar.mul(&mut scale, data.mu_norm);
    for v in diff.iter_mut() {
        ar.div(v, &scale);
    }
    let nu = diff;
    let (n, t_len, _) = split.x.dim();
    let mut g = ar.zeros(n * t_len);
    for i in 0..n {
        let x = split.tokens(i);
        for t in 0..t_len {
            let row = x.row(t);
            model::dot_f64(
                ar,
                row.as_slice().expect("contiguous"),
                &nu,
                w,
                &mut g[i * t_len + t],
            );
        }
    }
    g
}

/// Twin of [`crate::train::forward`] for sample `i` of `split` (g: that split's head values).
#[allow(clippy::too_many_arguments)]
pub fn forward(
    ar: &Arith,
    split: &Split,
    g: &[Float],
    i: usize,
    q: &[Float],
    form: Formulation,
    w: &mut Work,
    z: &mut [Float],
    s: &mut [Float],
    att: &mut Attention,
    f: &mut Float,
) {
    let t_len = z.len();
    model::scores(ar, split.tokens(i), q, w, z);
    model::softmax(ar, z, s, form, w, att);
    model::output(ar, s, &g[i * t_len..(i + 1) * t_len], att.top, form, w, f);
}

/// The twin trainer's state.
#[derive(Debug, Clone)]
pub struct TwinTrainer<'a> {
    cfg: &'a Config,
    data: &'a Dataset,
    /// The arithmetic (precision, f64 emulation).
    pub ar: Arith,
    /// The formulation this twin runs.
    pub form: Formulation,
    /// p.
    pub p: Vec<Float>,
    /// W, row-major d x d (`None`: the identity).
    pub w: Option<Vec<Float>>,
    /// q = W^T p.
    pub q: Vec<Float>,
    /// dL/dq (after [`TwinTrainer::forward_backward`]).
    pub grad_q: Vec<Float>,
    /// Empirical risk.
    pub loss: Float,
    /// Scores, n x T row-major.
    pub z: Vec<Float>,
    /// Attention, n x T row-major.
    pub s: Vec<Float>,
    /// Attention summaries.
    pub att: Vec<Attention>,
    /// Outputs f_i.
    pub f: Vec<Float>,
    g_train: Vec<Float>,
    g_test: Vec<Float>,
    contrib: Vec<Float>,
    scratch: Vec<Float>,
    work: Work,
    tmp: [Float; 3],
    /// Steps done.
    pub step: u64,
}

impl<'a> TwinTrainer<'a> {
    /// A twin at step 0 with the f64 trainer's initial parameters (exactly converted).
    pub fn new(cfg: &'a Config, data: &'a Dataset, ar: Arith, form: Formulation) -> Self {
        let (n, t, d) = data.train.x.dim();
        let mut work = Work::new(&ar);
        let params = Params::init(cfg);
        let conv = |v: &[f64]| v.iter().map(|x| ar.from_f64(*x)).collect::<Vec<_>>();
        let p = conv(params.p.as_slice().expect("contiguous"));
        let w = params
            .w
            .as_ref()
            .map(|w| conv(w.as_slice().expect("standard layout")));
        let g_train = head_values(&ar, data, &data.train, &mut work);
        let g_test = head_values(&ar, data, &data.test, &mut work);
        let mut tr = TwinTrainer {
            cfg,
            data,
            ar,
            form,
            p,
            w,
            q: ar.zeros(d),
            grad_q: ar.zeros(d),
            loss: ar.zero(),
            z: ar.zeros(n * t),
            s: ar.zeros(n * t),
            att: vec![Attention::new(&ar); n],
            f: ar.zeros(n),
            g_train,
            g_test,
            contrib: ar.zeros(n * d),
            scratch: ar.zeros(d),
            work,
            tmp: std::array::from_fn(|_| ar.zero()),
            step: 0,
        };
        tr.compute_q();
        tr
    }

    /// Twin of [`crate::train::Trainer::set_params`]: replace p and W (exactly converted)
    /// and recompute q.
    pub fn set_params(&mut self, params: &Params) {
        let ar = self.ar;
        let conv = |v: &[f64]| v.iter().map(|x| ar.from_f64(*x)).collect::<Vec<_>>();
        self.p = conv(params.p.as_slice().expect("contiguous"));
        self.w = params
            .w
            .as_ref()
            .map(|w| conv(w.as_slice().expect("standard layout")));
        self.compute_q();
    }

    /// Twin of [`Params::q`]: q = sum_m p_m W[m, :] in order m = 0..d.
    fn compute_q(&mut self) {
        let ar = self.ar;
        match &self.w {
            None => {
                for (qk, pk) in self.q.iter_mut().zip(&self.p) {
                    ar.set(qk, pk);
                }
            }
            Some(w) => {
                let d = self.q.len();
                for qk in self.q.iter_mut() {
                    ar.set(qk, 0.0);
                }
                let t = &mut self.tmp[0];
                for (m, pm) in self.p.iter().enumerate() {
                    for (qk, wmk) in self.q.iter_mut().zip(&w[m * d..(m + 1) * d]) {
                        ar.set(t, pm * wmk);
                        ar.add(qk, &*t);
                    }
                }
            }
        }
    }

    /// Twin of [`crate::train::Trainer::forward_backward`].
    pub fn forward_backward(&mut self) -> Result<()> {
        let ar = self.ar;
        let train = &self.data.train;
        let (n, t_len, d) = train.x.dim();
        let [u, coef, lsum] = &mut self.tmp;
        ar.set(lsum, 0.0);
        for i in 0..n {
            let z = &mut self.z[i * t_len..(i + 1) * t_len];
            let s = &mut self.s[i * t_len..(i + 1) * t_len];
            let (att, f) = (&mut self.att[i], &mut self.f[i]);
            forward(
                &ar,
                train,
                &self.g_train,
                i,
                &self.q,
                self.form,
                &mut self.work,
                z,
                s,
                att,
                f,
            );
            if !f.is_finite() {
                return Err(non_finite(self.step, "f", Some(i)));
            }
            let y = train.y[i] as f64;
            ar.set(u, &*f * y);
            model::loss(&ar, u, &mut self.work, coef);
            ar.add(lsum, &*coef);
            model::loss_derivative(&ar, u, &mut self.work, coef);
            ar.mul(coef, y);
            ar.div(coef, n as f64);
            model::grad_q(
                &ar,
                train.tokens(i),
                s,
                &self.g_train[i * t_len..(i + 1) * t_len],
                att,
                f,
                coef,
                self.form,
                &mut self.work,
                &mut self.scratch,
                &mut self.contrib[i * d..(i + 1) * d],
            );
        }
        ar.set(&mut self.loss, &*lsum);
        ar.div(&mut self.loss, n as f64);
        for gk in self.grad_q.iter_mut() {
            ar.set(gk, 0.0);
        }
        for i in 0..n {
            for (gk, vk) in self
                .grad_q
                .iter_mut()
                .zip(&self.contrib[i * d..(i + 1) * d])
            {
                ar.add(gk, vk);
            }
        }
        if !self.loss.is_finite() {
            return Err(non_finite(self.step, "loss", None));
        }
        if self.grad_q.iter().any(|g| !g.is_finite()) {
            return Err(non_finite(self.step, "grad_q", None));
        }
        Ok(())
    }

    /// Twin of [`crate::train::Trainer::update`].
    pub fn update(&mut self) {
        let ar = self.ar;
        let alpha = self.cfg.step_size;
        let d = self.q.len();
        let [t, a, b] = &mut self.tmp;
        match self.cfg.mode {
            Mode::P => match &self.w {
                None => {
                    // linalg::axpy(-alpha, g, p): p_k += (-alpha) g_k
                    for (pk, gk) in self.p.iter_mut().zip(&self.grad_q) {
                        ar.set(t, gk * -alpha);
                        ar.add(pk, &*t);
                    }
                }
                Some(w) => {
                    for (m, pm) in self.p.iter_mut().enumerate() {
                        model::dot(&ar, &w[m * d..(m + 1) * d], &self.grad_q, &mut self.work, a);
                        ar.mul(a, alpha);
                        ar.sub(pm, &*a);
                    }
                }
            },
            Mode::W => {
                let w = self.w.as_mut().expect("W-mode stores W");
                for (m, pm) in self.p.iter().enumerate() {
                    ar.set(a, pm * alpha);
                    for (wk, gk) in w[m * d..(m + 1) * d].iter_mut().zip(&self.grad_q) {
                        ar.set(t, &*a * gk);
                        ar.sub(wk, &*t);
                    }
                }
            }
            Mode::Joint => {
                let w = self.w.as_mut().expect("joint mode stores W");
                for (m, pm) in self.p.iter_mut().enumerate() {
                    let row = &mut w[m * d..(m + 1) * d];
                    model::dot(&ar, row, &self.grad_q, &mut self.work, a);
                    ar.mul(a, alpha);
                    ar.set(b, &*pm * alpha);
                    for (wk, gk) in row.iter_mut().zip(&self.grad_q) {
                        ar.set(t, &*b * gk);
                        ar.sub(wk, &*t);
                    }
                    ar.sub(pm, &*a);
                }
            }
        }
        self.compute_q();
        self.step += 1;
    }

    /// ||v|| in the twin's arithmetic (mirror of `linalg::norm`), rounded to f64.
    fn norm(&mut self, which: Which) -> f64 {
        let v = match which {
            Which::Q => &self.q,
            Which::Grad => &self.grad_q,
        };
        let out = &mut self.tmp[0];
        model::dot(&self.ar, v, v, &mut self.work, out);
        self.ar.sqrt(out);
        out.to_f64()
    }

    /// Accuracy on the test split against Y*, in the twin's arithmetic.
    pub fn test_accuracy(&mut self) -> f64 {
        let test = &self.data.test;
        let t_len = test.x.dim().1;
        let ar = self.ar;
        let mut z = ar.zeros(t_len);
        let mut s = ar.zeros(t_len);
        let mut att = Attention::new(&ar);
        let mut f = ar.zero();
        let mut correct = 0;
        for i in 0..test.len() {
            forward(
                &ar,
                test,
                &self.g_test,
                i,
                &self.q,
                self.form,
                &mut self.work,
                &mut z,
                &mut s,
                &mut att,
                &mut f,
            );
            if crate::model::predict(f.to_f64()) == test.y_true[i] {
                correct += 1;
            }
        }
        correct as f64 / test.len() as f64
    }

    /// Attention mass per group of training sample `i`, summed in the twin's arithmetic
    /// (mirror of `trajectory::group_mass`) and rounded to f64.
    pub fn mass(&self, i: usize) -> PerGroup {
        let mut mass = self.ar.zeros(4);
        self.group_mass_into(i, &mut mass);
        PerGroup::from_array(std::array::from_fn(|k| mass[k].to_f64()))
    }

    /// Twin of `trajectory::group_mass`: sum_{t in group} s_t of sample `i` into `mass`
    /// (four values, group order), in token order.
    fn group_mass_into(&self, i: usize, mass: &mut [Float]) {
        let groups = &self.data.groups;
        let t_len = groups.len();
        for m in mass.iter_mut() {
            self.ar.set(m, 0.0);
        }
        for (st, g) in self.s[i * t_len..(i + 1) * t_len].iter().zip(groups) {
            self.ar.add(&mut mass[g.index()], st);
        }
    }

    /// Definition 4.1 scores S_i = m_R (m_W_same + m_W_opposite + m_I), evaluated in the
    /// twin's arithmetic and rounded to f64.
    pub fn selection_scores(&self) -> Vec<f64> {
        let ar = self.ar;
        let mut mass = ar.zeros(4);
        (0..self.f.len())
            .map(|i| {
                self.group_mass_into(i, &mut mass);
                let [r, ws, wo, irr] = &mut mass[..] else {
                    unreachable!("four groups")
                };
                ar.add(ws, &*wo);
                ar.add(ws, &*irr);
                ar.mul(ws, &*r);
                ws.to_f64()
            })
            .collect()
    }

    /// Twin of [`crate::train::Trainer::checkpoint`]; values rounded to f64.
    pub fn checkpoint(&mut self, cumulative: Cumulative) -> Checkpoint {
        let groups = self.data.groups.clone();
        let scores = self.selection_scores();
        let samples = (0..self.f.len())
            .map(|i| SampleState {
                f: self.f[i].to_f64(),
                top: self.att[i].top,
                gap: self.att[i].gap.to_f64(),
                rest: self.att[i].rest.to_f64(),
                mass: self.mass(i),
                selection_score: scores[i],
            })
            .collect();
        let test_accuracy = self.test_accuracy();
        Checkpoint::new(
            self.step,
            self.loss.to_f64(),
            test_accuracy,
            self.norm(Which::Q),
            self.norm(Which::Grad),
            cumulative,
            samples,
            &groups,
            &self.data.train.y,
            &self.data.train.y_true,
        )
    }

    /// Twin of [`crate::train::Trainer::run`].
    pub fn run(
        cfg: &Config,
        data: &Dataset,
        ar: Arith,
        form: Formulation,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Trajectory> {
        TwinTrainer::run_resumable(cfg, data, ar, form, None, None, progress)
    }

    /// [`TwinTrainer::run`] that can start from a saved [`TwinState`] and save its state
    /// every `save.1` steps to `save.0` (atomically: temporary file, then rename).
    /// A resumed run is bit-identical to an uninterrupted one.
    pub fn run_resumable(
        cfg: &Config,
        data: &Dataset,
        ar: Arith,
        form: Formulation,
        resume: Option<TwinState>,
        save: Option<(&Path, u64)>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Trajectory> {
        let schedule = trajectory::schedule(cfg.steps, cfg.record.checkpoints_per_decade);
        let mut tr = TwinTrainer::new(cfg, data, ar, form);
        let mut checkpoints = Vec::with_capacity(schedule.len());
        let mut cumulative = Cumulative::default();
        if let Some(state) = resume {
            state.check(cfg, &ar, form)?;
            tr.restore(&state)?;
            checkpoints = state.checkpoints;
            cumulative = state.cumulative;
        }
        let start = tr.step;
        let mut next = schedule.iter().filter(|s| **s >= start).peekable();
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
            tr.update();
            if let Some((path, _)) = save.filter(|(_, every)| tr.step.is_multiple_of(*every)) {
                tr.state(cumulative, &checkpoints).save(path)?;
            }
            progress(tr.step);
        }
        Ok(Trajectory {
            format: trajectory::FORMAT.to_string(),
            trainer: TrainerInfo {
                kind: if ar.emulates_f64() {
                    "mpfr-f64-predictor"
                } else {
                    "mpfr"
                }
                .into(),
                prec_bits: ar.prec(),
                formulation: form,
            },
            config: cfg.clone(),
            y_true: data.train.y_true.clone(),
            y: data.train.y.clone(),
            checkpoints,
        })
    }

    /// The resumable state after the last update: step, p, W (exact, hexadecimal), the
    /// Definition 4.1 sums and the checkpoints recorded so far.
    pub fn state(&self, cumulative: Cumulative, checkpoints: &[Checkpoint]) -> TwinState {
        let hex = |v: &[Float]| v.iter().map(|x| x.to_string_radix(16, None)).collect();
        TwinState {
            format: STATE_FORMAT.to_string(),
            config: self.cfg.clone(),
            prec_bits: self.ar.prec(),
            f64_predictor: self.ar.emulates_f64(),
            formulation: self.form,
            step: self.step,
            p: hex(&self.p),
            w: self.w.as_ref().map(|w| hex(w)),
            cumulative,
            checkpoints: checkpoints.to_vec(),
        }
    }

    /// Restore p, W and the step from a state (q is recomputed).
    pub fn restore(&mut self, st: &TwinState) -> Result<()> {
        let prec = self.ar.prec();
        let parse = |v: &[String], what: &str| -> Result<Vec<Float>> {
            v.iter()
                .map(|s| {
                    Float::parse_radix(s, 16)
                        .map(|x| Float::with_val(prec, x))
                        .map_err(|e| state_error(format!("bad {what} value `{s}`: {e}")))
                })
                .collect()
        };
        let p = parse(&st.p, "p")?;
        if p.len() != self.p.len() {
            return Err(state_error(format!(
                "p has {} entries, d = {}",
                p.len(),
                self.p.len()
            )));
        }
        let w = match (&st.w, &self.w) {
            (Some(w), Some(cur)) if w.len() == cur.len() => Some(parse(w, "W")?),
            (None, None) => None,
            _ => return Err(state_error("W does not match the config's mode".into())),
        };
        self.p = p;
        self.w = w;
        self.step = st.step;
        self.compute_q();
        Ok(())
    }
}

/// Format tag of twin state files.
pub const STATE_FORMAT: &str = "tokensel-twin-state/1";

/// A resumable snapshot of a twin run (see [`TwinTrainer::run_resumable`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TwinState {
    /// Always [`STATE_FORMAT`].
    pub format: String,
    /// The run's config (a resumed run must use the same).
    pub config: Config,
    /// Precision in bits.
    pub prec_bits: u32,
    /// f64-predictor arithmetic.
    pub f64_predictor: bool,
    /// Formulation.
    pub formulation: Formulation,
    /// Steps done.
    pub step: u64,
    /// p, exact hexadecimal MPFR strings.
    pub p: Vec<String>,
    /// W (row-major), exact hexadecimal MPFR strings.
    pub w: Option<Vec<String>>,
    /// Definition 4.1 sums over steps 0..step-1.
    pub cumulative: Cumulative,
    /// Checkpoints recorded so far.
    pub checkpoints: Vec<Checkpoint>,
}

fn state_error(message: String) -> Error {
    Error::Parse {
        what: "twin state",
        path: "(state)".into(),
        message,
    }
}

impl TwinState {
    /// Write atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string(self).expect("state serialises");
        trajectory::write_atomic(path, text.as_bytes())
    }

    /// Read a state file.
    pub fn load(path: &Path) -> Result<TwinState> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let st: TwinState = serde_json::from_str(&text).map_err(|e| Error::Parse {
            what: "twin state",
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        if st.format != STATE_FORMAT {
            return Err(Error::Parse {
                what: "twin state",
                path: path.to_path_buf(),
                message: format!("format `{}` is not `{STATE_FORMAT}`", st.format),
            });
        }
        Ok(st)
    }

    /// Refuse to resume under another config, precision or formulation.
    pub fn check(&self, cfg: &Config, ar: &Arith, form: Formulation) -> Result<()> {
        let mismatch = |what: &str| {
            Err(Error::config(
                "resume",
                format!("the saved state has another {what} than this run"),
            ))
        };
        if &self.config != cfg {
            return mismatch("config");
        }
        if self.prec_bits != ar.prec() || self.f64_predictor != ar.emulates_f64() {
            return mismatch("precision");
        }
        if self.formulation != form {
            return mismatch("formulation");
        }
        if self.step > cfg.steps {
            return mismatch("step count");
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Which {
    Q,
    Grad,
}

fn non_finite(step: u64, quantity: &'static str, sample: Option<usize>) -> Error {
    Error::NonFinite {
        step,
        quantity,
        sample,
    }
}
