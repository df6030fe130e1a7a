//! Compare two saved trajectories (f64 vs twin, two code versions, two seeds): every
//! number they hold, their labels, their checkpoint sets and their configs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::Group;
use crate::io::record::{Leaf, Leaves};
use crate::io::trajectory::{Checkpoint, Trajectory};

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
    /// The same fields with both values (`key`, `a`, `b`), as [`Report::config_changes`].
    #[serde(default)]
    pub trainer_changes: Vec<ConfigChange>,
    /// Fields of the trajectories' direction summary (`direction`: the attention SVM's
    /// limit and the run's end against it) whose values differ, or `direction` when one
    /// trajectory has it and the other not: a divergence.
    #[serde(default)]
    pub limit_differences: Vec<String>,
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
    /// The differing config keys with both values, in `config_differences`' order.
    #[serde(default)]
    pub config_changes: Vec<ConfigChange>,
    /// Per quantity of `max_rel_dev`: the first common step at which its largest
    /// deviation was reached (`None`: it agrees exactly at every common step).
    #[serde(default)]
    pub max_rel_dev_step: BTreeMap<String, Option<u64>>,
    /// Per quantity of `max_rel_dev`: the first common step at which it differs at all
    /// (a deviation > 0, within `rtol` or not; `None`: it agrees exactly).
    #[serde(default)]
    pub first_differs: BTreeMap<String, Option<u64>>,
    /// Per group of `max_group_mass_dev`: the first common step of its largest deviation.
    #[serde(default)]
    pub max_group_mass_dev_step: BTreeMap<String, Option<u64>>,
    /// Per group of `max_group_mass_dev`: the first common step at which it differs.
    #[serde(default)]
    pub group_mass_first_differs: BTreeMap<String, Option<u64>>,
}

/// A config key whose values differ ([`Report::config_changes`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigChange {
    /// The dotted key.
    pub key: String,
    /// Its value in A (`None`: A's config does not have it).
    pub a: Option<serde_json::Value>,
    /// Its value in B (`None`: B's config does not have it).
    pub b: Option<serde_json::Value>,
}

impl ConfigChange {
    /// `key: A -> B`, each value as TOML writes it (`absent` for a missing one).
    pub(crate) fn describe(&self) -> String {
        let show = |v: &Option<serde_json::Value>| match v {
            None => "absent".to_string(),
            Some(v) => serde_json::from_value::<toml::Value>(v.clone())
                .map_or_else(|_| v.to_string(), |t| t.to_string()),
        };
        format!("{}: {} -> {}", self.key, show(&self.a), show(&self.b))
    }
}

