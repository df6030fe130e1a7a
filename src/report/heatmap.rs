//! SVG heat maps over two grid axes: one panel per quantity, each with its colour bar,
//! and optional curves drawn over every panel (iso-SNR lines, fitted boundaries).
//! Deterministic text output; PNG through [`super::plot::svg_to_png`].

use std::fmt::Write;

/// One panel: a value per grid point, `values[iy * nx + ix]`.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Title above the panel.
    pub title: String,
    /// Values (None: no data, drawn hatched grey).
    pub values: Vec<Option<f64>>,
    /// Categorical panel: the names of the values 0, 1, 2, ... and their colours.
    pub categories: Option<Vec<(String, &'static str)>>,
}

/// A curve over the panels, in data coordinates (x, y).
#[derive(Debug, Clone)]
pub struct Curve {
    /// Legend label.
    pub label: String,
    /// Points.
    pub points: Vec<(f64, f64)>,
    /// Colour.
    pub color: &'static str,
    /// Dashed.
    pub dashed: bool,
    /// Text drawn at the curve's last point inside the plot area.
    pub tag: Option<String>,
    /// Listed in the legend below the figure.
    pub in_legend: bool,
}

/// A heat-map figure.
#[derive(Debug, Clone)]
pub struct HeatMap {
    /// Figure title.
    pub title: String,
    /// x axis name and values (columns).
    pub x: (String, Vec<f64>),
    /// y axis name and values (rows, drawn bottom-up).
    pub y: (String, Vec<f64>),
    /// The panels.
    pub panels: Vec<Panel>,
    /// Curves drawn on every panel, with a legend below the figure.
    pub curves: Vec<Curve>,
}

const PW: f64 = 300.0; // plot area of one panel
const PH: f64 = 270.0;
const ML: f64 = 62.0; // margins inside a panel cell
const MT: f64 = 34.0;
const BAR: f64 = 96.0; // colour bar and its labels
const MB: f64 = 48.0;
const COLS: usize = 3;

/// Viridis, sampled at 9 points.
const VIRIDIS: [(f64, f64, f64); 9] = [
    (68.0, 1.0, 84.0),
    (71.0, 44.0, 122.0),
    (59.0, 81.0, 139.0),
    (44.0, 113.0, 142.0),
    (33.0, 144.0, 141.0),
    (39.0, 173.0, 129.0),
    (92.0, 200.0, 99.0),
    (170.0, 220.0, 50.0),
    (253.0, 231.0, 37.0),
];

