//! The external-trajectory format: what another implementation writes so that
//! `tokensel judge` can replay its run in the twin and compare.
//!
//! Two encodings carry the same content (docs/judge.md):
//!
//! * **JSON**: one object with the header keys (`format`, `dtype`, optional
//!   `implementation` and `config`), `steps` (the recorded step numbers, increasing) and
//!   any of the quantities below, each a list with one entry per recorded step (nested
//!   lists for arrays; `null` for a NaN or an infinity, which JSON cannot spell, or
//!   tokensel's own spelling `"nan"`, `"inf"`, `"-inf"` of `io::nonfinite`).
//! * **NPZ** (`np.savez`, compressed or not): the header as an array `header` of uint8
//!   holding the JSON header's bytes, `steps` as an integer array (k,), and each quantity
//!   as a float32 or float64 array whose first axis is the recorded step. Each member's
//!   NPY header is checked against the member's length before anything is allocated for
//!   it (a header that claims more data than the member holds is refused). An archive
//!   that names a member twice (or holds both `x` and `x.npy`) is refused.
//!
//! The quantities, at step t (after t updates; the forward pass at the parameters of
//! step t), named as everywhere in tokensel ([`Quantity`]): `p` (d), `q` = W^T p (d), `W`
//! (d, d, the paper's W: scores = X W^T p), the `scores` (n, T), `attention` (n, T) and
//! `rest` = 1 - s_top (n) of the training samples, their `output`s (n: the binary f;
//! (n, K) for a K-class config: the K outputs f_c of each sample), the empirical `loss`
//! (a scalar), and `grad_q` = dL/dq (d). Any non-empty subset may be present.
//! Shapes are checked against the run's config by [`External::check_against`].
//!
//! A run of a `[factorised]` config (z_it = (W_Q p + b_Q)^T (W_K x_it + b_K), SPEC
//! section 17) records its blocks by their names: `W_Q`, `W_K` (m, d: PyTorch's
//! `nn.Linear(d, m).weight`), and with `bias = true` `b_Q`, `b_K` (m: the layers'
//! `.bias`); `q` there is the effective query W_K^T (W_Q p + b_Q) (d), `grad_q` its
//! dL/dq, `scores` include the shift <b_K, W_Q p + b_Q>, and `p` is the query token. `W`
//! is refused for such a run (no d x d matrix gives its scores), and the blocks are
//! refused for a run without `[factorised]` (exit code 2, naming the key and why). An
//! implementation that forms b_K's gradient (PyTorch does) moves b_K by rounding noise
//! (its exact gradient is 0, and tokensel keeps b_K exactly at its initial value):
//! judged as every other quantity, a drift of a few ulps is far within any tolerance
//! above the dtype's rounding and is not a finding; only a b_K error past the tolerance
//! is. The format's tag is unchanged (the new keys are new quantities; a file of the
//! older kind reads as before).
//!
//! A quantity may be recorded at fewer steps than the others: `<name>_steps` (e.g.
//! `W_steps`; a JSON list or an NPZ integer array) lists its own steps, a strictly
//! increasing subset of `steps`, and its first axis has one entry per step of that list.
//! Without it a quantity is recorded at every step of `steps`. Every step of `steps`
//! must record at least one quantity.
//!
//! Files of the first version (`tokensel-external/1`) are still read: there `z`, `s`, `f`
//! and `grad` name the scores, attention, outputs and dL/dq (and `rest` is not a key).

use std::collections::BTreeMap;
use std::path::Path;

use ndarray::ArrayD;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::io::files::{LARGE_INPUT, open_input, read_text};
use crate::quantity::Quantity;

/// Format tag of an external trajectory (keys: the quantities' one names).
pub const EXTERNAL_FORMAT: &str = "tokensel-external/2";

/// The first version's tag, still read: its keys `z`, `s`, `f`, `grad` name scores,
/// attention, output and grad_q.
pub const EXTERNAL_FORMAT_V1: &str = "tokensel-external/1";

/// The floating-point type the external implementation computed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// IEEE binary32.
    Float32,
    /// IEEE binary64.
    Float64,
}

