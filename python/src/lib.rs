//! `tokensel._tokensel`: the Python extension of tokensel (PyO3 + rust-numpy). Bindings
//! only: every number comes from the `tokensel` library; this crate converts arguments,
//! releases the GIL around the library's work and maps its typed errors to Python
//! exceptions (`tokensel.errors`). The Python package `tokensel` (python/tokensel/)
//! wraps these functions with docstrings and type stubs.
//!
//! Arrays come in as NumPy arrays (borrowed read-only when they are float64 already,
//! converted otherwise) and go out as NumPy arrays that own the library's buffers (moved,
//! not copied). Reports (summary, compare, judge) cross as their JSON text, the very
//! serialisation the CLI prints, so a Python dict holds the same keys and bits.
//!
//! This file only registers; the work is split by concern:
//! - `errors.rs`: the one mapping from the library's errors to `tokensel.errors`;
//! - `convert.rs`: arguments into the library's values (arrays of any layout, labels,
//!   groups, JSON, method names), with the refusals and their messages;
//! - `supplied.rs`: a supplied data set from a dict of arrays, checked;
//! - `config.rs`: the `Config` class;
//! - one module per entry point: `data.rs` (`data`, `write_data`), `run.rs`, `judge.rs`
//!   (`judge`, `format_judge`), `compare.rs`, `certify.rs`, `grid.rs` (`grid_cells`,
//!   `run_cell`, `grid_merge`).

use pyo3::prelude::*;

use tokensel::prelude::{DEFAULT_BALL_PREC, DEFAULT_PREC};

mod certify;
mod compare;
mod config;
mod convert;
mod data;
mod errors;
mod grid;
mod judge;
mod protocol;
mod run;
mod supplied;
mod svm;

/// The extension module.
#[pymodule]
fn _tokensel(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<config::PyConfig>()?;
    m.add_function(wrap_pyfunction!(data::data, m)?)?;
    m.add_function(wrap_pyfunction!(run::run, m)?)?;
    m.add_function(wrap_pyfunction!(judge::judge, m)?)?;
    m.add_function(wrap_pyfunction!(judge::format_judge, m)?)?;
    m.add_function(wrap_pyfunction!(compare::compare, m)?)?;
    m.add_function(wrap_pyfunction!(certify::certify, m)?)?;
    m.add_function(wrap_pyfunction!(svm::svm, m)?)?;
    m.add_function(wrap_pyfunction!(protocol::protocol, m)?)?;
    m.add_function(wrap_pyfunction!(data::write_data, m)?)?;
    m.add_function(wrap_pyfunction!(grid::grid_cells, m)?)?;
    m.add_function(wrap_pyfunction!(grid::run_cell, m)?)?;
    m.add_function(wrap_pyfunction!(grid::grid_merge, m)?)?;
    m.add("DEFAULT_PREC", DEFAULT_PREC)?;
    m.add("DEFAULT_BALL_PREC", DEFAULT_BALL_PREC)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
