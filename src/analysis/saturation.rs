//! Softmax saturation analysis: at which score gap does each f64 formulation break?
//!
//! A gap sweep fixes one training sequence X and pushes q = lambda u along the direction
//! u = x_r of its relevant token, so every score gap grows linearly in lambda. At each
//! gap Delta = z_top - max_{j != top} z_j the f64 `Naive` and `Stable` formulations
//! (softmax complement 1 - s_top, output f, gradient df/dq) are measured against the
//! truth twin (centred formulas at `prec` bits) at the same f64 q. For every
//! (formulation, quantity) the sweep reports the first gap at which the relative
//! error passes the tolerance and the first at which all digits are lost (relative
//! error >= 1/2), each refined by bisection between grid points.
//! Theory of the thresholds: proofs-notes/saturation.md.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::arith::{self, Arith, F64, Mpfr, normwise_rel_err, rel_err};
use crate::config::Formulation;
use crate::data::Split;
use crate::model;
use crate::quantity::Quantity;

/// Relative errors of one formulation at one gap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Errors {
    /// 1 - s_top.
    #[serde(with = "crate::io::nonfinite")]
    pub rest: f64,
    /// The output f.
    #[serde(with = "crate::io::nonfinite")]
    pub output: f64,
    /// df/dq, normwise.
    #[serde(with = "crate::io::nonfinite")]
    pub grad_q: f64,
    /// Cosine between the f64 and the twin's df/dq (1 = same direction); `None` when
    /// the f64 gradient is exactly zero (no direction at all, unlike an orthogonal one).
    #[serde(with = "crate::io::nonfinite::option")]
    pub grad_cosine: Option<f64>,
}

/// The quantities the sweep measures, in report order.
pub const SWEPT: [Quantity; 3] = [Quantity::Rest, Quantity::Output, Quantity::GradQ];

/// The key of a threshold in [`Report::thresholds`]: `FORMULATION.QUANTITY`
/// (`naive.rest`, `stable.grad_q`, ...).
pub fn threshold_key(formulation: &str, q: Quantity) -> String {
    format!("{formulation}.{}", q.name())
}

/// Every key [`Report::thresholds`] holds: each formulation with each [`SWEPT`] quantity.
pub fn threshold_keys() -> Vec<String> {
    ["naive", "stable"]
        .into_iter()
        .flat_map(|f| SWEPT.map(|q| threshold_key(f, q)))
        .collect()
}

impl Errors {
    /// The relative error of quantity `q` (NaN for one the sweep does not measure).
    pub fn get(&self, q: Quantity) -> f64 {
        match q {
            Quantity::Rest => self.rest,
            Quantity::Output => self.output,
            Quantity::GradQ => self.grad_q,
            _ => f64::NAN,
        }
    }
}

/// One gap of the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The twin's score gap at this q.
    #[serde(with = "crate::io::nonfinite")]
    pub gap: f64,
    /// The twin's 1 - s_top.
    #[serde(with = "crate::io::nonfinite")]
    pub rest: f64,
    /// Naive f64 errors.
    pub naive: Errors,
    /// Stable f64 errors.
    pub stable: Errors,
}

/// Break points of one (formulation, quantity).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    /// First gap where the relative error exceeds the tolerance (None: never in range).
    #[serde(with = "crate::io::nonfinite::option")]
    pub over_tol: Option<f64>,
    /// First gap where the relative error reaches 1/2: no correct digit left.
    #[serde(with = "crate::io::nonfinite::option")]
    pub all_digits_lost: Option<f64>,
}

/// The report of `tokensel saturation`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Precision of the truth twin.
    pub prec_bits: u32,
    /// Tolerance.
    #[serde(with = "crate::io::nonfinite")]
    pub tolerance: f64,
    /// The training sample whose sequence is swept.
    pub sample: usize,
    /// Tokens T and dimension d of the swept sequence.
    pub tokens: usize,
    /// Dimension d.
    pub d: usize,
    /// Thresholds keyed formulation.quantity: "naive.rest", "stable.grad_q", ...
    pub thresholds: BTreeMap<String, Threshold>,
    /// The grid.
    pub rows: Vec<Row>,
}

/// A sequence to sweep: tokens, head values, and the unit gap of direction u.
struct Probe<'a> {
    x: ndarray::ArrayView2<'a, f64>,
    g: Vec<f64>,
    u: Vec<f64>,
    unit_gap: f64,
    ar: Mpfr,
}

/// Attention, output and df/dq of one sequence at `q` in `ar` and `form`.
fn evaluate<A: Arith>(
    ar: &A,
    x: ndarray::ArrayView2<'_, f64>,
    q: &[f64],
    g: &[f64],
    form: Formulation,
) -> (model::Softmax<A::Real>, A::Real, Vec<A::Real>) {
    let (t_len, d) = x.dim();
    let (q, g) = (ar.of_slice(q), ar.of_slice(g));
    let mut scores = ar.zeros(t_len);
    let mut s = ar.zeros(t_len);
    let mut att = model::Softmax::new(ar);
    let mut f = ar.zero();
    model::scores(ar, x, &q, &mut scores);
    model::softmax(ar, &scores, &mut s, form, &mut att);
    model::output(ar, &s, &g, att.top, form, &mut f);
    let mut grad = ar.zeros(d);
    model::grad_q(ar, x, &s, &g, att.top, &f, &ar.of(1.0), form, &mut grad);
    (att, f, grad)
}

