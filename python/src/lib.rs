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

use std::collections::BTreeMap;
use std::path::Path;

use ndarray::{Array1, Array2, Array3};
use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

use tokensel::analysis::{compare as compare_lib, judge as judge_lib};
use tokensel::arith::{Arith, Ball, DEFAULT_BALL_PREC, DEFAULT_PREC, F32, F64, Mpfr};
use tokensel::config::{Config, Group, Method, Preset, WInit};
use tokensel::data::supplied::Supplied;
use tokensel::data::{Dataset, Params};
use tokensel::error::Error;
use tokensel::io::external::{
    Dtype, EXTERNAL_FORMAT, External, Header, Series, quantity_of_steps_key,
};
use tokensel::io::trajectory::{Checkpoint, SampleState, Summary, Trajectory};
use tokensel::quantity::Quantity;
use tokensel::train::{Trainer, check_memory};

/// The `tokensel.errors` class that stands for a library error.
fn error_class(e: &Error) -> &'static str {
    match e {
        Error::InvalidConfig { .. } => "ConfigError",
        Error::Parse { .. } => "ParseError",
        Error::Mismatch { .. } => "MismatchError",
        Error::Io { .. } => "TokenselIOError",
        Error::Path { .. } => "PathError",
        Error::TooLarge { .. } => "RefusedError",
        Error::NonFinite { .. } => "NonFiniteError",
        Error::NotPublished { .. } => "TokenselIOError",
    }
}

/// A library error as the Python exception of its kind, carrying the CLI's message.
fn py_err(e: Error) -> PyErr {
    Python::attach(|py| {
        let class = py
            .import("tokensel.errors")
            .and_then(|m| m.getattr(error_class(&e)))
            .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
        match class {
            Ok(class) => PyErr::from_type(class, e.to_string()),
            Err(import) => import,
        }
    })
}

/// Map a library result into a Python one.
fn lib<T>(r: tokensel::Result<T>) -> PyResult<T> {
    r.map_err(py_err)
}

/// A keyword-argument error (raised as `tokensel.errors.ConfigError`, a ValueError).
fn bad_arg(field: &str, reason: impl Into<String>) -> PyErr {
    py_err(Error::config(field, reason))
}

