//! The twin's state file: a resumable snapshot of a run (format, save and load, the
//! check that it belongs to the run being resumed, and when a state may be used).
//!
//! What the numbers in it mean is the trainer's business (`train::resume` builds a
//! [`State`] from a trainer and restores a trainer from one); this module only reads and
//! writes them, exactly (hexadecimal text in the trainer's own arithmetic).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::io::files::{check_output_dir, write_atomic};
use crate::io::trajectory::{Checkpoint, Cumulative, TrainerInfo};

/// Format tag of trainer state files (version 3: its checkpoints are those of
/// `tokensel-trajectory/2`).
pub const STATE_FORMAT: &str = "tokensel-state/3";

/// A resumable snapshot of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Always [`STATE_FORMAT`].
    pub format: String,
    /// The run's config (a resumed run must use the same).
    pub config: Config,
    /// The trainer (arithmetic, precision, formulation, method).
    pub trainer: TrainerInfo,
    /// Steps done.
    pub step: u64,
    /// The engine's parameters by name (`p`, `W` direct; `a`, `M` span), exact text.
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

    /// Write atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string(self).expect("state serialises");
        write_atomic(path, text.as_bytes())
    }

    /// Read a state file.
    pub fn load(path: &Path) -> Result<State> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let parse = |message: String| Error::Parse {
            what: "trainer state",
            path: path.to_path_buf(),
            message,
        };
        let mut st: State = serde_json::from_str(&text).map_err(|e| parse(e.to_string()))?;
        st.source = Some(path.to_path_buf());
        if st.format != STATE_FORMAT {
            return Err(parse(format!(
                "format `{}` is not `{STATE_FORMAT}`",
                st.format
            )));
        }
        Ok(st)
    }

    /// Refuse to resume under another config, arithmetic, formulation or method.
    pub fn check(&self, cfg: &Config, trainer: &TrainerInfo) -> Result<()> {
        let file = self
            .source
            .as_ref()
            .map_or("the saved state".to_string(), |p| {
                format!("`{}`", p.display())
            });
        let mismatch = |what: &str| {
            Err(Error::config(
                "resume",
                format!("{file} has another {what} than this run"),
            ))
        };
        if &self.config != cfg {
            return mismatch("config");
        }
        if &self.trainer != trainer {
            return mismatch("trainer (arithmetic, precision, formulation or method)");
        }
        if self.step > cfg.steps {
            return mismatch("step count");
        }
        Ok(())
    }
}

/// How a run with a state file starts.
#[derive(Debug)]
pub enum Start {
    /// From step 0 (no state file yet).
    Fresh,
    /// From the state read from the file.
    Resume(Box<State>),
}

/// The state-file policy, checked before any work: `path` must not be a directory, its
/// directory must accept files (it is created if missing), and an existing state is
/// used only with `resume` (without it, an existing file is refused rather than
/// overwritten). With `resume` and no file yet, the run starts from step 0.
pub fn open(path: &Path, resume: bool) -> Result<Start> {
    if path.is_dir() {
        return Err(Error::config(
            "state",
            format!("`{}` is a directory, not a state file", path.display()),
        ));
    }
    if path.exists() && !resume {
        return Err(Error::config(
            "state",
            format!(
                "`{}` exists: pass --resume to continue that run, or remove it",
                path.display()
            ),
        ));
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    check_output_dir(dir.unwrap_or(Path::new(".")))?;
    Ok(if resume && path.exists() {
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
