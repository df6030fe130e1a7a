//! Minimal, dependency-free SVG line charts (deterministic text output: logarithms and
//! powers of ten by CORE-MATH, so the same SVG bytes on every platform).

use std::fmt::Write;

use core_math::log10;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points (x, y); non-finite points are skipped.
    pub points: Vec<(f64, f64)>,
    /// SVG colour.
    pub color: &'static str,
    /// Dashed line.
    pub dashed: bool,
    /// An SVG dash pattern of its own (`stroke-dasharray`), drawn in place of `dashed`'s.
    pub dash: Option<&'static str>,
}

/// A chart: axes ranges, labels and series.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// x-axis label.
    pub x_label: String,
    /// y-axis label.
    pub y_label: String,
    /// x range.
    pub x_range: (f64, f64),
    /// y range.
    pub y_range: (f64, f64),
    /// Logarithmic x axis (base 10).
    pub log_x: bool,
    /// The lines.
    pub series: Vec<Series>,
    /// Vertical marker lines (x, label).
    pub markers: Vec<(f64, String)>,
}

const W: f64 = 720.0;
const H: f64 = 440.0;
const L: f64 = 70.0;
const R: f64 = 180.0;
const T: f64 = 40.0;
const B: f64 = 55.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl Chart {
    fn px(&self, x: f64) -> f64 {
        let (a, b) = self.x_range;
        let t = if self.log_x {
            (log10(x) - log10(a)) / (log10(b) - log10(a))
        } else {
            (x - a) / (b - a)
        };
        L + t * (W - L - R)
    }

    fn py(&self, y: f64) -> f64 {
        let (a, b) = self.y_range;
        H - B - (y - a) / (b - a) * (H - T - B)
    }

    /// The chart as an SVG document.
    pub fn to_svg(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        self.write_body(&mut s);
        s + "</svg>\n"
    }

    /// The chart's elements (title, frame, ticks, markers, labels, lines and legend) in a
    /// W x H box at the origin, without the document around them.
    fn write_body(&self, s: &mut String) {
        let (x, size) = title_place(&self.title);
        let _ = writeln!(
            s,
            r#"<text x="{x}" y="22" text-anchor="middle" font-size="{size}">{}</text>"#,
            esc(&self.title)
        );
        let (x0, x1, y0, y1) = (L, W - R, T, H - B);
        let _ = writeln!(
            s,
            r#"<rect x="{x0}" y="{y0}" width="{}" height="{}" fill="none" stroke="black"/>"#,
            x1 - x0,
            y1 - y0
        );
        // y ticks: 5 intervals
        for k in 0..=5 {
            let v = self.y_range.0 + (self.y_range.1 - self.y_range.0) * k as f64 / 5.0;
            let y = self.py(v);
            let _ = writeln!(
                s,
                r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                x0 - 6.0,
                y + 4.0,
                fmt_tick(v, (self.y_range.1 - self.y_range.0) / 5.0)
            );
        }
        // x ticks: decades on a log axis, 5 intervals otherwise
        let ticks: Vec<f64> = if self.log_x {
            let (a, b) = (
                log10(self.x_range.0).ceil() as i32,
                log10(self.x_range.1).floor() as i32,
            );
            (a..=b).map(|e| core_math::exp10(e as f64)).collect()
        } else {
            (0..=5)
                .map(|k| self.x_range.0 + (self.x_range.1 - self.x_range.0) * k as f64 / 5.0)
                .collect()
        };
        let x_step = match self.log_x {
            true => 0.0,
            false => (self.x_range.1 - self.x_range.0) / 5.0,
        };
        for v in ticks {
            let x = self.px(v);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{y1}" stroke="#eee"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
                y1 + 16.0,
                fmt_tick(v, if x_step > 0.0 { x_step } else { v })
            );
        }
        for (v, label) in &self.markers {
            let x = self.px(*v);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{y1}" stroke="#c00" stroke-dasharray="4 3"/><text x="{:.1}" y="{}" fill="#c00">{}</text>"##,
                x + 3.0,
                y0 + 14.0,
                esc(label)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            (x0 + x1) / 2.0,
            H - 12.0,
            esc(&self.x_label)
        );
        let _ = writeln!(
            s,
            r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
            (y0 + y1) / 2.0,
            (y0 + y1) / 2.0,
            esc(&self.y_label)
        );
        let mut legend_lines = 0;
        for ser in &self.series {
            let pts: Vec<String> = ser
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite() && (!self.log_x || *x > 0.0))
                .map(|(x, y)| format!("{:.2},{:.2}", self.px(*x), self.py(*y)))
                .collect();
            let dash = match (ser.dash, ser.dashed) {
                (Some(pattern), _) => format!(r#" stroke-dasharray="{pattern}""#),
                (None, true) => r#" stroke-dasharray="6 4""#.to_string(),
                (None, false) => String::new(),
            };
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{}" stroke-width="2"{dash} points="{}"/>"#,
                ser.color,
                pts.join(" ")
            );
            if ser.label.is_empty() {
                continue; // drawn without a legend entry
            }
            let ly = y0 + 10.0 + 18.0 * legend_lines as f64;
            let mut lines = ser.label.lines();
            let _ = writeln!(
                s,
                r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
                x1 + 10.0,
                x1 + 34.0,
                ser.color,
                x1 + 40.0,
                ly + 4.0,
                esc(lines.next().unwrap_or(""))
            );
            legend_lines += 1;
            // further lines of a label: smaller, under its first
            for line in lines {
                let _ = writeln!(
                    s,
                    r#"<text x="{}" y="{}" font-size="11">{}</text>"#,
                    x1 + 40.0,
                    y0 + 14.0 + 18.0 * legend_lines as f64 - 3.0,
                    esc(line)
                );
                legend_lines += 1;
            }
        }
    }
}