/// A Python object as JSON, through the standard library's `json` (NaN refused).
fn to_json(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<serde_json::Value> {
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

/// Lay `over` onto `base`, tables key by key (a TOML overlay in JSON).
fn overlay(base: &mut serde_json::Value, over: serde_json::Value) {
    match (base, over) {
        (serde_json::Value::Object(b), serde_json::Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) if v.is_object() && slot.is_object() => overlay(slot, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

/// A config with `overrides` (a JSON object) laid over `base`, validated. The merged
/// table is read as TOML by the library (its messages name the key and the line).
fn with_overrides(base: &Config, overrides: serde_json::Value) -> tokensel::Result<Config> {
    let mut value = serde_json::to_value(base).expect("config serialises");
    overlay(&mut value, overrides);
    let origin = Path::new("<keyword arguments>");
    let text = toml::to_string(&value).map_err(|e| Error::Parse {
        what: "config",
        path: origin.into(),
        message: e.to_string(),
    })?;
    Config::from_toml_str(&text, origin)
}

/// A string argument `what` (anything else: a `ConfigError` naming it).
fn text_arg(v: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    v.extract::<String>().map_err(|_| {
        let ty = v
            .get_type()
            .name()
            .map_or_else(|_| "?".to_string(), |n| n.to_string());
        bad_arg(what, format!("expected a string, got {ty}"))
    })
}

/// The preset of a name (`None`: the balanced setting).
fn preset(name: Option<&str>) -> PyResult<Preset> {
    name.map_or(Ok(Preset::Balanced), |n| lib(Preset::from_name(n)))
}

/// One run's description: an embedded preset with keyword overrides, validated on
/// construction (immutable; `replace` makes a changed copy).
#[pyclass(name = "Config", module = "tokensel", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct PyConfig {
    inner: Config,
}

#[pymethods]
impl PyConfig {
    /// `Config(preset=None, **overrides)`: the preset (default `balanced`) with the keys
    /// given laid over it (nested tables as dicts, e.g. `layout={"tokens": 8, ...}`).
    #[new]
    #[pyo3(signature = (preset=None, **overrides))]
    fn new(
        preset: Option<&Bound<'_, PyAny>>,
        overrides: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let preset = preset.map(|p| text_arg(p, "preset")).transpose()?;
        let base = self::preset(preset.as_deref())?.config();
        PyConfig::from_base(&base, overrides)
    }

    /// A config from TOML text laid over a preset (as `tokensel --config FILE`).
    #[staticmethod]
    #[pyo3(signature = (text, preset=None))]
    fn from_toml(text: &Bound<'_, PyAny>, preset: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let text = text_arg(text, "text")?;
        let preset = preset.map(|p| text_arg(p, "preset")).transpose()?;
        let preset = self::preset(preset.as_deref())?;
        let inner = lib(Config::from_toml_str_over_preset(
            &text,
            Path::new("<toml text>"),
            preset,
        ))?;
        Ok(PyConfig { inner })
    }

    /// A copy with the given keys changed (validated again).
    #[pyo3(signature = (**overrides))]
    fn replace(&self, overrides: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        PyConfig::from_base(&self.inner, overrides)
    }

    /// The whole config as TOML (what `tokensel config` prints).
    fn to_toml(&self) -> String {
        self.inner.to_toml()
    }

    /// The whole config as JSON text (the keys of `to_dict`).
    fn to_json(&self) -> String {
        serde_json::to_string(&self.inner).expect("config serialises")
    }

    /// The whole config as a dict (nested tables as dicts).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("json")?.call_method1("loads", (self.to_json(),))
    }

    /// A config key as an attribute (`cfg.steps`, `cfg.layout["tokens"]`).
    fn __getattr__<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        if name == "model" {
            // the section is left out of the serialisation when it is the default; as an
            // attribute it is always there
            let model = serde_json::to_string(&self.inner.model).expect("model serialises");
            return py.import("json")?.call_method1("loads", (model,));
        }
        let dict = self.to_dict(py)?;
        match dict.get_item(name) {
            Ok(v) => Ok(v),
            Err(_) => Err(pyo3::exceptions::PyAttributeError::new_err(format!(
                "Config has no key `{name}`"
            ))),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "tokensel.Config(seed={}, d={}, n_train={}, eta={}, steps={}, mode={:?}, ...)",
            self.inner.seed,
            self.inner.d,
            self.inner.n_train,
            self.inner.eta,
            self.inner.steps,
            self.inner.mode
        )
    }
}

impl PyConfig {
    fn from_base(base: &Config, overrides: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let over = match overrides {
            Some(d) => model_shorthand(base, to_json(d.as_any(), "overrides")?)?,
            None => serde_json::Value::Object(Default::default()),
        };
        Ok(PyConfig {
            inner: lib(with_overrides(base, over))?,
        })
    }
}

/// The keyword shorthand of the `[model]` section: `model="multiclass"` for
/// `model={"kind": "multiclass"}`, and `classes=K` for `model.classes = K` (with the kind
/// given beside it, else the base config's kind: a binary base refuses K != 2 with the
/// library's message). `classes` together with `model={"classes": ...}` is refused.
fn model_shorthand(base: &Config, over: serde_json::Value) -> PyResult<serde_json::Value> {
    use serde_json::Value;
    let Value::Object(mut map) = over else {
        return Ok(over);
    };
    if let Some(Value::String(kind)) = map.get("model") {
        let kind = kind.clone();
        map.insert("model".into(), serde_json::json!({ "kind": kind }));
    }
    if let Some(classes) = map.remove("classes") {
        let model = map
            .entry("model")
            .or_insert_with(|| serde_json::json!({ "kind": base.model.kind.name() }));
        match model {
            Value::Object(m) => {
                if let Some(other) = m.get("classes") {
                    return Err(bad_arg(
                        "classes",
                        format!("given twice: classes={classes} and model.classes = {other}"),
                    ));
                }
                m.entry("kind")
                    .or_insert_with(|| Value::String(base.model.kind.name().into()));
                m.insert("classes".into(), classes);
            }
            other => {
                return Err(bad_arg(
                    "model",
                    format!(
                        "expected a model name (\"token-selection\", \"multiclass\") or a \
                         table {{\"kind\": ..., \"classes\": K}}, got {other}"
                    ),
                ));
            }
        }
    }
    Ok(Value::Object(map))
}

/// The exact arrays of `config`'s run, the arrays of `tokensel data` by name.
#[pyfunction]
fn data<'py>(py: Python<'py>, config: &PyConfig) -> PyResult<Bound<'py, PyDict>> {
    let cfg = config.inner.clone();
    let (ds, init) = py.detach(|| (Dataset::generate(&cfg), Params::init(&cfg)));
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
    out.set_item("p0", init.p.into_pyarray(py))?;
    if let Some(w) = init.w {
        out.set_item("W0", w.into_pyarray(py))?;
    }
    Ok(out)
}

