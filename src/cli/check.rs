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
}

pub(super) fn check(args: &CheckArgs) -> Result<i32> {
    let text = read_text(&args.file)?;
    let (file, configs) = ClaimsFile::parse(&text, &args.file)?;
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
        print!("{}", Verdicts(&outcomes));
    }
    finish(t0, None);
    Ok(if outcomes.iter().any(|o| !o.pass) {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}
