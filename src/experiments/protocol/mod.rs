//! The two-phase fine-tuning protocol of the paper's Section I on tokens (SPEC section
//! 16; `tokensel protocol`).
//!
//! Per seed s of `[protocol] seeds`:
//!
//! 1. **Split.** The pool's training samples (true labels) are drawn without replacement
//!    in a seeded order (stream `ProtocolSplit`): the first `n_clean` are the clean block,
//!    the next `n_train` the noisy block (the official code's
//!    `rng.choice(N, pretrain + n, replace=False)` then two slices).
//! 2. **Phase 1** ([`head`]): the head is fitted on the clean block with the attention
//!    fixed at the initial parameters (p(0), W(0)) of seed s (the official code fits the
//!    classifier under the pretrained attention, which a token model does not have: here
//!    the head sees the attention phase 2 starts from).
//! 3. **Label noise** on the noisy block only, by the config's `eta` and flip rule, each
//!    flipped label to a uniformly random other class (`flips = "bernoulli"` is the
//!    official kernel: a coin per sample).
//! 4. **Phase 2**: the attention parameters restart from their initial values (the
//!    official code's `reset_parameters()`) and train on the noisy block with the head
//!    fixed, by the config's mode, `[optimizer]`, step size and steps, in f64.
//!
//! Reported per seed (the official table's columns, and what it omits): the baseline
//! (phase 2's step 0: phase 1's head, the initial attention) training and test accuracy,
//! the final training loss, the **training accuracy** on the observed (noisy) labels,
//! the share of noisy samples fitted (their largest output is the observed, wrong,
//! class), the test accuracy against the true labels, and the mean largest attention of
//! the prompt's row (mean over training samples of max_t s_t) at each checkpoint, the
//! official code's `mean_max_cls_attention` per epoch. A row "fits its noisy labels" only
//! where its training accuracy is 1.
//!
//! What this is not: tokensel's model has no value projection, no residual, MLP or
//! LayerNorm after the attention and no head bias; the query is the prompt p, not the
//! first token's hidden state (the rebuttal's bridge A''1), and the attention is
//! `mode`'s (p, W or both), not a factorised W_Q^T W_K with biases.

use ndarray::{Array3, Axis};
use serde::{Deserialize, Serialize};

use crate::arith::F64;
use crate::config::{Config, Group, Protocol};
use crate::data::supplied::Supplied;
use crate::data::{Dataset, Params};
use crate::error::{Error, Result};
use crate::io::trajectory::Trajectory;
use crate::model::caps::{Capability, require};
use crate::rng::{self, Stream};
use crate::train::Trainer;

pub mod head;

pub use head::HeadFit;

/// Format tag of a protocol report.
pub const FORMAT: &str = "tokensel-protocol/1";

/// The samples a protocol draws its blocks from: training samples with their TRUE
/// labels, and a test set.
#[derive(Debug, Clone)]
pub struct Pool {
    /// Training samples (N, T, d), N >= n_clean + n_train.
    pub x: Array3<f64>,
    /// Their true labels (class indices).
    pub y: Vec<i8>,
    /// Test samples (n_test, T, d).
    pub x_test: Array3<f64>,
    /// Test labels.
    pub y_test: Vec<i8>,
    /// Each position's group, when known (else the config's layout).
    pub groups: Option<Vec<Group>>,
    /// Whether the pool was generated from the config (`generated`) or given.
    pub generated: bool,
}

impl Pool {
    /// The config's generated pool under seed `seed`: n_clean + n_train training samples
    /// without label noise, and the config's test set.
    pub fn generated(cfg: &Config, seed: u64) -> Result<Pool> {
        let ds = Dataset::generate(&Pool::generated_config(cfg, seed)?);
        Ok(Pool {
            x: ds.train.x,
            y: ds.train.y_true,
            x_test: ds.test.x,
            y_test: ds.test.y_true,
            groups: None,
            generated: true,
        })
    }

