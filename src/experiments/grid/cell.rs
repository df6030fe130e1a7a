//! One grid cell: a full f64 run of one config and seed, measured as the heat maps and
//! the label-noise map need it (SPEC sections 2c and 2d).

use serde::{Deserialize, Serialize};

use crate::arith::F64;
use crate::config::Config;
use crate::data::{Dataset, NoiseCache};
use crate::error::Result;
use crate::io::trajectory::SelectionShare;
use crate::train::drive::{Control, Event, drive};
use crate::train::{Trainer, record};

/// Test accuracy at least this close to its final value counts as "arrived".
pub const GENERALISATION_BAND: f64 = 0.01;

/// Test accuracy below which an overfitting run is harmful (proofs-notes/grid.md).
pub const HARMFUL_BELOW: f64 = 0.95;

/// The three regimes of the paper (Figure 1 of the final version).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Regime {
    /// Every training label fitted and test accuracy >= [`HARMFUL_BELOW`].
    Benign,
    /// Every training label fitted and test accuracy < [`HARMFUL_BELOW`].
    Harmful,
    /// Some training label not fitted.
    NotOverfitting,
}

impl Regime {
    /// All regimes, in report order.
    pub const ALL: [Regime; 3] = [Regime::Benign, Regime::Harmful, Regime::NotOverfitting];

    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Regime::Benign => "benign",
            Regime::Harmful => "harmful",
            Regime::NotOverfitting => "not_overfitting",
        }
    }
}

/// One value per set of training samples: clean or noisy, by observed label.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct BySet<T> {
    /// Clean samples of class +1.
    pub clean_pos: T,
    /// Clean samples of class -1.
    pub clean_neg: T,
    /// Noisy samples observed +1 (true class -1).
    pub noisy_obs_pos: T,
    /// Noisy samples observed -1 (true class +1).
    pub noisy_obs_neg: T,
}

impl<T> BySet<T> {
    /// The value of the set of a sample with observed label `y` and true label `y_true`.
    fn slot(&mut self, y: i8, y_true: i8) -> &mut T {
        match (y == y_true, y > 0) {
            (true, true) => &mut self.clean_pos,
            (true, false) => &mut self.clean_neg,
            (false, true) => &mut self.noisy_obs_pos,
            (false, false) => &mut self.noisy_obs_neg,
        }
    }
}

/// Definition 4.1 sums S_i(tau') over tau' <= tau, per set.
pub type Sums = BySet<f64>;

/// Sample counts of the four sets.
pub type Counts = BySet<usize>;

/// Per-sample mean a / na over b / nb (`None` where a set is empty, or the ratio is not
/// a finite number: b = 0, or b so small that the quotient overflows).
fn ratio(a: f64, na: usize, b: f64, nb: usize) -> Option<f64> {
    (na > 0 && nb > 0 && b > 0.0)
        .then(|| (a / na as f64) / (b / nb as f64))
        .filter(|r| r.is_finite())
}

/// What one cell measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Final training accuracy (observed labels).
    #[serde(with = "crate::io::nonfinite")]
    pub train_accuracy: f64,
    /// Final test accuracy (true labels).
    #[serde(with = "crate::io::nonfinite")]
    pub test_accuracy: f64,
    /// Final training loss.
    #[serde(with = "crate::io::nonfinite")]
    pub train_loss: f64,
    /// Final test loss.
    #[serde(with = "crate::io::nonfinite")]
    pub test_loss: f64,
    /// Share of clean training samples whose top token is decided in each group, ties,
    /// or is undecided.
    pub clean_selection: Option<SelectionShare>,
    /// Share of noisy training samples whose top token is decided in each group, ties,
    /// or is undecided.
    pub noisy_selection: Option<SelectionShare>,
    /// Eq. (9)-style ratio: clean over noisy per-sample cumulative S.
    #[serde(with = "crate::io::nonfinite::option")]
    pub eq9_ratio: Option<f64>,
    /// Eq. (10)-style ratio: clean class +1 over clean class -1 per-sample cumulative
    /// S, divided by the same ratio at step 0.
    #[serde(with = "crate::io::nonfinite::option")]
    pub eq10_ratio: Option<f64>,
    /// Same true class +1: clean (observed +1) over noisy (observed -1), per-sample
    /// cumulative S.
    #[serde(with = "crate::io::nonfinite::option")]
    pub same_class_ratio_pos: Option<f64>,
    /// Same true class -1: clean (observed -1) over noisy (observed +1).
    #[serde(with = "crate::io::nonfinite::option")]
    pub same_class_ratio_neg: Option<f64>,
    /// First step at which every training label is fitted (checked at every step).
    pub fit_step: Option<u64>,
    /// First checkpoint step at which test accuracy comes within
    /// [`GENERALISATION_BAND`] of its final value (checkpoint resolution).
    pub generalisation_step: u64,
    /// The regime.
    pub regime: Regime,
    /// Sample counts of the four sets.
    pub counts: Counts,
    /// The final cumulative sums.
    pub sums: Sums,
}

