//! Analyses of runs: the f64-vs-twin comparison (saturation and absorption detector),
//! the saturation gap sweep, the exact rational tier, explicit constructions from the
//! paper's theorems, and the diff of two trajectories.

pub mod compare;
pub mod diff;
pub mod exact;
pub mod saturation;
pub mod theory;
