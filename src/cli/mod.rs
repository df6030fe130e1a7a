//! The `tokensel` command line: one file per command (it parses its flags, calls a
//! layer below, prints, and returns an exit code); this file holds the command tree,
//! the exit codes and what several commands share (where a config comes from, output
//! options, progress bars, printing a report).
//!
//! Exit codes (README "Exit codes"): 0 success; 1 a claim failed or two trajectories
//! differ; 2 bad input (unknown flag, bad config value, unreadable, garbage or directory
//! input, unusable output path), found before any work; 3 a run stopped (a non-finite
//! value) or was refused (a size over a limit). Commands return their code; nothing
//! here calls `process::exit` (but the hidden `--stop-after` crash simulation).

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::config::{Config, Method, Preset};
use crate::error::{Error, Result};
use crate::io::trajectory::{Summary, Trajectory};

mod check;
mod compare;
mod config;
mod cost;
mod data;
mod diff;
mod grid;
mod judge;
mod plot;
mod run;
mod saturation;
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
    /// Sweep the score gap on one sequence: where does each f64 formulation break?
    Saturation(saturation::SaturationArgs),
    /// Train at several label-noise rates and seeds; CSV, JSON and an SVG plot.
    Sweep(sweep::SweepArgs),
    /// Check a claims file: exit 0 when every claim holds, 1 when one fails, 2 on a bad file.
    Check(check::CheckArgs),
    /// Compare two saved trajectories; exit 0 when they agree within --rtol, 1 if not.
    Diff(diff::DiffArgs),
    /// Draw a trajectory (attention per group) or a compare report (error), SVG or PNG.
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

/// Run the command line with the process arguments; returns the exit code.
pub fn main() -> i32 {
    main_with(std::env::args_os())
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
        Command::Sweep(args) => sweep::sweep(&args),
        Command::Check(args) => check::check(&args),
        Command::Cost(args) => cost::cost(&args),
        Command::Diff(args) => diff::diff(&args),
        Command::Plot(args) => plot::plot(&args),
        Command::Saturation(args) => saturation::saturation(&args),
        Command::Config(args) => config::config(&args),
        Command::Data(args) => data::data(&args),
        Command::Judge(args) => judge::judge(&args),
        Command::Grid(args) => grid::grid(&args),
    };
    use std::io::Write;
    let _ = std::io::stdout().flush();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            exit_code(&e)
        }
    }
}

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: a claim failed, or two trajectories differ.
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
    /// Embedded preset: balanced (default; `sweep`: label-noise-sweep), large-noise,
    /// large-signal, label-noise-sweep, official-final.
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

/// Write a finished run's trajectory (with `out`) and print its summary (JSON or table).
fn report_trajectory(traj: &Trajectory, out: Option<&Path>, json: bool) -> Result<()> {
    if let Some(dir) = out {
        traj.write_to_dir(dir)?;
    }
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
        if let Some(dir) = out {
            println!(
                "trajectory written to {}",
                dir.join("trajectory.json").display()
            );
        }
    }
    Ok(())
}

/// Flush stdout, then report the wall time (and time per step) on stderr.
fn finish(t0: Instant, steps: Option<u64>) {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let secs = t0.elapsed().as_secs_f64();
    match steps {
        Some(n) => eprintln!(
            "wall time {secs:.2} s ({:.1} us per step)",
            1e6 * secs / n.max(1) as f64
        ),
        None => eprintln!("wall time {secs:.2} s"),
    }
}

/// A progress bar with ETA over `total` units (steps, runs), hidden with `quiet`.
fn progress_bar(total: u64, quiet: bool, unit: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {unit} ({{eta}} left)"
        ))
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
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

/// The text of a file (an I/O error names it).
fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}
