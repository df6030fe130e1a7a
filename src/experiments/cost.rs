//! Cost of a gradient step: the f64 and float32 trainers (stable and naive softmax
//! gradient: the judge's candidate replays) vs the MPFR twin at several precisions, and
//! the ball trainer (certified runs, span step) at the precisions asked for
//! (`tokensel cost`). A measurement, not a test: the numbers depend on the machine.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::analysis::compare;
use crate::arith::{Arith, Ball, F32, F64, Kind, Mpfr};
use crate::config::{Config, Formulation, MAX_CLASSES, Method, ModelKind, ModelSpec};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::model::caps::{Capability, caps};
use crate::train::drive::{Control, Event, drive};
use crate::train::plan::CostModel;
use crate::train::{Trainer, resolve_method};

/// One row of the cost table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The arithmetic: `f64`, `f32`, `predictor`, `mpfr` or `ball`.
    pub trainer: Kind,
    /// Its precision in bits.
    pub prec_bits: u32,
    /// The step: `direct` or `span`.
    pub method: Method,
    /// The softmax gradient: `stable` or `naive` (naive: direct step only).
    pub formulation: Formulation,
    /// Seconds to build the trainer (the span precompute; head values; conversions).
    pub setup_seconds: f64,
    /// Median seconds per step (forward, backward, update), wall clock.
    pub seconds_per_step: f64,
    /// Median CPU seconds per step: the process's CPU time over the same blocks (every
    /// thread's; with `RAYON_NUM_THREADS=1` the cost on one thread).
    pub cpu_per_step_s: f64,
    /// Ratio of the CPU time per step (`cpu_per_step_s`) to the f64 direct step's in the
    /// config's formulation (to the first row's when that was not measured): the cost in
    /// the CPU time the steps used, independent of the machine's load (a wall-time ratio
    /// is not: other processes stretch the rows measured while they run).
    pub ratio_to_f64: f64,
    /// Where this row's trajectory leaves the tolerance against the twin
    /// (`tokensel cost --follow N`; absent without it): a [`Follow`] for the f64 and f32
    /// rows, `null` for the rows it does not apply to (the twin, the predictor, the
    /// balls: they are the high-precision side, not a hardware arithmetic that follows
    /// it).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub follow: Option<Option<Follow>>,
}

/// A key that is present: `null` is `Some(None)` (absent: `None`, by `default`).
fn present<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Option<Follow>>, D::Error> {
    Option::<Follow>::deserialize(d).map(Some)
}

/// What `cost --follow` compares: the steps, the twin's precision, the tolerance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FollowOptions {
    /// Steps of the compared run (its `steps`).
    pub steps: u64,
    /// The twin's precision in bits (a truth twin: `Mpfr::truth`).
    pub prec: u32,
    /// Relative error that counts as leaving the twin.
    pub tol: f64,
}

impl FollowOptions {
    /// `compare`'s options for this follow: the span twin at `prec` (compare's
    /// default), no predictor, no balls.
    fn compare(&self) -> compare::Options {
        compare::Options {
            prec: self.prec,
            tol: self.tol,
            predictor: false,
            predictor_steps: Some(0),
            twin_method: Method::Span,
            certify: None,
        }
    }

    /// `cfg` run for `steps` steps in `form` and `method`.
    fn config(&self, cfg: &Config, form: Formulation, method: Method) -> Config {
        Config {
            steps: self.steps,
            formulation: form,
            method,
            ..cfg.clone()
        }
    }

    /// Check, before any work, that every follow run can be made: at least one step
    /// and at most the config's limit, compare's options valid on each hardware row's
    /// config (a truth precision, a tolerance, the memory limit, compare's
    /// capabilities).
    pub fn check(&self, cfg: &Config, methods: &[Method]) -> Result<()> {
        if self.steps == 0 || self.steps > crate::config::MAX_STEPS {
            return Err(Error::argument(
                "--follow",
                format!(
                    "must lie in 1..={}, got {}",
                    crate::config::MAX_STEPS,
                    self.steps
                ),
            ));
        }
        for (form, m) in hardware_steps(cfg, methods) {
            self.compare().check(&self.config(cfg, form, m))?;
        }
        Ok(())
    }
}

/// Where a hardware row's trajectory first leaves the tolerance against the twin:
/// `compare`'s report ([`compare::compare_in`]) of that arithmetic, formulation and
/// method against the MPFR twin over [`Follow::steps`] steps, with its gate at the
/// tolerance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Follow {
    /// Steps compared.
    pub steps: u64,
    /// The twin's precision in bits.
    pub prec_bits: u32,
    /// The tolerance.
    #[serde(with = "crate::io::nonfinite")]
    pub tolerance: f64,
    /// The first step at which a compared quantity's relative error passed the
    /// tolerance, that quantity and its error (compare's `gate.first`; the earliest of
    /// its `first_exceed`); `null`: the row followed the twin over all the steps.
    pub first_exceed: Option<compare::Exceedance>,
    /// Largest relative error over the compared quantities and steps (compare's
    /// `max_rel_err`, the largest of them).
    #[serde(with = "crate::io::nonfinite")]
    pub max_rel_err: f64,
    /// Where the comparison ended early because a trainer stopped (compare's
    /// `stopped`); absent when it ran every step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<compare::Stopped>,
}

