//! Certified runs (SPEC section 11; proofs-notes/certify.md): the ball trainer encloses
//! the exact-arithmetic trajectory, and every reported quantity becomes an interval
//! `[lo, hi]` that contains the exact value, every reported decision a proved one or an
//! undecided one.
//!
//! The ball trainer ([`Ball`], the span step by default) runs through the one step loop
//! ([`drive`]) with an observer. At every forward pass the observer checks the
//! training decisions (each sample's top token: decided, a proved tie or undecided; each
//! prediction sign: proved or undecided), adds the Definition 4.1 scores to ball sums,
//! and measures the radii; at each checkpoint of [`record::schedule`] it records every
//! quantity of a trajectory checkpoint as an interval (loss, accuracies, norms, mean
//! attention and selection shares per clean and noisy samples, the cumulative sums, and
//! per training sample f, 1 - s_top, the score gap, S_i and the group masses) and
//! evaluates the test set (its prediction signs).
//!
//! An accuracy is the interval `[proved correct / n, (n - proved wrong) / n]`: a single
//! value (certified) when every sign is decided. A selection share of a group is
//! `[decided in the group / n, (decided in the group + undecided) / n]`. A tie (the top
//! score proved EQUAL to another, as at step 0 where p(0) = 0 makes every score exactly
//! 0) is a decision: no token is selected; it never makes a certificate undecided.
//!
//! The certificate decides when every decision of the final checkpoint is proved
//! (training top tokens and signs, test signs). With [`Prec::Auto`] the run is repeated
//! at 128, 256, 512 and 1024 bits until it decides.

//!
//! The code by concern: `interval` (an enclosure's and a count's JSON), `observe` (the
//! observer of the ball run: decisions, radii and the interval checkpoints), `report`
//! (the certificate's records, its reader's checks and its summary); this file the
//! options and the driver.

mod interval;
mod observe;
mod report;

pub use interval::{Count, Interval};
use observe::{Observer, bits_lost, prediction_name};
pub use report::{
    Attempt, Certificate, Certified, Decision, Decisions, Proof, Radius, SampleProof, Ties,
    Undecided, bits_lost_of,
};

use serde::{Deserialize, Serialize};

use crate::arith::{Arith, Ball, BallReal, DEFAULT_BALL_PREC, Kind, Mag};
use crate::config::{Config, Formulation, Group, Method};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::io::record::{Extras, Range, Visitor};
use crate::io::trajectory::{
    ByNoise, Checkpoint, ClassMetrics, ClassSelection, Cumulative, DirectionPoint, PerGroup,
    SampleState, SelectionShare, TrainerInfo,
};
use crate::model::caps::{Capability, require};
use crate::model::{AnyModel, Model, Selection};
use crate::train::drive::{Control, Event, drive};
use crate::train::{Trainer, check_memory, record, resolve_method};

/// Format tag of a certificate.
pub const FORMAT: &str = "tokensel-certificate/2";

/// The precisions `--prec auto` tries, in order (the last one is the cap).
pub const AUTO_PRECS: [u32; 4] = [128, 256, 512, 1024];

/// The working precision of a certified run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prec {
    /// One run at this many bits.
    Bits(u32),
    /// [`AUTO_PRECS`] in turn until the final checkpoint decides everything.
    Auto,
}

impl Prec {
    /// The precisions to try.
    pub fn precs(self) -> Vec<u32> {
        match self {
            Prec::Bits(b) => vec![b],
            Prec::Auto => AUTO_PRECS.to_vec(),
        }
    }
}

impl Default for Prec {
    fn default() -> Self {
        Prec::Bits(DEFAULT_BALL_PREC)
    }
}

/// Options of [`certify`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Working precision.
    pub prec: Prec,
    /// The ball trainer's step: span (the default), direct (allowed, with a warning: its
    /// radii grow about x1.1 per step on the default data), or auto.
    pub method: Method,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            prec: Prec::default(),
            method: Method::Span,
        }
    }
}

