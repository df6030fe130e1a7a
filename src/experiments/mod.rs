//! Experiments built on the trainer: label-noise sweeps, grids (shards, merge), claim
//! files, the cost table. `grid` parses seeds and axes; `claims` may use it, not the
//! other way round.

pub(crate) mod claims;
pub(crate) mod cost;
pub(crate) mod grid;
pub(crate) mod protocol;
pub(crate) mod schema;
pub(crate) mod sweep;