    /// The config [`Pool::generated`] draws seed `seed`'s pool from (validated, so a pool
    /// the config cannot generate is refused before anything is drawn): `cfg` at that
    /// seed with n_clean + n_train training samples and no label noise.
    pub fn generated_config(cfg: &Config, seed: u64) -> Result<Config> {
        let prot = settings(cfg)?;
        let mut pool_cfg = cfg.clone();
        pool_cfg.seed = seed;
        pool_cfg.n_train = prot.n_clean + cfg.n_train;
        pool_cfg.eta = 0.0;
        pool_cfg.protocol = None;
        pool_cfg.validate()?;
        Ok(pool_cfg)
    }

    /// The pool of a data set (a `tokensel data` directory, or arrays): its training
    /// split with the true labels, and its test split.
    pub fn of_dataset(ds: Dataset) -> Pool {
        Pool {
            x: ds.train.x,
            y: ds.train.y_true,
            x_test: ds.test.x,
            y_test: ds.test.y_true,
            groups: Some(ds.groups),
            generated: false,
        }
    }

    /// The pool fits `cfg`: tokens and d as the config gives, at least n_clean + n_train
    /// training samples, n_test test samples, labels below K; the message names what
    /// differs.
    pub fn check(&self, cfg: &Config) -> Result<()> {
        let prot = settings(cfg)?;
        let (n, t, d) = self.x.dim();
        let bad = |what: &str, reason: String| {
            Err(Error::Mismatch {
                what: format!("the protocol's pool `{what}`"),
                reason,
            })
        };
        if (t, d) != (cfg.tokens(), cfg.d) {
            return bad(
                "X_train",
                format!(
                    "has (T, d) = ({t}, {d}), the config gives ({}, {})",
                    cfg.tokens(),
                    cfg.d
                ),
            );
        }
        if self.x_test.dim() != (cfg.n_test, cfg.tokens(), cfg.d) {
            return bad(
                "X_test",
                format!(
                    "has shape {:?}, the config gives (n_test, T, d) = ({}, {}, {})",
                    self.x_test.shape(),
                    cfg.n_test,
                    cfg.tokens(),
                    cfg.d
                ),
            );
        }
        let need = prot.n_clean + cfg.n_train;
        if n < need {
            return bad(
                "X_train",
                format!(
                    "has {n} samples, the protocol needs n_clean + n_train = {} + {} = {need}",
                    prot.n_clean, cfg.n_train
                ),
            );
        }
        if self.y.len() != n || self.y_test.len() != cfg.n_test {
            return bad(
                "y",
                format!(
                    "{} training and {} test labels for {n} and {} samples",
                    self.y.len(),
                    self.y_test.len(),
                    cfg.n_test
                ),
            );
        }
        let k = cfg.model.classes as i8;
        if let Some(y) = self
            .y
            .iter()
            .chain(&self.y_test)
            .find(|y| !(0..k).contains(*y))
        {
            return bad("y", format!("label {y} is not a class index below K = {k}"));
        }
        Ok(())
    }
}

/// The config's `[protocol]` section (an error without one).
pub fn settings(cfg: &Config) -> Result<&Protocol> {
    require(cfg, "protocol", &[Capability::Protocol])?;
    cfg.protocol.as_ref().ok_or_else(|| {
        Error::config(
            "protocol",
            "the config has no [protocol] section (at least `n_clean`): see docs/protocol.md",
        )
    })
}

/// The mean largest attention at one checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AttentionPoint {
    /// Phase 2's step.
    pub step: u64,
    /// Epochs done (step / batches per epoch).
    #[serde(with = "crate::io::nonfinite")]
    pub epoch: f64,
    /// Mean over the noisy block's samples of max_t s_t.
    #[serde(with = "crate::io::nonfinite")]
    pub mean_max_attention: f64,
}