impl Follow {
    /// The text table's cell: `step S (QUANTITY 1.2e-7)` or `all N (max 3.4e-12)`.
    fn cell(&self) -> String {
        let stop = self
            .stopped
            .as_ref()
            .map_or(String::new(), |s| format!(", stopped at {}", s.last_step));
        match &self.first_exceed {
            Some(e) => format!(
                "step {} ({} {:.1e}){stop}",
                e.step,
                e.quantity.name(),
                e.rel_err
            ),
            None => format!("all {} (max {:.1e}){stop}", self.steps, self.max_rel_err),
        }
    }
}

/// Run `compare`'s lockstep ([`compare::compare_in`]) of `hw` in `form` and `method`
/// against the twin of `opts` and reduce its report to a [`Follow`].
pub fn follow<A: Arith>(
    cfg: &Config,
    data: &Dataset,
    hw: A,
    (form, method): (Formulation, Method),
    opts: FollowOptions,
) -> Result<Follow> {
    let c = opts.config(cfg, form, method);
    let r = compare::compare_in(&c, data, hw, opts.compare(), Some(opts.tol), &mut |_| {})?;
    Ok(Follow {
        steps: opts.steps,
        prec_bits: opts.prec,
        tolerance: opts.tol,
        first_exceed: r.gate.and_then(|g| g.first),
        max_rel_err: r.max_rel_err.values().copied().fold(0.0, f64::max),
        stopped: r.stopped,
    })
}

/// Fill every row's [`Row::follow`]: the f64 and f32 rows' [`follow`] in their
/// formulation and method, `None` (not applicable) for the others.
pub fn follow_rows(
    cfg: &Config,
    report: &mut Report,
    opts: FollowOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    let data = Dataset::generate(cfg);
    for row in &mut report.rows {
        let step = (row.formulation, row.method);
        let name = format!(
            "{} {} {:?} against mpfr-{} over {} steps",
            row.trainer.name(),
            row.method.name(),
            row.formulation,
            opts.prec,
            opts.steps
        );
        row.follow = Some(match row.trainer {
            Kind::F64 => {
                progress(&name);
                Some(follow(cfg, &data, F64, step, opts)?)
            }
            Kind::F32 => {
                progress(&name);
                Some(follow(cfg, &data, F32, step, opts)?)
            }
            _ => None,
        });
    }
    Ok(())
}

/// The cost report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// n, T, d of the measured config.
    pub n: usize,
    /// Tokens per sequence.
    pub tokens: usize,
    /// Dimension.
    pub d: usize,
    /// Floating-point operations of one direct f64 step (counted from the loops in
    /// `train/direct.rs`: the cost model's direct step, `train::plan`).
    pub flops_per_step: f64,
    /// The cost model `method = "auto"` decides by (`train::plan`), in flops.
    pub model: Model,
    /// The method `auto` picks for this config's f64 run.
    pub auto: Method,
    /// Achieved rate of the direct f64 step, GFLOP/s (`None` when it was not measured).
    pub f64_gflops: Option<f64>,
    /// The CPU model (`/proc/cpuinfo`'s first `model name`; `unknown` elsewhere) and the
    /// thread count the rows ran with.
    pub cpu: String,
    /// Worker threads (rayon) the steps could use.
    pub threads: usize,
    /// Rows: f64, then f32 (each stable in every method asked for, then naive on the
    /// direct step), then each precision in the config's formulation and every method.
    pub rows: Vec<Row>,
    /// The K-class model's rows (`tokensel cost --classes K,...`; absent without it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub multiclass: Vec<ClassRow>,
}

/// One row of the K-class table: the step of the K-class model of SPEC section 14 on
/// the config's sizes with T grown by K - 2 weakly relevant tokens ([`with_classes`]),
/// or of the binary model at that T ([`with_tokens`]: the baseline that isolates the
/// model's own cost from the larger T).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassRow {
    /// The model: `multiclass`, or `token-selection` (the binary baseline at this T).
    pub model: ModelKind,
    /// Number of classes K (2 for the binary model).
    pub classes: usize,
    /// Tokens per sequence T.
    pub tokens: usize,
    /// The arithmetic: `f64`, `predictor` or `mpfr`.
    pub trainer: Kind,
    /// Its precision in bits.
    pub prec_bits: u32,
    /// The step: `direct` or `span`.
    pub method: Method,
    /// Seconds to build the trainer.
    pub setup_seconds: f64,
    /// Median seconds per step, wall clock.
    pub seconds_per_step: f64,
    /// Median CPU seconds per step (every thread's).
    pub cpu_per_step_s: f64,
    /// Ratio of the CPU time per step to the config's own step's (the binary model at
    /// the config's T) in the same arithmetic, precision and method, stable formulation
    /// (`None` when that was not measured).
    pub ratio_to_binary: Option<f64>,
    /// A K-class row's ratio of CPU time per step to the binary model's at the same T in
    /// the same arithmetic, precision and method (`None` for the binary rows).
    pub ratio_to_same_t: Option<f64>,
}

/// The cost model's flops (an fma counts 2; `train::plan`), to hold against the
/// measured times.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// One direct step.
    pub direct_step: f64,
    /// One span step.
    pub span_step: f64,
    /// The span step's one-time precompute.
    pub span_setup: f64,
}

/// Flops of one direct f64 step (an fma counts 2): scores 2nTd, the gradient X^T c
/// 2nTd, the update 2d, plus with a dense W 4d^2 (p- or W-mode) or 6d^2 (joint: W g,
/// the rank-one update, W^T p); the cost model's direct step.
pub fn flops_per_step(cfg: &Config) -> f64 {
    CostModel::of(cfg).direct_step
}

