//! `tokensel grid` and `tokensel grid merge`: grids of runs over config values and seeds.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand};

use super::{EXIT_FAILED, EXIT_OK, parse_method, progress_bar, read_text};
use crate::config::Method;
use crate::error::Result;
use crate::experiments::grid::{self, Request, Spec};
use crate::io::publish::OutputDir;
use crate::seeds::SeedList;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(super) struct GridArgs {
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
    /// Seeds: a range a..b (b excluded) or a list s1,s2,... (each at most 2^63 - 1, at
    /// most 1000 of them).
    #[arg(long, value_name = "SEEDS")]
    seeds: Option<SeedList>,
    /// Override the number of steps of every cell.
    #[arg(long, value_name = "N")]
    steps: Option<u64>,
    /// Override the step method of every cell.
    #[arg(long, value_name = "auto|direct|span", value_parser = parse_method)]
    method: Option<Method>,
    /// Run only shard K of N (1 <= K <= N): every N-th cell from the K-th; merge later
    /// with `grid merge DIR`.
    #[arg(long, value_name = "K/N", value_parser = grid::parse_shard)]
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
    /// Merge a grid directory's cell files into DIR/merged/: grid.csv, summary.csv,
    /// summary.json and the heat maps, published as one set (byte-identical however the
    /// cells were sharded); exit 1 while runs are missing.
    Merge {
        /// The grid directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// Print the summary as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn grid(args: &GridArgs) -> Result<i32> {
    if let Some(GridAction::Merge { dir, json }) = &args.action {
        return merge(dir, None, *json);
    }
    let dir = args.out.as_deref().expect("clap requires --out");
    let grid_text = args.grid.as_deref().map(read_text).transpose()?;
    let config_text = args.config.as_deref().map(read_text).transpose()?;
    let spec = Spec::build(&Request {
        grid: grid_text.as_deref().zip(args.grid.as_deref()),
        preset: args.preset.as_deref(),
        config: config_text.as_deref().zip(args.config.as_deref()),
        set: &args.set,
        seeds: args.seeds.as_ref(),
        steps: args.steps,
        method: args.method,
    })?;
    let cells = spec.cells()?;
    spec.open_dir(dir)?;
    let merged = match args.shard {
        Some(_) => None,
        None => Some(grid::merged_dir(dir)?),
    };
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
        None => merge(dir, merged, args.json),
    }
}

/// Merge `dir` into `merged` (checked before any work), or into `dir/merged`.
fn merge(dir: &Path, merged: Option<OutputDir>, json: bool) -> Result<i32> {
    let out = match merged {
        Some(out) => out,
        None => grid::merged_dir(dir)?,
    };
    let summary = grid::merge(dir, &out)?;
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
            out.path().display()
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
