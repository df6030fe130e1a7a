//! `tokensel compare`: the f64 trainer against the MPFR twin, step by step.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::{
    ConfigArgs, DataDir, EXIT_FAILED, EXIT_OK, EXIT_STOPPED, JudgeArgs, check_report_file, finish,
    parse_method, print_report, progress_bar, report_file_written, write_report_file,
};
use crate::analysis::compare::{self, DEFAULT_PREDICTOR_STEPS, Options};
use crate::config::Method;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::model::caps::{Capability, require};

#[derive(Args, Debug)]
pub(super) struct CompareArgs {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    data: DataDir,
    #[command(flatten)]
    judge: JudgeArgs,
    /// Skip the 53-bit f64 predictor (bit-equality check; it runs in the f64 trainer's
    /// method at MPFR speed).
    #[arg(long)]
    no_predictor: bool,
    /// The steps over which the predictor's bit equality is checked: 0 to N (default
    /// 1000), or `all` for the whole run.
    #[arg(long, value_name = "N|all", default_value_t = Steps(Some(DEFAULT_PREDICTOR_STEPS)), value_parser = parse_steps)]
    predictor_steps: Steps,
    /// The truth twin's step: span (default; the same trajectory in exact arithmetic,
    /// cost independent of d), direct (d-space quantities compared at every step) or
    /// auto (the cheaper of the two). A `[factorised]` config's query map runs in the
    /// direct step only: its twin is direct by default, and `span` is refused.
    #[arg(long, value_name = "auto|direct|span", value_parser = parse_method)]
    twin_method: Option<Method>,
    /// Exit 1 when any compared quantity's relative error passes X at some step (the
    /// gate of a CI job; the report names the quantity, the step and the error).
    #[arg(long, value_name = "X")]
    fail_above: Option<f64>,
    /// Also write the JSON report to FILE (atomically; an existing regular file is
    /// replaced, anything else refused).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Also run the ball trainer (128 bits, span step) in lockstep and report how far
    /// each f64 and twin value lies outside its enclosure of the exact value, in ulps (a
    /// proved lower bound of its error). A ball that becomes non-finite ends the
    /// enclosure only (reported, exit 1); the comparison goes on to the last step.
    #[arg(long)]
    certify: bool,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// A number of steps, or `all` (`None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Steps(Option<u64>);

impl std::fmt::Display for Steps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(n) => write!(f, "{n}"),
            None => f.write_str("all"),
        }
    }
}

/// `N` or `all`.
fn parse_steps(s: &str) -> std::result::Result<Steps, String> {
    if s == "all" {
        return Ok(Steps(None));
    }
    s.parse::<u64>()
        .map(|n| Steps(Some(n)))
        .map_err(|_| format!("`{s}` is not a number of steps or `all`"))
}

pub(super) fn compare(args: &CompareArgs) -> Result<i32> {
    let (cfg, data) = args.data.load(&args.config)?;
    if let Some(x) = args.fail_above {
        crate::analysis::check_tol("fail-above", x)?;
    }
    // an explicit span twin needs the span form (a `[factorised]` config lacks it, as
    // for `run --method span`); without the flag the span twin, which the trainer runs
    // in the direct step where the config has no span form (the header says which)
    let twin_method = match args.twin_method {
        Some(Method::Span) => {
            require(&cfg, "compare --twin-method span", &[Capability::SpanForm]).map_err(|e| {
                match e {
                    Error::InvalidConfig { field, reason } => Error::InvalidConfig {
                        field,
                        reason: format!(
                            "{reason}; without --twin-method (or with `direct`) its twin runs \
                             the direct step"
                        ),
                    },
                    e => e,
                }
            })?;
            Method::Span
        }
        Some(m) => m,
        None => Method::Span,
    };
    let opts = Options {
        prec: args.judge.prec,
        tol: args.judge.tol,
        predictor: !args.no_predictor,
        predictor_steps: args.predictor_steps.0,
        twin_method,
        certify: args.certify.then_some(crate::arith::DEFAULT_BALL_PREC),
    };
    opts.check(&cfg)?;
    check_report_file(
        args.out.as_deref(),
        "compare",
        &["prec_bits", "steps", "tolerance", "max_rel_err"],
    )?;
    let t0 = Instant::now();
    let data = data.unwrap_or_else(|| Dataset::generate(&cfg));
    let bar = progress_bar(cfg.steps, args.quiet, "steps");
    let report = compare::compare_gated(&cfg, &data, opts, args.fail_above, &mut |s| {
        bar.set_position(s)
    })?;
    bar.finish_and_clear();
    // printed whether or not it could be written: the result is not lost
    let written = write_report_file(args.out.as_deref(), &report);
    print_report(&report, args.json);
    if let (false, Some(out), Some(Ok(()))) = (args.json, &args.out, &written) {
        println!("  report written to {}", out.display());
    }
    finish(t0, None);
    report_file_written(written)?;
    // a trainer stopped before the last step: the report covers the steps before it;
    // the enclosure alone stopped (its balls blew up): the comparison is complete, the
    // certificate of it is not (undecided, as `certify`'s)
    let enclosure_stopped = report
        .enclosure
        .as_ref()
        .is_some_and(|e| e.stopped.is_some());
    // the gate passed (or its error NaN) is a finding, as diff's and judge's
    let gate_failed = report.gate.as_ref().is_some_and(|g| g.failed);
    Ok(match (&report.stopped, enclosure_stopped || gate_failed) {
        (Some(_), _) => EXIT_STOPPED,
        (None, true) => EXIT_FAILED,
        (None, false) => EXIT_OK,
    })
}
