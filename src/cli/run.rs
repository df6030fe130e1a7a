//! `tokensel run`: train in f64 (or float32) and report.

use std::time::Instant;

use clap::Args;

use super::{
    ConfigArgs, DataDir, EXIT_OK, RunOutput, finish, progress_bar, report_trajectory,
    trajectory_dir,
};
use crate::arith::{Arith, F32, F64, Kind};
use crate::config::Config;
use crate::data::Dataset;
use crate::error::Result;
use crate::io::trajectory::Trajectory;
use crate::train::Trainer;

#[derive(Args, Debug)]
pub(super) struct RunArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// The arithmetic to train in: f64 (binary64, the default) or f32 (binary32, the
    /// data rounded to binary32 on entry: what a float32 implementation computes).
    #[arg(long, value_name = "f64|f32", default_value = "f64", value_parser = parse_arith)]
    arith: Kind,
    #[command(flatten)]
    data: DataDir,
    #[command(flatten)]
    output: RunOutput,
}

/// The arithmetic named on the command line (the hardware ones).
fn parse_arith(s: &str) -> std::result::Result<Kind, String> {
    match s {
        "f64" => Ok(Kind::F64),
        "f32" => Ok(Kind::F32),
        _ => Err(format!("`{s}` is not a run arithmetic (f64, f32)")),
    }
}

/// Train `cfg` in `ar`, the progress on `bar`.
fn train<A: Arith>(cfg: &Config, data: &Dataset, ar: A, quiet: bool) -> Result<Trajectory> {
    let bar = progress_bar(cfg.steps, quiet, "steps");
    let traj = Trainer::run(cfg, data, ar, &mut |s| bar.set_position(s))?;
    bar.finish_and_clear();
    Ok(traj)
}

pub(super) fn run(args: &RunArgs) -> Result<i32> {
    let (cfg, data) = args.data.load(&args.config)?;
    let prec = match args.arith {
        Kind::F32 => F32.prec(),
        _ => F64.prec(),
    };
    crate::train::check_memory(&cfg, args.arith, prec, cfg.method)?;
    crate::train::record::check_size(&cfg)?;
    let out = trajectory_dir(args.output.out.as_deref())?;
    let t0 = Instant::now();
    let data = data.unwrap_or_else(|| Dataset::generate(&cfg));
    let quiet = args.output.quiet;
    let traj = match args.arith {
        Kind::F32 => train(&cfg, &data, F32, quiet)?,
        _ => train(&cfg, &data, F64, quiet)?,
    };
    report_trajectory(&traj, out.as_ref(), args.output.json)?;
    finish(t0, Some(cfg.steps));
    Ok(EXIT_OK)
}
