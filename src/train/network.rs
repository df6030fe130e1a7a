//! The block trainer: a network model ([`Network`]: the encoder) trained by the one step
//! loop ([`super::drive`]) and the one block update ([`step_rule::apply`]: constant or
//! normalised GD, Adam and AdamW, the schedule and clipping, as the token-selection
//! trainer's blocks take them), in any arithmetic.
//!
//! ```text
//! forward_backward:  the network's pass over the training set, the gradient of the
//!                    mean loss with respect to every block
//! update:            every trained block by the step rule, in declaration order
//! ```
//!
//! Its record is the token-selection trajectory's ([`Checkpoint`]) with the attending
//! row's in-sequence position (the encoder's cls token) as the prompt's record: each
//! sample's `top`, `selection`, `gap` and `rest` describe its T tokens (the softmax of
//! their scores alone), `mass` the attention on each group's tokens (summing to 1 - s_0),
//! `prompt` the attention s_0 on position 0, and the checkpoint's `test_loss` the test
//! set's mean loss. The blocks are never named here.

use crate::arith::Arith;
use crate::config::{Config, Formulation, Method, ModelKind};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::io::trajectory::{
    self, Checkpoint, Cumulative, PromptState, SampleState, TrainerInfo, Trajectory,
};
use crate::model::blocks::Blocks;
use crate::model::encoder::Encoder;
use crate::model::network::{Network, Pass};
use crate::model::query::Grad;
use crate::model::{Model, Softmax, TokenSelection};

use super::adam;
use super::drive::{Clocked, Control, Event, Stepper, drive};
use super::record::{
    Recorder, attention_by_noise, group_mass, prompt_share, selection_by_noise, selection_score,
};
use super::step_rule::{StepRule, apply, clip_factor};

/// A network model's trainer: its blocks, their gradient and the last pass.
#[derive(Debug)]
pub struct NetTrainer<'a, A: Arith, N: Network> {
    /// The run's config.
    pub cfg: &'a Config,
    /// The run's data.
    pub data: &'a Dataset,
    /// The arithmetic.
    pub ar: A,
    /// The model.
    pub net: N,
    /// The parameter blocks, in declaration order.
    pub theta: Blocks<A::Real>,
    /// The gradient of the last pass's mean loss, one vector per block.
    grad: Vec<Vec<A::Real>>,
    /// The last pass over the training set.
    pub pass: Pass<A::Real>,
    /// Adam's state (an Adam or AdamW run).
    adam: Option<adam::State<A::Real>>,
    /// Steps done.
    pub step: u64,
}

impl<'a, A: Arith, N: Network> NetTrainer<'a, A, N> {
    /// The trainer of `net` on `data` at step 0: its blocks drawn from their streams
    /// under the config's seed ([`Blocks::init`]). `data` must have the config's shapes
    /// and binary labels (a config error otherwise).
    pub fn new(cfg: &'a Config, data: &'a Dataset, ar: A, net: N) -> Result<Self> {
        let (n, t, d) = data.train.x.dim();
        if (n, t, d) != (cfg.n_train, cfg.layout.tokens, cfg.d)
            || data.test.x.dim() != (cfg.n_test, t, d)
        {
            return Err(Error::config(
                "d",
                format!(
                    "the data's shapes (train {:?}, test {:?}) are not the config's (n_train \
                     {}, n_test {}, T {}, d {})",
                    data.train.x.dim(),
                    data.test.x.dim(),
                    cfg.n_train,
                    cfg.n_test,
                    cfg.layout.tokens,
                    cfg.d
                ),
            ));
        }
        if let Some(y) = data
            .train
            .y
            .iter()
            .chain(&data.test.y)
            .find(|y| !matches!(y, 1 | -1))
        {
            return Err(Error::config(
                "model.kind",
                format!("the {} takes labels +1 or -1, got {y}", net.name()),
            ));
        }
        let theta = Blocks::init(&ar, net.blocks(), cfg.seed);
        let grad = theta.values.iter().map(|v| ar.zeros(v.len())).collect();
        let adam = cfg
            .optimizer
            .is_adam()
            .then(|| adam::State::zeros(&ar, &theta));
        Ok(NetTrainer {
            cfg,
            data,
            pass: Pass::new(&ar),
            ar,
            net,
            theta,
            grad,
            adam,
            step: 0,
        })
    }