impl Dtype {
    /// Machine epsilon (NumPy's `finfo(dtype).eps`): 2^-23 or 2^-52.
    pub fn eps(self) -> f64 {
        match self {
            Dtype::Float32 => f64::from(f32::EPSILON),
            Dtype::Float64 => f64::EPSILON,
        }
    }

    /// Unit roundoff u = eps / 2.
    pub fn unit_roundoff(self) -> f64 {
        self.eps() / 2.0
    }

    /// NumPy's name.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Float32 => "float32",
            Dtype::Float64 => "float64",
        }
    }
}

/// The quantity a key of a file names: under [`EXTERNAL_FORMAT`] the quantity's one
/// name ([`Quantity::name`]); under [`EXTERNAL_FORMAT_V1`] its old keys `z` (scores), `s`
/// (attention), `f` (output) and `grad` (grad_q), and `p`, `q`, `W`, `loss`.
pub fn quantity_of_key(format: &str, key: &str) -> Option<Quantity> {
    if format == EXTERNAL_FORMAT_V1 {
        return match key {
            "z" => Some(Quantity::Scores),
            "s" => Some(Quantity::Attention),
            "f" => Some(Quantity::Output),
            "grad" => Some(Quantity::GradQ),
            "p" | "q" | "W" | "loss" => Quantity::from_name(key),
            _ => None,
        };
    }
    Quantity::from_name(key)
}

/// The keys of the quantities under `format`, for messages.
fn keys(format: &str) -> String {
    if format == EXTERNAL_FORMAT_V1 {
        "p, q, W, z, s, f, loss, grad".into()
    } else {
        Quantity::names()
    }
}

/// The header of an external trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// [`EXTERNAL_FORMAT`] (or [`EXTERNAL_FORMAT_V1`]).
    pub format: String,
    /// The dtype the implementation computed in.
    pub dtype: Dtype,
    /// Free text naming the implementation.
    #[serde(default)]
    pub implementation: Option<String>,
    /// Config values the implementation used, by tokensel config key (e.g. `step_size`,
    /// `mode`, `seed`); each must equal the data's config.
    #[serde(default)]
    pub config: BTreeMap<String, serde_json::Value>,
}

/// One recorded quantity: its values at every step it is recorded at.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Shape of one step's value, as found in the file.
    pub shape: Vec<usize>,
    /// Row-major values, one vector per step of [`Series::steps`] (or of
    /// [`External::steps`] when that is `None`).
    pub values: Vec<Vec<f64>>,
    /// The quantity's own steps (`<name>_steps`), a strictly increasing subset of
    /// [`External::steps`]; `None`: every step of [`External::steps`].
    pub steps: Option<Vec<u64>>,
}

/// The key (JSON) or member (NPZ) that lists the own steps of the quantity keyed `key`.
pub fn steps_key(key: &str) -> String {
    format!("{key}_steps")
}

/// The quantity whose own steps `key` lists (`W_steps`: W), under `format`.
pub fn quantity_of_steps_key(format: &str, key: &str) -> Option<Quantity> {
    key.strip_suffix("_steps")
        .and_then(|stem| quantity_of_key(format, stem))
}

/// An external trajectory, read and checked for internal consistency.
#[derive(Debug, Clone, PartialEq)]
pub struct External {
    /// The header.
    pub header: Header,
    /// Recorded steps, strictly increasing.
    pub steps: Vec<u64>,
    /// The recorded quantities (at least one).
    pub series: BTreeMap<Quantity, Series>,
}

