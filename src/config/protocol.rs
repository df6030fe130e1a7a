//! The `[protocol]` section: the two-phase fine-tuning protocol of the paper's Section I
//! (SPEC section 16; `experiments::protocol`, `tokensel protocol`).
//!
//! The config's other keys describe phase 2 as they describe any run (the noisy block's
//! size `n_train`, its label noise `eta` and flip rule, the trained parameter `mode`, the
//! `[optimizer]`, `step_size`, `steps`, `init`); this section adds the clean block and
//! phase 1, the head's fit, whose defaults are the Hugging Face Trainer's as the official
//! code runs them (AdamW, lr 5e-5, betas (0.9, 0.999), eps 1e-8, no weight decay, linear
//! decay to 0, gradient clipping by norm 1.0, batch 16, 300 epochs) and the official
//! seeds 42, 314, 2718.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Most head epochs (phase 1).
pub const MAX_HEAD_EPOCHS: u64 = 1_000_000;

/// Most head steps (phase 1: epochs x batches per epoch, per seed).
pub const MAX_HEAD_STEPS: u64 = 100_000_000;

/// Most phase-1 multiply-adds per seed (head_epochs x n_clean x K x d).
pub const MAX_HEAD_WORK: f64 = 1e12;

/// The `[protocol]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    /// Size of the clean block, on which phase 1 fits the head (the official code's
    /// `pretrain_sample_size`: 10000, 3000 or 200 by data set).
    pub n_clean: usize,
    /// The seeds the protocol runs over (each seed draws its own split, head, label
    /// noise, initial attention and sample orders). Default: the official 42, 314, 2718.
    #[serde(default = "official_seeds")]
    pub seeds: Vec<u64>,
    /// Phase 1's epochs over the clean block (official: 300).
    #[serde(default = "official_head_epochs")]
    pub head_epochs: u64,
    /// Phase 1's AdamW learning rate (the HF Trainer's default 5e-5), decayed linearly to
    /// 0 over phase 1's steps.
    #[serde(default = "official_head_step_size")]
    pub head_step_size: f64,
    /// Phase 1's batch size (official: 16; the last batch of an epoch is smaller).
    #[serde(default = "official_head_batch")]
    pub head_batch: usize,
    /// Phase 1's gradient clipping by norm (the HF Trainer's `max_grad_norm` 1.0); 0
    /// turns it off.
    #[serde(default = "official_head_clip_norm")]
    pub head_clip_norm: f64,
}

fn official_seeds() -> Vec<u64> {
    vec![42, 314, 2718]
}

fn official_head_epochs() -> u64 {
    300
}

fn official_head_step_size() -> f64 {
    5e-5
}

fn official_head_batch() -> usize {
    16
}

fn official_head_clip_norm() -> f64 {
    1.0
}

impl Protocol {
    /// Phase 1's batches per epoch: ceil(n_clean / head_batch).
    pub fn head_batches_per_epoch(&self) -> u64 {
        self.n_clean.div_ceil(self.head_batch.max(1)) as u64
    }

    /// Check every key's domain (`classes`: the config's model's class count, 0 for
    /// the binary model, which the protocol does not run). The size limits are
    /// [`Protocol::check_limits`]'s, checked after every key's domain.
    pub fn validate(&self, classes: usize) -> Result<()> {
        if classes == 0 {
            return Err(Error::config(
                "protocol",
                "the protocol fits a K-class head: it needs model.kind = \"multiclass\" \
                 (classes = 2 for a binary task, as the official code's two-logit head)",
            ));
        }
        if self.n_clean == 0 {
            return Err(Error::config("protocol.n_clean", "must be at least 1"));
        }
        if self.seeds.is_empty() {
            return Err(Error::config(
                "protocol.seeds",
                "must name at least one seed",
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for &s in &self.seeds {
            crate::seeds::check("protocol.seeds", s)?;
            if !seen.insert(s) {
                return Err(Error::config(
                    "protocol.seeds",
                    format!("seed {s} appears twice (a seed twice would count one run twice)"),
                ));
            }
        }
        if self.head_epochs == 0 {
            return Err(Error::config("protocol.head_epochs", "must be at least 1"));
        }
        if !(self.head_step_size.is_finite() && self.head_step_size > 0.0) {
            return Err(Error::config(
                "protocol.head_step_size",
                format!("must be finite and > 0, got {}", self.head_step_size),
            ));
        }
        if !(1..=self.n_clean).contains(&self.head_batch) {
            return Err(Error::config(
                "protocol.head_batch",
                format!(
                    "must be 1 to n_clean = {}, got {}",
                    self.n_clean, self.head_batch
                ),
            ));
        }
        if !(self.head_clip_norm.is_finite() && self.head_clip_norm >= 0.0) {
            return Err(Error::config(
                "protocol.head_clip_norm",
                format!(
                    "must be finite and >= 0 (0: no clipping), got {}",
                    self.head_clip_norm
                ),
            ));
        }
        Ok(())
    }

    /// Refuse, before any work, a protocol over a size limit ([`Error::TooLarge`], exit
    /// 3), in this order: more than [`crate::seeds::MAX_SEEDS`] seeds, more than
    /// [`MAX_HEAD_EPOCHS`] epochs, more than [`MAX_HEAD_STEPS`] head steps (epochs x
    /// batches per epoch), more than [`MAX_HEAD_WORK`] phase-1 multiply-adds per seed
    /// (head_epochs x n_clean x K x d, the gradients' cost). `Config::validate` calls it
    /// after every key's domain and the pool's memory limit.
    pub fn check_limits(&self, classes: usize, d: usize) -> Result<()> {
        if self.seeds.len() as u64 > crate::seeds::MAX_SEEDS {
            // a size over a limit, as a seed list on the command line
            return Err(Error::TooLarge {
                field: "protocol.seeds".into(),
                reason: format!(
                    "{} seeds, more than the limit of {}",
                    self.seeds.len(),
                    crate::seeds::MAX_SEEDS
                ),
            });
        }
        if self.head_epochs > MAX_HEAD_EPOCHS {
            return Err(Error::TooLarge {
                field: "protocol.head_epochs".into(),
                reason: format!(
                    "{} epochs, more than the limit of {MAX_HEAD_EPOCHS}",
                    self.head_epochs
                ),
            });
        }
        let steps = self.head_epochs as f64 * self.head_batches_per_epoch() as f64;
        if steps > MAX_HEAD_STEPS as f64 {
            return Err(Error::TooLarge {
                field: "protocol.head_epochs".into(),
                reason: format!(
                    "{} epochs of {} batches are {steps:.3e} head steps, more than the limit \
                     of {MAX_HEAD_STEPS}",
                    self.head_epochs,
                    self.head_batches_per_epoch()
                ),
            });
        }
        let work = self.head_epochs as f64 * self.n_clean as f64 * classes as f64 * d as f64;
        if work > MAX_HEAD_WORK {
            return Err(Error::TooLarge {
                field: "protocol.head_epochs".into(),
                reason: format!(
                    "phase 1 would take head_epochs x n_clean x K x d = {work:.3e} \
                     multiply-adds per seed, more than the limit of {MAX_HEAD_WORK:e} (the \
                     official 300 epochs of 10,000 samples, K = 10, d = 768 are 2.3e10)"
                ),
            });
        }
        Ok(())
    }
}
