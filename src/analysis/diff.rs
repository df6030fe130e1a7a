//! Compare two saved trajectories (f64 vs twin, two code versions, two seeds).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::Group;
use crate::io::trajectory::{Checkpoint, Trajectory};

/// The result of [`diff`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Relative tolerance.
    pub rtol: f64,
    /// Steps recorded in both trajectories.
    pub common_steps: usize,
    /// First common step where some quantity differs by more than `rtol`.
    pub first_divergence: Option<u64>,
    /// Quantity that diverged first.
    pub first_quantity: Option<String>,
    /// Largest relative deviation of each quantity over common steps.
    pub max_rel_dev: BTreeMap<String, f64>,
    /// Largest absolute deviation of each token group's attention mass (over samples and
    /// common steps).
    pub max_group_mass_dev: BTreeMap<String, f64>,
    /// True when the trajectories are bit-identical on every common checkpoint.
    pub bit_identical: bool,
    /// Whether the two runs had the same config.
    pub same_config: bool,
}

fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (a - b).abs() / a.abs().max(b.abs())
    }
}

/// Named scalar quantities of a checkpoint pair (per-sample quantities reduced by max).
fn quantities(a: &Checkpoint, b: &Checkpoint) -> Vec<(&'static str, f64)> {
    let per_sample = |f: &dyn Fn(&crate::io::trajectory::SampleState) -> f64| {
        a.samples
            .iter()
            .zip(&b.samples)
            .map(|(x, y)| rel(f(x), f(y)))
            .fold(0.0, f64::max)
    };
    let top_changed = a
        .samples
        .iter()
        .zip(&b.samples)
        .any(|(x, y)| x.top != y.top);
    vec![
        ("train_loss", rel(a.train_loss, b.train_loss)),
        ("train_accuracy", rel(a.train_accuracy, b.train_accuracy)),
        ("test_accuracy", rel(a.test_accuracy, b.test_accuracy)),
        ("q_norm", rel(a.q_norm, b.q_norm)),
        ("grad_norm", rel(a.grad_norm, b.grad_norm)),
        ("f", per_sample(&|s| s.f)),
        ("rest", per_sample(&|s| s.rest)),
        ("gap", per_sample(&|s| s.gap)),
        ("selection_score", per_sample(&|s| s.selection_score)),
        ("top_token", if top_changed { 1.0 } else { 0.0 }),
    ]
}

/// Compare `a` and `b` checkpoint by checkpoint (matched by step).
pub fn diff(a: &Trajectory, b: &Trajectory, rtol: f64) -> Report {
    let mut max_rel_dev = BTreeMap::new();
    let mut max_group = BTreeMap::new();
    let mut first: Option<(u64, String)> = None;
    let mut common = 0;
    let mut bits = true;
    for ca in &a.checkpoints {
        let Some(cb) = b.checkpoints.iter().find(|c| c.step == ca.step) else {
            continue;
        };
        common += 1;
        if ca.samples.len() != cb.samples.len() {
            first.get_or_insert((ca.step, "samples".into()));
            bits = false;
            continue;
        }
        bits &= ca
            .numbers()
            .iter()
            .map(|v| v.to_bits())
            .eq(cb.numbers().iter().map(|v| v.to_bits()));
        for (name, v) in quantities(ca, cb) {
            let m = max_rel_dev.entry(name.to_string()).or_insert(0.0f64);
            *m = m.max(v);
            if first.is_none() && crate::analysis::compare::exceeds(v, rtol) {
                first = Some((ca.step, name.to_string()));
            }
        }
        for g in Group::ALL {
            let dev = ca
                .samples
                .iter()
                .zip(&cb.samples)
                .map(|(x, y)| (x.mass.get(g) - y.mass.get(g)).abs())
                .fold(0.0, f64::max);
            let m = max_group.entry(g.name().to_string()).or_insert(0.0f64);
            *m = m.max(dev);
        }
    }
    Report {
        rtol,
        common_steps: common,
        first_divergence: first.as_ref().map(|f| f.0),
        first_quantity: first.map(|f| f.1),
        max_rel_dev,
        max_group_mass_dev: max_group,
        bit_identical: bits && common > 0,
        same_config: a.config == b.config,
    }
}
