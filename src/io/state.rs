//! The twin's state file: a resumable snapshot of a run (format, save and load, the
//! check that it belongs to the run being resumed, and when a state may be used).
//!
//! What the numbers in it mean is the trainer's business (`train::resume` builds a
//! [`State`] from a trainer and restores a trainer from one); this module only reads and
//! writes them, exactly (hexadecimal text in the trainer's own arithmetic).
//!
//! The file is one JSON object: the state's fields and `sha256`, the SHA-256 of the
//! object without `sha256` written compactly with its keys sorted (as `serde_json`
//! writes a `Value`). A file whose digest does not match (an edited step, a truncated
//! value) is refused; so is one whose structure is wrong although its digest matches
//! (an edit with the digest recomputed: checkpoints out of order or after its `step`,
//! wrong sample counts or tokens, see `State::load`), as is one that gives a key twice
//! in any object (its digest may match whichever copy a reader keeps), and so is a state path that is a symbolic link or not a regular
//! file: it is never followed, read or replaced.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::io::files::{LARGE_INPUT, check_output_file, read_input_no_symlink, write_atomic};
use crate::io::trajectory::{Checkpoint, Cumulative, TrainerInfo};

/// Format tag of trainer state files (version 4: a SHA-256 of the content, non-finite
/// numbers spelled as in `io::nonfinite`; its checkpoints are those of
/// `tokensel-trajectory/2`).
pub const STATE_FORMAT: &str = "tokensel-state/4";

/// A resumable snapshot of a run (a key it does not have is refused by name when read).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// Always [`STATE_FORMAT`].
    pub format: String,
    /// The run's config (a resumed run must use the same).
    pub config: Config,
    /// The trainer (arithmetic, precision, formulation, method).
    pub trainer: TrainerInfo,
    /// Steps done.
    pub step: u64,
    /// The engine's parameters by name (`p`, `W` direct; `a`, `M` span) and an Adam
    /// run's optimiser state (`adam.t`, the moments `adam.m.p`, `adam.v.p`, `adam.m.W`,
    /// `adam.v.W`), exact text.
    pub values: BTreeMap<String, Vec<String>>,
    /// Definition 4.1 sums over steps 0..step-1.
    pub cumulative: Cumulative,
    /// Checkpoints recorded so far.
    pub checkpoints: Vec<Checkpoint>,
    /// The file this state was read from (for error messages; not stored).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

impl State {
    /// An error about this state's content (`Error::Parse`, naming its file).
    pub fn error(&self, message: String) -> Error {
        Error::Parse {
            what: "trainer state",
            path: self
                .source
                .clone()
                .unwrap_or_else(|| "(state in memory)".into()),
            message,
        }
    }

    /// The values stored under `name`, or an error naming what is missing.
    pub fn values(&self, name: &str) -> Result<&[String]> {
        self.values
            .get(name)
            .map(Vec::as_slice)
            .ok_or_else(|| self.error(format!("`{name}` is missing")))
    }

    /// Write atomically, with the digest of the content.
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut value = serde_json::to_value(self).expect("state serialises");
        let digest = content_digest(&value);
        if let serde_json::Value::Object(map) = &mut value {
            map.insert("sha256".into(), digest.into());
        }
        write_atomic(path, value.to_string().as_bytes())
    }

    /// Read a state file: a regular file, not a symbolic link, with no key given twice in
    /// any object, whose digest matches its content, of the current format, whose structure is sound (its config valid, its
    /// checkpoints as a trajectory reader accepts them and none after its `step`).
    pub fn load(path: &Path) -> Result<State> {
        let bytes = read_input_no_symlink(path, LARGE_INPUT)?;
        let parse = |message: String| Error::Parse {
            what: "trainer state",
            path: path.to_path_buf(),
            message,
        };
        let mut value =
            crate::io::external::from_slice_unique(&bytes).map_err(|e| parse(e.to_string()))?;
        let format = value.get("format").and_then(|f| f.as_str()).unwrap_or("");
        if format != STATE_FORMAT {
            return Err(parse(format!(
                "format `{format}` is not `{STATE_FORMAT}` (a state of another tokensel version, or not a state)"
            )));
        }
        let stored = match value.as_object_mut().and_then(|m| m.remove("sha256")) {
            Some(serde_json::Value::String(d)) => d,
            _ => return Err(parse("no `sha256` digest".into())),
        };
        if stored != content_digest(&value) {
            return Err(parse(
                "its content does not match its `sha256` digest (the file was changed): not resumed".into(),
            ));
        }
        let mut st: State = serde_json::from_value(value).map_err(|e| parse(e.to_string()))?;
        st.check_structure().map_err(parse)?;
        st.source = Some(path.to_path_buf());
        Ok(st)
    }

    /// The checks a state must pass whatever its digest says (a state edited with its
    /// digest recomputed): a valid config, at most its `steps` done, the checkpoints a
    /// trajectory reader accepts (`io::trajectory`: steps strictly increasing, `n_train`
    /// samples each with top < T), none after the state's `step`.
    fn check_structure(&self) -> std::result::Result<(), String> {
        self.config
            .validate()
            .map_err(|e| format!("its config is not valid: {e}"))?;
        if self.step > self.config.steps {
            return Err(format!(
                "`step` {} is after the config's last step {}",
                self.step, self.config.steps
            ));
        }
        crate::io::trajectory::check_checkpoints(&self.config, &self.checkpoints)?;
        // the Definition 4.1 sums a resumed run adds to: sums of S_i in [0, 1/4], so
        // finite and >= 0 in any run that saves a state
        let c = &self.cumulative;
        for (name, v) in [
            ("clean", c.clean),
            ("noisy", c.noisy),
            ("class_pos", c.class_pos),
            ("class_neg", c.class_neg),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!(
                    "`cumulative.{name}` is {v}: a run's sums of the Definition 4.1 score \
                     are finite and >= 0"
                ));
            }
        }
        match self.checkpoints.last() {
            Some(c) if c.step > self.step => Err(format!(
                "checkpoint {} is after the state's `step` {}",
                c.step, self.step
            )),
            _ => Ok(()),
        }
    }

    /// Refuse to resume under another config, arithmetic, formulation or method.
    pub fn check(&self, cfg: &Config, trainer: &TrainerInfo) -> Result<()> {
        let file = self
            .source
            .as_ref()
            .map_or("the saved state".to_string(), |p| {
                format!("`{}`", p.display())
            });
        let mismatch = |what: &str, detail: &str| {
            Err(Error::Mismatch {
                what: format!("--resume: {file} and this run"),
                reason: format!(
                    "the state has another {what} than this run{detail} (a state resumes only \
                     the run it was saved from)"
                ),
            })
        };
        if &self.config != cfg {
            return mismatch(
                "config",
                &format!(": {}", config_differences(&self.config, cfg).join("; ")),
            );
        }
        if &self.trainer != trainer {
            return mismatch("trainer (arithmetic, precision, formulation or method)", "");
        }
        if self.step > cfg.steps {
            return mismatch("step count", "");
        }
        Ok(())
    }
}

