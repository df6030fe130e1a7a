//! The `tokensel` command line: one file per command (it parses its flags, calls a
//! layer below, prints, and returns an exit code); this file holds the command tree,
//! the exit codes and what several commands share (where a config comes from, output
//! options, progress bars, printing a report).
//!
//! Exit codes (docs/exit-codes.md): 0 success; 1 a claim failed, two trajectories
//! differ, or a certificate leaves a decision undecided; 2 bad input (unknown flag, bad config value, unreadable, garbage or directory
//! input, unusable output path), found before any work; 3 a run stopped (a non-finite
//! value) or was refused (a size over a limit). Commands return their code; nothing
//! here calls `process::exit` (but the hidden `--stop-after` crash simulation).
//!
//! Standard streams: at start-up SIGPIPE's default action is restored (a reader that
//! goes away, `tokensel ... | head -1`, ends the command at once, as other Unix tools),
//! SIGXFSZ is ignored (a write past `ulimit -f` fails as on a full disk: reported, the
//! results kept on stdout, exit 3) and closed standard descriptors (`>&-`, `2>&-`) are opened on `/dev/null` (so no
//! file tokensel opens can take their place). Inside `cli/`, `print!`, `println!`,
//! `eprint!` and `eprintln!` are this module's macros, not std's: they never panic. A
//! failed write to stdout (a full disk) is reported at the end and makes the exit code 2
//! (the command's own failure code, if any, is kept); a failed write to stderr is
//! ignored.

/// Print to stdout without panicking (see the module documentation).
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*))
    };
}

/// Print a line to stdout without panicking (see the module documentation).
macro_rules! println {
    () => {
        $crate::cli::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Print to stderr without panicking (see the module documentation).
#[allow(unused_macros)]
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::cli::write_stderr(format_args!($($arg)*))
    };
}

