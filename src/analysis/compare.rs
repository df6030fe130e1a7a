//! Step-by-step comparison of the f64 trainer with the MPFR twin: the saturation
//! detector on whole trajectories.
//!
//! Three trainers run in lockstep on the same data: the f64 trainer (the config's
//! formulation and method), the truth twin (stable formulas at `prec` bits, the judge;
//! by default by the span step, which is the same trajectory in exact arithmetic at a
//! cost independent of d) and, optionally, the f64 predictor (53-bit MPFR, the f64
//! trainer's formulation and method, which must agree bit for bit) over the first
//! [`DEFAULT_PREDICTOR_STEPS`] steps by default, or over the whole run. After every
//! forward pass the f64 values are measured against the truth twin; the first step where
//! a quantity's relative error passes the tolerance is reported with the score gap there.
//!
//! With `certify`, a ball trainer (the span step at that precision, the stable
//! formulas) runs in lockstep too, and every f64 and twin value is measured against its
//! enclosure of the exact value: the distance outside it in f64 ulps of the value, a
//! PROVED lower bound of that value's error (the exact value lies in the enclosure), and
//! the enclosure's own width in ulps (at 128 bits a few ulps at most: the outward
//! rounding of its ends to f64), which says how finely it resolves the value
//! ([`Enclosure`]).
//!
//! Token-space quantities (scores, attention, 1 - s_top, f, the loss) are compared at
//! every step. The d-space ones (q, dL/dq) are compared at every step when the twin runs
//! the direct step, and at the checkpoints when it runs the span step (where they must be
//! rebuilt from the coefficients, O(nTd) in MPFR).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::analysis::{Row, exceeds};
use crate::arith::{Arith, Ball, F64, Kind, Mpfr, normwise_rel_err, rel_err};
use crate::config::{Config, Formulation, Method};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::model::caps::{Capability, require};
use crate::quantity::{Measure, Quantity};
use crate::train::drive::{Control, Event, Prefix, Stepper, drive};
use crate::train::{Engine, Trainer, record, resolve_method};

/// The compared quantities, in report order.
pub const COMPARED: [Quantity; 7] = [
    Quantity::Q,
    Quantity::Scores,
    Quantity::Attention,
    Quantity::Rest,
    Quantity::Output,
    Quantity::GradQ,
    Quantity::Loss,
];

/// Unit roundoff of f64, 2^-53.
pub const U64: f64 = 1.0 / (1u64 << 53) as f64;

/// Steps over which `compare` checks the predictor's bit equality by default: the
/// predictor is MPFR at 53 bits (about 0.7 ms per span step, 19 ms per direct step on
/// the default data, against the f64 trainer's microseconds), and a kernel or rounding
/// mismatch shows from the first steps on; the whole run on request.
pub const DEFAULT_PREDICTOR_STEPS: u64 = 1000;

/// Options of [`compare`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Precision of the truth twin in bits.
    pub prec: u32,
    /// Relative-error tolerance that counts as a failure.
    pub tol: f64,
    /// Also run the f64 predictor and check bit equality.
    pub predictor: bool,
    /// The predictor's last step (`None`: the whole run).
    pub predictor_steps: Option<u64>,
    /// The truth twin's method (span by default: same trajectory, cost independent of d).
    pub twin_method: Method,
    /// Also run the ball trainer at this many bits and measure every value against its
    /// enclosure (`None`: not run).
    pub certify: Option<u32>,
}

impl Options {
    /// Check, before any work, that these options can run on `cfg`: a finite positive
    /// tolerance, a valid twin precision, and the twin's and the predictor's state within
    /// the memory limit.
    pub fn check(&self, cfg: &Config) -> Result<()> {
        require(cfg, "compare", &[Capability::Compare])?;
        crate::analysis::check_tol("tol", self.tol)?;
        let truth = Mpfr::truth(self.prec)?;
        // the twin runs the stable formulas whatever the config's
        let twin = resolve_method(
            cfg,
            Formulation::Stable,
            truth.kind(),
            self.prec,
            self.twin_method,
        );
        crate::train::check_memory(cfg, truth.kind(), self.prec, twin)?;
        if self.predictor {
            crate::train::check_memory(cfg, Mpfr::predictor().kind(), 53, cfg.method)?;
        }
        if let Some(bits) = self.certify {
            Ball::new(bits)?;
            crate::train::check_memory(cfg, Kind::Ball, bits, Method::Span)?;
        }
        Ok(())
    }
}

