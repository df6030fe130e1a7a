//! The exact arrays of a run, as NPY files (`tokensel data`), for other implementations
//! to train on the very same data.
//!
//! `DIR/` receives `X_train.npy` (n, T, d), `y_train.npy` and `y_true_train.npy` (n,
//! int8: observed and true labels; +1/-1, or class indices 0..K-1 for the K-class model),
//! `noisy_train.npy` (n, bool), `nu.npy` (d; the K-class model's head: (K, d), row c is
//! nu_c),
//! `X_test.npy` (n_test, T, d), `y_test.npy` (n_test, int8), and one file per initial
//! parameter block of the run's query map, `<block>0.npy` by the block's declared name
//! ([`initial_blocks`]): the linear map's `p0.npy` (d) and, when W is dense, `W0.npy`
//! (d, d) (the config's W = I is not written: the manifest's `w0` says so); the
//! factorised map's (`[factorised]`) `W_Q0.npy`, `W_K0.npy` (m, d), with biases
//! `b_Q0.npy`, `b_K0.npy` (m), and `p0.npy` (d), the values the run starts from bit for
//! bit; all float64 unless stated; `config.toml`, the run's full config; and
//! `manifest.json` with the format version, the seed, each array's shape, dtype and
//! SHA-256 (of the NPY file's bytes). The directory is published as one output set
//! (`io::publish`: its marker `tokensel-set.json` lists every file): a re-export replaces
//! the whole set, so no array of an earlier export (say a `W0.npy` the new run does not
//! have) survives beside the new manifest.
//!
//! Supplied data (`data::supplied`) are written the same way with `"source": "supplied"`
//! in the manifest and `groups.npy` (T, int8: 0 R, 1 W_same, 2 W_opposite, 3 I); read
//! back, their arrays are the data (checked against the manifest's SHA-256 and by
//! `Dataset::supplied`) instead of being regenerated from the config. Their initial
//! blocks are the config's (drawn from its seed and init): each is read back by name,
//! its shape checked against the block the config declares before any work, and its
//! bytes against the config's values.

use std::collections::BTreeMap;
use std::path::Path;

use ndarray::{Array1, ArrayView, ArrayViewD, Dimension, IxDyn};
use ndarray_npy::{WritableElement, WriteNpyExt};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::arith::F64;
use crate::config::Config;
use crate::config::Group;
use crate::data::supplied::Supplied;
use crate::data::{Dataset, Params, Source};
use crate::error::{Error, Result};
use crate::io::files::{LARGE_INPUT, SMALL_INPUT, SetDir};
use crate::model::query::Query;

/// Format tag of the manifest.
pub const DATA_FORMAT: &str = "tokensel-data/1";

/// One array of the export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayEntry {
    /// File name in the directory.
    pub file: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// NumPy dtype name (`float64`, `int8`, `bool`).
    pub dtype: String,
    /// SHA-256 (hex) of the NPY file's bytes.
    pub sha256: String,
}

/// `manifest.json` of a data export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`DATA_FORMAT`].
    pub format: String,
    /// The master seed.
    pub seed: u64,
    /// `identity` when W(0) = I is not written, `W0.npy` otherwise; `none` for the
    /// factorised query map, which has no W (its blocks are listed in `arrays`).
    pub w0: String,
    /// Generated (not written) or supplied.
    #[serde(default, skip_serializing_if = "Source::is_generated")]
    pub source: Source,
    /// The arrays by name.
    pub arrays: BTreeMap<String, ArrayEntry>,
}

/// Serialise one array as NPY bytes.
fn npy<A: WritableElement, D: Dimension>(a: ArrayView<'_, A, D>) -> Vec<u8> {
    let mut bytes = Vec::new();
    a.write_npy(&mut bytes)
        .expect("writing NPY into memory does not fail");
    bytes
}

/// The NPY bytes of a float64 array of `shape` holding `values` (row-major): the
/// export's own writer, for examples that write arrays of their own. `Err` where the
/// shape's product is not `values.len()`.
pub fn npy_f64(shape: &[usize], values: &[f64]) -> Result<Vec<u8>> {
    let a = ArrayViewD::from_shape(IxDyn(shape), values).map_err(|e| Error::InvalidArgument {
        name: "shape".into(),
        reason: format!("{shape:?} does not hold {} values: {e}", values.len()),
    })?;
    Ok(npy(a))
}

