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
/// `use_`: what is not done with them). The same model is the same kind, K and prompt
/// position; the encoder's `mlp` and `residual` are config differences (diff reports
/// them), not another record.
pub(super) fn same_model(a: &Trajectory, b: &Trajectory, who: &str, use_: &str) -> Result<()> {
    let (ma, mb) = (&a.config.model, &b.config.model);
    if (ma.kind, ma.classes, ma.prompt) == (mb.kind, mb.classes, mb.prompt) {
        return Ok(());
    }
    let name = |m: &crate::config::ModelSpec| {
        let kind = match m.kind {
            crate::config::ModelKind::Multiclass => format!("multiclass (K = {})", m.classes),
            crate::config::ModelKind::TokenSelection => "token-selection (binary)".to_string(),
            crate::config::ModelKind::Encoder => "the encoder (binary)".to_string(),
        };
        match m.in_sequence() {
            true => format!("{kind} with the prompt in sequence"),
            false => kind,
        }
    };
    let why = if ma.kind != mb.kind && (ma.is_multiclass() || mb.is_multiclass()) {
        "the binary f against a K-class margin; labels +-1 against class indices"
    } else if ma.kind != mb.kind {
        "another model's output and attention: the encoder's over its cls token and T tokens"
    } else if ma.classes != mb.classes {
        "K outputs per sample against another K"
    } else {
        "the prompt's attention is a position of the sequence in one and not in the other"
    };
    let (x, y) = who.split_once(" and ").unwrap_or((who, who));
    Err(crate::Error::Mismatch {
        what: format!("the models of {who}"),
        reason: format!(
            "{x} is {} and {y} is {}: their outputs and attention mean different things \
             ({why}), so they are not {use_}",
            name(ma),
            name(mb),
        ),
    })
}
