//! `tokensel protocol`: the two-phase fine-tuning protocol of the paper's Section I on
//! tokens (`experiments::protocol`).

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::{ConfigArgs, EXIT_OK, finish, print_and_publish, progress_bar};
use crate::error::{Error, Result};
use crate::experiments::protocol::{self, Pool};
use crate::io::publish::{OutputDir, SetKind};
use crate::model::caps::{Capability, require};
use crate::seeds::SeedList;

#[derive(Args, Debug)]
pub(super) struct ProtocolArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Override `[protocol] seeds`: a list s1,s2,... or a range a..b (b excluded).
    #[arg(long, value_name = "SEEDS")]
    seeds: Option<SeedList>,
    /// Draw the blocks from a `tokensel data` directory (generated or supplied arrays,
    /// e.g. from examples/features.py): its training split with its TRUE labels is the
    /// pool, its test split the test set. Without it, each seed's pool is the config's
    /// generated data (n_clean + n_train samples, no noise).
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Write protocol.json, protocol.csv and attention.csv into DIR (one set).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print exactly one JSON object (the report) on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

pub(super) fn protocol(args: &ProtocolArgs) -> Result<i32> {
    if args.config.seed.is_some() {
        return Err(Error::argument(
            "--seed",
            "the protocol runs the seeds of [protocol] seeds: give them with --seeds",
        ));
    }
    let mut cfg = args.config.load()?;
    if let Some(seeds) = &args.seeds {
        let seeds = seeds.seeds("seeds")?;
        match cfg.protocol.as_mut() {
            Some(p) => p.seeds = seeds,
            None => {
                protocol::settings(&cfg)?;
            }
        }
        cfg.validate()?;
    }
    require(&cfg, "protocol", &[Capability::Protocol])?;
    let prot = protocol::settings(&cfg)?.clone();
    crate::train::check_memory(&cfg, crate::arith::Kind::F64, 53, cfg.method)?;
    crate::train::record::check_size(&cfg)?;
    // a supplied pool is read and checked before any work
    let supplied = match &args.data {
        Some(dir) => {
            let (_, _, ds) = crate::io::export::verify_data(dir)?;
            let pool = Pool::of_dataset(ds);
            pool.check(&cfg)?;
            Some(pool)
        }
        None => {
            // a config whose pool is not valid fails before any training (a generated
            // pool has the config's shapes: only its config needs checking)
            Pool::generated_config(&cfg, prot.seeds[0])?;
            None
        }
    };
    let out = args
        .out
        .as_deref()
        .map(|dir| OutputDir::prepare(dir, SetKind::Protocol))
        .transpose()?;
    let t0 = Instant::now();
    let per_seed = protocol::steps_per_seed(&cfg)?;
    let total = per_seed.saturating_mul(prot.seeds.len() as u64);
    let bar = progress_bar(total, args.quiet, "steps (phase 1 and 2)");
    let report = protocol::run(
        &cfg,
        &mut |seed| match &supplied {
            Some(pool) => Ok(pool.clone()),
            None => Pool::generated(&cfg, seed),
        },
        &mut |k, s| bar.set_position((k as u64).saturating_mul(per_seed).saturating_add(s)),
    )?;
    bar.finish_and_clear();
    let published = print_and_publish(
        &report,
        report.files(),
        out.as_ref().zip(args.out.as_deref()),
        args.json,
        "{protocol.json,protocol.csv,attention.csv}",
    );
    // head steps and attention steps cost differently: no per-step average
    finish(t0, None);
    published?;
    if let Some(st) = &report.stopped {
        return Err(Error::Refused(format!(
            "seed {} stopped in phase {}: {} (the report holds the {} seed(s) before it)",
            st.seed,
            st.phase,
            st.error,
            report.rows.len()
        )));
    }
    Ok(EXIT_OK)
}
