//! Compare two saved trajectories (f64 vs twin, two code versions, two seeds): every
//! number they hold, their labels, their checkpoint sets and their configs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::Group;
use crate::io::trajectory::{ByNoise, Checkpoint, PerGroup, SelectionShare, Trajectory};

/// The result of [`diff`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Relative tolerance.
    #[serde(with = "crate::io::nonfinite")]
    pub rtol: f64,
    /// True when only common checkpoints were compared (`--common-only`).
    pub common_only: bool,
    /// Verdict: the trajectories differ (config, labels, checkpoint sets unless
    /// `common_only`, or a number beyond `rtol`), or have no checkpoint in common.
    pub diverged: bool,
    /// Config keys (dotted) whose values differ.
    pub config_differences: Vec<String>,
    /// True when the observed or true training labels differ.
    pub labels_differ: bool,
    /// Fields of the `trainer` block (arithmetic, precision, formulation, method) whose
    /// values differ: listed, not a divergence by themselves (f64 against the twin within
    /// rtol is a use of diff), and never "bit-identical" runs of different trainers.
    #[serde(default)]
    pub trainer_differences: Vec<String>,
    /// Steps recorded in both trajectories.
    pub common_steps: usize,
    /// Steps recorded only in the first trajectory.
    pub only_in_a: Vec<u64>,
    /// Steps recorded only in the second trajectory.
    pub only_in_b: Vec<u64>,
    /// First common step where some number differs by more than `rtol`.
    pub first_divergence: Option<u64>,
    /// The quantity that diverged first there.
    pub first_quantity: Option<String>,
    /// Largest relative deviation of each quantity over the common steps (per-sample and
    /// per-group quantities reduced by max).
    #[serde(with = "crate::io::nonfinite::map")]
    pub max_rel_dev: BTreeMap<String, f64>,
    /// Largest absolute deviation of each token group's attention mass (over samples and
    /// common steps).
    #[serde(with = "crate::io::nonfinite::map")]
    pub max_group_mass_dev: BTreeMap<String, f64>,
    /// True when every common checkpoint is bit-identical (and there is one).
    pub bit_identical: bool,
}

/// |a - b| / max(|a|, |b|) (0 when equal, also for two infinities of one sign).
fn rel(a: f64, b: f64) -> f64 {
    if a == b || (a.is_nan() && b.is_nan()) {
        0.0
    } else if !a.is_finite() || !b.is_finite() {
        // a NaN against a number, or an infinity against anything else: as far apart as
        // values can be (and never a NaN, which `max` would drop)
        f64::INFINITY
    } else {
        (a - b).abs() / a.abs().max(b.abs())
    }
}

/// |a - b| (0 when equal or both NaN; infinite when one is NaN or they are different
/// infinities: never a NaN, which `max` would drop).
fn abs_dev(a: f64, b: f64) -> f64 {
    if a == b || (a.is_nan() && b.is_nan()) {
        0.0
    } else if a.is_nan() || b.is_nan() {
        f64::INFINITY
    } else {
        (a - b).abs()
    }
}