/// Charts in a grid (row by row) under one title.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Title above the charts.
    pub title: String,
    /// The charts, each drawn as by [`Chart::to_svg`] with its own title.
    pub charts: Vec<Chart>,
    /// Charts per row.
    pub columns: usize,
}

/// Height of a figure's title band.
const FIGURE_TOP: f64 = 36.0;

impl Figure {
    /// The figure as an SVG document.
    pub fn to_svg(&self) -> String {
        let cols = self.columns.clamp(1, self.charts.len().max(1));
        let rows = self.charts.len().div_ceil(cols);
        let (w, h) = (cols as f64 * W, FIGURE_TOP + rows as f64 * H);
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="24" text-anchor="middle" font-size="16">{}</text>"#,
            w / 2.0,
            esc(&self.title)
        );
        for (k, chart) in self.charts.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<g transform="translate({} {})">"#,
                (k % cols) as f64 * W,
                FIGURE_TOP + (k / cols) as f64 * H
            );
            chart.write_body(&mut s);
            let _ = writeln!(s, "</g>");
        }
        s + "</svg>\n"
    }
}

/// Where a chart's title is centred and its font size: over the plot area at 14 px when
/// it fits there, else over the whole chart, at a smaller size when it does not fit
/// either (its width estimated at 0.55 em a character: DejaVu Sans's average is about
/// 0.5 em).
fn title_place(title: &str) -> (f64, f64) {
    let width = |size: f64| 0.55 * size * title.chars().count() as f64;
    let margin = 10.0;
    if width(14.0) <= W - R - 2.0 * margin {
        ((L + W - R) / 2.0, 14.0)
    } else if width(14.0) <= W - 2.0 * margin {
        (W / 2.0, 14.0)
    } else {
        // at least 8 px; a longer title is cut by the frame
        let size = (14.0 * (W - 2.0 * margin) / width(14.0)).max(8.0);
        (W / 2.0, (size * 10.0).floor() / 10.0)
    }
}

/// A tick label for `v` on an axis whose ticks are `step` apart, with as many digits as
/// the step needs (ticks 1.000e-3 and 1.040e-3 read as such, not both as "1e-3").
fn fmt_tick(v: f64, step: f64) -> String {
    let mag = |x: f64| {
        if x > 0.0 && x.is_finite() {
            log10(x).floor() as i32
        } else {
            0
        }
    };
    // the digits the step's own mantissa needs past its leading one (a step of 1.2
    // needs one: ticks -1.2, -2.4 are not "-1", "-2"), at most three
    let extra = {
        let m = step.abs() / core_math::exp10(mag(step.abs()) as f64);
        (0..3)
            .find(|k| {
                let s = m * core_math::exp10(*k as f64);
                (s - s.round()).abs() <= 1e-9 * s
            })
            .unwrap_or(3)
    };
    let trim = |s: String| match s.contains('.') {
        true => s.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => s,
    };
    if v != 0.0 && (v.abs() >= 1e4 || v.abs() < 1e-2) {
        let digits = (mag(v.abs()) - mag(step.abs()) + extra).clamp(0, 15) as usize;
        let s = format!("{v:.digits$e}");
        match s.split_once('e') {
            Some((m, e)) => format!("{}e{e}", trim(m.to_string())),
            None => s,
        }
    } else {
        let digits = (extra - mag(step.abs())).clamp(0, 15) as usize;
        trim(format!("{v:.digits$}"))
    }
}