/// Max and mean of an error in units of 2^-53 (the Boost.Math / SciPy error table).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct UlpStats {
    /// Largest relative error over all steps, in units of 2^-53.
    #[serde(with = "crate::io::nonfinite")]
    pub max: f64,
    /// Mean over all steps of the relative error, in units of 2^-53.
    #[serde(with = "crate::io::nonfinite")]
    pub mean: f64,
}

/// Where f64 first left the tolerance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Saturation {
    /// Whether any quantity passed the tolerance.
    pub detected: bool,
    /// First step at which one did.
    pub step: Option<u64>,
    /// Largest score gap z_top - z_second over training samples at that step (twin).
    #[serde(with = "crate::io::nonfinite::option")]
    pub score_gap: Option<f64>,
    /// The quantity that passed first (report order breaks ties).
    pub quantity: Option<Quantity>,
}

/// `compare --fail-above TOL`: the gate a user's CI sets on the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    /// The relative error above which the comparison fails (exit code 1).
    #[serde(with = "crate::io::nonfinite")]
    pub fail_above: f64,
    /// Whether some compared quantity's relative error passed it (or was NaN).
    pub failed: bool,
    /// Where it was first passed (`None`: never).
    pub first: Option<Exceedance>,
}

/// The first step at which a compared quantity's relative error passed the gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exceedance {
    /// The quantity ([`COMPARED`] order breaks ties within a step).
    pub quantity: Quantity,
    /// The step.
    pub step: u64,
    /// Its relative error there (as in `max_rel_err`: normwise for q and grad_q).
    #[serde(with = "crate::io::nonfinite")]
    pub rel_err: f64,
}

/// Update absorption: f64 q stops moving although its own gradient is nonzero (direct
/// f64 trainer only; `None` fields otherwise).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Absorption {
    /// First step whose f64 update left some coordinate of q unchanged although the
    /// f64 gradient coordinate was nonzero.
    pub first_partial_step: Option<u64>,
    /// First step whose f64 update left q entirely unchanged although the gradient was
    /// nonzero.
    pub first_total_step: Option<u64>,
    /// Largest fraction of absorbed coordinates in one step.
    #[serde(with = "crate::io::nonfinite")]
    pub max_fraction: f64,
}

/// The f64 predictor's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Predictor {
    /// The steps checked: 0 to this one (0 in reports of versions that checked the
    /// whole run and did not record it); at most the last step compared where the run
    /// stopped ([`Report::stopped`]).
    #[serde(default)]
    pub steps: u64,
    /// Every compared f64 quantity equal to the predictor's, bit for bit, at every step
    /// checked.
    pub bits_equal: bool,
    /// First step and quantity that differed.
    pub first_mismatch: Option<(u64, String)>,
}

/// Values measured against their enclosures (one quantity, one trainer).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Distance {
    /// Values measured.
    pub compared: u64,
    /// Values outside their enclosure.
    pub outside: u64,
    /// Largest distance outside the enclosure, in ulps of the value: a proved lower
    /// bound of the value's error (0: every value inside).
    pub max_ulps_outside: f64,
    /// Largest width of an enclosure (hi - lo of its f64 ends), in ulps of the value.
    pub max_width_ulps: f64,
}

impl Distance {
    /// Measure `v` against the enclosure `(lo, hi)` of its exact value.
    fn measure(&mut self, v: f64, (lo, hi): (f64, f64)) {
        let ulp = ulp(v);
        let out = (lo - v).max(v - hi).max(0.0);
        self.compared += 1;
        if out > 0.0 || v.is_nan() {
            self.outside += 1;
        }
        self.max_ulps_outside = self.max_ulps_outside.max(out / ulp);
        self.max_width_ulps = self.max_width_ulps.max((hi - lo) / ulp);
    }
}

/// The spacing of f64 at `v`: next_up(|v|) - |v| (the smallest subnormal at 0).
fn ulp(v: f64) -> f64 {
    let a = v.abs();
    if !a.is_finite() {
        return f64::NAN;
    }
    f64::from_bits(a.to_bits() + 1) - a
}

/// The f64 trainer's and the twin's values against the ball trainer's enclosures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Enclosure {
    /// The balls' working precision.
    pub prec_bits: u32,
    /// The f64 trainer's values (its f64 numbers).
    pub f64: BTreeMap<Quantity, Distance>,
    /// The twin's values, rounded to f64 (inside, up to a boundary case of half an ulp,
    /// when the twin is right).
    pub twin: BTreeMap<Quantity, Distance>,
    /// Where the ball trainer stopped before the last step (a ball became non-finite:
    /// the enclosure lost every bit; or normalised GD's factor left its range): the
    /// distances above cover the steps before it only, while the comparison of the f64
    /// run with the twin (and the predictor) goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<EnclosureStop>,
}