fn bad(path: &Path, message: impl Into<String>) -> Error {
    Error::Parse {
        what: "external trajectory",
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Flatten a nested JSON list into row-major values and a shape (`null` reads as NaN).
fn flatten(
    v: &serde_json::Value,
    shape: &mut Vec<usize>,
    depth: usize,
    out: &mut Vec<f64>,
) -> std::result::Result<(), String> {
    match v {
        serde_json::Value::Array(items) => {
            if shape.len() == depth {
                shape.push(items.len());
            } else if shape.len() < depth || shape[depth] != items.len() {
                return Err("nested lists of different lengths (not a rectangular array)".into());
            }
            items
                .iter()
                .try_for_each(|x| flatten(x, shape, depth + 1, out))
        }
        serde_json::Value::Number(x) => {
            if shape.len() != depth {
                return Err("a number where a list was expected".into());
            }
            out.push(x.as_f64().ok_or("number out of range")?);
            Ok(())
        }
        serde_json::Value::Null if shape.len() == depth => {
            out.push(f64::NAN);
            Ok(())
        }
        serde_json::Value::String(word) if shape.len() == depth => {
            out.push(crate::io::nonfinite::parse(word).ok_or_else(|| {
                format!("expected a number, null, \"inf\", \"-inf\" or \"nan\", found {v}")
            })?);
            Ok(())
        }
        _ => Err(format!("expected a number, null or a list, found {v}")),
    }
}

impl External {
    /// Read an external trajectory, JSON or NPZ (by extension, `.npz` for NPZ): a
    /// regular file of at most `io::files::LARGE_INPUT` bytes.
    pub fn read(path: &Path) -> Result<External> {
        let ext = match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("npz") => External::read_npz(path)?,
            _ => External::from_json(&read_text(path, LARGE_INPUT)?, path)?,
        };
        ext.check_consistency(path)?;
        Ok(ext)
    }

    /// Parse the JSON encoding (`path` is only used in messages).
    /// A key given twice in any object (the header's, its `config`'s, or the top
    /// level's) is refused: JSON leaves its meaning open, and reading the last would
    /// judge values the file also contradicts.
    pub fn from_json(text: &str, path: &Path) -> Result<External> {
        let value: serde_json::Value = serde_json::from_str::<Unique>(text)
            .map(|u| u.0)
            .map_err(|e| bad(path, e.to_string()))?;
        let serde_json::Value::Object(mut map) = value else {
            return Err(bad(path, "expected a JSON object"));
        };
        let steps = map
            .remove("steps")
            .ok_or_else(|| bad(path, "missing `steps`"))?;
        let steps: Vec<u64> = serde_json::from_value(steps).map_err(|e| {
            bad(
                path,
                format!("`steps`: {e} (expected non-negative integers)"),
            )
        })?;
        let mut series = BTreeMap::new();
        let format = map
            .get("format")
            .and_then(|f| f.as_str())
            .unwrap_or_default()
            .to_string();
        let names: Vec<String> = map.keys().cloned().collect();
        let mut own_steps = BTreeMap::new();
        for key in &names {
            let Some(q) = quantity_of_steps_key(&format, key) else {
                continue;
            };
            let v = map.remove(key).expect("key listed");
            let s: Vec<u64> = serde_json::from_value(v).map_err(|e| {
                bad(
                    path,
                    format!("`{key}`: {e} (expected non-negative integers)"),
                )
            })?;
            own_steps.insert(q, (key.clone(), s));
        }
        for key in names {
            let Some(q) = quantity_of_key(&format, &key) else {
                continue;
            };
            let v = map.remove(&key).expect("key listed");
            let serde_json::Value::Array(per_step) = v else {
                return Err(bad(
                    path,
                    format!("`{key}`: expected a list with one entry per recorded step"),
                ));
            };
            let mut shape = Vec::new();
            let mut values = Vec::with_capacity(per_step.len());
            for (k, entry) in per_step.iter().enumerate() {
                let mut s = Vec::new();
                let mut out = Vec::new();
                flatten(entry, &mut s, 0, &mut out)
                    .map_err(|m| bad(path, format!("`{key}` at index {k}: {m}")))?;
                if k > 0 && s != shape {
                    return Err(bad(
                        path,
                        format!("`{key}`: shape {s:?} at index {k}, {shape:?} before"),
                    ));
                }
                shape = s;
                values.push(out);
            }
            series.insert(
                q,
                Series {
                    shape,
                    values,
                    steps: None,
                },
            );
        }
        attach_steps(&mut series, own_steps, path)?;
        let header: Header =
            serde_json::from_value(serde_json::Value::Object(map)).map_err(|e| {
                bad(
                    path,
                    format!(
                        "{e} (header keys: format, dtype, implementation, config; quantities: {})",
                        keys(&format)
                    ),
                )
            })?;
        Ok(External {
            header,
            steps,
            series,
        })
    }

    fn read_npz(path: &Path) -> Result<External> {
        let (file, _) = open_input(path, LARGE_INPUT)?;
        let mut npz = Npz::open(file, path)?;
        let header: ArrayD<u8> = npz
            .array("header")?
            .ok_or_else(|| bad(path, "array `header` (uint8 JSON bytes): missing"))?;
        let header: Header =
            serde_json::from_slice::<Unique>(&header.iter().copied().collect::<Vec<u8>>())
                .and_then(|u| serde_json::from_value(u.0))
                .map_err(|e| bad(path, format!("header: {e}")))?;
        let steps = npz
            .steps("steps")?
            .ok_or_else(|| bad(path, "array `steps` (int64 or uint64): missing"))?;
        let mut series = BTreeMap::new();
        let mut own_steps = BTreeMap::new();
        for name in npz.names() {
            if name == "header" || name == "steps" {
                continue;
            }
            if let Some(q) = quantity_of_steps_key(&header.format, &name) {
                let s = npz.steps(&name)?.expect("listed");
                own_steps.insert(q, (name, s));
                continue;
            }
            let Some(q) = quantity_of_key(&header.format, &name) else {
                return Err(bad(
                    path,
                    format!(
                        "unknown array `{name}` (quantities: {})",
                        keys(&header.format)
                    ),
                ));
            };
            // float64, else float32; where neither reads, the error of the type the
            // header declares (the other one's is only the dtype mismatch)
            let a: ArrayD<f64> = match npz.array::<f64>(&name) {
                Ok(a) => a.expect("listed"),
                Err(e64) => match npz.array::<f32>(&name) {
                    Ok(a) => a.expect("listed").mapv(f64::from),
                    Err(e32) if e32.to_string().contains(DTYPE_MISMATCH) => return Err(e64),
                    Err(e32) => return Err(e32),
                },
            };
            let Some((&k, shape)) = a.shape().split_first() else {
                return Err(bad(
                    path,
                    format!(
                        "array `{name}` is 0-dimensional; its first axis must be the recorded step"
                    ),
                ));
            };
            let a = a.as_standard_layout();
            let flat = a.as_slice().expect("standard layout");
            let len: usize = shape.iter().product();
            let values = (0..k)
                .map(|i| flat[i * len..(i + 1) * len].to_vec())
                .collect();
            series.insert(
                q,
                Series {
                    shape: shape.to_vec(),
                    values,
                    steps: None,
                },
            );
        }
        attach_steps(&mut series, own_steps, path)?;
        Ok(External {
            header,
            steps,
            series,
        })
    }

    /// An external trajectory assembled in memory (the Python binding's dict of arrays),
    /// checked as a file's is; `origin` names it in messages.
    pub fn from_parts(
        header: Header,
        steps: Vec<u64>,
        series: BTreeMap<Quantity, Series>,
        origin: &Path,
    ) -> Result<External> {
        let ext = External {
            header,
            steps,
            series,
        };
        ext.check_consistency(origin)?;
        Ok(ext)
    }

    /// The steps quantity `q` is recorded at (its own, or every step); `None` when it
    /// is not recorded.
    pub fn steps_of(&self, q: Quantity) -> Option<&[u64]> {
        self.series
            .get(&q)
            .map(|s| s.steps.as_deref().unwrap_or(&self.steps))
    }

    /// For each step of [`External::steps`], the index of quantity `q`'s value there
    /// (`None` where it is not recorded, or not recorded at all).
    pub fn value_index(&self, q: Quantity) -> Vec<Option<usize>> {
        let Some(own) = self.steps_of(q) else {
            return vec![None; self.steps.len()];
        };
        let mut j = 0;
        self.steps
            .iter()
            .map(|&s| {
                (own.get(j) == Some(&s)).then(|| {
                    j += 1;
                    j - 1
                })
            })
            .collect()
    }

    /// The file's own consistency: format tag, increasing steps, at least one quantity,
    /// one entry per step in each; each quantity's own steps strictly increasing, a
    /// subset of `steps`; every step of `steps` recording some quantity.
    fn check_consistency(&self, path: &Path) -> Result<()> {
        if self.header.format != EXTERNAL_FORMAT && self.header.format != EXTERNAL_FORMAT_V1 {
            return Err(bad(
                path,
                format!(
                    "format `{}`, expected `{EXTERNAL_FORMAT}` (or `{EXTERNAL_FORMAT_V1}`)",
                    self.header.format
                ),
            ));
        }
        if let Some(name) = &self.header.implementation
            && let Some(c) = name.chars().find(|c| c.is_control())
        {
            return Err(bad(
                path,
                format!(
                    "`implementation` holds the control character {:?}: a name is one line of printable text",
                    c
                ),
            ));
        }
        if self.steps.is_empty() {
            return Err(bad(path, "`steps` is empty"));
        }
        if let Some(w) = self.steps.windows(2).find(|w| w[0] >= w[1]) {
            return Err(bad(
                path,
                format!("`steps` must increase strictly ({} then {})", w[0], w[1]),
            ));
        }
        if self.series.is_empty() {
            return Err(bad(
                path,
                format!(
                    "no quantity recorded (any of {})",
                    keys(&self.header.format)
                ),
            ));
        }
        for (q, s) in &self.series {
            if let Some(own) = &s.steps {
                let key = steps_key(q.name());
                if own.is_empty() {
                    return Err(bad(path, format!("`{key}` is empty")));
                }
                if let Some(w) = own.windows(2).find(|w| w[0] >= w[1]) {
                    return Err(bad(
                        path,
                        format!("`{key}` must increase strictly ({} then {})", w[0], w[1]),
                    ));
                }
                if let Some(x) = own.iter().find(|x| self.steps.binary_search(x).is_err()) {
                    return Err(bad(
                        path,
                        format!(
                            "`{key}` lists step {x}, which `steps` does not (a quantity's own steps are a subset of `steps`)"
                        ),
                    ));
                }
            }
            let n = s.steps.as_ref().map_or(self.steps.len(), Vec::len);
            if s.values.len() != n {
                let of = if s.steps.is_some() {
                    format!(" (`{}`)", steps_key(q.name()))
                } else {
                    String::new()
                };
                return Err(bad(
                    path,
                    format!(
                        "`{}` has {} entries for {n} steps{of}",
                        q.name(),
                        s.values.len(),
                    ),
                ));
            }
        }
        let mut used = vec![false; self.steps.len()];
        for &q in self.series.keys() {
            for (u, i) in used.iter_mut().zip(self.value_index(q)) {
                *u |= i.is_some();
            }
        }
        if let Some(k) = used.iter().position(|u| !u) {
            return Err(bad(
                path,
                format!(
                    "step {} of `steps` records no quantity (every quantity lists its own steps without it)",
                    self.steps[k]
                ),
            ));
        }
        Ok(())
    }

    /// Check every quantity against `cfg` (the data's config): that the run has it
    /// ([`Quantity::missing`]: the blocks `W_Q`, `W_K`, `b_Q`, `b_K` only with
    /// `[factorised]`, the biases only with its `bias`, `W` only without it) and its
    /// shape; and the header's config values against `cfg`'s.
    pub fn check_against(&self, cfg: &Config) -> Result<()> {
        for (q, s) in &self.series {
            if let Some(why) = q.missing(cfg) {
                return Err(Error::Mismatch {
                    what: format!("quantity `{}`", q.name()),
                    reason: format!("not a quantity of the data's config: {why}"),
                });
            }
            let want = q.shape(cfg);
            if s.shape != want {
                return Err(Error::Mismatch {
                    what: format!("quantity `{}`", q.name()),
                    reason: format!(
                        "shape {:?} per step, the data's config gives {want:?}",
                        s.shape
                    ),
                });
            }
        }
        let mut ours = serde_json::to_value(cfg).expect("config serialises");
        // the sections a config leaves out when they are the default are still keys a
        // header may give (`"model": {"kind": "token-selection"}`)
        ours["model"] = serde_json::to_value(cfg.model).expect("model serialises");
        ours["optimizer"] = serde_json::to_value(cfg.optimizer).expect("optimizer serialises");
        for (key, theirs) in &self.header.config {
            let Some(mine) = ours.get(key) else {
                return Err(Error::Mismatch {
                    what: format!("header config `{key}`"),
                    reason: "not a tokensel config key".into(),
                });
            };
            if !same_value(mine, theirs) {
                return Err(Error::Mismatch {
                    what: format!("header config `{key}`"),
                    reason: format!(
                        "the implementation used {theirs}, the data's config.toml has {mine}"
                    ),
                });
            }
        }
        if let Some(&last) = self.steps.last()
            && last > cfg.steps
        {
            return Err(Error::Mismatch {
                what: "steps".into(),
                reason: format!(
                    "step {last} recorded, the data's config runs {} steps",
                    cfg.steps
                ),
            });
        }
        Ok(())
    }
}

/// Give each quantity the own steps read from its `<name>_steps` key; a key for a
/// quantity the file does not record is refused.
fn attach_steps(
    series: &mut BTreeMap<Quantity, Series>,
    own_steps: BTreeMap<Quantity, (String, Vec<u64>)>,
    path: &Path,
) -> Result<()> {
    for (q, (key, steps)) in own_steps {
        let Some(s) = series.get_mut(&q) else {
            return Err(bad(
                path,
                format!(
                    "`{key}` lists steps of `{}`, which is not recorded",
                    q.name()
                ),
            ));
        };
        s.steps = Some(steps);
    }
    Ok(())
}

/// An NPZ archive whose members are read with their sizes bounded: each member's bytes
/// (at most what is left of `io::files::LARGE_INPUT` over the whole archive), then its
/// NPY header checked against its length before ndarray-npy allocates the array.
struct Npz<'a> {
    archive: zip::ZipArchive<std::fs::File>,
    path: &'a Path,
    /// Decompressed bytes still allowed.
    budget: u64,
}

