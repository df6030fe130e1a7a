//! `tokensel judge`: replay another implementation's run in the MPFR twin and in every
//! candidate explanation of its errors, measure its recorded quantities step by step,
//! and say which explanation it follows and where it follows none (SPEC section 12;
//! proofs-notes/judge.md).
//!
//! Steppers in lockstep through [`drive`]: the twin (the truth trainer, stable formulas,
//! `prec` bits, span step; the direct step where the optimizer needs it: Adam, AdamW,
//! clipping), optionally the ball enclosure (the same step: `enclosure`),
//! and the four candidates ([`Candidate`]: tokensel's direct step in f64 and f32, stable
//! and naive softmax gradient). At each recorded step, every recorded quantity of the
//! external run and of each candidate is measured against the twin (`measure`): p,
//! grad_q and the token-space quantities from the twin's own MPFR values, q and W where
//! they are dense from double-double rebuilds of the twin's factors (`dd`, with stated
//! bounds). `attribute` then decides which candidates the external follows, and where
//! it departs from all of them.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::ops::Range;

use rug::Float;
use serde::{Deserialize, Serialize};

use crate::analysis::exceeds;
use crate::arith::{Arith, Ball, F32, F64, Mpfr};
use crate::config::{Config, Formulation, Method, Mode};
use crate::data::{Dataset, Params};
use crate::error::Result;
use crate::io::external::{Dtype, External};
use crate::linalg;
use crate::model::caps::{Capability, require};
use crate::quantity::Quantity;
use crate::train::drive::{Control, Event, drive};
use crate::train::{Engine, Trainer, train_rows};

mod attribute;
mod candidate;
mod dd;
mod enclosure;
mod measure;

pub use attribute::{BELOW_DTYPE, Coarseness, Diagnosis, FACTOR, Fit};
pub use candidate::{Absorption, Candidate, NotRun};

use attribute::Errors;
use candidate::Replay;
use measure::{Pending, Reference, Wide};

/// Options of [`judge`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Precision of the twin in bits.
    pub prec: u32,
    /// Relative-error tolerance (the verdict).
    pub tol: f64,
    /// Precision of the ball enclosure (proof of wrongness), `None` for none.
    pub enclosure: Option<u32>,
}

impl Options {
    /// A finite positive tolerance, a valid twin precision and ball precision.
    pub fn validate(&self) -> Result<()> {
        crate::analysis::check_tol("tol", self.tol)?;
        if let Some(p) = self.enclosure {
            Ball::new(p)?;
        }
        Mpfr::truth(self.prec).map(|_| ())
    }

    /// Check, before any work, that these options can replay `cfg` (whose `steps` is
    /// the last recorded step): [`Options::validate`], and every replay's state within
    /// the memory limit (the span twin and enclosure, the four direct candidates).
    pub fn check(&self, cfg: &Config) -> Result<()> {
        use crate::train::check_memory;
        require(cfg, "judge", &[Capability::JudgeReplay])?;
        self.validate()?;
        check_memory(cfg, Mpfr::truth(self.prec)?.kind(), self.prec, Method::Span)?;
        if let Some(p) = self.enclosure {
            check_memory(cfg, Ball::new(p)?.kind(), p, Method::Span)?;
        }
        // the naive candidates' state where they run (it holds the per-sample gradients)
        let largest = Config {
            formulation: if candidate::not_run(cfg).is_empty() {
                Formulation::Naive
            } else {
                Formulation::Stable
            },
            ..cfg.clone()
        };
        check_memory(&largest, F64.kind(), 53, Method::Direct)?;
        check_memory(&largest, F32.kind(), 24, Method::Direct)
    }
}

/// The external's error in one quantity over the recorded steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Largest relative error.
    #[serde(with = "crate::io::nonfinite")]
    pub max_rel_err: f64,
    /// Mean relative error.
    #[serde(with = "crate::io::nonfinite")]
    pub mean_rel_err: f64,
    /// Largest relative error in units of the external dtype's epsilon.
    #[serde(with = "crate::io::nonfinite")]
    pub max_eps: f64,
    /// Mean relative error in units of the external dtype's epsilon.
    #[serde(with = "crate::io::nonfinite")]
    pub mean_eps: f64,
    /// First recorded step at which the error passed the tolerance.
    pub first_over_tol: Option<u64>,
}

/// The first recorded value past the tolerance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverTol {
    /// Its step.
    pub step: u64,
    /// The quantity with the largest error there.
    pub quantity: Quantity,
    /// That error.
    #[serde(with = "crate::io::nonfinite")]
    pub rel_err: f64,
    /// The twin's largest score gap there.
    #[serde(with = "crate::io::nonfinite")]
    pub score_gap: f64,
}

/// A value proved wrong: its certified distance from the truth exceeds what its dtype's
/// candidates explain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proved {
    /// The step.
    pub step: u64,
    /// The quantity.
    pub quantity: Quantity,
    /// A rigorous lower bound of the external's relative error there.
    #[serde(with = "crate::io::nonfinite")]
    pub lower_bound: f64,
    /// FACTOR times the largest envelope of the candidates in the external's dtype.
    #[serde(with = "crate::io::nonfinite")]
    pub limit: f64,
}

