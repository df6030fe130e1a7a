//! File formats: the trajectory every trainer emits (JSON and CSV), the run summary and
//! atomic writes. Nothing here knows how training works.

pub mod trajectory;
