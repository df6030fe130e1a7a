//! The candidate explanations of an external trajectory: tokensel's own direct step
//! (what implementations compute) in float64 and float32, each with the stable and the
//! naive softmax gradient, replayed in lockstep with the twin (SPEC section 12).

use serde::{Deserialize, Serialize};

use crate::arith::Arith;
use crate::config::{Config, Formulation, Method, Mode};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::io::external::Dtype;
use crate::quantity::Quantity;
use crate::train::drive::Stepper;
use crate::train::{Engine, Trainer};

/// A candidate explanation: an arithmetic and a softmax gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Candidate {
    /// float64, stable softmax gradient (tokensel's f64 trainer, direct step).
    #[serde(rename = "f64-stable")]
    F64Stable,
    /// float64, naive softmax gradient.
    #[serde(rename = "f64-naive")]
    F64Naive,
    /// float32 (data rounded to binary32 on entry), stable softmax gradient.
    #[serde(rename = "f32-stable")]
    F32Stable,
    /// float32, naive softmax gradient.
    #[serde(rename = "f32-naive")]
    F32Naive,
}

impl Candidate {
    /// Every candidate, in report order.
    pub const ALL: [Candidate; 4] = [
        Candidate::F64Stable,
        Candidate::F64Naive,
        Candidate::F32Stable,
        Candidate::F32Naive,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Candidate::F64Stable => "f64-stable",
            Candidate::F64Naive => "f64-naive",
            Candidate::F32Stable => "f32-stable",
            Candidate::F32Naive => "f32-naive",
        }
    }

    /// What it stands for, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Candidate::F64Stable => "float64 rounding (stable softmax gradient)",
            Candidate::F64Naive => "float64 rounding with the naive softmax gradient",
            Candidate::F32Stable => "float32 rounding (stable softmax gradient)",
            Candidate::F32Naive => "float32 rounding with the naive softmax gradient",
        }
    }

    /// The dtype it computes in.
    pub fn dtype(self) -> Dtype {
        match self {
            Candidate::F64Stable | Candidate::F64Naive => Dtype::Float64,
            Candidate::F32Stable | Candidate::F32Naive => Dtype::Float32,
        }
    }

    /// Its softmax gradient.
    pub fn formulation(self) -> Formulation {
        match self {
            Candidate::F64Stable | Candidate::F32Stable => Formulation::Stable,
            Candidate::F64Naive | Candidate::F32Naive => Formulation::Naive,
        }
    }
}

impl std::fmt::Display for Candidate {
    /// The name, padded to the formatter's width.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// A candidate that `judge` does not run for a config, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotRun {
    /// The candidate.
    pub candidate: Candidate,
    /// Why it is not run.
    pub reason: String,
}

/// The candidates not run for `cfg`, and why: the naive formulations for a
/// `[factorised]` config (its query map implements the stable formulation only:
/// `model::factorised`); empty otherwise (every candidate runs).
pub fn not_run(cfg: &Config) -> Vec<NotRun> {
    if cfg.factorised.is_none() {
        return Vec::new();
    }
    [Candidate::F64Naive, Candidate::F32Naive]
        .into_iter()
        .map(|candidate| NotRun {
            candidate,
            reason: format!(
                "{} is not replayed: the factorised query map ([factorised]) implements the \
                 stable formulation only (the naive one is the p / W / joint query's), so \
                 an implementation's naive softmax gradient is not told from other faults",
                candidate.describe()
            ),
        })
        .collect()
}

/// Where a replay's updates were absorbed (not watched for `[factorised]`: see
/// `Replay::trained`): some (or every) coordinate of the trained parameter (p; q in
/// W-mode) did not change in an update (with real data no update
/// direction has an exactly zero coordinate, so this is absorption: |alpha g_k| at most
/// half an ulp of p_k).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Absorption {
    /// First update (counted from 1) that left some coordinate unchanged.
    pub first_partial: Option<u64>,
    /// First update that left every coordinate unchanged.
    pub first_total: Option<u64>,
}