/// One initial parameter block of a run: its declared name, shape and values (f64,
/// row-major).
pub type InitialBlock = (&'static str, Vec<usize>, Vec<f64>);

/// The initial parameter blocks of `cfg`'s run, in declaration order: the blocks its
/// query map starts from ([`Query::of_config`] at [`Params::init`], in f64), so an
/// export's `<block>0.npy` holds the run's own values bit for bit.
pub fn initial_blocks(cfg: &Config) -> Vec<InitialBlock> {
    let blocks = Query::of_config(&F64, cfg, &Params::init(cfg)).into_blocks();
    blocks
        .decl
        .into_iter()
        .zip(blocks.values)
        .map(|(b, v)| (b.name, b.shape, v))
        .collect()
}

/// The export's array name of block `block` (its initial value): `p0`, `W0`, `W_Q0`.
fn block_array(block: &str) -> String {
    format!("{block}0")
}

/// The manifest's `w0` for `cfg`'s initial blocks: `W0.npy` when W is a block,
/// `identity` for the linear map without one (W = I), `none` for the factorised map.
fn w0_rule(cfg: &Config, blocks: &[InitialBlock]) -> &'static str {
    if blocks.iter().any(|b| b.0 == "W") {
        "W0.npy"
    } else if cfg.factorised.is_some() {
        "none"
    } else {
        "identity"
    }
}

