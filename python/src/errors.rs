//! The one mapping from the library's typed errors to Python exceptions: each
//! [`Error`] kind raises its class of `tokensel.errors` (the classes are defined once,
//! in `python/tokensel/errors.py`; every refusal of this crate goes through [`py_err`]),
//! carrying the command line's message.

use pyo3::prelude::*;
use pyo3::types::PyType;

use tokensel::prelude::Error;

/// The `tokensel.errors` class that stands for a library error.
fn error_class(e: &Error) -> &'static str {
    match e {
        Error::InvalidConfig { .. } | Error::InvalidArgument { .. } | Error::InvalidGrid { .. } => {
            "ConfigError"
        }
        Error::Parse { .. } => "ParseError",
        Error::Mismatch { .. } => "MismatchError",
        Error::Io { .. } => "TokenselIOError",
        Error::Path { .. } => "PathError",
        Error::TooLarge { .. } | Error::Refused(_) => "RefusedError",
        Error::NonFinite { .. } | Error::NormalizedStep { .. } => "NonFiniteError",
        Error::NotPublished { .. } => "TokenselIOError",
    }
}

/// A library error as the Python exception of its kind, carrying the CLI's message.
pub(crate) fn py_err(e: Error) -> PyErr {
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
pub(crate) fn lib<T>(r: tokensel::Result<T>) -> PyResult<T> {
    r.map_err(py_err)
}

/// A keyword-argument error ("invalid argument `NAME`: ...", raised as
/// `tokensel.errors.ConfigError`, a ValueError): a function's argument or a data dict's
/// key, not a config key ([`bad_config`]).
pub(crate) fn bad_arg(name: &str, reason: impl Into<String>) -> PyErr {
    py_err(Error::argument(name, reason))
}

/// A config key's error given as a keyword argument of `Config` ("invalid config:
/// `FIELD`: ..."; `tokensel.errors.ConfigError`).
pub(crate) fn bad_config(field: &str, reason: impl Into<String>) -> PyErr {
    py_err(Error::config(field, reason))
}
