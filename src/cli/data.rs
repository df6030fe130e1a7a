//! `tokensel data`: write a run's exact arrays as NPY, with a manifest.

use std::path::PathBuf;

use clap::Args;

use super::{ConfigArgs, EXIT_OK};
use crate::data::{Dataset, Params};
use crate::error::Result;
use crate::io::files::check_output_dir;

#[derive(Args, Debug)]
pub(super) struct DataArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Directory for the NPY files, config.toml and manifest.json.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub(super) fn data(args: &DataArgs) -> Result<i32> {
    let cfg = args.config.load()?;
    check_output_dir(&args.out)?;
    let data = Dataset::generate(&cfg);
    let init = Params::init(&cfg);
    let m = crate::io::export::write_data(
        &cfg,
        &data,
        init.p.view(),
        init.w.as_ref().map(|w| w.view()),
        &args.out,
    )?;
    println!(
        "wrote {} arrays, config.toml and manifest.json to {} (seed {}, W(0) {})",
        m.arrays.len(),
        args.out.display(),
        m.seed,
        m.w0
    );
    Ok(EXIT_OK)
}
