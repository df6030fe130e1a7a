//! The heat-map figure of a two-axis grid: one panel per quantity (mean over seeds) and
//! the majority regime; on (d, ||mu||) grids the iso-SNR lines and the fitted regime
//! boundaries, on (eta, rho) grids the label-noise boundary.

use super::Spec;
use super::cell::Regime;
use super::reduce::Summary;
use crate::report::heatmap::{Curve, HeatMap, Panel};

/// Panels (metric, title) of a (d, ||mu||) grid.
const DMU_PANELS: [(&str, &str); 5] = [
    ("train_loss", "train loss"),
    ("test_loss", "test loss"),
    ("test_accuracy", "test accuracy"),
    ("eq9_ratio", "Eq. (9) ratio: clean / noisy cumulative S"),
    (
        "eq10_ratio",
        "Eq. (10) ratio: class +1 / -1 (clean), / step 0",
    ),
];

/// Panels of an (eta, rho) grid.
const NOISE_PANELS: [(&str, &str); 5] = [
    ("clean_R", "clean samples selecting R"),
    ("test_accuracy", "test accuracy"),
    ("train_accuracy", "train accuracy"),
    ("noisy_W_opposite", "noisy samples selecting W_-Y*"),
    (
        "same_class_ratio_pos",
        "clean(+1) / noisy(obs. -1) cumulative S",
    ),
];

/// Generic panels.
const PANELS: [(&str, &str); 5] = [
    ("test_accuracy", "test accuracy"),
    ("train_accuracy", "train accuracy"),
    ("test_loss", "test loss"),
    ("clean_R", "clean samples selecting R"),
    ("eq9_ratio", "Eq. (9) ratio"),
];

const REGIME_COLORS: [&str; 3] = ["#1a9850", "#d73027", "#4575b4"];

/// The figure, for grids with exactly two axes (`None` otherwise). Rows are the first
/// axis, columns the second, except on (d, ||mu||) grids, drawn as in the paper with
/// ||mu|| across and d up.
pub fn figure(spec: &Spec, summary: &Summary) -> Option<HeatMap> {
    if spec.axes.len() != 2 {
        return None;
    }
    let keys: Vec<&str> = spec.axes.iter().map(|a| a.key.as_str()).collect();
    let dmu = keys.contains(&"d") && keys.contains(&"mu_norm");
    let noise = keys.contains(&"eta") && keys.contains(&"rho");
    // (row axis, column axis) indices
    let (iy, ix) = if dmu {
        (
            keys.iter().position(|k| *k == "d")?,
            keys.iter().position(|k| *k == "mu_norm")?,
        )
    } else if noise {
        (
            keys.iter().position(|k| *k == "rho")?,
            keys.iter().position(|k| *k == "eta")?,
        )
    } else {
        (0, 1)
    };
    let (xs, ys) = (&spec.axes[ix].values, &spec.axes[iy].values);
    let by_xy: std::collections::BTreeMap<(u64, u64), &super::reduce::Point> = summary
        .points
        .iter()
        .map(|p| ((p.point[ix].to_bits(), p.point[iy].to_bits()), p))
        .collect();
    let at = |x: f64, y: f64| by_xy.get(&(x.to_bits(), y.to_bits())).copied();
    let grid = |f: &dyn Fn(&super::reduce::Point) -> Option<f64>| -> Vec<Option<f64>> {
        ys.iter()
            .flat_map(|&y| xs.iter().map(move |&x| (x, y)))
            .map(|(x, y)| at(x, y).and_then(f))
            .collect()
    };
    let table = if dmu {
        DMU_PANELS
    } else if noise {
        NOISE_PANELS
    } else {
        PANELS
    };
    let mut panels: Vec<Panel> = table
        .iter()
        .map(|(metric, title)| Panel {
            title: format!("{title} (mean)"),
            values: grid(&|p| p.stats.get(*metric).map(|s| s.mean)),
            categories: None,
        })
        .collect();
    panels.push(Panel {
        title: format!(
            "regime (most seeds; harmful: test < {})",
            summary.harmful_below
        ),
        values: grid(&|p| {
            p.majority()
                .map(|r| Regime::ALL.iter().position(|x| *x == r).unwrap_or(0) as f64)
        }),
        categories: Some(
            Regime::ALL
                .iter()
                .zip(REGIME_COLORS)
                .map(|(r, c)| (r.name().replace('_', " "), c))
                .collect(),
        ),
    });
    let mut curves = Vec::new();
    if dmu {
        let sigma = spec.base.sigma;
        let n = spec.base.n_train as f64;
        let (d_lo, d_hi) = (ys[0].min(ys[ys.len() - 1]), ys[0].max(ys[ys.len() - 1]));
        let ds: Vec<f64> = (0..=60)
            .map(|k| d_lo * 0.9 + (d_hi * 1.1 - d_lo * 0.9) * k as f64 / 60.0)
            .collect();
        let curve = |f: &dyn Fn(f64) -> f64| ds.iter().map(|&d| (f(d), d)).collect();
        for (k, snr) in [0.1, 0.25, 0.5, 1.0, 2.0].into_iter().enumerate() {
            curves.push(Curve {
                label: "iso-SNR lines, SNR = ||mu|| / (sigma sqrt d) as labelled".into(),
                points: curve(&|d| snr * sigma * d.sqrt()),
                color: "#c8c8c8",
                dashed: true,
                tag: Some(format!("{snr}")),
                in_legend: k == 0,
            });
        }
        for (fit, color) in summary.fits.iter().zip(["#ff00ff", "#ff9900"]) {
            let c = fit.c;
            let points = if fit.curve.contains("1/4") {
                curve(&|d| c * core_math::pow(d, 0.25))
            } else {
                curve(&|d| c * (d / n).sqrt())
            };
            curves.push(Curve {
                label: format!(
                    "{}, c = {:.3}: agrees on {:.1}% of {} points ({} on that side)",
                    fit.curve,
                    c,
                    100.0 * fit.agreement,
                    fit.points,
                    fit.positives
                ),
                points,
                color,
                dashed: false,
                tag: None,
                in_legend: true,
            });
        }
    }
    if noise {
        let step = if xs.len() > 1 { xs[1] - xs[0] } else { 0.0 };
        let points: Vec<(f64, f64)> = summary
            .label_noise
            .iter()
            .filter_map(|b| b.mean_curve_boundary.map(|e| (e - step / 2.0, b.rho)))
            .collect();
        curves.push(Curve {
            label: "boundary: clean samples stop selecting R (mean over seeds < 0.5)".into(),
            points,
            color: "#ff00ff",
            dashed: false,
            tag: None,
            in_legend: true,
        });
    }
    Some(HeatMap {
        title: format!(
            "tokensel grid `{}`: {} seed(s), {} steps ({}-mode)",
            summary.name,
            spec.seeds.len(),
            spec.base.steps,
            format!("{:?}", spec.base.mode).to_lowercase()
        ),
        x: (spec.axes[ix].key.clone(), xs.clone()),
        y: (spec.axes[iy].key.clone(), ys.clone()),
        panels,
        curves,
    })
}