/// An enclosure that ended before the last step ([`Enclosure::stopped`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnclosureStop {
    /// The last step whose values were measured against it (none: it stopped at step 0).
    pub last_step: Option<u64>,
    /// Why it stopped.
    pub error: String,
}

/// The ball trainer in the lockstep of `compare`: its stop (a non-finite ball, a
/// normalised step it cannot take) ends the enclosure only, not the comparison; it is
/// dropped and recorded, and the other trainers go on.
struct Balls<'a> {
    inner: Option<Trainer<'a, Ball>>,
    /// The last step whose forward pass it completed.
    measured: Option<u64>,
    stopped: Option<EnclosureStop>,
}

impl Balls<'_> {
    /// Record a stop of the ball trainer, or pass on any other error.
    fn stop(&mut self, r: Result<()>) -> Result<()> {
        let error = match r {
            Ok(()) => return Ok(()),
            Err(Error::NonFinite {
                step,
                quantity,
                sample,
            }) => format!(
                "the ball of {quantity}{} became non-finite at step {step} (every bit lost)",
                sample.map_or(String::new(), |i| format!(" of training sample {i}"))
            ),
            Err(e @ Error::NormalizedStep { .. }) => e.to_string(),
            Err(e) => return Err(e),
        };
        self.inner = None;
        self.stopped = Some(EnclosureStop {
            last_step: self.measured,
            error,
        });
        Ok(())
    }
}

impl Stepper for Balls<'_> {
    fn forward_backward(&mut self) -> Result<()> {
        let Some(t) = self.inner.as_mut() else {
            return Ok(());
        };
        let r = t.forward_backward();
        if r.is_ok() {
            self.measured = Some(t.step);
        }
        self.stop(r)
    }

    fn update(&mut self) -> Result<()> {
        let Some(t) = self.inner.as_mut() else {
            return Ok(());
        };
        let r = t.update();
        self.stop(r)
    }
}

impl Enclosure {
    /// Measure the values of `a` (f64) and `b` (twin) against `e`'s enclosures, in
    /// [`COMPARED`] order; q and grad_q only when `d_space`.
    fn measure<A: Arith>(
        &mut self,
        a: &Trainer<'_, A>,
        b: &Trainer<'_, Mpfr>,
        e: &Trainer<'_, Ball>,
        d_space: bool,
    ) {
        let ar = e.ar;
        for q in COMPARED.into_iter().filter(|q| d_space || !q.in_d_space()) {
            let (Some(xs), Some(ts), Some(bs)) = (a.quantity(q), b.quantity(q), e.quantity(q))
            else {
                continue;
            };
            for ((x, t), ball) in xs.iter().zip(&ts).zip(&bs) {
                let enc = ar.enclose(ball);
                self.f64.entry(q).or_default().measure(a.ar.to_f64(x), enc);
                self.twin.entry(q).or_default().measure(t.to_f64(), enc);
            }
        }
    }
}

/// The report of `tokensel compare`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Precision of the truth twin.
    pub prec_bits: u32,
    /// Steps run.
    pub steps: u64,
    /// Tolerance.
    #[serde(with = "crate::io::nonfinite")]
    pub tolerance: f64,
    /// The f64 trainer's formulation.
    pub formulation: Formulation,
    /// The f64 trainer's method (`auto` resolved).
    pub method: Method,
    /// Whether the f64 trainer's method was chosen by `method = "auto"` (the cost model,
    /// `train::plan`) rather than asked for.
    #[serde(default)]
    pub method_auto: bool,
    /// The step rule both runs take (the config's `[optimizer]`; constant-step GD in
    /// reports written before it was recorded).
    #[serde(default)]
    pub optimizer: crate::config::Optimizer,
    /// The truth twin's method (`auto` resolved).
    pub twin_method: Method,
    /// Steps at which q and grad_q were compared: "every step" or "checkpoints".
    pub d_space_compared_at: String,
    /// Largest relative error of each quantity over the compared steps.
    #[serde(with = "crate::io::nonfinite::map")]
    pub max_rel_err: BTreeMap<Quantity, f64>,
    /// First step at which each quantity passed the tolerance.
    pub first_exceed: BTreeMap<Quantity, Option<u64>>,
    /// Error table in units of 2^-53.
    pub error_ulps: BTreeMap<Quantity, UlpStats>,
    /// First tolerance failure.
    pub saturation: Saturation,
    /// Update absorption.
    pub absorption: Absorption,
    /// The f64 predictor's verdict (when run).
    pub predictor: Option<Predictor>,
    /// First step at which a score gap exceeded what the twin itself can represent
    /// (exp(-gap) below MPFR's smallest exponent): from there on the judge underflows
    /// too, and agreement on 0 proves nothing.
    pub judge_out_of_range: Option<u64>,
    /// Errors at the log-spaced checkpoints.
    pub checkpoints: Vec<Row>,
    /// The f64 and twin values against the ball trainer's enclosures (with `certify`;
    /// q and grad_q at the checkpoints, the rest at every step).
    pub enclosure: Option<Enclosure>,
    /// Where the comparison stopped before `steps` because a trainer stopped (normalised
    /// GD whose factor alpha / (||G|| + eps) left an arithmetic's range, a non-finite
    /// value): the error, and the last step compared. Everything above covers the steps
    /// before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<Stopped>,
    /// The `--fail-above` gate, when one was set ([`compare_gated`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<Gate>,
    /// The factorised query map both runs train, as `run`'s header names it
    /// (`[factorised]` configs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_map: Option<String>,
}