/// Print a line to stderr without panicking (see the module documentation).
macro_rules! eprintln {
    () => {
        $crate::cli::write_stderr(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::config::{Config, Method, Preset};
use crate::error::{Error, Result};
use crate::io::publish::{OutputDir, SetKind};
use crate::io::trajectory::{Summary, Trajectory};

mod certify;
mod check;
mod compare;
mod config;
mod cost;
mod data;
mod diff;
mod grid;
mod judge;
mod plot;
mod protocol;
mod run;
mod saturation;
mod snapshot;
mod svm;
mod sweep;
mod twin;

#[derive(Parser, Debug)]
#[command(
    name = "tokensel",
    version,
    about = "Token-selection attention: trainer, twin and checks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Train the model (f64) on a config and report accuracy and token selection.
    Run(run::RunArgs),
    /// Train with the MPFR twin (slow, any precision); checkpoint and resume long runs.
    Twin(twin::TwinArgs),
    /// Run the f64 trainer and the MPFR twin step by step and report f64's error.
    Compare(compare::CompareArgs),
    /// Enclose the exact run in ball arithmetic: every quantity an interval, every
    /// decision proved or undecided (exit 0 all decided, 1 undecided, 3 stopped: the
    /// enclosure blew up, and the certificate holds the checkpoints before it).
    Certify(certify::CertifyArgs),
    /// The attention SVM of a selection pattern, solved in f64 and proved optimal exactly
    /// (exit 0 proved optimal or proved infeasible, 1 not proved or feasibility undecided, 2 bad input, 3 refused).
    Svm(svm::SvmArgs),
    /// Sweep the score gap on one sequence: where does each f64 formulation break?
    Saturation(saturation::SaturationArgs),
    /// Train at several label-noise rates and seeds; CSV, JSON and an SVG plot.
    Sweep(sweep::SweepArgs),
    /// The fine-tuning protocol of the paper's Section I over seeds: a head fitted on a
    /// clean block, then the attention reset and trained on a noisy block.
    Protocol(protocol::ProtocolArgs),
    /// Check a claims file: exit 0 when every claim holds, 1 when one fails, 2 on a bad file.
    Check(check::CheckArgs),
    /// Compare two saved trajectories; exit 0 when they agree within --rtol, 1 if not.
    Diff(diff::DiffArgs),
    /// Snapshots for CI: `check DIR` runs a config against DIR's accepted snapshot (exit
    /// 0 agrees within its declared tolerance, 1 differs: written as pending), `accept
    /// DIR` makes the reviewed pending snapshot the accepted one, `status DIR`.
    Snapshot(snapshot::SnapshotArgs),
    /// Draw a trajectory (attention per group; a K-class one also top tokens and per-class
    /// accuracy), a compare report (error) or a certificate (bits lost), SVG or PNG.
    Plot(plot::PlotArgs),
    /// Measure one gradient step: f64 vs the twin at several precisions (a benchmark).
    Cost(cost::CostArgs),
    /// Print a config (the default, a preset, or a file with overrides) as TOML.
    Config(ConfigArgs),
    /// Write a run's exact data (tokens, labels, nu, p(0), W(0)) as NPY, with a manifest.
    Data(data::DataArgs),
    /// Judge another implementation: replay its run in the twin on the exported data and
    /// locate and diagnose its first error (exit 0 agrees, 1 differs, 2 bad input).
    Judge(judge::JudgeCmdArgs),
    /// Run a grid of configs over seeds (heat maps, label-noise map), sharded or whole;
    /// `grid merge DIR` reduces the cell files into tables and heat maps.
    Grid(grid::GridArgs),
}

/// Run the command line with the process arguments; returns the exit code. First the
/// standard streams are made safe (see the module documentation).
pub fn main() -> i32 {
    restore_sigpipe();
    ignore_sigxfsz();
    open_closed_std_fds();
    main_with(std::env::args_os())
}

/// Restore SIGPIPE's default action (Rust ignores it): a write into a pipe whose reader
/// has gone ends the process quietly (exit status 128 + 13 = 141 in the shell) instead of
/// failing the write.
fn restore_sigpipe() {
    // SAFETY: called first thing in `main`, before any other thread exists; setting a
    // signal's disposition to its default touches no memory of this program.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Ignore SIGXFSZ: a write past the file size limit (`ulimit -f`) then fails with EFBIG,
/// which the command reports as any failed write (the results printed, the partial file
/// removed, exit 3), instead of the signal's default action killing the process with
/// nothing printed and a temporary left behind.
fn ignore_sigxfsz() {
    // SAFETY: as in `restore_sigpipe`: before any other thread exists, and ignoring a
    // signal touches no memory of this program.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// Open `/dev/null` on each closed standard descriptor 0, 1, 2 (`open` returns the
/// lowest free one), so that writes to a closed stdout or stderr are discarded and no
/// file tokensel opens later becomes descriptor 1 or 2.
fn open_closed_std_fds() {
    use std::os::fd::{AsRawFd, IntoRawFd};
    for _ in 0..3 {
        let Ok(null) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
        else {
            return;
        };
        if null.as_raw_fd() > 2 {
            return; // dropped: 0, 1 and 2 are open
        }
        let _ = null.into_raw_fd(); // it is now the standard descriptor that was closed
    }
}

/// The first failed write to stdout, reported when the command ends.
static STDOUT_ERROR: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Write to stdout; a failure is remembered (see the module documentation).
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        remember_stdout_error(e);
    }
}

fn remember_stdout_error(e: std::io::Error) {
    if let Ok(mut slot) = STDOUT_ERROR.lock() {
        slot.get_or_insert_with(|| e.to_string());
    }
}

/// Write to stderr; a failure is ignored (there is nowhere left to report it).
pub(crate) fn write_stderr(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// Run the command line with the given arguments (first = program name).
pub fn main_with<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    let result = match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Twin(args) => twin::twin(&args),
        Command::Compare(args) => compare::compare(&args),
        Command::Certify(args) => certify::certify(&args),
        Command::Sweep(args) => sweep::sweep(&args),
        Command::Protocol(args) => protocol::protocol(&args),
        Command::Check(args) => check::check(&args),
        Command::Cost(args) => cost::cost(&args),
        Command::Diff(args) => diff::diff(&args),
        Command::Snapshot(args) => snapshot::snapshot(&args),
        Command::Plot(args) => plot::plot(&args),
        Command::Saturation(args) => saturation::saturation(&args),
        Command::Svm(args) => svm::svm_cmd(&args),
        Command::Config(args) => config::config(&args),
        Command::Data(args) => data::data(&args),
        Command::Judge(args) => judge::judge(&args),
        Command::Grid(args) => grid::grid(&args),
    };
    use std::io::Write;
    if let Err(e) = std::io::stdout().flush() {
        remember_stdout_error(e);
    }
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            exit_code(&e)
        }
    };
    match STDOUT_ERROR.lock().ok().and_then(|mut e| e.take()) {
        Some(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            if code == EXIT_OK {
                EXIT_BAD_INPUT
            } else {
                code
            }
        }
        None => code,
    }
}

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: a claim failed, two trajectories differ, or a certificate is undecided.
pub const EXIT_FAILED: i32 = 1;
/// Exit code: bad input (flags, config values, unreadable, garbage or directory inputs,
/// unusable output paths), found before any work starts.
pub const EXIT_BAD_INPUT: i32 = 2;
/// Exit code: a run stopped (a non-finite value) or was refused (a size over a limit).
pub const EXIT_STOPPED: i32 = 3;

