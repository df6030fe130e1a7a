//! `tokensel judge`: replay another implementation's run in the twin and diagnose it.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::{EXIT_FAILED, EXIT_OK, JudgeArgs, finish, print_report, progress_bar};
use crate::analysis::judge::{self, Options};
use crate::error::Result;
use crate::io::export::verify_data;
use crate::io::external::External;
use crate::model::caps::{Capability, require};

#[derive(Args, Debug)]
pub(super) struct JudgeCmdArgs {
    /// The external trajectory (`.json`, or `.npz` with a `header` array):
    /// docs/judge.md.
    #[arg(value_name = "EXT")]
    external: PathBuf,
    /// The `tokensel data` directory the implementation ran on.
    #[arg(long, value_name = "DIR")]
    data: PathBuf,
    #[command(flatten)]
    judge: JudgeArgs,
    /// Working precision of the ball enclosure that proves values wrong (bits).
    #[arg(long, value_name = "BITS", default_value_t = crate::arith::DEFAULT_BALL_PREC)]
    enclosure_prec: u32,
    /// Skip the ball enclosure (no proof of wrongness; saves its replay).
    #[arg(long)]
    no_enclosure: bool,
    /// Print exactly one JSON object (the report, with every recorded step) on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

pub(super) fn judge(args: &JudgeCmdArgs) -> Result<i32> {
    let opts = Options {
        prec: args.judge.prec,
        tol: args.judge.tol,
        enclosure: (!args.no_enclosure).then_some(args.enclosure_prec),
    };
    opts.validate()?;
    let (mut cfg, _, data) = verify_data(&args.data)?;
    require(&cfg, "judge", &[Capability::JudgeReplay])?;
    let ext = External::read(&args.external)?;
    ext.check_against(&cfg)?;
    cfg.steps = *ext.steps.last().expect("checked: steps not empty");
    opts.check(&cfg)?;
    let t0 = Instant::now();
    let bar = progress_bar(cfg.steps, args.quiet, "steps");
    let report = judge::judge(&cfg, &data, &ext, opts, &mut |s| bar.set_position(s))?;
    bar.finish_and_clear();
    print_report(&report, args.json);
    finish(t0, None);
    Ok(if report.within_tolerance {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}
