//! `compare`: the report of `tokensel compare --json`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use tokensel::prelude::DEFAULT_PREC;
use tokensel::prelude::analysis::compare as compare_lib;

use crate::config::PyConfig;
use crate::convert::method_arg;
use crate::errors::lib;
use crate::supplied::{data_of, or_generate};

/// `tokensel compare --json`: the f64 trainer, the MPFR twin, the predictor over its
/// first `predictor_steps` steps (`None`: the whole run) and, with `certify`, the ball
/// trainer at that many bits; the report as JSON text.
#[pyfunction]
#[pyo3(signature = (config, prec=DEFAULT_PREC, tol=1e-8, predictor=true, twin_method="span", data=None, predictor_steps=Some(compare_lib::DEFAULT_PREDICTOR_STEPS), certify=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn compare(
    py: Python<'_>,
    config: &PyConfig,
    prec: u32,
    tol: f64,
    predictor: bool,
    twin_method: &str,
    data: Option<&Bound<'_, PyDict>>,
    predictor_steps: Option<u64>,
    certify: Option<u32>,
) -> PyResult<String> {
    let opts = compare_lib::Options {
        prec,
        tol,
        predictor,
        predictor_steps,
        twin_method: method_arg("twin_method", twin_method)?,
        certify,
    };
    let cfg = config.inner.clone();
    lib(opts.check(&cfg))?;
    let data = data_of(&cfg, data)?;
    let report = lib(py.detach(|| {
        let data = or_generate(&cfg, data);
        compare_lib::compare(&cfg, &data, opts, &mut |_| {})
    }))?;
    // a Ctrl-C that arrived while the GIL was released is raised here, before any
    // NumPy call (which would otherwise find the exception pending)
    py.check_signals()?;
    Ok(serde_json::to_string(&report).expect("reports serialise"))
}
