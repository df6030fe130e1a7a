//! The merge: cell files reduced over seeds, CSV/JSON tables, the regime boundaries
//! fitted on (d, ||mu||) grids and the label-noise boundary on (eta, rho) grids.
//! Everything here is a function of the spec and the cell files only, so the merge is
//! byte-identical however the cells were split into shards.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cell::{Metrics, Regime};
use super::{Cell, CellFile, Outcome, Spec};

/// The scalar metrics reported per cell, by name.
pub const METRICS: [&str; 16] = [
    "train_accuracy",
    "test_accuracy",
    "train_loss",
    "test_loss",
    "clean_R",
    "noisy_R",
    "noisy_W_opposite",
    "noisy_I",
    "clean_tie",
    "noisy_tie",
    "eq9_ratio",
    "eq10_ratio",
    "same_class_ratio_pos",
    "same_class_ratio_neg",
    "fit_step",
    "generalisation_step",
];

/// One metric of a run, `None` where undefined (no noisy sample, labels never fitted).
pub fn metric(m: &Metrics, name: &str) -> Option<f64> {
    match name {
        "train_accuracy" => Some(m.train_accuracy),
        "test_accuracy" => Some(m.test_accuracy),
        "train_loss" => Some(m.train_loss),
        "test_loss" => Some(m.test_loss),
        "clean_R" => m.clean_selection.map(|p| p.r),
        "noisy_R" => m.noisy_selection.map(|p| p.r),
        "noisy_W_opposite" => m.noisy_selection.map(|p| p.w_opposite),
        "noisy_I" => m.noisy_selection.map(|p| p.i),
        "clean_tie" => m.clean_selection.map(|p| p.tie),
        "noisy_tie" => m.noisy_selection.map(|p| p.tie),
        "eq9_ratio" => m.eq9_ratio,
        "eq10_ratio" => m.eq10_ratio,
        "same_class_ratio_pos" => m.same_class_ratio_pos,
        "same_class_ratio_neg" => m.same_class_ratio_neg,
        "fit_step" => m.fit_step.map(|s| s as f64),
        "generalisation_step" => Some(m.generalisation_step as f64),
        _ => None,
    }
}

/// Mean, min and max over the seeds where a metric is defined.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    /// Mean.
    #[serde(with = "crate::io::nonfinite")]
    pub mean: f64,
    /// Smallest.
    #[serde(with = "crate::io::nonfinite")]
    pub min: f64,
    /// Largest.
    #[serde(with = "crate::io::nonfinite")]
    pub max: f64,
    /// Seeds where it is defined.
    pub n: usize,
}

/// The mean, min and max of `values`; a NaN among them makes all three NaN (`f64::min`
/// and `f64::max` would drop it and report the other seeds' range as the whole).
fn stat(values: &[f64]) -> Option<Stat> {
    let nan = values.iter().any(|v| v.is_nan());
    let or_nan = |v: f64| if nan { f64::NAN } else { v };
    (!values.is_empty()).then(|| Stat {
        mean: values.iter().sum::<f64>() / values.len() as f64,
        min: or_nan(values.iter().copied().fold(f64::INFINITY, f64::min)),
        max: or_nan(values.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
        n: values.len(),
    })
}

/// One grid point reduced over its seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Axis values.
    #[serde(with = "crate::io::nonfinite::vec")]
    pub point: Vec<f64>,
    /// Seeds that ran to the end.
    pub seeds_ok: usize,
    /// Seeds that failed, with the reason.
    pub failed: Vec<(u64, String)>,
    /// Seeds with no cell file yet.
    pub missing: Vec<u64>,
    /// Each metric over the seeds.
    pub stats: BTreeMap<String, Stat>,
    /// Fraction of the seeds that ran in each regime.
    #[serde(with = "crate::io::nonfinite::map")]
    pub regimes: BTreeMap<String, f64>,
}

impl Point {
    /// The regime of most seeds (ties: report order), `None` if no seed ran.
    pub fn majority(&self) -> Option<Regime> {
        Regime::ALL
            .into_iter()
            .filter(|r| self.regimes[r.name()] > 0.0)
            .max_by(|a, b| {
                self.regimes[a.name()]
                    .total_cmp(&self.regimes[b.name()])
                    .then(b.cmp(a))
            })
    }
}