impl<'a> Npz<'a> {
    /// Open the archive and refuse one that names a member twice, or holds both `x` and
    /// `x.npy` (one array given twice): the zip crate keeps one member per name, so the
    /// other would be silently ignored.
    fn open(file: std::fs::File, path: &'a Path) -> Result<Npz<'a>> {
        let mut listing = file.try_clone().map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let archive = zip::ZipArchive::new(file).map_err(|e| bad(path, e.to_string()))?;
        let names = central_names(&mut listing, archive.central_directory_start())
            .map_err(|e| bad(path, format!("central directory: {e}")))?;
        let mut seen = std::collections::BTreeSet::new();
        let mut arrays = BTreeMap::new();
        for raw in &names {
            let name = String::from_utf8_lossy(raw);
            if !seen.insert(raw.as_slice()) {
                return Err(bad(
                    path,
                    format!("member `{name}` appears twice in the archive"),
                ));
            }
            let array = name.strip_suffix(".npy").unwrap_or(&name).to_string();
            if let Some(other) = arrays.insert(array.clone(), name.to_string()) {
                return Err(bad(
                    path,
                    format!("members `{other}` and `{name}` both give array `{array}`"),
                ));
            }
        }
        Ok(Npz {
            archive,
            path,
            budget: LARGE_INPUT,
        })
    }

    /// The arrays' names (member names without `.npy`), in archive order.
    fn names(&self) -> Vec<String> {
        self.archive
            .file_names()
            .map(|n| n.strip_suffix(".npy").unwrap_or(n).to_string())
            .collect()
    }

    /// The bytes of array `name`'s member, `None` when it is missing.
    fn member(&mut self, name: &str) -> Result<Option<Vec<u8>>> {
        use std::io::Read;
        let path = self.path;
        let index = self
            .archive
            .index_for_name(&format!("{name}.npy"))
            .or_else(|| self.archive.index_for_name(name));
        let Some(index) = index else {
            return Ok(None);
        };
        let mut m = self
            .archive
            .by_index(index)
            .map_err(|e| bad(path, format!("array `{name}`: {e}")))?;
        let mut bytes = Vec::with_capacity(m.size().min(self.budget).min(1 << 26) as usize);
        (&mut m)
            .take(self.budget + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| bad(path, format!("array `{name}`: {e}")))?;
        if bytes.len() as u64 > self.budget {
            return Err(Error::TooLarge {
                field: path.display().to_string(),
                reason: format!(
                    "its arrays hold more than {LARGE_INPUT} bytes decompressed (array `{name}`)"
                ),
            });
        }
        self.budget -= bytes.len() as u64;
        Ok(Some(bytes))
    }

    /// Integer array `name` (int64 or uint64) as steps (`None` when missing): negative
    /// entries are refused.
    fn steps(&mut self, name: &str) -> Result<Option<Vec<u64>>> {
        let path = self.path;
        match self.array::<i64>(name) {
            Ok(Some(a)) => a
                .iter()
                .map(|&s| {
                    u64::try_from(s).map_err(|_| bad(path, format!("`{name}`: negative step {s}")))
                })
                .collect::<Result<_>>()
                .map(Some),
            Ok(None) => Ok(None),
            Err(_) => Ok(Some(
                self.array::<u64>(name)
                    .map_err(|e| bad(path, format!("array `{name}` (int64 or uint64): {e}")))?
                    .expect("present: read as int64 before")
                    .iter()
                    .copied()
                    .collect(),
            )),
        }
    }

    /// Array `name` of element type `T` (`None` when missing). Its header's shape must
    /// account for exactly the data bytes the member holds, checked before the array is
    /// allocated; a header of another dtype is an error.
    fn array<T: ndarray_npy::ReadableElement>(&mut self, name: &str) -> Result<Option<ArrayD<T>>> {
        use ndarray_npy::ReadNpyExt;
        let Some(bytes) = self.member(name)? else {
            return Ok(None);
        };
        let path = self.path;
        let fail = |m: String| bad(path, format!("array `{name}`: {m}"));
        check_npy_len::<T>(&bytes).map_err(fail)?;
        ArrayD::<T>::read_npy(bytes.as_slice())
            .map(Some)
            .map_err(|e| fail(e.to_string()))
    }
}

/// The member names of the central directory that starts at `start` in `file`, raw and
/// in order, duplicates kept: its file headers are read until one does not begin with
/// the central-header signature.
fn central_names(file: &mut std::fs::File, start: u64) -> std::io::Result<Vec<Vec<u8>>> {
    use std::io::{Read, Seek, SeekFrom};
    const SIGNATURE: u32 = 0x0201_4b50;
    file.seek(SeekFrom::Start(start))?;
    let mut reader = std::io::BufReader::new(file);
    let mut names = Vec::new();
    loop {
        let mut fixed = [0u8; 46];
        match reader.read_exact(&mut fixed) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e),
        }
        if u32::from_le_bytes([fixed[0], fixed[1], fixed[2], fixed[3]]) != SIGNATURE {
            break;
        }
        let field = |at: usize| u16::from_le_bytes([fixed[at], fixed[at + 1]]);
        let mut name = vec![0u8; usize::from(field(28))];
        reader.read_exact(&mut name)?;
        reader.seek_relative(i64::from(field(30)) + i64::from(field(32)))?;
        names.push(name);
    }
    Ok(names)
}