/// One serialised array of the export: name, NumPy dtype, shape and NPY bytes.
struct Npy {
    name: String,
    dtype: &'static str,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

/// The export's arrays, in file order, serialised in memory.
fn arrays(data: &Dataset, blocks: &[InitialBlock]) -> Vec<Npy> {
    let (train, test) = (&data.train, &data.test);
    let noisy: Array1<bool> = (0..train.len()).map(|i| train.is_noisy(i)).collect();
    let labels = |y: &[i8]| Array1::from_vec(y.to_vec());
    let entry = |name: &str, dtype, shape: &[usize], bytes| Npy {
        name: name.to_string(),
        dtype,
        shape: shape.to_vec(),
        bytes,
    };
    let mut out = vec![
        entry("X_train", "float64", train.x.shape(), npy(train.x.view())),
        entry(
            "y_train",
            "int8",
            &[train.len()],
            npy(labels(&train.y).view()),
        ),
        entry(
            "y_true_train",
            "int8",
            &[train.len()],
            npy(labels(&train.y_true).view()),
        ),
        entry("noisy_train", "bool", &[train.len()], npy(noisy.view())),
        match &data.nu_classes {
            // the K-class model's head (K, d), class-major
            Some(nu) => entry("nu", "float64", nu.shape(), npy(nu.view())),
            None => entry("nu", "float64", data.nu.shape(), npy(data.nu.view())),
        },
        entry("X_test", "float64", test.x.shape(), npy(test.x.view())),
        entry(
            "y_test",
            "int8",
            &[test.len()],
            npy(labels(&test.y_true).view()),
        ),
    ];
    for (name, shape, values) in blocks {
        let view = ArrayViewD::from_shape(IxDyn(shape), values).expect("a block's shape");
        out.push(entry(&block_array(name), "float64", shape, npy(view)));
    }
    if data.source == Source::Supplied {
        let codes: Array1<i8> = data.groups.iter().map(|g| g.index() as i8).collect();
        out.push(entry("groups", "int8", &[codes.len()], npy(codes.view())));
    }
    out
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The exact arrays of `cfg`'s run (its data set `data` and its initial parameter
/// blocks, [`initial_blocks`]) as the files of a data export (NPY files, `config.toml`,
/// `manifest.json`), and the manifest; `io::publish` writes them as one set.
pub fn files(cfg: &Config, data: &Dataset) -> (Manifest, Vec<(String, Vec<u8>)>) {
    let blocks = initial_blocks(cfg);
    let w0_name = w0_rule(cfg, &blocks);
    let mut entries = BTreeMap::new();
    let mut out = Vec::new();
    for a in arrays(data, &blocks) {
        let file = format!("{}.npy", a.name);
        entries.insert(
            a.name.clone(),
            ArrayEntry {
                file: file.clone(),
                shape: a.shape,
                dtype: a.dtype.into(),
                sha256: sha256_hex(&a.bytes),
            },
        );
        out.push((file, a.bytes));
    }
    out.push(("config.toml".into(), cfg.to_toml().into_bytes()));
    let manifest = Manifest {
        format: DATA_FORMAT.into(),
        seed: cfg.seed,
        w0: w0_name.into(),
        source: data.source,
        arrays: entries,
    };
    let text = serde_json::to_string_pretty(&manifest).expect("manifest serialises");
    out.push(("manifest.json".into(), text.into_bytes()));
    (manifest, out)
}

/// SHA-256 (hex) of the opened member `file` (named `path` in messages), read in
/// pieces.
fn sha256_file(path: &Path, mut file: std::fs::File) -> Result<String> {
    use std::io::Read;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let k = file.read(&mut buf).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// How many times a data directory is read when a writer replaces it while it is read.
const READS: usize = 5;

/// Read a data export back and prove it is the run its `config.toml` describes: the
/// data regenerated from the config (for supplied data: read from the files and checked
/// by `Dataset::supplied`) must give, array for array, the manifest's SHA-256, shape and
/// dtype (and its `w0`), and so must the NPY files on disk. Returns the validated config,
/// the manifest and the data set (regenerated or read, so it is not drawn a second
/// time).
///
/// The directory is opened once and every member is opened through it before the data
/// is regenerated, so all of them come from one published set even while `tokensel
/// data` swaps a new one in and removes the old. Should the set be removed before its
/// members are open (a member gone) or a file not match the manifest, the whole set is
/// read again, up to 5 (`READS`) times, before the error is reported. (Supplied arrays
/// are read by path after that, each checked against the manifest's SHA-256: a set
/// swapped in between is refused, not mixed.)
pub fn verify_data(dir: &Path) -> Result<(Config, Manifest, Dataset)> {
    let mut attempt = 1;
    loop {
        match verify_once(dir)? {
            Ok(verified) => return Ok(verified),
            Err(raced) if attempt == READS => return Err(raced),
            Err(_) => attempt += 1,
        }
    }
}

/// One reading of the data export `dir` ([`verify_data`]): the outer error is final,
/// the inner one may come from a writer replacing the set while it was read.
fn verify_once(dir: &Path) -> Result<Result<(Config, Manifest, Dataset)>> {
    let gone = |e: Error| match e {
        Error::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound => Ok(e),
        other => Err(other),
    };
    let set = SetDir::open(dir)?;
    let manifest_path = set.member("manifest.json");
    let text = match set.read_text("manifest.json", SMALL_INPUT) {
        Ok(text) => text,
        Err(e) => return gone(e).map(Err),
    };
    let manifest: Manifest = serde_json::from_str(&text).map_err(|e| Error::Parse {
        what: "data manifest",
        path: manifest_path.clone(),
        message: e.to_string(),
    })?;
    let mismatch = |what: String, reason: String| Error::Mismatch { what, reason };
    if manifest.format != DATA_FORMAT {
        return Err(mismatch(
            manifest_path.display().to_string(),
            format!("format `{}`, expected `{DATA_FORMAT}`", manifest.format),
        ));
    }
    let config_text = match set.read_text("config.toml", SMALL_INPUT) {
        Ok(text) => text,
        Err(e) => return gone(e).map(Err),
    };
    // Open every array listed before the long work: an opened file stays readable
    // when a writer removes the set, so the set read is the one the manifest belongs to.
    let mut opened = BTreeMap::new();
    for (name, entry) in &manifest.arrays {
        if entry.file != format!("{name}.npy") || name.contains('/') {
            return Err(mismatch(
                format!("array `{name}`"),
                format!(
                    "the manifest names the file `{}`, not `{name}.npy`",
                    entry.file
                ),
            ));
        }
        match set.open_input(&entry.file, LARGE_INPUT) {
            Ok((file, _)) => opened.insert(name.clone(), file),
            Err(e) => return gone(e).map(Err),
        };
    }
    let cfg = Config::from_toml_str(&config_text, &set.member("config.toml"))?;
    if cfg.seed != manifest.seed {
        return Err(mismatch(
            "config.toml `seed`".into(),
            format!("{} but the manifest says {}", cfg.seed, manifest.seed),
        ));
    }
    if let Err(raced) = check_block_shapes(&cfg, &manifest, &opened)? {
        return Ok(Err(raced));
    }
    let data = match manifest.source {
        Source::Generated => Dataset::generate(&cfg),
        Source::Supplied => read_supplied(dir, &cfg, &manifest)?,
    };
    let blocks = initial_blocks(&cfg);
    let ours = arrays(&data, &blocks);
    let names: Vec<&str> = ours.iter().map(|a| a.name.as_str()).collect();
    let listed: Vec<&str> = manifest.arrays.keys().map(String::as_str).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    if sorted != listed {
        return Err(mismatch(
            "data manifest".into(),
            format!("lists arrays {listed:?}; config.toml gives {sorted:?}"),
        ));
    }
    let w0 = w0_rule(&cfg, &blocks);
    if manifest.w0 != w0 {
        return Err(mismatch(
            "data manifest `w0`".into(),
            format!("`{}` but config.toml gives `{w0}`", manifest.w0),
        ));
    }
    for a in &ours {
        let entry = &manifest.arrays[&a.name];
        // The file's NPY header is checked with its bytes (its SHA-256 equals that of
        // the array regenerated, header included); the manifest's copy of it here.
        for (field, listed, real) in [
            (
                "shape",
                format!("{:?}", entry.shape),
                format!("{:?}", a.shape),
            ),
            ("dtype", entry.dtype.clone(), a.dtype.to_string()),
        ] {
            if listed != real {
                return Err(mismatch(
                    format!("data manifest `{}.{field}`", a.name),
                    format!("{listed} but the array's NPY header and config.toml give {real}"),
                ));
            }
        }
        // the file against the manifest first, then both against what config.toml
        // gives: the message says which of the three disagree, and no more
        let file = opened
            .remove(&a.name)
            .expect("every listed array is opened");
        let digest = sha256_file(&set.member(&entry.file), file)?;
        if digest != entry.sha256 {
            return Ok(Err(mismatch(
                set.member(&entry.file).display().to_string(),
                "the file's SHA-256 differs from the manifest's (the file was changed)".into(),
            )));
        }
        let ours = sha256_hex(&a.bytes);
        if ours != entry.sha256 {
            let short = |h: &str| h.chars().take(16).collect::<String>();
            return Err(mismatch(
                format!("array `{}`", a.name),
                match manifest.source {
                    Source::Generated => format!(
                        "its file `{}` agrees with the manifest's SHA-256 ({}...), but its \
                         content is not the array config.toml generates (SHA-256 {}...)",
                        entry.file,
                        short(&entry.sha256),
                        short(&ours)
                    ),
                    Source::Supplied => "the supplied data's array as config.toml gives it differs from the manifest's SHA-256 (the initial blocks p0, W0, W_Q0, ... come from the config's seed and init; noisy_train from the labels)".into(),
                },
            ));
        }
    }
    Ok(Ok((cfg, manifest, data)))
}

/// Every initial block `cfg`'s query map declares against the export, before any work
/// (exit code 2 on a mismatch, naming the array): listed in the manifest as
/// `<block>0` with the declared shape, float64, and its opened NPY file's header giving
/// that shape too (a file of another shape is refused here, not after the data are
/// regenerated). The outer error is final (the manifest against the config); the inner
/// one, a file whose header disagrees, may come from a writer replacing the set while
/// it was opened (read again, as a file whose SHA-256 differs: [`verify_data`]).
fn check_block_shapes(
    cfg: &Config,
    manifest: &Manifest,
    opened: &BTreeMap<String, std::fs::File>,
) -> Result<Result<()>> {
    for b in Query::<f64>::declare(cfg) {
        let name = block_array(b.name);
        let declared = format!(
            "config.toml's query map declares block `{}` of shape {:?} (float64)",
            b.name, b.shape
        );
        let Some(entry) = manifest.arrays.get(&name) else {
            return Err(Error::Mismatch {
                what: "data manifest".into(),
                reason: format!("lists no array `{name}`, but {declared}"),
            });
        };
        if entry.shape != b.shape || entry.dtype != "float64" {
            return Err(Error::Mismatch {
                what: format!("array `{name}`"),
                reason: format!(
                    "the manifest gives shape {:?} ({}), but {declared}",
                    entry.shape, entry.dtype
                ),
            });
        }
        if let Some(file) = opened.get(&name) {
            let header = npy_shape(file);
            if header.as_ref() != Some(&b.shape) {
                return Ok(Err(Error::Mismatch {
                    what: format!("array `{name}` ({})", entry.file),
                    reason: match header {
                        Some(s) => format!("its NPY header gives shape {s:?}, but {declared}"),
                        None => format!("no readable NPY header, but {declared}"),
                    },
                }));
            }
        }
    }
    Ok(Ok(()))
}

/// The shape in the NPY header of `file` (read at its start without moving its
/// cursor: the file is hashed afterwards), `None` where the header is not an NPY one.
fn npy_shape(file: &std::fs::File) -> Option<Vec<usize>> {
    use std::os::unix::fs::FileExt;
    let mut head = vec![0u8; 4096];
    let mut got = 0;
    while got < head.len() {
        match file.read_at(&mut head[got..], got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(_) => return None,
        }
    }
    let head = &head[..got];
    if head.len() < 10 || &head[..6] != b"\x93NUMPY" {
        return None;
    }
    let (len, start): (usize, usize) = match head[6] {
        1 => (u16::from_le_bytes([head[8], head[9]]) as usize, 10),
        _ => (
            u32::from_le_bytes(head.get(8..12)?.try_into().ok()?) as usize,
            12,
        ),
    };
    let text = std::str::from_utf8(head.get(start..start.checked_add(len)?)?).ok()?;
    let from = text.find("'shape':")? + "'shape':".len();
    let rest = text[from..].trim_start().strip_prefix('(')?;
    let inner = &rest[..rest.find(')')?];
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect()
}

/// The arrays of a supplied data export as a data set (the labels final: both files).
fn read_supplied(dir: &Path, cfg: &Config, manifest: &Manifest) -> Result<Dataset> {
    use ndarray::{ArrayBase, OwnedRepr};
    use ndarray_npy::{ReadNpyExt, ReadableElement};
    let max_bytes =
        8 * (cfg.n_train.max(cfg.n_test) * cfg.tokens()).max(cfg.d) as u64 * cfg.d as u64 + 65_536;
    let read_one = |name: &str| read(dir, manifest, name, max_bytes);
    fn read<A: ReadableElement, D: Dimension>(
        dir: &Path,
        manifest: &Manifest,
        name: &str,
        max_bytes: u64,
    ) -> Result<ArrayBase<OwnedRepr<A>, D>> {
        let entry = manifest.arrays.get(name).ok_or_else(|| Error::Mismatch {
            what: "data manifest".into(),
            reason: format!("supplied data without array `{name}`"),
        })?;
        let path = dir.join(&entry.file);
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        // bounded before it is read: the config's sizes (validated against the memory
        // limit) give every array's largest NPY size
        let len = std::fs::metadata(&path).map_err(io)?.len();
        if len > max_bytes {
            return Err(Error::Mismatch {
                what: path.display().to_string(),
                reason: format!("{len} bytes, more than the config's sizes allow ({max_bytes})"),
            });
        }
        let bytes = std::fs::read(&path).map_err(io)?;
        if sha256_hex(&bytes) != entry.sha256 {
            return Err(Error::Mismatch {
                what: path.display().to_string(),
                reason: "the file's SHA-256 differs from the manifest's (the file was changed)"
                    .into(),
            });
        }
        let a = ArrayBase::<OwnedRepr<A>, D>::read_npy(&bytes[..]).map_err(|e| Error::Parse {
            what: "NPY array",
            path: path.clone(),
            message: e.to_string(),
        })?;
        // `tokensel data` writes C order, and the manifest's SHA-256 is that of the C-order
        // bytes: a Fortran-ordered file (fortran_order: True) is refused by name here, not
        // passed on to code that reads the array's memory in row-major order
        if a.ndim() > 1 && !a.is_standard_layout() {
            return Err(Error::Parse {
                what: "NPY array",
                path,
                message: "Fortran-ordered (fortran_order: True); a data directory's arrays are \
                          C-ordered, as `tokensel data` writes them (numpy.ascontiguousarray)"
                    .into(),
            });
        }
        Ok(a)
    }
    let labels =
        |name| read::<i8, ndarray::Ix1>(dir, manifest, name, max_bytes).map(|a| a.to_vec());
    let groups = read::<i8, ndarray::Ix1>(dir, manifest, "groups", max_bytes)?
        .iter()
        .map(|&k| {
            usize::try_from(k)
                .ok()
                .and_then(|k| Group::ALL.get(k).copied())
                .ok_or_else(|| Error::Mismatch {
                    what: "supplied `groups`".into(),
                    reason: format!("code {k}; groups are 0 (R) to 3 (I)"),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    Dataset::supplied(
        cfg,
        Supplied {
            x_train: read_one("X_train")?,
            y_train: labels("y_train")?,
            y_true_train: Some(labels("y_true_train")?),
            x_test: read_one("X_test")?,
            y_test: labels("y_test")?,
            nu: read(dir, manifest, "nu", max_bytes)?,
            groups: Some(groups),
        },
    )
}