/// A fitted boundary ||mu|| = c x(d) between two sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    /// The curve, e.g. `||mu|| = c1 d^(1/4)`.
    pub curve: String,
    /// The fitted constant.
    #[serde(with = "crate::io::nonfinite")]
    pub c: f64,
    /// Grid points on the predicted side / all grid points that ran.
    #[serde(with = "crate::io::nonfinite")]
    pub agreement: f64,
    /// Points misclassified by the curve.
    pub errors: usize,
    /// Points used.
    pub points: usize,
    /// Points on the named side (harmful, resp. not overfitting).
    pub positives: usize,
}

/// Label-noise boundary at one rho.
///
/// A seed's boundary is the first eta of the axis at which fewer than half its clean
/// samples select R. A seed without one is either **beyond the range** (every run of
/// the axis ran, and clean-on-R stays >= 0.5 throughout) or **undetermined** (a run
/// before any boundary failed or is missing, or has no clean sample). Beyond-range seeds
/// count as a boundary above the axis's last eta in the comparisons across rho
/// ([`Summary::label_noise_shift_fraction`], [`Summary::label_noise_monotone_fraction`]);
/// an undetermined seed counts as a failure there; and either makes the mean over seeds
/// unknown ([`NoiseBoundary::mean`] is `None`, so a claim on it fails as missing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoiseBoundary {
    /// rho.
    #[serde(with = "crate::io::nonfinite")]
    pub rho: f64,
    /// Per seed: the first eta at which fewer than half the clean samples select R
    /// (`None`: no boundary in the range, see `beyond_range` and `undetermined`).
    pub per_seed: Vec<(u64, Option<f64>)>,
    /// Seeds whose clean-on-R stays >= 0.5 over the whole eta range (every run present).
    pub beyond_range: Vec<u64>,
    /// Seeds with no boundary because a run before it failed, is missing or has no clean
    /// sample.
    pub undetermined: Vec<u64>,
    /// Mean of the seeds' boundaries; `None` unless every seed has a boundary in the
    /// range (a seed beyond the range or undetermined leaves the mean unknown).
    #[serde(with = "crate::io::nonfinite::option")]
    pub mean: Option<f64>,
    /// Seeds whose clean-on-R fraction falls from >= 0.9 x its plateau to <= 0.1 within
    /// 0.05 of eta, over all seeds.
    #[serde(with = "crate::io::nonfinite")]
    pub abrupt_fraction: f64,
    /// The mean-over-seeds curve's boundary (first eta where mean clean-on-R < 0.5).
    #[serde(with = "crate::io::nonfinite::option")]
    pub mean_curve_boundary: Option<f64>,
}

/// The merged grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Grid name.
    pub name: String,
    /// Axis keys, outermost first.
    pub axes: Vec<String>,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Test accuracy below which an overfitting run counts as harmful.
    #[serde(with = "crate::io::nonfinite")]
    pub harmful_below: f64,
    /// Runs that ran / failed / are missing.
    pub runs_ok: usize,
    /// Failed runs.
    pub runs_failed: usize,
    /// Missing runs.
    pub runs_missing: usize,
    /// Every grid point.
    pub points: Vec<Point>,
    /// On (d, ||mu||) grids: the harmful/benign boundary ||mu|| = c1 d^(1/4) and the
    /// benign/not-overfitting boundary ||mu|| = c2 sqrt(d / n).
    pub fits: Vec<Fit>,
    /// On grids with axes eta and rho: the boundary per rho.
    pub label_noise: Vec<NoiseBoundary>,
    /// On grids with axes eta and rho: the fraction of all seeds whose boundary does not
    /// move to higher eta as rho decreases (a seed beyond the eta range at some rho
    /// counts there as a boundary above the range; an undetermined one as a failure).
    #[serde(with = "crate::io::nonfinite::option")]
    pub label_noise_monotone_fraction: Option<f64>,
    /// On grids with axes eta and rho: the fraction of all seeds whose boundary at the
    /// smallest rho lies strictly below the one at the largest rho (beyond the range:
    /// above every eta of it; undetermined: a failure).
    #[serde(with = "crate::io::nonfinite::option")]
    pub label_noise_shift_fraction: Option<f64>,
}

