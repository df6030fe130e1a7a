//! `tokensel diff`: compare two saved trajectories.

use std::path::{Path, PathBuf};

use clap::Args;

use super::{EXIT_FAILED, EXIT_OK, print_report, read_large};
use crate::error::Result;
use crate::io::trajectory::Trajectory;

#[derive(Args, Debug)]
pub(super) struct DiffArgs {
    /// First trajectory.json.
    a: PathBuf,
    /// Second trajectory.json.
    b: PathBuf,
    /// Relative deviation that counts as a divergence.
    #[arg(long, value_name = "X", default_value_t = 1e-12)]
    rtol: f64,
    /// Compare only the checkpoints both trajectories hold (different checkpoint sets
    /// are otherwise a divergence).
    #[arg(long)]
    common_only: bool,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// Read a trajectory; a certificate (or another output that names its format) is
/// refused as what it is, with what diff takes.
fn load(path: &Path) -> Result<Trajectory> {
    let text = read_large(path)?;
    if super::plot::names_format(&text, "tokensel-certificate/") {
        return Err(crate::Error::Parse {
            what: "trajectory",
            path: path.to_path_buf(),
            message: "this is a certificate (`tokensel certify`), not a trajectory: `tokensel \
                      diff` compares two trajectories (the trajectory.json of `tokensel run \
                      --out` or `tokensel twin --out`)"
                .into(),
        });
    }
    Trajectory::from_json(&text, path)
}

pub(super) fn diff(args: &DiffArgs) -> Result<i32> {
    crate::analysis::check_tol("rtol", args.rtol)?;
    let (a, b) = (load(&args.a)?, load(&args.b)?);
    if a.config.model != b.config.model {
        let name = |t: &Trajectory| match t.config.model.is_multiclass() {
            true => format!("multiclass (K = {})", t.config.model.classes),
            false => "token-selection (binary)".to_string(),
        };
        return Err(crate::Error::Mismatch {
            what: "the models of A and B".into(),
            reason: format!(
                "A is {} and B is {}: their outputs f and labels mean different things \
                 (the binary f against a K-class margin; labels +-1 against class indices), \
                 so they are not compared number by number",
                name(&a),
                name(&b)
            ),
        });
    }
    let r = crate::analysis::diff::diff(&a, &b, args.rtol, args.common_only);
    print_report(&r, args.json);
    Ok(if r.diverged { EXIT_FAILED } else { EXIT_OK })
}
