//! Claim files: numerical claims about runs, checked by `tokensel check CLAIMS.toml`.
//!
//! ```toml
//! [[claim]]
//! name = "balanced: noisy samples select W_-Y*"
//! preset = "balanced"                 # optional (default balanced)
//! config = { steps = 30000 }          # optional overrides, as in a config file
//! source = "run"                      # run | twin | compare | saturation | lemma_a6 | grid | protocol
//! quantity = "selection/noisy/W_opposite"   # '/'-separated path into the output
//! op = ">="                           # == != < <= > >=
//! bound = 0.9
//! step = 10000                        # optional (run, twin): read a checkpoint instead
//! baseline_step = 0                   # optional (run, twin): claim on value - value(baseline)
//! seeds = "0..10"                     # optional: "a..b" or "0,3,7"; default the config's
//! fraction = 0.8                      # optional: share of seeds that must satisfy it
//! paper = 0.75                        # the paper's value the bound comes from
//! paper_source = "Figure 3(a)"        # where that value is printed
//! reason = "..."                      # why the bound follows from it
//! expected = "differs"                # optional: a recorded disagreement (default holds)
//! prec = 256                          # optional (twin, compare, saturation; certified: ball bits)
//! tol = 1e-8                          # optional (compare, saturation)
//! axes = { eta = "0.5:0.9:0.025", rho = [0.05, 0.1] }   # grid only
//! certified = true                    # optional (run): proved by the enclosure
//! ```
//!
//! A `certified = true` claim reads the certificate of `tokensel certify` (the ball
//! trainer at the claim's `prec`, default 128 bits, span step: every quantity an
//! interval that contains the exact value, accuracies and selection shares intervals
//! over the undecided samples) and holds only when the WHOLE interval satisfies it (`>=
//! b`: its lower end `>= b`; `== b`: both ends `b`), so an undecided sample can only make
//! it fail; with `expected = "differs"` it passes only when the whole interval lies
//! outside the bound (undecided is no disagreement). Only `run` claims, and no
//! `baseline_step` (a difference of intervals would need its own outward rounding). Its
//! quantity is checked before the work against the certificate's schema
//! (`schema::certified`), and its ball run against the memory limit as `certify` checks
//! it.
//!
//! A `grid` claim runs the grid of its config (the base), `axes` and `seeds` (all seeds
//! in one grid, `tokensel grid`'s cells) and reads one number from the merged summary
//! (`grid merge --json`); fractions over seeds are quantities of that summary (e.g.
//! `label_noise/0/abrupt_fraction`), so `fraction` does not apply.
//!
//! A claim with `paper` must say where the value comes from and why the bound follows;
//! `expected = "differs"` records that tokensel does not reproduce the paper there (with
//! the measured values in the output): it passes while the disagreement persists and
//! fails once the claim holds, so the record cannot go stale.
//!
//! A missing measurement (the quantity is null in the output for some seed, or not there
//! at all although the output's schema has it: no noisy sample, a ratio without a
//! denominator, a grid mean over seeds of which one has no boundary, an array index past
//! the end of the run's array, a statistic no seed defines) FAILS the claim, whatever `expected` says: neither "it holds" nor "it still
//! differs" can rest on a number that was not measured. The table says `missing`.
//!
//! Outputs: `run` the summary of `run --json` (or, with `step`, that checkpoint of the
//! trajectory; one run serves all claims on the same config); `twin` the same of `twin
//! --prec P --json` (the MPFR twin at the claim's `prec`, default 256 bits: the
//! trajectory in d-space without f64's range or rounding, e.g. normalised GD with eps = 0
//! past the step where f64's gradient underflows); `compare` and `saturation` their JSON reports; `lemma_a6` an object
//! {"max_rel_q_diff": ..., "max_kappa": ...} from W-mode vs p-mode with step
//! alpha ||p||^2 (f64, direct step): the largest relative distance of the two q's, and
//! the largest condition || |W|^T |p| || / || W^T p || of q on the W-mode path.
//! Identical (source, config, options) are computed once.

use std::collections::BTreeMap;
use std::path::Path;

use num_rational::BigRational;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::analysis::certify::Count;
use crate::analysis::lemma_a6;
use crate::arith::{Arith, F64, Mpfr};
use crate::config::{Config, Preset};
use crate::data::Dataset;
use crate::error::{Error, Result};
pub use crate::experiments::schema::Source;
use crate::experiments::{grid, schema};
use crate::io::trajectory::Summary;
use crate::model::caps::{Capability, require};
use crate::seeds::SeedList;
use crate::train::Trainer;

/// A claims file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimsFile {
    /// The claims, in order.
    pub claim: Vec<Claim>,
}