/// Reduce the cell files (`files` in grid order, as [`super::collect`] returns them).
pub fn summarise(spec: &Spec, files: &[(Cell, Option<CellFile>)]) -> Summary {
    let per_point = spec.seeds.len();
    let points: Vec<Point> = files
        .chunks(per_point)
        .map(|group| {
            let mut ok: Vec<&Metrics> = Vec::new();
            let mut failed = Vec::new();
            let mut missing = Vec::new();
            for (cell, file) in group {
                match file.as_ref().map(|f| &f.outcome) {
                    Some(Outcome::Ok(m)) => ok.push(m),
                    Some(Outcome::Failed(why)) => failed.push((cell.seed, why.clone())),
                    None => missing.push(cell.seed),
                }
            }
            let stats = METRICS
                .iter()
                .filter_map(|name| {
                    let v: Vec<f64> = ok.iter().filter_map(|m| metric(m, name)).collect();
                    stat(&v).map(|s| (name.to_string(), s))
                })
                .collect();
            let regimes = Regime::ALL
                .iter()
                .map(|r| {
                    let n = ok.iter().filter(|m| m.regime == *r).count();
                    (r.name().to_string(), n as f64 / ok.len().max(1) as f64)
                })
                .collect();
            Point {
                point: group[0].0.point.clone(),
                seeds_ok: ok.len(),
                failed,
                missing,
                stats,
                regimes,
            }
        })
        .collect();
    let runs_ok = points.iter().map(|p| p.seeds_ok).sum();
    let runs_failed = points.iter().map(|p| p.failed.len()).sum();
    let runs_missing = points.iter().map(|p| p.missing.len()).sum();
    let axes: Vec<String> = spec.axes.iter().map(|a| a.key.clone()).collect();
    let fits = fit_boundaries(spec, &points);
    let label_noise = noise_boundaries(spec, files);
    let label_noise_monotone_fraction = (!label_noise.is_empty()).then(|| {
        let monotone = (0..spec.seeds.len())
            .filter(|&k| {
                // boundaries in increasing rho (an undetermined seed fails)
                let mut by_rho: Vec<(f64, Option<f64>)> =
                    label_noise.iter().map(|b| (b.rho, b.ordered(k))).collect();
                by_rho.sort_by(|a, b| a.0.total_cmp(&b.0));
                by_rho.iter().all(|b| b.1.is_some()) && by_rho.windows(2).all(|w| w[0].1 <= w[1].1)
            })
            .count();
        monotone as f64 / spec.seeds.len() as f64
    });
    let label_noise_shift_fraction = (label_noise.len() >= 2).then(|| {
        let lo = label_noise
            .iter()
            .min_by(|a, b| a.rho.total_cmp(&b.rho))
            .expect("two rhos");
        let hi = label_noise
            .iter()
            .max_by(|a, b| a.rho.total_cmp(&b.rho))
            .expect("two rhos");
        let shifted = (0..spec.seeds.len())
            .filter(|&k| match (lo.ordered(k), hi.ordered(k)) {
                (Some(a), Some(b)) => a < b,
                _ => false, // undetermined: a failure
            })
            .count();
        shifted as f64 / spec.seeds.len() as f64
    });
    Summary {
        name: spec.name.clone(),
        axes,
        seeds: spec.seeds.clone(),
        harmful_below: super::cell::HARMFUL_BELOW,
        runs_ok,
        runs_failed,
        runs_missing,
        points,
        fits,
        label_noise,
        label_noise_monotone_fraction,
        label_noise_shift_fraction,
    }
}

/// Index of the axes `a` and `b` when the grid has exactly these two.
fn two_axes(spec: &Spec, a: &str, b: &str) -> Option<(usize, usize)> {
    let keys: Vec<&str> = spec.axes.iter().map(|x| x.key.as_str()).collect();
    if keys.len() != 2 {
        return None;
    }
    Some((
        keys.iter().position(|k| *k == a)?,
        keys.iter().position(|k| *k == b)?,
    ))
}

/// Best constant c for "below the curve ||mu|| = c x" (below = true side): scans the
/// points' own ratios ||mu|| / x as candidates, the midpoint between neighbours.
fn fit_threshold(samples: &[(f64, bool)], curve: String, below: bool) -> Option<Fit> {
    if samples.is_empty() || samples.iter().all(|s| s.1) || samples.iter().all(|s| !s.1) {
        return None;
    }
    let mut r: Vec<f64> = samples.iter().map(|s| s.0).collect();
    r.sort_by(f64::total_cmp);
    r.dedup();
    let mut cands = vec![r[0] * 0.5];
    cands.extend(r.windows(2).map(|w| 0.5 * (w[0] + w[1])));
    cands.push(r[r.len() - 1] * 1.5);
    let errors = |c: f64| {
        samples
            .iter()
            .filter(|(x, below)| (*x < c) != *below)
            .count()
    };
    let (c, e) = cands
        .iter()
        .map(|&c| (c, errors(c)))
        .min_by(|a, b| a.1.cmp(&b.1).then(a.0.total_cmp(&b.0)))
        .expect("candidates");
    Some(Fit {
        curve,
        c,
        agreement: 1.0 - e as f64 / samples.len() as f64,
        errors: e,
        points: samples.len(),
        positives: samples.iter().filter(|s| s.1 == below).count(),
    })
}

