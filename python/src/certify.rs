//! `certify`: the certificate of `tokensel certify --json`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use tokensel::prelude::DEFAULT_BALL_PREC;

use crate::config::PyConfig;
use crate::convert::method_arg;
use crate::errors::lib;
use crate::supplied::{data_of, or_generate};

/// `tokensel certify --json`: the certified run at `prec` bits (`None`: `auto`, 128,
/// 256, 512, 1024 bits in turn) with `method`; the certificate as JSON text. An
/// enclosure that blew up at the last precision gives the certificate of the
/// checkpoints before it: `decided` false, and its last attempt's `stopped` says where.
#[pyfunction]
#[pyo3(signature = (config, prec=Some(DEFAULT_BALL_PREC), method="span", data=None))]
pub(crate) fn certify(
    py: Python<'_>,
    config: &PyConfig,
    prec: Option<u32>,
    method: &str,
    data: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    use tokensel::prelude::analysis::certify as certify_lib;
    let opts = certify_lib::Options {
        prec: prec.map_or(certify_lib::Prec::Auto, certify_lib::Prec::Bits),
        method: method_arg("method", method)?,
    };
    let cfg = config.inner.clone();
    lib(opts.check(&cfg))?;
    let data = data_of(&cfg, data)?;
    let cert = lib(py.detach(|| {
        let data = or_generate(&cfg, data);
        certify_lib::certify(&cfg, &data, &opts, &mut |_, _| {})
    }))?;
    // a Ctrl-C that arrived while the GIL was released is raised here, before any
    // NumPy call (which would otherwise find the exception pending)
    py.check_signals()?;
    Ok(serde_json::to_string(&cert).expect("certificates serialise"))
}