/// The config keys whose values differ between `saved` and `now`, each as "`key` is
/// V in the state, W in this run" (dotted keys, e.g. `optimizer.eps`; a key present on
/// one side only shows "absent" on the other).
pub fn config_differences(saved: &Config, now: &Config) -> Vec<String> {
    fn walk(key: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value::Object;
        match (a, b) {
            (Object(x), Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                let null = serde_json::Value::Null;
                for k in keys {
                    let sub = if key.is_empty() {
                        k.clone()
                    } else {
                        format!("{key}.{k}")
                    };
                    walk(
                        &sub,
                        x.get(k).unwrap_or(&null),
                        y.get(k).unwrap_or(&null),
                        out,
                    );
                }
            }
            _ if a != b => {
                let shown = |v: &serde_json::Value| match v {
                    serde_json::Value::Null => "absent".to_string(),
                    v => v.to_string(),
                };
                out.push(format!(
                    "`{key}` is {} in the state, {} in this run",
                    shown(a),
                    shown(b)
                ));
            }
            _ => {}
        }
    }
    let json = |c: &Config| serde_json::to_value(c).expect("a config serialises");
    let mut out = Vec::new();
    walk("", &json(saved), &json(now), &mut out);
    if out.is_empty() {
        // equal as JSON, unequal as values (e.g. -0.0 against 0.0)
        out.push("a value that prints the same differs in its bits".into());
    }
    out
}

/// How a run with a state file starts.
#[derive(Debug)]
pub enum Start {
    /// From step 0 (no state file yet).
    Fresh,
    /// From the state read from the file.
    Resume(Box<State>),
}

/// SHA-256 (hex) of a state's JSON value (without `sha256`), written compactly with
/// sorted keys.
fn content_digest(value: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(value.to_string().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The state-file policy, checked before any work: `path` must be absent or a regular
/// file (a symbolic link, even a dangling or looping one, a directory, a FIFO or a
/// device is refused, never followed or replaced), its directory must accept its
/// temporaries (it is created if missing; a name too long for them is refused), and an existing state is used only with `resume` (without
/// it, an existing file is refused rather than overwritten). With `resume` and no file
/// yet, the run starts from step 0.
pub fn open(path: &Path, resume: bool) -> Result<Start> {
    let exists = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_symlink() => {
            return Err(Error::path(
                path,
                "is a symbolic link: a state file is never followed or replaced, give the file itself",
            ));
        }
        Ok(m) if !m.is_file() => {
            return Err(Error::path(
                path,
                "is not a regular file: not a state file, not replaced",
            ));
        }
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(source) => {
            return Err(Error::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if exists && !resume {
        return Err(Error::argument(
            "--state",
            format!(
                "`{}` exists: pass --resume to continue that run, or remove it",
                path.display()
            ),
        ));
    }
    check_output_file(path)?;
    Ok(if resume && exists {
        Start::Resume(Box::new(State::load(path)?))
    } else {
        Start::Fresh
    })
}

/// When a running trainer saves its state: every `every` steps and at the last step.
#[derive(Debug, Clone, Copy)]
pub struct Saver<'a> {
    /// The state file.
    pub path: &'a Path,
    /// Steps between saves (at least 1).
    pub every: u64,
}

impl Saver<'_> {
    /// Whether the state after `step` updates of a `last`-step run is saved.
    pub fn due(&self, step: u64, last: u64) -> bool {
        step.is_multiple_of(self.every) || step == last
    }
}