/// c1 and c2 on a (d, mu_norm) grid, from each point's majority regime.
fn fit_boundaries(spec: &Spec, points: &[Point]) -> Vec<Fit> {
    let Some((id, im)) = two_axes(spec, "d", "mu_norm") else {
        return Vec::new();
    };
    let n = spec.base.n_train as f64;
    let ran: Vec<(&Point, Regime)> = points
        .iter()
        .filter_map(|p| p.majority().map(|r| (p, r)))
        .collect();
    let harmful: Vec<(f64, bool)> = ran
        .iter()
        .map(|(p, r)| {
            // d^(1/4) by CORE-MATH (correctly rounded): the fitted c1 is an output
            let ratio = p.point[im] / core_math::pow(p.point[id], 0.25);
            (ratio, *r == Regime::Harmful)
        })
        .collect();
    let overfit: Vec<(f64, bool)> = ran
        .iter()
        .map(|(p, r)| {
            (
                p.point[im] / (p.point[id] / n).sqrt(),
                *r != Regime::NotOverfitting,
            )
        })
        .collect();
    [
        fit_threshold(&harmful, "||mu|| = c1 d^(1/4) (harmful below)".into(), true),
        fit_threshold(
            &overfit,
            "||mu|| = c2 sqrt(d/n) (not overfitting above)".into(),
            false,
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

impl NoiseBoundary {
    /// Seed `k`'s boundary for comparisons: its eta, +infinity beyond the range, `None`
    /// when undetermined.
    fn ordered(&self, k: usize) -> Option<f64> {
        let (seed, at) = self.per_seed[k];
        match at {
            Some(eta) => Some(eta),
            None if self.beyond_range.contains(&seed) => Some(f64::INFINITY),
            None => None,
        }
    }
}

/// Clean-on-R fraction against eta (`None` where the run is missing or failed, or has
/// no clean sample).
type Curve = Vec<(f64, Option<f64>)>;

/// Where a seed's clean-on-R curve first falls below 0.5.
#[derive(Debug, Clone, Copy, PartialEq)]
enum SeedBoundary {
    /// At this eta (every run before it present).
    At(f64),
    /// Nowhere in the range (every run present).
    Beyond,
    /// A run before any fall is missing: unknown.
    Undetermined,
}

/// The boundary of one seed's curve (in eta order).
fn seed_boundary(curve: &[(f64, Option<f64>)]) -> SeedBoundary {
    for &(eta, v) in curve {
        match v {
            None => return SeedBoundary::Undetermined,
            Some(v) if v < 0.5 => return SeedBoundary::At(eta),
            Some(_) => {}
        }
    }
    SeedBoundary::Beyond
}

/// Per rho and seed, the eta where clean samples stop selecting R.
fn noise_boundaries(spec: &Spec, files: &[(Cell, Option<CellFile>)]) -> Vec<NoiseBoundary> {
    let Some((ie, ir)) = two_axes(spec, "eta", "rho") else {
        return Vec::new();
    };
    let etas = &spec.axes[ie].values;
    // clean-on-R of each run by (eta, rho, seed): one pass over the files
    let by_run: BTreeMap<(u64, u64, u64), f64> = files
        .iter()
        .filter_map(|(c, f)| match f.as_ref().map(|f| &f.outcome) {
            Some(Outcome::Ok(m)) => m
                .clean_selection
                .map(|p| ((c.point[ie].to_bits(), c.point[ir].to_bits(), c.seed), p.r)),
            _ => None,
        })
        .collect();
    let clean_r = |rho: f64, seed: u64| -> Curve {
        etas.iter()
            .map(|&eta| {
                let v = by_run.get(&(eta.to_bits(), rho.to_bits(), seed)).copied();
                (eta, v)
            })
            .collect()
    };
    spec.axes[ir]
        .values
        .iter()
        .map(|&rho| {
            let curves: Vec<(u64, Curve)> =
                spec.seeds.iter().map(|&s| (s, clean_r(rho, s))).collect();
            let bounds: Vec<(u64, SeedBoundary)> =
                curves.iter().map(|(s, c)| (*s, seed_boundary(c))).collect();
            let per_seed: Vec<(u64, Option<f64>)> = bounds
                .iter()
                .map(|(s, b)| match b {
                    SeedBoundary::At(eta) => (*s, Some(*eta)),
                    _ => (*s, None),
                })
                .collect();
            let seeds_with = |want: SeedBoundary| -> Vec<u64> {
                bounds
                    .iter()
                    .filter(|(_, b)| *b == want)
                    .map(|(s, _)| *s)
                    .collect()
            };
            let found: Vec<f64> = per_seed.iter().filter_map(|x| x.1).collect();
            let abrupt = curves.iter().filter(|(_, c)| abrupt_drop(c)).count();
            let mean_curve: Vec<(f64, f64)> = etas
                .iter()
                .enumerate()
                .filter_map(|(k, &eta)| {
                    let v: Vec<f64> = curves.iter().filter_map(|(_, c)| c[k].1).collect();
                    (!v.is_empty()).then(|| (eta, v.iter().sum::<f64>() / v.len() as f64))
                })
                .collect();
            NoiseBoundary {
                rho,
                // the mean of all seeds' boundaries: unknown unless each seed has one
                mean: (!found.is_empty() && found.len() == per_seed.len())
                    .then(|| found.iter().sum::<f64>() / found.len() as f64),
                per_seed,
                beyond_range: seeds_with(SeedBoundary::Beyond),
                undetermined: seeds_with(SeedBoundary::Undetermined),
                abrupt_fraction: abrupt as f64 / spec.seeds.len().max(1) as f64,
                mean_curve_boundary: mean_curve.iter().find(|(_, v)| *v < 0.5).map(|x| x.0),
            }
        })
        .collect()
}

/// Whether a clean-on-R curve over eta falls from >= 0.9 x its plateau (the largest
/// value before the fall) to <= 0.1 within an eta span of 0.05.
fn abrupt_drop(curve: &[(f64, Option<f64>)]) -> bool {
    let pts: Vec<(f64, f64)> = curve
        .iter()
        .filter_map(|(e, v)| v.map(|v| (*e, v)))
        .collect();
    let Some(k_low) = pts.iter().position(|(_, v)| *v <= 0.1) else {
        return false;
    };
    let plateau = pts[..k_low].iter().map(|p| p.1).fold(0.0, f64::max);
    if plateau < 0.5 {
        return false; // no plateau before the fall: nothing to drop from
    }
    let high = pts[..k_low].iter().rev().find(|(_, v)| *v >= 0.9 * plateau);
    high.is_some_and(|(e, _)| pts[k_low].0 - e <= 0.05 + 1e-9)
}

/// CSV number: shortest round-trip text, empty for `None`.
fn num(v: Option<f64>) -> String {
    v.map_or(String::new(), crate::io::nonfinite::text)
}

impl Summary {
    /// `summary.csv`: one row per grid point, mean/min/max of every metric over seeds
    /// and the regime fractions.
    pub fn to_csv(&self) -> String {
        let mut head: Vec<String> = self.axes.clone();
        head.extend(["seeds_ok", "seeds_failed", "seeds_missing"].map(String::from));
        for m in METRICS {
            head.extend(["mean", "min", "max"].map(|s| format!("{m}_{s}")));
        }
        head.extend(Regime::ALL.map(|r| format!("fraction_{}", r.name())));
        let mut out = head.join(",") + "\n";
        for p in &self.points {
            let mut row: Vec<String> = p.point.iter().map(|v| v.to_string()).collect();
            row.extend([p.seeds_ok, p.failed.len(), p.missing.len()].map(|v| v.to_string()));
            for m in METRICS {
                let s = p.stats.get(m);
                row.extend([s.map(|s| s.mean), s.map(|s| s.min), s.map(|s| s.max)].map(num));
            }
            row.extend(Regime::ALL.map(|r| p.regimes[r.name()].to_string()));
            out += &(row.join(",") + "\n");
        }
        out
    }
}

/// `grid.csv`: one row per cell and seed (status `ok`, `failed` or `missing`).
pub fn runs_csv(spec: &Spec, files: &[(Cell, Option<CellFile>)]) -> String {
    let mut head: Vec<String> = spec.axes.iter().map(|a| a.key.clone()).collect();
    head.extend(["seed", "status"].map(String::from));
    head.extend(METRICS.map(String::from));
    head.push("regime".into());
    let mut out = head.join(",") + "\n";
    for (cell, file) in files {
        let mut row: Vec<String> = cell.point.iter().map(|v| v.to_string()).collect();
        row.push(cell.seed.to_string());
        match file.as_ref().map(|f| &f.outcome) {
            Some(Outcome::Ok(m)) => {
                row.push("ok".into());
                row.extend(METRICS.map(|name| num(metric(m, name))));
                row.push(m.regime.name().into());
            }
            other => {
                row.push(if other.is_some() { "failed" } else { "missing" }.into());
                row.extend(METRICS.map(|_| String::new()));
                row.push(String::new());
            }
        }
        out += &(row.join(",") + "\n");
    }
    out
}

impl std::fmt::Display for Summary {
    /// The readable summary: counts, failures, fits and label-noise boundaries.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "tokensel grid `{}`: axes {}, {} seed(s), {} grid points; runs ok {}, failed {}, missing {}",
            self.name,
            self.axes.join(" x "),
            self.seeds.len(),
            self.points.len(),
            self.runs_ok,
            self.runs_failed,
            self.runs_missing
        )?;
        for p in &self.points {
            for (seed, why) in &p.failed {
                writeln!(f, "  FAILED {:?} seed {seed}: {why}", p.point)?;
            }
        }
        let counts = Regime::ALL.map(|r| {
            self.points
                .iter()
                .filter(|p| p.majority() == Some(r))
                .count()
        });
        writeln!(
            f,
            "  majority regime (harmful: all labels fitted, test accuracy < {}): benign {}, harmful {}, not overfitting {} points",
            self.harmful_below, counts[0], counts[1], counts[2]
        )?;
        for fit in &self.fits {
            writeln!(
                f,
                "  fit {}: c = {:.4}, agrees on {}/{} points ({:.1}%; {} points on that side)",
                fit.curve,
                fit.c,
                fit.points - fit.errors,
                fit.points,
                100.0 * fit.agreement,
                fit.positives
            )?;
        }
        if !self.label_noise.is_empty() {
            writeln!(
                f,
                "\n  {:>7}{:>22}{:>18}{:>16}{:>16}{:>14}{:>14}",
                "rho",
                "boundary (mean curve)",
                "seeds' mean",
                "seeds' range",
                "abrupt seeds",
                "beyond range",
                "undetermined"
            )?;
            for b in &self.label_noise {
                let found: Vec<f64> = b.per_seed.iter().filter_map(|x| x.1).collect();
                let range = if found.is_empty() {
                    "-".to_string()
                } else {
                    format!(
                        "{}-{}",
                        found.iter().copied().fold(f64::INFINITY, f64::min),
                        found.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                    )
                };
                writeln!(
                    f,
                    "  {:>7}{:>22}{:>18}{:>16}{:>15.0}%{:>14}{:>14}",
                    b.rho,
                    b.mean_curve_boundary
                        .map_or("none".into(), |v| v.to_string()),
                    // unknown when a seed has no boundary in the range
                    b.mean.map_or("unknown".into(), |v| format!("{v:.4}")),
                    range,
                    100.0 * b.abrupt_fraction,
                    b.beyond_range.len(),
                    b.undetermined.len()
                )?;
            }
            if let Some(m) = self.label_noise_monotone_fraction {
                writeln!(
                    f,
                    "  seeds whose boundary moves to lower (or equal) eta as rho decreases: {:.0}%",
                    100.0 * m
                )?;
            }
            if let Some(m) = self.label_noise_shift_fraction {
                writeln!(
                    f,
                    "  seeds whose boundary at the smallest rho lies strictly below the one at the largest: {:.0}%",
                    100.0 * m
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::cell::{Counts, Sums};
    use super::*;
    use crate::config::Config;
    use crate::io::trajectory::SelectionShare;

    /// The best threshold by hand (samples flagged "below the curve"). Separable
    /// samples: c = 2.5 (the midpoint between the two sides), no error. With one sample
    /// on the wrong side: the fewest errors (1) at c = 1.5 and c = 3.5, the tie going to
    /// the smaller. `below` only names the side counted as positives. One-sided samples
    /// give no fit. Catches a flipped comparison, a wrong tie
    /// rule and errors counted against the wrong side.
    /// A NaN among the seeds' values is in every statistic, not dropped by min/max.
    #[test]
    fn stat_keeps_a_nan() {
        let s = stat(&[1.0, f64::NAN, 0.5]).unwrap();
        assert!(s.mean.is_nan() && s.min.is_nan() && s.max.is_nan());
        let s = stat(&[1.0, 0.5]).unwrap();
        assert_eq!((s.mean, s.min, s.max, s.n), (0.75, 0.5, 1.0, 2));
        assert!(stat(&[]).is_none());
    }

    #[test]
    fn fit_threshold_by_hand() {
        let sep = [(1.0, true), (2.0, true), (3.0, false), (4.0, false)];
        let f = fit_threshold(&sep, "c".into(), true).unwrap();
        assert_eq!((f.c, f.errors, f.points, f.positives), (2.5, 0, 4, 2));
        assert_eq!(f.agreement, 1.0);
        let one_off = [
            (1.0, true),
            (2.0, false),
            (3.0, true),
            (4.0, false),
            (5.0, false),
        ];
        let f = fit_threshold(&one_off, "c".into(), true).unwrap();
        assert_eq!((f.c, f.errors), (1.5, 1));
        assert!((f.agreement - 0.8).abs() < 1e-15);
        // a sample's flag says "below the curve"; `below` names the side counted as
        // positives: 1 sample below, 2 above
        let uneven = [(1.0, true), (2.0, false), (3.0, false)];
        let f = fit_threshold(&uneven, "c".into(), true).unwrap();
        assert_eq!((f.c, f.errors, f.positives), (1.5, 0, 1));
        let f = fit_threshold(&uneven, "c".into(), false).unwrap();
        assert_eq!((f.c, f.errors, f.positives), (1.5, 0, 2));
        assert!(fit_threshold(&[(1.0, true), (2.0, true)], "c".into(), true).is_none());
        assert!(fit_threshold(&[], "c".into(), true).is_none());
    }

    /// Abrupt: from the plateau (1.0, kept >= 0.9 up to eta 0.65) to <= 0.1 at 0.675,
    /// a span of 0.025. Gradual: 1.0 at 0.6 down to 0.05 at 0.725 (0.125). No plateau
    /// (never >= 0.5), and never falling to 0.1, are not abrupt. A missing run inside
    /// the fall is skipped: the fall is measured between the runs that exist.
    #[test]
    fn abrupt_drop_by_hand() {
        let c = |v: &[Option<f64>]| -> Vec<(f64, Option<f64>)> {
            v.iter()
                .enumerate()
                .map(|(k, v)| (0.6 + 0.025 * k as f64, *v))
                .collect()
        };
        assert!(abrupt_drop(&c(&[
            Some(1.0),
            Some(1.0),
            Some(0.95),
            Some(0.05),
            Some(0.0)
        ])));
        assert!(!abrupt_drop(&c(&[
            Some(1.0),
            Some(0.8),
            Some(0.6),
            Some(0.4),
            Some(0.2),
            Some(0.05)
        ])));
        assert!(!abrupt_drop(&c(&[Some(0.3), Some(0.05)])));
        assert!(!abrupt_drop(&c(&[Some(1.0), Some(0.9), Some(0.5)])));
        // 0.6 -> (missing) -> 0.65: a span of 0.05, abrupt; 0.6 -> 0.675 is not
        assert!(abrupt_drop(&c(&[Some(1.0), None, Some(0.0)])));
        assert!(!abrupt_drop(&c(&[Some(1.0), None, None, Some(0.0)])));
    }

    fn metrics(clean_r: f64) -> Metrics {
        Metrics {
            train_accuracy: 1.0,
            test_accuracy: 1.0,
            train_loss: 0.5,
            test_loss: 0.5,
            clean_selection: Some(SelectionShare {
                r: clean_r,
                i: 1.0 - clean_r,
                ..SelectionShare::default()
            }),
            noisy_selection: None,
            eq9_ratio: None,
            eq10_ratio: None,
            same_class_ratio_pos: None,
            same_class_ratio_neg: None,
            fit_step: Some(0),
            generalisation_step: 0,
            regime: Regime::Benign,
            counts: Counts::default(),
            sums: Sums::default(),
        }
    }

    /// A 3 x 2 (eta x rho) grid over seeds 0, 1, 2 with hand-set clean-on-R values
    /// (`None`: the run is missing). rho = 0.05: seed 0 falls at 0.65 (abruptly), seed 1
    /// at 0.7, seed 2 never (beyond the range). rho = 0.1: seed 0 falls at 0.7, seed 1
    /// misses its 0.65 run before falling (undetermined), seed 2 never. So no mean
    /// exists at either rho (a seed without a boundary leaves it unknown, where the old
    /// reduction averaged the seeds that had one), only seed 0 shifts strictly left as rho
    /// decreases (seed 1 is undetermined, seed 2 beyond the range at both: not strictly
    /// below), and seeds 0 and 2 are monotone.
    #[test]
    fn noise_boundaries_by_hand() {
        let mut base = Config {
            d: 4,
            n_train: 4,
            n_test: 4,
            ..Config::default()
        };
        base.steps = 1;
        let spec = Spec {
            format: super::super::GRID_FORMAT.into(),
            name: "hand".into(),
            base,
            axes: vec![
                super::super::Axis {
                    key: "eta".into(),
                    values: vec![0.6, 0.65, 0.7],
                },
                super::super::Axis {
                    key: "rho".into(),
                    values: vec![0.05, 0.1],
                },
            ],
            seeds: vec![0, 1, 2],
        };
        // clean-on-R by [rho][seed][eta]
        let table: [[[Option<f64>; 3]; 3]; 2] = [
            [
                [Some(1.0), Some(0.05), Some(0.0)],
                [Some(1.0), Some(1.0), Some(0.4)],
                [Some(1.0), Some(0.9), Some(0.8)],
            ],
            [
                [Some(1.0), Some(1.0), Some(0.1)],
                [Some(1.0), None, Some(0.3)],
                [Some(1.0), Some(1.0), Some(1.0)],
            ],
        ];
        let files: Vec<(Cell, Option<CellFile>)> = spec
            .cells()
            .unwrap()
            .into_iter()
            .map(|cell| {
                let e = [0.6, 0.65, 0.7].iter().position(|v| *v == cell.point[0]);
                let r = [0.05, 0.1].iter().position(|v| *v == cell.point[1]);
                let v = table[r.unwrap()][cell.seed as usize][e.unwrap()];
                let file = v.map(|v| CellFile {
                    format: super::super::CELL_FORMAT.into(),
                    point: cell.point.clone(),
                    seed: cell.seed,
                    config: cell.config.clone(),
                    outcome: Outcome::Ok(Box::new(metrics(v))),
                });
                (cell, file)
            })
            .collect();
        let s = summarise(&spec, &files);
        let [lo, hi] = [&s.label_noise[0], &s.label_noise[1]];
        assert_eq!((lo.rho, hi.rho), (0.05, 0.1));
        assert_eq!(
            lo.per_seed,
            vec![(0, Some(0.65)), (1, Some(0.7)), (2, None)]
        );
        assert_eq!(
            (lo.beyond_range.clone(), lo.undetermined.clone()),
            (vec![2], vec![])
        );
        assert_eq!(hi.per_seed, vec![(0, Some(0.7)), (1, None), (2, None)]);
        assert_eq!(
            (hi.beyond_range.clone(), hi.undetermined.clone()),
            (vec![2], vec![1])
        );
        assert_eq!((lo.mean, hi.mean), (None, None));
        // only seed 0 drops abruptly: 1.0 -> 0.05 (0.6 -> 0.65) at rho = 0.05 and 1.0 ->
        // 0.1 (0.65 -> 0.7) at rho = 0.1; seed 1 never falls to 0.1, seed 2 never falls
        assert!((lo.abrupt_fraction - 1.0 / 3.0).abs() < 1e-15);
        assert!((hi.abrupt_fraction - 1.0 / 3.0).abs() < 1e-15);
        // mean curve at rho = 0.05: 1.0, 0.65, 0.4 -> first below 0.5 at 0.7
        assert_eq!(lo.mean_curve_boundary, Some(0.7));
        assert!((s.label_noise_shift_fraction.unwrap() - 1.0 / 3.0).abs() < 1e-15);
        assert!((s.label_noise_monotone_fraction.unwrap() - 2.0 / 3.0).abs() < 1e-15);
        // every seed with a boundary: the mean is theirs
        let only_01 = Spec {
            seeds: vec![0, 1],
            ..spec.clone()
        };
        let files_01: Vec<_> = files.iter().filter(|(c, _)| c.seed < 2).cloned().collect();
        let s = summarise(&only_01, &files_01);
        assert_eq!(s.label_noise[0].mean, Some((0.65 + 0.7) / 2.0));
        assert_eq!(s.label_noise[1].mean, None);
    }
}