/// One seed's row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedRow {
    /// The seed.
    pub seed: u64,
    /// Noisy samples in the noisy block (observed label != true label).
    pub noisy: usize,
    /// Phase 1's end, on the clean block.
    pub head: HeadFit,
    /// Phase 2's step 0 (phase 1's head, the initial attention): accuracy on the noisy
    /// block's observed labels.
    #[serde(with = "crate::io::nonfinite")]
    pub baseline_train_accuracy: f64,
    /// Phase 2's step 0: test accuracy (the official table's baseline).
    #[serde(with = "crate::io::nonfinite")]
    pub baseline_test_accuracy: f64,
    /// Final training loss (mean cross-entropy on the observed labels).
    #[serde(with = "crate::io::nonfinite")]
    pub train_loss: f64,
    /// Final training accuracy on the observed labels.
    #[serde(with = "crate::io::nonfinite")]
    pub train_accuracy: f64,
    /// Share of noisy samples whose largest output is their observed (wrong) label
    /// (`None` without noisy samples).
    #[serde(default, with = "crate::io::nonfinite::option")]
    pub noisy_fitted: Option<f64>,
    /// Share of clean samples of the noisy block predicted right.
    #[serde(default, with = "crate::io::nonfinite::option")]
    pub clean_fitted: Option<f64>,
    /// Final test accuracy (true labels).
    #[serde(with = "crate::io::nonfinite")]
    pub test_accuracy: f64,
    /// test_accuracy - baseline_test_accuracy: what phase 2 did to the test accuracy.
    #[serde(with = "crate::io::nonfinite")]
    pub test_accuracy_change: f64,
    /// Whether every observed label is fitted (training accuracy 1).
    pub fits_noisy_labels: bool,
    /// Mean largest attention of the prompt's row at each checkpoint.
    pub attention: Vec<AttentionPoint>,
}

/// The protocol's report over seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`FORMAT`].
    pub format: String,
    /// The config (phase 2's settings and `[protocol]`).
    pub config: Config,
    /// Where the pool came from: "generated" or "supplied".
    pub source: String,
    /// Phase 2's batches per epoch (1 for full-batch GD).
    pub batches_per_epoch: u64,
    /// One row per seed, in the config's order: every seed before a stop.
    pub rows: Vec<SeedRow>,
    /// The seed whose run stopped (a non-finite value, or a head phase 2 cannot use),
    /// and why; the seeds after it were not run. Absent when every seed ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<SeedStop>,
}

/// A seed whose run stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedStop {
    /// The seed.
    pub seed: u64,
    /// Its phase: 1 (the head) or 2 (the attention).
    pub phase: u8,
    /// The error.
    pub error: String,
}

/// Phase 2's batches per epoch under `cfg`: ceil(n_train / batch) with `[optimizer]
/// batch` (`train::batch`), 1 for the full batch.
pub fn batches_per_epoch(cfg: &Config) -> u64 {
    cfg.optimizer
        .batch
        .map_or(1, |b| cfg.n_train.div_ceil(b.max(1)) as u64)
}

/// Gather the rows `idx` of `x`.
fn rows(x: &Array3<f64>, idx: &[usize]) -> Array3<f64> {
    x.select(Axis(0), idx)
}

/// The pool indices of seed `seed`'s clean block and noisy block, in the order drawn
/// (stream `ProtocolSplit`: the first n_clean, then the next n_train of a seeded
/// permutation of the pool).
pub fn blocks(cfg: &Config, pool: &Pool, seed: u64) -> Result<(Vec<usize>, Vec<usize>)> {
    let prot = settings(cfg)?;
    pool.check(cfg)?;
    let mut split = rng::stream(seed, Stream::ProtocolSplit);
    let mut drawn = rng::ordered_sample(&mut split, pool.x.dim().0, prot.n_clean + cfg.n_train);
    let noisy = drawn.split_off(prot.n_clean);
    Ok((drawn, noisy))
}

/// Steps one seed takes: phase 1's (epochs x batches per epoch) and phase 2's.
pub fn steps_per_seed(cfg: &Config) -> Result<u64> {
    let prot = settings(cfg)?;
    Ok(prot
        .head_epochs
        .saturating_mul(prot.head_batches_per_epoch())
        .saturating_add(cfg.steps))
}