/// The start of [`check_npy_len`]'s message for a header of another element size.
const DTYPE_MISMATCH: &str = "its header declares dtype";

/// Check an NPY file's header against its length for elements of type `T`: the header
/// length field must fit in the bytes, and the shape's element count times
/// `size_of::<T>()` must equal the data that follows the header.
fn check_npy_len<T>(bytes: &[u8]) -> std::result::Result<(), String> {
    use ndarray_npy::npy::header::Header;
    // magic (6 bytes), version (2), then HEADER_LEN: u16 in version 1, u32 after
    let len_field = match bytes.get(6) {
        Some(1) => bytes
            .get(8..10)
            .map(|b| (u16::from_le_bytes([b[0], b[1]]) as usize, 10)),
        Some(2 | 3) => bytes
            .get(8..12)
            .map(|b| (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12)),
        _ => None,
    };
    let Some((header_len, start)) = len_field else {
        return Err("not an NPY member (no NPY magic and version)".into());
    };
    if header_len > bytes.len() - start {
        return Err(format!(
            "its header claims {header_len} header bytes, the member holds {}",
            bytes.len()
        ));
    }
    let mut reader = bytes;
    let header = Header::from_reader(&mut reader).map_err(|e| e.to_string())?;
    // the element size the header declares ('<f8': 8), where it names one
    let descr = header.type_descriptor.to_string();
    let declared: Option<usize> = descr
        .trim_matches(|c| c == '\'' || c == '"')
        .get(2..)
        .and_then(|n| n.parse().ok());
    if declared.is_some_and(|n| n != std::mem::size_of::<T>()) {
        return Err(format!(
            "{DTYPE_MISMATCH} {descr}, not a {}-byte element",
            std::mem::size_of::<T>()
        ));
    }
    let data = reader.len();
    let want = header
        .shape
        .iter()
        .try_fold(std::mem::size_of::<T>(), |a, &b| a.checked_mul(b));
    if want != Some(data) {
        return Err(format!(
            "its header claims shape {:?} of {}-byte elements, but {data} data bytes follow the header",
            header.shape,
            std::mem::size_of::<T>()
        ));
    }
    Ok(())
}