/// The differing `keys`, each with both values where `changes` has them (`key: A -> B`;
/// a report written before the changes were recorded names the keys only), comma
/// separated.
fn described(keys: &[String], changes: &[ConfigChange]) -> String {
    keys.iter()
        .map(|k| {
            changes
                .iter()
                .find(|c| c.key == *k)
                .map_or_else(|| k.clone(), ConfigChange::describe)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// When a quantity's deviation over the common steps was largest and when it first
/// differed.
#[derive(Debug, Clone, Copy, Default)]
struct Track {
    max: f64,
    max_step: Option<u64>,
    first: Option<u64>,
}

impl Track {
    /// Take the deviation `v` at `step` (steps in increasing order).
    fn take(&mut self, step: u64, v: f64) {
        if v > self.max {
            self.max = v;
            self.max_step = Some(step);
        }
        if v != 0.0 && self.first.is_none() {
            self.first = Some(step);
        }
    }
}

/// The tracks' largest deviations, their steps and their first differences, as the
/// report's three maps.
type TrackMaps = (
    BTreeMap<String, f64>,
    BTreeMap<String, Option<u64>>,
    BTreeMap<String, Option<u64>>,
);

fn maps(tracks: BTreeMap<String, Track>) -> TrackMaps {
    let mut out = TrackMaps::default();
    for (k, t) in tracks {
        out.0.insert(k.clone(), t.max);
        out.1.insert(k.clone(), t.max_step);
        out.2.insert(k, t.first);
    }
    out
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

/// A checkpoint's leaves grouped by path (paths in visit order, each path's leaves in
/// visit order: one per sample, per class, ...).
fn by_path(c: &Checkpoint, tokens: usize) -> Vec<(String, Vec<Leaf>)> {
    let mut out: Vec<(String, Vec<Leaf>)> = Vec::new();
    for (path, leaf) in Leaves::of(c, tokens).0 {
        match out.iter_mut().find(|(p, _)| *p == path) {
            Some((_, v)) => v.push(leaf),
            None => out.push((path, vec![leaf])),
        }
    }
    out
}

/// The largest deviation `dev` over a path's leaves paired in order: infinite where the
/// path is in one checkpoint only or holds a different number of leaves (a presence
/// mismatch), or where a value is absent on one side only.
fn paired(x: Option<&[Leaf]>, y: Option<&[Leaf]>, dev: fn(f64, f64) -> f64) -> f64 {
    match (x, y) {
        (Some(x), Some(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .map(|(p, q)| match (p, q) {
                (Leaf::Number(None), Leaf::Number(None)) => 0.0,
                (Leaf::Number(None), _) | (_, Leaf::Number(None)) => f64::INFINITY,
                _ => dev(p.number(), q.number()),
            })
            .fold(0.0, f64::max),
        _ => f64::INFINITY,
    }
}

/// The leaves of `path` in a checkpoint grouped by [`by_path`].
fn find<'a>(c: &'a [(String, Vec<Leaf>)], path: &str) -> Option<&'a [Leaf]> {
    c.iter().find(|(p, _)| p == path).map(|(_, v)| v.as_slice())
}

/// Every leaf path of a checkpoint pair (but `step`, which pairs them), in visit order,
/// with the largest relative deviation of its leaves ([`paired`]).
fn quantities(a: &[(String, Vec<Leaf>)], b: &[(String, Vec<Leaf>)]) -> Vec<(String, f64)> {
    let only_b = b.iter().filter(|(p, _)| find(a, p).is_none());
    a.iter()
        .chain(only_b)
        .filter(|(p, _)| p != "step")
        .map(|(p, _)| (p.clone(), paired(find(a, p), find(b, p), rel)))
        .collect()
}

/// Whether two checkpoints' leaves are bit-identical (the same paths, the same values'
/// bits, absent in the same places).
fn same_bits(a: &[(String, Vec<Leaf>)], b: &[(String, Vec<Leaf>)]) -> bool {
    let bits = |l: &Leaf| match l {
        Leaf::Number(None) => None,
        l => Some(l.number().to_bits()),
    };
    a.len() == b.len()
        && a.iter().zip(b).all(|((p, x), (q, y))| {
            p == q && x.len() == y.len() && x.iter().zip(y).all(|(u, v)| bits(u) == bits(v))
        })
}

/// Dotted keys whose values differ between two TOML tables, with both values.
fn table_differences(a: &toml::Table, b: &toml::Table, prefix: &str, out: &mut Vec<ConfigChange>) {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let json = |v: Option<&toml::Value>| {
        v.map(|v| serde_json::to_value(v).expect("TOML values convert to JSON"))
    };
    for key in keys {
        let name = format!("{prefix}{key}");
        match (a.get(key), b.get(key)) {
            (Some(toml::Value::Table(x)), Some(toml::Value::Table(y))) => {
                table_differences(x, y, &format!("{name}."), out)
            }
            (x, y) if x != y => out.push(ConfigChange {
                key: name,
                a: json(x),
                b: json(y),
            }),
            _ => {}
        }
    }
}

/// Config keys whose values differ, with both values.
pub fn config_changes(a: &crate::Config, b: &crate::Config) -> Vec<ConfigChange> {
    let table = |c: &crate::Config| -> toml::Table {
        toml::from_str(&c.to_toml()).expect("a config serialises to a TOML table")
    };
    let mut out = Vec::new();
    table_differences(&table(a), &table(b), "", &mut out);
    out
}

/// The top-level fields of `a` and `b` (serialised) whose values differ, with both
/// values (a field one of them lacks: `None` there), in key order; `None` when they
/// are not both objects.
fn field_changes<T: Serialize>(a: &T, b: &T) -> Option<Vec<ConfigChange>> {
    let (va, vb) = (
        serde_json::to_value(a).expect("records serialise"),
        serde_json::to_value(b).expect("records serialise"),
    );
    let (x, y) = (va.as_object()?, vb.as_object()?);
    Some(
        x.keys()
            .chain(y.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter(|k| x.get(*k) != y.get(*k))
            .map(|k| ConfigChange {
                key: k.clone(),
                a: x.get(k).cloned(),
                b: y.get(k).cloned(),
            })
            .collect(),
    )
}

/// The top-level fields of `a` and `b` (serialised) whose values differ, each as
/// `prefix` + its key (in key order), or `[whole]` when they are not both objects and
/// differ (one absent, say).
fn differing_fields<T: Serialize>(a: &T, b: &T, whole: &str, prefix: &str) -> Vec<String> {
    match field_changes(a, b) {
        Some(changes) => changes
            .into_iter()
            .map(|c| format!("{prefix}{}", c.key))
            .collect(),
        None if serde_json::to_value(a).ok() != serde_json::to_value(b).ok() => {
            vec![whole.to_string()]
        }
        None => Vec::new(),
    }
}

/// Compare `a` and `b`: configs, labels, checkpoint sets, and every number of the
/// checkpoints they share (matched by step). With `common_only`, checkpoints present in
/// one trajectory only are listed but do not count as a divergence.
pub fn diff(a: &Trajectory, b: &Trajectory, rtol: f64, common_only: bool) -> Report {
    let mut quantity_tracks: BTreeMap<String, Track> = BTreeMap::new();
    let mut group_tracks: BTreeMap<String, Track> = BTreeMap::new();
    let mut first: Option<(u64, String)> = None;
    let mut common = 0;
    let mut bits = true;
    let tokens = a.config.layout.tokens;
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
        let (la, lb) = (by_path(ca, tokens), by_path(cb, tokens));
        bits &= same_bits(&la, &lb);
        for (name, v) in quantities(&la, &lb) {
            if first.is_none() && crate::analysis::exceeds(v, rtol) {
                first = Some((ca.step, name.clone()));
            }
            quantity_tracks.entry(name).or_default().take(ca.step, v);
        }
        for g in Group::ALL {
            let path = format!("samples.mass.{}", g.name());
            let dev = paired(find(&la, &path), find(&lb, &path), abs_dev);
            group_tracks
                .entry(g.name().to_string())
                .or_default()
                .take(ca.step, dev);
        }
    }
    let (max_rel_dev, max_rel_dev_step, first_differs) = maps(quantity_tracks);
    let (max_group, max_group_mass_dev_step, group_mass_first_differs) = maps(group_tracks);
    let config_changes = config_changes(&a.config, &b.config);
    let config_differences: Vec<String> = config_changes.iter().map(|c| c.key.clone()).collect();
    let labels_differ = a.y != b.y || a.y_true != b.y_true;
    let trainer_changes = field_changes(&a.trainer, &b.trainer).unwrap_or_default();
    let trainer_differences: Vec<String> = trainer_changes.iter().map(|c| c.key.clone()).collect();
    let limit_differences = differing_fields(&a.direction, &b.direction, "direction", "direction.");
    let sets_differ = !(only_in_a.is_empty() && only_in_b.is_empty());
    Report {
        rtol,
        common_only,
        diverged: first.is_some()
            || common == 0
            || !config_differences.is_empty()
            || labels_differ
            || !limit_differences.is_empty()
            || (sets_differ && !common_only),
        config_differences,
        limit_differences,
        labels_differ,
        bit_identical: bits && common > 0 && trainer_differences.is_empty(),
        trainer_differences,
        trainer_changes,
        common_steps: common,
        only_in_a,
        only_in_b,
        first_divergence: first.as_ref().map(|f| f.0),
        first_quantity: first.map(|f| f.1),
        max_rel_dev,
        max_group_mass_dev: max_group,
        config_changes,
        max_rel_dev_step,
        first_differs,
        max_group_mass_dev_step,
        group_mass_first_differs,
    }
}

/// The rows of one table of [`Report`]'s text: the differing entries sorted by their
/// deviation (largest first, ties by name) with the step of their largest deviation and
/// their first difference, then the entries that agree exactly folded into one line.
fn table(
    out: &mut String,
    (title, column, w): (&str, &str, usize),
    devs: &BTreeMap<String, f64>,
    max_step: &BTreeMap<String, Option<u64>>,
    first: &BTreeMap<String, Option<u64>>,
) {
    let step = |m: &BTreeMap<String, Option<u64>>, k: &str| {
        m.get(k)
            .copied()
            .flatten()
            .map_or("-".to_string(), |s| s.to_string())
    };
    let mut differ: Vec<(&String, f64)> = devs
        .iter()
        .filter(|(_, v)| **v != 0.0)
        .map(|(k, v)| (k, *v))
        .collect();
    // largest first (a deviation is never NaN: `rel`, `abs_dev`), ties by name
    differ.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| x.0.cmp(y.0)));
    let agree: Vec<&str> = devs
        .iter()
        .filter(|(_, v)| **v == 0.0)
        .map(|(k, _)| k.as_str())
        .collect();
    if !differ.is_empty() {
        *out += &format!(
            "\n  {title:<w$}{column:>13}{:>10}{:>15}\n",
            "at step", "first differs"
        );
        for (k, v) in differ {
            *out += &format!(
                "  {k:<w$}{v:>13.3e}{:>10}{:>15}\n",
                step(max_step, k),
                step(first, k)
            );
        }
    } else {
        *out += "\n";
    }
    if !agree.is_empty() {
        *out += &format!(
            "  {} {} exactly: {}\n",
            agree.len(),
            match (agree.len(), title) {
                (1, "quantity") => "quantity agrees",
                (_, "quantity") => "quantities agree",
                (1, _) => "group mass agrees",
                _ => "group masses agree",
            },
            agree.join(", ")
        );
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
            let changes = described(&self.config_differences, &self.config_changes);
            out += &format!("  configs differ in: {changes}\n");
        }
        if !self.limit_differences.is_empty() {
            out += &format!(
                "  direction summaries differ in: {}\n",
                self.limit_differences.join(", ")
            );
        }
        if self.labels_differ {
            out += "  training labels differ\n";
        }
        if !self.trainer_differences.is_empty() {
            let changes = described(&self.trainer_differences, &self.trainer_changes);
            out += &format!("  trainers differ in: {changes}\n");
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
        table(
            &mut out,
            ("quantity", "max rel dev", w),
            &self.max_rel_dev,
            &self.max_rel_dev_step,
            &self.first_differs,
        );
        table(
            &mut out,
            ("group mass", "max abs dev", w),
            &self.max_group_mass_dev,
            &self.max_group_mass_dev_step,
            &self.group_mass_first_differs,
        );
        f.write_str(&out)
    }
}