/// The colour of t in [0, 1] on viridis.
pub fn viridis(t: f64) -> String {
    let t = t.clamp(0.0, 1.0) * (VIRIDIS.len() - 1) as f64;
    let k = (t.floor() as usize).min(VIRIDIS.len() - 2);
    let f = t - k as f64;
    let (a, b) = (VIRIDIS[k], VIRIDIS[k + 1]);
    let mix = |u: f64, v: f64| (u + f * (v - u)).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Compact tick text.
fn tick(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e4 || v.abs() < 1e-2 {
        format!("{v:.1e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    }
}

/// Position of a data value in cell units (cell k spans [k, k + 1], its value at
/// k + 0.5): piecewise linear between the grid values, so curves line up with the cells
/// on unevenly spaced axes too; extrapolated with the end spacing.
fn cell_coord(values: &[f64], v: f64) -> f64 {
    let n = values.len();
    if n == 1 {
        return 0.5 + (v - values[0]) / values[0].abs().max(1.0);
    }
    let k = values.windows(2).position(|w| v <= w[1]).unwrap_or(n - 2);
    let (a, b) = (values[k], values[k + 1]);
    k as f64 + 0.5 + (v - a) / (b - a)
}

impl HeatMap {
    /// The figure as an SVG document.
    pub fn to_svg(&self) -> String {
        let (nx, ny) = (self.x.1.len(), self.y.1.len());
        let cols = COLS.min(self.panels.len()).max(1);
        let rows = self.panels.len().div_ceil(cols);
        let cell_w = ML + PW + BAR;
        let cell_h = MT + PH + MB;
        let legend: Vec<&Curve> = self.curves.iter().filter(|c| c.in_legend).collect();
        let legend_h = 22.0 * legend.len().div_ceil(2) as f64 + 10.0;
        let (w, h) = (
            cols as f64 * cell_w + 20.0,
            40.0 + rows as f64 * cell_h + legend_h,
        );
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif">"#
        );
        let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="24" font-size="16" text-anchor="middle">{}</text>"#,
            w / 2.0,
            esc(&self.title)
        );
        for (k, panel) in self.panels.iter().enumerate() {
            let ox = 10.0 + (k % cols) as f64 * cell_w + ML;
            let oy = 40.0 + (k / cols) as f64 * cell_h + MT;
            let px = |x: f64| ox + cell_coord(&self.x.1, x) / nx as f64 * PW;
            let py = |y: f64| oy + PH - cell_coord(&self.y.1, y) / ny as f64 * PH;
            let inside = |x: f64, y: f64| {
                (0.0..=nx as f64).contains(&cell_coord(&self.x.1, x))
                    && (0.0..=ny as f64).contains(&cell_coord(&self.y.1, y))
            };
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" font-size="13" text-anchor="middle">{}</text>"#,
                ox + PW / 2.0,
                oy - 10.0,
                esc(&panel.title)
            );
            let finite: Vec<f64> = panel
                .values
                .iter()
                .flatten()
                .copied()
                .filter(|v| v.is_finite())
                .collect();
            let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let color = |v: f64| -> String {
                match &panel.categories {
                    Some(c) => c
                        .get(v as usize)
                        .map_or("#cccccc".into(), |c| c.1.to_string()),
                    None if hi > lo => viridis((v - lo) / (hi - lo)),
                    None => viridis(0.5),
                }
            };
            let cw = PW / nx as f64;
            let ch = PH / ny as f64;
            for iy in 0..ny {
                for ix in 0..nx {
                    let fill = match panel.values[iy * nx + ix] {
                        Some(v) if v.is_finite() => color(v),
                        _ => "#dddddd".into(),
                    };
                    let _ = writeln!(
                        s,
                        r#"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="{fill}" shape-rendering="crispEdges"/>"#,
                        ox + ix as f64 * cw,
                        oy + PH - (iy + 1) as f64 * ch,
                        cw + 0.3,
                        ch + 0.3
                    );
                }
            }
            // curves, clipped to the plot area
            let _ = writeln!(
                s,
                r#"<clipPath id="clip{k}"><rect x="{ox}" y="{oy}" width="{PW}" height="{PH}"/></clipPath>"#
            );
            for c in &self.curves {
                let pts: Vec<String> = c
                    .points
                    .iter()
                    .filter(|(x, y)| x.is_finite() && y.is_finite())
                    .map(|&(x, y)| format!("{:.2},{:.2}", px(x), py(y)))
                    .collect();
                let last_inside = c.points.iter().rev().find(|(x, y)| inside(*x, *y));
                if let (Some(tag), Some(&(x, y))) = (&c.tag, last_inside) {
                    let _ = writeln!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}" font-size="10" fill="{}" text-anchor="end">{}</text>"#,
                        px(x) - 2.0,
                        py(y) + 12.0,
                        c.color,
                        esc(tag)
                    );
                }
                if pts.len() > 1 {
                    let _ = writeln!(
                        s,
                        r#"<polyline clip-path="url(#clip{k})" points="{}" fill="none" stroke="{}" stroke-width="2"{}/>"#,
                        pts.join(" "),
                        c.color,
                        if c.dashed {
                            r#" stroke-dasharray="6,4""#
                        } else {
                            ""
                        }
                    );
                }
            }
            let _ = writeln!(
                s,
                r#"<rect x="{ox}" y="{oy}" width="{PW}" height="{PH}" fill="none" stroke="black"/>"#
            );
            // ticks: about 5 per axis, at grid values
            for (ix, v) in self
                .x
                .1
                .iter()
                .enumerate()
                .filter(|(i, _)| i % nx.div_ceil(5) == 0)
            {
                let x = ox + (ix as f64 + 0.5) * cw;
                let _ = writeln!(
                    s,
                    r#"<text x="{x:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
                    oy + PH + 15.0,
                    tick(*v)
                );
            }
            for (iy, v) in self
                .y
                .1
                .iter()
                .enumerate()
                .filter(|(i, _)| i % ny.div_ceil(5) == 0)
            {
                let y = oy + PH - (iy as f64 + 0.5) * ch;
                let _ = writeln!(
                    s,
                    r#"<text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"#,
                    ox - 5.0,
                    y + 4.0,
                    tick(*v)
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>"#,
                ox + PW / 2.0,
                oy + PH + 34.0,
                esc(&self.x.0)
            );
            let _ = writeln!(
                s,
                r#"<text transform="translate({},{}) rotate(-90)" font-size="12" text-anchor="middle">{}</text>"#,
                ox - 45.0,
                oy + PH / 2.0,
                esc(&self.y.0)
            );
            // colour bar or category legend
            let bx = ox + PW + 12.0;
            match &panel.categories {
                Some(cats) => {
                    for (j, (name, col)) in cats.iter().enumerate() {
                        let y = oy + 10.0 + 34.0 * j as f64;
                        let _ = writeln!(
                            s,
                            r#"<rect x="{bx}" y="{y}" width="12" height="12" fill="{col}"/>"#
                        );
                        for (line, word) in name.split(' ').enumerate() {
                            let _ = writeln!(
                                s,
                                r#"<text x="{}" y="{}" font-size="10">{}</text>"#,
                                bx + 16.0,
                                y + 10.0 + 11.0 * line as f64,
                                esc(word)
                            );
                        }
                    }
                }
                None if !finite.is_empty() => {
                    let steps = 40;
                    for j in 0..steps {
                        let t = j as f64 / (steps - 1) as f64;
                        let y = oy + PH - (j + 1) as f64 * PH / steps as f64;
                        let _ = writeln!(
                            s,
                            r#"<rect x="{bx}" y="{y:.2}" width="14" height="{:.2}" fill="{}"/>"#,
                            PH / steps as f64 + 0.3,
                            viridis(t)
                        );
                    }
                    for j in 0..=4 {
                        let t = j as f64 / 4.0;
                        let _ = writeln!(
                            s,
                            r#"<text x="{}" y="{:.1}" font-size="10">{}</text>"#,
                            bx + 18.0,
                            oy + PH - t * PH + 4.0,
                            tick(lo + t * (hi - lo))
                        );
                    }
                }
                None => {}
            }
        }
        // legend of the curves
        let ly = 40.0 + rows as f64 * cell_h;
        for (j, c) in legend.iter().enumerate() {
            let x = 20.0 + (j % 2) as f64 * (w / 2.0);
            let y = ly + 22.0 * (j / 2) as f64;
            let _ = writeln!(
                s,
                r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="2"{}/>"#,
                x + 30.0,
                c.color,
                if c.dashed {
                    r#" stroke-dasharray="6,4""#
                } else {
                    ""
                }
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" font-size="12">{}</text>"#,
                x + 38.0,
                y + 4.0,
                esc(&c.label)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}