/// The README's exit-code contract for an error.
pub fn exit_code(e: &Error) -> i32 {
    if e.is_stopped_run() {
        EXIT_STOPPED
    } else {
        EXIT_BAD_INPUT
    }
}

/// Where the run's config comes from.
#[derive(Args, Debug, Clone)]
struct ConfigArgs {
    /// TOML file; its keys override the preset (default: the balanced setting).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Embedded preset: balanced, large-noise, large-signal, label-noise-sweep or
    /// official-final (the default: balanced; for the `sweep` command label-noise-sweep).
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
    /// Override the seed.
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// Override the number of steps.
    #[arg(long, value_name = "N")]
    steps: Option<u64>,
    /// Override the step method: auto (the cheaper of the two for the run's sizes; the
    /// default), direct (d-space) or span (Gram space, the same trajectory in exact
    /// arithmetic, cost independent of d; needs the stable formulation).
    #[arg(long, value_name = "auto|direct|span", value_parser = parse_method)]
    method: Option<Method>,
}

impl ConfigArgs {
    fn load(&self) -> Result<Config> {
        self.load_with_default(Preset::Balanced)
    }

    fn load_with_default(&self, default: Preset) -> Result<Config> {
        let preset = match &self.preset {
            Some(name) => Preset::from_name(name)?,
            None => default,
        };
        let mut cfg = match &self.config {
            None => preset.config(),
            Some(path) => Config::from_toml_str_over_preset(&read_text(path)?, path, preset)?,
        };
        if let Some(seed) = self.seed {
            cfg.seed = seed;
        }
        if let Some(steps) = self.steps {
            cfg.steps = steps;
        }
        if let Some(method) = self.method {
            cfg.method = method;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// `--data DIR`: run on a `tokensel data` directory, generated or supplied (README
/// "Your own tokens"), instead of the config's generated data. The config is the
/// directory's `config.toml`; `--steps` and `--method` may still override it.
#[derive(Args, Debug)]
struct DataDir {
    /// A `tokensel data` directory (generated, or supplied arrays: manifest source
    /// "supplied"): its config.toml and arrays, checked against its manifest.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["config", "preset", "seed"])]
    data: Option<PathBuf>,
}

impl DataDir {
    /// The run's config and, with `--data`, its data set (read and checked; `None`: the
    /// config's data, to generate).
    fn load(&self, config: &ConfigArgs) -> Result<(Config, Option<crate::data::Dataset>)> {
        let Some(dir) = &self.data else {
            return Ok((config.load()?, None));
        };
        let (mut cfg, _, data) = crate::io::export::verify_data(dir)?;
        if let Some(steps) = config.steps {
            cfg.steps = steps;
        }
        if let Some(method) = config.method {
            cfg.method = method;
        }
        cfg.validate()?;
        Ok((cfg, Some(data)))
    }
}

/// The step method named on the command line.
fn parse_method(s: &str) -> std::result::Result<Method, String> {
    match s {
        "auto" => Ok(Method::Auto),
        "direct" => Ok(Method::Direct),
        "span" => Ok(Method::Span),
        _ => Err(format!("`{s}` is not a method (auto, direct, span)")),
    }
}

/// The judge's settings, shared by `compare` and `saturation`.
#[derive(Args, Debug)]
struct JudgeArgs {
    /// Precision of the truth twin in bits.
    #[arg(long, value_name = "BITS", default_value_t = crate::arith::DEFAULT_PREC)]
    prec: u32,
    /// Relative error that counts as a failure.
    #[arg(long, value_name = "X", default_value_t = 1e-8)]
    tol: f64,
}

/// Output options shared by the trainers (`run`, `twin`).
#[derive(Args, Debug)]
struct RunOutput {
    /// Print exactly one JSON object (the summary) on stdout.
    #[arg(long)]
    json: bool,
    /// Write the full trajectory (trajectory.json, trajectory.csv) into DIR.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Publish `files` into `out` (the set prepared before the work, and the path given),
/// then print `report`: one JSON object with `json`, else its readable text and, once
/// published, where it was written (`written`: the file names). The report is printed
/// whether or not it could be written, so the result is not lost; a failed publication
/// is the returned error.
fn print_and_publish<R: serde::Serialize + std::fmt::Display>(
    report: &R,
    files: Vec<(String, Vec<u8>)>,
    out: Option<(&OutputDir, &Path)>,
    json: bool,
    written: &str,
) -> Result<()> {
    let published = out.map(|(dir, _)| dir.publish(&files));
    if json {
        println!(
            "{}",
            serde_json::to_string(report).expect("report serialises")
        );
    } else {
        print!("{report}");
        if let (Some((_, path)), Some(Ok(()))) = (out, &published) {
            println!("\n  written: {}/{written}", path.display());
        }
    }
    match published {
        Some(Err(e)) => Err(Error::NotPublished {
            source: Box::new(e),
        }),
        _ => Ok(()),
    }
}

/// The trajectory set of `--out DIR`, checked before any work.
fn trajectory_dir(out: Option<&Path>) -> Result<Option<OutputDir>> {
    out.map(|dir| OutputDir::prepare(dir, SetKind::Trajectory))
        .transpose()
}

/// Publish a finished run's trajectory (into `out`, checked before the work) and print
/// its summary (JSON or table).
fn report_trajectory(traj: &Trajectory, out: Option<&OutputDir>, json: bool) -> Result<()> {
    // the summary is printed whether or not the files could be written: a failure to
    // publish after the work (a full disk) must not lose the result
    let published = out.map(|dir| dir.publish(&traj.files()));
    let summary = Summary::of(traj);
    if json {
        println!(
            "{}",
            serde_json::to_string(&summary).expect("summary serialises")
        );
    } else {
        print!(
            "{}",
            crate::report::run::RunReport {
                summary: &summary,
                trainer: &traj.trainer
            }
        );
        if let (Some(dir), Some(Ok(()))) = (out, &published) {
            println!(
                "trajectory written to {}",
                dir.path().join("trajectory.json").display()
            );
        }
    }
    match published {
        Some(Err(e)) => Err(Error::NotPublished {
            source: Box::new(e),
        }),
        _ => Ok(()),
    }
}

/// Flush stdout, then report the wall time (and time per step) on stderr.
fn finish(t0: Instant, steps: Option<u64>) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().flush() {
        remember_stdout_error(e);
    }
    let secs = t0.elapsed().as_secs_f64();
    match steps {
        Some(0) => eprintln!("wall time {secs:.2} s (no step run: set-up and output)"),
        Some(n) => eprintln!(
            "wall time {secs:.2} s for {n} step{} ({:.1} us per step on average, set-up and output included)",
            if n == 1 { "" } else { "s" },
            1e6 * secs / n.max(1) as f64
        ),
        None => eprintln!("wall time {secs:.2} s"),
    }
}

/// A progress bar over `total` units (steps, runs), hidden with `quiet`; its time left
/// from measured throughput only ([`MeasuredEta`]).
fn progress_bar(total: u64, quiet: bool, unit: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {unit} ({{left}})"
        ))
        .expect("valid template")
        .with_key("left", MeasuredEta::default())
        .progress_chars("=> "),
    );
    bar
}

