//! `tokensel grid`: the cartesian product of config values, each cell a full run, over
//! seeds; sharded execution with one atomic result file per cell and seed; a merge
//! whose output does not depend on how the work was split.
//!
//! A grid directory holds `grid.json` (the spec: base config, axes, seeds), `cells/`
//! (one `HASH.json` per cell and seed, HASH = the first 16 hex digits of the SHA-256 of
//! the cell's full config as TOML, each written atomically), and after a merge the set
//! `merged/`: `grid.csv` (one row per cell and seed), `summary.csv` and `summary.json`
//! (reduced over seeds), the heat maps, and the set's marker. Shards keep writing cells
//! while a merge runs: the merge reads each cell file once (a complete file, or none
//! yet) and publishes `merged/` as one set (`io::publish`), so `merged/` always holds
//! the tables of one merge, consistent with the cells that merge read; cells written
//! later appear at the next merge.

pub(crate) mod axis;
pub mod cell;
pub(crate) mod figure;
pub(crate) mod reduce;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::{Config, Preset};
use crate::data::NoiseCache;
use crate::error::{Error, Result};
use crate::io::files::{
    SMALL_INPUT, create_atomic, is_temp, read_text, remove_dead_temps, remove_dead_temps_in,
    write_atomic,
};
use crate::io::publish::{OutputDir, SetKind};
use crate::model::caps::{Capability, require};
use crate::seeds::{MAX_SEEDS, SeedList};

/// Format tag of `grid.json`.
pub const GRID_FORMAT: &str = "tokensel-grid/1";
/// Format tag of a cell file (version 2: selection shares count ties and undecided top
/// tokens apart from the groups).
pub const CELL_FORMAT: &str = "tokensel-cell/2";
/// Most cells (times seeds) one grid may hold.
pub const MAX_RUNS: usize = 100_000;

/// One varied config key and its values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Axis {
    /// Config key, dotted for nested tables (e.g. `layout.relevant`).
    pub key: String,
    /// Values, in order.
    #[serde(with = "crate::io::nonfinite::vec")]
    pub values: Vec<f64>,
}

/// A grid: the base config, the axes and the seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// Always [`GRID_FORMAT`].
    pub format: String,
    /// Name (a preset's, or `custom`).
    pub name: String,
    /// The config every cell starts from.
    pub base: Config,
    /// The axes, outermost first.
    pub axes: Vec<Axis>,
    /// Seeds, innermost.
    pub seeds: Vec<u64>,
}

/// One run of the grid: axis values and seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Position in the grid's order.
    pub index: usize,
    /// One value per axis.
    pub point: Vec<f64>,
    /// The seed.
    pub seed: u64,
    /// The full config.
    pub config: Config,
    /// File stem: hash of the config.
    pub hash: String,
}

/// A cell file: the cell's config and its metrics or its failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellFile {
    /// Always [`CELL_FORMAT`].
    pub format: String,
    /// Axis values.
    #[serde(with = "crate::io::nonfinite::vec")]
    pub point: Vec<f64>,
    /// Seed.
    pub seed: u64,
    /// The full config.
    pub config: Config,
    /// The result: metrics, or the error that stopped or refused the run.
    pub outcome: Outcome,
}

/// How a cell ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It ran to the end.
    Ok(Box<cell::Metrics>),
    /// It stopped (non-finite value) or was refused (too large).
    Failed(String),
}

/// Grid presets (SPEC 2c, 2d; proofs-notes/grid.md gives the sources).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GridPreset {
    /// First-version heat maps: d in 250..5000 step 250, ||mu|| in 5..100 step 5,
    /// balanced setting otherwise, 1000 steps.
    HeatmapV1,
    /// Final-version heat map: d = 250 + 125 i, ||mu|| = 5 + 2.5 j (39 x 39), the
    /// official-final preset (joint W and p).
    HeatmapFinal,
    /// (eta x rho) at d = 6000, ||mu|| = 100, the official label-noise script's rules.
    LabelNoiseMap,
}