/// A comparison that ended early ([`Report::stopped`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stopped {
    /// The last step whose forward pass was compared.
    pub last_step: u64,
    /// The trainer's error.
    pub error: String,
}

impl Report {
    /// Parse a report that `compare --json` wrote (`path` names it in messages), with
    /// what a reader relies on checked: a relative error of every compared quantity at
    /// every checkpoint, and a finite tolerance > 0.
    pub fn from_json(text: &str, path: &std::path::Path) -> Result<Report> {
        let bad = |message: String| crate::Error::Parse {
            what: "compare report",
            path: path.to_path_buf(),
            message,
        };
        let r: Report = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if !(r.tolerance.is_finite() && r.tolerance > 0.0) {
            return Err(bad(format!(
                "tolerance {} is not finite and > 0",
                r.tolerance
            )));
        }
        for c in &r.checkpoints {
            if let Some(q) = COMPARED.iter().find(|q| !c.rel_err.contains_key(q)) {
                return Err(bad(format!(
                    "the checkpoint at step {} has no `rel_err` of `{}`",
                    c.step,
                    q.name()
                )));
            }
        }
        Ok(r)
    }
}

/// Componentwise max relative error.
fn componentwise<'a>(pairs: impl Iterator<Item = (f64, &'a rug::Float)>) -> f64 {
    pairs.map(|(a, b)| rel_err(a, b)).fold(0.0, f64::max)
}

/// Relative errors of the f64 trainer against the truth twin, in [`COMPARED`] order,
/// each by its declared [`Quantity::measure`] over the values of [`Trainer::quantity`]
/// (`output`: the model's outputs, a K-class run's K per sample); q and grad_q only when
/// `d_space` (NaN otherwise: not measured).
/// The hardware trainer `a` may be f32 (its values widened to f64 exactly).
pub fn errors<A: Arith>(a: &Trainer<'_, A>, b: &Trainer<'_, Mpfr>, d_space: bool) -> [f64; 7] {
    let t_len = a.data.train.x.dim().1;
    COMPARED.map(|q| {
        if q.in_d_space() && !d_space {
            return f64::NAN;
        }
        let (Some(xs), Some(ys)) = (a.quantity(q), b.quantity(q)) else {
            return f64::NAN;
        };
        let xs: Vec<f64> = xs.iter().map(|x| a.ar.to_f64(x)).collect();
        match q.measure() {
            Measure::Normwise => normwise_rel_err(&xs, &ys),
            Measure::Componentwise => componentwise(xs.iter().copied().zip(&ys)),
            Measure::SampleNormwise => sample_normwise(&xs, &ys, t_len),
        }
    })
}

/// [`Measure::SampleNormwise`]: per row of `t_len` entries, max |a - b| (in MPFR) over
/// max |b|; the largest over the rows (0 for a row of zeros matched exactly, infinite
/// for one matched inexactly).
fn sample_normwise(xs: &[f64], ys: &[rug::Float], t_len: usize) -> f64 {
    xs.chunks(t_len)
        .zip(ys.chunks(t_len))
        .map(|(za, zb)| {
            let scale = zb.iter().map(|v| v.to_f64().abs()).fold(0.0, f64::max);
            let diff = za
                .iter()
                .zip(zb)
                .map(|(x, y)| {
                    let mut d = rug::Float::with_val(y.prec().max(64), *x);
                    d -= y;
                    d.to_f64().abs()
                })
                .fold(0.0, f64::max);
            if scale == 0.0 {
                if diff == 0.0 { 0.0 } else { f64::INFINITY }
            } else {
                diff / scale
            }
        })
        .fold(0.0, f64::max)
}

