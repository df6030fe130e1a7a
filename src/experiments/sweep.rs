//! Label-noise sweep: train at several eta and seeds, report accuracy and token
//! selection per run, summarise the seed spread per eta (SPEC section 5: the paper's
//! abrupt benign -> harmful change between eta = 0.70 and 0.75).

use serde::{Deserialize, Serialize};

use crate::arith::F64;
use crate::config::Config;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::io::trajectory::SelectionShare;
use crate::report::plot::{COLORS, Chart, Series};
use crate::train::Trainer;

/// One run of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Label-noise rate.
    #[serde(with = "crate::io::nonfinite")]
    pub eta: f64,
    /// Seed.
    pub seed: u64,
    /// Final training accuracy (observed labels).
    #[serde(with = "crate::io::nonfinite")]
    pub train_accuracy: f64,
    /// Final test accuracy (true labels).
    #[serde(with = "crate::io::nonfinite")]
    pub test_accuracy: f64,
    /// Share of clean samples whose top token is decided in each group, ties, or is
    /// undecided.
    pub clean_selection: Option<SelectionShare>,
    /// Share of noisy samples whose top token is decided in each group, ties, or is
    /// undecided.
    pub noisy_selection: Option<SelectionShare>,
}

/// Seed spread at one eta.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Label-noise rate.
    #[serde(with = "crate::io::nonfinite")]
    pub eta: f64,
    /// Mean test accuracy over seeds.
    #[serde(with = "crate::io::nonfinite")]
    pub test_mean: f64,
    /// Lowest test accuracy over seeds.
    #[serde(with = "crate::io::nonfinite")]
    pub test_min: f64,
    /// Highest test accuracy over seeds.
    #[serde(with = "crate::io::nonfinite")]
    pub test_max: f64,
    /// Mean train accuracy over seeds.
    #[serde(with = "crate::io::nonfinite")]
    pub train_mean: f64,
    /// Mean fraction of clean samples selecting a relevant token.
    #[serde(with = "crate::io::nonfinite")]
    pub clean_r_mean: f64,
}

/// The sweep's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Every run, eta-major.
    pub runs: Vec<Run>,
    /// Per eta.
    pub points: Vec<Point>,
    /// The base config (eta and seed varied).
    pub config: Config,
}

/// Most runs (etas times seeds) one sweep may hold.
pub const MAX_RUNS: usize = crate::experiments::grid::MAX_RUNS;

/// Check, before any work, that the sweep has an eta and a seed, at most [`MAX_RUNS`]
/// runs (a size over a limit), that `base` is valid at every eta and seed, and that
/// each run's trainer and trajectory fit their memory limits.
pub fn check(base: &Config, etas: &[f64], seeds: &[u64]) -> Result<()> {
    crate::model::caps::require(base, "sweep", &[crate::model::caps::Capability::Theory])?;
    if etas.is_empty() || seeds.is_empty() {
        return Err(Error::argument(
            "--etas/--seeds",
            "need at least one eta and one seed",
        ));
    }
    let runs = etas.len() as u128 * seeds.len() as u128;
    if runs > MAX_RUNS as u128 {
        return Err(Error::TooLarge {
            field: "etas/seeds".into(),
            reason: format!(
                "{} etas x {} seeds = {runs} runs, more than the limit of {MAX_RUNS}",
                etas.len(),
                seeds.len()
            ),
        });
    }
    for &seed in seeds {
        crate::seeds::check("--seeds", seed).map_err(|e| match e {
            Error::InvalidConfig { field, reason } => Error::argument(field, reason),
            e => e,
        })?;
    }
    for &eta in etas {
        Config {
            eta,
            ..base.clone()
        }
        .validate()?;
    }
    // the sizes do not depend on eta or the seed
    crate::train::check_memory(base, crate::arith::Kind::F64, 53, base.method)?;
    crate::train::record::check_size(base)
}

