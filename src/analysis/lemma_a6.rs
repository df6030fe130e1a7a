//! Lemma A.6 in f64 (a `lemma_a6` claim's computation): a W-mode run and its p-mode twin
//! (W = I, p(0) = q(0) of the W-mode run, step size scaled by |p(0)|^2; under normalised
//! GD by |p(0)|, with eps divided by |p(0)|) in lockstep, and
//! how far their q = W^T p drift apart (proofs-notes/lemma-a6.md).

use serde::{Deserialize, Serialize};

use crate::arith::{Arith, F64};
use crate::config::{Config, Mode, PInit};
use crate::data::{Dataset, Params};
use crate::error::Result;
use crate::train::Trainer;
use crate::train::drive::{Control, Event, drive};

/// What a `lemma_a6` claim reads: the W-mode and p-mode runs' largest relative
/// difference of q over the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LemmaA6 {
    /// max over steps of ||q_W - q_p|| / ||q_W||.
    pub max_rel_q_diff: f64,
    /// max over steps of the condition || |W|^T |p| || / || W^T p || of q = W^T p.
    pub max_kappa: f64,
    /// max over steps of the relative size of one update of q, ||dq|| / ||q||.
    pub max_rel_step: f64,
}

/// The W-mode run of a `lemma_a6` claim (p(0) Gaussian where the config has p = 0) and
/// its p-mode twin (W = I; its step size and p(0) are set from the W-mode run's).
pub fn configs(cfg: &Config) -> (Config, Config) {
    let mut w_cfg = cfg.clone();
    w_cfg.mode = Mode::W;
    if w_cfg.init.p == PInit::Zero {
        w_cfg.init.p = PInit::Gaussian;
    }
    let mut p_cfg = cfg.clone();
    p_cfg.mode = Mode::P;
    p_cfg.init.w = crate::config::WInit::Identity;
    (w_cfg, p_cfg)
}

/// Refuse, before any work, an `[optimizer]` under which Lemma A.6's p <-> W identity
/// does not hold: Adam (coordinate-wise: its step of W is not p times a step of q),
/// minibatches and gradient clipping (the clip factor is formed from each run's own
/// gradient norm, |p| |g| in W-mode and |g| in p-mode). A linear schedule scales both
/// runs' steps alike and is kept.
pub fn check(cfg: &Config) -> Result<()> {
    crate::model::caps::require(cfg, "Lemma A.6", &[crate::model::caps::Capability::Theory])?;
    if cfg.optimizer.breaks_lemma_a6(cfg.n_train) {
        return Err(crate::error::Error::config(
            "optimizer",
            format!(
                "Lemma A.6's p <-> W identity holds for full-batch (normalised) gradient \
                 descent only, not under {}",
                cfg.optimizer.name()
            ),
        ));
    }
    Ok(())
}

/// Set the p-mode twin's step (in `p_cfg`) from the W-mode run's (`w_cfg`, p(0) = `p0`)
/// so that both move q alike: constant steps, dq = -alpha |p|^2 g in W-mode, so
/// alpha' = alpha |p|^2; normalised GD, dq = -alpha |p|^2 g / (|p| |g| + eps) =
/// -(alpha |p|) g / (|g| + eps / |p|), so alpha' = alpha |p| and eps' = eps / |p|
/// (proofs-notes/lemma-a6.md). Each factor is rounded once in f64.
pub fn scale_step(w_cfg: &Config, p_cfg: &mut Config, p0: &ndarray::Array1<f64>) {
    let pp = p0.dot(p0);
    if w_cfg.optimizer.is_normalized() {
        p_cfg.step_size = w_cfg.step_size * pp.sqrt();
        p_cfg.optimizer.eps = w_cfg.optimizer.eps / pp.sqrt();
    } else {
        p_cfg.step_size = w_cfg.step_size * pp;
    }
}

/// Run the W-mode run of `cfg` and its p-mode twin in lockstep on `data` (the direct
/// step, as the lemma's rounding budget assumes) and measure [`LemmaA6`].
pub fn lemma_a6(cfg: &Config, data: &Dataset) -> Result<LemmaA6> {
    check(cfg)?;
    let (w_cfg, mut p_cfg) = configs(cfg);
    let w_init = Params::init(&w_cfg);
    // the direct step: the lemma's rounding budget is that of q = W^T p as d-term
    // sums and W updated entry by entry (proofs-notes/lemma-a6.md)
    let direct = crate::config::Method::Direct;
    let w_run = Trainer::with_method(&w_cfg, data, F64, w_cfg.formulation, direct)?;
    let p = w_init.p.clone();
    scale_step(&w_cfg, &mut p_cfg, &p);
    // the p-run starts from p(0) = q(0) of the W-run, with W = I
    let q0 = Params {
        p: w_run.q().into(),
        w: None,
    };
    let p_run = Trainer::from_params(&p_cfg, data, F64, p_cfg.formulation, direct, &q0)?;
    let mut worst = 0.0f64;
    // kappa = || |W|^T |p| || / || W^T p ||, the condition of q = W^T p that the
    // rounding budget of proofs-notes/lemma-a6.md is stated for, largest on the path
    let mut kappa = 0.0f64;
    // the largest step of q relative to q: |q(tau + 1) - q(tau)| / |q(tau)|
    let mut rel_step = 0.0f64;
    let mut q_before = w_run.q();
    // both runs in lockstep; q compared after every update
    let mut pair = (w_run, p_run);
    drive(&mut pair, cfg.steps, |(w_run, p_run), event| {
        if event == Event::Forward {
            return Ok(Control::Continue);
        }
        let (wq, pq) = (w_run.q(), p_run.q());
        let diff: Vec<f64> = wq.iter().zip(&pq).map(|(a, b)| a - b).collect();
        worst = worst.max(F64.norm_f64(&diff) / F64.norm_f64(&wq));
        let step: Vec<f64> = wq.iter().zip(&q_before).map(|(a, b)| a - b).collect();
        rel_step = rel_step.max(F64.norm_f64(&step) / F64.norm_f64(&q_before));
        q_before.clone_from(&wq);
        if let (p, Some(w)) = w_run.params() {
            let d = p.len();
            let abs_q: Vec<f64> = (0..d)
                .map(|k| (0..d).map(|m| (p[m] * w[m * d + k]).abs()).sum())
                .collect();
            kappa = kappa.max(F64.norm_f64(&abs_q) / F64.norm_f64(&wq));
        }
        Ok(match w_run.step == cfg.steps {
            true => Control::Stop,
            false => Control::Continue,
        })
    })?;
    Ok(LemmaA6 {
        max_rel_q_diff: worst,
        max_kappa: kappa,
        max_rel_step: rel_step,
    })
}