/// Parse JSON bytes into a value, refusing any object that gives a key twice (the
/// error names the key; serde_json's own `Value` keeps the last of a repeated key).
/// Readers of files whose meaning a repeated key leaves open (external trajectories,
/// state files) parse through this.
pub(crate) fn from_slice_unique(bytes: &[u8]) -> serde_json::Result<serde_json::Value> {
    serde_json::from_slice::<Unique>(bytes).map(|u| u.0)
}

/// A JSON value whose objects have no key twice (serde_json's own `Value` keeps the
/// last of a repeated key).
struct Unique(serde_json::Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::{Error as _, MapAccess, SeqAccess, Visitor};
        use serde_json::Value;
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Unique;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> std::result::Result<Unique, E> {
                Ok(Unique(Value::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<Unique, E> {
                Ok(Unique(Value::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<Unique, E> {
                Ok(Unique(Value::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<Unique, E> {
                Ok(Unique(
                    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
                ))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Unique, E> {
                Ok(Unique(Value::String(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> std::result::Result<Unique, E> {
                Ok(Unique(Value::String(v)))
            }
            fn visit_unit<E>(self) -> std::result::Result<Unique, E> {
                Ok(Unique(Value::Null))
            }
            fn visit_none<E>(self) -> std::result::Result<Unique, E> {
                Ok(Unique(Value::Null))
            }
            fn visit_some<D: serde::Deserializer<'de>>(
                self,
                d: D,
            ) -> std::result::Result<Unique, D::Error> {
                Unique::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Unique, A::Error> {
                let mut out = Vec::new();
                while let Some(Unique(v)) = seq.next_element()? {
                    out.push(v);
                }
                Ok(Unique(Value::Array(out)))
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Unique, A::Error> {
                let mut out = serde_json::Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    let Unique(v) = map.next_value()?;
                    if out.contains_key(&key) {
                        return Err(A::Error::custom(format!(
                            "key `{key}` given twice in one object"
                        )));
                    }
                    out.insert(key, v);
                }
                Ok(Unique(Value::Object(out)))
            }
        }
        d.deserialize_any(V)
    }
}

/// JSON equality with numbers compared as f64 and objects compared on the keys given.
fn same_value(mine: &serde_json::Value, theirs: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (mine, theirs) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Object(a), Value::Object(b)) => b
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|m| same_value(m, v))),
        _ => mine == theirs,
    }
}
