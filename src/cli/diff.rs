//! `tokensel diff`: compare two saved trajectories.

use std::path::PathBuf;

use clap::Args;

use super::{EXIT_FAILED, EXIT_OK, print_report};
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

pub(super) fn diff(args: &DiffArgs) -> Result<i32> {
    crate::analysis::check_tol("rtol", args.rtol)?;
    let takes = "`tokensel diff` compares two trajectories";
    let (a, b) = (
        super::plot::trajectory_only(&args.a, takes)?,
        super::plot::trajectory_only(&args.b, takes)?,
    );
    same_model(&a, &b, "A and B", "compared number by number")?;
    let r = crate::analysis::diff::diff(&a, &b, args.rtol, args.common_only);
    print_report(&r, args.json);
    Ok(if r.diverged { EXIT_FAILED } else { EXIT_OK })
}

/// Refuse two trajectories of different models (`who`: how the message names them,
/// `use_`: what is not done with them).
pub(super) fn same_model(a: &Trajectory, b: &Trajectory, who: &str, use_: &str) -> Result<()> {
    if a.config.model == b.config.model {
        return Ok(());
    }
    let name = |t: &Trajectory| match t.config.model.is_multiclass() {
        true => format!("multiclass (K = {})", t.config.model.classes),
        false => "token-selection (binary)".to_string(),
    };
    let (x, y) = who.split_once(" and ").unwrap_or((who, who));
    Err(crate::Error::Mismatch {
        what: format!("the models of {who}"),
        reason: format!(
            "{x} is {} and {y} is {}: their outputs and labels mean different things \
             ({}), so they are not {use_}",
            name(a),
            name(b),
            match (
                a.config.model.is_multiclass(),
                b.config.model.is_multiclass()
            ) {
                (true, true) if a.config.model.classes != b.config.model.classes => {
                    "K outputs per sample against another K"
                }
                (true, true) => "their [model] sections differ",
                _ => "the binary f against a K-class margin; labels +-1 against class indices",
            }
        ),
    })
}
