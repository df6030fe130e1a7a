//! The `tokensel` command line.
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

use crate::arith::{Arith, F64, Mpfr};
use crate::config::{Config, Method, Preset};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::io::files::check_output_dir;
use crate::io::trajectory::{Summary, Trajectory};
use crate::train::Trainer;

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
    Run(RunArgs),
    /// Train with the MPFR twin (slow, any precision); checkpoint and resume long runs.
    Twin(TwinArgs),
    /// Run the f64 trainer and the MPFR twin step by step and report f64's error.
    Compare(CompareArgs),
    /// Sweep the score gap on one sequence: where does each f64 formulation break?
    Saturation(SaturationArgs),
    /// Train at several label-noise rates and seeds; CSV, JSON and an SVG plot.
    Sweep(SweepArgs),
    /// Check a claims file: exit 0 when every claim holds, 1 when one fails, 2 on a bad file.
    Check(CheckArgs),
    /// Compare two saved trajectories; exit 0 when they agree within --rtol, 1 if not.
    Diff(DiffArgs),
    /// Draw a trajectory (attention per group) or a compare report (error), SVG or PNG.
    Plot(PlotArgs),
    /// Measure one gradient step: f64 vs the twin at several precisions (a benchmark).
    Cost(CostArgs),
    /// Print a config (the default, a preset, or a file with overrides) as TOML.
    Config(ConfigArgs),
    /// Write a run's exact data (tokens, labels, nu, p(0), W(0)) as NPY, with a manifest.
    Data(DataArgs),
    /// Judge another implementation: replay its run in the twin on the exported data and
    /// locate and diagnose its first error (exit 0 agrees, 1 differs, 2 bad input).
    Judge(JudgeCmdArgs),
    /// Run a grid of configs over seeds (heat maps, label-noise map), sharded or whole;
    /// `grid merge DIR` reduces the cell files into tables and heat maps.
    Grid(GridArgs),
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct GridArgs {
    #[command(subcommand)]
    action: Option<GridAction>,
    /// Base config (a TOML file over the preset), for a grid built from `--set`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// A grid preset (heatmap-v1, heatmap-final, label-noise-map), or a config preset
    /// as the base of a grid built from `--set`.
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
    /// A grid TOML: `preset`, `seeds`, `steps`, `[config]` overrides, `[axes]`.
    #[arg(long, value_name = "FILE")]
    grid: Option<PathBuf>,
    /// An axis: `key=a:b:step` (inclusive) or `key=v1,v2,...`; repeatable; replaces the
    /// grid's axis of that key.
    #[arg(long = "set", value_name = "KEY=VALUES")]
    set: Vec<String>,
    /// Seeds: a range a..b (b excluded) or a list s1,s2,...
    #[arg(long, value_name = "SEEDS", value_parser = crate::experiments::grid::parse_seeds)]
    seeds: Option<Vec<u64>>,
    /// Override the number of steps of every cell.
    #[arg(long, value_name = "N")]
    steps: Option<u64>,
    /// Override the step method of every cell.
    #[arg(long, value_name = "direct|span", value_parser = parse_method)]
    method: Option<Method>,
    /// Run only shard K of N (1 <= K <= N): every N-th cell from the K-th; merge later
    /// with `grid merge DIR`.
    #[arg(long, value_name = "K/N", value_parser = crate::experiments::grid::parse_shard)]
    shard: Option<(usize, usize)>,
    /// The grid directory (grid.json, cells/, and the merged tables and plots).
    #[arg(long, value_name = "DIR", required = true)]
    out: Option<PathBuf>,
    /// Print the merged summary as one JSON object.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Subcommand, Debug)]
enum GridAction {
    /// Merge a grid directory's cell files into grid.csv, summary.csv, summary.json and
    /// the heat maps (byte-identical however the cells were sharded); exit 1 while runs
    /// are missing.
    Merge {
        /// The grid directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// Print the summary as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
struct DataArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Directory for the NPY files, config.toml and manifest.json.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

#[derive(Args, Debug)]
struct JudgeCmdArgs {
    /// The external trajectory (`.json`, or `.npz` with a `header` array): README
    /// "Check your own implementation".
    #[arg(value_name = "EXT")]
    external: PathBuf,
    /// The `tokensel data` directory the implementation ran on.
    #[arg(long, value_name = "DIR")]
    data: PathBuf,
    #[command(flatten)]
    judge: JudgeArgs,
    /// Print exactly one JSON object (the report, with every recorded step) on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct CostArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Twin precisions in bits (53 = the f64 predictor), comma separated.
    #[arg(long, value_name = "BITS", value_delimiter = ',', default_values_t = [53u32, 64, 128, 256, 512, 1024])]
    precs: Vec<u32>,
    /// Timed blocks of 20 f64 steps (median reported).
    #[arg(long, value_name = "N", default_value_t = 15)]
    reps: usize,
    /// Timed twin steps per precision (median reported).
    #[arg(long, value_name = "N", default_value_t = 3)]
    twin_reps: usize,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// The claims file (TOML, see `claims/paper.toml`).
    file: PathBuf,
    /// Print exactly one JSON array of outcomes on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct DiffArgs {
    /// First trajectory.json.
    a: PathBuf,
    /// Second trajectory.json.
    b: PathBuf,
    /// Relative deviation that counts as a divergence.
    #[arg(long, value_name = "X", default_value_t = 1e-12)]
    rtol: f64,
    /// Compare only the checkpoints both trajectories hold (different checkpoint sets
    /// are otherwise a divergence).
    #[arg(long)]
    common_only: bool,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct PlotArgs {
    /// A trajectory.json (from `run --out` / `twin --out`) or a compare report
    /// (`compare --json > report.json`).
    input: PathBuf,
    /// Output file: .svg or .png.
    #[arg(long, value_name = "FIG.svg|png")]
    out: PathBuf,
}

#[derive(Args, Debug)]
struct TwinArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Precision in bits.
    #[arg(long, value_name = "BITS", default_value_t = crate::arith::DEFAULT_PREC)]
    prec: u32,
    /// Use the 53-bit f64-predictor arithmetic instead (ignores --prec).
    #[arg(long)]
    predictor: bool,
    /// State file: saved atomically every --save-every steps.
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,
    /// Steps between state saves.
    #[arg(long, value_name = "K", default_value_t = 100)]
    save_every: u64,
    /// Continue from --state if it exists (bit-identical to an uninterrupted run).
    #[arg(long)]
    resume: bool,
    #[command(flatten)]
    output: RunOutput,
    /// Testing aid: exit abruptly (code 3) after step N, as a crash would.
    #[arg(long, hide = true, value_name = "N")]
    stop_after: Option<u64>,
}

#[derive(Args, Debug)]
struct SweepArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Label-noise rates, comma separated.
    #[arg(long, value_name = "ETAS", value_delimiter = ',', default_values_t = [0.5, 0.6, 0.65, 0.7, 0.725, 0.75, 0.8, 0.85])]
    etas: Vec<f64>,
    /// Seeds, comma separated.
    #[arg(long, value_name = "SEEDS", value_delimiter = ',', default_values_t = [0u64, 1, 2])]
    seeds: Vec<u64>,
    /// Write sweep.csv, sweep.json and sweep.svg into DIR.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
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

#[derive(Args, Debug)]
struct CompareArgs {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    judge: JudgeArgs,
    /// Skip the 53-bit f64 predictor (bit-equality check; it runs in the f64 trainer's
    /// method at MPFR speed).
    #[arg(long)]
    no_predictor: bool,
    /// The truth twin's step: span (default; the same trajectory in exact arithmetic,
    /// cost independent of d) or direct (d-space quantities compared at every step).
    #[arg(long, value_name = "direct|span", value_parser = parse_method, default_value = "span")]
    twin_method: Method,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct SaturationArgs {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    judge: JudgeArgs,
    /// Training sample whose sequence is swept.
    #[arg(long, value_name = "I", default_value_t = 0)]
    sample: usize,
    /// Number of grid points (log-spaced gaps 1..1100).
    #[arg(long, value_name = "N", default_value_t = 60)]
    points: usize,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
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
    /// Override the step method: direct (d-space) or span (Gram space, same trajectory
    /// in exact arithmetic, cost independent of d).
    #[arg(long, value_name = "direct|span", value_parser = parse_method)]
    method: Option<Method>,
}

fn parse_method(s: &str) -> std::result::Result<Method, String> {
    match s {
        "direct" => Ok(Method::Direct),
        "span" => Ok(Method::Span),
        _ => Err(format!("`{s}` is not a method (direct, span)")),
    }
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    output: RunOutput,
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
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
                    path: path.clone(),
                    source,
                })?;
                Config::from_toml_str_over_preset(&text, path, preset)?
            }
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
    let ok = |r: Result<()>| r.map(|()| EXIT_OK);
    let result = match cli.command {
        Command::Run(args) => ok(run(&args)),
        Command::Twin(args) => ok(twin(&args)),
        Command::Compare(args) => ok(compare(&args)),
        Command::Sweep(args) => ok(sweep(&args)),
        Command::Check(args) => check(&args),
        Command::Cost(args) => ok(cost(&args)),
        Command::Diff(args) => diff(&args),
        Command::Plot(args) => ok(plot(&args)),
        Command::Saturation(args) => ok(saturation(&args)),
        Command::Config(args) => ok(args.load().map(|c| print!("{}", c.to_toml()))),
        Command::Data(args) => ok(data(&args)),
        Command::Judge(args) => judge(&args),
        Command::Grid(args) => grid(&args),
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

fn run(args: &RunArgs) -> Result<()> {
    let cfg = args.config.load()?;
    crate::train::check_memory(&cfg, F64.kind(), 53, cfg.method)?;
    if let Some(dir) = &args.output.out {
        check_output_dir(dir)?;
    }
    let t0 = Instant::now();
    let data = Dataset::generate(&cfg);
    let bar = progress_bar(cfg.steps, args.output.quiet, "steps");
    let traj = Trainer::run(&cfg, &data, F64, &mut |s| bar.set_position(s))?;
    bar.finish_and_clear();
    report_trajectory(&traj, args.output.out.as_deref(), args.output.json)?;
    finish(t0, Some(cfg.steps));
    Ok(())
}

fn twin(args: &TwinArgs) -> Result<()> {
    use crate::io::state::{self, Saver, Start};
    let cfg = args.config.load()?;
    let ar = if args.predictor {
        Mpfr::predictor()
    } else {
        Mpfr::truth(args.prec)?
    };
    crate::train::check_memory(&cfg, ar.kind(), ar.prec(), cfg.method)?;
    if args.save_every == 0 {
        return Err(Error::config("save-every", "must be at least 1"));
    }
    if args.resume && args.state.is_none() {
        return Err(Error::config("resume", "needs --state FILE"));
    }
    let start = match &args.state {
        Some(path) => state::open(path, args.resume)?,
        None => Start::Fresh,
    };
    if let Some(dir) = &args.output.out {
        check_output_dir(dir)?;
    }
    let resume = match start {
        Start::Resume(st) => Some(st),
        Start::Fresh => {
            if let (Some(path), true) = (&args.state, args.resume) {
                eprintln!("no state at {}: starting from step 0", path.display());
            }
            None
        }
    };
    let t0 = Instant::now();
    let data = Dataset::generate(&cfg);
    let bar = progress_bar(cfg.steps, args.output.quiet, "steps");
    let saver = args.state.as_deref().map(|path| Saver {
        path,
        every: args.save_every,
    });
    let stop = args.stop_after;
    let mut tr = Trainer::new(&cfg, &data, ar, cfg.formulation)?;
    let traj = tr.record(resume.as_deref(), &mut |tr, rec| {
        if let Some(s) = saver.filter(|s| s.due(tr.step, cfg.steps)) {
            tr.state(rec).save(s.path)?;
        }
        bar.set_position(tr.step);
        if stop == Some(tr.step) {
            std::process::exit(3);
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    report_trajectory(&traj, args.output.out.as_deref(), args.output.json)?;
    finish(t0, None);
    Ok(())
}

fn data(args: &DataArgs) -> Result<()> {
    let cfg = args.config.load()?;
    check_output_dir(&args.out)?;
    let data = Dataset::generate(&cfg);
    let init = crate::data::Params::init(&cfg);
    let m = crate::io::export::write_data(
        &cfg,
        &data,
        init.p.view(),
        init.w.as_ref().map(|w| w.view()),
        &args.out,
    )?;
    println!(
        "wrote {} arrays, config.toml and manifest.json to {} (seed {}, W(0) {})",
        m.arrays.len(),
        args.out.display(),
        m.seed,
        m.w0
    );
    Ok(())
}

fn judge(args: &JudgeCmdArgs) -> Result<i32> {
    check_tol(args.judge.tol)?;
    let truth = Mpfr::truth(args.judge.prec)?;
    let ext = crate::io::external::External::read(&args.external)?;
    let (mut cfg, _, data) = crate::io::export::verify_data(&args.data)?;
    ext.check_against(&cfg)?;
    cfg.steps = *ext.steps.last().expect("checked: steps not empty");
    crate::train::check_memory(&cfg, truth.kind(), args.judge.prec, Method::Span)?;
    let t0 = Instant::now();
    let bar = progress_bar(cfg.steps, args.quiet, "steps");
    let opts = crate::analysis::judge::Options {
        prec: args.judge.prec,
        tol: args.judge.tol,
    };
    let report =
        crate::analysis::judge::judge(&cfg, &data, &ext, opts, &mut |s| bar.set_position(s))?;
    bar.finish_and_clear();
    print_report(&report, args.json);
    finish(t0, None);
    Ok(if report.within_tolerance {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}

/// The grid of `args`: a grid TOML, a grid preset, or a base config; then `--set`,
/// `--seeds`, `--steps`, `--method`. Every cell is validated here.
fn grid_spec(args: &GridArgs) -> Result<crate::experiments::grid::Spec> {
    use crate::experiments::grid::{Axis, GRID_FORMAT, GridPreset, Spec, parse_values};
    let grid_preset = args.preset.as_deref().and_then(GridPreset::from_name);
    let mut spec = match (&args.grid, grid_preset) {
        (Some(_), Some(_)) => {
            return Err(Error::config(
                "grid",
                "give --grid FILE or a grid --preset, not both",
            ));
        }
        (Some(path), None) if args.preset.is_none() && args.config.is_none() => {
            Spec::from_toml(&read_text(path)?, path)?
        }
        (None, Some(p)) if args.config.is_none() => Spec::from_toml(p.toml(), Path::new(p.name()))?,
        (None, None) => {
            let base = ConfigArgs {
                config: args.config.clone(),
                preset: args.preset.clone(),
                seed: None,
                steps: None,
                method: None,
            }
            .load()?;
            Spec {
                format: GRID_FORMAT.into(),
                name: "custom".into(),
                seeds: vec![base.seed],
                base,
                axes: Vec::new(),
            }
        }
        _ => {
            return Err(Error::config(
                "grid",
                "--config and a config --preset build a grid from --set; a grid TOML or grid preset carries its own base config",
            ));
        }
    };
    for text in &args.set {
        let (key, values) = text
            .split_once('=')
            .ok_or_else(|| Error::config("set", format!("`{text}` is not KEY=VALUES")))?;
        let values = parse_values(values).map_err(|m| Error::config(key.trim(), m))?;
        let axis = Axis {
            key: key.trim().to_string(),
            values,
        };
        match spec.axes.iter_mut().find(|a| a.key == axis.key) {
            Some(a) => *a = axis,
            None => spec.axes.push(axis),
        }
    }
    if let Some(seeds) = &args.seeds {
        spec.seeds = seeds.clone();
    }
    if let Some(steps) = args.steps {
        spec.base.steps = steps;
    }
    if let Some(method) = args.method {
        spec.base.method = method;
    }
    spec.base.validate()?;
    spec.cells()?;
    Ok(spec)
}

fn grid(args: &GridArgs) -> Result<i32> {
    use crate::experiments::grid;
    if let Some(GridAction::Merge { dir, json }) = &args.action {
        return grid_merge(dir, *json);
    }
    let dir = args.out.as_deref().expect("clap requires --out");
    let spec = grid_spec(args)?;
    let cells = spec.cells()?;
    check_output_dir(dir)?;
    if dir.join("grid.json").exists() && grid::Spec::read(dir)? != spec {
        return Err(Error::Mismatch {
            what: dir.join("grid.json").display().to_string(),
            reason: "the directory holds another grid (other base config, axes or seeds); use a new --out".into(),
        });
    }
    spec.write(dir)?;
    let mine = match args.shard {
        Some(s) => grid::shard(cells, s),
        None => cells,
    };
    let t0 = Instant::now();
    let bar = progress_bar(mine.len() as u64, args.quiet, "runs");
    let ran = grid::run_cells(dir, &mine, &|done| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    eprintln!(
        "ran {ran} of {} runs ({} already done) in {:.1} s",
        mine.len(),
        mine.len() - ran,
        t0.elapsed().as_secs_f64()
    );
    match args.shard {
        Some((k, n)) => {
            println!(
                "shard {k}/{n}: {} runs in {}; merge with `tokensel grid merge {}`",
                mine.len(),
                dir.join("cells").display(),
                dir.display()
            );
            Ok(EXIT_OK)
        }
        None => grid_merge(dir, args.json),
    }
}

fn grid_merge(dir: &Path, json: bool) -> Result<i32> {
    let summary = crate::experiments::grid::merge(dir)?;
    if json {
        println!(
            "{}",
            serde_json::to_string(&summary).expect("summary serialises")
        );
    } else {
        print!("{summary}");
        println!(
            "wrote grid.csv, summary.csv, summary.json{} to {}",
            if summary.axes.len() == 2 {
                ", heatmap.svg, heatmap.png"
            } else {
                ""
            },
            dir.display()
        );
    }
    if summary.runs_missing > 0 {
        eprintln!(
            "{} runs have no cell file yet: the merge is partial",
            summary.runs_missing
        );
        return Ok(EXIT_FAILED);
    }
    Ok(EXIT_OK)
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

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn load_trajectory(path: &Path) -> Result<Trajectory> {
    Trajectory::from_json(&read_text(path)?, path)
}

fn cost(args: &CostArgs) -> Result<()> {
    let cfg = args.config.load()?;
    let methods = match args.config.method {
        Some(m) => vec![m],
        None => vec![Method::Direct, Method::Span],
    };
    for &p in &args.precs {
        let ar = Mpfr::for_prec(p)?;
        for &m in &methods {
            crate::train::check_memory(&cfg, ar.kind(), p, m)?;
        }
    }
    let r = crate::experiments::cost::measure(
        &cfg,
        &args.precs,
        &methods,
        args.reps,
        args.twin_reps,
        &mut |name| eprintln!("timing {name}"),
    )?;
    print_report(&r, args.json);
    Ok(())
}

fn check(args: &CheckArgs) -> Result<i32> {
    let text = read_text(&args.file)?;
    let (file, configs) = crate::experiments::claims::ClaimsFile::parse(&text, &args.file)?;
    let t0 = Instant::now();
    let outcomes =
        crate::experiments::claims::check(&file, &configs, &args.file, &mut |k, n, name| {
            eprintln!("[{}/{n}] {name}", k + 1)
        })?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&outcomes).expect("outcomes serialise")
        );
    } else {
        print!("{}", crate::experiments::claims::Verdicts(&outcomes));
    }
    finish(t0, None);
    Ok(if outcomes.iter().any(|o| !o.pass) {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}

fn diff(args: &DiffArgs) -> Result<i32> {
    check_tol(args.rtol)?;
    let (a, b) = (load_trajectory(&args.a)?, load_trajectory(&args.b)?);
    let r = crate::analysis::diff::diff(&a, &b, args.rtol, args.common_only);
    print_report(&r, args.json);
    Ok(if r.diverged { EXIT_FAILED } else { EXIT_OK })
}

fn plot(args: &PlotArgs) -> Result<()> {
    let ext = args.out.extension().and_then(|e| e.to_str()).unwrap_or("");
    if ext != "svg" && ext != "png" {
        return Err(Error::config("out", "must end in .svg or .png"));
    }
    let out_dir = args.out.parent().filter(|p| !p.as_os_str().is_empty());
    check_output_dir(out_dir.unwrap_or(Path::new(".")))?;
    let text = read_text(&args.input)?;
    let chart = match Trajectory::from_json(&text, &args.input) {
        Ok(t) => crate::report::plot::attention_chart(&t),
        Err(first) => match serde_json::from_str::<crate::analysis::compare::Report>(&text) {
            Ok(r) => crate::report::plot::error_chart(&r),
            Err(_) => return Err(first),
        },
    };
    let svg = chart.to_svg();
    let bytes = if ext == "png" {
        crate::report::plot::svg_to_png(&svg).map_err(|e| Error::Io {
            path: args.out.clone(),
            source: std::io::Error::other(e),
        })?
    } else {
        svg.into_bytes()
    };
    crate::io::files::write_atomic(&args.out, &bytes)?;
    println!("wrote {}", args.out.display());
    Ok(())
}

fn sweep(args: &SweepArgs) -> Result<()> {
    let base = args.config.load_with_default(Preset::LabelNoiseSweep)?;
    for &eta in &args.etas {
        Config {
            eta,
            ..base.clone()
        }
        .validate()?;
    }
    if let Some(dir) = &args.out {
        check_output_dir(dir)?;
    }
    let t0 = Instant::now();
    let total = (args.etas.len() * args.seeds.len()) as u64;
    let bar = progress_bar(total, args.quiet, "runs");
    let report =
        crate::experiments::sweep::sweep(&base, &args.etas, &args.seeds, &mut |done, _| {
            bar.set_position(done as u64)
        })?;
    bar.finish_and_clear();
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
        let json = serde_json::to_string_pretty(&report).expect("report serialises");
        crate::io::files::write_atomic(&dir.join("sweep.json"), json.as_bytes())?;
        crate::io::files::write_atomic(&dir.join("sweep.csv"), report.to_csv().as_bytes())?;
        crate::io::files::write_atomic(&dir.join("sweep.svg"), report.chart().to_svg().as_bytes())?;
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("report serialises")
        );
    } else {
        print!("{report}");
        if let Some(dir) = &args.out {
            println!("\n  written: {}/sweep.{{csv,json,svg}}", dir.display());
        }
    }
    finish(t0, None);
    Ok(())
}

fn check_tol(tol: f64) -> Result<()> {
    if tol.is_finite() && tol > 0.0 {
        Ok(())
    } else {
        Err(Error::config(
            "tol",
            format!("must be finite and > 0, got {tol}"),
        ))
    }
}

fn compare(args: &CompareArgs) -> Result<()> {
    let cfg = args.config.load()?;
    check_tol(args.judge.tol)?;
    let truth = Mpfr::truth(args.judge.prec)?;
    crate::train::check_memory(&cfg, truth.kind(), args.judge.prec, args.twin_method)?;
    if !args.no_predictor {
        crate::train::check_memory(&cfg, Mpfr::predictor().kind(), 53, cfg.method)?;
    }
    let t0 = Instant::now();
    let data = Dataset::generate(&cfg);
    let bar = progress_bar(cfg.steps, args.quiet, "steps");
    let opts = crate::analysis::compare::Options {
        prec: args.judge.prec,
        tol: args.judge.tol,
        predictor: !args.no_predictor,
        twin_method: args.twin_method,
    };
    let report =
        crate::analysis::compare::compare(&cfg, &data, opts, &mut |s| bar.set_position(s))?;
    bar.finish_and_clear();
    print_report(&report, args.json);
    finish(t0, None);
    Ok(())
}

/// Largest grid of `saturation --points` (each point is one 256-bit evaluation).
const MAX_SWEEP_POINTS: usize = 10_000;

fn saturation(args: &SaturationArgs) -> Result<()> {
    let cfg = args.config.load()?;
    check_tol(args.judge.tol)?;
    if args.sample >= cfg.n_train {
        return Err(Error::config(
            "sample",
            format!("must be below n_train = {}", cfg.n_train),
        ));
    }
    if !(2..=MAX_SWEEP_POINTS).contains(&args.points) {
        return Err(Error::config(
            "points",
            format!("must lie in 2..={MAX_SWEEP_POINTS}"),
        ));
    }
    let data = Dataset::generate(&cfg);
    let grid = crate::analysis::saturation::default_grid(args.points);
    let r = crate::analysis::saturation::sweep(
        &data.train,
        args.sample,
        args.judge.prec,
        args.judge.tol,
        &grid,
    )?;
    print_report(&r, args.json);
    Ok(())
}

/// Read and validate a config file (convenience for tests and tools).
pub fn load_config(path: &Path) -> Result<Config> {
    Config::from_file(path)
}