/// Units a progress bar must have measured before it shows a time left.
const ETA_MIN_UNITS: u64 = 3;
/// Seconds a progress bar must have measured before it shows a time left.
const ETA_MIN_SECS: f64 = 1.0;

/// Seconds left to reach `len` at the throughput measured from `base` to `now` (each a
/// position and the seconds elapsed then); `None` until at least [`ETA_MIN_UNITS`] units
/// over at least [`ETA_MIN_SECS`] seconds were measured (indicatif's own estimate
/// before any step read "2h left" for an 18 s `compare`).
fn eta_secs(base: (u64, f64), now: (u64, f64), len: u64) -> Option<f64> {
    let done = now.0.checked_sub(base.0)?;
    let secs = now.1 - base.1;
    if done < ETA_MIN_UNITS || secs < ETA_MIN_SECS {
        return None;
    }
    Some(secs / done as f64 * len.saturating_sub(now.0) as f64)
}

/// The `{left}` key of [`progress_bar`]: the time left from the throughput measured
/// since the first position past the start (a resumed run's first position is its
/// resume step, not a burst of steps), [`eta_secs`]; "estimating time left" before.
#[derive(Debug, Clone, Default)]
struct MeasuredEta {
    /// The first position > 0 seen and the seconds elapsed then.
    base: Option<(u64, f64)>,
}

