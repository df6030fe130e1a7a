//! Analyses of runs: the f64-vs-twin comparison (saturation and absorption detector),
//! the saturation gap sweep, the exact rational tier, explicit constructions from the
//! paper's theorems, and the diff of two trajectories.

pub mod compare;

/// True when `err` is above `tol` or NaN (an error that cannot be measured fails).
pub fn exceeds(err: f64, tol: f64) -> bool {
    use std::cmp::Ordering::{Equal, Less};
    !matches!(err.partial_cmp(&tol), Some(Less | Equal))
}

pub mod diff;
pub mod exact;
pub mod judge;
pub mod saturation;
pub mod theory;
