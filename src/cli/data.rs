//! `tokensel data`: write a run's exact arrays (its initial parameter blocks included)
//! as NPY, with a manifest.

use std::path::PathBuf;

use clap::Args;

use super::{ConfigArgs, EXIT_OK};
use crate::data::Dataset;
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
    let (m, files) = crate::io::export::files(&cfg, &data);
    out.publish(&files)?;
    // the linear map names W(0) as ever; the factorised map its initial blocks
    let init = match &cfg.factorised {
        None => format!("W(0) {}", m.w0),
        Some(_) => {
            let names: Vec<String> = crate::model::query::Query::<f64>::declare(&cfg)
                .iter()
                .map(|b| format!("{}0", b.name))
                .collect();
            format!("initial blocks {}", names.join(", "))
        }
    };
    println!(
        "wrote {} arrays, config.toml and manifest.json to {} (seed {}, {init})",
        m.arrays.len(),
        args.out.display(),
        m.seed,
    );
    Ok(EXIT_OK)
}
