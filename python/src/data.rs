//! `data` and `write_data`: a run's exact arrays, as NumPy arrays or as the NPY set of
//! `tokensel data`.

use ndarray::Array1;
use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use tokensel::prelude::Dataset;
use tokensel::prelude::formats::export::initial_blocks;
use tokensel::prelude::models::caps::{Capability, require};

use crate::config::PyConfig;
use crate::errors::lib;
use crate::supplied::{data_of, or_generate};

/// The exact arrays of `config`'s run, the arrays of `tokensel data` by name (its
/// initial parameter blocks as `<block>0`: `p0`, `W0` where dense; the factorised map's
/// `W_Q0`, `W_K0`, `b_Q0`, `b_K0`, `p0`); a config `tokensel data` refuses is refused
/// by the same capability check.
#[pyfunction]
pub(crate) fn data<'py>(py: Python<'py>, config: &PyConfig) -> PyResult<Bound<'py, PyDict>> {
    let cfg = config.inner.clone();
    lib(require(&cfg, "data", &[Capability::Export]))?;
    let (ds, blocks) = py.detach(|| (Dataset::generate(&cfg), initial_blocks(&cfg)));
    // a Ctrl-C that arrived while the GIL was released is raised here, before any
    // NumPy call (which would otherwise find the exception pending)
    py.check_signals()?;
    let out = PyDict::new(py);
    let labels = |y: &[i8]| Array1::from_vec(y.to_vec());
    let noisy: Array1<bool> = (0..ds.train.len()).map(|i| ds.train.is_noisy(i)).collect();
    out.set_item("X_train", ds.train.x.into_pyarray(py))?;
    out.set_item("y_train", labels(&ds.train.y).into_pyarray(py))?;
    out.set_item("y_true_train", labels(&ds.train.y_true).into_pyarray(py))?;
    out.set_item("noisy_train", noisy.into_pyarray(py))?;
    match ds.nu_classes {
        // the K-class model's head (K, d), class-major
        Some(nu) => out.set_item("nu", nu.into_pyarray(py))?,
        None => out.set_item("nu", ds.nu.into_pyarray(py))?,
    }
    out.set_item("X_test", ds.test.x.into_pyarray(py))?;
    out.set_item("y_test", labels(&ds.test.y_true).into_pyarray(py))?;
    crate::run::block_arrays(py, blocks, "0", &out)?;
    Ok(out)
}

/// Write the exact arrays of a run into `directory` (the layout of `tokensel data`, NPY
/// files, config.toml, the manifest last): `config`'s generated data, or supplied `data`
/// (the manifest then says `"source": "supplied"` and adds `groups.npy`). Any command's
/// `--data DIR` reads it back. Returns the manifest as JSON.
#[pyfunction]
#[pyo3(signature = (directory, config, data=None))]
pub(crate) fn write_data(
    py: Python<'_>,
    directory: std::path::PathBuf,
    config: &PyConfig,
    data: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    use tokensel::prelude::formats::publish::{OutputDir, SetKind};
    let cfg = config.inner.clone();
    lib(require(&cfg, "data", &[Capability::Export]))?;
    let out = lib(OutputDir::prepare(&directory, SetKind::Data))?;
    let data = data_of(&cfg, data)?;
    let manifest = lib(py.detach(|| {
        let data = or_generate(&cfg, data);
        let (manifest, files) = tokensel::prelude::formats::export::files(&cfg, &data);
        out.publish(&files).map(|()| manifest)
    }))?;
    // a Ctrl-C that arrived while the GIL was released is raised here, before any
    // NumPy call (which would otherwise find the exception pending)
    py.check_signals()?;
    Ok(serde_json::to_string(&manifest).expect("manifest serialises"))
}