/// Train `cfg` (validated) in f64 and measure it. Test accuracy is evaluated at the
/// checkpoints of [`record::schedule`] (`record.checkpoints_per_decade`). The test
/// tokens' noise comes from `cache` where it holds it (the same bits).
pub fn run(cfg: &Config, cache: Option<&NoiseCache>) -> Result<Metrics> {
    cfg.validate()?;
    crate::train::check_memory(cfg, crate::arith::Kind::F64, 53, cfg.method)?;
    let data = Dataset::generate_cached(cfg, cache);
    let mut tr = Trainer::new(cfg, &data, F64, cfg.formulation)?;
    let (y, y_true) = (&data.train.y, &data.train.y_true);
    let mut counts = Counts::default();
    for (yi, ti) in y.iter().zip(y_true) {
        *counts.slot(*yi, *ti) += 1;
    }
    let schedule = record::schedule(cfg.steps, cfg.record.checkpoints_per_decade);
    let mut sums = Sums::default();
    let mut eq10_at_0 = None;
    let mut fit_step = None;
    let mut test_curve = Vec::with_capacity(schedule.len());
    let mut last = None;
    let mut correct = 0; // training labels fitted at the last forward pass
    drive(&mut tr, cfg.steps, |tr, event| {
        if event == Event::Update {
            return Ok(Control::Continue);
        }
        for ((s, yi), ti) in tr.selection_scores().iter().zip(y).zip(y_true) {
            *sums.slot(*yi, *ti) += s;
        }
        if tr.step == 0 {
            eq10_at_0 = ratio(
                sums.clean_pos,
                counts.clean_pos,
                sums.clean_neg,
                counts.clean_neg,
            );
        }
        correct = tr.train_correct();
        if correct == y.len() && fit_step.is_none() {
            fit_step = Some(tr.step);
        }
        if schedule.binary_search(&tr.step).is_ok() {
            let (acc, loss) = tr.test_metrics(&tr.q());
            test_curve.push((tr.step, acc));
            if tr.step == cfg.steps {
                last = Some((acc, loss));
            }
        }
        Ok(Control::Continue)
    })?;
    let (test_accuracy, test_loss) = last.expect("the schedule ends at cfg.steps");
    let train_accuracy = correct as f64 / y.len() as f64;
    let generalisation_step = test_curve
        .iter()
        .find(|(_, a)| (a - test_accuracy).abs() <= GENERALISATION_BAND)
        .map_or(cfg.steps, |(s, _)| *s);
    let selection = tr.selection_share();
    let regime = if train_accuracy < 1.0 {
        Regime::NotOverfitting
    } else if test_accuracy < HARMFUL_BELOW {
        Regime::Harmful
    } else {
        Regime::Benign
    };
    let c = &counts;
    let eq10 = ratio(sums.clean_pos, c.clean_pos, sums.clean_neg, c.clean_neg);
    Ok(Metrics {
        train_accuracy,
        test_accuracy,
        train_loss: tr.loss,
        test_loss,
        clean_selection: selection.clean,
        noisy_selection: selection.noisy,
        eq9_ratio: ratio(
            sums.clean_pos + sums.clean_neg,
            c.clean_pos + c.clean_neg,
            sums.noisy_obs_pos + sums.noisy_obs_neg,
            c.noisy_obs_pos + c.noisy_obs_neg,
        ),
        eq10_ratio: eq10
            .zip(eq10_at_0)
            .map(|(r, r0)| r / r0)
            .filter(|r| r.is_finite()),
        same_class_ratio_pos: ratio(
            sums.clean_pos,
            c.clean_pos,
            sums.noisy_obs_neg,
            c.noisy_obs_neg,
        ),
        same_class_ratio_neg: ratio(
            sums.clean_neg,
            c.clean_neg,
            sums.noisy_obs_pos,
            c.noisy_obs_pos,
        ),
        fit_step,
        generalisation_step,
        regime,
        counts,
        sums,
    })
}