/// Run `base` at every eta and seed. `progress(done, total)` after each run.
pub fn sweep(
    base: &Config,
    etas: &[f64],
    seeds: &[u64],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Report> {
    check(base, etas, seeds)?;
    let total = etas.len() * seeds.len();
    let mut runs = Vec::with_capacity(total);
    for &eta in etas {
        for &seed in seeds {
            let cfg = Config {
                eta,
                seed,
                ..base.clone()
            };
            cfg.validate()?;
            let data = Dataset::generate(&cfg);
            let t = Trainer::run(&cfg, &data, F64, &mut |_| {})?;
            let end = t.last();
            runs.push(Run {
                eta,
                seed,
                train_accuracy: end.train_accuracy,
                test_accuracy: end.test_accuracy,
                clean_selection: end.selection.clean,
                noisy_selection: end.selection.noisy,
            });
            progress(runs.len(), total);
        }
    }
    let points = etas
        .iter()
        .map(|&eta| {
            let rs: Vec<&Run> = runs.iter().filter(|r| r.eta == eta).collect();
            let n = rs.len() as f64;
            let test: Vec<f64> = rs.iter().map(|r| r.test_accuracy).collect();
            Point {
                eta,
                test_mean: test.iter().sum::<f64>() / n,
                test_min: test.iter().copied().fold(f64::INFINITY, f64::min),
                test_max: test.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                train_mean: rs.iter().map(|r| r.train_accuracy).sum::<f64>() / n,
                clean_r_mean: rs
                    .iter()
                    .map(|r| r.clean_selection.map_or(0.0, |p| p.r))
                    .sum::<f64>()
                    / n,
            }
        })
        .collect();
    Ok(Report {
        runs,
        points,
        config: base.clone(),
    })
}

impl Report {
    /// The output set of `sweep --out`: `sweep.json`, `sweep.csv` and `sweep.svg`
    /// (`io::publish` writes them as one set).
    pub fn files(&self) -> Vec<(String, Vec<u8>)> {
        let json = serde_json::to_string_pretty(self).expect("report serialises");
        vec![
            ("sweep.json".into(), json.into_bytes()),
            ("sweep.csv".into(), self.to_csv().into_bytes()),
            ("sweep.svg".into(), self.chart().to_svg().into_bytes()),
        ]
    }

    /// One CSV row per run.
    pub fn to_csv(&self) -> String {
        let mut head = vec!["eta", "seed", "train_accuracy", "test_accuracy"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        for set in ["clean", "noisy"] {
            head.extend(SelectionShare::NAMES.map(|name| format!("{set}_{name}")));
        }
        let mut out = head.join(",") + "\n";
        for r in &self.runs {
            let cells = |p: Option<SelectionShare>| {
                p.map_or(",,,,,".to_string(), |p| {
                    p.to_array().map(crate::io::nonfinite::text).join(",")
                })
            };
            out += &format!(
                "{},{},{},{},{},{}\n",
                r.eta,
                r.seed,
                r.train_accuracy,
                r.test_accuracy,
                cells(r.clean_selection),
                cells(r.noisy_selection)
            );
        }
        out
    }

    /// Accuracy against eta: test mean, min and max over seeds, train mean, and the
    /// fraction of clean samples selecting R.
    pub fn chart(&self) -> Chart {
        let pts = |f: &dyn Fn(&Point) -> f64| self.points.iter().map(|p| (p.eta, f(p))).collect();
        let (lo, hi) = self
            .points
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
                (a.min(p.eta), b.max(p.eta))
            });
        Chart {
            title: format!(
                "label-noise sweep: d = {}, ||mu|| = {}, n = {}, {} seed(s)",
                self.config.d,
                self.config.mu_norm,
                self.config.n_train,
                self.runs.len() / self.points.len().max(1)
            ),
            x_label: "label noise eta".into(),
            y_label: "accuracy / fraction".into(),
            x_range: if hi > lo {
                (lo, hi)
            } else {
                (lo - 0.05, lo + 0.05)
            },
            y_range: (0.0, 1.0),
            log_x: false,
            series: vec![
                Series {
                    label: "test (mean)".into(),
                    points: pts(&|p| p.test_mean),
                    color: COLORS[0],
                    dashed: false,
                    dash: None,
                },
                Series {
                    label: "test (min)".into(),
                    points: pts(&|p| p.test_min),
                    color: COLORS[0],
                    dashed: true,
                    dash: None,
                },
                Series {
                    label: "test (max)".into(),
                    points: pts(&|p| p.test_max),
                    color: COLORS[7],
                    dashed: true,
                    dash: None,
                },
                Series {
                    label: "train (mean)".into(),
                    points: pts(&|p| p.train_mean),
                    color: COLORS[1],
                    dashed: false,
                    dash: None,
                },
                Series {
                    label: "clean on R".into(),
                    points: pts(&|p| p.clean_r_mean),
                    color: COLORS[2],
                    dashed: false,
                    dash: None,
                },
            ],
            markers: vec![],
        }
    }
}

impl std::fmt::Display for Report {
    /// The readable table of `tokensel sweep`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.config;
        let mut seeds: Vec<u64> = self.runs.iter().map(|r| r.seed).collect();
        seeds.sort_unstable();
        seeds.dedup();
        let mut out = format!(
            "tokensel sweep: d = {}, ||mu|| = {}, rho = {}, n = {}, {} steps{}, seeds {:?}\n\n  {:>7}{:>12}{:>10}{:>10}{:>12}{:>12}\n",
            c.d,
            c.mu_norm,
            c.rho,
            c.n_train,
            c.steps,
            match c.optimizer.is_default() {
                true => String::new(),
                false => format!(" of {}", c.optimizer.name()),
            },
            seeds,
            "eta",
            "test mean",
            "min",
            "max",
            "train mean",
            "clean on R"
        );
        for p in &self.points {
            out += &format!(
                "  {:>7}{:>12.4}{:>10.4}{:>10.4}{:>12.4}{:>12.4}\n",
                p.eta, p.test_mean, p.test_min, p.test_max, p.train_mean, p.clean_r_mean
            );
        }
        f.write_str(&out)
    }
}