/// Every named number of a checkpoint pair, as relative deviations.
fn quantities(a: &Checkpoint, b: &Checkpoint) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = vec![
        ("train_loss".into(), rel(a.train_loss, b.train_loss)),
        (
            "train_accuracy".into(),
            rel(a.train_accuracy, b.train_accuracy),
        ),
        (
            "test_accuracy".into(),
            rel(a.test_accuracy, b.test_accuracy),
        ),
        ("q_norm".into(), rel(a.q_norm, b.q_norm)),
        ("grad_norm".into(), rel(a.grad_norm, b.grad_norm)),
        (
            "cumulative.clean".into(),
            rel(a.cumulative.clean, b.cumulative.clean),
        ),
        (
            "cumulative.noisy".into(),
            rel(a.cumulative.noisy, b.cumulative.noisy),
        ),
        (
            "cumulative.class_pos".into(),
            rel(a.cumulative.class_pos, b.cumulative.class_pos),
        ),
        (
            "cumulative.class_neg".into(),
            rel(a.cumulative.class_neg, b.cumulative.class_neg),
        ),
    ];
    // per set and entry: `names[k]` is the k-th value of each set
    fn by_noise<const N: usize>(
        name: &str,
        names: [&str; N],
        x: ByNoise<[f64; N]>,
        y: ByNoise<[f64; N]>,
        out: &mut Vec<(String, f64)>,
    ) {
        for (set, u, v) in [("clean", x.clean, y.clean), ("noisy", x.noisy, y.noisy)] {
            for (k, entry) in names.iter().enumerate() {
                let dev = match (u, v) {
                    (Some(u), Some(v)) => rel(u[k], v[k]),
                    (None, None) => 0.0,
                    _ => f64::INFINITY,
                };
                out.push((format!("{name}.{set}.{entry}"), dev));
            }
        }
    }
    let groups = Group::ALL.map(Group::name);
    let attention = |c: &Checkpoint| c.attention.map(PerGroup::to_array);
    by_noise("attention", groups, attention(a), attention(b), &mut out);
    let selection = |c: &Checkpoint| c.selection.map(SelectionShare::to_array);
    let names = SelectionShare::NAMES;
    by_noise("selection", names, selection(a), selection(b), &mut out);
    let per_sample = |f: &dyn Fn(&crate::io::trajectory::SampleState) -> f64| {
        a.samples
            .iter()
            .zip(&b.samples)
            .map(|(x, y)| rel(f(x), f(y)))
            .fold(0.0, f64::max)
    };
    out.push(("samples.f".into(), per_sample(&|s| s.f)));
    out.push(("samples.top".into(), per_sample(&|s| s.top as f64)));
    out.push((
        "samples.selection".into(),
        per_sample(&|s| f64::from(s.selection.code())),
    ));
    out.push(("samples.gap".into(), per_sample(&|s| s.gap)));
    out.push(("samples.rest".into(), per_sample(&|s| s.rest)));
    out.push((
        "samples.selection_score".into(),
        per_sample(&|s| s.selection_score),
    ));
    for g in Group::ALL {
        out.push((
            format!("samples.mass.{}", g.name()),
            per_sample(&|s| s.mass.get(g)),
        ));
    }
    // a K-class model's outputs and per-class record (absent on both sides: binary)
    let outputs = a
        .samples
        .iter()
        .zip(&b.samples)
        .map(|(x, y)| match (&x.outputs, &y.outputs) {
            (None, None) => 0.0,
            (Some(u), Some(v)) if u.len() == v.len() => u
                .iter()
                .zip(v)
                .map(|(p, q)| rel(*p, *q))
                .fold(0.0, f64::max),
            _ => f64::INFINITY,
        })
        .fold(0.0, f64::max);
    if a.samples
        .iter()
        .chain(&b.samples)
        .any(|s| s.outputs.is_some())
    {
        out.push(("samples.outputs".into(), outputs));
    }
    match (&a.classes, &b.classes) {
        (None, None) => {}
        (Some(x), Some(y)) => {
            let lists = |u: &[Option<f64>], v: &[Option<f64>]| {
                if u.len() != v.len() {
                    return f64::INFINITY;
                }
                u.iter()
                    .zip(v)
                    .map(|(p, q)| match (p, q) {
                        (Some(p), Some(q)) => rel(*p, *q),
                        (None, None) => 0.0,
                        _ => f64::INFINITY,
                    })
                    .fold(0.0, f64::max)
            };
            out.push((
                "classes.train_accuracy".into(),
                lists(&x.train_accuracy, &y.train_accuracy),
            ));
            out.push((
                "classes.test_accuracy".into(),
                lists(&x.test_accuracy, &y.test_accuracy),
            ));
            out.push(("classes.test_tie".into(), rel(x.test_tie, y.test_tie)));
            out.push((
                "classes.test_undecided".into(),
                rel(x.test_undecided, y.test_undecided),
            ));
            let sel = |k: &crate::io::trajectory::ClassMetrics| {
                k.selection
                    .map(crate::io::trajectory::ClassSelection::to_array)
            };
            by_noise(
                "classes.selection",
                crate::io::trajectory::ClassSelection::NAMES,
                sel(x),
                sel(y),
                &mut out,
            );
            out.push((
                "classes.selection_score".into(),
                lists(&x.selection_score, &y.selection_score),
            ));
        }
        _ => out.push(("classes".into(), f64::INFINITY)),
    }
    // the direction record against the attention SVM (absent on both sides: no
    // `[direction]`); an absent value (theta = theta0, min m not positive) is NaN
    match (&a.direction, &b.direction) {
        (None, None) => {}
        (Some(x), Some(y)) => {
            let opt = |v: Option<f64>| v.unwrap_or(f64::NAN);
            out.extend([
                (
                    "direction.one_minus_corr".into(),
                    rel(opt(x.one_minus_corr), opt(y.one_minus_corr)),
                ),
                ("direction.norm".into(), rel(x.norm, y.norm)),
                ("direction.margin".into(), rel(opt(x.margin), opt(y.margin))),
                (
                    "direction.support_deviation".into(),
                    rel(opt(x.support_deviation), opt(y.support_deviation)),
                ),
                (
                    "direction.on_pattern".into(),
                    rel(x.on_pattern, y.on_pattern),
                ),
            ]);
        }
        _ => out.push(("direction".into(), f64::INFINITY)),
    }
    out
}