    /// The pass over the test set at the current blocks (no gradient).
    pub fn test_pass(&self) -> Pass<A::Real> {
        let mut p = Pass::new(&self.ar);
        let test = &self.data.test;
        self.net
            .pass(&self.ar, test.x.view(), &test.y, &self.theta, &mut p, None);
        p
    }

    /// The first non-finite value of the last pass (its outputs, loss or gradient), as
    /// the error that ends the run.
    fn check_finite(&self) -> Result<()> {
        let ar = &self.ar;
        let err = |quantity: &'static str, sample: Option<usize>| Error::NonFinite {
            step: self.step,
            quantity,
            sample,
        };
        if let Some(i) = self.pass.outputs.iter().position(|f| !ar.is_finite(f)) {
            return Err(err("output", Some(i / self.pass.classes.max(1))));
        }
        if !ar.is_finite(&self.pass.loss) {
            return Err(err("loss", None));
        }
        if self.grad.iter().flatten().any(|g| !ar.is_finite(g)) {
            return Err(err("gradient", None));
        }
        Ok(())
    }

    /// The trainer's description in a trajectory.
    pub fn info(&self) -> TrainerInfo {
        TrainerInfo {
            kind: self.ar.kind(),
            prec_bits: self.ar.prec(),
            formulation: self.cfg.formulation,
            method: Method::Direct,
        }
    }

    /// Training sample `i`'s group masses at the last pass: the attention on its T tokens
    /// (the attending row's last T positions), by group.
    fn group_mass(&self, i: usize) -> [A::Real; 4] {
        let pos = self.pass.positions;
        let t = self.data.groups.len();
        let s = &self.pass.attention[i * pos + pos - t..(i + 1) * pos];
        group_mass(&self.ar, s, &self.data.groups)
    }

    /// Training sample `i`'s record at the last pass.
    fn sample_state(&self, i: usize) -> SampleState {
        let ar = &self.ar;
        let p = &self.pass;
        let pos = p.positions;
        let t = self.data.groups.len();
        let (z, s) = (
            &p.scores[i * pos..(i + 1) * pos],
            &p.attention[i * pos..(i + 1) * pos],
        );
        let mut full = Softmax::new(ar);
        crate::model::softmax(ar, z, &mut ar.zeros(pos), Formulation::Stable, &mut full);
        let mut tok = Softmax::new(ar);
        crate::model::softmax(
            ar,
            &z[pos - t..],
            &mut ar.zeros(t),
            Formulation::Stable,
            &mut tok,
        );
        let m = self.group_mass(i);
        let mass = crate::io::trajectory::PerGroup::from_array(m.clone().map(|v| ar.to_f64(&v)));
        let score = selection_score(ar, m);
        SampleState {
            f: ar.to_f64(&p.outputs[i]),
            outputs: None,
            proof: (),
            top: tok.top,
            selection: tok.selection,
            gap: ar.to_f64(&tok.gap),
            rest: ar.to_f64(&tok.rest),
            mass,
            selection_score: ar.to_f64(&score),
            prompt: Some(PromptState {
                attention: ar.to_f64(&s[0]),
                top: full.top == 0,
            }),
        }
    }

    /// Samples of `pass` whose proved prediction sign(f) is their label `y`.
    fn correct(&self, pass: &Pass<A::Real>, y: &[i8]) -> usize {
        pass.outputs
            .iter()
            .zip(y)
            .filter(|(f, y)| {
                TokenSelection.predict(&self.ar, std::slice::from_ref(*f)) == Some(**y)
            })
            .count()
    }

    /// A checkpoint of the last pass (evaluates the test set); `cumulative` holds the
    /// Definition 4.1 sums up to this step.
    pub fn checkpoint(&self, cumulative: Cumulative) -> Checkpoint {
        let ar = &self.ar;
        let (y, y_true) = (&self.data.train.y, &self.data.train.y_true);
        let samples: Vec<SampleState> = (0..y.len()).map(|i| self.sample_state(i)).collect();
        let mass: Vec<[f64; 4]> = samples.iter().map(|s| s.mass.to_array()).collect();
        let groups = &self.data.groups;
        let test = self.test_pass();
        let n_test = self.data.test.y.len().max(1) as f64;
        Checkpoint {
            proof: (),
            step: self.step,
            train_loss: ar.to_f64(&self.pass.loss),
            test_loss: Some(ar.to_f64(&test.loss)),
            train_accuracy: self.correct(&self.pass, y) as f64 / y.len().max(1) as f64,
            test_accuracy: self.correct(&test, &self.data.test.y) as f64 / n_test,
            q_norm: ar.norm_f64(&self.pass.q),
            grad_norm: ar.norm_f64(&self.pass.grad_q),
            attention: attention_by_noise(&mass, y, y_true),
            selection: selection_by_noise(
                samples.iter().map(|s| (s.selection, groups[s.top])),
                y,
                y_true,
            ),
            cumulative,
            prompt: Some(prompt_share(&samples, y, y_true)),
            samples,
            classes: None,
            direction: None,
        }
    }

    /// The Definition 4.1 scores of every training sample at the last pass, rounded.
    /// (Every step: the group masses only, not the checkpoint's softmax summaries.)
    pub fn selection_scores(&self) -> Vec<f64> {
        let ar = &self.ar;
        (0..self.data.train.y.len())
            .map(|i| ar.to_f64(&selection_score(ar, self.group_mass(i))))
            .collect()
    }

    /// Drive the trainer to `cfg.steps`, recording its trajectory at the checkpoints of
    /// [`super::record::schedule`]; `after_update(step)` after each update (progress).
    pub fn record(&mut self, after_update: &mut dyn FnMut(u64)) -> Result<Trajectory> {
        super::record::check_size(self.cfg)?;
        let mut rec = Recorder::new(self.cfg);
        let first = self.cfg.model.first_label();
        drive(self, self.cfg.steps, |tr, event| {
            match event {
                Event::Forward => {
                    let (y, y_true) = (&tr.data.train.y, &tr.data.train.y_true);
                    rec.observe_with(tr.step, &tr.selection_scores(), y, y_true, first, |c| {
                        tr.checkpoint(c)
                    });
                }
                Event::Update => after_update(tr.step),
            }
            Ok(Control::Continue)
        })?;
        Ok(Trajectory {
            format: trajectory::FORMAT.to_string(),
            trainer: self.info(),
            config: self.cfg.clone(),
            y_true: self.data.train.y_true.clone(),
            y: self.data.train.y.clone(),
            checkpoints: rec.checkpoints,
            direction: None,
        })
    }
}