/// First quantity whose f64 bits differ from the predictor's, by name: `scores`,
/// `attention`, `rest`, `output`, `loss`, then `coefficients` (the token coefficients)
/// and `engine state` (q and dL/dq for the direct step, the span coefficients).
/// (Generic over the hardware arithmetic, whose values are widened to f64 exactly; the
/// bit equality is meaningful for [`F64`].)
pub fn predictor_mismatch<A: Arith>(
    a: &Trainer<'_, A>,
    p: &Trainer<'_, Mpfr>,
) -> Option<&'static str> {
    let same = |x: &A::Real, y: &rug::Float| a.ar.to_f64(x).to_bits() == y.to_f64().to_bits();
    let all = |xs: &[A::Real], ys: &[rug::Float]| {
        xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same(x, y))
    };
    let rest = a
        .samples
        .iter()
        .zip(&p.samples)
        .all(|(x, y)| same(&x.softmax.rest, &y.softmax.rest));
    let f = a
        .samples
        .iter()
        .zip(&p.samples)
        .all(|(x, y)| same(&x.f, &y.f) && all(&x.outputs, &y.outputs));
    let engine = match (&a.engine, &p.engine) {
        (Engine::Direct(x), Engine::Direct(y)) => all(&x.q, &y.q) && all(&x.grad_q, &y.grad_q),
        (Engine::Span(x), Engine::Span(y)) => all(&x.a, &y.a) && all(&x.m, &y.m),
        _ => false,
    };
    [
        (Quantity::Scores.name(), all(&a.scores, &p.scores)),
        (Quantity::Attention.name(), all(&a.attention, &p.attention)),
        (Quantity::Rest.name(), rest),
        (Quantity::Output.name(), f),
        (Quantity::Loss.name(), same(&a.loss, &p.loss)),
        ("coefficients", all(&a.c, &p.c)),
        ("engine state", engine),
    ]
    .into_iter()
    .find(|(_, ok)| !ok)
    .map(|(name, _)| name)
}

/// Run the f64 trainer, the truth twin and (optionally) the predictor in lockstep.
pub fn compare(
    cfg: &Config,
    data: &Dataset,
    opts: Options,
    progress: &mut dyn FnMut(u64),
) -> Result<Report> {
    compare_gated(cfg, data, opts, None, progress)
}

/// [`compare`] with the gate `fail_above` (a finite relative error > 0, checked by the
/// caller with [`crate::analysis::check_tol`]): the report's [`Report::gate`] says
/// whether any compared quantity's relative error passed it, and where first.
pub fn compare_gated(
    cfg: &Config,
    data: &Dataset,
    opts: Options,
    fail_above: Option<f64>,
    progress: &mut dyn FnMut(u64),
) -> Result<Report> {
    compare_in(cfg, data, F64, opts, fail_above, progress)
}

