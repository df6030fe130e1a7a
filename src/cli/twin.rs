//! `tokensel twin`: train in MPFR (or the f64 predictor), with a resumable state file.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::{
    ConfigArgs, DataDir, EXIT_OK, RunOutput, finish, progress_bar, report_trajectory,
    trajectory_dir,
};
use crate::arith::{Arith, ArithVisitor, Choice};
use crate::config::Config;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::io::state::{self, Saver, Start, State};
use crate::io::trajectory::Trajectory;
use crate::train::Trainer;

#[derive(Args, Debug)]
pub(super) struct TwinArgs {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    data: DataDir,
    /// Precision in bits.
    #[arg(long, value_name = "BITS", default_value_t = crate::arith::DEFAULT_PREC)]
    prec: u32,
    /// Use the 53-bit f64-predictor arithmetic instead (ignores --prec).
    #[arg(long)]
    predictor: bool,
    /// State file: saved atomically every --save-every steps.
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,
    /// Steps between state saves.
    #[arg(long, value_name = "K", default_value_t = 100)]
    save_every: u64,
    /// Continue from --state if it exists (bit-identical to an uninterrupted run).
    #[arg(long)]
    resume: bool,
    #[command(flatten)]
    output: RunOutput,
    /// Testing aid: exit abruptly (code 3) after step N, as a crash would.
    #[arg(long, hide = true, value_name = "N")]
    stop_after: Option<u64>,
}

pub(super) fn twin(args: &TwinArgs) -> Result<i32> {
    let (cfg, data) = args.data.load(&args.config)?;
    let arith = if args.predictor {
        Choice::Predictor
    } else {
        Choice::mpfr(args.prec)?
    };
    crate::train::check_memory(&cfg, arith.kind(), arith.prec(), cfg.method)?;
    crate::train::record::check_size(&cfg)?;
    if args.save_every == 0 {
        return Err(Error::argument("--save-every", "must be at least 1"));
    }
    if let (true, Some(_)) = (cfg.model.is_network(), &args.state) {
        return Err(Error::argument(
            "--state",
            format!(
                "the {}'s twin keeps no resumable state yet (run it without --state)",
                cfg.model.kind.name()
            ),
        ));
    }
    if args.resume && args.state.is_none() {
        return Err(Error::argument("--resume", "needs --state FILE"));
    }
    if let (Some(state), Some(out)) = (&args.state, &args.output.out) {
        // The --out set replaces DIR as a whole: a state file in it would be lost, and
        // would make DIR hold a file the set does not list.
        if crate::io::files::resolved(state).starts_with(crate::io::files::resolved(out)) {
            return Err(Error::argument(
                "--state",
                format!(
                    "`{}` is the --out directory `{}` or inside it: the trajectory set replaces that directory as a whole; keep the state file elsewhere",
                    state.display(),
                    out.display()
                ),
            ));
        }
    }
    let start = match &args.state {
        Some(path) => state::open(path, args.resume)?,
        None => Start::Fresh,
    };
    let out = trajectory_dir(args.output.out.as_deref())?;
    let resume = match start {
        Start::Resume(st) => {
            // its values before any work (the data, the trainer): no unknown key, every
            // parameter and moment finite
            crate::train::resume::check_values(&st)?;
            Some(st)
        }
        Start::Fresh => {
            if let (Some(path), true) = (&args.state, args.resume) {
                eprintln!("no state at {}: starting from step 0", path.display());
            }
            None
        }
    };
    let t0 = Instant::now();
    let data = data.unwrap_or_else(|| Dataset::generate(&cfg));
    let bar = progress_bar(cfg.steps, args.output.quiet, "steps");
    let saver = args.state.as_deref().map(|path| Saver {
        path,
        every: args.save_every,
    });
    let saved = std::cell::Cell::new(None);
    let traj = arith.with(Twin {
        cfg: &cfg,
        data: &data,
        resume: resume.as_deref(),
        saver,
        saved: &saved,
        bar: &bar,
        stop: args.stop_after,
    })?;
    bar.finish_and_clear();
    // said once the trainer took the state (it refuses one of another config or
    // trainer, exit 2, before any step)
    if let (Some(path), Some(st), false) = (&args.state, &resume, args.output.quiet) {
        eprintln!("resumed from step {} of {}", st.step, path.display());
    }
    if let (Some(path), Some(step), false) = (&args.state, saved.get(), args.output.quiet) {
        eprintln!("wrote state at step {step} to {}", path.display());
    }
    report_trajectory(&traj, out.as_ref(), args.output.json)?;
    finish(t0, None);
    Ok(EXIT_OK)
}

/// The twin's run in the arithmetic visited: from `resume` (or step 0), the state saved
/// by `saver` (the step of the last save in `saved`), the progress on `bar`, an abrupt exit (code 3) after step `stop`.
struct Twin<'a> {
    cfg: &'a Config,
    data: &'a Dataset,
    resume: Option<&'a State>,
    saver: Option<Saver<'a>>,
    /// The step of the last state saved.
    saved: &'a std::cell::Cell<Option<u64>>,
    bar: &'a indicatif::ProgressBar,
    stop: Option<u64>,
}

impl ArithVisitor for Twin<'_> {
    type Output = Trajectory;
    fn visit<A: Arith>(self, ar: A) -> Result<Trajectory> {
        let Twin {
            cfg,
            data,
            resume,
            saver,
            saved,
            bar,
            stop,
        } = self;
        if cfg.model.is_network() {
            return crate::train::network::run(cfg, data, ar, &mut |s| bar.set_position(s));
        }
        let mut tr = Trainer::new(cfg, data, ar, cfg.formulation)?;
        tr.record(resume, &mut |tr, rec| {
            if let Some(s) = saver.filter(|s| s.due(tr.step, cfg.steps)) {
                tr.state(rec).save(s.path)?;
                saved.set(Some(tr.step));
            }
            bar.set_position(tr.step);
            if stop == Some(tr.step) {
                std::process::exit(3);
            }
            Ok(())
        })
    }
}
