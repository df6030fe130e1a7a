//! A supplied data set from a dict of arrays (the `data=` argument of every entry point),
//! checked by the library against the config, and the supplied initial parameters and
//! noise flags checked against what the config and the labels give.

use ndarray::Array2;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use tokensel::prelude::formats::export::{InitialBlock, initial_blocks};
use tokensel::prelude::{Config, Dataset, Error, Params, Supplied, WInit};

use crate::convert::{bools, floats, groups, known_keys, labels, real_array};
use crate::errors::{bad_arg, lib, py_err};

/// The keys a supplied data dict may hold (those of `tokensel.data`, plus `groups`).
const DATA_KEYS: &str = "X_train, y_train, y_true_train, noisy_train, X_test, y_test, nu, \
                         groups, p0, W0, W_Q0, W_K0, b_Q0, b_K0";

/// The factorised map's blocks a data dict may carry as `<block>0` (p0 and W0 have rules
/// of their own: [`check_p0`], [`check_w0`]).
const FACTORISED_BLOCKS: [&str; 4] = ["W_Q", "W_K", "b_Q", "b_K"];

/// A supplied data set from a dict of arrays (the keys of `tokensel.data`, plus
/// `groups`), checked by the library against `cfg`. `noisy_train`, `p0`, `W0` and the
/// factorised map's `W_Q0`, `W_K0`, `b_Q0`, `b_K0`, when present, must be what the labels
/// and the config give (the initial parameters come from the config's seed and init).
fn supplied_of(cfg: &Config, d: &Bound<'_, PyDict>) -> PyResult<Dataset> {
    known_keys(d, DATA_KEYS)?;
    let need = |key: &str| bad_arg(key, "missing from the data dict");
    let s = Supplied {
        x_train: floats(d, "X_train")?.ok_or_else(|| need("X_train"))?,
        y_train: labels(cfg, d, "y_train")?.ok_or_else(|| need("y_train"))?,
        y_true_train: labels(cfg, d, "y_true_train")?,
        x_test: floats(d, "X_test")?.ok_or_else(|| need("X_test"))?,
        y_test: labels(cfg, d, "y_test")?.ok_or_else(|| need("y_test"))?,
        // any rank: the library checks the model's shape ((d), or (K, d) for K classes)
        nu: match d.get_item("nu")? {
            Some(v) => real_array(&v, "nu", None)?,
            None => return Err(need("nu")),
        },
        groups: groups(d)?,
    };
    let ds = lib(Dataset::supplied(cfg, s))?;
    let init = Params::init(cfg);
    let mismatch = |what: &str, reason: &str| {
        py_err(Error::Mismatch {
            what: format!("supplied `{what}`"),
            reason: reason.into(),
        })
    };
    if let Some(p0) = floats::<ndarray::Array1<f64>>(d, "p0")? {
        check_p0(&init, &p0).map_err(|reason| mismatch("p0", &reason))?;
    }
    if let Some(w0) = floats::<ndarray::Array2<f64>>(d, "W0")? {
        check_w0(cfg, &init, &w0).map_err(|reason| mismatch("W0", &reason))?;
    }
    let blocks = initial_blocks(cfg);
    for name in FACTORISED_BLOCKS {
        let key = format!("{name}0");
        if let Some(v) = d.get_item(&key)? {
            let given = real_array(&v, &key, None)?;
            check_block(&blocks, name, &given).map_err(|reason| mismatch(&key, &reason))?;
        }
    }
    if let Some(v) = d.get_item("noisy_train")? {
        let noisy = bools(&v, "noisy_train")?;
        let ours: Vec<bool> = (0..ds.train.len()).map(|i| ds.train.is_noisy(i)).collect();
        if noisy.len() != ours.len() {
            return Err(mismatch(
                "noisy_train",
                &format!(
                    "has {} entries for {} training samples",
                    noisy.len(),
                    ours.len()
                ),
            ));
        }
        if let Some(i) = noisy.iter().zip(&ours).position(|(a, b)| a != b) {
            return Err(mismatch(
                "noisy_train",
                &format!(
                    "differs from y_train != y_true_train at sample {i} ({}, the labels give {})",
                    noisy[i], ours[i]
                ),
            ));
        }
    }
    Ok(ds)
}