/// A seed's run stopped in `phase`: a stopped run or a refusal (exit code 3) becomes
/// `Ok(Err(stop))`, so the seeds before it are kept; bad input stays an error.
fn stop_of(seed: u64, phase: u8, e: Error) -> Result<SeedStop> {
    match e.is_stopped_run() {
        true => Ok(SeedStop {
            seed,
            phase,
            error: e.to_string(),
        }),
        false => Err(e),
    }
}

/// Run the protocol for one seed on `pool` (checked against `cfg`), `progress` called
/// with the seed's steps done (phase 1's, then phase 1's and phase 2's). `Ok(Err(stop))`
/// where the seed's run stopped (a non-finite value, or a head phase 2 cannot use).
pub fn run_seed(
    cfg: &Config,
    pool: &Pool,
    seed: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<std::result::Result<(SeedRow, Trajectory), SeedStop>> {
    let prot = settings(cfg)?;
    pool.check(cfg)?;
    let mut cfg2 = cfg.clone();
    cfg2.seed = seed;
    cfg2.validate()?;
    // 1. the split
    let (clean, noisy) = blocks(cfg, pool, seed)?;
    let (clean, noisy) = (&clean[..], &noisy[..]);
    let label = |idx: &[usize]| idx.iter().map(|&i| pool.y[i]).collect::<Vec<i8>>();
    // 2. phase 1 at the initial attention of this seed
    let init = Params::init(&cfg2);
    let x_clean = rows(&pool.x, clean);
    let phi = head::features(x_clean.view(), &init);
    let (nu, fit) = head::fit(prot, cfg.model.classes, &phi, &label(clean), seed, progress);
    let head_steps = fit.steps;
    // 3. + 4. the noisy block with the config's flips, phase 2 from the initial attention
    let data = Dataset::supplied(
        &cfg2,
        Supplied {
            x_train: rows(&pool.x, noisy),
            y_train: label(noisy),
            y_true_train: None,
            x_test: pool.x_test.clone(),
            y_test: pool.y_test.clone(),
            nu: nu.into_dyn(),
            groups: pool.groups.clone(),
        },
    )
    .map_err(|e| match e {
        Error::Mismatch { what, reason } if what.contains("nu") => {
            Error::Refused(format!("phase 1's head cannot be used: {reason}"))
        }
        e => e,
    });
    let data = match data {
        Ok(d) => d,
        Err(e) => return stop_of(seed, 1, e).map(Err),
    };
    let traj = match Trainer::run(&cfg2, &data, F64, &mut |s| progress(head_steps + s)) {
        Ok(t) => t,
        Err(e) => return stop_of(seed, 2, e).map(Err),
    };
    Ok(Ok((row(&cfg2, seed, fit, &traj)?, traj)))
}

/// A seed's row from its phase-2 trajectory.
fn row(cfg: &Config, seed: u64, head: HeadFit, traj: &Trajectory) -> Result<SeedRow> {
    let (first, last) = match (traj.checkpoints.first(), traj.checkpoints.last()) {
        (Some(f), Some(l)) if f.step == 0 && l.step == cfg.steps => (f, l),
        _ => {
            return Err(Error::Refused(format!(
                "phase 2 of seed {seed} recorded no checkpoint at step 0 and at step {}",
                cfg.steps
            )));
        }
    };
    let noisy: Vec<bool> = traj
        .y
        .iter()
        .zip(&traj.y_true)
        .map(|(a, b)| a != b)
        .collect();
    let share = |want_noisy: bool| {
        let (mut fitted, mut all) = (0usize, 0usize);
        for (s, &nz) in last.samples.iter().zip(&noisy) {
            if nz == want_noisy {
                all += 1;
                fitted += usize::from(s.f > 0.0);
            }
        }
        (all > 0).then(|| fitted as f64 / all as f64)
    };
    let per_epoch = batches_per_epoch(cfg) as f64;
    let attention = traj
        .checkpoints
        .iter()
        .map(|c| {
            let sum: f64 = c.samples.iter().map(|s| 1.0 - s.rest).sum();
            AttentionPoint {
                step: c.step,
                epoch: c.step as f64 / per_epoch,
                mean_max_attention: sum / c.samples.len() as f64,
            }
        })
        .collect();
    Ok(SeedRow {
        seed,
        noisy: noisy.iter().filter(|n| **n).count(),
        head,
        baseline_train_accuracy: first.train_accuracy,
        baseline_test_accuracy: first.test_accuracy,
        train_loss: last.train_loss,
        train_accuracy: last.train_accuracy,
        noisy_fitted: share(true),
        clean_fitted: share(false),
        test_accuracy: last.test_accuracy,
        test_accuracy_change: last.test_accuracy - first.test_accuracy,
        fits_noisy_labels: last.train_accuracy == 1.0,
        attention,
    })
}

/// Run the protocol over the config's seeds; `pool_of(seed)` gives each seed's pool
/// (generated per seed, or one supplied pool for all), `progress(seed index, the seed's
/// steps done)` ([`steps_per_seed`]). A seed whose run stops ends the protocol there: the
/// report holds the seeds before it and the stop ([`Report::stopped`]).
pub fn run(
    cfg: &Config,
    pool_of: &mut dyn FnMut(u64) -> Result<Pool>,
    progress: &mut dyn FnMut(usize, u64),
) -> Result<Report> {
    let prot = settings(cfg)?;
    let mut rows = Vec::with_capacity(prot.seeds.len());
    let mut generated = true;
    let mut stopped = None;
    for (k, &seed) in prot.seeds.iter().enumerate() {
        let pool = pool_of(seed)?;
        generated = pool.generated;
        match run_seed(cfg, &pool, seed, &mut |s| progress(k, s))? {
            Ok((row, _)) => rows.push(row),
            Err(stop) => {
                stopped = Some(stop);
                break;
            }
        }
    }
    Ok(Report {
        format: FORMAT.into(),
        config: cfg.clone(),
        source: if generated { "generated" } else { "supplied" }.into(),
        batches_per_epoch: batches_per_epoch(cfg),
        rows,
        stopped,
    })
}

/// Mean and sample standard deviation of `v` (sd 0 for one value).
fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = match v.len() {
        0 | 1 => 0.0,
        _ => v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0),
    };
    (mean, var.sqrt())
}