/// A fixed palette.
pub const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
];

/// The paper's Figure 3 style: mean attention mass per token group over steps (log
/// axis), clean samples solid, noisy samples dashed.
pub fn attention_chart(t: &crate::io::trajectory::Trajectory) -> Chart {
    use crate::config::Group;
    let mut series = Vec::new();
    for (k, g) in Group::ALL.into_iter().enumerate() {
        for noisy in [false, true] {
            let points = t
                .checkpoints
                .iter()
                .filter(|c| c.step > 0)
                .filter_map(|c| {
                    let by = if noisy {
                        c.attention.noisy
                    } else {
                        c.attention.clean
                    };
                    by.map(|p| (c.step as f64, p.get(g)))
                })
                .collect::<Vec<_>>();
            if !points.is_empty() {
                series.push(Series {
                    label: format!("{} {}", if noisy { "noisy" } else { "clean" }, g.name()),
                    points,
                    color: COLORS[k],
                    dashed: noisy,
                    dash: None,
                });
            }
        }
    }
    let last = t.last().step.max(10) as f64;
    mass_chart(
        format!(
            "attention per token group ({}, {} {} bits, d = {}, ||mu|| = {}, seed {})",
            model_name(&t.config),
            t.trainer.kind,
            t.trainer.prec_bits,
            t.config.d,
            t.config.mu_norm,
            t.config.seed
        ),
        last,
        series,
    )
}

/// A chart of mean attention masses in [0, 1] over steps 1..=`last` on a log axis.
fn mass_chart(title: String, last: f64, series: Vec<Series>) -> Chart {
    Chart {
        title,
        x_label: "step".into(),
        y_label: "mean attention mass".into(),
        x_range: (1.0, last),
        y_range: (0.0, 1.0),
        log_x: true,
        series,
        markers: vec![],
    }
}

/// Dash patterns of overlaid trajectories, one per input with its colour: solid,
/// dashed, dotted, dash-dot, then longer dashes.
pub const DASHES: [&str; 8] = [
    "none",
    "8 4",
    "2 3",
    "8 3 2 3",
    "12 4",
    "4 4",
    "12 3 2 3 2 3",
    "1 5",
];

/// Two or more trajectories of the same model overlaid (`plot A B ...`): one chart per
/// token group of the mean attention mass over clean samples (and a second row over
/// noisy samples where the runs have some), steps > 0 on a log axis, one line per
/// trajectory in its own colour and dash pattern. The legend (in the first chart) names
/// each by `labels[k]`.
pub fn overlay_figure(ts: &[crate::io::trajectory::Trajectory], labels: &[String]) -> Figure {
    use crate::config::Group;
    let last = ts.iter().map(|t| t.last().step).max().unwrap_or(10).max(10) as f64;
    let mut charts = Vec::new();
    for noisy in [false, true] {
        let has = |t: &crate::io::trajectory::Trajectory| {
            t.checkpoints.iter().any(|c| match noisy {
                true => c.attention.noisy.is_some(),
                false => c.attention.clean.is_some(),
            })
        };
        if !ts.iter().any(has) {
            continue;
        }
        for g in Group::ALL {
            let series = ts
                .iter()
                .zip(labels)
                .enumerate()
                .map(|(k, (t, label))| Series {
                    label: if charts.is_empty() {
                        label.clone()
                    } else {
                        String::new()
                    },
                    points: t
                        .checkpoints
                        .iter()
                        .filter(|c| c.step > 0)
                        .filter_map(|c| {
                            let by = match noisy {
                                true => c.attention.noisy,
                                false => c.attention.clean,
                            };
                            by.map(|p| (c.step as f64, p.get(g)))
                        })
                        .collect(),
                    color: COLORS[k % COLORS.len()],
                    dashed: false,
                    dash: Some(DASHES[k % DASHES.len()]),
                })
                .collect();
            charts.push(mass_chart(
                format!(
                    "{} samples: attention on {}",
                    if noisy { "noisy" } else { "clean" },
                    g.name()
                ),
                last,
                series,
            ));
        }
    }
    Figure {
        title: format!(
            "{} trajectories overlaid ({}): mean attention per token group",
            ts.len(),
            // the model's name where every input names the same one (the legend gives
            // the keys that differ)
            match ts
                .iter()
                .all(|t| model_name(&t.config) == model_name(&ts[0].config))
            {
                true => model_name(&ts[0].config),
                false => format!(
                    "{}, models as in the legend",
                    ts[0].config.model.kind.name()
                ),
            }
        ),
        charts,
        columns: Group::ALL.len(),
    }
}

