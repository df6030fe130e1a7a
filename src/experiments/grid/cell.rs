//! One grid cell: a full f64 run of one config and seed, measured as the heat maps and
//! the label-noise map need it (SPEC sections 2c and 2d).

use serde::{Deserialize, Serialize};

use crate::arith::F64;
use crate::config::Config;
use crate::data::{Dataset, NoiseCache};
use crate::error::Result;
use crate::io::trajectory::SelectionShare;
use crate::model::caps::{Capability, require};
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

    /// The regime of a run with these final accuracies: not overfitting if some
    /// training label is not fitted (train accuracy < 1), else harmful if test accuracy
    /// is below [`HARMFUL_BELOW`], else benign.
    pub fn of(train_accuracy: f64, test_accuracy: f64) -> Regime {
        if train_accuracy < 1.0 {
            Regime::NotOverfitting
        } else if test_accuracy < HARMFUL_BELOW {
            Regime::Harmful
        } else {
            Regime::Benign
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

/// The ratios of a run's Definition 4.1 sums (`None` where undefined: an empty set, a
/// zero denominator, a non-finite quotient).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratios {
    /// Eq. (9)-style: per-sample clean sum over per-sample noisy sum.
    pub eq9: Option<f64>,
    /// Eq. (10)-style: [`Sums::class_balance`] divided by its value at step 0.
    pub eq10: Option<f64>,
    /// Same true class +1: clean observed +1 over noisy observed -1, per sample.
    pub same_class_pos: Option<f64>,
    /// Same true class -1: clean observed -1 over noisy observed +1, per sample.
    pub same_class_neg: Option<f64>,
}

impl Sums {
    /// Per-sample clean class +1 sum over per-sample clean class -1 sum (the Eq. (10)
    /// ratio before normalisation).
    pub fn class_balance(&self, c: &Counts) -> Option<f64> {
        ratio(self.clean_pos, c.clean_pos, self.clean_neg, c.clean_neg)
    }

    /// The ratios of these sums; `balance_at_0` is [`Sums::class_balance`] of the sums
    /// at step 0 (the Eq. (10) normalisation).
    pub fn ratios(&self, c: &Counts, balance_at_0: Option<f64>) -> Ratios {
        Ratios {
            eq9: ratio(
                self.clean_pos + self.clean_neg,
                c.clean_pos + c.clean_neg,
                self.noisy_obs_pos + self.noisy_obs_neg,
                c.noisy_obs_pos + c.noisy_obs_neg,
            ),
            eq10: self
                .class_balance(c)
                .zip(balance_at_0)
                .map(|(r, r0)| r / r0)
                .filter(|r| r.is_finite()),
            same_class_pos: ratio(
                self.clean_pos,
                c.clean_pos,
                self.noisy_obs_neg,
                c.noisy_obs_neg,
            ),
            same_class_neg: ratio(
                self.clean_neg,
                c.clean_neg,
                self.noisy_obs_pos,
                c.noisy_obs_pos,
            ),
        }
    }
}

/// The first step at which every training label is fitted, observed step by step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitStep {
    n: usize,
    /// The first observed step with all `n` labels fitted (`None`: none yet).
    pub first: Option<u64>,
}

impl FitStep {
    /// Nothing observed yet, `n` training labels.
    pub fn new(n: usize) -> FitStep {
        FitStep { n, first: None }
    }

    /// Observe `correct` labels fitted at `step` (steps in increasing order).
    pub fn observe(&mut self, step: u64, correct: usize) {
        if correct == self.n && self.first.is_none() {
            self.first = Some(step);
        }
    }
}

