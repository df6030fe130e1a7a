//! `tokensel run`: train in f64 and report.

use std::time::Instant;

use clap::Args;

use super::{ConfigArgs, DataDir, EXIT_OK, RunOutput, finish, progress_bar, report_trajectory};
use crate::arith::{Arith, F64};
use crate::data::Dataset;
use crate::error::Result;
use crate::io::files::check_output_dir;
use crate::train::Trainer;

#[derive(Args, Debug)]
pub(super) struct RunArgs {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    data: DataDir,
    #[command(flatten)]
    output: RunOutput,
}

pub(super) fn run(args: &RunArgs) -> Result<i32> {
    let (cfg, data) = args.data.load(&args.config)?;
    crate::train::check_memory(&cfg, F64.kind(), 53, cfg.method)?;
    if let Some(dir) = &args.output.out {
        check_output_dir(dir)?;
    }
    let t0 = Instant::now();
    let data = data.unwrap_or_else(|| Dataset::generate(&cfg));
    let bar = progress_bar(cfg.steps, args.output.quiet, "steps");
    let traj = Trainer::run(&cfg, &data, F64, &mut |s| bar.set_position(s))?;
    bar.finish_and_clear();
    report_trajectory(&traj, args.output.out.as_deref(), args.output.json)?;
    finish(t0, Some(cfg.steps));
    Ok(EXIT_OK)
}
