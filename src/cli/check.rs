//! `tokensel check`: run a claims file.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::{EXIT_FAILED, EXIT_OK, finish, read_text};
use crate::error::Result;
use crate::experiments::claims::{self, ClaimsFile, Verdicts};

#[derive(Args, Debug)]
pub(super) struct CheckArgs {
    /// The claims file (TOML, see `claims/paper.toml`).
    file: PathBuf,
    /// Print exactly one JSON array of outcomes on stdout.
    #[arg(long)]
    json: bool,
    /// Run every claim that names seeds on these seeds instead (`a..b` or a comma list):
    /// a quicker check of the file's machinery, not its claims (a share of seeds is then
    /// taken over these seeds; say so when you quote it).
    #[arg(long, value_name = "a..b|s1,s2", value_parser = seed_list)]
    seeds: Option<String>,
}

/// A seed list as written, checked by the claims' own grammar.
fn seed_list(text: &str) -> std::result::Result<String, String> {
    text.parse::<crate::seeds::SeedList>()?;
    Ok(text.to_string())
}

pub(super) fn check(args: &CheckArgs) -> Result<i32> {
    let text = read_text(&args.file)?;
    let (mut file, configs) = ClaimsFile::parse(&text, &args.file)?;
    if let Some(seeds) = &args.seeds {
        let text = seeds.clone();
        for claim in file.claim.iter_mut().filter(|c| c.seeds.is_some()) {
            claim.seeds = Some(text.clone());
        }
        eprintln!(
            "--seeds {text}: every claim that names seeds runs on these instead (not the file's claims)"
        );
    }
    let t0 = Instant::now();
    let outcomes = claims::check(&file, &configs, &args.file, &mut |k, n, name| {
        eprintln!("[{}/{n}] {name}", k + 1)
    })?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&outcomes).expect("outcomes serialise")
        );
    } else {
        if let Some(seeds) = &args.seeds {
            println!(
                "  seeds overridden (--seeds {seeds}): every claim that names seeds ran on these,\n  not on the file's own seeds: these are not the file's claims\n"
            );
        }
        print!("{}", Verdicts(&outcomes));
    }
    finish(t0, None);
    Ok(if outcomes.iter().any(|o| !o.pass) {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}