/// The first step of `curve` (checkpoint steps and test accuracies, in step order) whose
/// accuracy lies within [`GENERALISATION_BAND`] of `final_accuracy`; `steps` if none.
pub fn generalisation_step(curve: &[(u64, f64)], final_accuracy: f64, steps: u64) -> u64 {
    curve
        .iter()
        .find(|(_, a)| (a - final_accuracy).abs() <= GENERALISATION_BAND)
        .map_or(steps, |(s, _)| *s)
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
    require(cfg, "a grid cell", &[Capability::GridMetrics])?;
    let data = Dataset::generate_cached(cfg, cache);
    let mut tr = Trainer::new(cfg, &data, F64, cfg.formulation)?;
    let (y, y_true) = (&data.train.y, &data.train.y_true);
    let mut counts = Counts::default();
    for (yi, ti) in y.iter().zip(y_true) {
        *counts.slot(*yi, *ti) += 1;
    }
    let schedule = record::schedule(cfg.steps, cfg.record.checkpoints_per_decade);
    let mut sums = Sums::default();
    let mut balance_at_0 = None;
    let mut fit_step = FitStep::new(y.len());
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
            balance_at_0 = sums.class_balance(&counts);
        }
        correct = tr.train_correct();
        fit_step.observe(tr.step, correct);
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
    let selection = tr.selection_share();
    let ratios = sums.ratios(&counts, balance_at_0);
    Ok(Metrics {
        train_accuracy,
        test_accuracy,
        train_loss: tr.loss,
        test_loss,
        clean_selection: selection.clean,
        noisy_selection: selection.noisy,
        eq9_ratio: ratios.eq9,
        eq10_ratio: ratios.eq10,
        same_class_ratio_pos: ratios.same_class_pos,
        same_class_ratio_neg: ratios.same_class_neg,
        fit_step: fit_step.first,
        generalisation_step: generalisation_step(&test_curve, test_accuracy, cfg.steps),
        regime: Regime::of(train_accuracy, test_accuracy),
        counts,
        sums,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sets of sizes (clean +1, clean -1, noisy observed +1, noisy observed -1) =
    /// (2, 4, 1, 2) with sums (3, 2, 0.25, 1): every ratio by hand. Catches a swapped
    /// set (the same-class ratios pair a clean set with the noisy set of the SAME true
    /// class: swapping observed +1 and -1 gives 6 and 1), sums not divided by their
    /// counts (the Eq. (9) ratio would be 5 / 1.25 = 4), and a missing Eq. (10)
    /// normalisation.
    #[test]
    fn ratios_match_hand_computed_values() {
        let counts = Counts {
            clean_pos: 2,
            clean_neg: 4,
            noisy_obs_pos: 1,
            noisy_obs_neg: 2,
        };
        let sums = Sums {
            clean_pos: 3.0,
            clean_neg: 2.0,
            noisy_obs_pos: 0.25,
            noisy_obs_neg: 1.0,
        };
        // class balance (3 / 2) / (2 / 4) = 3; at step 0 it was 1.5
        assert_eq!(sums.class_balance(&counts), Some(3.0));
        let r = sums.ratios(&counts, Some(1.5));
        // Eq. (9): ((3 + 2) / 6) / ((0.25 + 1) / 3) = 2
        assert!((r.eq9.unwrap() - 2.0).abs() <= 4.0 * f64::EPSILON, "{r:?}");
        assert_eq!(r.eq10, Some(2.0));
        // true class +1: (3 / 2) / (1 / 2) = 3; true class -1: (2 / 4) / (0.25 / 1) = 2
        assert_eq!(r.same_class_pos, Some(3.0));
        assert_eq!(r.same_class_neg, Some(2.0));
        // undefined: no noisy sample, a zero sum, no step-0 value
        let none = Counts {
            noisy_obs_pos: 0,
            noisy_obs_neg: 0,
            ..counts
        };
        let r = sums.ratios(&none, None);
        assert_eq!((r.eq9, r.eq10), (None, None));
        assert_eq!((r.same_class_pos, r.same_class_neg), (None, None));
        let zero = Sums {
            noisy_obs_pos: 0.0,
            ..sums
        };
        assert_eq!(zero.ratios(&counts, Some(1.5)).same_class_neg, None);
        // a quotient that overflows is undefined, not infinite
        let tiny = Sums {
            noisy_obs_neg: 1e-320,
            ..sums
        };
        assert_eq!(tiny.ratios(&counts, Some(1.5)).same_class_pos, None);
    }

    /// The regime by hand at the boundaries: train < 1 is "not overfitting" whatever the
    /// test accuracy; test exactly at [`HARMFUL_BELOW`] is benign, just below harmful.
    /// Catches `<=` for `<` and the order of the two tests.
    #[test]
    fn regime_by_hand() {
        assert_eq!(Regime::of(0.95, 1.0), Regime::NotOverfitting);
        assert_eq!(Regime::of(0.95, 0.5), Regime::NotOverfitting);
        assert_eq!(Regime::of(1.0, HARMFUL_BELOW), Regime::Benign);
        assert_eq!(Regime::of(1.0, 0.949), Regime::Harmful);
        assert_eq!(Regime::of(1.0, 1.0), Regime::Benign);
    }

    /// The fit step is the FIRST step with every label fitted, even if a later step
    /// loses a label again (catches "last step", or resetting on a loss); the
    /// generalisation step is the first checkpoint within 0.01 of the final accuracy,
    /// even if a later one leaves the band (catches "last entry into the band"), and
    /// the run's length when none is.
    #[test]
    fn fit_and_generalisation_steps_by_hand() {
        let mut fit = FitStep::new(20);
        for (step, correct) in [(0, 16), (1, 19), (2, 20), (3, 19), (4, 20)] {
            fit.observe(step, correct);
        }
        assert_eq!(fit.first, Some(2));
        let mut never = FitStep::new(20);
        never.observe(0, 19);
        assert_eq!(never.first, None);
        let curve = [
            (0, 0.5),
            (2, 0.965),
            (5, 0.975),
            (10, 0.95),
            (20, 0.99),
            (30, 0.98),
        ];
        assert_eq!(generalisation_step(&curve, 0.98, 30), 5);
        assert_eq!(generalisation_step(&curve[..2], 0.98, 30), 30);
    }
}
