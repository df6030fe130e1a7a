//! The `Config` class: a preset with keyword overrides, validated by the library.

use std::path::Path;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use tokensel::prelude::{Config, Error, Preset};

use crate::convert::{text_arg, to_json};
use crate::errors::{bad_config, lib, py_err};

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

/// The preset of a name (`None`: the balanced setting).
fn preset(name: Option<&str>) -> PyResult<Preset> {
    name.map_or(Ok(Preset::Balanced), |n| lib(Preset::from_name(n)))
}

/// One run's description: an embedded preset with keyword overrides, validated on
/// construction (immutable; `replace` makes a changed copy).
#[pyclass(name = "Config", module = "tokensel", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct PyConfig {
    pub(crate) inner: Config,
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
        // the `[model]`, `[optimizer]`, `[direction]` and `[protocol]` sections are left out of the
        // serialisation when they are the default; as attributes they are always there
        let section = match name {
            "model" => Some(serde_json::to_string(&self.inner.model)),
            "optimizer" => Some(serde_json::to_string(&self.inner.optimizer)),
            // None where the config tracks no direction
            "direction" => Some(serde_json::to_string(&self.inner.direction)),
            // None where the config has no `[protocol]` section
            "protocol" => Some(serde_json::to_string(&self.inner.protocol)),
            _ => None,
        };
        if let Some(text) = section {
            let text = text.expect("sections serialise");
            return py.import("json")?.call_method1("loads", (text,));
        }
        let dict = self.to_dict(py)?;
        match dict.get_item(name) {
            Ok(v) => Ok(v),
            Err(_) => Err(pyo3::exceptions::PyAttributeError::new_err(format!(
                "Config has no key `{name}`"
            ))),
        }
    }

    /// Pickle support: the config crosses as its canonical TOML (`to_toml`), read back
    /// by `_from_state` (every key present, no preset underneath) and validated again, so
    /// a pickled config comes back equal (`==`) or raises the binding's error.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (String,))> {
        let from_state = slf.get_type().getattr("_from_state")?;
        Ok((from_state, (slf.get().inner.to_toml(),)))
    }

    /// The config of a pickled state (the canonical TOML of `to_toml`), validated.
    #[staticmethod]
    fn _from_state(text: &Bound<'_, PyAny>) -> PyResult<Self> {
        let text = text_arg(text, "state")?;
        let inner: Config = toml::from_str(&text).map_err(|e| {
            py_err(Error::Parse {
                what: "pickled config",
                path: "<pickle>".into(),
                message: e.to_string().trim_end().to_string(),
            })
        })?;
        lib(inner.validate())?;
        Ok(PyConfig { inner })
    }

    /// `copy.copy`: the config itself (it is immutable).
    fn __copy__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// `copy.deepcopy`: an equal config (it is immutable, nothing is shared that changes).
    fn __deepcopy__(&self, _memo: &Bound<'_, PyAny>) -> Self {
        self.clone()
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
/// `prompt="in-sequence"` is `model.prompt` likewise (the base config's kind kept).
fn model_shorthand(base: &Config, over: serde_json::Value) -> PyResult<serde_json::Value> {
    use serde_json::Value;
    let Value::Object(mut map) = over else {
        return Ok(over);
    };
    if let Some(Value::String(kind)) = map.get("model") {
        let kind = kind.clone();
        map.insert("model".into(), serde_json::json!({ "kind": kind }));
    }
    if let Some(prompt) = map.remove("prompt") {
        let model = map
            .entry("model")
            .or_insert_with(|| serde_json::json!({ "kind": base.model.kind.name() }));
        match model {
            Value::Object(m) => {
                if let Some(other) = m.get("prompt") {
                    return Err(bad_config(
                        "prompt",
                        format!("given twice: prompt={prompt} and model.prompt = {other}"),
                    ));
                }
                m.insert("prompt".into(), prompt);
            }
            other => {
                return Err(bad_config(
                    "model",
                    format!(
                        "expected a model name or a table {{\"kind\": ..., \"prompt\": ...}}, \
                         got {other}"
                    ),
                ));
            }
        }
    }
    if let Some(classes) = map.remove("classes") {
        let model = map
            .entry("model")
            .or_insert_with(|| serde_json::json!({ "kind": base.model.kind.name() }));
        match model {
            Value::Object(m) => {
                if let Some(other) = m.get("classes") {
                    return Err(bad_config(
                        "classes",
                        format!("given twice: classes={classes} and model.classes = {other}"),
                    ));
                }
                m.entry("kind")
                    .or_insert_with(|| Value::String(base.model.kind.name().into()));
                m.insert("classes".into(), classes);
            }
            other => {
                return Err(bad_config(
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