impl indicatif::style::ProgressTracker for MeasuredEta {
    fn clone_box(&self) -> Box<dyn indicatif::style::ProgressTracker> {
        Box::new(self.clone())
    }

    fn tick(&mut self, state: &indicatif::ProgressState, _: std::time::Instant) {
        if self.base.is_none() && state.pos() > 0 {
            self.base = Some((state.pos(), state.elapsed().as_secs_f64()));
        }
    }

    fn reset(&mut self, _: &indicatif::ProgressState, _: std::time::Instant) {
        self.base = None;
    }

    fn write(&self, state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write) {
        let now = (state.pos(), state.elapsed().as_secs_f64());
        let left = self
            .base
            .and_then(|base| eta_secs(base, now, state.len().unwrap_or(0)));
        let _ = match left {
            Some(s) => write!(
                w,
                "{:#} left",
                indicatif::HumanDuration(std::time::Duration::from_secs_f64(s))
            ),
            None => write!(w, "estimating time left"),
        };
    }
}

/// Print a report: one JSON object with `json`, else its readable table.
fn print_report<T: serde::Serialize + std::fmt::Display>(report: &T, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string(report).expect("reports serialise")
        );
    } else {
        print!("{report}");
    }
}

/// A one-file JSON report's `--out FILE` (`svm`, `compare`): checked before any work:
/// absent, or a regular file that is already a report of this command (a JSON object
/// holding every key of `keys`), never a directory or link
/// (`io::files::check_output_file`). Any other file is refused, not replaced: a config,
/// a data set's member or a trajectory given as `--out` by mistake stays as it was.
fn check_report_file(out: Option<&Path>, command: &str, keys: &[&str]) -> Result<()> {
    let Some(out) = out else {
        return Ok(());
    };
    if std::fs::symlink_metadata(out).is_ok_and(|m| m.is_file()) {
        let report = crate::io::files::read_text(out, crate::io::files::SMALL_INPUT)
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok());
        let is_report = report
            .as_ref()
            .and_then(serde_json::Value::as_object)
            .is_some_and(|o| keys.iter().all(|k| o.contains_key(*k)));
        if !is_report {
            return Err(Error::path(
                out,
                format!(
                    "exists and is not a `{command} --json` report (no JSON object with \
                     {}): --out replaces only an earlier report; remove the file or \
                     choose another path",
                    keys.iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    crate::io::files::check_output_file(out)
}

/// Write `report` as pretty JSON to `out` atomically (`io::files::write_atomic`; a
/// reader sees the old file or the new one): `None` without `--out`. The caller prints
/// the report whether or not it was written (the result is not lost) and then turns a
/// failed write into its error with [`report_file_written`].
fn write_report_file<R: serde::Serialize>(out: Option<&Path>, report: &R) -> Option<Result<()>> {
    out.map(|out| {
        let mut bytes = serde_json::to_vec_pretty(report).expect("reports serialise");
        bytes.push(b'\n');
        crate::io::files::write_atomic(out, &bytes)
    })
}

/// A failed write of [`write_report_file`] as the command's error (`NotPublished`,
/// exit code 3).
fn report_file_written(written: Option<Result<()>>) -> Result<()> {
    match written {
        Some(Err(e)) => Err(Error::NotPublished {
            source: Box::new(e),
        }),
        _ => Ok(()),
    }
}

/// The text of a small input file (config, claims or grid TOML): a regular file of at
/// most `io::files::SMALL_INPUT` bytes (`io::files::read_text`).
fn read_text(path: &Path) -> Result<String> {
    crate::io::files::read_text(path, crate::io::files::SMALL_INPUT)
}

/// The text of a large input file (a trajectory or a report): a regular file of at most
/// `io::files::LARGE_INPUT` bytes.
fn read_large(path: &Path) -> Result<String> {
    crate::io::files::read_text(path, crate::io::files::LARGE_INPUT)
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    /// The progress bar's time left is from measured throughput only: none before
    /// [`super::ETA_MIN_UNITS`] units over [`super::ETA_MIN_SECS`] seconds were measured
    /// (at step 0, after 2 steps, after 10 steps in 0.5 s), then the rate measured from
    /// the first position (a resume step is not counted as work): 10 steps in 2 s with
    /// 90 left is 18 s, from a resume at step 500 the same.
    #[test]
    fn eta_is_measured() {
        use super::eta_secs;
        assert_eq!(eta_secs((1, 0.0), (1, 0.0), 100), None);
        assert_eq!(eta_secs((1, 0.0), (3, 5.0), 100), None);
        assert_eq!(eta_secs((1, 0.0), (11, 0.5), 100), None);
        assert_eq!(eta_secs((0, 0.0), (10, 2.0), 100), Some(18.0));
        assert_eq!(eta_secs((500, 1.0), (510, 3.0), 600), Some(18.0));
        assert_eq!(eta_secs((5, 0.0), (105, 1.0), 100), Some(0.0));
        assert_eq!(eta_secs((5, 0.0), (4, 9.0), 100), None);
    }

    /// Valid values for a flag or argument, by its value name: every form the README
    /// documents (a flag whose value name is missing here fails the test below).
    fn samples(value_name: &str) -> Option<&'static [&'static str]> {
        Some(match value_name {
            "FILE" => &["x.toml"],
            "NAME" => &["balanced"],
            "S" | "I" => &["0"],
            "N" | "K" => &["3"],
            "auto|direct|span" => &["auto", "direct", "span"],
            "BITS" => &["128", "53", "256"],
            "BITS|auto" => &["128", "auto"],
            "N|all" => &["3", "all"],
            "a..b|s1,s2" => &["0..2", "0,3"],
            "f64|f32" => &["f64", "f32"],
            "X" => &["1e-8"],
            "STEPS" => &["3"],
            "DIR" => &["out"],
            "SEEDS" => &["0..4", "0,3,7", "5"],
            "ETAS" => &["0.2", "0.7"],
            "KEY=VALUES" => &["d=250:5000:1250", "mu_norm=5,10"],
            "K/N" => &["1/3"],
            "FIG.svg|png" => &["a.svg", "a.png"],
            "EXT" => &["ext.json"],
            "A" | "B" | "INPUT" | "MORE" => &["t.json"],
            "optimal|theorem|FILE" => &["optimal", "theorem", "pattern.json"],
            _ => return None,
        })
    }

    /// Every flag and argument of every command parses with each documented form of
    /// its value, and clap's definitions match how they are read (a value parser that
    /// returns a Vec made clap see many values: `grid --seeds` panicked, exit 101, for
    /// every list). Catches a new flag without a sample too.
    #[test]
    fn every_flag_of_every_command_parses() {
        let cli = Cli::command();
        cli.clone().debug_assert();
        let mut commands = vec![(vec!["tokensel".to_string()], &cli)];
        let mut checked = 0;
        while let Some((prefix, cmd)) = commands.pop() {
            for sub in cmd.get_subcommands() {
                let mut path = prefix.clone();
                path.push(sub.get_name().to_string());
                commands.push((path.clone(), sub));
                let value = |arg: &clap::Arg| -> Vec<String> {
                    let name = arg
                        .get_value_names()
                        .and_then(|v| v.first())
                        .map_or_else(|| arg.get_id().as_str().to_uppercase(), |n| n.to_string());
                    let one = samples(&name).unwrap_or_else(|| {
                        panic!("{path:?} {}: no sample for `{name}`", arg.get_id())
                    });
                    let mut forms: Vec<String> = one.iter().map(|s| s.to_string()).collect();
                    if arg.get_value_delimiter().is_some() {
                        // a list: all samples at once
                        forms.push(one.join(","));
                    }
                    forms
                };
                let args: Vec<&clap::Arg> = sub
                    .get_arguments()
                    .filter(|a| !["help", "version"].contains(&a.get_id().as_str()))
                    .collect();
                // the required ones, with their first sample
                let mut base = path.clone();
                for a in args.iter().filter(|a| a.is_required_set()) {
                    if let Some(long) = a.get_long() {
                        base.push(format!("--{long}"));
                    }
                    base.push(value(a)[0].clone());
                }
                let has_subcommands = sub.get_subcommands().next().is_some();
                for a in &args {
                    let forms: Vec<Vec<String>> =
                        match (a.get_long(), a.get_action().takes_values()) {
                            _ if a.is_required_set() => vec![vec![]],
                            (Some(long), false) => vec![vec![format!("--{long}")]],
                            (Some(long), true) => value(a)
                                .into_iter()
                                .map(|v| vec![format!("--{long}"), v])
                                .collect(),
                            (None, _) => value(a).into_iter().map(|v| vec![v]).collect(),
                        };
                    for form in forms {
                        let mut line = base.clone();
                        line.extend(form.clone());
                        let parsed = std::panic::catch_unwind(|| Cli::try_parse_from(&line));
                        match parsed {
                            Ok(Ok(_)) => checked += 1,
                            Ok(Err(e)) if has_subcommands && a.is_positional() => {
                                // a parent's positional would be read as a subcommand
                                let _ = e;
                            }
                            Ok(Err(e)) => panic!("{line:?}: {e}"),
                            Err(_) => panic!("{line:?}: clap panicked"),
                        }
                    }
                }
            }
        }
        assert!(checked > 60, "{checked} flag forms parsed");
    }
}
