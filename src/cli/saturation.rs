//! `tokensel saturation`: sweep the score gap on one training sequence.

use clap::Args;

use super::{ConfigArgs, EXIT_OK, JudgeArgs, print_report};
use crate::analysis::saturation;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::model::caps::{Capability, require};

#[derive(Args, Debug)]
pub(super) struct SaturationArgs {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    judge: JudgeArgs,
    /// Training sample whose sequence is swept.
    #[arg(long, value_name = "I", default_value_t = 0)]
    sample: usize,
    /// Number of grid points (log-spaced gaps 1..1100).
    #[arg(long, value_name = "N", default_value_t = 60)]
    points: usize,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// No progress output: `saturation` has none; accepted as `run`, `twin` and the
    /// other computing commands accept it.
    #[arg(long)]
    quiet: bool,
}

/// Largest grid of `saturation --points` (each point is one 256-bit evaluation).
const MAX_SWEEP_POINTS: usize = 10_000;

pub(super) fn saturation(args: &SaturationArgs) -> Result<i32> {
    // `--quiet`: saturation prints no progress, so there is nothing to hide
    let _ = args.quiet;
    let cfg = args.config.load()?;
    require(&cfg, "saturation", &[Capability::Saturation])?;
    crate::analysis::check_tol("tol", args.judge.tol)?;
    if args.sample >= cfg.n_train {
        return Err(Error::argument(
            "--sample",
            format!("must be below n_train = {}", cfg.n_train),
        ));
    }
    if args.points < 2 {
        return Err(Error::argument("--points", "must be at least 2"));
    }
    if args.points > MAX_SWEEP_POINTS {
        return Err(Error::TooLarge {
            field: "--points".into(),
            reason: format!(
                "{} grid points, more than the limit of {MAX_SWEEP_POINTS}",
                args.points
            ),
        });
    }
    let data = Dataset::generate(&cfg);
    let grid = saturation::default_grid(args.points);
    let r = saturation::sweep(
        &data.train,
        args.sample,
        args.judge.prec,
        args.judge.tol,
        &grid,
    )?;
    print_report(&r, args.json);
    Ok(EXIT_OK)
}
