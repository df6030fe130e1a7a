//! `tokensel plot`: draw a trajectory, a compare report or a certificate as SVG or PNG.

use std::path::PathBuf;

use clap::Args;

use super::{EXIT_OK, read_large};
use crate::analysis::compare::Report;
use crate::error::{Error, Result};
use crate::io::files::{check_output_file, write_atomic};
use crate::io::trajectory::Trajectory;
use crate::report::plot;

#[derive(Args, Debug)]
pub(super) struct PlotArgs {
    /// A trajectory.json (from `run --out` / `twin --out`; a K-class run's in four
    /// panels: attention, test accuracy per class, top token of clean and of noisy
    /// samples), a compare report
    /// (`compare --json > report.json`) or a certificate (`certify --out DIR`: its
    /// certificate.json; drawn as bits lost against step).
    input: PathBuf,
    /// More trajectories, drawn with INPUT by --direction (one curve each).
    #[arg(value_name = "MORE")]
    more: Vec<PathBuf>,
    /// Draw the direction of INPUT (and MORE) against the attention SVM: log10(1 -
    /// corr) and the normalised margin against step, one curve per trajectory (runs
    /// with a `[direction]` section; e.g. the f64 run beside the twin).
    #[arg(long)]
    direction: bool,
    /// Output file: .svg or .png.
    #[arg(long, value_name = "FIG.svg|png")]
    out: PathBuf,
}

pub(super) fn plot(args: &PlotArgs) -> Result<i32> {
    let ext = args.out.extension().and_then(|e| e.to_str()).unwrap_or("");
    if ext != "svg" && ext != "png" {
        return Err(Error::argument("--out", "must end in .svg or .png"));
    }
    check_output_file(&args.out)?;
    if args.direction {
        return direction(args, ext);
    }
    if !args.more.is_empty() {
        return Err(Error::argument(
            "MORE",
            "more than one input is drawn only with --direction",
        ));
    }
    let text = read_large(&args.input)?;
    // a file that names the certificate format is read as one, with its own errors
    if names_format(&text, crate::analysis::certify::FORMAT) {
        let c = crate::analysis::certify::Certificate::from_json(&text, &args.input)?;
        let steps = c.checkpoints.iter().map(|k| k.step);
        drawable(steps, c.config.steps, "certificate", &args.input)?;
        return draw(plot::radius_chart(&c).to_svg(), &args.out, ext);
    }
    if names_format(&text, "tokensel-certificate/") {
        // another version of the certificate format
        crate::analysis::certify::Certificate::from_json(&text, &args.input)?;
    }
    let svg = match Trajectory::from_json(&text, &args.input) {
        Ok(t) => {
            drawable_trajectory(&t, &args.input)?;
            plot::trajectory_svg(&t)
        }
        Err(first) => match Report::from_json(&text, &args.input) {
            Ok(r) => plot::error_chart(&r).to_svg(),
            // a report whose checks failed says why
            Err(e) if serde_json::from_str::<Report>(&text).is_ok() => return Err(e),
            Err(_) => return Err(other_output(&text, &args.input).unwrap_or(first)),
        },
    };
    draw(svg, &args.out, ext)
}

/// A trajectory or a certificate (`what`) has something to draw: a checkpoint (of
/// `steps`) after step 0 (the charts are against step on a log axis, which step 0 is
/// not on). A run of 0 steps (`run_steps`), or one stopped at step 0, is refused with
/// that reason rather than drawn as an empty chart.
fn drawable(
    mut steps: impl Iterator<Item = u64>,
    run_steps: u64,
    what: &str,
    path: &std::path::Path,
) -> Result<()> {
    if steps.any(|s| s > 0) {
        return Ok(());
    }
    Err(Error::path(
        path,
        format!(
            "the {what} holds only step 0 (its run has {run_steps} step{}): plot draws \
             against step on a log axis, where step 0 has no place, so there is nothing to \
             draw",
            if run_steps == 1 { "" } else { "s" }
        ),
    ))
}

