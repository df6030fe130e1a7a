//! `tokensel judge`: replay another implementation's run in the MPFR twin, measure its
//! recorded quantities step by step, and say where and why it left the tolerance.
//!
//! The twin is the truth trainer (stable formulas, `prec` bits) on the span step, which
//! is the same trajectory as the direct step in exact arithmetic at a cost independent of
//! d (proofs-notes/span.md); p, q, W and dL/dq are rebuilt from its coefficients at the
//! recorded steps only.
//!
//! Relative errors are normwise (2-norm): per vector for p, q, W, grad_q (dL/dq) and the
//! outputs, per training sample for the scores and attention (the largest over samples is
//! reported), componentwise for rest = 1 - s_top (it spans many orders of magnitude), and
//! plain relative for the loss. A NaN or infinite external value counts as an infinite error. The
//! diagnoses and their thresholds are derived in proofs-notes/judge.md.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::analysis::{Row, exceeds};
use crate::arith::{Arith, Mpfr, normwise_rel_err, rel_err};
use crate::config::{Config, Formulation, Method};
use crate::data::Dataset;
use crate::error::Result;
use crate::io::external::{Dtype, External};
use crate::quantity::Quantity;
use crate::train::Trainer;
use crate::train::drive::{Control, Event, drive};

/// Options of [`judge`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Precision of the twin in bits.
    pub prec: u32,
    /// Relative-error tolerance.
    pub tol: f64,
}

impl Options {
    /// A finite positive tolerance and a valid twin precision.
    pub fn validate(&self) -> Result<()> {
        crate::analysis::check_tol("tol", self.tol)?;
        Mpfr::truth(self.prec).map(|_| ())
    }

    /// Check, before any work, that these options can replay `cfg` (whose `steps` is
    /// the last recorded step): [`Options::validate`], and the span twin's state within
    /// the memory limit.
    pub fn check(&self, cfg: &Config) -> Result<()> {
        self.validate()?;
        crate::train::check_memory(cfg, Mpfr::truth(self.prec)?.kind(), self.prec, Method::Span)
    }
}

/// Relative error of one quantity over the recorded steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Largest relative error.
    pub max_rel_err: f64,
    /// Mean relative error.
    pub mean_rel_err: f64,
    /// Largest relative error in units of the external dtype's epsilon.
    pub max_eps: f64,
    /// Mean relative error in units of the external dtype's epsilon.
    pub mean_eps: f64,
    /// First recorded step at which the error passed the tolerance.
    pub first_over_tol: Option<u64>,
}

/// What a deviation looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Diagnosis {
    /// Errors of order 1 before any update: different data, initial parameters, head or
    /// forward pass.
    WrongData,
    /// Errors of order 1 from the first updates: a wrong gradient, step size or nu.
    WrongModel,
    /// Errors that jump by orders of magnitude once the score gap is large enough for
    /// 1 - s_top, computed as 1 - s_top, to lose the tolerance's digits (the naive
    /// softmax gradient).
    NaiveSoftmaxSaturation,
    /// The external parameters stopped moving while the twin's still moved: updates
    /// below half an ulp are absorbed.
    UpdateAbsorption,
    /// Errors at the level of float32's epsilon, growing without jumps.
    Float32Rounding,
    /// Non-finite external values.
    NonFinite,
    /// None of the above fits.
    Unexplained,
}

impl Diagnosis {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Diagnosis::WrongData => "wrong data or initial parameters",
            Diagnosis::WrongModel => "wrong model",
            Diagnosis::NaiveSoftmaxSaturation => "naive softmax saturation",
            Diagnosis::UpdateAbsorption => "update absorption",
            Diagnosis::Float32Rounding => "float32 rounding",
            Diagnosis::NonFinite => "non-finite values",
            Diagnosis::Unexplained => "unexplained",
        }
    }
}