/// The model a config trains, as figure titles name it: "binary token selection",
/// "multiclass, K = ..." or "one-layer encoder, m = ...", followed by the step rule where it is not constant-step GD
/// (", normalized-gd").
pub fn model_name(cfg: &crate::config::Config) -> String {
    let model = match cfg.model.kind {
        crate::config::ModelKind::Multiclass => format!("multiclass, K = {}", cfg.model.classes),
        crate::config::ModelKind::TokenSelection => "binary token selection".into(),
        crate::config::ModelKind::Encoder => format!(
            "one-layer encoder, m = {}{}",
            cfg.model.mlp_width(cfg.d),
            if cfg.model.residual == Some(false) {
                ", no residual"
            } else {
                ""
            }
        ),
    };
    match cfg.optimizer.is_default() {
        true => model,
        false => format!("{model}, {}", cfg.optimizer.name()),
    }
}

/// Largest K drawn with one test-accuracy line per class (one colour each); above it
/// the panel draws the minimum, mean and maximum across classes.
pub const CLASS_LINES: usize = 8;

/// A trajectory's drawing: the attention chart ([`attention_chart`]) for the binary
/// model, the K-class figure ([`multiclass_figure`]) for the multi-class one.
pub fn trajectory_svg(t: &crate::io::trajectory::Trajectory) -> String {
    match t.config.model.is_multiclass() {
        true => multiclass_figure(t).to_svg(),
        false => attention_chart(t).to_svg(),
    }
}