impl Probe<'_> {
    /// q = (gap / unit_gap) u in f64.
    fn q(&self, gap: f64) -> Vec<f64> {
        let lambda = gap / self.unit_gap;
        self.u.iter().map(|v| lambda * v).collect()
    }

    /// f64 errors of both formulations and the twin's gap and 1 - s_top at target `gap`.
    fn eval(&self, gap: f64) -> Row {
        let q = self.q(gap);
        // truth twin, centred formulas
        let (att, f, grad) = evaluate(&self.ar, self.x, &q, &self.g, Formulation::Stable);
        let truth: Vec<f64> = grad.iter().map(|v| v.to_f64()).collect();
        let errors = |form: Formulation| {
            let (a, f64v, g64) = evaluate(&F64, self.x, &q, &self.g, form);
            let norm = arith::norm(&g64);
            let cos = arith::dot(&g64, &truth) / (norm * arith::norm(&truth));
            Errors {
                rest: rel_err(a.rest, &att.rest),
                output: rel_err(f64v, &f),
                grad_q: normwise_rel_err(&g64, &grad),
                grad_cosine: (norm > 0.0 && cos.is_finite()).then_some(cos),
            }
        };
        Row {
            gap: att.gap.to_f64(),
            rest: att.rest.to_f64(),
            naive: errors(Formulation::Naive),
            stable: errors(Formulation::Stable),
        }
    }
}

/// Default sweep grid: `points` log-spaced gaps from 1 to 1100 (CORE-MATH's `log10`
/// and `exp10`: the same grid on every platform).
pub fn default_grid(points: usize) -> Vec<f64> {
    let (lo, hi) = (0f64, core_math::log10(1100.0));
    (0..points)
        .map(|k| core_math::exp10(lo + (hi - lo) * k as f64 / (points - 1) as f64))
        .collect()
}

/// Sweep the gap on training sample `sample` of `split`.
///
/// `prec` is the truth twin's precision. Errors past the tolerance are located on `grid`
/// and refined by 40 bisection steps between the last passing and the first failing gap.
pub fn sweep(
    split: &Split,
    sample: usize,
    prec: u32,
    tol: f64,
    grid: &[f64],
) -> crate::Result<Report> {
    let ar = Mpfr::truth(prec)?;
    let x = split.tokens(sample);
    let u = x.row(0).to_vec();
    let mut scores = vec![0.0; x.nrows()];
    model::scores(&F64, x, &u, &mut scores);
    let top = model::argmax(&F64, &scores);
    let second = scores
        .iter()
        .enumerate()
        .filter(|(t, _)| *t != top)
        .map(|(_, v)| *v)
        .fold(f64::NEG_INFINITY, f64::max);
    let probe = Probe {
        x,
        g: split.g.row(sample).to_vec(),
        u,
        unit_gap: scores[top] - second,
        ar,
    };
    let rows: Vec<Row> = grid.iter().map(|&gap| probe.eval(gap)).collect();
    let mut thresholds = BTreeMap::new();
    for (form, name) in [
        (Formulation::Naive, "naive"),
        (Formulation::Stable, "stable"),
    ] {
        let pick = |r: &Row| match form {
            Formulation::Naive => r.naive,
            Formulation::Stable => r.stable,
        };
        for q in SWEPT {
            let locate = |limit: f64| {
                let k = rows
                    .iter()
                    .position(|r| crate::analysis::exceeds(pick(r).get(q), limit))?;
                if k == 0 {
                    return Some(grid[0]);
                }
                let (mut lo, mut hi) = (grid[k - 1], grid[k]);
                for _ in 0..40 {
                    let mid = 0.5 * (lo + hi);
                    if !crate::analysis::exceeds(pick(&probe.eval(mid)).get(q), limit) {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                Some(probe.eval(hi).gap)
            };
            thresholds.insert(
                threshold_key(name, q),
                Threshold {
                    over_tol: locate(tol),
                    all_digits_lost: locate(0.5),
                },
            );
        }
    }
    Ok(Report {
        sample,
        prec_bits: prec,
        tolerance: tol,
        tokens: x.nrows(),
        d: x.ncols(),
        thresholds,
        rows,
    })
}

impl std::fmt::Display for Report {
    /// The readable table of `tokensel saturation`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = format!(
            "tokensel saturation: sample {} (T = {}, d = {}), q along its relevant token, judged by the {}-bit twin\n\n",
            self.sample, self.tokens, self.d, self.prec_bits
        );
        out += &format!(
            "  {:<14}{:>22}{:>22}\n",
            "quantity",
            format!("gap: err > {:e}", self.tolerance),
            "gap: all digits lost"
        );
        let show = |v: Option<f64>| v.map_or("beyond 1100".to_string(), |g| format!("{g:.2}"));
        for (k, t) in &self.thresholds {
            out += &format!(
                "  {k:<14}{:>22}{:>22}\n",
                show(t.over_tol),
                show(t.all_digits_lost)
            );
        }
        out += &format!(
            "\n  {:>9}{:>12}{:>12}{:>14}{:>12}{:>13}{:>15}\n",
            "gap",
            "1 - s_top",
            "naive rest",
            "naive grad_q",
            "naive cos",
            "stable rest",
            "stable grad_q"
        );
        for row in &self.rows {
            out += &format!(
                "  {:>9.2}{:>12.3e}{:>12.2e}{:>14.2e}{:>12}{:>13.2e}{:>15.2e}\n",
                row.gap,
                row.rest,
                row.naive.rest,
                row.naive.grad_q,
                row.naive
                    .grad_cosine
                    .map_or("zero".into(), |c| format!("{c:.4}")),
                row.stable.rest,
                row.stable.grad_q
            );
        }
        f.write_str(&out)
    }
}