impl Options {
    /// Check, before any work, that every run these options ask for is valid: each
    /// precision a ball precision, the span step with the stable formulation, and each
    /// ball trainer's state within the memory limit.
    pub fn check(&self, cfg: &Config) -> Result<()> {
        require(cfg, "certify", &[Capability::Certify])?;
        for prec in self.prec.precs() {
            Ball::new(prec)?;
            let method = self.resolved(cfg, prec);
            if method == Method::Span && cfg.formulation == Formulation::Naive {
                return Err(Error::config(
                    "method",
                    "the span step needs the stable formulation (use --method direct for \
                     the naive one)",
                ));
            }
            check_memory(cfg, Kind::Ball, prec, method)?;
        }
        Ok(())
    }

    /// The step the ball trainer takes at `prec` (`auto` resolved).
    pub fn resolved(&self, cfg: &Config, prec: u32) -> Method {
        resolve_method(cfg, cfg.formulation, Kind::Ball, prec, self.method)
    }

    /// A warning for the direct step (its radii grow exponentially), if it is taken: the
    /// factorised query map's own ([`factorised_note`]) for a `[factorised]` config.
    pub fn warning(&self, cfg: &Config) -> Option<String> {
        let prec = self.prec.precs()[0];
        if cfg.factorised.is_some() {
            return Some(factorised_note(cfg));
        }
        (self.resolved(cfg, prec) == Method::Direct).then(|| DIRECT_WARNING.to_string())
    }
}

/// The note a certificate of a direct-step run carries (and `certify` prints).
pub const DIRECT_WARNING: &str = "the direct step with balls: its radii pass through |X| |X|^T \
     (no cancellation of independent noise) and grow about x1.1 per step (0.13 bits) on the \
     default data (proofs-notes/certify.md): 33 bits are lost by step 200, 111 by step 794, \
     a decision becomes undecided at step 910 and the run stops with a non-finite radius at \
     step 919; the span step (default) multiplies by the exact Gram matrix instead";

/// The note a certificate of a `[factorised]` run carries (and `certify` prints), for
/// `cfg`: q with or without the biases, and b_K's exact update where it has one.
pub fn factorised_note(cfg: &Config) -> String {
    let bias = cfg.factorised.is_some_and(|f| f.bias);
    let (q, b_k) = match bias {
        true => (
            "W_K^T (W_Q p + b_Q)",
            "; b_K shifts every score of a sample alike, so its gradient is exactly 0 and \
             b_K keeps its exact update (unchanged under GD and normalised GD, AdamW's decay \
             only; proofs-notes/factorised.md)",
        ),
        false => ("W_K^T W_Q p (no biases)", ""),
    };
    format!(
        "the factorised query map ([factorised]) runs in the direct step only (it has no \
         span form), and its balls lose bits far faster than the linear map's direct step: \
         the radius of q passes each step through both moving blocks, W_Q and W_K \
         (measured on examples/factorised.toml at d = 2000: about 10 bits per step over the \
         first 10 steps, where 128 bits stop at step 15, then about 2 per step, 340 of 1024 \
         bits lost at step 100), so a certificate covers the first steps of a run unless \
         --prec is raised; q_norm and grad_norm are the norms of the attention core's query \
         q = {q} and of dL/dq, as the trajectory records them{b_k}"
    )
}