impl GridPreset {
    /// Every preset.
    pub const ALL: [GridPreset; 3] = [
        GridPreset::HeatmapV1,
        GridPreset::HeatmapFinal,
        GridPreset::LabelNoiseMap,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            GridPreset::HeatmapV1 => "heatmap-v1",
            GridPreset::HeatmapFinal => "heatmap-final",
            GridPreset::LabelNoiseMap => "label-noise-map",
        }
    }

    /// The preset with this name.
    pub fn from_name(name: &str) -> Option<GridPreset> {
        GridPreset::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Its grid TOML.
    pub fn toml(self) -> &'static str {
        match self {
            GridPreset::HeatmapV1 => include_str!("../../presets/grids/heatmap_v1.toml"),
            GridPreset::HeatmapFinal => include_str!("../../presets/grids/heatmap_final.toml"),
            GridPreset::LabelNoiseMap => {
                include_str!("../../presets/grids/label_noise_map.toml")
            }
        }
    }
}

/// `cfg` with `key` (dotted) set to `value`, validated. Integer keys take only
/// integral values. A config over a size limit is returned as is: that cell is refused
/// when it runs, and the grid goes on.
pub fn with_value(cfg: &Config, key: &str, value: f64) -> Result<Config> {
    let mut root = toml::Value::try_from(cfg).expect("config serialises");
    let mut slot = &mut root;
    for part in key.split('.') {
        slot = slot
            .get_mut(part)
            .ok_or_else(|| Error::grid(format!("axes.{key}"), "not a config key"))?;
    }
    *slot = match slot {
        toml::Value::Integer(_) => {
            // 2^63 = i64::MAX as f64 itself is out of range (`as i64` would saturate)
            if value.fract() != 0.0 || value < 0.0 || value >= i64::MAX as f64 {
                return Err(Error::grid(
                    format!("axes.{key}"),
                    format!("takes a non-negative integer, got {value}"),
                ));
            }
            toml::Value::Integer(value as i64)
        }
        toml::Value::Float(_) => toml::Value::Float(value),
        _ => {
            return Err(Error::grid(
                format!("axes.{key}"),
                "is not numeric: it cannot be a grid axis",
            ));
        }
    };
    let out: Config = root
        .try_into()
        .map_err(|e: toml::de::Error| Error::grid(format!("axes.{key}"), e.to_string()))?;
    match out.validate() {
        Err(e) if !e.is_stopped_run() => Err(e),
        _ => Ok(out),
    }
}

/// A grid field's error ([`Error::InvalidGrid`]) as an error of the grid TOML `origin`
/// that holds the field; other errors as they are.
fn in_file(e: Error, origin: &Path) -> Error {
    match e {
        Error::InvalidGrid { field, reason } => Error::Parse {
            what: "grid",
            path: origin.to_path_buf(),
            message: format!("`{field}`: {reason}"),
        },
        e => e,
    }
}

/// The grid TOML: `preset` (a config preset), `seeds`, optional `steps`, `name`, a
/// `[config]` table of overrides and an `[axes]` table of `key = "a:b:step"` or lists.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GridToml {
    name: Option<String>,
    preset: Option<String>,
    seeds: Option<String>,
    steps: Option<u64>,
    #[serde(default)]
    config: toml::Table,
    #[serde(default)]
    axes: toml::Table,
}