/// Train the network model `cfg` names (`[model] kind`: the encoder) on `data` in `ar`
/// for `cfg.steps` steps, recording its trajectory; `progress(step)` after each update.
pub fn run<A: Arith>(
    cfg: &Config,
    data: &Dataset,
    ar: A,
    progress: &mut dyn FnMut(u64),
) -> Result<Trajectory> {
    match cfg.model.kind {
        ModelKind::Encoder => NetTrainer::new(cfg, data, ar, Encoder::of(cfg))?.record(progress),
        kind => Err(Error::config(
            "model.kind",
            format!("{} is not a network model", kind.name()),
        )),
    }
}

impl<A: Arith, N: Network> Stepper for NetTrainer<'_, A, N> {
    fn forward_backward(&mut self) -> Result<()> {
        let train = &self.data.train;
        self.net.pass(
            &self.ar,
            train.x.view(),
            &train.y,
            &self.theta,
            &mut self.pass,
            Some(&mut self.grad),
        );
        if self.pass.classes != 1 {
            return Err(Error::config(
                "model.kind",
                format!(
                    "the {} has {} outputs per sample; the block trainer records binary \
                     models only",
                    self.net.name(),
                    self.pass.classes
                ),
            ));
        }
        self.check_finite()
    }

    fn update(&mut self) -> Result<()> {
        let ar = &self.ar;
        let rule = StepRule::at(self.cfg, self.step);
        let grads: Vec<Option<Grad<A::Real>>> = self
            .theta
            .decl
            .iter()
            .zip(self.grad.iter_mut())
            .map(|(b, g)| b.trained.then(|| Grad::Dense(std::mem::take(g))))
            .collect();
        let clip = rule.clip.map(|c| {
            let norms: Vec<A::Real> = grads.iter().flatten().map(|g| g.norm(ar)).collect();
            clip_factor(ar, c, &norms)
        });
        let moved = apply(
            ar,
            &rule,
            clip.as_ref(),
            &grads,
            &mut self.theta,
            self.adam.as_mut(),
        );
        // the gradient buffers back in place (no allocation per step)
        for (g, back) in grads.into_iter().zip(self.grad.iter_mut()) {
            if let Some(Grad::Dense(v)) = g {
                *back = v;
            }
        }
        moved.map_err(|s| s.error(self.step))?;
        self.step += 1;
        Ok(())
    }
}

impl<A: Arith, N: Network> Clocked for NetTrainer<'_, A, N> {
    fn step(&self) -> u64 {
        self.step
    }
}