/// What the ball enclosure proves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proof {
    /// The ball's working precision.
    pub prec_bits: u32,
    /// The recorded quantities it encloses (W and a dense q are not enclosed).
    pub enclosed: Vec<Quantity>,
    /// The first value proved wrong (report order within a step).
    pub first: Option<Proved>,
    /// The value proved wrong by the largest factor over its limit.
    pub largest: Option<Proved>,
    /// How many (step, quantity) values are proved wrong.
    pub count: usize,
    /// The enclosure's non-finite stop (an infinite radius), if any.
    pub stopped: Option<(u64, String)>,
}

/// The dense references' accuracy: the largest rigorous bound, relative to the value,
/// on a double-double rebuild's distance from the twin's own (proofs-notes/judge.md).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct DenseBounds {
    /// q = W^T p rebuilt where W(0) is dense (p- and joint mode).
    #[serde(with = "crate::io::nonfinite::option")]
    pub q: Option<f64>,
    /// W rebuilt from the twin's factors (W- and joint mode).
    #[serde(with = "crate::io::nonfinite::option")]
    pub w: Option<f64>,
}

/// Errors at one recorded step: the external's, each candidate's, and the enclosure's
/// lower bounds of the external's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Step.
    pub step: u64,
    /// The twin's largest score gap z_top - z_second over the training samples.
    #[serde(with = "crate::io::nonfinite")]
    pub max_gap: f64,
    /// The external's relative error per quantity.
    pub rel_err: BTreeMap<Quantity, f64>,
    /// Each candidate's relative error per quantity (NaN after a non-finite stop).
    pub candidates: BTreeMap<Candidate, BTreeMap<Quantity, f64>>,
    /// Rigorous lower bounds of the external's relative error (enclosed quantities).
    pub lower_bound: BTreeMap<Quantity, f64>,
}

/// The report of `tokensel judge`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The header's implementation name.
    pub implementation: Option<String>,
    /// The external dtype.
    pub dtype: Dtype,
    /// Its machine epsilon.
    #[serde(with = "crate::io::nonfinite")]
    pub eps: f64,
    /// Twin precision in bits.
    pub prec_bits: u32,
    /// The twin's method: the span step, or the direct step where the optimizer needs
    /// it (Adam, AdamW, clipping).
    pub twin_method: Method,
    /// Tolerance.
    #[serde(with = "crate::io::nonfinite")]
    pub tolerance: f64,
    /// Number of recorded steps compared.
    pub steps_compared: usize,
    /// Last recorded step.
    pub last_step: u64,
    /// The external's error statistics per recorded quantity.
    pub quantities: BTreeMap<Quantity, Stats>,
    /// Every recorded value within the tolerance (the verdict and exit code).
    pub within_tolerance: bool,
    /// The first recorded value past the tolerance.
    pub first_over_tol: Option<OverTol>,
    /// [`FACTOR`]: how far the external may deviate beyond a candidate's deviation.
    #[serde(with = "crate::io::nonfinite")]
    pub envelope_factor: f64,
    /// The resolution, per quantity: [`FACTOR`] times the widest envelope of the
    /// candidates in the header's dtype at the last record (at the last record they
    /// ran). An error below it passes as that dtype's rounding: a fault whose effect on
    /// the records stays below it is not seen.
    pub resolution: BTreeMap<Quantity, f64>,
    /// How the external relates to each candidate that ran.
    pub candidates: Vec<Fit>,
    /// The candidates not run for this config, and why (e.g. the naive formulations
    /// for `[factorised]`); absent from the JSON where every candidate ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_run: Vec<NotRun>,
    /// Which candidates explain it, and where it departs from them.
    pub diagnosis: Diagnosis,
    /// What the ball enclosure proves (none when not run: `--no-enclosure`, or no
    /// recorded quantity is enclosed, e.g. W alone).
    pub proof: Option<Proof>,
    /// Accuracy of the dense references.
    pub dense_bounds: DenseBounds,
    /// Errors at every recorded step.
    pub rows: Vec<Row>,
}

/// The twin's values at its current step, each rebuilt at most once per record.
struct Twin<'t, 'a> {
    b: &'t Trainer<'a, Mpfr>,
    w0: Option<&'t [f64]>,
    p0: &'t [f64],
    p: OnceCell<Vec<Float>>,
}

impl<'t, 'a> Twin<'t, 'a> {
    fn p(&self) -> &[Float] {
        self.p.get_or_init(|| self.b.p())
    }