impl Report {
    /// The files of `protocol --out`: protocol.json, protocol.csv (one row per seed) and
    /// attention.csv (the mean largest attention per seed and checkpoint).
    pub fn files(&self) -> Vec<(String, Vec<u8>)> {
        let json = serde_json::to_string_pretty(self).expect("report serialises");
        vec![
            ("protocol.json".into(), json.into_bytes()),
            ("protocol.csv".into(), self.to_csv().into_bytes()),
            ("attention.csv".into(), self.attention_csv().into_bytes()),
        ]
    }

    /// One row per seed.
    pub fn to_csv(&self) -> String {
        use crate::io::nonfinite::text;
        let opt = |v: Option<f64>| v.map_or(String::new(), text);
        let mut out = "seed,noisy,head_loss,head_accuracy,baseline_train_accuracy,\
                       baseline_test_accuracy,train_loss,train_accuracy,noisy_fitted,\
                       clean_fitted,test_accuracy,test_accuracy_change,fits_noisy_labels\n"
            .to_string();
        for r in &self.rows {
            out += &format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                r.seed,
                r.noisy,
                text(r.head.loss),
                text(r.head.accuracy),
                text(r.baseline_train_accuracy),
                text(r.baseline_test_accuracy),
                text(r.train_loss),
                text(r.train_accuracy),
                opt(r.noisy_fitted),
                opt(r.clean_fitted),
                text(r.test_accuracy),
                text(r.test_accuracy_change),
                r.fits_noisy_labels
            );
        }
        out
    }

    /// The mean largest attention per seed and checkpoint.
    pub fn attention_csv(&self) -> String {
        use crate::io::nonfinite::text;
        let mut out = "seed,step,epoch,mean_max_attention\n".to_string();
        for r in &self.rows {
            for a in &r.attention {
                out += &format!(
                    "{},{},{},{}\n",
                    r.seed,
                    a.step,
                    text(a.epoch),
                    text(a.mean_max_attention)
                );
            }
        }
        out
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cfg = &self.config;
        let prot = cfg
            .protocol
            .as_ref()
            .expect("a protocol report has its section");
        let steps = cfg.steps;
        writeln!(
            f,
            "fine-tuning protocol (Section I) on {} tokens: K = {}, T = {}, d = {}",
            self.source,
            cfg.model.classes,
            cfg.tokens(),
            cfg.d
        )?;
        writeln!(
            f,
            "  phase 1: head on a clean block of {}, attention fixed at its initial value; \
             AdamW lr {:e}, {} epochs, batch {}, clip {}",
            prot.n_clean,
            prot.head_step_size,
            prot.head_epochs,
            prot.head_batch,
            prot.head_clip_norm
        )?;
        writeln!(
            f,
            "  phase 2: {}-mode attention reset and trained on a noisy block of n = {} \
             (eta {}, {:?} flips), head fixed; {}, step size {:e}, {steps} steps ({} epochs \
             of {} batches)",
            cfg.mode.name(),
            cfg.n_train,
            cfg.eta,
            cfg.flips,
            cfg.optimizer.name(),
            cfg.step_size,
            steps as f64 / self.batches_per_epoch as f64,
            self.batches_per_epoch
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "  {:>6} {:>7} {:>9} {:>9} {:>10} {:>9} {:>9} {:>8} {:>8} {:>9}  fits its noisy labels",
            "seed",
            "noisy",
            "head acc",
            "base test",
            "train loss",
            "train acc",
            "noisy fit",
            "test acc",
            "max att",
            "(start)"
        )?;
        for r in &self.rows {
            let att = |a: Option<&AttentionPoint>| a.map_or(f64::NAN, |a| a.mean_max_attention);
            let fits = if r.fits_noisy_labels {
                "yes (training accuracy 1)".to_string()
            } else {
                format!("no (training accuracy {:.4})", r.train_accuracy)
            };
            writeln!(
                f,
                "  {:>6} {:>7} {:>9.4} {:>9.4} {:>10.4e} {:>9.4} {:>9} {:>8.4} {:>8.4} {:>9.4}  {fits}",
                r.seed,
                format!("{}/{}", r.noisy, cfg.n_train),
                r.head.accuracy,
                r.baseline_test_accuracy,
                r.train_loss,
                r.train_accuracy,
                r.noisy_fitted.map_or("-".into(), |v| format!("{v:.4}")),
                r.test_accuracy,
                att(r.attention.last()),
                att(r.attention.first()),
            )?;
        }
        let col = |g: fn(&SeedRow) -> f64| mean_sd(&self.rows.iter().map(g).collect::<Vec<_>>());
        let fits = self.rows.iter().filter(|r| r.fits_noisy_labels).count();
        writeln!(f)?;
        if let Some(st) = &self.stopped {
            writeln!(
                f,
                "  STOPPED: seed {} stopped in phase {}: {}; the seeds after it were not run",
                st.seed, st.phase, st.error
            )?;
        }
        if self.rows.is_empty() {
            return writeln!(f, "  no seed finished");
        }
        let (tm, ts) = col(|r| r.test_accuracy);
        let (bm, bs) = col(|r| r.baseline_test_accuracy);
        let (lm, ls) = col(|r| r.train_loss);
        match self.rows.len() {
            1 => writeln!(
                f,
                "  one seed: test accuracy {tm:.4} (baseline {bm:.4}), final training loss \
                 {lm:.4e} (no spread over one seed)"
            )?,
            n => writeln!(
                f,
                "  over {n} seeds (mean +- sample sd): test accuracy {tm:.4} +- {ts:.4} \
                 (baseline {bm:.4} +- {bs:.4}), final training loss {lm:.4e} +- {ls:.2e}"
            )?,
        }
        writeln!(
            f,
            "  {fits} of {} seeds fit their noisy labels (training accuracy 1); a row whose \
             training accuracy is below 1 is not overfitted, whatever its training loss",
            self.rows.len()
        )
    }
}