/// [`drawable`] for a trajectory.
fn drawable_trajectory(t: &Trajectory, path: &std::path::Path) -> Result<()> {
    let steps = t.checkpoints.iter().map(|k| k.step);
    drawable(steps, t.config.steps, "trajectory", path)
}

/// Where `text` is the JSON output of a command whose output plot does not draw (a
/// judge report), the error that says so (exit 2); `None` for anything else (the
/// trajectory reader's error then stands).
fn other_output(text: &str, path: &std::path::Path) -> Option<Error> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let o = v.as_object()?;
    let judge = [
        "envelope_factor",
        "diagnosis",
        "within_tolerance",
        "candidates",
    ]
    .iter()
    .all(|k| o.contains_key(*k));
    judge.then(|| {
        Error::path(
            path,
            "a judge report (`tokensel judge --json`): judge reports are not plottable; \
             plot draws a trajectory (run --out, twin --out), a compare report (compare \
             --json) or a certificate (certify --out)",
        )
    })
}

/// Most trajectories one direction figure draws.
const MAX_DIRECTION_INPUTS: usize = 8;

/// Read a trajectory for a command that takes trajectories only (`takes`: what it
/// does with them, for the message); a certificate (or another output that names its
/// format) is refused as what it is.
pub(super) fn trajectory_only(path: &std::path::Path, takes: &str) -> Result<Trajectory> {
    let text = read_large(path)?;
    if names_format(&text, "tokensel-certificate/") {
        return Err(Error::Parse {
            what: "trajectory",
            path: path.to_path_buf(),
            message: format!(
                "this is a certificate (`tokensel certify`), not a trajectory: {takes} (the \
                 trajectory.json of `tokensel run --out` or `tokensel twin --out`)"
            ),
        });
    }
    Trajectory::from_json(&text, path)
}

/// `--direction`: every input a trajectory with direction records.
fn direction(args: &PlotArgs, ext: &str) -> Result<i32> {
    let inputs: Vec<&PathBuf> = std::iter::once(&args.input).chain(&args.more).collect();
    if inputs.len() > MAX_DIRECTION_INPUTS {
        return Err(Error::argument(
            "MORE",
            format!(
                "{} trajectories given; a direction figure draws at most {MAX_DIRECTION_INPUTS}",
                inputs.len()
            ),
        ));
    }
    let mut ts = Vec::with_capacity(inputs.len());
    for path in inputs {
        let t = trajectory_only(path, "`tokensel plot --direction` draws trajectories")?;
        if t.direction.is_none() {
            return Err(Error::argument(
                "--direction",
                format!(
                    "`{}` has no direction records (its config has no [direction] section)",
                    path.display()
                ),
            ));
        }
        drawable_trajectory(&t, path)?;
        ts.push(t);
    }
    let fig = plot::direction_figure(&ts).expect("every input has direction records");
    draw(fig.to_svg(), &args.out, ext)
}

/// True when the JSON object `text` has a string `format` that starts with `prefix`.
pub(super) fn names_format(text: &str, prefix: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Head {
        format: Option<serde_json::Value>,
    }
    serde_json::from_str::<Head>(text)
        .ok()
        .and_then(|h| h.format)
        .and_then(|f| f.as_str().map(|f| f.starts_with(prefix)))
        .unwrap_or(false)
}

/// Write the SVG document `svg` to `out` as SVG or PNG (`ext`), atomically.
fn draw(svg: String, out: &std::path::Path, ext: &str) -> Result<i32> {
    let bytes = if ext == "png" {
        plot::svg_to_png(&svg).map_err(|e| Error::Io {
            path: out.to_path_buf(),
            source: std::io::Error::other(e),
        })?
    } else {
        svg.into_bytes()
    };
    write_atomic(out, &bytes)?;
    println!("wrote {}", out.display());
    Ok(EXIT_OK)
}