impl Spec {
    /// Parse a grid TOML (`origin` names it in messages).
    pub fn from_toml(text: &str, origin: &Path) -> Result<Spec> {
        let parse = |message: String| Error::Parse {
            what: "grid",
            path: origin.to_path_buf(),
            message,
        };
        let g: GridToml = toml::from_str(text).map_err(|e| parse(e.to_string()))?;
        let preset = match &g.preset {
            Some(name) => Preset::from_name(name)?,
            None => Preset::Balanced,
        };
        let overrides = toml::to_string(&g.config).expect("table serialises");
        let mut base = Config::from_toml_str_over_preset(&overrides, origin, preset)?;
        if let Some(steps) = g.steps {
            base.steps = steps;
        }
        base.validate()?;
        let mut axes = Vec::new();
        for (key, v) in &g.axes {
            let values = match v {
                toml::Value::String(s) => s
                    .parse::<axis::Values>()
                    .map_err(parse)?
                    .values(key)
                    .map_err(|e| in_file(e, origin))?,
                toml::Value::Array(items) => items
                    .iter()
                    .map(|x| match x {
                        // only integers a double holds exactly (2^63 would become i64::MAX)
                        toml::Value::Integer(i) if (*i as f64) as i128 == *i as i128 => {
                            Ok(*i as f64)
                        }
                        toml::Value::Float(f) if f.is_finite() => Ok(*f),
                        _ => Err(format!(
                            "axis `{key}`: values must be finite numbers (integers below 2^53)"
                        )),
                    })
                    .collect::<std::result::Result<Vec<f64>, _>>()
                    .map_err(parse)
                    .and_then(|v| {
                        // a value twice would run a grid point twice, as in a range
                        axis::Values::List(v)
                            .values(key)
                            .map_err(|e| in_file(e, origin))
                    })?,
                _ => {
                    return Err(parse(format!(
                        "axis `{key}`: a range string \"a:b:step\" or a list"
                    )));
                }
            };
            axes.push(Axis {
                key: key.clone(),
                values,
            });
        }
        let seeds = match &g.seeds {
            Some(s) => s.parse::<SeedList>().map_err(parse)?.seeds("seeds")?,
            None => vec![base.seed],
        };
        let spec = Spec {
            format: GRID_FORMAT.into(),
            name: g.name.unwrap_or_else(|| "custom".into()),
            base,
            axes,
            seeds,
        };
        spec.cells().map_err(|e| in_file(e, origin))?;
        Ok(spec)
    }