/// `cfg` with the K-class model of SPEC section 14 (`[model] kind = "multiclass"`,
/// `classes = k`) on the same data sizes, except that each weakly relevant token of the
/// opposite class becomes one per other class: `layout.weak_opposite` is multiplied by
/// K - 1, so T grows by (K - 2) `weak_opposite` tokens (the balanced setting: T = K + 6).
/// The formulation is the stable one (the only one the K-class model has). Not
/// validated here: [`Config::validate`] checks K against [`MAX_CLASSES`] and d.
/// Saturating: an absurd K gives an absurd (invalid) layout, never a wrapped one.
pub fn with_classes(cfg: &Config, k: usize) -> Config {
    let mut c = cfg.clone();
    c.layout = cfg.layout.for_classes(k);
    c.model = ModelSpec {
        kind: ModelKind::Multiclass,
        classes: k,
        ..cfg.model
    };
    c.formulation = Formulation::Stable;
    c
}

/// The CPU model of this machine: `/proc/cpuinfo`'s first `model name`, or `unknown`.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// CPU seconds this process has used (all threads; `CLOCK_PROCESS_CPUTIME_ID`).
pub fn process_cpu_seconds() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec; the clock id is a constant of the platform.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    if rc != 0 {
        return f64::NAN;
    }
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Time one trainer: its setup, then the median over `reps` blocks of `block` steps;
/// with the method it ran (`auto` resolved).
fn time_steps<A: Arith>(
    cfg: &Config,
    data: &Dataset,
    ar: A,
    (form, method): (Formulation, Method),
    reps: usize,
    block: usize,
) -> Result<Timing> {
    let t0 = Instant::now();
    let mut tr = Trainer::with_method(cfg, data, ar, form, method)?;
    let setup = t0.elapsed().as_secs_f64();
    // `n` steps (forward, backward, update) through the driver
    let steps = |tr: &mut Trainer<'_, A>, n: usize| {
        let end = tr.step + n as u64;
        drive(tr, u64::MAX, |tr, event| {
            Ok(match event == Event::Update && tr.step == end {
                true => Control::Stop,
                false => Control::Continue,
            })
        })
    };
    steps(&mut tr, 1)?;
    let (mut wall, mut cpu) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    // a run that stops (normalised GD whose gradient leaves the arithmetic's range, a
    // non-finite value) is timed again from step 0: the block it stopped in is not
    // counted; a fresh trainer that stops within one block is the error
    let mut fresh = true;
    while wall.len() < reps {
        let (t0, c0) = (Instant::now(), process_cpu_seconds());
        match steps(&mut tr, block) {
            Ok(()) => {
                wall.push(t0.elapsed().as_secs_f64() / block as f64);
                cpu.push((process_cpu_seconds() - c0) / block as f64);
                fresh = false;
            }
            Err(Error::NormalizedStep { .. } | Error::NonFinite { .. }) if !fresh => {
                tr = Trainer::with_method(cfg, data, ar, form, method)?;
                steps(&mut tr, 1)?;
                fresh = true;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Timing {
        setup,
        wall: median(wall),
        cpu: median(cpu),
        method: tr.method(),
    })
}

/// Set every row's [`Row::ratio_to_f64`]: its CPU time per step over the f64 direct
/// step's in `form` (the first row's where that was not measured). CPU times, not wall
/// times: on a loaded machine the wall time of a row depends on what else ran.
fn set_ratios(rows: &mut [Row], form: Formulation) {
    let Some(first) = rows.first() else {
        return;
    };
    let f64_step = rows
        .iter()
        .find(|r| r.trainer == Kind::F64 && r.method == Method::Direct && r.formulation == form)
        .unwrap_or(first)
        .cpu_per_step_s;
    for r in rows {
        r.ratio_to_f64 = r.cpu_per_step_s / f64_step;
    }
}

/// What [`time_steps`] measured: set-up seconds, median wall and CPU seconds per step,
/// the method run.
struct Timing {
    setup: f64,
    wall: f64,
    cpu: f64,
    method: Method,
}

/// The (formulation, method) pairs of the hardware rows of `cfg`: stable in each of
/// `methods`, then naive on the direct step (the naive gradient has no span step; the
/// K-class model has only the stable formulation).
fn hardware_steps(cfg: &Config, methods: &[Method]) -> Vec<(Formulation, Method)> {
    let mut steps: Vec<(Formulation, Method)> =
        methods.iter().map(|m| (Formulation::Stable, *m)).collect();
    if caps(cfg).has(Capability::NaiveFormulation) && methods.iter().any(|m| *m != Method::Span) {
        steps.push((Formulation::Naive, Method::Direct));
    }
    steps
}

/// Most timed repetitions `measure` takes (of f64 blocks or of twin steps).
pub const MAX_REPS: usize = 100_000;

/// Check, before any work, that every trainer [`measure`] would build is valid (each
/// precision) and within the memory limit (each arithmetic, precision and method; the balls' span
/// step, which needs the stable formulation), and that the repetitions lie in
/// 1..=[`MAX_REPS`] (more: a size over a limit).
pub fn check(
    cfg: &Config,
    precs: &[u32],
    ball_precs: &[u32],
    methods: &[Method],
    reps: usize,
    twin_reps: usize,
) -> Result<()> {
    distinct("--precs", precs)?;
    distinct("--ball", ball_precs)?;
    for (field, n) in [("--reps", reps), ("--twin-reps", twin_reps)] {
        if n == 0 {
            return Err(Error::argument(field, "must be at least 1"));
        }
        if n > MAX_REPS {
            return Err(Error::TooLarge {
                field: field.into(),
                reason: format!("{n} repetitions, more than the limit of {MAX_REPS}"),
            });
        }
    }
    if let (Some(why), true) = (
        cfg.optimizer.span_refusal(cfg.n_train),
        methods.contains(&Method::Span),
    ) {
        return Err(Error::config("method", format!("the span step: {why}")));
    }
    if precs.is_empty() || methods.is_empty() {
        return Err(Error::argument(
            "--precs",
            "name at least one precision and one method",
        ));
    }
    for &p in ball_precs {
        Ball::new(p)?;
        if cfg.formulation == crate::config::Formulation::Naive {
            return Err(Error::config(
                "formulation",
                "the ball rows take the span step, which needs the stable formulation",
            ));
        }
        crate::train::check_memory(cfg, Kind::Ball, p, Method::Span)?;
    }
    for (form, m) in hardware_steps(cfg, methods) {
        let c = Config {
            formulation: form,
            ..cfg.clone()
        };
        crate::train::check_memory(&c, F64.kind(), 53, m)?;
        crate::train::check_memory(&c, F32.kind(), 24, m)?;
    }
    for &p in precs {
        let ar = Mpfr::for_prec(p)?;
        for &m in methods {
            crate::train::check_memory(cfg, ar.kind(), p, m)?;
        }
    }
    Ok(())
}

/// Time the f64 and the float32 trainers (`reps` blocks of 20 steps; stable in each of
/// `methods`, naive on the direct step) and, for each of `precs` (53 = the f64
/// predictor), the MPFR trainer (`twin_reps` single steps) in the config's formulation
/// and each of `methods`; then the ball trainer at each of `ball_precs` (`twin_reps`
/// single span steps: the step a certified run takes); the arguments are checked first
/// ([`check`]).
pub fn measure(
    cfg: &Config,
    precs: &[u32],
    ball_precs: &[u32],
    methods: &[Method],
    reps: usize,
    twin_reps: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<Report> {
    check(cfg, precs, ball_precs, methods, reps, twin_reps)?;
    let data = Dataset::generate(cfg);
    let mut rows: Vec<Row> = Vec::new();
    let mut push = |trainer: Kind, prec: u32, form, t: Timing| {
        rows.push(Row {
            trainer,
            prec_bits: prec,
            method: t.method,
            formulation: form,
            setup_seconds: t.setup,
            seconds_per_step: t.wall,
            cpu_per_step_s: t.cpu,
            ratio_to_f64: f64::NAN,
            follow: None,
        });
    };
    for (form, method) in hardware_steps(cfg, methods) {
        let name = |a: Kind| format!("{} {} {form:?}", a.name(), method.name());
        progress(&name(Kind::F64));
        let t = time_steps(cfg, &data, F64, (form, method), reps, 20)?;
        push(Kind::F64, 53, form, t);
        progress(&name(Kind::F32));
        let t = time_steps(cfg, &data, F32, (form, method), reps, 20)?;
        push(Kind::F32, 24, form, t);
    }
    for &prec in precs {
        let ar = Mpfr::for_prec(prec)?;
        for &method in methods {
            progress(&format!("{}-{prec} {}", ar.kind().name(), method.name()));
            let t = time_steps(cfg, &data, ar, (cfg.formulation, method), twin_reps, 1)?;
            push(ar.kind(), prec, cfg.formulation, t);
        }
    }
    for &prec in ball_precs {
        progress(&format!("ball-{prec} span"));
        let form = Formulation::Stable;
        let t = time_steps(
            cfg,
            &data,
            Ball::new(prec)?,
            (form, Method::Span),
            twin_reps,
            1,
        )?;
        push(Kind::Ball, prec, form, t);
    }
    rows.sort_by_key(|r| (r.trainer, r.prec_bits, r.formulation != Formulation::Stable));
    set_ratios(&mut rows, cfg.formulation);
    let direct = rows
        .iter()
        .find(|r| {
            r.trainer == Kind::F64 && r.method == Method::Direct && r.formulation == cfg.formulation
        })
        .map(|r| r.seconds_per_step);
    let flops = flops_per_step(cfg);
    let m = CostModel::of(cfg);
    Ok(Report {
        n: cfg.n_train,
        tokens: cfg.layout.tokens,
        d: cfg.d,
        flops_per_step: flops,
        model: Model {
            direct_step: m.direct_step,
            span_step: m.span_step,
            span_setup: m.span_setup,
        },
        auto: resolve_method(cfg, cfg.formulation, Kind::F64, 53, Method::Auto),
        f64_gflops: direct.map(|s| flops / s / 1e9),
        cpu: cpu_model(),
        threads: rayon::current_num_threads(),
        rows,
        multiclass: Vec::new(),
    })
}

/// Refuse a list that names a value twice (a table row would be timed and printed twice);
/// `flag` names the command-line argument.
fn distinct<T: Ord + Copy + std::fmt::Display>(flag: &str, values: &[T]) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    match values.iter().find(|v| !seen.insert(**v)) {
        None => Ok(()),
        Some(v) => Err(Error::argument(flag, format!("names {v} twice"))),
    }
}

/// Check, before any work, the K-class rows [`measure_classes`] would time: `cfg` is
/// the binary model (the K-class configs are derived from it), each K lies in
/// 2..=[`MAX_CLASSES`], each derived config ([`with_classes`]) is valid (d >= K) and
/// its f64 and twin trainers are within the memory limit in each of `methods`.
pub fn check_classes(
    cfg: &Config,
    classes: &[usize],
    precs: &[u32],
    methods: &[Method],
) -> Result<()> {
    if classes.is_empty() {
        return Ok(());
    }
    distinct("--classes", classes)?;
    if cfg.model.is_multiclass() {
        return Err(Error::argument(
            "--classes",
            "--classes derives the K-class model from the binary one; the config already \
             names the multi-class model (time it without --classes)",
        ));
    }
    for &k in classes {
        if !(2..=MAX_CLASSES).contains(&k) {
            return Err(Error::argument(
                "--classes",
                format!("K must lie in 2..={MAX_CLASSES}, got {k}"),
            ));
        }
        let c = with_classes(cfg, k);
        // the derived config's flaw is the flag's (the user's config is valid)
        c.validate().map_err(|e| match e {
            Error::InvalidConfig { field, reason } => Error::argument(
                "--classes",
                format!("K = {k} does not fit the config: `{field}`: {reason}"),
            ),
            e => e,
        })?;
        for &m in methods {
            crate::train::check_memory(&c, Kind::F64, 53, m)?;
            for &p in precs {
                crate::train::check_memory(&c, Mpfr::for_prec(p)?.kind(), p, m)?;
            }
        }
    }
    Ok(())
}

/// `cfg` (the binary model) with T = `tokens`, the extra tokens irrelevant (or, when
/// `tokens` is smaller, with fewer irrelevant tokens; saturating).
pub fn with_tokens(cfg: &Config, tokens: usize) -> Config {
    let mut c = cfg.clone();
    c.layout.irrelevant = (cfg.layout.irrelevant + tokens).saturating_sub(cfg.layout.tokens);
    c.layout.tokens = tokens;
    c
}

/// Time the K-class model ([`with_classes`]) for each of `classes`, and the binary
/// model at each new T ([`with_tokens`]; at the config's own T `binary`'s rows serve):
/// the f64 step (stable, `reps` blocks of 20 steps) and the MPFR trainer at each of
/// `precs` (`twin_reps` single steps), each in every one of `methods`. Ratios are to
/// `binary`'s rows (the config's own step, measured by [`measure`]) and, for the K-class
/// rows, to the binary rows of the same T; all of the same arithmetic, precision and
/// method. The arguments are checked first ([`check_classes`]).
#[allow(clippy::too_many_arguments)]
pub fn measure_classes(
    cfg: &Config,
    binary: &Report,
    classes: &[usize],
    precs: &[u32],
    methods: &[Method],
    reps: usize,
    twin_reps: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<ClassRow>> {
    check_classes(cfg, classes, precs, methods)?;
    let mut rows: Vec<ClassRow> = Vec::new();
    let mut configs: Vec<Config> = Vec::new();
    for &k in classes {
        let c = with_classes(cfg, k);
        let t = c.layout.tokens;
        let known = |c: &Config| !c.model.is_multiclass() && c.layout.tokens == t;
        if t != cfg.layout.tokens && !configs.iter().any(known) {
            configs.push(with_tokens(cfg, t));
        }
        configs.push(c);
    }
    for c in &configs {
        let data = Dataset::generate(c);
        let (k, t) = (c.model.classes, c.layout.tokens);
        let label = match c.model.kind {
            ModelKind::Multiclass => format!("K = {k}"),
            ModelKind::TokenSelection => format!("binary, T = {t}"),
            ModelKind::Encoder => format!("encoder, T = {t}"),
        };
        let mut push = |trainer: Kind, prec: u32, tm: Timing| {
            rows.push(ClassRow {
                model: c.model.kind,
                classes: k,
                tokens: t,
                trainer,
                prec_bits: prec,
                method: tm.method,
                setup_seconds: tm.setup,
                seconds_per_step: tm.wall,
                cpu_per_step_s: tm.cpu,
                ratio_to_binary: None,
                ratio_to_same_t: None,
            });
        };
        let stable = Formulation::Stable;
        for &method in methods {
            progress(&format!("{label}: f64 {}", method.name()));
            let tm = time_steps(c, &data, F64, (stable, method), reps, 20)?;
            push(Kind::F64, 53, tm);
        }
        for &prec in precs {
            let ar = Mpfr::for_prec(prec)?;
            for &method in methods {
                let name = format!("{label}: {}-{prec} {}", ar.kind().name(), method.name());
                progress(&name);
                let tm = time_steps(c, &data, ar, (stable, method), twin_reps, 1)?;
                push(ar.kind(), prec, tm);
            }
        }
    }
    set_class_ratios(binary, &mut rows);
    Ok(rows)
}

/// Set the K-class rows' ratios ([`ClassRow::ratio_to_binary`],
/// [`ClassRow::ratio_to_same_t`]): each row's CPU time per step over the binary step's
/// of the same trainer, bits and method, at the config's T (`binary`'s rows, stable
/// formulation) and at the row's own T (the binary rows among `rows`).
fn set_class_ratios(binary: &Report, rows: &mut [ClassRow]) {
    // the binary steps' CPU times by (T, trainer, bits, method): the config's own, then
    // the new T's (ratios of CPU time, as the binary table's)
    let mut base: Vec<(usize, Kind, u32, Method, f64)> = binary
        .rows
        .iter()
        .filter(|r| r.formulation == Formulation::Stable)
        .map(|r| {
            (
                binary.tokens,
                r.trainer,
                r.prec_bits,
                r.method,
                r.cpu_per_step_s,
            )
        })
        .collect();
    base.extend(
        rows.iter()
            .filter(|r| r.model == ModelKind::TokenSelection)
            .map(|r| (r.tokens, r.trainer, r.prec_bits, r.method, r.cpu_per_step_s)),
    );
    let find = |t: usize, r: &ClassRow| {
        base.iter()
            .find(|b| (b.0, b.1, b.2, b.3) == (t, r.trainer, r.prec_bits, r.method))
            .map(|b| r.cpu_per_step_s / b.4)
    };
    for r in rows.iter_mut() {
        r.ratio_to_binary = find(binary.tokens, r);
        if r.model == ModelKind::Multiclass {
            r.ratio_to_same_t = find(r.tokens, r);
        }
    }
}

impl std::fmt::Display for Report {
    /// The readable cost table of `tokensel cost`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = format!(
            "tokensel cost: one gradient step, n = {}, T = {}, d = {} ({:.3e} flops per direct f64 step{})\n  on {} ({} thread{}; CPU: the process's CPU time over all threads; the ratios are of CPU times)\n\n  {:<12}{:>6}{:>8}{:>8}{:>14}{:>16}{:>16}{:>14}\n",
            self.n,
            self.tokens,
            self.d,
            self.flops_per_step,
            self.f64_gflops
                .map_or(String::new(), |g| format!(", {g:.2} GFLOP/s achieved")),
            self.cpu,
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            "trainer",
            "bits",
            "method",
            "form",
            "setup",
            "time per step",
            "CPU per step",
            "CPU vs f64"
        );
        // the follow column (`--follow`): its title on the header line
        let follows = self.rows.iter().any(|r| r.follow.is_some());
        if follows {
            out.pop();
            out += "  follows the twin\n";
        }
        let shown = |t: f64| {
            if t < 1e-3 {
                format!("{:.1} us", t * 1e6)
            } else {
                format!("{:.2} ms", t * 1e3)
            }
        };
        for row in &self.rows {
            let form = match row.formulation {
                Formulation::Stable => "stable",
                Formulation::Naive => "naive",
            };
            out += &format!(
                "  {:<12}{:>6}{:>8}{form:>8}{:>12.3} s{:>16}{:>16}{:>14.3}",
                row.trainer,
                row.prec_bits,
                row.method,
                row.setup_seconds,
                shown(row.seconds_per_step),
                shown(row.cpu_per_step_s),
                row.ratio_to_f64
            );
            if follows {
                let cell = match &row.follow {
                    Some(Some(f)) => f.cell(),
                    _ => "\u{2014}".to_string(),
                };
                out += &format!("  {cell}");
            }
            out.push('\n');
        }
        let m = &self.model;
        out += &format!(
            "\n  cost model (flops): direct step {:.3e}, span step {:.3e}, span setup {:.3e}; auto runs {} for this config\n",
            m.direct_step, m.span_step, m.span_setup, self.auto
        );
        if let Some(f) = self.rows.iter().find_map(|r| r.follow.clone().flatten()) {
            out += &format!(
                "  follows the twin: compare's lockstep of the row's arithmetic, formulation and method against the MPFR twin at {} bits (span step) over {} steps: the first step at which a compared quantity's relative error passes {:e} (that quantity and error), or `all N` with the largest error; \u{2014}: the row is not a hardware arithmetic (the twin, the predictor, a ball)\n",
                f.prec_bits, f.steps, f.tolerance
            );
        }
        if !self.multiclass.is_empty() {
            out += &format!(
                "\n  the K-class model (SPEC section 14), n = {}, d = {}: T grown by K - 2 weakly relevant tokens (one per other class); the binary model at that T (irrelevant tokens added) as a baseline; ratios of the CPU time per step to the binary step above (T = {}) and to the binary step at the same T, in the same trainer, bits and method\n\n  {:<10}{:>4}  {:<12}{:>6}{:>8}{:>14}{:>16}{:>16}{:>14}{:>13}\n",
                self.n,
                self.d,
                self.tokens,
                "model",
                "T",
                "trainer",
                "bits",
                "method",
                "setup",
                "time per step",
                "CPU per step",
                "vs binary",
                "vs same T"
            );
            let ratio = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.3}"));
            for row in &self.multiclass {
                let model = match row.model {
                    ModelKind::Multiclass => format!("K = {}", row.classes),
                    ModelKind::TokenSelection => "binary".to_string(),
                    ModelKind::Encoder => "encoder".to_string(),
                };
                out += &format!(
                    "  {model:<10}{:>4}  {:<12}{:>6}{:>8}{:>12.3} s{:>16}{:>16}{:>14}{:>13}\n",
                    row.tokens,
                    row.trainer,
                    row.prec_bits,
                    row.method,
                    row.setup_seconds,
                    shown(row.seconds_per_step),
                    shown(row.cpu_per_step_s),
                    ratio(row.ratio_to_binary),
                    ratio(row.ratio_to_same_t),
                );
            }
        }
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row's cells end where their header ends: the trainer and method names are
    /// padded to their columns (not written at their own width).
    #[test]
    fn table_columns_line_up() {
        let row = |trainer, prec_bits, method| Row {
            trainer,
            prec_bits,
            method,
            formulation: Formulation::Stable,
            setup_seconds: 0.5,
            seconds_per_step: 2e-3,
            cpu_per_step_s: 3e-4,
            ratio_to_f64: 1.0,
            follow: None,
        };
        let r = Report {
            n: 20,
            tokens: 8,
            d: 2000,
            flops_per_step: 1.0,
            model: Model {
                direct_step: 1.0,
                span_step: 1.0,
                span_setup: 1.0,
            },
            auto: Method::Span,
            f64_gflops: None,
            cpu: "a CPU".into(),
            threads: 2,
            rows: vec![
                row(Kind::F64, 53, Method::Direct),
                row(Kind::Predictor, 53, Method::Span),
                row(Kind::Mpfr, 1024, Method::Direct),
                row(Kind::Ball, 128, Method::Span),
            ],
            multiclass: vec![],
        };
        let text = r.to_string();
        let lines: Vec<&str> = text.lines().collect();
        let header = lines.iter().find(|l| l.contains("trainer")).unwrap();
        let end_of = |line: &str, word: &str| line.find(word).unwrap() + word.len();
        let (bits, method) = (end_of(header, "bits"), end_of(header, "method"));
        let form = end_of(header, "form");
        let first = lines.iter().position(|l| l.starts_with("  f64 ")).unwrap();
        let rows = &lines[first..first + 4];
        assert_eq!(
            rows[0],
            "  f64             53  direct  stable       0.500 s         2.00 ms        300.0 us         1.000"
        );
        for (line, m) in rows.iter().zip(["direct", "span", "direct", "span"]) {
            assert!(
                line.starts_with("  f64 ")
                    || line.starts_with("  predictor ")
                    || line.starts_with("  mpfr ")
                    || line.starts_with("  ball "),
                "{line}"
            );
            assert_eq!(end_of(line, m), method, "{line}");
            assert_eq!(end_of(line, "stable"), form, "{line}");
            assert_eq!(line[..bits].trim_end().len(), bits, "{line}");
        }
        assert!(
            !text.contains("K-class"),
            "no K-class table without rows: {text}"
        );
    }

    /// The K-class table (`--classes`): its header after the binary table, every row's
    /// cells ending where their header ends, a ratio of `-` where the binary row was not
    /// measured; the JSON has the rows (and has no `multiclass` key without them).
    #[test]
    fn class_table_columns_line_up() {
        let row = |classes, trainer, prec_bits, method, ratio| ClassRow {
            model: ModelKind::Multiclass,
            classes,
            tokens: classes + 6,
            trainer,
            prec_bits,
            method,
            setup_seconds: 0.05,
            seconds_per_step: 2.1e-5,
            cpu_per_step_s: 2.5e-3,
            ratio_to_binary: ratio,
            ratio_to_same_t: ratio.map(|r| r / 2.0),
        };
        let mut r = Report {
            n: 20,
            tokens: 8,
            d: 2000,
            flops_per_step: 1.0,
            model: Model {
                direct_step: 1.0,
                span_step: 1.0,
                span_setup: 1.0,
            },
            auto: Method::Span,
            f64_gflops: None,
            cpu: "a CPU".into(),
            threads: 1,
            rows: vec![],
            multiclass: vec![],
        };
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.get("multiclass").is_none(), "{json}");
        let binary = ClassRow {
            model: ModelKind::TokenSelection,
            classes: 2,
            ratio_to_same_t: None,
            ..row(10, Kind::F64, 53, Method::Span, Some(3.0))
        };
        r.multiclass = vec![
            row(2, Kind::F64, 53, Method::Span, Some(1.25)),
            row(10, Kind::Mpfr, 256, Method::Span, Some(4.5)),
            row(10, Kind::Predictor, 53, Method::Direct, None),
            binary,
        ];
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["multiclass"][1]["classes"], 10);
        assert_eq!(json["multiclass"][1]["tokens"], 16);
        assert_eq!(json["multiclass"][1]["model"], "multiclass");
        assert_eq!(json["multiclass"][3]["model"], "token-selection");
        assert!(json["multiclass"][2]["ratio_to_binary"].is_null());
        assert!(json["multiclass"][3]["ratio_to_same_t"].is_null());
        let text = r.to_string();
        let lines: Vec<&str> = text.lines().collect();
        let title = lines.iter().position(|l| l.contains("K-class")).unwrap();
        assert!(
            lines[title]
                .contains("to the binary step above (T = 8) and to the binary step at the same T"),
            "{text}"
        );
        let header = lines[title + 2];
        let end_of = |line: &str, word: &str| line.find(word).unwrap() + word.len();
        let t = end_of(header, " T");
        let (bits, method) = (end_of(header, "bits"), end_of(header, "method"));
        let (vs, same) = (end_of(header, "vs binary"), end_of(header, "vs same T"));
        assert_eq!(
            lines[title + 3],
            "  K = 2        8  f64             53    span       0.050 s         21.0 us         2.50 ms         1.250        0.625"
        );
        for (line, model, m, ratios) in [
            (lines[title + 3], "K = 2", "span", ["1.250", "0.625"]),
            (lines[title + 4], "K = 10", "span", ["4.500", "2.250"]),
            (lines[title + 5], "K = 10", "direct", ["-", "-"]),
            (lines[title + 6], "binary", "span", ["3.000", "-"]),
        ] {
            assert!(line.starts_with(&format!("  {model} ")), "{line}");
            assert_eq!(line[..t].trim_end().len(), t, "{line}");
            assert_eq!(line[..bits].trim_end().len(), bits, "{line}");
            assert_eq!(end_of(line, m), method, "{line}");
            assert!(line[..vs].ends_with(ratios[0]), "{line}");
            assert_eq!(line.len(), same, "{line}");
            assert!(line.ends_with(ratios[1]), "{line}");
        }
        assert_eq!(lines.len(), title + 7, "{text}");
    }

    /// The ratios are of CPU times, not wall times: on a loaded machine (here the MPFR
    /// rows' wall times stretched to the f64 step's, as measured at load 10 where a
    /// 256-bit span step read 0.995x an f64 step) a row 6 times the f64 direct step's
    /// CPU time has ratio 6, and a K-class row twice its binary step's CPU time ratio 2,
    /// whatever the wall clock says. The binary rows fall back to the first row where no
    /// f64 direct row was measured.
    #[test]
    fn ratios_are_of_cpu_time() {
        let row = |trainer, method, wall: f64, cpu: f64| Row {
            trainer,
            prec_bits: if trainer == Kind::F64 { 53 } else { 256 },
            method,
            formulation: Formulation::Stable,
            setup_seconds: 0.0,
            seconds_per_step: wall,
            cpu_per_step_s: cpu,
            ratio_to_f64: f64::NAN,
            follow: None,
        };
        let mut rows = vec![
            row(Kind::F64, Method::Direct, 1e-4, 1e-4),
            row(Kind::F64, Method::Span, 4e-6, 2.5e-6),
            row(Kind::Mpfr, Method::Span, 0.995e-4, 6e-4),
        ];
        set_ratios(&mut rows, Formulation::Stable);
        let ratios: Vec<f64> = rows.iter().map(|r| r.ratio_to_f64).collect();
        assert_eq!(ratios, [1.0, 2.5e-6 / 1e-4, 6e-4 / 1e-4]);
        let mut span_only = rows[1..].to_vec();
        set_ratios(&mut span_only, Formulation::Stable);
        assert_eq!(span_only[0].ratio_to_f64, 1.0);
        assert_eq!(span_only[1].ratio_to_f64, 6e-4 / 2.5e-6);
        let binary = Report {
            n: 20,
            tokens: 8,
            d: 2000,
            flops_per_step: 1.0,
            model: Model {
                direct_step: 1.0,
                span_step: 1.0,
                span_setup: 1.0,
            },
            auto: Method::Span,
            f64_gflops: None,
            cpu: "a CPU".into(),
            threads: 1,
            rows,
            multiclass: vec![],
        };
        let class = |model, tokens, wall: f64, cpu: f64| ClassRow {
            model,
            classes: if model == ModelKind::Multiclass { 4 } else { 2 },
            tokens,
            trainer: Kind::Mpfr,
            prec_bits: 256,
            method: Method::Span,
            setup_seconds: 0.0,
            seconds_per_step: wall,
            cpu_per_step_s: cpu,
            ratio_to_binary: None,
            ratio_to_same_t: None,
        };
        let mut classes = vec![
            class(ModelKind::TokenSelection, 10, 5e-4, 9e-4),
            class(ModelKind::Multiclass, 10, 5e-4, 1.2e-3),
        ];
        set_class_ratios(&binary, &mut classes);
        assert_eq!(classes[0].ratio_to_binary, Some(9e-4 / 6e-4));
        assert_eq!(classes[0].ratio_to_same_t, None);
        assert_eq!(classes[1].ratio_to_binary, Some(1.2e-3 / 6e-4));
        assert_eq!(classes[1].ratio_to_same_t, Some(1.2e-3 / 9e-4));
    }

    /// `with_classes`: the K-class model on the balanced sizes has T = K + 6 (one weakly
    /// relevant token per other class) and is a valid config; K = 2 keeps the layout.
    /// `with_tokens`: the binary model at that T, the extra tokens irrelevant.
    #[test]
    fn with_classes_grows_the_weak_tokens() {
        let base = Config::default();
        for (k, t) in [(2, 8), (4, 10), (10, 16)] {
            let c = with_classes(&base, k);
            assert_eq!(
                (c.layout.tokens, c.layout.weak_opposite),
                (t, k - 1),
                "K = {k}"
            );
            assert_eq!((c.layout.relevant, c.layout.weak_same), (1, 1));
            assert_eq!(c.layout.irrelevant, base.layout.irrelevant);
            assert_eq!(c.model.classes, k);
            assert!(c.model.is_multiclass());
            c.validate().unwrap();
            let b = with_tokens(&base, t);
            assert_eq!(
                (b.layout.tokens, b.layout.irrelevant),
                (t, t - 3),
                "T = {t}"
            );
            assert_eq!(b.model, base.model);
            b.validate().unwrap();
        }
        assert!(check_classes(&base, &[2, 4, 10], &[256], &[Method::Span]).is_ok());
        for (bad, needle) in [(1usize, "2..=100"), (101, "got 101")] {
            let e = check_classes(&base, &[4, bad], &[256], &[Method::Span]).unwrap_err();
            assert!(e.to_string().contains(needle), "{e}");
        }
        let small = Config {
            d: 3,
            ..base.clone()
        };
        let e = check_classes(&small, &[4], &[53], &[Method::Span]).unwrap_err();
        assert!(e.to_string().contains("d >= 4"), "{e}");
        let e = check_classes(&with_classes(&base, 3), &[4], &[53], &[Method::Span]).unwrap_err();
        assert!(e.to_string().contains("already"), "{e}");
    }
}
