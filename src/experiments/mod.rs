//! Experiments built on the trainer: label-noise sweeps, claim files, the cost table.

pub mod claims;
pub mod cost;
pub mod grid;
pub mod sweep;