    /// The reference of quantity `q`, with the bound of a double-double rebuild.
    ///
    /// The twin takes the span step where the run allows it; where the optimizer needs
    /// the direct step (Adam, AdamW, clipping: [`crate::config::Optimizer::needs_direct`])
    /// or the query map is factorised (`[factorised]`: direct step only) it keeps p, q
    /// and its blocks itself in MPFR, and every reference is its own MPFR value (the
    /// factorised blocks through [`Trainer::quantity`]).
    fn reference(&self, q: Quantity) -> (Reference<'t>, Option<dd::Bound>) {
        let b = self.b;
        let mpfr = |v: Vec<Float>| (Reference::Mpfr(v), None);
        let e = match &b.engine {
            Engine::Span(e) => e,
            Engine::Direct(e) => {
                return match q {
                    Quantity::P => mpfr(e.p().to_vec()),
                    Quantity::Q => mpfr(e.q.clone()),
                    Quantity::W => match e.w() {
                        Some(w) => mpfr(w.to_vec()),
                        None => (Reference::Identity(b.cfg.d), None),
                    },
                    _ => self.common(q),
                };
            }
        };
        let (cfg, x) = (b.cfg, train_rows(b.data));
        match q {
            Quantity::P => mpfr(self.p().to_vec()),
            Quantity::Q => match (cfg.mode, self.w0) {
                (Mode::P, None) => mpfr(self.p().to_vec()),
                (Mode::W, _) | (Mode::Joint, None) => mpfr(b.q()),
                (_, Some(w0)) => {
                    // q = W(0)^T p + X^T M^T (B p) (joint), W(0)^T p (p-mode)
                    let v = match e.joint_factors() {
                        Some((basis, m)) => {
                            let rows = basis.len() / cfg.d;
                            let mut bp = b.ar.zeros(rows);
                            linalg::matvec(&b.ar, basis, self.p(), &mut bp);
                            let mut v = b.ar.zeros(rows - 1);
                            linalg::matvec_t(&b.ar, m, &bp, &mut v);
                            v
                        }
                        None => Vec::new(),
                    };
                    let (q, bound) = dd::q_dense(w0, self.p(), x, &v);
                    (Reference::Dd(q), Some(bound))
                }
            },
            Quantity::W => match (cfg.mode, self.w0, e.joint_factors()) {
                (_, None, _) => (Reference::Identity(cfg.d), None),
                (Mode::P, Some(w0), _) => (Reference::Exact(w0), None),
                (Mode::W, Some(w0), _) => {
                    let mut v = b.ar.zeros(cfg.d);
                    linalg::matvec_t_f64(&b.ar, x, &e.a[1..], &mut v);
                    let (w, bound) = dd::w_rank_one(w0, self.p0, &v);
                    (Reference::Dd(w), Some(bound))
                }
                (Mode::Joint, Some(w0), Some((basis, m))) => {
                    let (w, bound) = dd::w_joint(w0, basis, m, x);
                    (Reference::Dd(w), Some(bound))
                }
                // (joint mode always has factors) the twin's own W, rebuilt in MPFR
                (Mode::Joint, Some(_), None) => self.common(q),
            },
            _ => self.common(q),
        }
    }

    /// The reference of a quantity both engines keep alike (scores, attention, the
    /// softmax rest, outputs, dL/dq, the loss): the twin's own MPFR values.
    fn common(&self, q: Quantity) -> (Reference<'t>, Option<dd::Bound>) {
        let b = self.b;
        // p from the record's cache (rebuilt once); every other value by the accessor
        let v = match q {
            Quantity::P => Some(self.p().to_vec()),
            _ => b.quantity(q),
        };
        match v {
            Some(v) => (Reference::Mpfr(v), None),
            None => (Reference::Identity(b.cfg.d), None),
        }
    }
}

/// Per-record measurements of one source, per quantity, before the scales are known.
type Series = BTreeMap<Quantity, Vec<Pending>>;

/// The trained parameter of a run whose updates are compared with the twin's: p; q
/// in W-mode; W_K for `[factorised]` (every factorised run trains it, and its GD
/// update -eta u (dL/dq)^T is linear in the step size, as p's and W's are).
fn trained(cfg: &Config) -> Quantity {
    if cfg.factorised.is_some() {
        Quantity::WK
    } else if cfg.mode == Mode::W {
        Quantity::Q
    } else {
        Quantity::P
    }
}

/// The parameters that fix q in a `[factorised]` run (q = W_K^T (W_Q p + b_Q)): W_Q,
/// W_K, b_Q with biases, p where it trains; empty without `[factorised]`.
fn q_inputs(cfg: &Config) -> Vec<Quantity> {
    let Some(f) = cfg.factorised else {
        return Vec::new();
    };
    let mut v = vec![Quantity::WQ, Quantity::WK];
    if f.bias {
        v.push(Quantity::BQ);
    }
    if f.train_p {
        v.push(Quantity::P);
    }
    v
}

/// A candidate's distances from the reference parts (`None` once it has stopped), and
/// whether its trained parameter changed since `prev` (updated).
fn measure_candidate<A: Arith>(
    c: &Replay<'_, A>,
    q: Quantity,
    reference: &Reference<'_>,
    parts: &[Range<usize>],
    identity: &[f64],
) -> Option<Vec<Wide>> {
    c.running().then(|| {
        let v = candidate::values(&c.tr, q, identity);
        measure::distances(reference, parts, &v)
    })
}

/// The trained parameter's values of a running candidate.
fn trained_values<A: Arith>(c: &Replay<'_, A>, identity: &[f64]) -> Option<Vec<f64>> {
    c.running()
        .then(|| candidate::values(&c.tr, trained(c.tr.cfg), identity))
}