/// [`compare_gated`] with the hardware trainer in the arithmetic `hw` (f64 for
/// `compare`; f32 for `cost --follow`'s rows), in the config's formulation and method;
/// its values are widened to f64 exactly before they are measured against the twin.
pub fn compare_in<A: Arith>(
    cfg: &Config,
    data: &Dataset,
    hw: A,
    opts: Options,
    fail_above: Option<f64>,
    progress: &mut dyn FnMut(u64),
) -> Result<Report> {
    require(cfg, "compare", &[Capability::Compare])?;
    let truth = Mpfr::truth(opts.prec)?;
    let a = Trainer::new(cfg, data, hw, cfg.formulation)?;
    let b = Trainer::with_method(cfg, data, truth, Formulation::Stable, opts.twin_method)?;
    let until = opts.predictor_steps.unwrap_or(cfg.steps).min(cfg.steps);
    let p = match opts.predictor {
        true => Some(Prefix::new(
            Trainer::new(cfg, data, Mpfr::predictor(), cfg.formulation)?,
            until,
        )),
        false => None,
    };
    let e = match opts.certify {
        Some(bits) => {
            let ball = Ball::new(bits)?;
            Some(Balls {
                inner: Some(Trainer::with_method(
                    cfg,
                    data,
                    ball,
                    Formulation::Stable,
                    Method::Span,
                )?),
                measured: None,
                stopped: None,
            })
        }
        None => None,
    };
    let mut enclosure = opts.certify.map(|bits| Enclosure {
        prec_bits: bits,
        f64: BTreeMap::new(),
        twin: BTreeMap::new(),
        stopped: None,
    });
    let schedule = record::schedule(cfg.steps, cfg.record.checkpoints_per_decade);
    let (method, twin_method) = (a.method(), b.method());
    let every_step = twin_method == Method::Direct;

    let mut max = [0.0f64; 7];
    let mut sum = [0.0f64; 7];
    let mut count = [0u64; 7];
    let mut first: [Option<u64>; 7] = [None; 7];
    let mut saturation = Saturation {
        detected: false,
        step: None,
        score_gap: None,
        quantity: None,
    };
    let mut absorption = Absorption {
        first_partial_step: None,
        first_total_step: None,
        max_fraction: 0.0,
    };
    let mut predictor = p.as_ref().map(|_| Predictor {
        steps: until,
        bits_equal: true,
        first_mismatch: None,
    });
    let mut gate = fail_above.map(|fail_above| Gate {
        fail_above,
        failed: false,
        first: None,
    });
    let mut rows = Vec::new();
    let mut judge_out_of_range = None;
    let gap_limit = -(rug::float::exp_min() as f64) * std::f64::consts::LN_2;
    // the f64 q before an update (direct f64 trainer), for the absorption check
    let mut q_before: Option<Vec<A::Real>> = None;
    // the f64 trainer, the truth twin, the optional predictor and ball trainer, in
    // lockstep (the ball trainer's own stop ends the enclosure only: `Balls`)
    let mut all = (a, (b, (p, e)));
    let mut last_step = None;
    let ran = drive(&mut all, cfg.steps, |(a, (b, (p, e))), event| {
        if event == Event::Update {
            if let (Some(q_before), Engine::Direct(e)) = (q_before.take(), &a.engine) {
                // the gradient that was just applied is still the engine's grad_q
                let step = a.step - 1;
                let (ar, nonzero) = (a.ar, |g: &A::Real| a.ar.to_f64(g) != 0.0);
                let moving = e.grad_q.iter().filter(|g| nonzero(g)).count();
                let absorbed =
                    e.q.iter()
                        .zip(&q_before)
                        .zip(&e.grad_q)
                        .filter(|((new, old), g)| ar.to_f64(new) == ar.to_f64(old) && nonzero(g))
                        .count();
                if absorbed > 0 {
                    absorption.first_partial_step.get_or_insert(step);
                    absorption.max_fraction =
                        absorption.max_fraction.max(absorbed as f64 / cfg.d as f64);
                    if absorbed == moving {
                        absorption.first_total_step.get_or_insert(step);
                    }
                }
            }
            progress(a.step);
            return Ok(Control::Continue);
        }
        let step = a.step;
        last_step = Some(step);
        let at_checkpoint = schedule.binary_search(&step).is_ok();
        let errs = errors(a, b, every_step || at_checkpoint);
        let gap = b
            .samples
            .iter()
            .map(|t| t.softmax.gap.to_f64())
            .fold(0.0, f64::max);
        if gap > gap_limit && judge_out_of_range.is_none() {
            judge_out_of_range = Some(step);
        }
        for (k, q) in COMPARED.into_iter().enumerate() {
            if q.in_d_space() && !(every_step || at_checkpoint) {
                continue; // not measured at this step
            }
            max[k] = max[k].max(errs[k]);
            sum[k] += errs[k];
            count[k] += 1;
            if let Some(g) = gate.as_mut().filter(|g| !g.failed)
                && exceeds(errs[k], g.fail_above)
            {
                g.failed = true;
                g.first = Some(Exceedance {
                    quantity: q,
                    step,
                    rel_err: errs[k],
                });
            }
            if first[k].is_none() && exceeds(errs[k], opts.tol) {
                first[k] = Some(step);
                if !saturation.detected {
                    saturation = Saturation {
                        detected: true,
                        step: Some(step),
                        score_gap: Some(gap),
                        quantity: Some(q),
                    };
                }
            }
        }
        if let (Some(pt), Some(verdict)) = (p.as_ref().and_then(Prefix::get), predictor.as_mut())
            && let Some(q) = predictor_mismatch(a, pt).filter(|_| verdict.bits_equal)
        {
            verdict.bits_equal = false;
            verdict.first_mismatch = Some((step, q.to_string()));
        }
        if let (Some(e), Some(enc)) = (
            e.as_ref().and_then(|e| e.inner.as_ref()),
            enclosure.as_mut(),
        ) {
            enc.measure(a, b, e, at_checkpoint);
        }
        if at_checkpoint {
            rows.push(Row {
                step,
                max_gap: gap,
                rel_err: COMPARED.into_iter().zip(errs).collect(),
            });
        }
        if let Engine::Direct(e) = &a.engine {
            q_before = Some(e.q.clone());
        }
        Ok(Control::Continue)
    });
    // a trainer that stops (the f64 one, typically: normalised GD past its range) ends
    // the comparison; the steps compared before it are reported, with the stop
    let stopped = match (ran, last_step) {
        (Ok(()), _) => None,
        (Err(e @ (Error::NormalizedStep { .. } | Error::NonFinite { .. })), Some(last_step)) => {
            Some(Stopped {
                last_step,
                error: e.to_string(),
            })
        }
        (Err(e), _) => return Err(e),
    };
    if let (Some(balls), Some(enc)) = (all.1.1.1.take(), enclosure.as_mut()) {
        enc.stopped = balls.stopped;
    }
    // the predictor was compared up to the last step compared, not past the stop
    if let (Some(st), Some(v)) = (&stopped, predictor.as_mut()) {
        v.steps = v.steps.min(st.last_step);
    }
    Ok(Report {
        prec_bits: opts.prec,
        steps: cfg.steps,
        tolerance: opts.tol,
        formulation: cfg.formulation,
        method,
        method_auto: cfg.method == Method::Auto,
        optimizer: cfg.optimizer,
        twin_method,
        d_space_compared_at: if every_step {
            "every step"
        } else {
            "checkpoints"
        }
        .into(),
        max_rel_err: COMPARED.into_iter().zip(max).collect(),
        first_exceed: COMPARED.into_iter().zip(first).collect(),
        error_ulps: COMPARED
            .into_iter()
            .enumerate()
            .map(|(k, q)| {
                (
                    q,
                    UlpStats {
                        max: max[k] / U64,
                        mean: sum[k] / count[k].max(1) as f64 / U64,
                    },
                )
            })
            .collect(),
        saturation,
        absorption,
        predictor,
        judge_out_of_range,
        checkpoints: rows,
        enclosure,
        stopped,
        gate,
        query_map: cfg.factorised.as_ref().map(|f| f.describe()),
    })
}