    /// Every cell in grid order (the first axis outermost, seeds innermost), each config
    /// validated: a bad value is found here, before any run.
    pub fn cells(&self) -> Result<Vec<Cell>> {
        let total = self.check()?;
        let mut out = Vec::with_capacity(total);
        for index in 0..total {
            let mut rest = index;
            let seed = self.seeds[rest % self.seeds.len()];
            rest /= self.seeds.len();
            let mut point = vec![0.0; self.axes.len()];
            for (k, a) in self.axes.iter().enumerate().rev() {
                point[k] = a.values[rest % a.values.len()];
                rest /= a.values.len();
            }
            let mut config = Config {
                seed,
                ..self.base.clone()
            };
            for (a, v) in self.axes.iter().zip(&point) {
                config = with_value(&config, &a.key, *v)?;
            }
            let hash: String = Sha256::digest(config.to_toml().as_bytes())[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            out.push(Cell {
                index,
                point,
                seed,
                config,
                hash,
            });
        }
        Ok(out)
    }

    /// Check the spec, however it was made (built, or read from `grid.json`): the base
    /// config is valid, 1 to [`MAX_SEEDS`] seeds each at most
    /// [`MAX_SEED`](crate::seeds::MAX_SEED), at most 4 axes with distinct keys (not
    /// `seed`), each with finite values, and at most [`MAX_RUNS`] runs in all (a size
    /// over a limit). Returns the number of runs.
    pub fn check(&self) -> Result<usize> {
        self.base.validate()?;
        require(&self.base, "grid", &[Capability::GridMetrics])?;
        if self.seeds.is_empty() {
            return Err(Error::grid("seeds", "a grid needs at least one seed"));
        }
        if self.seeds.len() as u64 > MAX_SEEDS {
            return Err(Error::TooLarge {
                field: "seeds".into(),
                reason: format!(
                    "{} seeds, more than the limit of {MAX_SEEDS}",
                    self.seeds.len()
                ),
            });
        }
        let mut distinct = std::collections::BTreeSet::new();
        for &seed in &self.seeds {
            crate::seeds::check("seeds", seed).map_err(|e| match e {
                Error::InvalidConfig { field, reason } => Error::grid(field, reason),
                e => e,
            })?;
            // a seed twice would run one cell twice, as a repeated axis value would
            if !distinct.insert(seed) {
                return Err(Error::grid(
                    "seeds",
                    format!("the seed {seed} appears twice"),
                ));
            }
        }
        // the name is printed and written into the grid's files: no control characters
        // (found here, before any cell runs, not when the results are written)
        if let Some(c) = self.name.chars().find(|c| c.is_control()) {
            return Err(Error::grid(
                "name",
                format!(
                    "{:?} holds the control character {:?}; a grid name is printable text",
                    self.name, c
                ),
            ));
        }
        if self.axes.len() > 4 {
            return Err(Error::grid("axes", "at most 4 axes"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for a in &self.axes {
            if !seen.insert(a.key.as_str()) || a.key == "seed" {
                return Err(Error::grid(
                    format!("axes.{}", a.key),
                    "axis given twice (or `seed`: use seeds)",
                ));
            }
            if a.values.is_empty() || a.values.iter().any(|v| !v.is_finite()) {
                return Err(Error::grid(
                    format!("axes.{}", a.key),
                    "an axis needs at least one value, every value finite",
                ));
            }
        }
        let runs = self
            .axes
            .iter()
            .try_fold(self.seeds.len() as u128, |n, a| {
                n.checked_mul(a.values.len() as u128)
            })
            .unwrap_or(u128::MAX);
        if runs > MAX_RUNS as u128 {
            return Err(Error::TooLarge {
                field: "grid".into(),
                reason: format!(
                    "{runs} runs (axis values times {} seeds), more than the limit of {MAX_RUNS}",
                    self.seeds.len()
                ),
            });
        }
        Ok(runs as usize)
    }

    /// Read `DIR/grid.json`.
    pub fn read(dir: &Path) -> Result<Spec> {
        let path = dir.join("grid.json");
        let text = read_text(&path, SMALL_INPUT)?;
        let spec: Spec = serde_json::from_str(&text).map_err(|e| Error::Parse {
            what: "grid spec",
            path: path.clone(),
            message: e.to_string(),
        })?;
        if spec.format != GRID_FORMAT {
            return Err(Error::Parse {
                what: "grid spec",
                path,
                message: format!("format `{}`, expected `{GRID_FORMAT}`", spec.format),
            });
        }
        // the same checks as when a grid is built: merge, resume and shards rely on them
        spec.check().map_err(|e| match e {
            Error::InvalidConfig { field, reason } | Error::InvalidGrid { field, reason } => {
                Error::Parse {
                    what: "grid spec",
                    path,
                    message: format!("`{field}`: {reason}"),
                }
            }
            other => other,
        })?;
        Ok(spec)
    }
}

/// Parse a seed list: "a..b" (b excluded) or "s1,s2,..." (see [`SeedList`]: each seed
/// at most [`MAX_SEED`](crate::seeds::MAX_SEED), at most [`MAX_SEEDS`] of them, counted
/// before they are collected).
pub fn parse_seeds(text: &str) -> std::result::Result<Vec<u64>, String> {
    text.parse::<SeedList>()?
        .seeds("seeds")
        .map_err(|e| format!("`{text}`: {e}"))
}

/// Where a grid comes from (the command line's `grid` flags): a grid TOML, a grid
/// preset, or a base config (a config file over a config preset); then axes, seeds,
/// steps and method that replace the grid's own.
#[derive(Debug, Clone, Default)]
pub struct Request<'a> {
    /// A grid TOML's text and where it was read from.
    pub grid: Option<(&'a str, &'a Path)>,
    /// A grid preset's name, or a config preset's as the base of a grid built from `set`.
    pub preset: Option<&'a str>,
    /// A base config file's text and where it was read from (over `preset`).
    pub config: Option<(&'a str, &'a Path)>,
    /// Axes `key=a:b:step` or `key=v1,v2,...`, each replacing the grid's axis of that key.
    pub set: &'a [String],
    /// Seeds replacing the grid's.
    pub seeds: Option<&'a SeedList>,
    /// Steps of every cell.
    pub steps: Option<u64>,
    /// Step method of every cell.
    pub method: Option<crate::config::Method>,
}

impl Spec {
    /// The grid a [`Request`] describes, every cell validated (bad input is found here,
    /// before any run).
    pub fn build(req: &Request<'_>) -> Result<Spec> {
        let grid_preset = req.preset.and_then(GridPreset::from_name);
        let mut spec = match (req.grid, grid_preset) {
            (Some(_), Some(_)) => {
                return Err(Error::argument(
                    "--grid",
                    "give --grid FILE or a grid --preset, not both",
                ));
            }
            (Some((text, path)), None) if req.preset.is_none() && req.config.is_none() => {
                Spec::from_toml(text, path)?
            }
            (None, Some(p)) if req.config.is_none() => {
                Spec::from_toml(p.toml(), Path::new(p.name()))?
            }
            (None, None) => {
                let preset = match req.preset {
                    Some(name) => Preset::from_name(name)?,
                    None => Preset::Balanced,
                };
                let base = match req.config {
                    Some((text, path)) => Config::from_toml_str_over_preset(text, path, preset)?,
                    None => preset.config(),
                };
                Spec {
                    format: GRID_FORMAT.into(),
                    name: "custom".into(),
                    seeds: vec![base.seed],
                    base,
                    axes: Vec::new(),
                }
            }
            _ => {
                return Err(Error::argument(
                    "--grid",
                    "--config and a config --preset build a grid from --set; a grid TOML or grid preset carries its own base config",
                ));
            }
        };
        for text in req.set {
            let (key, values) = text
                .split_once('=')
                .ok_or_else(|| Error::argument("--set", format!("`{text}` is not KEY=VALUES")))?;
            let key = key.trim();
            let values = values
                .parse::<axis::Values>()
                .map_err(|m| Error::argument("--set", format!("`{key}`: {m}")))?
                .values(key)
                .map_err(|e| match e {
                    Error::InvalidGrid { reason, .. } => {
                        Error::argument("--set", format!("`{key}`: {reason}"))
                    }
                    e => e,
                })?;
            let axis = Axis {
                key: key.to_string(),
                values,
            };
            match spec.axes.iter_mut().find(|a| a.key == axis.key) {
                Some(a) => *a = axis,
                None => spec.axes.push(axis),
            }
        }
        if let Some(seeds) = req.seeds {
            spec.seeds = seeds.seeds("--seeds")?;
        }
        if let Some(steps) = req.steps {
            spec.base.steps = steps;
        }
        if let Some(method) = req.method {
            spec.base.method = method;
        }
        spec.base.validate()?;
        // a grid field's error names what holds it: an axis of --set, else the grid TOML
        spec.cells().map_err(|e| match e {
            Error::InvalidGrid { field, reason } => {
                let from_set = req.set.iter().find_map(|t| {
                    let key = t.split_once('=')?.0.trim();
                    (field == format!("axes.{key}")).then_some(key)
                });
                match (from_set, req.grid) {
                    (Some(key), _) => Error::argument("--set", format!("`{key}`: {reason}")),
                    (None, Some((_, path))) => in_file(Error::grid(field, reason), path),
                    (None, None) => Error::grid(field, reason),
                }
            }
            e => e,
        })?;
        Ok(spec)
    }

    /// Make `dir` this grid's directory, before any run: it is created if missing; a
    /// `grid.json` already there must be this very grid (then the run resumes); without
    /// one the directory must be empty (but for tokensel temporaries), as tokensel writes
    /// into it, and `grid.json` is created exclusively ([`create_atomic`]). Shards
    /// starting together on a fresh directory never fail each other: one creates
    /// `grid.json`, the others find it (complete) and join, and a shard that lists the
    /// directory while another is filling it looks for `grid.json` again before refusing.
    pub fn open_dir(&self, dir: &Path) -> Result<()> {
        crate::io::files::check_output_dir(dir)?;
        let path = dir.join("grid.json");
        let text = serde_json::to_string_pretty(self).expect("spec serialises");
        remove_dead_temps(&path);
        // Each round either decides or saw another shard create grid.json meanwhile.
        for _ in 0..100 {
            if std::fs::symlink_metadata(&path).is_ok() {
                if Spec::read(dir)? != *self {
                    return Err(Error::Mismatch {
                        what: path.display().to_string(),
                        reason: "the directory holds another grid (other base config, axes or seeds); use a new --out".into(),
                    });
                }
                return Ok(());
            }
            let mut others: Vec<String> = std::fs::read_dir(dir)
                .map_err(|source| Error::Io {
                    path: dir.to_path_buf(),
                    source,
                })?
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !is_temp(n))
                .collect();
            others.sort();
            if others.is_empty() {
                if create_atomic(&path, text.as_bytes())? {
                    return Ok(());
                }
                continue;
            }
            if std::fs::symlink_metadata(&path).is_ok() {
                continue;
            }
            return Err(Error::path(
                dir,
                format!(
                    "holds `{}` but no grid.json: not a grid directory, tokensel does not write into it; choose another --out",
                    others.join("`, `")
                ),
            ));
        }
        Err(Error::path(
            dir,
            "kept changing while tokensel looked for grid.json (created and removed by others)",
        ))
    }
}

/// Parse `K/N` (1 <= K <= N).
pub fn parse_shard(text: &str) -> std::result::Result<(usize, usize), String> {
    let bad = || format!("`{text}` is not a shard K/N with 1 <= K <= N");
    let (k, n) = text.split_once('/').ok_or_else(bad)?;
    let (k, n) = (
        k.trim().parse::<usize>().map_err(|_| bad())?,
        n.trim().parse::<usize>().map_err(|_| bad())?,
    );
    if k == 0 || k > n {
        return Err(bad());
    }
    Ok((k, n))
}

/// The cells of shard `k` of `n` (1-based): every n-th cell from the (k-1)-th.
pub fn shard(cells: Vec<Cell>, (k, n): (usize, usize)) -> Vec<Cell> {
    cells.into_iter().filter(|c| c.index % n == k - 1).collect()
}

/// Path of a cell's file.
pub fn cell_path(dir: &Path, cell: &Cell) -> PathBuf {
    dir.join("cells").join(format!("{}.json", cell.hash))
}

/// Read a cell's file: `None` while it is missing (cell files are written atomically, so
/// a partial file cannot exist). A file that is there but is not this cell's complete
/// result (not a regular file, unparsable, another format or config) is an error naming
/// it: it is neither rerun nor merged silently.
pub fn read_cell(dir: &Path, cell: &Cell) -> Result<Option<CellFile>> {
    let path = cell_path(dir, cell);
    let text = match read_text(&path, SMALL_INPUT) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        other => other?,
    };
    let bad = |message: String| Error::Parse {
        what: "grid cell file (remove it to run the cell again)",
        path: path.clone(),
        message,
    };
    let file: CellFile = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if file.format != CELL_FORMAT {
        return Err(bad(format!(
            "format `{}`, expected `{CELL_FORMAT}`",
            file.format
        )));
    }
    if file.config != cell.config {
        return Err(bad("its config is not the cell's".into()));
    }
    let same_point = file.point.len() == cell.point.len()
        && file
            .point
            .iter()
            .zip(&cell.point)
            .all(|(a, b)| a.to_bits() == b.to_bits());
    if !same_point || file.seed != cell.seed {
        return Err(bad(format!(
            "its point {:?} and seed {} are not the cell's ({:?}, seed {}): a foreign cell",
            file.point, file.seed, cell.point, cell.seed
        )));
    }
    if let Outcome::Ok(m) = &file.outcome {
        check_metrics(m, &cell.config).map_err(bad)?;
    }
    Ok(Some(file))
}

/// A cell's metrics within their ranges: accuracies and selection shares in [0, 1],
/// losses >= 0 (or NaN), steps within the run, the regime the accuracies give (a cell file
/// edited by hand, say a test accuracy of 7.0, is refused, not merged).
fn check_metrics(m: &cell::Metrics, cfg: &Config) -> std::result::Result<(), String> {
    let unit = |what: &str, v: f64| match (0.0..=1.0).contains(&v) {
        true => Ok(()),
        false => Err(format!("{what} {v} is outside [0, 1]")),
    };
    unit("train_accuracy", m.train_accuracy)?;
    unit("test_accuracy", m.test_accuracy)?;
    // a loss may be NaN (a run that records a non-finite loss; read back as such)
    for (what, v) in [("train_loss", m.train_loss), ("test_loss", m.test_loss)] {
        if v < 0.0 {
            return Err(format!("{what} {v} is not >= 0"));
        }
    }
    for (what, share) in [
        ("clean_selection", m.clean_selection),
        ("noisy_selection", m.noisy_selection),
    ] {
        for v in share.iter().flat_map(|s| s.to_array()) {
            unit(what, v)?;
        }
    }
    for (what, step) in [
        ("fit_step", m.fit_step),
        ("generalisation_step", Some(m.generalisation_step)),
    ] {
        if let Some(s) = step.filter(|s| *s > cfg.steps) {
            return Err(format!("{what} {s} is past the run's {} steps", cfg.steps));
        }
    }
    let regime = cell::Regime::of(m.train_accuracy, m.test_accuracy);
    if m.regime != regime {
        return Err(format!(
            "regime `{}` but its accuracies give `{}`",
            m.regime.name(),
            regime.name()
        ));
    }
    Ok(())
}

/// Write a cell's file atomically.
fn write_cell(dir: &Path, cell: &Cell, file: &CellFile) -> Result<()> {
    let text = serde_json::to_string_pretty(file).expect("cell serialises");
    write_atomic(&cell_path(dir, cell), text.as_bytes())
}

/// Run one cell in memory: a run that stops or is refused is a failed cell.
pub fn compute_cell(cell: &Cell, cache: Option<&NoiseCache>) -> Result<CellFile> {
    let outcome = match cell::run(&cell.config, cache) {
        Ok(m) => Outcome::Ok(Box::new(m)),
        Err(e) if e.is_stopped_run() => Outcome::Failed(e.to_string()),
        Err(e) => return Err(e),
    };
    Ok(CellFile {
        format: CELL_FORMAT.into(),
        point: cell.point.clone(),
        seed: cell.seed,
        config: cell.config.clone(),
        outcome,
    })
}

/// Compute `cells` in parallel, seed-major (the cells of one seed in grid order share
/// the test noise wherever only ||mu||, rho, eta or the step size differ; results do not
/// depend on the order), each worker keeping its last test noise in a shared cache.
/// `each(cell, file)` is called as each finishes; results come back in `cells`' order.
fn compute_cells(
    cells: &[&Cell],
    each: &(dyn Fn(&Cell, &CellFile) -> Result<()> + Sync),
) -> Result<Vec<CellFile>> {
    use rayon::prelude::*;
    let mut order: Vec<usize> = (0..cells.len()).collect();
    order.sort_by_key(|&k| (cells[k].seed, cells[k].index));
    let cache = NoiseCache::new(2 * rayon::current_num_threads());
    let mut done: Vec<(usize, CellFile)> = order
        .par_iter()
        .with_max_len(1)
        .map(|&k| {
            let file = compute_cell(cells[k], Some(&cache))?;
            each(cells[k], &file)?;
            Ok((k, file))
        })
        .collect::<Result<_>>()?;
    done.sort_by_key(|(k, _)| *k);
    Ok(done.into_iter().map(|(_, f)| f).collect())
}

/// Run a whole grid in memory (no files) and reduce it: what claim files use.
pub fn run_in_memory(spec: &Spec) -> Result<reduce::Summary> {
    let cells = spec.cells()?;
    let done = compute_cells(&cells.iter().collect::<Vec<_>>(), &|_, _| Ok(()))?;
    let files: CellFiles = cells
        .into_iter()
        .zip(done)
        .map(|(c, f)| (c, Some(f)))
        .collect();
    Ok(reduce::summarise(spec, &files))
}

/// Run every cell of `cells` that has no complete file yet, writing each cell's file
/// as it finishes; returns how many ran. `progress(done)` after each.
pub fn run_cells(dir: &Path, cells: &[Cell], progress: &(dyn Fn(usize) + Sync)) -> Result<usize> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    std::fs::create_dir_all(dir.join("cells")).map_err(|source| Error::Io {
        path: dir.join("cells"),
        source,
    })?;
    remove_dead_temps_in(&dir.join("cells"));
    let mut todo: Vec<&Cell> = Vec::new();
    for c in cells {
        if read_cell(dir, c)?.is_none() {
            todo.push(c);
        }
    }
    let done = AtomicUsize::new(cells.len() - todo.len());
    progress(done.load(Ordering::Relaxed));
    compute_cells(&todo, &|cell, file| {
        write_cell(dir, cell, file)?;
        progress(done.fetch_add(1, Ordering::Relaxed) + 1);
        Ok(())
    })?;
    Ok(todo.len())
}