/// A supplied initial block `name` against the config's (`blocks`: its query map's
/// initial blocks, [`initial_blocks`]): declared, of the declared shape and equal bit
/// for bit; `Err` names what differs.
fn check_block(
    blocks: &[InitialBlock],
    name: &str,
    given: &ndarray::ArrayD<f64>,
) -> Result<(), String> {
    let Some((_, shape, values)) = blocks.iter().find(|b| b.0 == name) else {
        return Err(format!(
            "the config's query map declares no block `{name}` (it is the factorised map's: \
             a [factorised] section)"
        ));
    };
    if given.shape() != shape.as_slice() {
        return Err(format!(
            "shape {:?}, the config declares block `{name}` of shape {shape:?}",
            given.shape()
        ));
    }
    match given
        .iter()
        .zip(values)
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        Some(k) => Err(format!(
            "differs from the config's initial `{name}` (drawn from its seed and init): \
             entry {k} (row-major) is {:e}, the config's is {:e}",
            given.iter().nth(k).expect("k < len"),
            values[k]
        )),
        None => Ok(()),
    }
}

/// A supplied `p0` against the config's p(0): `Err` names the shape or the first entry
/// that differs.
fn check_p0(init: &Params, p0: &ndarray::Array1<f64>) -> Result<(), String> {
    if p0.len() != init.p.len() {
        return Err(format!(
            "has {} entries, the config's p(0) has d = {}",
            p0.len(),
            init.p.len()
        ));
    }
    match p0.iter().zip(&init.p).position(|(a, b)| a != b) {
        Some(k) => Err(format!(
            "differs from the config's p(0) (initial parameters come from its seed and \
             init): p0[{k}] = {:e}, the config's is {:e}",
            p0[k], init.p[k]
        )),
        None => Ok(()),
    }
}

/// A supplied `W0` against the W(0) the config implies: its dense initial matrix, or the
/// identity where the library keeps none (`init.w = "identity"` in p-mode, where W is not
/// trained and `tokensel.data` gives no `W0`). `Err` holds the reason it differs (its
/// shape, or the first entry that differs and the config's value there).
fn check_w0(cfg: &Config, init: &Params, w0: &Array2<f64>) -> Result<(), String> {
    let identity;
    let (implied, what) = match &init.w {
        Some(w) if cfg.init.w == WInit::Identity => (w, "the identity (init.w = \"identity\")"),
        Some(w) => (
            w,
            "drawn from its seed (init.w = \"kaiming_uniform\"; initial parameters come from \
             its seed and init)",
        ),
        None => {
            identity = Array2::eye(cfg.d);
            (&identity, "the identity (init.w = \"identity\")")
        }
    };
    if w0.dim() != implied.dim() {
        return Err(format!(
            "shape {:?}, the config gives (d, d) = ({d}, {d})",
            w0.shape(),
            d = cfg.d
        ));
    }
    match w0.indexed_iter().find(|&(ij, v)| *v != implied[ij]) {
        Some(((i, j), v)) => Err(format!(
            "differs from the config's W(0), {what}: W0[{i}, {j}] = {v:e}, the config's is {:e}",
            implied[[i, j]]
        )),
        None => Ok(()),
    }
}

/// The data of a run: supplied (checked while holding the GIL) or to be generated.
pub(crate) fn data_of(cfg: &Config, data: Option<&Bound<'_, PyDict>>) -> PyResult<Option<Dataset>> {
    data.map(|d| supplied_of(cfg, d)).transpose()
}

/// The supplied data, or `cfg`'s generated data (call without the GIL).
pub(crate) fn or_generate(cfg: &Config, data: Option<Dataset>) -> Dataset {
    data.unwrap_or_else(|| Dataset::generate(cfg))
}