/// One claim.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// Human-readable name.
    pub name: String,
    /// Preset the config starts from.
    #[serde(default)]
    pub preset: Option<String>,
    /// Config overrides.
    #[serde(default)]
    pub config: Option<toml::Table>,
    /// Which computation.
    pub source: Source,
    /// '/'-separated path into the source's JSON output.
    pub quantity: String,
    /// Comparison operator.
    pub op: Op,
    /// The bound.
    pub bound: f64,
    /// Checkpoint step (run only).
    #[serde(default)]
    pub step: Option<u64>,
    /// Twin precision (default 256).
    #[serde(default)]
    pub prec: Option<u32>,
    /// Tolerance (default 1e-8).
    #[serde(default)]
    pub tol: Option<f64>,
    /// Claim on the change from this checkpoint (run only): value - value(baseline).
    #[serde(default)]
    pub baseline_step: Option<u64>,
    /// Seeds: "a..b" (b excluded) or a comma list; default the config's seed.
    #[serde(default)]
    pub seeds: Option<String>,
    /// Fraction of the seeds that must satisfy the claim (default 1).
    #[serde(default)]
    pub fraction: Option<f64>,
    /// The paper's value the bound is derived from.
    #[serde(default)]
    pub paper: Option<f64>,
    /// Where the paper's value is printed (figure, notebook output, rebuttal).
    #[serde(default)]
    pub paper_source: Option<String>,
    /// Why the bound follows from the paper's value (or, for `differs`, the explanation).
    #[serde(default)]
    pub reason: Option<String>,
    /// Whether the claim is expected to hold (default) or is a recorded disagreement.
    #[serde(default)]
    pub expected: Expected,
    /// Grid axes (`grid` only): key = "a:b:step" or a list of numbers.
    #[serde(default)]
    pub axes: Option<toml::Table>,
    /// Proved by the enclosure (`run` only): the claim reads the certificate's
    /// intervals and holds only where the whole interval satisfies it.
    #[serde(default)]
    pub certified: bool,
}

/// A claim's comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Equal.
    #[serde(rename = "==")]
    Eq,
    /// Not equal.
    #[serde(rename = "!=")]
    Ne,
    /// Less than.
    #[serde(rename = "<")]
    Lt,
    /// Less than or equal.
    #[serde(rename = "<=")]
    Le,
    /// Greater than.
    #[serde(rename = ">")]
    Gt,
    /// Greater than or equal.
    #[serde(rename = ">=")]
    Ge,
}

impl Op {
    /// The operator's symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }

    /// True when `x OP bound` for EVERY x in `[lo, hi]` (for a point, [`Op::holds`]).
    pub fn holds_on<T: PartialOrd>(self, (lo, hi): (T, T), bound: T) -> bool {
        match self {
            Op::Eq => lo == bound && hi == bound,
            Op::Ne => bound < lo || bound > hi,
            Op::Lt => hi < bound,
            Op::Le => hi <= bound,
            Op::Gt => lo > bound,
            Op::Ge => lo >= bound,
        }
    }

    /// True when `x OP bound` is false for EVERY x in `[lo, hi]` (the whole interval
    /// outside the bound: a disagreement proved); for a point, `!`[`Op::holds`].
    pub fn fails_on<T: PartialOrd>(self, (lo, hi): (T, T), bound: T) -> bool {
        match self {
            Op::Eq => bound < lo || bound > hi,
            Op::Ne => lo == bound && hi == bound,
            Op::Lt => lo >= bound,
            Op::Le => lo > bound,
            Op::Gt => hi <= bound,
            Op::Ge => hi < bound,
        }
    }

    /// The end of `[lo, hi]` that decides [`Op::holds_on`] (the worst case).
    fn decisive(self, (lo, hi): (f64, f64), bound: f64) -> f64 {
        match self {
            Op::Lt | Op::Le => hi,
            Op::Eq if lo == bound => hi,
            _ => lo,
        }
    }

    /// True when `measured OP bound`.
    pub fn holds(self, measured: f64, bound: f64) -> bool {
        match self {
            Op::Eq => measured == bound,
            Op::Ne => measured != bound,
            Op::Lt => measured < bound,
            Op::Le => measured <= bound,
            Op::Gt => measured > bound,
            Op::Ge => measured >= bound,
        }
    }
}

/// Whether a claim is expected to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expected {
    /// The claim holds (the default).
    #[default]
    Holds,
    /// A recorded disagreement with the paper: the claim does not hold.
    Differs,
}

/// An interval `[lo, hi]` that contains a certified claim's exact value.
pub type Enclosure = (f64, f64);

/// The verdict on one claim.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    /// Claim name.
    pub name: String,
    /// Quantity path (with " - step B" for a baseline claim).
    pub quantity: String,
    /// Operator and bound, e.g. ">= 0.9".
    pub expect: String,
    /// Measured value at the FIRST seed (None when the output holds null there); the
    /// other seeds' are in `per_seed`, their extremes in `range`.
    pub measured: Option<f64>,
    /// The least and the greatest measured value over the seeds (None when no seed was
    /// measured).
    #[serde(default)]
    pub range: Option<(f64, f64)>,
    /// The seeds and each seed's measured value (for a certified claim the interval's
    /// deciding end: the lower end for `>`, `>=`, the upper for `<`, `<=`).
    pub per_seed: Vec<(u64, Option<f64>)>,
    /// A certified claim's interval per seed (`[lo, hi]`, containing the exact value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enclosures: Option<Vec<(u64, Option<Enclosure>)>>,
    /// Fraction of the seeds that satisfy the claim, and the fraction required.
    pub fraction: (f64, f64),
    /// Seeds whose measurement is missing (null in the output, or not there): any fails
    /// the claim.
    pub missing: Vec<u64>,
    /// Seeds measured where `op bound` does not hold (for a certified claim: is not
    /// proved to), in seed order: the seeds a failed claim fails on (their values are in
    /// `per_seed`).
    #[serde(default)]
    pub unsatisfied: Vec<u64>,
    /// The paper's value and its source, where the claim rests on one.
    pub paper: Option<(f64, String)>,
    /// `holds` or `differs` (a recorded disagreement).
    pub expected: Expected,
    /// Verdict: every seed was measured, and the claim holds as expected or the
    /// recorded disagreement persists.
    pub pass: bool,
}

