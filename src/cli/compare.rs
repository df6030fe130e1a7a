//! `tokensel compare`: the f64 trainer against the MPFR twin, step by step.

use std::time::Instant;

use clap::Args;

use super::{
    ConfigArgs, DataDir, EXIT_OK, JudgeArgs, finish, parse_method, print_report, progress_bar,
};
use crate::analysis::compare::{self, Options};
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
    /// The truth twin's step: span (default; the same trajectory in exact arithmetic,
    /// cost independent of d), direct (d-space quantities compared at every step) or
    /// auto (the cheaper of the two).
    #[arg(long, value_name = "auto|direct|span", value_parser = parse_method, default_value = "span")]
    twin_method: Method,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

pub(super) fn compare(args: &CompareArgs) -> Result<i32> {
    let (cfg, data) = args.data.load(&args.config)?;
    let opts = Options {
        prec: args.judge.prec,
        tol: args.judge.tol,
        predictor: !args.no_predictor,
        twin_method: args.twin_method,
    };
    opts.check(&cfg)?;
    let t0 = Instant::now();
    let data = data.unwrap_or_else(|| Dataset::generate(&cfg));
    let bar = progress_bar(cfg.steps, args.quiet, "steps");
    let report = compare::compare(&cfg, &data, opts, &mut |s| bar.set_position(s))?;
    bar.finish_and_clear();
    print_report(&report, args.json);
    finish(t0, None);
    Ok(EXIT_OK)
}
