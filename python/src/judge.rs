//! `judge` and `format_judge`: another implementation's trajectory (a dict of arrays,
//! converted here into the library's external trajectory) judged on the config's data.

use std::collections::BTreeMap;
use std::path::Path;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use tokensel::prelude::analysis::judge as judge_lib;
use tokensel::prelude::formats::external::{
    Dtype, EXTERNAL_FORMAT, External, Header, Series, quantity_of_steps_key,
};
use tokensel::prelude::{DEFAULT_BALL_PREC, DEFAULT_PREC, Error, Quantity};

use crate::config::PyConfig;
use crate::convert::{real_array_as, to_json};
use crate::errors::{lib, py_err};
use crate::supplied::{data_of, or_generate};

/// A refused trajectory array: a trajectory error naming `key`.
fn trajectory_refusal(key: &str, reason: String) -> PyErr {
    bad_traj(key, reason)
}

/// An error in a trajectory dict, worded as one (not as a config error): "cannot
/// parse external trajectory `<trajectory dict>`: `KEY`: REASON".
fn bad_traj(key: &str, reason: impl Into<String>) -> PyErr {
    py_err(Error::Parse {
        what: "external trajectory",
        path: TRAJECTORY_DICT.into(),
        message: format!("`{key}`: {}", reason.into()),
    })
}

/// The name of a trajectory dict in messages.
const TRAJECTORY_DICT: &str = "<trajectory dict>";

/// `steps` of a trajectory dict: non-negative integers.
fn steps_of(v: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    v.extract::<Vec<u64>>()
        .map_err(|e| bad_traj("steps", format!("expected non-negative integers: {e}")))
}

/// An external trajectory from a dict: `steps`, `dtype` (`float32`/`float64`),
/// optional `implementation`, `config` and `format`, and the quantities by their one
/// names, each an array whose first axis is the recorded step, and `<quantity>_steps`
/// for a quantity recorded at fewer steps.
fn external_of(traj: &Bound<'_, PyDict>) -> PyResult<External> {
    let mut steps = None;
    let mut header = Header {
        format: EXTERNAL_FORMAT.into(),
        dtype: Dtype::Float64,
        implementation: None,
        config: BTreeMap::new(),
    };
    let mut dtype = None;
    let mut series = BTreeMap::new();
    let mut own_steps = BTreeMap::new();
    for (key, value) in traj.iter() {
        let key: String = key
            .extract()
            .map_err(|_| bad_traj("trajectory", "keys must be strings"))?;
        match key.as_str() {
            "steps" => steps = Some(steps_of(&value)?),
            "dtype" => {
                let name: String = value.str()?.extract()?;
                dtype = Some(match name.as_str() {
                    "float32" => Dtype::Float32,
                    "float64" => Dtype::Float64,
                    _ => {
                        return Err(bad_traj(
                            "dtype",
                            format!(
                                "`{name}` is not float32 or float64 (what the implementation computed in)"
                            ),
                        ));
                    }
                });
            }
            "implementation" => {
                header.implementation = Some(
                    value
                        .extract()
                        .map_err(|_| bad_traj("implementation", "expected a string"))?,
                )
            }
            "format" => {
                header.format = value
                    .extract()
                    .map_err(|_| bad_traj("format", "expected a string"))?
            }
            "config" => {
                let serde_json::Value::Object(map) = to_json(&value, "config")? else {
                    return Err(bad_traj("config", "expected a dict of config keys"));
                };
                header.config = map.into_iter().collect();
            }
            _ if quantity_of_steps_key(EXTERNAL_FORMAT, &key).is_some() => {
                let q = quantity_of_steps_key(EXTERNAL_FORMAT, &key).expect("matched");
                let s = value
                    .extract::<Vec<u64>>()
                    .map_err(|e| bad_traj(&key, format!("expected non-negative integers: {e}")))?;
                own_steps.insert(q, (key, s));
            }
            _ => {
                let q = Quantity::from_name(&key).ok_or_else(|| {
                    bad_traj(
                        "trajectory",
                        format!(
                            "unknown key `{key}` (header: steps, dtype, implementation, \
                             config, format; quantities: {}; a quantity's own steps: \
                             <quantity>_steps)",
                            Quantity::names()
                        ),
                    )
                })?;
                if value.is_none() {
                    let remedy = if q == Quantity::GradQ {
                        " (q.grad without q.retain_grad()? call q.retain_grad() before loss.backward())"
                    } else {
                        ""
                    };
                    return Err(bad_traj(&key, format!("None{remedy}")));
                }
                // any layout, refused (not truncated) where not real: a trajectory error
                let a = real_array_as(&value, &key, None, trajectory_refusal)?;
                let Some((&k, shape)) = a.shape().split_first() else {
                    return Err(bad_traj(
                        &key,
                        "0-dimensional; its first axis must be the recorded step",
                    ));
                };
                let shape = shape.to_vec();
                let view = a.view();
                let values = (0..k)
                    .map(|i| {
                        view.index_axis(ndarray::Axis(0), i)
                            .iter()
                            .copied()
                            .collect()
                    })
                    .collect();
                series.insert(
                    q,
                    Series {
                        shape,
                        values,
                        steps: None,
                    },
                );
            }
        }
    }
    for (q, (key, s)) in own_steps {
        let Some(entry) = series.get_mut(&q) else {
            return Err(bad_traj(
                &key,
                format!("lists steps of `{}`, which is not recorded", q.name()),
            ));
        };
        entry.steps = Some(s);
    }
    header.dtype = dtype.ok_or_else(|| bad_traj("dtype", "missing (float32 or float64)"))?;
    let steps = steps.ok_or_else(|| bad_traj("steps", "missing"))?;
    lib(External::from_parts(
        header,
        steps,
        series,
        Path::new(TRAJECTORY_DICT),
    ))
}