fn claim_error(path: &Path, k: usize, name: &str, field: &str, reason: String) -> Error {
    Error::Parse {
        what: "claims",
        path: path.to_path_buf(),
        message: format!("claim {} (`{name}`): `{field}`: {reason}", k + 1),
    }
}

impl ClaimsFile {
    /// Parse and validate a claims file (each claim's config is built and validated).
    pub fn parse(text: &str, path: &Path) -> Result<(ClaimsFile, Vec<Config>)> {
        let file: ClaimsFile = toml::from_str(text).map_err(|e| Error::Parse {
            what: "claims",
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        if file.claim.is_empty() {
            return Err(claim_error(
                path,
                0,
                "",
                "claim",
                "no claims in the file".into(),
            ));
        }
        let mut configs = Vec::new();
        for (k, c) in file.claim.iter().enumerate() {
            // a name is one line of printable text: it is printed in the table and the
            // progress lines, where control characters would rewrite the terminal
            if c.name.chars().any(char::is_control) {
                let shown: String = c.name.escape_default().take(80).collect();
                return Err(claim_error(
                    path,
                    k,
                    &shown,
                    "name",
                    "holds a control character (a newline, an escape, ...): a name is one line of printable text".into(),
                ));
            }
            let err = |field: &str, reason: String| claim_error(path, k, &c.name, field, reason);
            // a size over a limit stays one (exit 3); anything else names the claim, and
            // an error about the claim's own field gives its reason alone (a claim field
            // is neither a config key nor a command-line argument)
            let input = |field: &str, e: Error| match e {
                Error::TooLarge { field: f, reason } => Error::TooLarge {
                    field: format!("claim {} (`{}`): {field}: {f}", k + 1, c.name),
                    reason,
                },
                Error::InvalidArgument { name, reason } if name == field => err(field, reason),
                e => err(field, e.to_string()),
            };
            if let Some(s) = &c.seeds {
                let list = s.parse::<SeedList>().map_err(|e| err("seeds", e))?;
                list.seeds("seeds").map_err(|e| input("seeds", e))?;
            }
            if let Some(f) = c.fraction.filter(|f| !(*f > 0.0 && *f <= 1.0)) {
                return Err(err("fraction", format!("must lie in (0, 1], got {f}")));
            }
            if c.paper.is_some()
                && (c.paper_source.as_deref().is_none_or(str::is_empty)
                    || c.reason.as_deref().is_none_or(str::is_empty))
            {
                return Err(err(
                    "paper",
                    "a claim on a paper value names its `paper_source` and gives the `reason` \
                     for its bound"
                        .into(),
                ));
            }
            if c.expected == Expected::Differs && c.paper.is_none() {
                return Err(err(
                    "expected",
                    "a recorded disagreement needs the paper's value (`paper`)".into(),
                ));
            }
            if c.baseline_step.is_some() && !c.source.trains() {
                return Err(err(
                    "baseline_step",
                    "only `run` and `twin` claims read checkpoints".into(),
                ));
            }
            if !c.bound.is_finite() {
                return Err(err("bound", "must be finite".into()));
            }
            if c.quantity.trim().is_empty() {
                return Err(err("quantity", "empty path".into()));
            }
            if (c.source == Source::Grid) != c.axes.is_some() {
                return Err(err(
                    "axes",
                    "a `grid` claim needs `axes`, and only a grid claim has them".into(),
                ));
            }
            if c.source == Source::Grid && c.fraction.is_some() {
                return Err(err(
                    "fraction",
                    "a grid claim reads one number from the grid's summary; its fractions over seeds are quantities there".into(),
                ));
            }
            if c.certified && (c.source != Source::Run || c.baseline_step.is_some()) {
                return Err(err(
                    "certified",
                    "only `run` claims without `baseline_step` are certified".into(),
                ));
            }
            if c.step.is_some() && !c.source.trains() {
                return Err(err(
                    "step",
                    "only `run` and `twin` claims read a checkpoint".into(),
                ));
            }
            // a precision the computation would not use is refused: a `run` claim with
            // `prec` would read as an MPFR claim while it trains in f64
            let takes_prec = c.certified
                || matches!(
                    c.source,
                    Source::Twin | Source::Compare | Source::Saturation
                );
            if c.prec.is_some() && !takes_prec {
                return Err(err(
                    "prec",
                    "only `twin`, `compare`, `saturation` and certified claims take a precision \
                     (a `run` claim trains in f64: `source = \"twin\"` trains in MPFR)"
                        .into(),
                ));
            }
            if let Some(p) = c.prec {
                Mpfr::truth(p).map_err(|e| input("prec", e))?;
            }
            if let Some(t) = c.tol.filter(|t| !(t.is_finite() && *t > 0.0)) {
                return Err(err("tol", format!("must be finite and > 0, got {t}")));
            }
            let preset = Preset::from_name(c.preset.as_deref().unwrap_or("balanced"))
                .map_err(|e| input("preset", e))?;
            let overlay = c
                .config
                .as_ref()
                .map(|t| toml::to_string(t).expect("table serialises"))
                .unwrap_or_default();
            let cfg = Config::from_toml_str_over_preset(&overlay, path, preset)
                .map_err(|e| input("config", e))?;
            if c.source == Source::Grid {
                grid_spec(c, &cfg).map_err(|e| input("axes", e))?;
            }
            before_work(c, &cfg).map_err(|(field, e)| input(field, e))?;
            configs.push(cfg);
        }
        Ok((file, configs))
    }
}

/// Follow a '/'-separated path into a JSON value (null below a null: the part is missing).
pub fn lookup<'a>(v: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('/')
        .filter(|p| !p.is_empty())
        .try_fold(v, |v, key| match v {
            serde_json::Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
            // a missing part (`"noisy": null` where no sample is noisy) leaves everything
            // below it missing: null, a missing measurement
            serde_json::Value::Null => Some(v),
            _ => v.get(key),
        })
}

/// What can be checked of a claim before anything is computed: its steps are
/// checkpoints of the run's schedule, its quantity names a number in its source's output
/// (`experiments::schema`), and its computation's trainers and trajectory fit their
/// memory limits. The error comes with the claim field it concerns.
fn before_work(c: &Claim, cfg: &Config) -> std::result::Result<(), (&'static str, Error)> {
    let schedule = crate::train::record::schedule(cfg.steps, cfg.record.checkpoints_per_decade);
    for (field, step) in [("step", c.step), ("baseline_step", c.baseline_step)] {
        let Some(s) = step else { continue };
        if s > cfg.steps {
            let reason = format!("{s} is past the run's {} steps", cfg.steps);
            return Err((field, Error::argument(field, reason)));
        }
        if let Err(k) = schedule.binary_search(&s) {
            let reason = format!(
                "step {s} is not a recorded checkpoint of the run (record.checkpoints_per_decade = {}: \
                 the nearest are {} and {})",
                cfg.record.checkpoints_per_decade,
                schedule[k - 1],
                schedule[k]
            );
            return Err((field, Error::argument(field, reason)));
        }
    }
    let reads_checkpoint = c.step.is_some() || c.baseline_step.is_some();
    // a certified claim reads the certificate (its fields beside the final checkpoint's,
    // or a checkpoint): a path ending on an interval [lo, hi] names a number there
    let schema = match c.certified {
        true => schema::certified(reads_checkpoint),
        false => schema::of_source(c.source, reads_checkpoint),
    };
    schema
        .check(&c.quantity)
        .map_err(|m| ("quantity", Error::argument("quantity", m)))?;
    check_record_quantity(c, cfg)?;
    let memory = |e| ("config", e);
    let f64_run = |cfg: &Config| crate::train::check_memory(cfg, F64.kind(), 53, cfg.method);
    match c.source {
        Source::Run if c.certified => certify_options(c).check(cfg).map_err(memory)?,
        Source::Run => {
            f64_run(cfg).map_err(memory)?;
            crate::train::record::check_size(cfg).map_err(memory)?;
        }
        Source::Twin => {
            let prec = c.prec.unwrap_or(crate::arith::DEFAULT_PREC);
            crate::train::check_memory(cfg, crate::arith::Kind::Mpfr, prec, cfg.method)
                .map_err(memory)?;
            crate::train::record::check_size(cfg).map_err(memory)?;
        }
        Source::Compare => compare_options(c).check(cfg).map_err(memory)?,
        Source::LemmaA6 => {
            lemma_a6::check(cfg).map_err(|e| ("config", e))?;
            let (w_cfg, p_cfg) = lemma_a6::configs(cfg);
            f64_run(&w_cfg).map_err(memory)?;
            f64_run(&p_cfg).map_err(memory)?;
        }
        Source::Saturation => require(cfg, "a saturation claim", &[Capability::Saturation])
            .map_err(|e| ("config", e))?,
        // grid cells over a limit are failed cells of the grid
        Source::Grid => {}
        Source::Protocol => {
            crate::experiments::protocol::settings(cfg).map_err(|e| ("config", e))?;
            f64_run(cfg).map_err(memory)?;
            crate::train::record::check_size(cfg).map_err(memory)?;
        }
    }
    Ok(())
}

/// A claim on a run's record (`run`, `twin`, certified) against its config's record
/// ([`schema::claim_range`], the one place that says what such a claim may name: the
/// parts the config records, an index below its list's length) and its bound against
/// the values the quantity can take (the leaf's range from the record's visit; for a
/// change from `baseline_step` the range of a difference): a bound outside it decides
/// the claim by the range alone (`train_loss < -1`, an attention share above 2, an
/// accuracy of at least 1.5), so it is refused before any work, naming the quantity,
/// its range and the bound. The error comes with the claim field it concerns.
fn check_record_quantity(
    c: &Claim,
    cfg: &Config,
) -> std::result::Result<(), (&'static str, Error)> {
    if !(c.certified || c.source.trains()) {
        return Ok(());
    }
    let summary = c.step.is_none() && c.baseline_step.is_none();
    let range = schema::claim_range(cfg, c.certified, summary, &c.quantity)
        .map_err(|m| ("quantity", Error::argument("quantity", m)))?;
    let Some(range) = range else {
        return Ok(());
    };
    let (range, what) = match c.baseline_step {
        Some(b) => (
            range.difference(),
            format!("the change of `{}` from step {b}", c.quantity),
        ),
        None => (range, format!("`{}`", c.quantity)),
    };
    if range.contains(c.bound) {
        return Ok(());
    }
    let reason = format!(
        "{} is outside the values {what} can take ({}): `{} {} {}` is decided by that range \
         alone, not by the run",
        c.bound,
        range.describe(),
        c.quantity,
        c.op.symbol(),
        c.bound
    );
    Err(("bound", Error::argument("bound", reason)))
}

/// The options a certified claim's ball run takes: the claim's `prec` (default
/// [`crate::arith::DEFAULT_BALL_PREC`] bits), the span step.
fn certify_options(claim: &Claim) -> crate::analysis::certify::Options {
    use crate::analysis::certify::{Options, Prec};
    Options {
        prec: claim.prec.map_or_else(Prec::default, Prec::Bits),
        ..Options::default()
    }
}

/// The options a `compare` claim runs with.
fn compare_options(claim: &Claim) -> crate::analysis::compare::Options {
    crate::analysis::compare::Options {
        prec: claim.prec.unwrap_or(crate::arith::DEFAULT_PREC),
        tol: claim.tol.unwrap_or(1e-8),
        predictor: true,
        // the claims check the whole run
        predictor_steps: None,
        twin_method: crate::config::Method::Span,
        certify: None,
    }
}

/// The grid of a `grid` claim: its config as the base, its axes and seeds.
fn grid_spec(claim: &Claim, cfg: &Config) -> Result<grid::Spec> {
    let mut table = toml::Table::new();
    if let Some(s) = &claim.seeds {
        table.insert("seeds".into(), toml::Value::String(s.clone()));
    }
    table.insert(
        "axes".into(),
        toml::Value::Table(claim.axes.clone().unwrap_or_default()),
    );
    let mut spec = grid::Spec::from_toml(
        &toml::to_string(&table).expect("table serialises"),
        Path::new(&claim.name),
    )?;
    spec.name = claim.name.clone();
    spec.base = cfg.clone();
    spec.cells()?;
    Ok(spec)
}

fn compute(claim: &Claim, cfg: &Config) -> Result<serde_json::Value> {
    if claim.source == Source::Grid {
        let spec = grid_spec(claim, cfg)?;
        return Ok(json(&grid::run_in_memory(&spec)?));
    }
    if claim.source == Source::Protocol {
        use crate::experiments::protocol::{self, Pool};
        // this seed's run of the protocol: its blocks, head, noise and phase 2
        let mut one = cfg.clone();
        if let Some(p) = one.protocol.as_mut() {
            p.seeds = vec![cfg.seed];
        }
        let report = protocol::run(&one, &mut |s| Pool::generated(&one, s), &mut |_, _| {})?;
        return match (report.rows.first(), report.stopped) {
            (Some(row), None) => Ok(json(row)),
            (_, Some(st)) => Err(Error::Refused(format!(
                "the protocol's seed {} stopped in phase {}: {}",
                st.seed, st.phase, st.error
            ))),
            (None, None) => unreachable!("one seed runs or stops"),
        };
    }
    let prec = claim.prec.unwrap_or(crate::arith::DEFAULT_PREC);
    let tol = claim.tol.unwrap_or(1e-8);
    let data = Dataset::generate(cfg);
    Ok(match claim.source {
        Source::Run if claim.certified => certified(cfg, &data, &certify_options(claim))?,
        // one run serves every claim on this config: the summary and each checkpoint
        Source::Run => trained(&Trainer::run(cfg, &data, F64, &mut |_| {})?),
        Source::Twin => trained(&Trainer::run(cfg, &data, Mpfr::truth(prec)?, &mut |_| {})?),
        Source::Compare => {
            let report =
                crate::analysis::compare::compare(cfg, &data, compare_options(claim), &mut |_| {})?;
            // a comparison that stopped early measured part of the run only: no claim
            // reads it
            if let Some(st) = &report.stopped {
                return Err(Error::Refused(format!(
                    "the comparison stopped after step {} of {}: {}",
                    st.last_step, cfg.steps, st.error
                )));
            }
            json(&report)
        }
        Source::Saturation => {
            let grid = crate::analysis::saturation::default_grid(60);
            json(&crate::analysis::saturation::sweep(
                &data.train,
                0,
                prec,
                tol,
                &grid,
            )?)
        }
        Source::Grid | Source::Protocol => unreachable!("handled above"),
        Source::LemmaA6 => json(&lemma_a6::lemma_a6(cfg, &data)?),
    })
}

/// A trained trajectory as a `run` or `twin` claim reads it: `summary` as `--json`
/// prints it, `checkpoints` each checkpoint by step.
fn trained(t: &crate::io::trajectory::Trajectory) -> serde_json::Value {
    let checkpoints: serde_json::Map<String, serde_json::Value> = t
        .checkpoints
        .iter()
        .map(|c| (c.step.to_string(), json(c)))
        .collect();
    serde_json::json!({ "summary": json(&Summary::of(t)), "checkpoints": checkpoints })
}

/// The certificate of `cfg`'s run in the shape of a `run` output: `summary` the
/// certificate's fields with the final checkpoint's (loss, attention, ...) beside them,
/// `checkpoints` each checkpoint by step; every quantity an interval `[lo, hi]`.
fn certified(
    cfg: &Config,
    data: &Dataset,
    opts: &crate::analysis::certify::Options,
) -> Result<serde_json::Value> {
    use crate::analysis::certify;
    let cert = certify::certify(cfg, data, opts, &mut |_, _| {})?;
    let mut summary = json(&cert);
    let last = json(cert.last());
    let (serde_json::Value::Object(s), serde_json::Value::Object(l)) = (&mut summary, last) else {
        unreachable!("structs serialise as objects")
    };
    s.remove("checkpoints");
    for (k, v) in l {
        s.entry(k).or_insert(v);
    }
    let checkpoints: serde_json::Map<String, serde_json::Value> = cert
        .checkpoints
        .iter()
        .map(|c| (c.step.to_string(), json(c)))
        .collect();
    Ok(serde_json::json!({ "summary": summary, "checkpoints": checkpoints }))
}

/// The bound as the decimal it was written as: the shortest decimal that reads back as
/// `bound` (Rust's `Display` of an f64, which never uses an exponent), exactly; `None`
/// for a non-finite bound.
fn decimal(bound: f64) -> Option<BigRational> {
    if !bound.is_finite() {
        return None;
    }
    let text = format!("{}", bound.abs());
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let digits: num_bigint::BigInt = format!("{int}{frac}").parse().ok()?;
    let scale = num_bigint::BigInt::from(10u32).pow(frac.len() as u32);
    let v = BigRational::new(digits, scale);
    Some(if bound < 0.0 { -v } else { v })
}

fn json<T: Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).expect("outputs serialise")
}

