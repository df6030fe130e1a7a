//! Conversions of Python arguments into the library's values, with their refusals (each a
//! `ConfigError` naming the argument, unless a caller words it otherwise): JSON-able
//! objects, strings, real arrays of any memory layout, labels (binary or class indices),
//! boolean arrays, token groups, method names.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use tokensel::prelude::{Config, Group, Method};

use crate::errors::bad_arg;

/// A Python object as JSON, through the standard library's `json` (NaN refused).
pub(crate) fn to_json(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<serde_json::Value> {
    let py = obj.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("allow_nan", false)?;
    // NumPy scalars (np.int64(3)) as their Python values
    kwargs.set_item(
        "default",
        py.import("tokensel._convert")?.getattr("json_default")?,
    )?;
    let text: String = py
        .import("json")?
        .call_method("dumps", (obj,), Some(&kwargs))
        .map_err(|e| bad_arg(what, format!("not JSON-representable: {e}")))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| bad_arg(what, e.to_string()))
}

/// A string argument `what` (anything else: a `ConfigError` naming it).
pub(crate) fn text_arg(v: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    v.extract::<String>().map_err(|_| {
        let ty = v
            .get_type()
            .name()
            .map_or_else(|_| "?".to_string(), |n| n.to_string());
        bad_arg(what, format!("expected a string, got {ty}"))
    })
}

/// A float array of `key` in a data dict, copied into the library's owned array.
pub(crate) fn floats<'py, A>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<A>>
where
    A: FromArrayLike,
{
    match d.get_item(key)? {
        None => Ok(None),
        Some(v) => A::from_array_like(&v, key).map(Some),
    }
}

/// Any array-like `v` (argument `key`) of real numbers and rank `rank` (`None`: any
/// rank) as an owned float64 array in standard layout: every memory layout NumPy can
/// make (C, Fortran, strided slices, negative strides, byte-swapped) is copied in
/// order; floats of at most 64 bits, integers exactly representable in float64 and
/// nothing else are accepted (complex values are refused, not truncated to their real
/// part; booleans, strings, objects and long doubles too), each refusal a
/// `ConfigError` naming `key`.
pub(crate) fn real_array(
    v: &Bound<'_, PyAny>,
    key: &str,
    rank: Option<usize>,
) -> PyResult<ndarray::ArrayD<f64>> {
    real_array_as(v, key, rank, arg_refusal)
}

/// A refused argument array: a config error naming `key`.
fn arg_refusal(key: &str, reason: String) -> PyErr {
    bad_arg(key, reason)
}

/// [`real_array`] with each refusal made by `err(key, reason)` (a trajectory's arrays:
/// a trajectory error, not a config error).
pub(crate) fn real_array_as(
    v: &Bound<'_, PyAny>,
    key: &str,
    rank: Option<usize>,
    err: fn(&str, String) -> PyErr,
) -> PyResult<ndarray::ArrayD<f64>> {
    let py = v.py();
    let np = py.import("numpy")?;
    let refuse = |reason: String| err(key, format!("expected a float array: {reason}"));
    let arr = np
        .call_method1("asarray", (v,))
        .map_err(|e| refuse(format!("not an array ({e})")))?;
    let dtype = arr.getattr("dtype")?;
    let kind: String = dtype.getattr("kind")?.extract()?;
    let itemsize: usize = dtype.getattr("itemsize")?.extract()?;
    let name: String = dtype.str()?.extract()?;
    match kind.as_str() {
        "f" if itemsize <= 8 => {}
        "i" | "u" => {}
        "c" => {
            return Err(refuse(format!(
                "dtype {name} is complex (its imaginary part would be lost)"
            )));
        }
        _ => return Err(refuse(format!("dtype {name} is not a real number type"))),
    }
    let ndim: usize = arr.getattr("ndim")?.extract()?;
    if let Some(rank) = rank
        && ndim != rank
    {
        let shape = arr.getattr("shape")?.str()?;
        return Err(refuse(format!(
            "shape {shape} has {ndim} dimensions, expected {rank}"
        )));
    }
    // a C-ordered float64 copy of any rank (0-d stays 0-d: not `ascontiguousarray`)
    let floats = arr.call_method(
        "astype",
        ("float64",),
        Some(&{
            let kw = PyDict::new(py);
            kw.set_item("order", "C")?;
            kw
        }),
    )?;
    if kind != "f" {
        // integers: exactly representable in float64, or refused (never rounded)
        let back = floats.call_method1("astype", (&dtype,))?;
        let exact: bool = np.call_method1("array_equal", (&back, &arr))?.extract()?;
        if !exact {
            return Err(refuse(format!(
                "dtype {name} holds integers float64 cannot represent exactly"
            )));
        }
    }
    let a: numpy::PyReadonlyArrayDyn<'_, f64> =
        floats.extract().map_err(|e: PyErr| refuse(e.to_string()))?;
    Ok(a.as_array().as_standard_layout().into_owned())
}

