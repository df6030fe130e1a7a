//! File formats: the trajectory every trainer emits (JSON and CSV) and the run summary,
//! the twin's state file, the NPY export of a run's exact data, the external trajectory
//! of another implementation, the one spelling of non-finite numbers, safe reads of
//! input files, atomic writes of single files and of output sets. Nothing here knows how
//! training works.

pub mod export;
pub mod external;
pub mod files;
pub mod nonfinite;
pub mod publish;
pub mod record;
pub mod state;
pub mod trajectory;
