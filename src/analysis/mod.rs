//! Analyses of runs: the f64-vs-twin comparison (saturation and absorption detector),
//! the saturation gap sweep, the exact rational tier, explicit constructions from the
//! paper's theorems, the diff of two trajectories, the judge of other implementations,
//! and certified runs (ball enclosures of the exact trajectory).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::quantity::Quantity;

pub(crate) mod compare;

/// Relative errors at one step of a run measured against the truth twin (`compare`'s
/// checkpoints, `judge`'s recorded steps).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Step.
    pub step: u64,
    /// Largest score gap z_top - z_second over the training samples (twin).
    #[serde(with = "crate::io::nonfinite")]
    pub max_gap: f64,
    /// Relative error of each measured quantity.
    #[serde(with = "crate::io::nonfinite::map")]
    pub rel_err: BTreeMap<Quantity, f64>,
}

/// Refuse a tolerance that is not finite and > 0 (`field` names the argument: a flag,
/// a keyword argument or a claim field).
pub fn check_tol(field: &str, tol: f64) -> crate::Result<()> {
    if tol.is_finite() && tol > 0.0 {
        Ok(())
    } else {
        Err(crate::Error::argument(
            field,
            format!("must be finite and > 0, got {tol}"),
        ))
    }
}

/// True when `err` is above `tol` or NaN (an error that cannot be measured fails).
pub fn exceeds(err: f64, tol: f64) -> bool {
    use std::cmp::Ordering::{Equal, Less};
    !matches!(err.partial_cmp(&tol), Some(Less | Equal))
}

pub(crate) mod certify;
pub(crate) mod diff;
pub(crate) mod exact;
pub(crate) mod judge;
pub(crate) mod lemma_a6;
pub(crate) mod saturation;
pub(crate) mod theory;