/// A trainer that stops (and says where) at a non-finite value instead of ending the
/// lockstep run it is part of, and watches its updates for absorption.
#[derive(Debug)]
pub struct Replay<'a, A: Arith> {
    /// The trainer.
    pub tr: Trainer<'a, A>,
    /// The step and message of a non-finite stop.
    pub stopped: Option<(u64, String)>,
    /// Absorbed updates so far.
    pub absorption: Absorption,
    before: Vec<A::Real>,
}

impl<'a, A: Arith> Replay<'a, A> {
    /// A replay of `cfg` on the direct step in `ar` and `form`.
    pub fn new(cfg: &'a Config, data: &'a Dataset, ar: A, form: Formulation) -> Result<Self> {
        Ok(Replay {
            tr: Trainer::with_method(cfg, data, ar, form, Method::Direct)?,
            stopped: None,
            absorption: Absorption::default(),
            before: Vec::new(),
        })
    }

    /// A replay on the span step, or the direct step where the optimizer needs it
    /// (the enclosure).
    pub fn span(cfg: &'a Config, data: &'a Dataset, ar: A) -> Result<Self> {
        Ok(Replay {
            tr: Trainer::with_method(cfg, data, ar, Formulation::Stable, Method::Span)?,
            stopped: None,
            absorption: Absorption::default(),
            before: Vec::new(),
        })
    }

    /// True while it runs (no non-finite stop).
    pub fn running(&self) -> bool {
        self.stopped.is_none()
    }

    /// The trained parameter of the direct engine (p, or q in W-mode), if direct and
    /// not factorised: a factorised block's update can be exactly zero without
    /// absorption (W_K's first update u (dL/dq)^T from W_Q(0) = 0, b_Q = 0 is 0), so
    /// the absorption watch does not run for `[factorised]` (its report has no
    /// absorption note).
    fn trained(&self) -> Option<&[A::Real]> {
        match &self.tr.engine {
            Engine::Direct(e) if e.fact().is_some() => None,
            Engine::Direct(e) if self.tr.cfg.mode == Mode::W => Some(&e.q),
            Engine::Direct(e) => Some(e.p()),
            Engine::Span(_) => None,
        }
    }

    /// Keep a non-finite stop (or normalised GD's stop where its factor is not finite:
    /// the candidate's arithmetic cannot take the step), pass every other error on.
    fn guard(&mut self, r: Result<()>) -> Result<()> {
        match r {
            Err(e @ (Error::NonFinite { .. } | Error::NormalizedStep { .. })) => {
                self.stopped = Some((self.tr.step, e.to_string()));
                Ok(())
            }
            other => other,
        }
    }
}

impl<A: Arith> Stepper for Replay<'_, A> {
    fn forward_backward(&mut self) -> Result<()> {
        if !self.running() {
            return Ok(());
        }
        let r = self.tr.forward_backward();
        self.guard(r)
    }

    fn update(&mut self) -> Result<()> {
        if !self.running() {
            return Ok(());
        }
        if let Some(t) = self.trained() {
            self.before = t.to_vec();
        }
        let r = self.tr.update();
        self.guard(r)?;
        let ar = self.tr.ar;
        let counts = match (self.trained(), self.before.is_empty()) {
            (Some(after), false) => Some((
                after
                    .iter()
                    .zip(&self.before)
                    .filter(|(a, b)| ar.cmp(a, b) == Some(std::cmp::Ordering::Equal))
                    .count(),
                after.len(),
            )),
            _ => None,
        };
        if let Some((same, len)) = counts.filter(|c| c.0 > 0) {
            let step = self.tr.step;
            self.absorption.first_partial.get_or_insert(step);
            if same == len {
                self.absorption.first_total.get_or_insert(step);
            }
        }
        Ok(())
    }
}

/// A trainer's value of `q` (rounded to f64: exact for f64 and f32), row-major;
/// `identity` is W where the trainer keeps W = I.
pub fn values<A: Arith>(tr: &Trainer<'_, A>, q: Quantity, identity: &[f64]) -> Vec<f64> {
    let ar = tr.ar;
    match tr.quantity(q) {
        Some(v) => v.iter().map(|x| ar.to_f64(x)).collect(),
        None => identity.to_vec(),
    }
}