/// One diagnosis with where it was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The diagnosis.
    pub diagnosis: Diagnosis,
    /// The recorded step where it shows.
    pub step: u64,
    /// The quantity with the largest error there.
    pub quantity: Quantity,
    /// That error.
    pub rel_err: f64,
    /// The twin's largest score gap there.
    pub score_gap: f64,
    /// The evidence, in words.
    pub detail: String,
}

/// The report of `tokensel judge`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The header's implementation name.
    pub implementation: Option<String>,
    /// The external dtype.
    pub dtype: Dtype,
    /// Its machine epsilon.
    pub eps: f64,
    /// Twin precision in bits.
    pub prec_bits: u32,
    /// The twin's method.
    pub twin_method: Method,
    /// Tolerance.
    pub tolerance: f64,
    /// Number of recorded steps compared.
    pub steps_compared: usize,
    /// Last recorded step.
    pub last_step: u64,
    /// Error statistics of each recorded quantity.
    pub quantities: BTreeMap<Quantity, Stats>,
    /// Every recorded value within the tolerance.
    pub within_tolerance: bool,
    /// The first step past the tolerance, with quantity, error and score gap; then any
    /// later finding of another kind.
    pub findings: Vec<Finding>,
    /// Errors at every recorded step.
    pub rows: Vec<Row>,
}

/// Normwise error, NaN read as infinite (an unmeasurable error fails and sorts last).
fn finite_or_inf(e: f64) -> f64 {
    if e.is_nan() { f64::INFINITY } else { e }
}

/// Largest per-sample normwise error of an (n, T) quantity.
fn per_sample(ext: &[f64], twin: &[rug::Float], t: usize) -> f64 {
    ext.chunks(t)
        .zip(twin.chunks(t))
        .map(|(a, b)| finite_or_inf(normwise_rel_err(a, b)))
        .fold(0.0, f64::max)
}

/// The identity as twin values (the twin's W when it is not stored).
fn identity(d: usize, prec: u32) -> Vec<rug::Float> {
    (0..d * d)
        .map(|k| rug::Float::with_val(prec, u32::from(k % (d + 1) == 0)))
        .collect()
}

/// The twin's d-space values at its current step, each rebuilt (from the span
/// coefficients, O(r d) for p, O(d^2) for q, O(r d^2) for W in MPFR) at most once
/// however many quantities read it.
struct Rebuilt<'t, 'a> {
    b: &'t Trainer<'a, Mpfr>,
    prec: u32,
    p: std::cell::OnceCell<Vec<rug::Float>>,
    w: std::cell::OnceCell<Option<Vec<rug::Float>>>,
    identity: std::cell::OnceCell<Vec<rug::Float>>,
    q: std::cell::OnceCell<Vec<rug::Float>>,
}

impl<'t, 'a> Rebuilt<'t, 'a> {
    fn new(b: &'t Trainer<'a, Mpfr>, prec: u32) -> Self {
        Rebuilt {
            b,
            prec,
            p: std::cell::OnceCell::new(),
            w: std::cell::OnceCell::new(),
            identity: std::cell::OnceCell::new(),
            q: std::cell::OnceCell::new(),
        }
    }

    /// The twin's value of a d-space quantity (p, q or W; W, O(r d^2) in joint mode, only
    /// where W is asked for; W = I built only where the twin does not store W).
    fn vector(&self, q: Quantity) -> &[rug::Float] {
        match q {
            Quantity::P => self.p.get_or_init(|| self.b.p()),
            Quantity::W => match self.w.get_or_init(|| self.b.params().1) {
                Some(w) => w,
                None => self
                    .identity
                    .get_or_init(|| identity(self.b.cfg.d, self.prec)),
            },
            _ => self.q.get_or_init(|| self.b.q()),
        }
    }