/// Bitwise equality of two f64 vectors.
fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Everything measured during the replay.
#[derive(Default)]
struct Measured {
    gaps: Vec<f64>,
    external: Series,
    candidates: BTreeMap<Candidate, Series>,
    /// The enclosure's lower bounds per record (`None` where the quantity is not
    /// recorded).
    ball: BTreeMap<Quantity, Vec<Option<Pending>>>,
    scales: BTreeMap<Quantity, Vec<Wide>>,
    ball_scales: BTreeMap<Quantity, Vec<Wide>>,
    stopped_at: BTreeMap<Candidate, usize>,
    moved: BTreeMap<Candidate, Vec<bool>>,
    last_trained: BTreeMap<Candidate, Vec<f64>>,
    bounds: DenseBounds,
    enclosed: std::collections::BTreeSet<Quantity>,
    /// The twin's trained parameter (p; q in W-mode) in f64 at each record where the
    /// external records it.
    twin_trained: Vec<Option<Vec<f64>>>,
    /// The twin's method: the span step, or the direct step where the optimizer needs
    /// it.
    twin_method: Method,
}

/// The factors a constant scale of the run's update may come from (`Errors::scales`):
/// the step size, and each other scale the optimizer has.
fn step_scales(o: &crate::config::Optimizer) -> Vec<&'static str> {
    let mut s = vec!["the step size"];
    if o.kind.is_adam() {
        s.push("the bias correction (lr / (1 - beta1^t))");
    }
    if o.clip_norm.is_some() {
        s.push("the clip threshold");
    }
    if !o.schedule.is_constant() {
        s.push("the schedule's factor");
    }
    s
}

/// Whether a constant factor in the gradient scales the update (`Errors::gradient_factor`):
/// not for Adam and AdamW (invariant to it up to eps); for a clipped run only where
/// clipping was not active.
fn gradient_factor(o: &crate::config::Optimizer) -> Option<&'static str> {
    if o.kind.is_adam() {
        None
    } else if o.clip_norm.is_some() {
        Some(" (where clipping was not active)")
    } else {
        Some("")
    }
}

/// The running maximum of each part's norm.
fn update_scales(scales: &mut Vec<Wide>, norms: &[Wide]) {
    if scales.is_empty() {
        *scales = norms.to_vec();
    } else {
        for (s, n) in scales.iter_mut().zip(norms) {
            *s = s.max(*n);
        }
    }
}

