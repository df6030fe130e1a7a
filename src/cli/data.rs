//! `tokensel data`: write a run's exact arrays as NPY, with a manifest.

use std::path::PathBuf;

use clap::Args;

use super::{ConfigArgs, EXIT_OK};
use crate::data::{Dataset, Params};
use crate::error::Result;
use crate::io::publish::{OutputDir, SetKind};

#[derive(Args, Debug)]
pub(super) struct DataArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Directory for the NPY files, config.toml and manifest.json (published as one set:
    /// absent, empty, or an earlier data export).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub(super) fn data(args: &DataArgs) -> Result<i32> {
    let cfg = args.config.load()?;
    crate::model::caps::require(&cfg, "data", &[crate::model::caps::Capability::Export])?;
    let out = OutputDir::prepare(&args.out, SetKind::Data)?;
    let data = Dataset::generate(&cfg);
    let init = Params::init(&cfg);
    let (m, files) = crate::io::export::files(
        &cfg,
        &data,
        init.p.view(),
        init.w.as_ref().map(|w| w.view()),
    );
    out.publish(&files)?;
    println!(
        "wrote {} arrays, config.toml and manifest.json to {} (seed {}, W(0) {})",
        m.arrays.len(),
        args.out.display(),
        m.seed,
        m.w0
    );
    Ok(EXIT_OK)
}
