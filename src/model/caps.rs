//! Capabilities: what a command can do with a config, declared once from the model and
//! the config's features, and checked once by each command before any work.
//!
//! A config has three features that decide what it can be taken by: its model (binary,
//! or K classes), its batch (every training sample at every step, or minibatches) and
//! its prompt's position (separate, or token 0 of the sequence). [`Capability::needs`]
//! declares which of them each capability takes, [`caps`] derives the set a config has,
//! and [`require`] refuses a command whose config lacks one of the capabilities it
//! needs: an [`Error::InvalidConfig`] (exit code 2, before any work) naming the config
//! key of the missing feature, the command, the capability and why.
//!
//! These are command capabilities, not config validity: a config that no command can
//! take (the naive formulation of the K-class model, minibatches with the prompt in
//! sequence) is refused by [`Config::validate`].

use std::fmt;

use crate::config::Config;
use crate::error::{Error, Result};

/// What a command can take a config for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// The naive (unstable) formulation of the gradient, timed by `cost` and replayed by
    /// `judge` as a candidate: the binary model's, on fixed tokens.
    NaiveFormulation,
    /// The span step beside the direct one (`cost` times both): fixed tokens.
    SpanForm,
    /// The attention SVM of `svm`: the binary model's, on fixed tokens.
    Svm,
    /// The sweep of the binary head's output and gradient (`saturation` and its claims).
    Saturation,
    /// The grid's regime metrics (the binary Theorem 4.1's), measured at every step on
    /// every training sample, on fixed tokens.
    GridMetrics,
    /// `compare`'s lockstep of the f64 trainer, the twin and the predictor, which reads
    /// every training sample's values at every step.
    Compare,
    /// `judge`'s replays of an external run (the twin, the candidates, the enclosure).
    JudgeReplay,
    /// `certify`'s interval checkpoints.
    Certify,
    /// The fine-tuning protocol of Section I.
    Protocol,
    /// `data`'s export of the initial parameter blocks (and the data) as NPY files.
    Export,
    /// The analyses written for the p / W parameterisation: `sweep`'s label-noise sweep
    /// and Lemma A.6's pair of W- and p-mode runs (and claims on them).
    Theory,
}

impl Capability {
    /// Every capability, in declaration order.
    pub const ALL: [Capability; 11] = [
        Capability::NaiveFormulation,
        Capability::SpanForm,
        Capability::Svm,
        Capability::Saturation,
        Capability::GridMetrics,
        Capability::Compare,
        Capability::JudgeReplay,
        Capability::Certify,
        Capability::Protocol,
        Capability::Export,
        Capability::Theory,
    ];

    /// Its name in messages (snake case).
    pub fn name(self) -> &'static str {
        match self {
            Capability::NaiveFormulation => "naive_formulation",
            Capability::SpanForm => "span_form",
            Capability::Svm => "svm",
            Capability::Saturation => "saturation",
            Capability::GridMetrics => "grid_metrics",
            Capability::Compare => "compare",
            Capability::JudgeReplay => "judge_replay",
            Capability::Certify => "certify",
            Capability::Protocol => "protocol",
            Capability::Export => "export",
            Capability::Theory => "theory",
        }
    }

    /// What it is, for messages.
    pub fn what(self) -> &'static str {
        match self {
            Capability::NaiveFormulation => "the naive formulation of the binary gradient",
            Capability::SpanForm => "the span step beside the direct one",
            Capability::Svm => "the attention SVM of the binary model on fixed tokens",
            Capability::Saturation => "a sweep of the binary head's output and gradient",
            Capability::GridMetrics => "the regime metrics of the binary Theorem 4.1",
            Capability::Compare => "the lockstep of the f64 trainer, the twin and the predictor",
            Capability::JudgeReplay => "the candidate replays of an external run",
            Capability::Certify => "interval checkpoints of every training sample",
            Capability::Protocol => "the fine-tuning protocol of Section I",
            Capability::Export => "the NPY export of the data and of the initial parameter blocks",
            Capability::Theory => "the label-noise sweep and Lemma A.6's p- and W-mode pair",
        }
    }

    /// The config features it takes, in the order [`require`] checks them.
    pub fn needs(self) -> &'static [Feature] {
        use Feature::{Binary, Engines, FullBatch, PlainQuery, SeparatePrompt};
        match self {
            Capability::NaiveFormulation => &[Engines, Binary, SeparatePrompt, PlainQuery],
            Capability::SpanForm => &[Engines, SeparatePrompt, PlainQuery],
            Capability::Svm => &[Engines, Binary, SeparatePrompt, PlainQuery],
            Capability::Saturation => &[Engines, Binary, SeparatePrompt, PlainQuery],
            Capability::GridMetrics => &[Engines, Binary, FullBatch, SeparatePrompt, PlainQuery],
            Capability::Compare => &[Engines, FullBatch, SeparatePrompt],
            Capability::JudgeReplay => &[Engines, FullBatch, SeparatePrompt],
            Capability::Certify => &[Engines, FullBatch, SeparatePrompt],
            Capability::Protocol => &[Engines, SeparatePrompt, PlainQuery],
            Capability::Export => &[Engines],
            Capability::Theory => &[Engines, PlainQuery],
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A feature of a config that capabilities take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feature {
    /// A token-selection model, trained by the engines' trainer (not a network model
    /// such as the encoder: `run` and `twin` train those).
    Engines,
    /// The binary token-selection model (`[model] kind`).
    Binary,
    /// Every training sample at every step (no `optimizer.batch` below `n_train`).
    FullBatch,
    /// The prompt separate from the sequence (`[model] prompt = "separate"`).
    SeparatePrompt,
    /// The query q = W^T p of the p / W / joint modes (no `[factorised]` section: the
    /// factorised query map runs in `run`, `twin`, `compare`, `certify`, `judge`, `data`
    /// and `config` only).
    PlainQuery,
}

impl Feature {
    /// `None` where `cfg` has the feature, else the config key that lacks it and why.
    pub fn missing(self, cfg: &Config) -> Option<(&'static str, String)> {
        match self {
            Feature::Engines => cfg
                .model
                .is_network()
                .then(|| ("model.kind", super::network::refusal(cfg))),
            Feature::Binary => cfg.model.is_multiclass().then(|| {
                (
                    "model.kind",
                    format!(
                        "it is implemented for the binary token-selection model only; this \
                         config is the multi-class model with K = {}",
                        cfg.model.classes
                    ),
                )
            }),
            Feature::FullBatch => cfg.optimizer.minibatch(cfg.n_train).map(|b| {
                (
                    "optimizer.batch",
                    format!(
                        "it reads every training sample's values at every step; a minibatch \
                         run (batch = {b} < n_train = {}) computes only its batch's, so it \
                         is taken by run and twin (and claims on them) only",
                        cfg.n_train
                    ),
                )
            }),
            Feature::SeparatePrompt => cfg.model.in_sequence().then(|| {
                (
                    "model.prompt",
                    "it is implemented for the separate prompt only (prompt = \
                     \"separate\"); this config puts the prompt in the sequence (T + 1 \
                     positions), which it does not handle"
                        .to_string(),
                )
            }),
            Feature::PlainQuery => cfg.factorised.is_some().then(|| {
                (
                    "factorised",
                    "it is written for the query q = W^T p of the p / W / joint modes; this \
                     config has the factorised query map ([factorised]), which runs in run, \
                     twin, compare, certify, judge, data and config only (remove [factorised] \
                     here)"
                        .to_string(),
                )
            }),
        }
    }
}

/// The capabilities a config has (a small bit set over [`Capability::ALL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CapSet(u32);

impl CapSet {
    /// Whether the set holds `c`.
    pub fn has(self, c: Capability) -> bool {
        self.0 & Self::bit(c) != 0
    }

    /// The capabilities in the set, in declaration order.
    #[cfg(test)]
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL.into_iter().filter(move |c| self.has(*c))
    }

    fn bit(c: Capability) -> u32 {
        1 << Capability::ALL
            .iter()
            .position(|x| *x == c)
            .expect("every capability is in ALL")
    }
}