/// Judge another implementation's trajectory (a dict of arrays) on `config`'s data:
/// the report of `tokensel judge --json`, as JSON text, and the text `tokensel judge`
/// prints.
#[pyfunction]
#[pyo3(signature = (config, trajectory, prec=DEFAULT_PREC, tol=1e-8, data=None, enclosure=Some(DEFAULT_BALL_PREC)))]
pub(crate) fn judge(
    py: Python<'_>,
    config: &PyConfig,
    trajectory: &Bound<'_, PyDict>,
    prec: u32,
    tol: f64,
    data: Option<&Bound<'_, PyDict>>,
    enclosure: Option<u32>,
) -> PyResult<(String, String)> {
    let opts = judge_lib::Options {
        prec,
        tol,
        enclosure,
    };
    lib(opts.validate())?;
    let ext = external_of(trajectory)?;
    let mut cfg = config.inner.clone();
    lib(ext.check_against(&cfg))?;
    cfg.steps = *ext.steps.last().expect("checked: steps not empty");
    lib(opts.check(&cfg))?;
    let data = data_of(&cfg, data)?;
    let report = lib(py.detach(|| {
        let data = or_generate(&cfg, data);
        judge_lib::judge(&cfg, &data, &ext, opts, &mut |_| {})
    }))?;
    // a Ctrl-C that arrived while the GIL was released is raised here, before any
    // NumPy call (which would otherwise find the exception pending)
    py.check_signals()?;
    Ok((
        serde_json::to_string(&report).expect("reports serialise"),
        report.to_string(),
    ))
}

/// The text `tokensel judge` prints for a report of `tokensel judge --json` (the JSON
/// text of [`judge`]'s result).
#[pyfunction]
pub(crate) fn format_judge(report: &str) -> PyResult<String> {
    let r: judge_lib::Report = serde_json::from_str(report).map_err(|e| {
        py_err(Error::Parse {
            what: "judge report",
            path: "<report dict>".into(),
            message: e.to_string(),
        })
    })?;
    Ok(r.to_string())
}
