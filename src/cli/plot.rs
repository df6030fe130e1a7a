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
    /// More trajectories, overlaid with INPUT (one line each, in its own colour and dash
    /// pattern, labelled by its path and the config keys that differ); all of one model.
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
    let inputs: Vec<&std::path::Path> = std::iter::once(&args.input)
        .chain(&args.more)
        .map(PathBuf::as_path)
        .collect();
    crate::io::files::check_not_an_input(&args.out, &inputs)?;
    if args.direction {
        return direction(args, ext);
    }
    if !args.more.is_empty() {
        return overlay(args, ext);
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
    let ts = trajectories(args, "`tokensel plot --direction` draws trajectories")?;
    if let Some((path, _)) = ts.iter().find(|(_, t)| t.direction.is_none()) {
        return Err(Error::argument(
            "--direction",
            format!(
                "`{}` has no direction records (its config has no [direction] section)",
                path.display()
            ),
        ));
    }
    let ts: Vec<Trajectory> = ts.into_iter().map(|(_, t)| t).collect();
    let fig = plot::direction_figure(&ts).expect("every input has direction records");
    draw(fig.to_svg(), &args.out, ext)
}

/// The inputs of a figure that draws several trajectories (INPUT and MORE; at most
/// [`MAX_DIRECTION_INPUTS`]), each read as a trajectory (a compare report, a
/// certificate or another output refused as what it is) of one model (the first's).
fn trajectories(args: &PlotArgs, takes: &str) -> Result<Vec<(PathBuf, Trajectory)>> {
    let inputs: Vec<&PathBuf> = std::iter::once(&args.input).chain(&args.more).collect();
    if inputs.len() > MAX_DIRECTION_INPUTS {
        return Err(Error::argument(
            "MORE",
            format!(
                "{} trajectories given; a figure overlays at most {MAX_DIRECTION_INPUTS}",
                inputs.len()
            ),
        ));
    }
    let mut ts: Vec<(PathBuf, Trajectory)> = Vec::with_capacity(inputs.len());
    for path in inputs {
        let t = match trajectory_only(path, takes) {
            Ok(t) => t,
            Err(e) => {
                let text = read_large(path)?;
                if serde_json::from_str::<Report>(&text).is_ok() {
                    return Err(Error::path(
                        path,
                        format!(
                            "a compare report (`tokensel compare --json`), not a trajectory: \
                             {takes} (a compare report is drawn alone: `tokensel plot \
                             REPORT.json --out FIG.svg`)"
                        ),
                    ));
                }
                return Err(other_output(&text, path).unwrap_or(e));
            }
        };
        if let Some((first, t0)) = ts.first() {
            let who = format!("`{}` and `{}`", first.display(), path.display());
            super::diff::same_model(t0, &t, &who, "drawn in one figure")?;
        }
        drawable_trajectory(&t, path)?;
        ts.push((path.clone(), t));
    }
    Ok(ts)
}

/// Two or more trajectories overlaid (`report::plot::overlay_figure`).
fn overlay(args: &PlotArgs, ext: &str) -> Result<i32> {
    let ts = trajectories(args, "`tokensel plot A B ...` overlays trajectories")?;
    let paths: Vec<&std::path::Path> = ts.iter().map(|(p, _)| p.as_path()).collect();
    let trajs: Vec<Trajectory> = ts.iter().map(|(_, t)| t.clone()).collect();
    let fig = plot::overlay_figure(&trajs, &overlay_labels(&paths, &trajs));
    draw(fig.to_svg(), &args.out, ext)
}

/// Legend labels of overlaid trajectories: the shortest ending of each path that tells
/// them apart (`a/trajectory.json`, `b/trajectory.json`), and on a second line the
/// config keys whose values differ between them (at most two, `key = value`; more are
/// counted).
fn overlay_labels(paths: &[&std::path::Path], ts: &[Trajectory]) -> Vec<String> {
    let parts: Vec<Vec<String>> = paths
        .iter()
        .map(|p| {
            p.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect()
        })
        .collect();
    let ending = |k: usize, n: usize| {
        let p = &parts[k];
        p[p.len().saturating_sub(n)..].join("/")
    };
    let longest = parts.iter().map(Vec::len).max().unwrap_or(1);
    let n = (1..=longest)
        .find(|&n| {
            let names: std::collections::BTreeSet<String> =
                (0..parts.len()).map(|k| ending(k, n)).collect();
            names.len() == parts.len()
        })
        .unwrap_or(longest);
    let mut keys: Vec<String> = Vec::new();
    for t in &ts[1..] {
        for c in crate::analysis::diff::config_changes(&ts[0].config, &t.config) {
            if !keys.contains(&c.key) {
                keys.push(c.key);
            }
        }
    }
    (0..ts.len())
        .map(|k| {
            let table: toml::Table =
                toml::from_str(&ts[k].config.to_toml()).expect("a config is a TOML table");
            let mut shown: Vec<String> = keys
                .iter()
                .take(2)
                .map(|key| {
                    let value = key
                        .split('.')
                        .try_fold(&toml::Value::Table(table.clone()), |v, part| v.get(part))
                        .map_or("absent".to_string(), |v| v.to_string());
                    format!("{key} = {value}")
                })
                .collect();
            if keys.len() > 2 {
                shown.push(format!("+{} more", keys.len() - 2));
            }
            match shown.is_empty() {
                true => ending(k, n),
                false => format!("{}\n{}", ending(k, n), shown.join(", ")),
            }
        })
        .collect()
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
