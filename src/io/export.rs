//! The exact arrays of a run, as NPY files (`tokensel data`), for other implementations
//! to train on the very same data.
//!
//! `DIR/` receives `X_train.npy` (n, T, d), `y_train.npy` and `y_true_train.npy` (n,
//! int8: observed and true labels), `noisy_train.npy` (n, bool), `nu.npy` (d),
//! `X_test.npy` (n_test, T, d), `y_test.npy` (n_test, int8), `p0.npy` (d) and, when W is
//! dense, `W0.npy` (d, d) (the config's W = I is not written: the manifest says so),
//! all float64 unless stated; `config.toml`, the run's full config; and
//! `manifest.json` with the format version, the seed, each array's shape, dtype and
//! SHA-256 (of the NPY file's bytes). The manifest is written last: it marks a complete
//! set.

use std::collections::BTreeMap;
use std::path::Path;

use ndarray::{Array1, ArrayView, ArrayView1, ArrayView2, Dimension};
use ndarray_npy::{WritableElement, WriteNpyExt};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::io::trajectory::write_atomic;

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
    /// `identity` when W(0) = I is not written, `W0.npy` otherwise.
    pub w0: String,
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

/// Write the exact arrays of `cfg`'s run (its data set and initial parameters p(0) and
/// W(0), `None` for the identity) into `dir` (created if missing), each file
/// atomically, the manifest last.
pub fn write_data(
    cfg: &Config,
    data: &Dataset,
    p0: ArrayView1<'_, f64>,
    w0: Option<ArrayView2<'_, f64>>,
    dir: &Path,
) -> Result<Manifest> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let (train, test) = (&data.train, &data.test);
    let noisy: Array1<bool> = (0..train.len()).map(|i| train.is_noisy(i)).collect();
    let labels = |y: &[i8]| Array1::from_vec(y.to_vec());
    let mut arrays = BTreeMap::new();
    let mut put = |name: &str, dtype: &str, shape: &[usize], bytes: Vec<u8>| -> Result<()> {
        let file = format!("{name}.npy");
        write_atomic(&dir.join(&file), &bytes)?;
        let sha256 = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        arrays.insert(
            name.to_string(),
            ArrayEntry {
                file,
                shape: shape.to_vec(),
                dtype: dtype.into(),
                sha256,
            },
        );
        Ok(())
    };
    put("X_train", "float64", train.x.shape(), npy(train.x.view()))?;
    put(
        "y_train",
        "int8",
        &[train.len()],
        npy(labels(&train.y).view()),
    )?;
    put(
        "y_true_train",
        "int8",
        &[train.len()],
        npy(labels(&train.y_true).view()),
    )?;
    put("noisy_train", "bool", &[train.len()], npy(noisy.view()))?;
    put("nu", "float64", data.nu.shape(), npy(data.nu.view()))?;
    put("X_test", "float64", test.x.shape(), npy(test.x.view()))?;
    put(
        "y_test",
        "int8",
        &[test.len()],
        npy(labels(&test.y_true).view()),
    )?;
    put("p0", "float64", p0.shape(), npy(p0))?;
    let w0 = match w0 {
        Some(w) => {
            put("W0", "float64", w.shape(), npy(w))?;
            "W0.npy"
        }
        None => "identity",
    };
    write_atomic(&dir.join("config.toml"), cfg.to_toml().as_bytes())?;
    let manifest = Manifest {
        format: DATA_FORMAT.into(),
        seed: cfg.seed,
        w0: w0.into(),
        arrays,
    };
    let text = serde_json::to_string_pretty(&manifest).expect("manifest serialises");
    write_atomic(&dir.join("manifest.json"), text.as_bytes())?;
    Ok(manifest)
}