/// A float array of `key` in a data dict, copied into the library's owned array.
fn floats<'py, A>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<A>>
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
fn real_array(
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

/// A refused trajectory array: a trajectory error naming `key`.
fn trajectory_refusal(key: &str, reason: String) -> PyErr {
    bad_traj(key, reason)
}

/// [`real_array`] with each refusal made by `err(key, reason)` (a trajectory's arrays:
/// a trajectory error, not a config error).
fn real_array_as(
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
trait FromArrayLike: Sized {
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
/// index in 0..K ([`tokensel::data::supplied::label_of`], checked before it is narrowed).
fn labels(cfg: &Config, d: &Bound<'_, PyDict>, key: &str) -> PyResult<Option<Vec<i8>>> {
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
            tokensel::data::supplied::label_of(cfg, y)
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
                "dtype {name} (floats are not taken as class indices: convert with                  .astype(int) where they are whole numbers)"
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
fn bools(v: &Bound<'_, PyAny>, key: &str) -> PyResult<Vec<bool>> {
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
fn groups(d: &Bound<'_, PyDict>) -> PyResult<Option<Vec<Group>>> {
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

/// The keys a supplied data dict may hold (those of `tokensel.data`, plus `groups`).
const DATA_KEYS: &str = "X_train, y_train, y_true_train, noisy_train, X_test, y_test, nu, \
                         groups, p0, W0";

/// A supplied data set from a dict of arrays (the keys of `tokensel.data`, plus
/// `groups`), checked by the library against `cfg`. `noisy_train`, `p0` and `W0`, when
/// present, must be what the labels and the config give (the initial parameters come
/// from the config's seed and init).
fn supplied_of(cfg: &Config, d: &Bound<'_, PyDict>) -> PyResult<Dataset> {
    for key in d.keys() {
        let key: String = key.extract()?;
        if !DATA_KEYS.split(", ").any(|k| k.trim() == key) {
            return Err(bad_arg(
                "data",
                format!("unknown key `{key}` (keys: {DATA_KEYS})"),
            ));
        }
    }
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
fn data_of(cfg: &Config, data: Option<&Bound<'_, PyDict>>) -> PyResult<Option<Dataset>> {
    data.map(|d| supplied_of(cfg, d)).transpose()
}

/// The supplied data, or `cfg`'s generated data (call without the GIL).
fn or_generate(cfg: &Config, data: Option<Dataset>) -> Dataset {
    data.unwrap_or_else(|| Dataset::generate(cfg))
}

/// Write the exact arrays of a run into `directory` (the layout of `tokensel data`, NPY
/// files, config.toml, the manifest last): `config`'s generated data, or supplied `data`
/// (the manifest then says `"source": "supplied"` and adds `groups.npy`). Any command's
/// `--data DIR` reads it back. Returns the manifest as JSON.
#[pyfunction]
#[pyo3(signature = (directory, config, data=None))]
fn write_data(
    py: Python<'_>,
    directory: std::path::PathBuf,
    config: &PyConfig,
    data: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    use tokensel::io::publish::{OutputDir, SetKind};
    let cfg = config.inner.clone();
    let out = lib(OutputDir::prepare(&directory, SetKind::Data))?;
    let data = data_of(&cfg, data)?;
    let manifest = lib(py.detach(|| {
        let data = or_generate(&cfg, data);
        let init = Params::init(&cfg);
        let (manifest, files) = tokensel::io::export::files(
            &cfg,
            &data,
            init.p.view(),
            init.w.as_ref().map(|w| w.view()),
        );
        out.publish(&files).map(|()| manifest)
    }))?;
    // a Ctrl-C that arrived while the GIL was released is raised here, before any
    // NumPy call (which would otherwise find the exception pending)
    py.check_signals()?;
    Ok(serde_json::to_string(&manifest).expect("manifest serialises"))
}

/// The arithmetic a run is asked for.
enum Arithmetic {
    F64,
    F32,
    Mpfr(Mpfr),
    Ball(Ball),
}

impl Arithmetic {
    fn of(name: &str, prec: Option<u32>) -> PyResult<Arithmetic> {
        let no_prec = |a| match prec {
            Some(_) => Err(bad_arg(
                "prec",
                format!("`{name}` has a fixed precision (prec is for mpfr and ball)"),
            )),
            None => Ok(a),
        };
        match name {
            "f64" => no_prec(Arithmetic::F64),
            "f32" => no_prec(Arithmetic::F32),
            "predictor" => no_prec(Arithmetic::Mpfr(Mpfr::predictor())),
            "mpfr" => Ok(Arithmetic::Mpfr(lib(Mpfr::truth(
                prec.unwrap_or(DEFAULT_PREC),
            ))?)),
            "ball" => Ok(Arithmetic::Ball(lib(Ball::new(
                prec.unwrap_or(DEFAULT_BALL_PREC),
            ))?)),
            _ => Err(bad_arg(
                "arithmetic",
                format!("`{name}` is not one of f64, f32, mpfr, predictor, ball"),
            )),
        }
    }
}

/// What `run` returns: summary JSON, trainer JSON, checkpoint arrays, labels.
type RunOut<'py> = (String, String, Bound<'py, PyDict>, Bound<'py, PyDict>);

/// Train `cfg` in `ar` (the config's formulation and method), memory checked first.
fn train<A: Arith>(cfg: &Config, data: Option<Dataset>, ar: A) -> tokensel::Result<Trajectory> {
    check_memory(cfg, ar.kind(), ar.prec(), cfg.method)?;
    let data = or_generate(cfg, data);
    Trainer::run(cfg, &data, ar, &mut |_| {})
}

/// Train `config` in `arithmetic` (f64, f32, mpfr, predictor, ball; `prec` bits for mpfr
/// and ball). Returns the summary as JSON (the keys of `tokensel run --json`), the
/// trainer as JSON, the checkpoints as arrays, and the observed and true training labels.
#[pyfunction]
#[pyo3(signature = (config, arithmetic="f64", prec=None, data=None))]
fn run<'py>(
    py: Python<'py>,
    config: &PyConfig,
    arithmetic: &str,
    prec: Option<u32>,
    data: Option<&Bound<'py, PyDict>>,
) -> PyResult<RunOut<'py>> {
    let ar = Arithmetic::of(arithmetic, prec)?;
    let cfg = config.inner.clone();
    let data = data_of(&cfg, data)?;
    let traj = lib(py.detach(|| match ar {
        Arithmetic::F64 => train(&cfg, data, F64),
        Arithmetic::F32 => train(&cfg, data, F32),
        Arithmetic::Mpfr(a) => train(&cfg, data, a),
        Arithmetic::Ball(a) => train(&cfg, data, a),
    }))?;
    // a Ctrl-C that arrived while the GIL was released is raised here, before any
    // NumPy call (which would otherwise find the exception pending)
    py.check_signals()?;
    let summary = serde_json::to_string(&Summary::of(&traj)).expect("summary serialises");
    let trainer = serde_json::to_string(&traj.trainer).expect("trainer serialises");
    let labels = PyDict::new(py);
    labels.set_item("y_train", Array1::from_vec(traj.y.clone()).into_pyarray(py))?;
    labels.set_item(
        "y_true_train",
        Array1::from_vec(traj.y_true.clone()).into_pyarray(py),
    )?;
    Ok((summary, trainer, checkpoint_arrays(py, &traj)?, labels))
}

/// The checkpoints of a trajectory as arrays whose first axis is the checkpoint.
fn checkpoint_arrays<'py>(py: Python<'py>, traj: &Trajectory) -> PyResult<Bound<'py, PyDict>> {
    let cps = &traj.checkpoints;
    let (k, n) = (cps.len(), traj.y.len());
    let out = PyDict::new(py);
    let scalar = |f: &dyn Fn(&Checkpoint) -> f64| -> Array1<f64> { cps.iter().map(f).collect() };
    out.set_item(
        "step",
        cps.iter()
            .map(|c| c.step)
            .collect::<Array1<u64>>()
            .into_pyarray(py),
    )?;
    out.set_item("train_loss", scalar(&|c| c.train_loss).into_pyarray(py))?;
    out.set_item(
        "train_accuracy",
        scalar(&|c| c.train_accuracy).into_pyarray(py),
    )?;
    out.set_item(
        "test_accuracy",
        scalar(&|c| c.test_accuracy).into_pyarray(py),
    )?;
    out.set_item("q_norm", scalar(&|c| c.q_norm).into_pyarray(py))?;
    out.set_item("grad_norm", scalar(&|c| c.grad_norm).into_pyarray(py))?;
    for (name, f) in [
        (
            "cumulative_clean",
            (|c: &Checkpoint| c.cumulative.clean) as fn(&Checkpoint) -> f64,
        ),
        ("cumulative_noisy", |c: &Checkpoint| c.cumulative.noisy),
        ("cumulative_class_pos", |c: &Checkpoint| {
            c.cumulative.class_pos
        }),
        ("cumulative_class_neg", |c: &Checkpoint| {
            c.cumulative.class_neg
        }),
    ] {
        out.set_item(name, scalar(&f).into_pyarray(py))?;
    }
    // per-set means, NaN where the set is empty
    for (name, pick) in [("attention_clean", true), ("attention_noisy", false)] {
        let a = Array2::from_shape_fn((k, 4), |(i, g)| {
            let set = if pick {
                cps[i].attention.clean
            } else {
                cps[i].attention.noisy
            };
            set.map_or(f64::NAN, |v| v.to_array()[g])
        });
        out.set_item(name, a.into_pyarray(py))?;
    }
    for (name, pick) in [("selection_clean", true), ("selection_noisy", false)] {
        let a = Array2::from_shape_fn((k, 6), |(i, g)| {
            let set = if pick {
                cps[i].selection.clean
            } else {
                cps[i].selection.noisy
            };
            set.map_or(f64::NAN, |v| v.to_array()[g])
        });
        out.set_item(name, a.into_pyarray(py))?;
    }
    let per_sample = |f: &dyn Fn(&SampleState) -> f64| {
        Array2::from_shape_fn((k, n), |(i, s)| f(&cps[i].samples[s]))
    };
    out.set_item("output", per_sample(&|s| s.f).into_pyarray(py))?;
    // the K-class model's outputs f_0, ..., f_{K-1} per sample (k, n, K)
    if traj.config.model.is_multiclass() {
        let classes = traj.config.model.classes;
        let mut flat = Vec::with_capacity(k * n * classes);
        for sample in cps.iter().flat_map(|c| &c.samples) {
            match &sample.outputs {
                Some(o) if o.len() == classes => flat.extend_from_slice(o),
                _ => {
                    return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                        "a K-class trajectory's sample without its {classes} outputs"
                    )));
                }
            }
        }
        let outputs = Array3::from_shape_vec((k, n, classes), flat).expect("k x n x K outputs");
        out.set_item("outputs", outputs.into_pyarray(py))?;
    }
    out.set_item("gap", per_sample(&|s| s.gap).into_pyarray(py))?;
    out.set_item("rest", per_sample(&|s| s.rest).into_pyarray(py))?;
    out.set_item(
        "selection_score",
        per_sample(&|s| s.selection_score).into_pyarray(py),
    )?;
    out.set_item(
        "top",
        Array2::from_shape_fn((k, n), |(i, s)| cps[i].samples[s].top as i64).into_pyarray(py),
    )?;
    out.set_item(
        "selection",
        Array2::from_shape_fn((k, n), |(i, s)| cps[i].samples[s].selection.code()).into_pyarray(py),
    )?;
    out.set_item(
        "mass",
        Array3::from_shape_fn((k, n, 4), |(i, s, g)| cps[i].samples[s].mass.to_array()[g])
            .into_pyarray(py),
    )?;
    Ok(out)
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
fn judge(
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
fn format_judge(report: &str) -> PyResult<String> {
    let r: judge_lib::Report = serde_json::from_str(report).map_err(|e| {
        py_err(Error::Parse {
            what: "judge report",
            path: "<report dict>".into(),
            message: e.to_string(),
        })
    })?;
    Ok(r.to_string())
}

/// The method named by `name` (`auto`, `direct`, `span`), for argument `arg`.
fn method_arg(arg: &str, name: &str) -> PyResult<Method> {
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

/// `tokensel compare --json`: the f64 trainer, the MPFR twin, the predictor over its
/// first `predictor_steps` steps (`None`: the whole run) and, with `certify`, the ball
/// trainer at that many bits; the report as JSON text.
#[pyfunction]
#[pyo3(signature = (config, prec=DEFAULT_PREC, tol=1e-8, predictor=true, twin_method="span", data=None, predictor_steps=Some(compare_lib::DEFAULT_PREDICTOR_STEPS), certify=None))]
#[allow(clippy::too_many_arguments)]
fn compare(
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

/// `tokensel certify --json`: the certified run at `prec` bits (`None`: `auto`, 128,
/// 256, 512, 1024 bits in turn) with `method`; the certificate as JSON text. An
/// enclosure that blew up at the last precision gives the certificate of the
/// checkpoints before it: `decided` false, and its last attempt's `stopped` says where.
#[pyfunction]
#[pyo3(signature = (config, prec=Some(DEFAULT_BALL_PREC), method="span", data=None))]
fn certify(
    py: Python<'_>,
    config: &PyConfig,
    prec: Option<u32>,
    method: &str,
    data: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    use tokensel::analysis::certify as certify_lib;
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

/// The extension module.
#[pymodule]
fn _tokensel(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyConfig>()?;
    m.add_function(wrap_pyfunction!(data, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(judge, m)?)?;
    m.add_function(wrap_pyfunction!(format_judge, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(certify, m)?)?;
    m.add_function(wrap_pyfunction!(write_data, m)?)?;
    m.add("DEFAULT_PREC", DEFAULT_PREC)?;
    m.add("DEFAULT_BALL_PREC", DEFAULT_BALL_PREC)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
