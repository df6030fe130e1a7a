//! `svm`: the attention SVM of a selection pattern, solved and proved (the report of
//! `tokensel svm --json`).

use pyo3::prelude::*;
use pyo3::types::PyDict;

use tokensel::prelude::Error;
use tokensel::prelude::models::caps::{Capability, require};
use tokensel::prelude::models::svm as svm_lib;
use tokensel::prelude::models::svm::PatternChoice;

use crate::config::PyConfig;
use crate::errors::{lib, py_err};
use crate::supplied::{data_of, or_generate};

/// `tokensel svm --json`: the SVM of `pattern` ("optimal", "theorem", or a list of one
/// token index per training sample) on `config`'s data (or `data`); the report as JSON
/// text.
#[pyfunction]
#[pyo3(signature = (config, pattern, data=None))]
pub(crate) fn svm(
    py: Python<'_>,
    config: &PyConfig,
    pattern: &Bound<'_, PyAny>,
    data: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    let choice = if let Ok(name) = pattern.extract::<String>() {
        match name.as_str() {
            "optimal" => PatternChoice::Optimal,
            "theorem" => PatternChoice::Theorem,
            other => {
                return Err(py_err(Error::argument(
                    "pattern",
                    format!(
                        "must be \"optimal\", \"theorem\" or a list of token indices, got {other:?}"
                    ),
                )));
            }
        }
    } else {
        match pattern.extract::<Vec<usize>>() {
            Ok(list) => PatternChoice::Given(list),
            Err(_) => {
                return Err(py_err(Error::argument(
                    "pattern",
                    "must be \"optimal\", \"theorem\" or a list of token indices (integers >= 0)",
                )));
            }
        }
    };
    let cfg = config.inner.clone();
    lib(require(&cfg, "svm", &[Capability::Svm]))?;
    let dense = cfg.init.w == tokensel::prelude::WInit::KaimingUniform;
    lib(svm_lib::check_sizes(
        cfg.n_train,
        cfg.layout.tokens,
        cfg.d,
        dense,
    ))?;
    let data = data_of(&cfg, data)?;
    let report = lib(py.detach(|| {
        let data = or_generate(&cfg, data);
        svm_lib::report(&cfg, &data, &choice).map_err(|e| match e {
            Error::InvalidArgument { name, reason } if name == "pattern" => Error::argument(
                name,
                reason.replace(
                    "give the pattern as a file",
                    "give the pattern as a list of token indices",
                ),
            ),
            e => e,
        })
    }))?;
    py.check_signals()?;
    Ok(serde_json::to_string(&report).expect("reports serialise"))
}