fn compact(v: f64) -> String {
    if v != 0.0 && (v.abs() < 1e-3 || v.abs() >= 1e6) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// Check every claim; `progress(k, total, name)` before each.
pub fn check(
    file: &ClaimsFile,
    configs: &[Config],
    path: &Path,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Vec<Outcome>> {
    let mut cache: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    let mut out = Vec::new();
    for (k, (claim, cfg)) in file.claim.iter().zip(configs).enumerate() {
        progress(k, file.claim.len(), &claim.name);
        let err = |field: &str, reason: String| claim_error(path, k, &claim.name, field, reason);
        let seeds = match &claim.seeds {
            // a grid claim runs all its seeds in one grid
            Some(s) if claim.source != Source::Grid => {
                grid::parse_seeds(s).map_err(|e| err("seeds", e))?
            }
            _ => vec![cfg.seed],
        };
        let grid = match claim.source {
            Source::Grid => (
                claim.axes.as_ref().map(|a| a.to_string()),
                claim.seeds.clone(),
            ),
            _ => (None, None),
        };
        let runs: Vec<(u64, Config, String)> = seeds
            .iter()
            .map(|&seed| {
                let cfg = Config {
                    seed,
                    ..cfg.clone()
                };
                let key = serde_json::to_string(&(
                    claim.source,
                    cfg.to_toml(),
                    claim.prec,
                    claim.tol.map(f64::to_bits),
                    &grid,
                    claim.certified,
                ))
                .expect("key serialises");
                (seed, cfg, key)
            })
            .collect();
        // the seeds' computations not done yet, in parallel (each is deterministic and
        // independent: the outputs do not depend on the order or the thread count)
        let mut todo: Vec<&(u64, Config, String)> = runs
            .iter()
            .filter(|(_, _, key)| !cache.contains_key(key))
            .collect();
        todo.dedup_by(|a, b| a.2 == b.2);
        let done: Vec<(String, serde_json::Value)> = todo
            .par_iter()
            .with_max_len(1)
            .map(|(_, cfg, key)| Ok((key.clone(), compute(claim, cfg)?)))
            .collect::<Result<_>>()?;
        cache.extend(done);
        let mut per_seed = Vec::with_capacity(seeds.len());
        for (seed, cfg, key) in &runs {
            let (seed, key) = (*seed, key.clone());
            // a value: a number (a point), a bool (0 or 1) or an interval [lo, hi]
            let read = |step: Option<u64>| -> Result<Option<(f64, f64)>> {
                let output = match (claim.source, step) {
                    (Source::Run | Source::Twin, None) => &cache[&key]["summary"],
                    (Source::Run | Source::Twin, Some(step)) => cache[&key]["checkpoints"]
                        .get(step.to_string())
                        .ok_or_else(|| {
                            err("step", format!("step {step} is not a recorded checkpoint"))
                        })?,
                    _ => &cache[&key],
                };
                // the schema accepted the path before the work: where this output has
                // nothing there (an index past an array's end, a statistic the data left
                // undefined) the measurement is missing, and the claim fails
                let Some(value) = lookup(output, &claim.quantity) else {
                    return Ok(None);
                };
                let not_a_number = |other: &serde_json::Value| {
                    err(
                        "quantity",
                        format!("`{}` is not a number: {other}", claim.quantity),
                    )
                };
                match value {
                    serde_json::Value::Null => Ok(None),
                    // a non-finite number as tokensel writes it (`io::nonfinite`)
                    serde_json::Value::String(s) if crate::io::nonfinite::parse(s).is_some() => {
                        Ok(crate::io::nonfinite::parse(s).map(|v| (v, v)))
                    }
                    serde_json::Value::Bool(b) => {
                        Ok(Some(if *b { (1.0, 1.0) } else { (0.0, 0.0) }))
                    }
                    serde_json::Value::Number(n) => Ok(n.as_f64().map(|v| (v, v))),
                    serde_json::Value::Array(a) if claim.certified && a.len() == 2 => {
                        // ends as the certificate writes them: numbers, or "inf" and
                        // "-inf" past f64's range
                        let end = |v: &serde_json::Value| {
                            v.as_f64()
                                .or_else(|| v.as_str().and_then(crate::io::nonfinite::parse))
                        };
                        match (end(&a[0]), end(&a[1])) {
                            (Some(lo), Some(hi)) if lo <= hi => Ok(Some((lo, hi))),
                            _ => Err(not_a_number(value)),
                        }
                    }
                    other => Err(not_a_number(other)),
                }
            };
            // a certified share backed by a count (`Count::behind`): the exact fraction
            // k/n, decided against the bound as the decimal it was written as (6/10
            // against `<= 0.6` holds, where the outward-rounded interval
            // [0.6, 0.6000000000000001] would not)
            // (a change from a baseline step is a difference, not a share: its interval)
            let share = claim.certified && claim.baseline_step.is_none();
            let exact = match (share, Count::behind(&claim.quantity)) {
                (true, Some(path)) => {
                    let output = match claim.step {
                        None => &cache[&key]["summary"],
                        Some(step) => &cache[&key]["checkpoints"][step.to_string()],
                    };
                    lookup(output, &path)
                        .and_then(|v| serde_json::from_value::<Count>(v.clone()).ok())
                        .and_then(|c| decimal(claim.bound).map(|b| (c, b)))
                }
                _ => None,
            };
            let value = match claim.baseline_step {
                None => read(claim.step)?,
                Some(base) => {
                    // points only (certified claims have no baseline)
                    let end = read(Some(claim.step.unwrap_or(cfg.steps)))?;
                    end.zip(read(Some(base))?)
                        .map(|(e, b)| (e.0 - b.0, e.0 - b.0))
                }
            };
            let (holds, possible) = match (&value, exact) {
                (None, _) => (false, false),
                (Some(_), Some((count, bound))) => {
                    let share = |k: usize| BigRational::new(k.into(), count.of.into());
                    let iv = || (share(count.lo), share(count.hi));
                    (
                        claim.op.holds_on(iv(), bound.clone()),
                        !claim.op.fails_on(iv(), bound),
                    )
                }
                (Some(iv), None) => (
                    claim.op.holds_on(*iv, claim.bound),
                    !claim.op.fails_on(*iv, claim.bound),
                ),
            };
            per_seed.push((seed, value, holds, possible));
        }
        let satisfied = per_seed.iter().filter(|s| s.2).count();
        let unsatisfied: Vec<u64> = per_seed
            .iter()
            .filter(|s| s.1.is_some() && !s.2)
            .map(|s| s.0)
            .collect();
        // the seeds where the claim may hold (its interval not wholly outside the
        // bound): a disagreement is recorded only when too few of them remain, so an
        // undecided interval never passes `expected = "differs"`
        let possible = per_seed.iter().filter(|s| s.3).count();
        let per_seed: Vec<(u64, Option<Enclosure>)> = per_seed
            .into_iter()
            .map(|(seed, v, _, _)| (seed, v))
            .collect();
        let enclosures = claim.certified.then(|| per_seed.clone());
        let per_seed: Vec<(u64, Option<f64>)> = per_seed
            .into_iter()
            .map(|(seed, v)| (seed, v.map(|iv| claim.op.decisive(iv, claim.bound))))
            .collect();
        let share = satisfied as f64 / per_seed.len() as f64;
        let required = claim.fraction.unwrap_or(1.0);
        let holds = share >= required;
        let proved_not = (possible as f64 / per_seed.len() as f64) < required;
        // a missing measurement fails the claim, whatever it expects
        let missing: Vec<u64> = per_seed
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(s, _)| *s)
            .collect();
        out.push(Outcome {
            name: claim.name.clone(),
            quantity: match claim.baseline_step {
                Some(b) => format!("{} - step {b}", claim.quantity),
                None => claim.quantity.clone(),
            },
            expect: format!("{} {}", claim.op.symbol(), compact(claim.bound)),
            measured: per_seed.first().and_then(|(_, v)| *v),
            range: per_seed.iter().filter_map(|(_, v)| *v).fold(
                None,
                |r: Option<(f64, f64)>, v| {
                    Some(r.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
                },
            ),
            per_seed,
            enclosures,
            fraction: (share, required),
            pass: missing.is_empty()
                && match claim.expected {
                    Expected::Holds => holds,
                    Expected::Differs => proved_not,
                },
            missing,
            unsatisfied,
            paper: claim
                .paper
                .map(|v| (v, claim.paper_source.clone().unwrap_or_default())),
            expected: claim.expected,
        });
    }
    Ok(out)
}

/// Most seeds a table line names (the rest are counted; `--json` has them all).
const SEEDS_LISTED: usize = 10;

/// "not satisfied on seeds 1 (8.3333e-1), 3 (...)": the seeds where the claim's bound
/// does not hold, each with its measured value, at most [`SEEDS_LISTED`] of them.
fn unsatisfied_line(o: &Outcome) -> String {
    let value = |seed: u64| {
        o.per_seed
            .iter()
            .find(|(s, _)| *s == seed)
            .and_then(|(_, v)| *v)
            .map_or("missing".to_string(), |v| format!("{v:.4e}"))
    };
    let listed: Vec<String> = o
        .unsatisfied
        .iter()
        .take(SEEDS_LISTED)
        .map(|&s| format!("{s} ({})", value(s)))
        .collect();
    let more = o.unsatisfied.len().saturating_sub(SEEDS_LISTED);
    format!(
        "not satisfied on seed{} {}{}",
        if o.unsatisfied.len() == 1 { "" } else { "s" },
        listed.join(", "),
        if more > 0 {
            format!(" and {more} more (--json lists them)")
        } else {
            String::new()
        }
    )
}

/// The readable table of `tokensel check`: per claim, its status and name on one line,
/// then the measured values (or the seeds' share against the share the claim needs) and
/// the bound on the next, the seeds where the bound does not hold with their values (a
/// claim over several seeds) and the paper's value below, under 100 characters each but
/// for long names and seed lists; then the counts.
pub struct Verdicts<'a>(pub &'a [Outcome]);

impl std::fmt::Display for Verdicts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        for o in self.0 {
            let status = match (o.pass, o.expected) {
                _ if !o.missing.is_empty() => "FAIL",
                (true, Expected::Holds) if o.enclosures.is_some() => "proved",
                (true, Expected::Holds) => "pass",
                (true, Expected::Differs) => "differs",
                (false, Expected::Holds) => "FAIL",
                (false, Expected::Differs) => "FAIL*",
            };
            let seeds = o.per_seed.len();
            let measured = if o.missing.len() == seeds {
                "missing".to_string()
            } else if !o.missing.is_empty() {
                format!("missing at {}/{seeds} seeds", o.missing.len())
            } else if seeds == 1 {
                o.measured
                    .map_or("missing".to_string(), |m| format!("{m:.6e}"))
            } else {
                let (lo, hi) = o.range.unwrap_or((f64::NAN, f64::NAN));
                let (share, required) = o.fraction;
                let need = (required * seeds as f64 - 1e-9).ceil().max(0.0);
                let rule = match o.expected {
                    Expected::Holds => format!("needs >= {need:.0}/{seeds}"),
                    Expected::Differs => format!("differs while < {need:.0}/{seeds}"),
                };
                format!(
                    "{:.0}/{seeds} seeds hold ({rule}), min {lo:.4e} max {hi:.4e}",
                    share * seeds as f64
                )
            };
            out += &format!("  {status:<8}{}\n", o.name);
            out += &format!("          measured {measured}; bound {}\n", o.expect);
            if seeds > 1 && !o.unsatisfied.is_empty() {
                out += &format!("          {}\n", unsatisfied_line(o));
            }
            if let Some((v, src)) = &o.paper {
                out += &format!("          paper {v} ({src})\n");
            }
        }
        out += "  (differs: a recorded disagreement with the paper that persists; FAIL*: it no longer does;\n   missing: no measurement, a failure; proved: a certified claim whose enclosure lies inside the bound)\n";
        let failed = self.0.iter().filter(|o| !o.pass).count();
        let differs = self
            .0
            .iter()
            .filter(|o| o.pass && o.expected == Expected::Differs)
            .count();
        out += &format!(
            "\n  {} passed, {failed} failed ({differs} of the passed are recorded disagreements with the paper)\n",
            self.0.len() - failed
        );
        f.write_str(&out)
    }
}