/// Replay `ext` (already checked against `cfg`) in the twin, the candidates and the
/// enclosure, and judge it.
pub fn judge(
    cfg: &Config,
    data: &Dataset,
    ext: &External,
    opts: Options,
    progress: &mut dyn FnMut(u64),
) -> Result<Report> {
    require(cfg, "judge", &[Capability::JudgeReplay])?;
    let twin = Trainer::with_method(
        cfg,
        data,
        Mpfr::truth(opts.prec)?,
        Formulation::Stable,
        Method::Span,
    )?;
    // the enclosure runs only where it encloses a recorded quantity (not for W alone)
    let enclosed = ext.series.keys().any(|&q| enclosure::encloses(cfg, q));
    let ball = match opts.enclosure {
        Some(p) if enclosed => Some(Replay::span(cfg, data, Ball::new(p)?)?),
        _ => None,
    };
    // the naive candidates only where the config has them (not for [factorised])
    let not_run = candidate::not_run(cfg);
    let naive = not_run.is_empty();
    let run: Vec<Candidate> = Candidate::ALL
        .into_iter()
        .filter(|c| not_run.iter().all(|n| n.candidate != *c))
        .collect();
    let cands = (
        Replay::new(cfg, data, F64, Formulation::Stable)?,
        (
            naive
                .then(|| Replay::new(cfg, data, F64, Formulation::Naive))
                .transpose()?,
            (
                Replay::new(cfg, data, F32, Formulation::Stable)?,
                naive
                    .then(|| Replay::new(cfg, data, F32, Formulation::Naive))
                    .transpose()?,
            ),
        ),
    );
    let params = Params::init(cfg);
    let w0 = params
        .w
        .as_ref()
        .map(|w| w.as_slice().expect("standard layout"));
    let p0 = params.p.as_slice().expect("contiguous");
    let identity: Vec<f64> = if ext.series.contains_key(&Quantity::W) && w0.is_none() {
        (0..cfg.d * cfg.d)
            .map(|k| f64::from(u8::from(k.is_multiple_of(cfg.d + 1))))
            .collect()
    } else {
        Vec::new()
    };
    let parts: BTreeMap<Quantity, Vec<Range<usize>>> = ext
        .series
        .keys()
        .map(|&q| (q, measure::parts(q, cfg)))
        .collect();
    // per quantity, per record: the index of its recorded value (sparser quantities
    // are measured, in the external and the candidates alike, only where recorded)
    let index: BTreeMap<Quantity, Vec<Option<usize>>> = ext
        .series
        .keys()
        .map(|&q| (q, ext.value_index(q)))
        .collect();
    let mut m = Measured::default();
    let last = ext.steps[ext.steps.len() - 1];
    let mut lockstep = (twin, (ball, cands));
    drive(&mut lockstep, last, |(b, (ball, cands)), event| {
        if event == Event::Update {
            progress(b.step);
            return Ok(Control::Continue);
        }
        let k = m.gaps.len();
        if ext.steps[k] != b.step {
            return Ok(Control::Continue);
        }
        m.gaps.push(
            b.samples
                .iter()
                .map(|t| t.softmax.gap.to_f64())
                .fold(0.0, f64::max),
        );
        let (c0, (c1, (c2, c3))) = cands;
        let twin = Twin {
            b,
            w0,
            p0,
            p: OnceCell::new(),
        };
        for (&q, series) in &ext.series {
            let Some(i) = index[&q][k] else {
                // not recorded here: a placeholder the report skips (`Errors::recorded`)
                let absent = Pending {
                    rel: f64::NAN,
                    zero_ref: Vec::new(),
                };
                m.external.entry(q).or_default().push(absent.clone());
                for &c in &run {
                    m.candidates
                        .entry(c)
                        .or_default()
                        .entry(q)
                        .or_default()
                        .push(absent.clone());
                }
                if ball.as_ref().is_some_and(|b| b.running()) && enclosure::encloses(cfg, q) {
                    m.ball.entry(q).or_default().push(None);
                }
                continue;
            };
            let parts = &parts[&q];
            let (reference, bound) = twin.reference(q);
            if let Some(bound) = bound {
                let slot = match q {
                    Quantity::W => &mut m.bounds.w,
                    _ => &mut m.bounds.q,
                };
                *slot = Some(slot.unwrap_or(0.0).max(bound.relative()));
            }
            let norms = measure::norms(&reference, parts);
            update_scales(m.scales.entry(q).or_default(), &norms);
            let values = &series.values[i];
            let dist = measure::distances(&reference, parts, values);
            m.external
                .entry(q)
                .or_default()
                .push(measure::pending(&dist, &norms));
            // (None: the candidate does not run; Some(None): it has stopped)
            let measured = [
                Some(measure_candidate(c0, q, &reference, parts, &identity)),
                c1.as_ref()
                    .map(|c| measure_candidate(c, q, &reference, parts, &identity)),
                Some(measure_candidate(c2, q, &reference, parts, &identity)),
                c3.as_ref()
                    .map(|c| measure_candidate(c, q, &reference, parts, &identity)),
            ];
            for (c, dist) in Candidate::ALL.into_iter().zip(measured) {
                let Some(dist) = dist else { continue };
                let p = match dist {
                    Some(dist) => measure::pending(&dist, &norms),
                    None => {
                        m.stopped_at.entry(c).or_insert(k);
                        Pending {
                            rel: f64::NAN,
                            zero_ref: Vec::new(),
                        }
                    }
                };
                m.candidates
                    .entry(c)
                    .or_default()
                    .entry(q)
                    .or_default()
                    .push(p);
            }
            if let Some(ball) = ball.as_ref().filter(|b| b.running())
                && let Some(iv) = enclosure::intervals(&ball.tr, q)
            {
                m.enclosed.insert(q);
                let (lo, hi): (Vec<Wide>, Vec<Wide>) = parts
                    .iter()
                    .map(|p| enclosure::bounds(&iv, p.clone(), values))
                    .unzip();
                update_scales(m.ball_scales.entry(q).or_default(), &hi);
                // parts whose twin value is zero are scaled as the errors are
                let mut pend = Pending::default();
                for (i, ((l, h), n)) in lo.iter().zip(&hi).zip(&norms).enumerate() {
                    if n.is_zero() {
                        pend.zero_ref.push((i, *l));
                    } else {
                        pend.rel = pend.rel.max(l.ratio(*h));
                    }
                }
                m.ball.entry(q).or_default().push(Some(pend));
            }
        }
        let tq = trained(cfg);
        m.twin_trained
            .push(index.get(&tq).and_then(|i| i[k]).map(|_| {
                let v = match tq {
                    Quantity::Q => b.q(),
                    Quantity::P => twin.p().to_vec(),
                    _ => b.quantity(tq).unwrap_or_default(),
                };
                v.iter().map(Float::to_f64).collect()
            }));
        // (None: the candidate does not run)
        let moved = [
            Some(trained_values(c0, &identity)),
            c1.as_ref().map(|c| trained_values(c, &identity)),
            Some(trained_values(c2, &identity)),
            c3.as_ref().map(|c| trained_values(c, &identity)),
        ];
        for (c, now) in Candidate::ALL.into_iter().zip(moved) {
            let Some(now) = now else { continue };
            let changed = match (&now, m.last_trained.get(&c)) {
                (Some(now), Some(before)) => !same_bits(now, before),
                _ => false,
            };
            m.moved.entry(c).or_default().push(changed);
            if let Some(now) = now {
                m.last_trained.insert(c, now);
            }
        }
        Ok(Control::Continue)
    })?;
    let (twin, (ball, cands)) = lockstep;
    m.twin_method = twin.method();
    let (c0, (c1, (c2, c3))) = cands;
    let done = [
        Some((c0.absorption, c0.stopped)),
        c1.map(|c| (c.absorption, c.stopped)),
        Some((c2.absorption, c2.stopped)),
        c3.map(|c| (c.absorption, c.stopped)),
    ];
    let (mut absorption, mut stops) = (BTreeMap::new(), BTreeMap::new());
    for (c, d) in Candidate::ALL.into_iter().zip(done) {
        if let Some((a, s)) = d {
            absorption.insert(c, a);
            if let Some(s) = s {
                stops.insert(c, s);
            }
        }
    }
    Ok(assemble(cfg, ext, opts, m, absorption, stops, ball))
}

