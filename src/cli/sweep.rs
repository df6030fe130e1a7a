//! `tokensel sweep`: train at several label-noise rates and seeds.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::{ConfigArgs, EXIT_OK, finish, print_and_publish, progress_bar};
use crate::config::Preset;
use crate::error::Result;
use crate::experiments::sweep;
use crate::io::publish::{OutputDir, SetKind};
use crate::seeds::SeedList;

#[derive(Args, Debug)]
pub(super) struct SweepArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Label-noise rates, comma separated.
    #[arg(long, value_name = "ETAS", value_delimiter = ',', default_values_t = [0.5, 0.6, 0.65, 0.7, 0.725, 0.75, 0.8, 0.85])]
    etas: Vec<f64>,
    /// Seeds: a list s1,s2,... or a range a..b (b excluded); each at most 2^63 - 1, at
    /// most 1000 of them.
    #[arg(long, value_name = "SEEDS", default_value = "0,1,2")]
    seeds: SeedList,
    /// Write sweep.csv, sweep.json and sweep.svg into DIR (published as one set).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

pub(super) fn sweep(args: &SweepArgs) -> Result<i32> {
    let base = args.config.load_with_default(Preset::LabelNoiseSweep)?;
    let seeds = args.seeds.seeds("seeds")?;
    sweep::check(&base, &args.etas, &seeds)?;
    let out = args
        .out
        .as_deref()
        .map(|dir| OutputDir::prepare(dir, SetKind::Sweep))
        .transpose()?;
    let t0 = Instant::now();
    let total = (args.etas.len() * seeds.len()) as u64;
    let bar = progress_bar(total, args.quiet, "runs");
    let report = sweep::sweep(&base, &args.etas, &seeds, &mut |done, _| {
        bar.set_position(done as u64)
    })?;
    bar.finish_and_clear();
    let published = print_and_publish(
        &report,
        report.files(),
        out.as_ref().zip(args.out.as_deref()),
        args.json,
        "sweep.{csv,json,svg}",
    );
    finish(t0, None);
    published?;
    Ok(EXIT_OK)
}
