//! `tokensel cost`: time one gradient step in each arithmetic and method.

use clap::Args;

use super::{ConfigArgs, EXIT_OK, print_report};
use crate::config::Method;
use crate::error::{Error, Result};
use crate::experiments::cost;
use crate::model::caps::{Capability, require};

#[derive(Args, Debug)]
pub(super) struct CostArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Twin precisions in bits (53 = the f64 predictor), comma separated.
    #[arg(long, value_name = "BITS", value_delimiter = ',', default_values_t = [53u32, 64, 128, 256, 512, 1024])]
    precs: Vec<u32>,
    /// Ball precisions in bits (the certified trainer's span step), comma separated;
    /// none by default.
    #[arg(long, value_name = "BITS", value_delimiter = ',')]
    ball: Vec<u32>,
    /// Also time the K-class model (SPEC section 14) for each K (2..=100, comma
    /// separated): the config with `[model] kind = "multiclass"`, `classes = K` and one
    /// weakly relevant token per other class (T grows by K - 2), f64 and the twin at
    /// each of --precs in each method; a second table, with ratios to the binary step.
    #[arg(long, value_name = "K", value_delimiter = ',')]
    classes: Vec<usize>,
    /// Timed blocks of 20 f64 steps (median reported).
    #[arg(long, value_name = "N", default_value_t = 15)]
    reps: usize,
    /// Timed twin steps per precision (median reported).
    #[arg(long, value_name = "N", default_value_t = 3)]
    twin_reps: usize,
    /// Also compare each f64 and f32 row's trajectory with the MPFR twin over STEPS steps
    /// (compare's lockstep, span twin): the step at which it first leaves --tol, or
    /// that it followed all STEPS. Off by default (the twin runs STEPS steps per row).
    #[arg(long, value_name = "STEPS")]
    follow: Option<u64>,
    /// The twin's precision for --follow (default: the highest of --precs).
    #[arg(long, value_name = "BITS")]
    follow_prec: Option<u32>,
    /// The relative error that counts as leaving the twin for --follow (default 1e-8).
    #[arg(long, value_name = "X")]
    tol: Option<f64>,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// No progress lines ("timing ..." on stderr).
    #[arg(long)]
    quiet: bool,
}

/// A "timing NAME" progress line on stderr, unless `quiet`.
fn progress(quiet: bool, name: &str) {
    if !quiet {
        eprintln!("timing {name}");
    }
}

pub(super) fn cost(args: &CostArgs) -> Result<i32> {
    let cfg = args.config.load()?;
    require(&cfg, "cost", &[Capability::SpanForm])?;
    let methods = match args.config.method {
        Some(m) => vec![m],
        // the span step only where the config's optimizer allows it
        None if cfg.optimizer.needs_direct(cfg.n_train) => vec![Method::Direct],
        None => vec![Method::Direct, Method::Span],
    };
    // every argument is checked (`cost::check`, `cost::check_classes`) before any work
    cost::check(
        &cfg,
        &args.precs,
        &args.ball,
        &methods,
        args.reps,
        args.twin_reps,
    )?;
    cost::check_classes(&cfg, &args.classes, &args.precs, &methods)?;
    let follow = match args.follow {
        None if args.tol.is_some() || args.follow_prec.is_some() => {
            let flag = if args.tol.is_some() {
                "--tol"
            } else {
                "--follow-prec"
            };
            return Err(Error::argument(flag, "needs --follow STEPS"));
        }
        Some(steps) => {
            let tol = args.tol.unwrap_or(1e-8);
            crate::analysis::check_tol("tol", tol)?;
            let prec = match args.follow_prec {
                Some(p) => p,
                None => args.precs.iter().copied().max().unwrap_or(0),
            };
            let f = cost::FollowOptions { steps, prec, tol };
            f.check(&cfg, &methods)?;
            Some(f)
        }
        None => None,
    };
    let mut r = cost::measure(
        &cfg,
        &args.precs,
        &args.ball,
        &methods,
        args.reps,
        args.twin_reps,
        &mut |name| progress(args.quiet, name),
    )?;
    r.multiclass = cost::measure_classes(
        &cfg,
        &r,
        &args.classes,
        &args.precs,
        &methods,
        args.reps,
        args.twin_reps,
        &mut |name| progress(args.quiet, name),
    )?;
    if let Some(f) = follow {
        cost::follow_rows(&cfg, &mut r, f, &mut |name| progress(args.quiet, name))?;
    }
    print_report(&r, args.json);
    Ok(EXIT_OK)
}