/// Per record: the external's update of its trained parameter `tq` from the record
/// before against the twin's ([`attribute::Scaled`]), where both records hold it and
/// are one update apart.
fn scaled_updates(
    ext: &External,
    tq: Quantity,
    twin: &[Option<Vec<f64>>],
) -> Vec<Option<attribute::Scaled>> {
    let steps = &ext.steps;
    let Some(series) = ext.series.get(&tq) else {
        return vec![None; steps.len()];
    };
    let index = ext.value_index(tq);
    (0..steps.len())
        .map(|k| {
            if k == 0 || steps[k - 1] + 1 != steps[k] {
                return None;
            }
            let (a, b) = (index[k - 1]?, index[k]?);
            let (ta, tb) = (twin[k - 1].as_ref()?, twin[k].as_ref()?);
            attribute::Scaled::of(&series.values[a], &series.values[b], ta, tb)
        })
        .collect()
}

/// Resolve every pending error against its scales.
fn resolve(
    series: &Series,
    scales: &BTreeMap<Quantity, Vec<Wide>>,
) -> BTreeMap<Quantity, Vec<f64>> {
    series
        .iter()
        .map(|(q, v)| {
            let s = &scales[q];
            (*q, v.iter().map(|p| p.resolve(s)).collect())
        })
        .collect()
}

