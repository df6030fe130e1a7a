//! `tokensel run`: train in f64 and report.

use std::time::Instant;

use clap::Args;

use super::{
    ConfigArgs, EXIT_OK, RunOutput, finish, progress_bar, report_trajectory, trajectory_dir,
};
use crate::arith::{Arith, F64};
use crate::data::Dataset;
use crate::error::Result;
use crate::train::Trainer;

#[derive(Args, Debug)]
pub(super) struct RunArgs {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    output: RunOutput,
}

pub(super) fn run(args: &RunArgs) -> Result<i32> {
    let cfg = args.config.load()?;
    crate::train::check_memory(&cfg, F64.kind(), 53, cfg.method)?;
    crate::train::record::check_size(&cfg)?;
    let out = trajectory_dir(args.output.out.as_deref())?;
    let t0 = Instant::now();
    let data = Dataset::generate(&cfg);
    let bar = progress_bar(cfg.steps, args.output.quiet, "steps");
    let traj = Trainer::run(&cfg, &data, F64, &mut |s| bar.set_position(s))?;
    bar.finish_and_clear();
    report_trajectory(&traj, out.as_ref(), args.output.json)?;
    finish(t0, Some(cfg.steps));
    Ok(EXIT_OK)
}
