//! Experiments built on the trainer: label-noise sweeps, grids (shards, merge), claim
//! files, the cost table. `grid` parses seeds and axes; `claims` may use it, not the
//! other way round.

pub mod claims;
pub mod cost;
pub mod grid;
pub mod protocol;
pub mod schema;
pub mod sweep;