/// A K-class trajectory in four panels under a title naming the model ("multiclass, K
/// = ..."), the arithmetic and the setting: the attention per token group
/// ([`attention_chart`]: `W_same` the true class's weak token, `W_opposite` the other
/// classes'), where the top token of the clean and of the noisy training samples lies
/// (the shares of R, W_true, W_observed, W_other, I, tie and undecided, as the run
/// report's "top token, by class" table), and the test accuracy per true class (one line
/// per class up to [`CLASS_LINES`] classes, else the minimum, mean and maximum across
/// the classes that have a test sample) with the accuracy on the whole test set ("all
/// classes"). The shares' and accuracies' legend labels give their value: "R = 0.5" for
/// a line constant at 0.5, "R → 1" for one that ends at 1. Steps > 0 on a log axis, as
/// in [`attention_chart`]; checkpoints without per-class metrics are left out.
pub fn multiclass_figure(t: &crate::io::trajectory::Trajectory) -> Figure {
    use crate::io::trajectory::ClassSelection;
    let cfg = &t.config;
    let k = cfg.model.classes;
    let last = t.last().step.max(10) as f64;
    let steps = || {
        t.checkpoints
            .iter()
            .filter(|c| c.step > 0)
            .filter_map(|c| c.classes.as_ref().map(|m| (c.step as f64, m)))
    };
    let chart = |title: String, y_label: &str, series: Vec<Series>| Chart {
        title,
        x_label: "step".into(),
        y_label: y_label.into(),
        x_range: (1.0, last),
        y_range: (0.0, 1.0),
        log_x: true,
        series,
        markers: vec![],
    };
    let mut attention = attention_chart(t);
    attention.title = "attention per token group (W_opposite: other classes' weak tokens)".into();
    let n_noisy = t.y.iter().zip(&t.y_true).filter(|(y, y0)| y != y0).count();
    let selection = |noisy: bool| {
        let series = ClassSelection::NAMES
            .iter()
            .enumerate()
            .filter_map(|(g, name)| {
                let points: Vec<(f64, f64)> = steps()
                    .filter_map(|(x, m)| {
                        let by = if noisy {
                            m.selection.noisy
                        } else {
                            m.selection.clean
                        };
                        by.map(|s| (x, s.to_array()[g]))
                    })
                    .collect();
                (!points.is_empty()).then(|| Series {
                    label: value_label(name, &points),
                    points,
                    color: COLORS[g],
                    dashed: noisy,
                    dash: None,
                })
            })
            .collect();
        let (set, n) = match noisy {
            true => ("noisy", n_noisy),
            false => ("clean", cfg.n_train - n_noisy),
        };
        chart(
            format!("top token of the {n} {set} training samples"),
            "share of samples",
            series,
        )
    };
    let per_class: Vec<Vec<(f64, f64)>> = (0..k)
        .map(|c| {
            steps()
                .filter_map(|(x, m)| m.test_accuracy.get(c).copied().flatten().map(|a| (x, a)))
                .collect()
        })
        .collect();
    let mut accuracy: Vec<Series> = if k <= CLASS_LINES {
        per_class
            .into_iter()
            .enumerate()
            .map(|(c, points)| Series {
                label: value_label(&format!("class {c}"), &points),
                points,
                color: COLORS[c],
                dashed: false,
                dash: None,
            })
            .collect()
    } else {
        // the classes with a test sample, at every step
        let across = |pick: fn(&[f64]) -> f64| -> Vec<(f64, f64)> {
            steps()
                .filter_map(|(x, m)| {
                    let v: Vec<f64> = m.test_accuracy.iter().flatten().copied().collect();
                    (!v.is_empty()).then(|| (x, pick(&v)))
                })
                .collect()
        };
        type Across = fn(&[f64]) -> f64;
        let parts: [(&str, Across); 3] = [
            ("min", |v| v.iter().copied().fold(f64::INFINITY, f64::min)),
            ("mean", |v| v.iter().sum::<f64>() / v.len() as f64),
            ("max", |v| {
                v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            }),
        ];
        parts
            .into_iter()
            .enumerate()
            .map(|(j, (label, pick))| {
                let points = across(pick);
                Series {
                    label: value_label(label, &points),
                    points,
                    color: COLORS[j],
                    dashed: false,
                    dash: None,
                }
            })
            .collect()
    };
    let all: Vec<(f64, f64)> = t
        .checkpoints
        .iter()
        .filter(|c| c.step > 0)
        .map(|c| (c.step as f64, c.test_accuracy))
        .collect();
    accuracy.push(Series {
        label: value_label("all classes", &all),
        points: all,
        color: "#000",
        dashed: true,
        dash: None,
    });
    let accuracy = chart(
        match k <= CLASS_LINES {
            true => "test accuracy per true class".into(),
            false => {
                // the classes with a test sample (the test set is the same at every step)
                let present = t
                    .last()
                    .classes
                    .as_ref()
                    .map_or(0, |m| m.test_accuracy.iter().flatten().count());
                match present == k {
                    true => format!("test accuracy: min, mean, max over the {k} true classes"),
                    false => format!(
                        "test accuracy: min, mean, max over the {present} of {k} classes tested"
                    ),
                }
            }
        },
        "test accuracy",
        accuracy,
    );
    Figure {
        title: format!(
            "{}: {} {} bits, d = {}, ||mu|| = {}, n = {} ({} noisy), seed {}",
            model_name(cfg),
            t.trainer.kind,
            t.trainer.prec_bits,
            cfg.d,
            cfg.mu_norm,
            cfg.n_train,
            n_noisy,
            cfg.seed
        ),
        charts: vec![attention, accuracy, selection(false), selection(true)],
        columns: 2,
    }
}

