//! `grid_cells`, `run_cell`, `grid_merge`: `tokensel grid` one cell at a time, for a
//! Python pool (joblib, submitit, Ray). The CLI's own code runs in process: the grid is
//! built by `Spec::build` (every cell validated before any work), a cell's file is
//! written by `grid::run_cells` (the bytes and the atomic publish of `tokensel grid`,
//! an existing file skipped), and the merge is `grid::merge` into `DIR/merged/`.

use std::path::{Path, PathBuf};

use pyo3::prelude::*;

use tokensel::prelude::Error;
use tokensel::prelude::experiments::grid::{self, Outcome, Request, Spec};
use tokensel::prelude::formats::files::{SMALL_INPUT, read_text};

use crate::errors::lib;

/// Where a grid comes from: exactly one of a grid TOML's text, a grid TOML file, or a
/// preset name (a grid preset, or a config preset as a one-cell grid, as `--preset`).
fn build(toml: Option<&str>, path: Option<&Path>, preset: Option<&str>) -> tokensel::Result<Spec> {
    match (toml, path, preset) {
        (Some(text), None, None) => Spec::build(&Request {
            grid: Some((text, Path::new("<grid toml>"))),
            ..Request::default()
        }),
        (None, Some(path), None) => {
            let text = read_text(path, SMALL_INPUT)?;
            Spec::build(&Request {
                grid: Some((&text, path)),
                ..Request::default()
            })
        }
        (None, None, Some(name)) => Spec::build(&Request {
            preset: Some(name),
            ..Request::default()
        }),
        _ => Err(Error::argument(
            "spec",
            "give exactly one of a grid TOML's text, a grid TOML file or a preset name",
        )),
    }
}

/// One cell as Python sees it: (index, [(axis key, value)], seed, hash).
type CellTuple = (usize, Vec<(String, f64)>, u64, String);

/// Every cell of the grid, in grid order (as `tokensel grid` runs and shards them):
/// index, axis values by key, seed and the hash that names its file `cells/HASH.json`.
#[pyfunction]
#[pyo3(signature = (toml=None, path=None, preset=None))]
pub(crate) fn grid_cells(
    py: Python<'_>,
    toml: Option<String>,
    path: Option<PathBuf>,
    preset: Option<String>,
) -> PyResult<Vec<CellTuple>> {
    lib(py.detach(|| {
        let spec = build(toml.as_deref(), path.as_deref(), preset.as_deref())?;
        let cells = spec.cells()?;
        Ok(cells
            .into_iter()
            .map(|c| {
                let point = spec
                    .axes
                    .iter()
                    .map(|a| a.key.clone())
                    .zip(c.point)
                    .collect();
                (c.index, point, c.seed, c.hash)
            })
            .collect())
    }))
}

/// Run cell `index` of the grid into `out_dir` (the grid directory of `tokensel grid
/// --out`: `grid.json` written or checked first, as a shard does), unless its file is
/// there already. `hash`, when given, must be the cell's (a cell of another grid is
/// refused before any work). Returns (ran, the cell file's path, the error that stopped the run or
/// `None`).
#[pyfunction]
#[pyo3(signature = (index, hash, out_dir, toml=None, path=None, preset=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_cell(
    py: Python<'_>,
    index: usize,
    hash: Option<String>,
    out_dir: PathBuf,
    toml: Option<String>,
    path: Option<PathBuf>,
    preset: Option<String>,
) -> PyResult<(bool, String, Option<String>)> {
    let out = lib(py.detach(|| {
        let spec = build(toml.as_deref(), path.as_deref(), preset.as_deref())?;
        let cells = spec.cells()?;
        let cell = cells.get(index).ok_or_else(|| Error::Mismatch {
            what: format!("cell {index}"),
            reason: format!(
                "this grid has {} cells (indices 0 to {}): the cell comes from another grid",
                cells.len(),
                cells.len().saturating_sub(1)
            ),
        })?;
        if let Some(hash) = hash.filter(|h| *h != cell.hash) {
            return Err(Error::Mismatch {
                what: format!("cell {index}"),
                reason: format!(
                    "this grid's cell {index} is {}, not {hash}: the cell comes from another grid",
                    cell.hash
                ),
            });
        }
        spec.open_dir(&out_dir)?;
        let ran = grid::run_cells(&out_dir, std::slice::from_ref(cell), &|_| {})?;
        let file = grid::read_cell(&out_dir, cell)?.ok_or_else(|| Error::Io {
            path: out_dir.join("cells"),
            source: std::io::Error::other("the cell's file is missing right after its run"),
        })?;
        let failed = match file.outcome {
            Outcome::Ok(_) => None,
            Outcome::Failed(e) => Some(e),
        };
        let path = grid::cell_path(&out_dir, cell);
        Ok((ran == 1, path.display().to_string(), failed))
    }))?;
    py.check_signals()?;
    Ok(out)
}

/// `tokensel grid merge DIR --json`: merge the cell files of `out_dir` into
/// `out_dir/merged/` (the CLI's bytes, whatever ran which cell); the summary as JSON
/// text and as the text `grid merge` prints.
#[pyfunction]
pub(crate) fn grid_merge(py: Python<'_>, out_dir: PathBuf) -> PyResult<(String, String)> {
    lib(py.detach(|| {
        let out = grid::merged_dir(&out_dir)?;
        let summary = grid::merge(&out_dir, &out)?;
        Ok((
            serde_json::to_string(&summary).expect("summary serialises"),
            summary.to_string(),
        ))
    }))
}
