//! The library's error type.

use std::path::PathBuf;

/// Everything that can go wrong in tokensel, as a typed value.
///
/// Input errors ([`Error::InvalidConfig`], [`Error::InvalidArgument`],
/// [`Error::InvalidGrid`], [`Error::Parse`]) are the user's to fix; the CLI maps them to exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is out of its domain.
    #[error("invalid config: `{field}`: {reason}")]
    InvalidConfig {
        /// Dotted name of the offending field, e.g. `layout.relevant`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A command-line argument (a flag such as `--out`, or a positional input) or a
    /// function argument of the bindings is out of its domain: not a config key, so not
    /// called "invalid config".
    #[error("invalid argument `{name}`: {reason}")]
    InvalidArgument {
        /// The argument as the user wrote it: `--save-every`, `INPUT`, ...
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A grid's own field (its `seeds`, `name`, `axes` or one axis `axes.KEY`) is out of
    /// its domain: a grid spec is not a config, so not called "invalid config". A grid
    /// TOML's errors are reported as [`Error::Parse`] naming the file, `--set`'s as
    /// [`Error::InvalidArgument`]; this is the message of a grid built from both.
    #[error("invalid grid spec: `{field}`: {reason}")]
    InvalidGrid {
        /// The grid field: `seeds`, `name`, `axes`, `axes.d`, ...
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A file could not be parsed (TOML or JSON).
    #[error("cannot parse {what} `{path}`: {message}")]
    Parse {
        /// What kind of file (e.g. "config", "trajectory").
        what: &'static str,
        /// Where it came from.
        path: PathBuf,
        /// The parser's message (names the field or line).
        message: String,
    },
    /// A file could not be read or written.
    #[error("I/O error on `{path}`: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A path that cannot serve as what it was given for: an input that is not a regular
    /// file (a FIFO, device, socket or directory: refused before anything is read), a
    /// state file that is a symbolic link, an output target that holds files tokensel
    /// did not write (refused before any work, never replaced), or an input that is of a
    /// kind the command does not take (`plot` of a judge report, of a trajectory with
    /// nothing to draw).
    #[error("`{path}`: {reason}")]
    Path {
        /// The path.
        path: PathBuf,
        /// Why it is refused.
        reason: String,
    },
    /// A run would exceed a size limit (memory of the data or of a trainer's state); it
    /// is refused before anything is allocated.
    #[error("refused: `{field}`: {reason}")]
    TooLarge {
        /// The config field or flag that sets the size.
        field: String,
        /// The size asked for and the limit.
        reason: String,
    },
    /// Work refused because what it needs was not proved (e.g. a run's direction is
    /// compared only with an attention SVM solution proved optimal).
    #[error("refused: {0}")]
    Refused(String),
    /// Two inputs that must describe the same run do not (an external trajectory's
    /// shapes or config against a data export, a data export against its manifest).
    #[error("mismatch: {what}: {reason}")]
    Mismatch {
        /// What does not match.
        what: String,
        /// How.
        reason: String,
    },
    /// The work is done and its result was printed, but its output set could not be
    /// published (a full disk, a target changed during the work): the CLI exits with 3,
    /// the printed summary being the result.
    #[error("the result is printed above but was not written: {source}")]
    NotPublished {
        /// Why publishing failed.
        #[source]
        source: Box<Error>,
    },
    /// A quantity became NaN or infinite during training.
    #[error("non-finite {quantity} at step {step}{}: training stopped", sample_text(.sample))]
    NonFinite {
        /// The step (number of updates done) at which it was found.
        step: u64,
        /// The quantity's name (`crate::quantity::Quantity::name`: "output", "loss", ...).
        quantity: &'static str,
        /// Training sample index, where the quantity belongs to one.
        sample: Option<usize>,
    },
    /// Normalised GD could not form a block's factor alpha / (||G|| + eps): with eps = 0
    /// its gradient norm is 0 in the run's arithmetic, or the factor is beyond the
    /// arithmetic's range (a norm near 0 in f64 or f32, or a ball enclosing 0).
    #[error(
        "normalised GD stopped at step {step}: the gradient with respect to {block} has norm \
         {norm} in this arithmetic, so the factor alpha / (||G|| + eps) with \
         optimizer.eps = {eps} is not a finite number; {advice}"
    )]
    NormalizedStep {
        /// The step (number of updates done) at which it was found.
        step: u64,
        /// The parameter block: "p" or "W".
        block: &'static str,
        /// The norm as the arithmetic holds it (a value, or an enclosure).
        norm: String,
        /// The config's eps, as written in the message.
        eps: String,
        /// What would let the step be taken (`train::step_rule::Stopped::error`).
        advice: String,
    },
}

fn sample_text(sample: &Option<usize>) -> String {
    sample.map_or(String::new(), |i| format!(", training sample {i}"))
}

impl Error {
    /// Shorthand for [`Error::Path`].
    pub fn path(path: &std::path::Path, reason: impl Into<String>) -> Self {
        Error::Path {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub fn argument(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            name: name.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`Error::InvalidGrid`].
    pub fn grid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidGrid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`Error::InvalidConfig`].
    pub fn config(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidConfig {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// True for errors caused by bad user input: config values, arguments, unparsable files,
    /// unreadable inputs and unusable output paths (the CLI exits with code 2).
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            Error::InvalidConfig { .. }
                | Error::InvalidArgument { .. }
                | Error::InvalidGrid { .. }
                | Error::Parse { .. }
                | Error::Io { .. }
                | Error::Path { .. }
                | Error::Mismatch { .. }
        )
    }

    /// True for a run that stopped or was refused: a non-finite value, a size over a
    /// limit, or a result that could not be published after the work (the CLI exits
    /// with code 3).
    pub fn is_stopped_run(&self) -> bool {
        matches!(
            self,
            Error::NonFinite { .. }
                | Error::NormalizedStep { .. }
                | Error::TooLarge { .. }
                | Error::Refused(_)
                | Error::NotPublished { .. }
        )
    }
}

/// Result alias with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