/// Dotted keys whose values differ between two TOML tables.
fn table_differences(a: &toml::Table, b: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for key in keys {
        let name = format!("{prefix}{key}");
        match (a.get(key), b.get(key)) {
            (Some(toml::Value::Table(x)), Some(toml::Value::Table(y))) => {
                table_differences(x, y, &format!("{name}."), out)
            }
            (x, y) if x != y => out.push(name),
            _ => {}
        }
    }
}

/// Config keys whose values differ.
pub fn config_differences(a: &crate::Config, b: &crate::Config) -> Vec<String> {
    let table = |c: &crate::Config| -> toml::Table {
        toml::from_str(&c.to_toml()).expect("a config serialises to a TOML table")
    };
    let mut out = Vec::new();
    table_differences(&table(a), &table(b), "", &mut out);
    out
}

/// Compare `a` and `b`: configs, labels, checkpoint sets, and every number of the
/// checkpoints they share (matched by step). With `common_only`, checkpoints present in
/// one trajectory only are listed but do not count as a divergence.
pub fn diff(a: &Trajectory, b: &Trajectory, rtol: f64, common_only: bool) -> Report {
    let mut max_rel_dev = BTreeMap::new();
    let mut max_group = BTreeMap::new();
    let mut first: Option<(u64, String)> = None;
    let mut common = 0;
    let mut bits = true;
    let steps = |t: &Trajectory| t.checkpoints.iter().map(|c| c.step).collect::<Vec<_>>();
    let (sa, sb) = (steps(a), steps(b));
    let only_in_a: Vec<u64> = sa.iter().copied().filter(|s| !sb.contains(s)).collect();
    let only_in_b: Vec<u64> = sb.iter().copied().filter(|s| !sa.contains(s)).collect();
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
            .eq(cb.numbers().iter().map(|v| v.to_bits()))
            && ca.attention == cb.attention
            && ca.selection == cb.selection;
        for (name, v) in quantities(ca, cb) {
            if first.is_none() && crate::analysis::exceeds(v, rtol) {
                first = Some((ca.step, name.clone()));
            }
            let m = max_rel_dev.entry(name).or_insert(0.0f64);
            *m = m.max(v);
        }
        for g in Group::ALL {
            let dev = ca
                .samples
                .iter()
                .zip(&cb.samples)
                .map(|(x, y)| abs_dev(x.mass.get(g), y.mass.get(g)))
                .fold(0.0, f64::max);
            let m = max_group.entry(g.name().to_string()).or_insert(0.0f64);
            *m = m.max(dev);
        }
    }
    let config_differences = config_differences(&a.config, &b.config);
    let labels_differ = a.y != b.y || a.y_true != b.y_true;
    let trainer_differences = {
        let (ta, tb) = (
            serde_json::to_value(&a.trainer).expect("trainer serialises"),
            serde_json::to_value(&b.trainer).expect("trainer serialises"),
        );
        match (ta.as_object(), tb.as_object()) {
            (Some(x), Some(y)) => x
                .keys()
                .chain(y.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .filter(|k| x.get(*k) != y.get(*k))
                .cloned()
                .collect(),
            _ if ta != tb => vec!["trainer".to_string()],
            _ => Vec::new(),
        }
    };
    let sets_differ = !(only_in_a.is_empty() && only_in_b.is_empty());
    Report {
        rtol,
        common_only,
        diverged: first.is_some()
            || common == 0
            || !config_differences.is_empty()
            || labels_differ
            || (sets_differ && !common_only),
        config_differences,
        labels_differ,
        bit_identical: bits && common > 0 && trainer_differences.is_empty(),
        trainer_differences,
        common_steps: common,
        only_in_a,
        only_in_b,
        first_divergence: first.as_ref().map(|f| f.0),
        first_quantity: first.map(|f| f.1),
        max_rel_dev,
        max_group_mass_dev: max_group,
    }
}