/// Owned ndarrays of a fixed rank read from NumPy array-likes ([`real_array`]).
pub(crate) trait FromArrayLike: Sized {
    fn from_array_like(v: &Bound<'_, PyAny>, key: &str) -> PyResult<Self>;
}

impl<D: ndarray::Dimension> FromArrayLike for ndarray::Array<f64, D> {
    fn from_array_like(v: &Bound<'_, PyAny>, key: &str) -> PyResult<Self> {
        let rank = D::NDIM.expect("fixed rank");
        real_array(v, key, Some(rank))?
            .into_dimensionality::<D>()
            .map_err(|e| bad_arg(key, e.to_string()))
    }
}

/// Labels of `key` for `cfg`'s model. Binary: real numbers ([`real_array`], rank 1), each
/// exactly +1 or -1 (nothing is truncated). K classes: a 1-d array of integers (an integer
/// dtype: floats, booleans and anything else are refused, not rounded), each a class
/// index in 0..K ([`tokensel::prelude::supplied::label_of`], checked before it is narrowed).
pub(crate) fn labels(cfg: &Config, d: &Bound<'_, PyDict>, key: &str) -> PyResult<Option<Vec<i8>>> {
    let Some(v) = d.get_item(key)? else {
        return Ok(None);
    };
    let values: Vec<i128> = if cfg.model.is_multiclass() {
        class_indices(&v, key, cfg.model.classes)?
    } else {
        let a = real_array(&v, key, Some(1)).map_err(|_| {
            bad_arg(
                key,
                "expected labels +1 or -1 (a 1-d array of real numbers)",
            )
        })?;
        let mut out = Vec::with_capacity(a.len());
        for (i, &y) in a.iter().enumerate() {
            match y {
                1.0 => out.push(1),
                -1.0 => out.push(-1),
                _ => {
                    return Err(bad_arg(
                        key,
                        format!("label {y} at index {i}: labels are +1 or -1"),
                    ));
                }
            }
        }
        out
    };
    values
        .iter()
        .enumerate()
        .map(|(i, &y)| {
            tokensel::prelude::supplied::label_of(cfg, y)
                .map_err(|rule| bad_arg(key, format!("label {y} at index {i}: {rule}")))
        })
        .collect::<PyResult<Vec<i8>>>()
        .map(Some)
}

/// The K-class labels of `key`: a 1-d array of an integer dtype (any memory layout), as
/// exact integers (int64 and uint64 both fit in i128); anything else refused, naming the
/// dtype or the shape.
fn class_indices(v: &Bound<'_, PyAny>, key: &str, classes: usize) -> PyResult<Vec<i128>> {
    let np = v.py().import("numpy")?;
    let rule = format!(
        "expected class indices 0 to {} (model.classes = {classes}): a 1-d array of integers",
        classes - 1
    );
    let arr = np
        .call_method1("asarray", (v,))
        .map_err(|e: PyErr| bad_arg(key, format!("{rule}; not an array ({e})")))?;
    let dtype = arr.getattr("dtype")?;
    let kind: String = dtype.getattr("kind")?.extract()?;
    let name: String = dtype.str()?.extract()?;
    if kind != "i" && kind != "u" {
        let what = match kind.as_str() {
            "f" => format!(
                "dtype {name} (floats are not taken as class indices: convert with .astype(int) where they are whole numbers)"
            ),
            "b" => format!("dtype {name} (booleans are not class indices)"),
            _ => format!("dtype {name}"),
        };
        return Err(bad_arg(key, format!("{rule}, got {what}")));
    }
    let ndim: usize = arr.getattr("ndim")?.extract()?;
    if ndim != 1 {
        let shape = arr.getattr("shape")?.str()?;
        return Err(bad_arg(
            key,
            format!("{rule}, got shape {shape} ({ndim} dimensions)"),
        ));
    }
    arr.call_method0("tolist")?
        .extract::<Vec<i128>>()
        .map_err(|e| bad_arg(key, format!("{rule}: {e}")))
}

/// A 1-d boolean array (argument `key`), in any memory layout; any other dtype is
/// refused (no number is cast to a boolean).
pub(crate) fn bools(v: &Bound<'_, PyAny>, key: &str) -> PyResult<Vec<bool>> {
    let np = v.py().import("numpy")?;
    let refuse = |reason: String| bad_arg(key, format!("expected a 1-d boolean array: {reason}"));
    let arr = np
        .call_method1("asarray", (v,))
        .map_err(|e: PyErr| refuse(e.to_string()))?;
    let kind: String = arr.getattr("dtype")?.getattr("kind")?.extract()?;
    let ndim: usize = arr.getattr("ndim")?.extract()?;
    if kind != "b" || ndim != 1 {
        let dtype = arr.getattr("dtype")?.str()?;
        return Err(refuse(format!("dtype {dtype}, {ndim} dimensions")));
    }
    let a: numpy::PyReadonlyArray1<'_, bool> = np
        .call_method1("ascontiguousarray", (&arr,))?
        .extract()
        .map_err(|e: PyErr| refuse(e.to_string()))?;
    Ok(a.as_array().to_vec())
}

/// Groups by position: names (R, W_same, W_opposite, I) or codes 0..=3.
pub(crate) fn groups(d: &Bound<'_, PyDict>) -> PyResult<Option<Vec<Group>>> {
    let Some(v) = d.get_item("groups")? else {
        return Ok(None);
    };
    let of_name = |s: &str| Group::ALL.into_iter().find(|g| g.name() == s);
    let items: Vec<Bound<'_, PyAny>> = v
        .try_iter()
        .and_then(|it| it.collect::<PyResult<_>>())
        .map_err(|e| bad_arg("groups", format!("expected a sequence of groups: {e}")))?;
    items
        .iter()
        .map(|item| {
            let g = match item.extract::<String>() {
                Ok(s) => of_name(&s),
                Err(_) => item
                    .extract::<usize>()
                    .ok()
                    .and_then(|k| Group::ALL.get(k).copied()),
            };
            g.ok_or_else(|| {
                bad_arg(
                    "groups",
                    format!("`{item}` is not a group (R, W_same, W_opposite, I or 0..=3)"),
                )
            })
        })
        .collect::<PyResult<_>>()
        .map(Some)
}

/// The method named by `name` (`auto`, `direct`, `span`), for argument `arg`.
pub(crate) fn method_arg(arg: &str, name: &str) -> PyResult<Method> {
    match name {
        "auto" => Ok(Method::Auto),
        "direct" => Ok(Method::Direct),
        "span" => Ok(Method::Span),
        _ => Err(bad_arg(
            arg,
            format!("`{name}` is not a method (auto, direct, span)"),
        )),
    }
}

/// Every key of the dict `d` is one of `keys` (a ", "-separated list, named in the
/// message); else a bad `data` argument.
pub(crate) fn known_keys(d: &Bound<'_, PyDict>, keys: &str) -> PyResult<()> {
    for key in d.keys() {
        let key: String = key.extract()?;
        if !keys.split(", ").any(|k| k.trim() == key) {
            return Err(bad_arg(
                "data",
                format!("unknown key `{key}` (keys: {keys})"),
            ));
        }
    }
    Ok(())
}