/// One certified run of `cfg` at `prec` bits (`progress(step)` after each update).
fn run_at(
    cfg: &Config,
    data: &Dataset,
    prec: u32,
    opts: &Options,
    progress: &mut dyn FnMut(u64),
) -> Result<Certificate> {
    let ar = Ball::new(prec)?;
    let method = opts.resolved(cfg, prec);
    let mut tr = Trainer::with_method(cfg, data, ar, cfg.formulation, method)?;
    let mut direction = None;
    if let Some(choice) = crate::model::token_selection::limit::choice_of(cfg) {
        let limit = crate::model::token_selection::limit::Limit::of_config(cfg, data, &choice)?;
        tr.track_direction(&limit)?;
        direction = Some(limit.summary);
    }
    let mut obs = Observer::new(&ar, cfg);
    let ran = drive(&mut tr, cfg.steps, |tr, event| {
        match event {
            Event::Forward => obs.forward(tr),
            Event::Update => progress(tr.step),
        }
        Ok(Control::Continue)
    });
    // an enclosure that blew up (a ball became infinite: every bit lost) ends the run;
    // the checkpoints before it stay certified and are kept (a certificate of part of
    // the run), unless none was reached
    let stopped = match ran {
        Ok(_) => None,
        Err(Error::NonFinite {
            step,
            quantity,
            sample,
        }) if !obs.checkpoints.is_empty() => Some(format!(
            "the enclosure blew up at step {step}: the ball of {quantity}{} became \
             non-finite (every bit of {prec} lost); the checkpoints to step {} are \
             certified, the rest of the run is not",
            sample.map_or(String::new(), |i| format!(" of training sample {i}")),
            obs.checkpoints.last().map_or(0, |k| k.step)
        )),
        // normalised GD's factor alpha / (||G|| + eps) unbounded: a norm's ball reaches 0
        Err(e @ Error::NormalizedStep { .. }) if !obs.checkpoints.is_empty() => Some(format!(
            "the enclosure stopped: {e}; the checkpoints to step {} are certified, the rest \
             of the run is not",
            obs.checkpoints.last().map_or(0, |k| k.step)
        )),
        Err(e) => return Err(e),
    };
    let last = obs
        .checkpoints
        .last()
        .expect("the schedule has step 0, and a run stopped before it returned");
    let decided = stopped.is_none() && last.proof.decisions.all_decided();
    let mut notes = Vec::new();
    if let Some(first) = obs.ties.first {
        notes.push(format!(
            "proved ties at {} step(s), first {first}, last {}: the top score is proved EQUAL \
             to another (at step 0 with q(0) = 0, e.g. p(0) = 0 or the factorised map's \
             W_Q(0) = 0, every score is exactly 0), so no token is \
             selected; a tie is a decision, not an undecided one, and does not make the \
             certificate undecided",
            obs.ties.steps,
            obs.ties.last.unwrap_or(first)
        ));
    }
    if cfg.factorised.is_some() {
        notes.push(factorised_note(cfg));
    } else if method == Method::Direct {
        notes.push(DIRECT_WARNING.to_string());
    }
    let (largest, at) = obs.largest;
    Ok(Certificate {
        format: FORMAT.to_string(),
        trainer: tr.info(),
        config: cfg.clone(),
        decided,
        train_accuracy: last.train_accuracy,
        train_correct: last.proof.train_correct,
        test_accuracy: last.test_accuracy,
        test_correct: last.proof.test_correct,
        selection: last.selection,
        selection_counts: last.proof.selection_counts,
        first_undecided: obs.first_undecided.clone(),
        ties: obs.ties,
        largest_rel_radius: largest.to_f64_up(),
        largest_at_step: at,
        bits_lost: bits_lost(prec, largest),
        attempts: vec![Attempt {
            prec_bits: prec,
            decided,
            first_undecided: obs.first_undecided.clone(),
            stopped,
        }],
        notes,
        checkpoints: obs.checkpoints,
        direction,
    })
}

/// Certify `cfg`'s run: the ball trainer at each precision of `opts.prec` in turn until
/// the final checkpoint decides everything (module docs). `progress(prec, step)` after
/// each update. A run stopped by a non-finite radius or value (the enclosure lost every
/// bit) counts as undecided, and the next precision is tried; at the last precision the
/// certificate of the checkpoints reached is returned, undecided, with
/// [`Certificate::stopped`] saying where it blew up ([`Error::NonFinite`] when it blew up
/// before the first checkpoint).
pub fn certify(
    cfg: &Config,
    data: &Dataset,
    opts: &Options,
    progress: &mut dyn FnMut(u32, u64),
) -> Result<Certificate> {
    require(cfg, "certify", &[Capability::Certify])?;
    let precs = opts.prec.precs();
    let mut attempts = Vec::new();
    for (k, &prec) in precs.iter().enumerate() {
        let last = k + 1 == precs.len();
        let mut cert = match run_at(cfg, data, prec, opts, &mut |s| progress(prec, s)) {
            Ok(mut cert) if cert.stopped().is_some() && !last => {
                attempts.append(&mut cert.attempts);
                continue;
            }
            Ok(cert) => cert,
            Err(e @ (Error::NonFinite { .. } | Error::NormalizedStep { .. })) if !last => {
                attempts.push(Attempt {
                    prec_bits: prec,
                    decided: false,
                    first_undecided: None,
                    stopped: Some(e.to_string()),
                });
                continue;
            }
            Err(e) => return Err(e),
        };
        attempts.append(&mut cert.attempts);
        if cert.decided || last {
            cert.attempts = attempts;
            return Ok(cert);
        }
    }
    unreachable!("at least one precision")
}