/// The report from the measurements.
fn assemble(
    cfg: &Config,
    ext: &External,
    opts: Options,
    m: Measured,
    absorption: BTreeMap<Candidate, Absorption>,
    stops: BTreeMap<Candidate, (u64, String)>,
    ball: Option<Replay<'_, Ball>>,
) -> Report {
    let steps = ext.steps.clone();
    // per quantity, per record: the index of its value there (None: not recorded)
    let index: BTreeMap<Quantity, Vec<Option<usize>>> = ext
        .series
        .keys()
        .map(|&q| (q, ext.value_index(q)))
        .collect();
    let has = |q: &Quantity, k: usize| index[q][k].is_some();
    let external = resolve(&m.external, &m.scales);
    let candidates: BTreeMap<Candidate, BTreeMap<Quantity, Vec<f64>>> = m
        .candidates
        .iter()
        .map(|(c, s)| (*c, resolve(s, &m.scales)))
        .collect();
    let errs = Errors {
        steps: steps.clone(),
        gaps: m.gaps.clone(),
        external,
        candidates,
        stopped_at: m.stopped_at.clone(),
        zero_level: 2f64.powi(32 - opts.prec as i32),
        entries: ext
            .series
            .keys()
            .map(|&q| (q, q.shape(cfg).iter().product()))
            .collect(),
        dtype: ext.header.dtype,
        nonfinite: ext
            .series
            .iter()
            .map(|(&q, s)| {
                let bad = index[&q]
                    .iter()
                    .map(|i| i.is_some_and(|i| s.values[i].iter().any(|x| !x.is_finite())))
                    .collect();
                (q, bad)
            })
            .collect(),
        recorded: ext
            .series
            .iter()
            .filter(|(_, s)| s.steps.is_some())
            .map(|(&q, _)| (q, index[&q].iter().map(Option::is_some).collect()))
            .collect(),
        mode: cfg.mode,
        q_inputs: q_inputs(cfg),
        trained: trained(cfg),
        scaled: scaled_updates(ext, trained(cfg), &m.twin_trained),
        scales: step_scales(&cfg.optimizer),
        gradient_factor: gradient_factor(&cfg.optimizer),
    };
    // the external's trained parameter unchanged (bitwise) between consecutive records
    let tq = trained(cfg);
    // (recorded at both: at records k - 1 and k)
    let frozen: Vec<bool> = (0..steps.len())
        .map(|k| {
            k > 0
                && ext
                    .series
                    .get(&tq)
                    .is_some_and(|s| match (index[&tq][k - 1], index[&tq][k]) {
                        (Some(a), Some(b)) => same_bits(&s.values[b], &s.values[a]),
                        _ => false,
                    })
        })
        .collect();
    let (fits, diagnosis) = attribute::attribute(&errs, &absorption, &stops, &frozen, &m.moved);
    let mut resolution: BTreeMap<Quantity, f64> = BTreeMap::new();
    for &c in errs
        .candidates
        .keys()
        .filter(|c| c.dtype() == ext.header.dtype)
    {
        for (q, env) in errs.envelopes(c) {
            let last = env.iter().rev().copied().find(|e| !e.is_nan());
            if let Some(e) = last {
                let r = resolution.entry(q).or_insert(0.0);
                *r = r.max(FACTOR * e);
            }
        }
    }
    // lower bounds, stepped down past the ratio's rounding (NaN where not recorded:
    // a bound is never NaN)
    let lower: BTreeMap<Quantity, Vec<f64>> = m
        .ball
        .iter()
        .map(|(q, v)| {
            let lb = v
                .iter()
                .map(|p| {
                    p.as_ref().map_or(f64::NAN, |p| {
                        p.resolve(&m.ball_scales[q]).next_down().max(0.0)
                    })
                })
                .collect();
            (*q, lb)
        })
        .collect();
    let proof = ball.map(|ball| {
        let dtype_cands: Vec<Candidate> = errs
            .candidates
            .keys()
            .copied()
            .filter(|c| c.dtype() == ext.header.dtype)
            .collect();
        let envs: Vec<BTreeMap<Quantity, Vec<f64>>> =
            dtype_cands.iter().map(|c| errs.envelopes(*c)).collect();
        let mut proved = Vec::new();
        for k in 0..steps.len() {
            for (q, lb) in &lower {
                let Some(l) = lb.get(k).filter(|l| !l.is_nan()) else {
                    continue;
                };
                let env = envs
                    .iter()
                    .map(|e| e[q][k])
                    .filter(|v| !v.is_nan())
                    .fold(f64::NAN, f64::max);
                if env.is_nan() {
                    continue;
                }
                if *l > FACTOR * env {
                    proved.push(Proved {
                        step: steps[k],
                        quantity: *q,
                        lower_bound: *l,
                        limit: FACTOR * env,
                    });
                }
            }
        }
        let largest = proved
            .iter()
            .max_by(|a, b| (a.lower_bound / a.limit).total_cmp(&(b.lower_bound / b.limit)))
            .cloned();
        Proof {
            prec_bits: ball.tr.ar.prec(),
            enclosed: m.enclosed.iter().copied().collect(),
            first: proved.first().cloned(),
            largest,
            count: proved.len(),
            stopped: ball.stopped,
        }
    });
    let dtype = ext.header.dtype;
    let eps = dtype.eps();
    let mut quantities = BTreeMap::new();
    for (&q, e) in &errs.external {
        // the records where q is recorded
        let own: Vec<(usize, f64)> = e
            .iter()
            .copied()
            .enumerate()
            .filter(|&(k, _)| has(&q, k))
            .collect();
        let max = own.iter().map(|&(_, x)| x).fold(0.0, f64::max);
        let mean = own.iter().map(|&(_, x)| x).sum::<f64>() / own.len() as f64;
        quantities.insert(
            q,
            Stats {
                max_rel_err: max,
                mean_rel_err: mean,
                max_eps: max / eps,
                mean_eps: mean / eps,
                first_over_tol: own
                    .iter()
                    .find(|&&(_, x)| exceeds(x, opts.tol))
                    .map(|&(k, _)| steps[k]),
            },
        );
    }
    let rows: Vec<Row> = (0..steps.len())
        .map(|k| Row {
            step: steps[k],
            max_gap: m.gaps[k],
            rel_err: errs
                .external
                .iter()
                .filter(|(q, _)| has(q, k))
                .map(|(q, e)| (*q, e[k]))
                .collect(),
            candidates: errs
                .candidates
                .iter()
                .map(|(c, s)| {
                    let at = s.iter().filter(|(q, _)| has(q, k));
                    (*c, at.map(|(q, e)| (*q, e[k])).collect())
                })
                .collect(),
            // an enclosure that stopped partway has no bounds past its last record
            lower_bound: lower
                .iter()
                .filter(|(q, _)| has(q, k))
                .filter_map(|(q, l)| l.get(k).map(|v| (*q, *v)))
                .collect(),
        })
        .collect();
    // the verdict names the quantity the diagnosis names where both are at one step and
    // it is past the tolerance, else the first past it in report order (as the
    // diagnosis orders its quantities)
    let dep = diagnosis.departure.as_ref();
    let first_over_tol = rows.iter().find_map(|r| {
        let past = |q: &Quantity| r.rel_err.get(q).is_some_and(|&e| exceeds(e, opts.tol));
        let q = dep
            .filter(|d| d.step == r.step)
            .map(|d| d.quantity)
            .filter(|q| past(q))
            .or_else(|| r.rel_err.keys().copied().find(|q| past(q)))?;
        Some(OverTol {
            step: r.step,
            quantity: q,
            rel_err: r.rel_err[&q],
            score_gap: r.max_gap,
        })
    });
    let mut diagnosis = diagnosis;
    if let (Some(o), Some(d)) = (&first_over_tol, &diagnosis.departure)
        && o.step == d.step
        && o.quantity != d.quantity
    {
        // the departure's first quantity is within the tolerance: say which one is not
        let note = format!(
            " (`{}` is within the tolerance {:e} at step {}; the first quantity past it there is `{}`, the verdict's)",
            d.quantity, opts.tol, o.step, o.quantity
        );
        diagnosis.summary.push_str(&note);
    }
    Report {
        implementation: ext.header.implementation.clone(),
        dtype,
        eps,
        prec_bits: opts.prec,
        twin_method: m.twin_method,
        tolerance: opts.tol,
        steps_compared: rows.len(),
        last_step: *steps.last().expect("steps not empty"),
        within_tolerance: first_over_tol.is_none(),
        first_over_tol,
        quantities,
        envelope_factor: FACTOR,
        resolution,
        candidates: fits,
        not_run: candidate::not_run(cfg),
        diagnosis,
        proof,
        dense_bounds: m.bounds,
        rows,
    }
}