/// A share's legend label with its value, so that lines drawn over each other (shares
/// constant at 0, two at 0.5) are told apart: "name = v" for a line constant at v,
/// "name → v" for one that ends at v (its finite points; v to three decimals).
fn value_label(name: &str, points: &[(f64, f64)]) -> String {
    let ys: Vec<f64> = points
        .iter()
        .map(|&(_, y)| y)
        .filter(|y| y.is_finite())
        .collect();
    let short = |v: f64| {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    match (ys.first(), ys.last()) {
        (Some(&a), Some(&b)) if ys.iter().all(|&y| y == a) => format!("{name} = {}", short(b)),
        (_, Some(&b)) => format!("{name} → {}", short(b)),
        _ => name.to_string(),
    }
}

/// f64-vs-twin relative error over steps (log10, log step axis) from a compare report,
/// with the first tolerance failure marked.
pub fn error_chart(r: &crate::analysis::compare::Report) -> Chart {
    let mut series = Vec::new();
    for (k, q) in crate::analysis::compare::COMPARED.into_iter().enumerate() {
        let points = r
            .checkpoints
            .iter()
            .filter(|c| c.step > 0)
            .map(|c| (c.step as f64, log10(c.rel_err[&q].max(1e-18))))
            .collect();
        series.push(Series {
            label: q.name().to_string(),
            points,
            color: COLORS[k],
            dashed: false,
            dash: None,
        });
    }
    let tol = Series {
        label: format!("tolerance {:e}", r.tolerance),
        points: vec![
            (1.0, log10(r.tolerance)),
            (r.steps.max(10) as f64, log10(r.tolerance)),
        ],
        color: "#000",
        dashed: true,
        dash: None,
    };
    series.push(tol);
    let markers = match (r.saturation.step, r.saturation.score_gap) {
        (Some(s), Some(gap)) if s > 0 => vec![(s as f64, format!("step {s}, gap {gap:.1}"))],
        _ => vec![],
    };
    Chart {
        title: format!(
            "f64 ({:?}) vs {}-bit twin: relative error",
            r.formulation, r.prec_bits
        ),
        x_label: "step".into(),
        y_label: "log10 relative error".into(),
        x_range: (1.0, r.steps.max(10) as f64),
        y_range: (-18.0, 1.0),
        log_x: true,
        series,
        markers,
    }
}

/// The direction of one or more runs (`[direction]` trajectories of the same data and
/// pattern, e.g. the f64 run and the twin) against the attention SVM: (a) log10(1 -
/// corr(tau)) and (b) the normalised margin times ||theta_mm|| (tends to 1), against
/// step on log axes, one curve per trajectory, labelled by its arithmetic and step
/// rule. `None` when a trajectory has no direction records.
pub fn direction_figure(ts: &[crate::io::trajectory::Trajectory]) -> Option<Figure> {
    let limits: Vec<_> = ts
        .iter()
        .map(|t| t.direction.as_ref())
        .collect::<Option<_>>()?;
    let last = ts.iter().map(|t| t.last().step).max().unwrap_or(10).max(10) as f64;
    let label = |t: &crate::io::trajectory::Trajectory| {
        let arith = match t.trainer.kind {
            crate::arith::Kind::F64 => "f64".to_string(),
            crate::arith::Kind::F32 => "f32".to_string(),
            crate::arith::Kind::Predictor => "f64 predictor".to_string(),
            k => format!("{k} {}", t.trainer.prec_bits),
        };
        // short enough for the legend's column
        let o = &t.config.optimizer;
        let rule = match (o.kind, o.eps) {
            (crate::config::OptimizerKind::Gd, _) => "GD".to_string(),
            // eps said for every NGD run (0 too): an overlay of runs with different
            // eps labels both
            (crate::config::OptimizerKind::NormalizedGd, 0.0) => "NGD eps 0".to_string(),
            (crate::config::OptimizerKind::NormalizedGd, e) => format!("NGD eps {e:e}"),
            (crate::config::OptimizerKind::Adam, _) => "Adam".to_string(),
            (crate::config::OptimizerKind::Adamw, _) => "AdamW".to_string(),
        };
        let rule = match o.batch {
            Some(b) => format!("{rule} batch {b}"),
            None => rule,
        };
        format!("{arith}, {rule}")
    };
    let series = |pick: &dyn Fn(&crate::io::trajectory::DirectionPoint, f64) -> Option<f64>| {
        ts.iter()
            .zip(&limits)
            .enumerate()
            .map(|(k, (t, l))| Series {
                label: label(t),
                points: t
                    .checkpoints
                    .iter()
                    .filter(|c| c.step > 0)
                    .filter_map(|c| {
                        let d = c.direction.as_ref()?;
                        pick(d, l.norm).map(|y| (c.step as f64, y))
                    })
                    .collect(),
                color: COLORS[k % COLORS.len()],
                dashed: k >= COLORS.len(),
                dash: None,
            })
            .collect::<Vec<_>>()
    };
    let corr = series(&|d, _| d.one_minus_corr.filter(|v| *v > 0.0).map(log10));
    let margin = series(&|d, norm| d.margin.map(|m| m * norm));
    let range = |ser: &[Series]| {
        let ys = ser.iter().flat_map(|s| s.points.iter().map(|p| p.1));
        let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| {
            (a.min(y), b.max(y))
        });
        if lo.is_finite() && hi.is_finite() {
            let (lo, hi) = (lo.floor(), hi.ceil());
            (lo, if hi > lo { hi } else { lo + 1.0 })
        } else {
            (-1.0, 0.0)
        }
    };
    let first = limits[0];
    let mm = match first.space {
        crate::model::token_selection::limit::Space::P => "p",
        crate::model::token_selection::limit::Space::Q => "q",
    };
    let (corr_range, margin_range) = (range(&corr), range(&margin));
    Some(Figure {
        title: format!(
            "direction against the attention SVM ({} pattern, {mm}-space, d = {}, seed {})",
            first.pattern_choice, ts[0].config.d, ts[0].config.seed
        ),
        charts: vec![
            Chart {
                title: format!("convergence in direction to {mm}_mm"),
                x_label: "step".into(),
                y_label: "log10(1 - corr)".into(),
                x_range: (1.0, last),
                y_range: corr_range,
                log_x: true,
                series: corr,
                markers: vec![],
            },
            Chart {
                title: format!("normalised margin x ||{mm}_mm|| (limit 1)"),
                x_label: "step".into(),
                y_label: "margin x norm".into(),
                x_range: (1.0, last),
                y_range: margin_range,
                log_x: true,
                series: margin,
                markers: vec![],
            },
        ],
        columns: 2,
    })
}