/// Each cell of a grid with its file (`None` when missing), in grid order.
pub type CellFiles = Vec<(Cell, Option<CellFile>)>;

/// Everything a merge read: the spec and each cell's file.
pub fn collect(dir: &Path) -> Result<(Spec, CellFiles)> {
    let spec = Spec::read(dir)?;
    let cells = spec.cells()?;
    let files = cells
        .into_iter()
        .map(|c| {
            let f = read_cell(dir, &c)?;
            Ok((c, f))
        })
        .collect::<Result<_>>()?;
    Ok((spec, files))
}

/// The merged set of the grid directory `dir` (`DIR/merged/`; `dir` must hold a
/// `grid.json`), checked before any work (see [`OutputDir::prepare`]).
pub fn merged_dir(dir: &Path) -> Result<OutputDir> {
    if std::fs::symlink_metadata(dir.join("grid.json")).is_err() {
        return Err(Error::path(dir, "has no grid.json: not a grid directory"));
    }
    OutputDir::prepare(&dir.join("merged"), SetKind::GridMerge)
}

/// Merge `DIR`: read the spec and every cell file, and publish into `out` (see
/// [`merged_dir`]) as one set `grid.csv`, `summary.csv`, `summary.json` and, for
/// two-axis grids, `heatmap.svg` and `heatmap.png`. The output depends only on the
/// files' contents. Cell temporaries of writers that died on this host are removed
/// first.
pub fn merge(dir: &Path, out: &OutputDir) -> Result<reduce::Summary> {
    // a cell temporary that a dead writer left (as a grid run does before its cells)
    remove_dead_temps_in(&dir.join("cells"));
    let (spec, files) = collect(dir)?;
    let summary = reduce::summarise(&spec, &files);
    let json = serde_json::to_string_pretty(&summary).expect("summary serialises");
    let mut set = vec![
        (
            "grid.csv".to_string(),
            reduce::runs_csv(&spec, &files).into_bytes(),
        ),
        ("summary.csv".to_string(), summary.to_csv().into_bytes()),
        ("summary.json".to_string(), json.into_bytes()),
    ];
    if let Some(fig) = figure::figure(&spec, &summary) {
        let svg = fig.to_svg();
        let png = crate::report::plot::svg_to_png(&svg).map_err(|e| Error::Io {
            path: out.path().join("heatmap.png"),
            source: std::io::Error::other(e),
        })?;
        set.push(("heatmap.svg".to_string(), svg.into_bytes()));
        set.push(("heatmap.png".to_string(), png));
    }
    out.publish(&set)?;
    Ok(summary)
}
