//! File formats: the trajectory every trainer emits (JSON and CSV) and the run summary,
//! the twin's state file, the NPY export of a run's exact data, the external trajectory
//! of another implementation, and atomic writes. Nothing here knows how training works.

pub mod export;
pub mod external;
pub mod files;
pub mod state;
pub mod trajectory;