/// A certificate's radius growth: bits lost (the working precision plus log2 of the
/// relative radius) against step (log axis), the largest and per quantity at the
/// checkpoints; the working precision as a dashed line (all bits lost there).
pub fn radius_chart(c: &crate::analysis::certify::Certificate) -> Chart {
    let prec = c.trainer.prec_bits as f64;
    // capped at the precision: an infinite relative radius has lost every bit
    let bits = |rel: f64| crate::analysis::certify::bits_lost_of(c.trainer.prec_bits, rel);
    type Pick = fn(&crate::analysis::certify::Radius) -> Option<f64>;
    let parts: [(&str, Pick); 5] = [
        ("largest", |r| Some(r.largest)),
        ("scores", |r| Some(r.scores)),
        ("attention", |r| Some(r.attention)),
        ("output f", |r| Some(r.output)),
        ("q", |r| r.q),
    ];
    let mut series: Vec<Series> = parts
        .iter()
        .enumerate()
        .map(|(k, (label, pick))| Series {
            label: label.to_string(),
            points: c
                .checkpoints
                .iter()
                .filter(|k| k.step > 0)
                .filter_map(|k| pick(&k.proof.radius).map(|r| (k.step as f64, bits(r))))
                .collect(),
            color: COLORS[k],
            dashed: false,
            dash: None,
        })
        .collect();
    let last = c.config.steps.max(10) as f64;
    series.push(Series {
        label: format!("{prec} bits"),
        points: vec![(1.0, prec), (last, prec)],
        color: "#000",
        dashed: true,
        dash: None,
    });
    let markers = match &c.first_undecided {
        Some(u) if u.step > 0 => vec![(u.step as f64, format!("undecided from step {}", u.step))],
        _ => vec![],
    };
    Chart {
        title: format!(
            "certified run ({}-mode, {} step, {} bits): bits lost",
            c.config.mode.name(),
            c.trainer.method.name(),
            c.trainer.prec_bits
        ),
        x_label: "step".into(),
        y_label: "bits lost (prec + log2 relative radius)".into(),
        x_range: (1.0, last),
        // five ticks at multiples of 8 bits, the precision inside
        y_range: (0.0, ((prec * 1.1 / 40.0).ceil() * 40.0)),
        log_x: true,
        series,
        markers,
    }
}