impl std::fmt::Display for Report {
    /// The readable verdict of `tokensel diff`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = format!(
            "tokensel diff: {} common checkpoints, rtol {:e}\n",
            self.common_steps, self.rtol
        );
        if !self.config_differences.is_empty() {
            out += &format!(
                "  configs differ in: {}\n",
                self.config_differences.join(", ")
            );
        }
        if self.labels_differ {
            out += "  training labels differ\n";
        }
        if !self.trainer_differences.is_empty() {
            out += &format!(
                "  trainers differ in: {}\n",
                self.trainer_differences.join(", ")
            );
        }
        let list = |v: &[u64]| {
            v.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.only_in_a.is_empty() || !self.only_in_b.is_empty() {
            out += &format!(
                "  checkpoint sets differ{}: only in A [{}], only in B [{}]\n",
                if self.common_only {
                    " (ignored: --common-only)"
                } else {
                    ""
                },
                list(&self.only_in_a),
                list(&self.only_in_b)
            );
        }
        out += &match (self.first_divergence, &self.first_quantity) {
            (Some(s), Some(q)) => format!("  first divergence: step {s} in `{q}`\n"),
            _ if self.common_steps == 0 => "  no checkpoint in common: nothing agrees\n".into(),
            _ if self.bit_identical => "  bit-identical on every common checkpoint\n".to_string(),
            _ => "  every number within rtol on every common checkpoint\n".to_string(),
        };
        out += &format!(
            "  verdict: {}\n",
            if self.diverged { "DIFFER" } else { "agree" }
        );
        // the name column as wide as the longest name (`attention.clean.W_opposite`)
        let w = self
            .max_rel_dev
            .keys()
            .chain(self.max_group_mass_dev.keys())
            .map(String::len)
            .max()
            .unwrap_or(0)
            .max(16);
        out += &format!("\n  {:<w$}{:>13}\n", "quantity", "max rel dev");
        for (k, v) in &self.max_rel_dev {
            out += &format!("  {k:<w$}{v:>13.3e}\n");
        }
        out += &format!("\n  {:<w$}{:>13}\n", "group mass", "max abs dev");
        for (k, v) in &self.max_group_mass_dev {
            out += &format!("  {k:<w$}{v:>13.3e}\n");
        }
        f.write_str(&out)
    }
}