    /// Error of one recorded quantity.
    fn error_of(&self, q: Quantity, ext: &[f64]) -> f64 {
        let b = self.b;
        let t = b.cfg.tokens();
        let e = match q {
            Quantity::P | Quantity::Q | Quantity::W => normwise_rel_err(ext, self.vector(q)),
            Quantity::Scores => per_sample(ext, &b.scores, t),
            Quantity::Attention => per_sample(ext, &b.attention, t),
            Quantity::Rest => ext
                .iter()
                .zip(&b.samples)
                .map(|(x, s)| finite_or_inf(rel_err(*x, &s.softmax.rest)))
                .fold(0.0, f64::max),
            Quantity::Output => {
                let f: Vec<rug::Float> = b.samples.iter().map(|s| s.f.clone()).collect();
                normwise_rel_err(ext, &f)
            }
            Quantity::Loss => rel_err(ext[0], &b.loss),
            Quantity::GradQ => normwise_rel_err(ext, &b.grad_q()),
        };
        finite_or_inf(e)
    }
}

/// Errors a float32 computation of this model makes: within [u32 / 100, 1e4 u32]
/// (proofs-notes/judge.md).
const F32_BAND: (f64, f64) = (
    f32::EPSILON as f64 / 2.0 / 100.0,
    f32::EPSILON as f64 / 2.0 * 1e4,
);
/// An error this large is no rounding error (proofs-notes/judge.md).
const ORDER_ONE: f64 = 1e-3;
/// Growth between consecutive recorded steps that counts as a jump.
const JUMP: f64 = 100.0;

/// Replay `ext` (already checked against `cfg`) in the twin and judge it.
pub fn judge(
    cfg: &Config,
    data: &Dataset,
    ext: &External,
    opts: Options,
    progress: &mut dyn FnMut(u64),
) -> Result<Report> {
    let mut b = Trainer::with_method(
        cfg,
        data,
        Mpfr::truth(opts.prec)?,
        Formulation::Stable,
        Method::Span,
    )?;
    let mut rows = Vec::with_capacity(ext.steps.len());
    // Twin p (or q) at the previous recorded step, and whether the external one moved.
    let moving = [Quantity::P, Quantity::Q]
        .into_iter()
        .find(|q| ext.series.contains_key(q));
    let mut absorbed: Option<(u64, u64, f64)> = None;
    let mut prev_twin: Option<Vec<rug::Float>> = None;
    let last = ext.steps[ext.steps.len() - 1];
    drive(&mut b, last, |b, event| {
        let k = rows.len();
        if event == Event::Update {
            progress(b.step);
            return Ok(Control::Continue);
        }
        let step = b.step;
        if ext.steps[k] != step {
            return Ok(Control::Continue);
        }
        let gap = b
            .samples
            .iter()
            .map(|t| t.softmax.gap.to_f64())
            .fold(0.0, f64::max);
        let twin = Rebuilt::new(b, opts.prec);
        let rel_err = ext
            .series
            .iter()
            .map(|(q, s)| (*q, twin.error_of(*q, &s.values[k])))
            .collect();
        if let Some(q) = moving {
            let now = twin.vector(q).to_vec();
            let values = &ext.series[&q].values;
            if let Some(before) = &prev_twin {
                let unchanged = values[k]
                    .iter()
                    .zip(&values[k - 1])
                    .all(|(a, c)| a.to_bits() == c.to_bits());
                // exactly: did the twin's value change at all between the two records
                let moved = before.iter().zip(&now).any(|(a, c)| a != c);
                if unchanged && moved && absorbed.is_none() {
                    let before_f64: Vec<f64> = before.iter().map(|v| v.to_f64()).collect();
                    let change = finite_or_inf(normwise_rel_err(&before_f64, &now));
                    absorbed = Some((ext.steps[k - 1], step, change));
                }
            }
            prev_twin = Some(now);
        }
        rows.push(Row {
            step,
            max_gap: gap,
            rel_err,
        });
        Ok(Control::Continue)
    })?;
    let dtype = ext.header.dtype;
    let eps = dtype.eps();
    let mut quantities = BTreeMap::new();
    for &q in ext.series.keys() {
        let errs: Vec<f64> = rows.iter().map(|r| r.rel_err[&q]).collect();
        let max = errs.iter().copied().fold(0.0, f64::max);
        let mean = errs.iter().sum::<f64>() / errs.len() as f64;
        quantities.insert(
            q,
            Stats {
                max_rel_err: max,
                mean_rel_err: mean,
                max_eps: max / eps,
                mean_eps: mean / eps,
                first_over_tol: rows
                    .iter()
                    .find(|r| exceeds(r.rel_err[&q], opts.tol))
                    .map(|r| r.step),
            },
        );
    }
    let findings = diagnose(&rows, dtype, opts.tol, cfg.tokens(), absorbed);
    Ok(Report {
        implementation: ext.header.implementation.clone(),
        dtype,
        eps,
        prec_bits: opts.prec,
        twin_method: Method::Span,
        tolerance: opts.tol,
        steps_compared: rows.len(),
        last_step: last,
        within_tolerance: findings.is_empty(),
        quantities,
        findings,
        rows,
    })
}