/// `text` with every control character (newlines, carriage returns, escapes) written
/// as its Rust escape, so that a name from a file cannot forge report lines.
pub fn escape_controls(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A ratio for tables: `-` for none, else 2 significant digits.
fn ratio_text(r: f64) -> String {
    if r.is_nan() {
        "-".into()
    } else {
        format!("{r:.1e}")
    }
}

impl std::fmt::Display for Report {
    /// The readable tables and the diagnosis of `tokensel judge`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "tokensel judge: {} ({}) vs {}-bit twin (stable, {}), {} recorded steps up to {}, tolerance {:e}",
            self.implementation
                .as_deref()
                .map_or("external trajectory".into(), escape_controls),
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
        match &self.first_over_tol {
            None => writeln!(
                f,
                "\n  verdict: AGREES: every recorded quantity within {:e} of the twin",
                self.tolerance
            )?,
            Some(o) => writeln!(
                f,
                "\n  verdict: DIFFERS: first past {:e} at step {} in `{}` (rel err {:.3e}, score gap {:.2})",
                self.tolerance, o.step, o.quantity, o.rel_err, o.score_gap
            )?,
        }
        writeln!(
            f,
            "\n  candidate replays (the external follows one while its error stays within {}x the replay's largest deviation so far):",
            self.envelope_factor
        )?;
        writeln!(
            f,
            "  {:<12}{:>10}  {:<36}{:<36}explains",
            "candidate",
            "holds to",
            "first exit: step, quantity, x limit",
            "too coarse: step, quantity, x ext"
        )?;
        for fit in &self.candidates {
            let holds = match fit.holds {
                0 => "-".to_string(),
                h => self.rows[h - 1].step.to_string(),
            };
            let exit = fit.exit.as_ref().map_or("-".into(), |x| {
                format!(
                    "{}, {}, {}",
                    x.step,
                    x.quantity,
                    ratio_text(x.rel_err / x.limit)
                )
            });
            let coarse = fit.coarse.as_ref().map_or("-".into(), |c| {
                let why = match c.reason {
                    Coarseness::BelowDtype => format!(
                        "{}, ext < {BELOW_DTYPE:e} u",
                        ratio_text(c.candidate_err / c.external_err)
                    ),
                    Coarseness::Larger => ratio_text(c.candidate_err / c.external_err),
                    Coarseness::Exact => "ext exact, it not".into(),
                };
                format!("{}, {}, {why}", c.step, c.quantity)
            });
            let stopped = fit
                .stopped
                .as_ref()
                .map_or(String::new(), |(s, _)| format!(" (stopped at step {s})"));
            writeln!(
                f,
                "  {:<12}{holds:>10}  {exit:<36}{coarse:<36}{}{stopped}",
                fit.candidate,
                if fit.explains { "yes" } else { "no" }
            )?;
        }
        for n in &self.not_run {
            writeln!(f, "  {:<12}not run: {}", n.candidate, n.reason)?;
        }
        if !self.resolution.is_empty() {
            let each: Vec<String> = self
                .resolution
                .iter()
                .map(|(q, r)| format!("{q} {r:.1e}"))
                .collect();
            writeln!(
                f,
                "  resolution: an error within {}x the {} replays' largest deviation passes as {} rounding; at the last record: {} (a fault whose effect stays below these is not seen)",
                self.envelope_factor,
                self.dtype.name(),
                self.dtype.name(),
                each.join(", ")
            )?;
        }
        writeln!(f, "\n  diagnosis: {}", self.diagnosis.summary)?;
        if let Some(p) = &self.proof {
            let enclosed: Vec<&str> = p.enclosed.iter().map(|q| q.name()).collect();
            match &p.first {
                None => writeln!(
                    f,
                    "  proof ({}-bit ball enclosure of {}): no value proved wrong",
                    p.prec_bits,
                    enclosed.join(", ")
                )?,
                Some(x) => writeln!(
                    f,
                    "  proof ({}-bit ball enclosure of {}): PROVED WRONG at step {} in `{}`: the error is at least {:.3e} (certified), {:.1e} times what {} rounding explains; {} values proved wrong",
                    p.prec_bits,
                    enclosed.join(", "),
                    x.step,
                    x.quantity,
                    x.lower_bound,
                    x.lower_bound / x.limit,
                    self.dtype.name(),
                    p.count
                )?,
            }
            if let Some((s, why)) = &p.stopped {
                writeln!(f, "  (the enclosure stopped at step {s}: {why})")?;
            }
        } else {
            writeln!(
                f,
                "  proof: none (the enclosure did not run: --no-enclosure, or no recorded quantity is enclosed; W and a dense q are not)"
            )?;
        }
        let b = &self.dense_bounds;
        if b.q.is_some() || b.w.is_some() {
            let show = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.1e}"));
            writeln!(
                f,
                "  dense references (double-double rebuilds of the twin's factors): relative error at most q {}, W {}",
                show(b.q),
                show(b.w)
            )?;
        }
        Ok(())
    }
}
