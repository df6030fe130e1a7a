//! File formats: the trajectory every trainer emits (JSON and CSV) and the run summary,
//! the twin's state file, the NPY export of a run's exact data, the external trajectory
//! of another implementation, the one spelling of non-finite numbers, safe reads of
//! input files, atomic writes of single files and of output sets. Nothing here knows how
//! training works.

pub(crate) mod export;
pub(crate) mod external;
pub(crate) mod files;
pub(crate) mod nonfinite;
pub(crate) mod publish;
pub(crate) mod record;
pub(crate) mod state;
pub(crate) mod trajectory;
