//! File formats: the trajectory every trainer emits (JSON and CSV), the run summary,
//! atomic writes, and the NPY export of a run's exact data. Nothing here knows how
//! training works.

pub mod export;
pub mod external;
pub mod trajectory;