/// The capabilities of `cfg`: each one whose every needed feature the config has.
pub fn caps(cfg: &Config) -> CapSet {
    CapSet(
        Capability::ALL
            .into_iter()
            .filter(|c| c.needs().iter().all(|f| f.missing(cfg).is_none()))
            .fold(0, |s, c| s | CapSet::bit(c)),
    )
}

/// Refuse `command` on `cfg` when the config lacks one of `needed` (checked in order,
/// each capability's features in [`Capability::needs`]' order): an
/// [`Error::InvalidConfig`] on the key of the first missing feature whose message names
/// the command, the capability and why. Called once by each command before any work.
pub fn require(cfg: &Config, command: &str, needed: &[Capability]) -> Result<()> {
    for &c in needed {
        for f in c.needs() {
            if let Some((key, why)) = f.missing(cfg) {
                return Err(Error::config(
                    key,
                    format!(
                        "{command} needs the capability `{c}` ({}), which this config lacks: \
                         {why}",
                        c.what()
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ModelKind, Prompt};

    /// The default config has every capability; each feature taken away removes exactly
    /// the capabilities that need it, and `require` names the command, the capability
    /// and the key.
    #[test]
    fn features_decide_the_capabilities() {
        let base = Config::default();
        assert_eq!(caps(&base).iter().count(), Capability::ALL.len());
        let mut k3 = base.clone();
        k3.model.kind = ModelKind::Multiclass;
        k3.model.classes = 3;
        let mut batched = base.clone();
        batched.optimizer.batch = Some(1);
        let mut prompt = base.clone();
        prompt.model.prompt = Prompt::InSequence;
        let mut factorised = base.clone();
        factorised.factorised = Some(crate::model::factorised::Section {
            m: 4,
            bias: false,
            train_p: false,
            init: crate::model::factorised::QkInit::Linear,
            scale: None,
        });
        for (cfg, f) in [
            (&k3, Feature::Binary),
            (&batched, Feature::FullBatch),
            (&prompt, Feature::SeparatePrompt),
            (&factorised, Feature::PlainQuery),
        ] {
            assert!(f.missing(cfg).is_some());
            for c in Capability::ALL {
                assert_eq!(caps(cfg).has(c), !c.needs().contains(&f), "{c} {f:?}");
            }
        }
        let err = require(&k3, "svm", &[Capability::Svm]).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::InvalidConfig { ref field, .. } if field == "model.kind"));
        assert!(text.contains("svm needs the capability `svm`"), "{text}");
        assert!(text.contains("binary token-selection model only"), "{text}");
        assert!(require(&base, "svm", &[Capability::Svm]).is_ok());
    }
}