/// The largest error at a row, and its quantity (report order breaks ties).
fn worst(row: &Row) -> (Quantity, f64) {
    row.rel_err
        .iter()
        .fold(None, |acc: Option<(Quantity, f64)>, (&k, &v)| match acc {
            Some((_, best)) if v <= best => acc,
            _ => Some((k, v)),
        })
        .expect("a row measures at least one quantity")
}

/// Whether a naive 1 - s_top at unit roundoff `u` can explain error `err` at score gap
/// `gap`: its relative error is about T u e^gap (proofs-notes/saturation.md), so the gap
/// must reach ln(err / (T u)).
fn saturation_explains(err: f64, gap: f64, u: f64, tokens: usize) -> bool {
    gap >= core_math::log(err / (tokens as f64 * u))
}

/// The findings, first the one at the first step past `tol`, then later ones of other
/// kinds (proofs-notes/judge.md gives the rules and why).
fn diagnose(
    rows: &[Row],
    dtype: Dtype,
    tol: f64,
    tokens: usize,
    absorbed: Option<(u64, u64, f64)>,
) -> Vec<Finding> {
    let u = dtype.unit_roundoff();
    let errs: Vec<f64> = rows.iter().map(|r| worst(r).1).collect();
    let Some(k) = errs.iter().position(|&e| exceeds(e, tol)) else {
        return Vec::new();
    };
    let finding = |j: usize, diagnosis: Diagnosis, detail: String| {
        let (quantity, rel_err) = worst(&rows[j]);
        Finding {
            diagnosis,
            step: rows[j].step,
            quantity,
            rel_err,
            score_gap: rows[j].max_gap,
            detail,
        }
    };
    // A jump: the error grows by JUMP over everything before, from below the tolerance.
    let jump_at = |j: usize| {
        let before = errs[..j].iter().copied().fold(0.0, f64::max);
        j > 0 && before <= tol && errs[j] >= JUMP * before.max(u)
    };
    let mut out = Vec::new();
    let e = errs[k];
    let gap = rows[k].max_gap;
    let primary = if e.is_infinite() {
        finding(
            k,
            Diagnosis::NonFinite,
            "a NaN or infinite value where the twin's is finite".into(),
        )
    } else if rows[k].step == 0 && e >= ORDER_ONE {
        finding(
            k,
            Diagnosis::WrongData,
            format!(
                "error {e:.2e} before any update: check the data, p(0), W(0), nu and the forward pass"
            ),
        )
    } else if k <= 2 && e >= ORDER_ONE {
        finding(
            k,
            Diagnosis::WrongModel,
            format!(
                "error {e:.2e} within the first updates, far above any rounding: a wrong gradient, sign, step size or head"
            ),
        )
    } else if jump_at(k) && saturation_explains(e, gap, u, tokens) {
        finding(
            k,
            Diagnosis::NaiveSoftmaxSaturation,
            format!(
                "error jumps from {:.2e} to {e:.2e} at score gap {gap:.1}; 1 - s_top computed as 1 - s_top has relative error ~T u e^gap = {:.1e} there ({} u = {u:.2e})",
                errs[..k].iter().copied().fold(0.0, f64::max),
                tokens as f64 * u * core_math::exp(gap),
                dtype.name()
            ),
        )
    } else if let Some((from, to, change)) = absorbed.filter(|a| a.1 <= rows[k].step) {
        finding(
            k,
            Diagnosis::UpdateAbsorption,
            format!(
                "the external parameters did not change from step {from} to {to} while the twin's moved by {change:.2e} (relative): updates below half an ulp are absorbed"
            ),
        )
    } else if (F32_BAND.0..=F32_BAND.1).contains(&e) {
        let claimed = match dtype {
            Dtype::Float32 => String::new(),
            Dtype::Float64 => {
                " although the header says float64: some part computes in float32".into()
            }
        };
        finding(
            k,
            Diagnosis::Float32Rounding,
            format!(
                "error {e:.2e} = {:.1} float32 units (u = 2^-24) and no jump{claimed}",
                e / F32_BAND.0 / 100.0
            ),
        )
    } else {
        finding(
            k,
            Diagnosis::Unexplained,
            format!("error {e:.2e} at score gap {gap:.1}"),
        )
    };
    let kind = primary.diagnosis;
    out.push(primary);
    // A later saturation jump (e.g. float32 rounding first, then the naive gradient).
    if kind != Diagnosis::NaiveSoftmaxSaturation && kind != Diagnosis::WrongModel {
        let ratio = |j: usize| errs[j] / errs[..j].iter().copied().fold(u, f64::max);
        if let Some(j) = (k + 1..rows.len())
            .find(|&j| ratio(j) >= JUMP && saturation_explains(errs[j], rows[j].max_gap, u, tokens))
        {
            out.push(finding(
                j,
                Diagnosis::NaiveSoftmaxSaturation,
                format!(
                    "error jumps {:.0}x over all earlier steps at score gap {:.1}, where 1 - s_top computed as 1 - s_top has relative error ~T u e^gap = {:.1e}",
                    ratio(j),
                    rows[j].max_gap,
                    tokens as f64 * u * core_math::exp(rows[j].max_gap)
                ),
            ));
        }
    }
    out
}