impl std::fmt::Display for Report {
    /// The readable error table and verdicts of `tokensel compare`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = format!(
            "tokensel compare: f64 ({:?}, {}{}) vs {}-bit twin (stable, {}), {} steps{}{}, tolerance {:e}\n  q and grad_q compared at {}; relative errors of q and grad_q are normwise (per vector), the\n  others per value\n\n",
            self.formulation,
            self.method.name(),
            if self.method_auto {
                ", chosen by auto"
            } else {
                ""
            },
            self.prec_bits,
            self.twin_method.name(),
            self.steps,
            match self.optimizer.is_default() {
                true => String::new(),
                false => format!(" of {}", self.optimizer.name()),
            },
            // the factorised query map, named as `run`'s header names it
            self.query_map
                .as_ref()
                .map_or(String::new(), |m| format!(", {m}")),
            self.tolerance,
            self.d_space_compared_at
        );
        out += &format!(
            "  {:<11}{:>14}{:>16}{:>16}{:>14}\n",
            "quantity", "max rel err", "max (2^-53)", "mean (2^-53)", "first > tol"
        );
        for q in COMPARED {
            let ulps = self.error_ulps[&q];
            let first = self.first_exceed[&q].map_or("-".to_string(), |s| s.to_string());
            out += &format!(
                "  {q:<11}{:>14.3e}{:>16.3e}{:>16.3e}{first:>14}\n",
                self.max_rel_err[&q], ulps.max, ulps.mean
            );
        }
        let s = &self.saturation;
        out += &match (s.detected, s.step, s.score_gap, &s.quantity) {
            (true, Some(step), Some(gap), Some(q)) => format!(
                "\n  verdict: f64 error passes {:e} first at step {step} in `{q}` (score gap {gap:.2})\n",
                self.tolerance
            ),
            _ => format!(
                "\n  verdict: f64 stays within {:e} of the twin on every quantity\n",
                self.tolerance
            ),
        };
        if let Some(g) = &self.gate {
            out += &match &g.first {
                Some(x) => format!(
                    "  gate: FAILED --fail-above {:e}: `{}` passes it first at step {} (relative error {:.3e})\n",
                    g.fail_above, x.quantity, x.step, x.rel_err
                ),
                None => format!(
                    "  gate: held --fail-above {:e} (every compared quantity within it at every step compared)\n",
                    g.fail_above
                ),
            };
        }
        let a = &self.absorption;
        out += &format!(
            "  update absorption: first partial {}, first total {}, max fraction {:.3}\n",
            a.first_partial_step.map_or("-".into(), |s| s.to_string()),
            a.first_total_step.map_or("-".into(), |s| s.to_string()),
            a.max_fraction
        );
        if let Some(step) = self.judge_out_of_range {
            out += &format!(
                "  WARNING: from step {step} the score gap exceeds the twin's own exponent range; exp underflows in MPFR too and agreement there proves nothing\n"
            );
        }
        if let Some(e) = &self.enclosure {
            out += &format!(
                "\n  against the {}-bit enclosure of the exact run (distance outside it, in ulps of each value,\n  component by component: a proved lower bound of that value's error; the relative errors\n  above are normwise for q and grad_q, so a small component can lie many of its own ulps\n  outside while the vector's relative error stays near 2^-53)\n  {:<11}{:>18} {:>15} {:>17} {:>15}\n",
                e.prec_bits,
                "quantity",
                "f64 outside",
                "f64 max ulps",
                "twin outside",
                "width (ulps)"
            );
            for q in COMPARED {
                let (Some(a), Some(t)) = (e.f64.get(&q), e.twin.get(&q)) else {
                    continue;
                };
                out += &format!(
                    // a space between columns and every width in scientific notation: no two
                    // numbers touch, whatever their size (a width of 2e16 ulps once printed
                    // as `0/148820418253159399424.0`)
                    "  {q:<11}{:>18} {:>15.3e} {:>17} {:>15.3e}\n",
                    format!("{}/{}", a.outside, a.compared),
                    a.max_ulps_outside,
                    format!("{}/{}", t.outside, t.compared),
                    a.max_width_ulps.max(t.max_width_ulps)
                );
            }
            if let Some(st) = &e.stopped {
                // the f64 run and the twin go on after the enclosure, to the last step or
                // to where the run itself stopped (said below); the predictor covers
                // the steps its own line states (a prefix, or up to the run's stop)
                let run = match &self.stopped {
                    None => "at every step all the same".to_string(),
                    Some(rs) => format!(
                        "up to step {} of {} (where the run itself stopped, below)",
                        rs.last_step, self.steps
                    ),
                };
                let predictor = match &self.predictor {
                    Some(_) => ", and the predictor over the steps its line states",
                    None => "",
                };
                out += &format!(
                    "  ENCLOSURE INCOMPLETE: the {}-bit enclosure stopped: {}\n  ({}; the rest of the run is not measured against it, while the f64 run and\n  the twin are compared {run}{predictor})\n",
                    e.prec_bits,
                    st.error,
                    match st.last_step {
                        Some(k) => format!("the distances above cover steps 0-{k}"),
                        None => "no step was measured".to_string(),
                    }
                );
            }
        }
        if let Some(st) = &self.stopped {
            // an enclosure that stopped earlier covers fewer steps than the rest
            let covers = match self.enclosure.as_ref().and_then(|e| e.stopped.as_ref()) {
                Some(es) => match es.last_step {
                    Some(k) if k < st.last_step => format!(
                        "the f64 and twin errors above cover steps 0-{}; the enclosure's distances, steps 0-{k}",
                        st.last_step
                    ),
                    Some(_) => format!("everything above covers steps 0-{}", st.last_step),
                    None => format!(
                        "the f64 and twin errors above cover steps 0-{}; the enclosure measured no step",
                        st.last_step
                    ),
                },
                None => format!("everything above covers steps 0-{}", st.last_step),
            };
            out += &format!(
                "  STOPPED after comparing step {} of {}: {}\n  ({covers})\n",
                st.last_step, self.steps, st.error
            );
        }
        if let Some(p) = &self.predictor {
            // a stopped run was compared up to its stop only: say so, and why
            let stop = match &self.stopped {
                Some(st) if st.last_step <= p.steps => format!(
                    " (the steps compared: the run stopped after step {}, {})",
                    st.last_step, st.error
                ),
                _ => String::new(),
            };
            out += &match &p.first_mismatch {
                None => format!(
                    "  f64 predictor (53-bit twin): every f64 quantity equal bit for bit at steps 0-{}{stop}\n",
                    p.steps
                ),
                Some((step, q)) => {
                    format!("  f64 predictor: first bit mismatch at step {step} in `{q}`\n")
                }
            };
        }
        f.write_str(&out)
    }
}