/// Rasterise an SVG document to PNG bytes (resvg; text with the system's fonts, e.g.
/// Debian's fonts-dejavu-core).
pub fn svg_to_png(svg: &str) -> Result<Vec<u8>, String> {
    use resvg::{tiny_skia, usvg};
    let mut opt = usvg::Options::default();
    let db = opt.fontdb_mut();
    db.load_system_fonts();
    // fontdb maps the generic `sans-serif` to Arial; use DejaVu Sans where Arial is absent
    db.set_sans_serif_family("DejaVu Sans");
    let tree = usvg::Tree::from_str(svg, &opt).map_err(|e| e.to_string())?;
    let size = tree.size().to_int_size();
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| "empty image".to_string())?;
    resvg::render(
        &tree,
        tiny_skia::Transform::identity(),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::{L, R, W, fmt_tick, title_place, value_label};

    /// A legend's value: constant lines say "= v", others where they end, non-finite
    /// points ignored.
    #[test]
    fn value_labels_tell_overlapping_lines_apart() {
        assert_eq!(value_label("R", &[(1.0, 0.0), (2.0, 0.0)]), "R = 0");
        assert_eq!(value_label("R", &[(1.0, 0.5), (2.0, 1.0)]), "R → 1");
        assert_eq!(
            value_label("tie", &[(1.0, 0.25), (2.0, f64::NAN), (3.0, 1.0 / 3.0)]),
            "tie → 0.333"
        );
        assert_eq!(value_label("I", &[(1.0, f64::NAN)]), "I");
        assert_eq!(value_label("I", &[]), "I");
    }

    /// A short title sits over the plot area at 14 px; a longer one over the whole chart;
    /// a title too long for the chart at 14 px gets a smaller font.
    #[test]
    fn titles_fit_the_chart() {
        assert_eq!(title_place("short"), ((L + W - R) / 2.0, 14.0));
        assert_eq!(title_place(&"x".repeat(80)), (W / 2.0, 14.0));
        let (x, size) = title_place(&"x".repeat(120));
        assert_eq!(x, W / 2.0);
        assert!(size < 14.0 && 0.55 * size * 120.0 <= W, "{size}");
    }

    /// Five ticks across a narrow range get distinct labels (they all read "1e-3" with a
    /// fixed one-digit format), and wide ranges keep short labels.
    #[test]
    fn tick_labels_tell_neighbouring_ticks_apart() {
        let labels = |lo: f64, hi: f64| -> Vec<String> {
            (0..=5)
                .map(|k| fmt_tick(lo + (hi - lo) * k as f64 / 5.0, (hi - lo) / 5.0))
                .collect()
        };
        for (lo, hi) in [
            (1e-3, 1.2e-3),
            (0.5, 0.51),
            (1e5, 1.001e5),
            (0.0, 1.0),
            (-3.0, 2e4),
        ] {
            let l = labels(lo, hi);
            let mut d = l.clone();
            d.dedup();
            assert_eq!(d.len(), l.len(), "{lo}..{hi}: {l:?}");
        }
        assert_eq!(labels(0.0, 1.0), ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
        assert_eq!(fmt_tick(1e-3, 1e-3), "1e-3");
        assert_eq!(fmt_tick(1.04e-3, 4e-5), "1.04e-3");
    }

    /// A tick is labelled with its value, not rounded to another: a range of 6 in five
    /// intervals (step 1.2, `plot --direction`'s log10(1 - corr) from -6 to 0) read
    /// 0, -1, -2, -4, -5, -6 at -1.2, -2.4, ...
    #[test]
    fn tick_labels_are_the_ticks_values() {
        let labels = |lo: f64, hi: f64| -> Vec<String> {
            (0..=5)
                .map(|k| fmt_tick(lo + (hi - lo) * k as f64 / 5.0, (hi - lo) / 5.0))
                .collect()
        };
        assert_eq!(
            labels(-6.0, 0.0),
            ["-6", "-4.8", "-3.6", "-2.4", "-1.2", "0"]
        );
        assert_eq!(labels(0.0, 7.0), ["0", "1.4", "2.8", "4.2", "5.6", "7"]);
        assert_eq!(labels(-1.0, 1.0), ["-1", "-0.6", "-0.2", "0.2", "0.6", "1"]);
        assert_eq!(labels(0.0, 10.0), ["0", "2", "4", "6", "8", "10"]);
        assert_eq!(fmt_tick(1.2e5, 1.2e4), "1.2e5");
        for (lo, hi) in [(-13.0, -2.0), (0.0, 3.3e-3), (100.0, 106.0)] {
            let step = (hi - lo) / 5.0;
            for (k, l) in labels(lo, hi).iter().enumerate() {
                let v = lo + step * k as f64;
                let got: f64 = l.parse().unwrap();
                assert!((got - v).abs() <= 1e-9 * step, "{lo}..{hi}: {l} for {v}");
            }
        }
    }
}