impl std::fmt::Display for Report {
    /// The readable table and diagnoses of `tokensel judge`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "tokensel judge: {} ({}) vs {}-bit twin (stable, {}), {} recorded steps up to {}, tolerance {:e}",
            self.implementation
                .as_deref()
                .unwrap_or("external trajectory"),
            self.dtype.name(),
            self.prec_bits,
            self.twin_method.name(),
            self.steps_compared,
            self.last_step,
            self.tolerance
        )?;
        writeln!(
            f,
            "\n  {:<11}{:>14}{:>15}{:>14}{:>14}{:>14}",
            "quantity", "max rel err", "mean rel err", "max (eps)", "mean (eps)", "first > tol"
        )?;
        for (q, s) in &self.quantities {
            writeln!(
                f,
                "  {q:<11}{:>14.3e}{:>15.3e}{:>14.3e}{:>14.3e}{:>14}",
                s.max_rel_err,
                s.mean_rel_err,
                s.max_eps,
                s.mean_eps,
                s.first_over_tol.map_or("-".into(), |t| t.to_string())
            )?;
        }
        writeln!(
            f,
            "  (eps = {:e}, the {} machine epsilon)",
            self.eps,
            self.dtype.name()
        )?;
        if self.within_tolerance {
            return writeln!(
                f,
                "\n  verdict: AGREES: every recorded quantity within {:e} of the twin",
                self.tolerance
            );
        }
        let first = &self.findings[0];
        writeln!(
            f,
            "\n  verdict: DIFFERS: first past {:e} at step {} in `{}` (rel err {:.3e}, score gap {:.2})",
            self.tolerance, first.step, first.quantity, first.rel_err, first.score_gap
        )?;
        for x in &self.findings {
            writeln!(
                f,
                "  diagnosis at step {}: {}: {}",
                x.step,
                x.diagnosis.name(),
                x.detail
            )?;
        }
        Ok(())
    }
}
