//! `tokensel cost`: time one gradient step in each arithmetic and method.

use clap::Args;

use super::{ConfigArgs, EXIT_OK, print_report};
use crate::config::Method;
use crate::error::Result;
use crate::experiments::cost;

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
    /// Timed blocks of 20 f64 steps (median reported).
    #[arg(long, value_name = "N", default_value_t = 15)]
    reps: usize,
    /// Timed twin steps per precision (median reported).
    #[arg(long, value_name = "N", default_value_t = 3)]
    twin_reps: usize,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

pub(super) fn cost(args: &CostArgs) -> Result<i32> {
    let cfg = args.config.load()?;
    let methods = match args.config.method {
        Some(m) => vec![m],
        None => vec![Method::Direct, Method::Span],
    };
    // `measure` checks its arguments (`cost::check`) before any work
    let r = cost::measure(
        &cfg,
        &args.precs,
        &args.ball,
        &methods,
        args.reps,
        args.twin_reps,
        &mut |name| eprintln!("timing {name}"),
    )?;
    print_report(&r, args.json);
    Ok(EXIT_OK)
}
