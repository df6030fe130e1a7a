//! `tokensel plot`: draw a trajectory, a compare report or a certificate as SVG or PNG.

use std::path::PathBuf;

use clap::Args;

use super::{EXIT_OK, read_large};
use crate::analysis::compare::Report;
use crate::error::{Error, Result};
use crate::io::files::{check_output_file, write_atomic};
use crate::io::trajectory::Trajectory;
use crate::report::plot;

#[derive(Args, Debug)]
pub(super) struct PlotArgs {
    /// A trajectory.json (from `run --out` / `twin --out`), a compare report
    /// (`compare --json > report.json`) or a certificate (`certify --out DIR`: its
    /// certificate.json; drawn as bits lost against step).
    input: PathBuf,
    /// Output file: .svg or .png.
    #[arg(long, value_name = "FIG.svg|png")]
    out: PathBuf,
}

pub(super) fn plot(args: &PlotArgs) -> Result<i32> {
    let ext = args.out.extension().and_then(|e| e.to_str()).unwrap_or("");
    if ext != "svg" && ext != "png" {
        return Err(Error::config("out", "must end in .svg or .png"));
    }
    check_output_file(&args.out)?;
    let text = read_large(&args.input)?;
    let chart = match Trajectory::from_json(&text, &args.input) {
        Ok(t) => plot::attention_chart(&t),
        Err(first) => match Report::from_json(&text, &args.input) {
            Ok(r) => plot::error_chart(&r),
            // a report whose checks failed says why
            Err(e) if serde_json::from_str::<Report>(&text).is_ok() => return Err(e),
            // a certificate; anything else is not a report
            Err(_) => match serde_json::from_str::<crate::analysis::certify::Certificate>(&text) {
                Ok(c) => plot::radius_chart(&c),
                Err(_) => return Err(first),
            },
        },
    };
    let svg = chart.to_svg();
    let bytes = if ext == "png" {
        plot::svg_to_png(&svg).map_err(|e| Error::Io {
            path: args.out.clone(),
            source: std::io::Error::other(e),
        })?
    } else {
        svg.into_bytes()
    };
    write_atomic(&args.out, &bytes)?;
    println!("wrote {}", args.out.display());
    Ok(EXIT_OK)
}
