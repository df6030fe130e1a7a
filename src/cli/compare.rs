//! `tokensel compare`: the f64 trainer against the MPFR twin, step by step.

use std::time::Instant;

use clap::Args;

use super::{
    ConfigArgs, DataDir, EXIT_FAILED, EXIT_OK, EXIT_STOPPED, JudgeArgs, finish, parse_method,
    print_report, progress_bar,
};
use crate::analysis::compare::{self, DEFAULT_PREDICTOR_STEPS, Options};
use crate::config::Method;
use crate::data::Dataset;
use crate::error::Result;

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
    /// auto (the cheaper of the two).
    #[arg(long, value_name = "auto|direct|span", value_parser = parse_method, default_value = "span")]
    twin_method: Method,
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
    let opts = Options {
        prec: args.judge.prec,
        tol: args.judge.tol,
        predictor: !args.no_predictor,
        predictor_steps: args.predictor_steps.0,
        twin_method: args.twin_method,
        certify: args.certify.then_some(crate::arith::DEFAULT_BALL_PREC),
    };
    opts.check(&cfg)?;
    let t0 = Instant::now();
    let data = data.unwrap_or_else(|| Dataset::generate(&cfg));
    let bar = progress_bar(cfg.steps, args.quiet, "steps");
    let report = compare::compare(&cfg, &data, opts, &mut |s| bar.set_position(s))?;
    bar.finish_and_clear();
    print_report(&report, args.json);
    finish(t0, None);
    // a trainer stopped before the last step: the report covers the steps before it;
    // the enclosure alone stopped (its balls blew up): the comparison is complete, the
    // certificate of it is not (undecided, as `certify`'s)
    let enclosure_stopped = report
        .enclosure
        .as_ref()
        .is_some_and(|e| e.stopped.is_some());
    Ok(match (&report.stopped, enclosure_stopped) {
        (Some(_), _) => EXIT_STOPPED,
        (None, true) => EXIT_FAILED,
        (None, false) => EXIT_OK,
    })
}
