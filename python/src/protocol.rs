//! `protocol`: the two-phase fine-tuning protocol of the paper's Section I (the report of
//! `tokensel protocol --json`).

use pyo3::prelude::*;
use pyo3::types::PyDict;

use tokensel::prelude::experiments::protocol as protocol_lib;
use tokensel::prelude::experiments::protocol::Pool;

use crate::config::PyConfig;
use crate::convert::{floats, groups, known_keys, labels};
use crate::errors::{bad_arg, lib};

/// The keys a pool dict may hold.
const POOL_KEYS: &str = "X_train, y_train, X_test, y_test, groups, nu";

/// The pool of a dict of arrays: `X_train` (N, T, d) with its TRUE labels `y_train`, the
/// test set `X_test`, `y_test`, optionally `groups` (`nu` is accepted and ignored: phase
/// 1 fits the head), checked against `cfg`.
fn pool_of(cfg: &tokensel::prelude::Config, d: &Bound<'_, PyDict>) -> PyResult<Pool> {
    known_keys(d, POOL_KEYS)?;
    let need = |key: &str| bad_arg(key, "missing from the data dict");
    let pool = Pool {
        x: floats(d, "X_train")?.ok_or_else(|| need("X_train"))?,
        y: labels(cfg, d, "y_train")?.ok_or_else(|| need("y_train"))?,
        x_test: floats(d, "X_test")?.ok_or_else(|| need("X_test"))?,
        y_test: labels(cfg, d, "y_test")?.ok_or_else(|| need("y_test"))?,
        groups: groups(d)?,
        generated: false,
    };
    for (what, x) in [("X_train", &pool.x), ("X_test", &pool.x_test)] {
        if let Some(k) = x.iter().position(|v| !v.is_finite()) {
            return Err(bad_arg(
                what,
                format!("value at flat index {k} is not finite"),
            ));
        }
    }
    lib(pool.check(cfg))?;
    Ok(pool)
}

/// `tokensel protocol --json`: the protocol of `config`'s `[protocol]` section on its
/// generated data, or on the pool `data` (a dict: `X_train` with its true labels
/// `y_train`, `X_test`, `y_test`, optionally `groups`); the report as JSON text.
#[pyfunction]
#[pyo3(signature = (config, data=None))]
pub(crate) fn protocol(
    py: Python<'_>,
    config: &PyConfig,
    data: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    let cfg = config.inner.clone();
    lib(protocol_lib::settings(&cfg))?;
    lib(tokensel::prelude::train::check_memory(
        &cfg,
        tokensel::prelude::Kind::F64,
        53,
        cfg.method,
    ))?;
    lib(tokensel::prelude::train::record::check_size(&cfg))?;
    let pool = data.map(|d| pool_of(&cfg, d)).transpose()?;
    let report = lib(py.detach(|| {
        protocol_lib::run(
            &cfg,
            &mut |seed| match &pool {
                Some(p) => Ok(p.clone()),
                None => Pool::generated(&cfg, seed),
            },
            &mut |_, _| {},
        )
    }))?;
    py.check_signals()?;
    Ok(serde_json::to_string(&report).expect("reports serialise"))
}
