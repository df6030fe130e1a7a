//! `tokensel run`: train in f64 (or float32) and report.

use std::time::Instant;

use clap::Args;

use super::{
    ConfigArgs, DataDir, EXIT_OK, RunOutput, finish, progress_bar, report_trajectory,
    trajectory_dir,
};
use crate::arith::{Arith, ArithVisitor, Choice};
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
    arith: Choice,
    #[command(flatten)]
    data: DataDir,
    #[command(flatten)]
    output: RunOutput,
}

/// The arithmetic named on the command line (the hardware ones).
fn parse_arith(s: &str) -> std::result::Result<Choice, String> {
    match Choice::parse(s, None) {
        Ok(c @ (Choice::F64 | Choice::F32)) => Ok(c),
        _ => Err(format!("`{s}` is not a run arithmetic (f64, f32)")),
    }
}

/// Train `cfg` on `data` in the arithmetic visited, the progress on a bar (hidden when
/// `quiet`).
pub(super) struct Train<'a> {
    /// The run's config.
    pub(super) cfg: &'a Config,
    /// Its data set.
    pub(super) data: &'a Dataset,
    /// No progress bar.
    pub(super) quiet: bool,
}

impl ArithVisitor for Train<'_> {
    type Output = Trajectory;
    fn visit<A: Arith>(self, ar: A) -> Result<Trajectory> {
        let bar = progress_bar(self.cfg.steps, self.quiet, "steps");
        let mut progress = |s| bar.set_position(s);
        let traj = match self.cfg.model.is_network() {
            true => crate::train::network::run(self.cfg, self.data, ar, &mut progress)?,
            false => Trainer::run(self.cfg, self.data, ar, &mut progress)?,
        };
        bar.finish_and_clear();
        Ok(traj)
    }
}

pub(super) fn run(args: &RunArgs) -> Result<i32> {
    let (cfg, data) = args.data.load(&args.config)?;
    crate::train::check_memory(&cfg, args.arith.kind(), args.arith.prec(), cfg.method)?;
    crate::train::record::check_size(&cfg)?;
    let out = trajectory_dir(args.output.out.as_deref())?;
    let t0 = Instant::now();
    let data = data.unwrap_or_else(|| Dataset::generate(&cfg));
    let quiet = args.output.quiet;
    let traj = args.arith.with(Train {
        cfg: &cfg,
        data: &data,
        quiet,
    })?;
    report_trajectory(&traj, out.as_ref(), args.output.json)?;
    finish(t0, Some(cfg.steps));
    Ok(EXIT_OK)
}
