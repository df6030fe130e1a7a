//! `tokensel data`: the exact arrays of a run as NPY, with a manifest of shapes and
//! SHA-256 digests.

use ndarray::{Array1, Array2, Array3};
use ndarray_npy::read_npy;
use sha2::{Digest, Sha256};
use tokensel::config::{Config, Preset};
use tokensel::data::{Dataset, Params};

mod common;
use common::{stderr, tokensel};

/// The exported arrays are the run's data bit for bit, the manifest's digests are those
/// of the files, W(0) is written exactly when it is dense, and NumPy's `np.load` reads
/// every array with no extra code (where the CI's Python venv is there:
/// TOKENSEL_PYTHON).
#[test]
fn exported_arrays_are_the_runs_data() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg_path = tmp.path().join("small.toml");
    std::fs::write(&cfg_path, "d = 30\nn_train = 6\nn_test = 9\nseed = 4\n").unwrap();
    let out = tmp.path().join("data");
    let o = tokensel(&[
        "data",
        "--config",
        cfg_path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cfg = Config::from_file(&cfg_path).unwrap();
    let data = Dataset::generate(&cfg);
    let x: Array3<f64> = read_npy(out.join("X_train.npy")).unwrap();
    assert_eq!(x.shape(), data.train.x.shape());
    let same_bits = |a: &[f64], b: &[f64]| {
        a.len() == b.len() && a.iter().zip(b).all(|(u, v)| u.to_bits() == v.to_bits())
    };
    assert!(same_bits(
        x.as_slice().unwrap(),
        data.train.x.as_slice().unwrap()
    ));
    let xt: Array3<f64> = read_npy(out.join("X_test.npy")).unwrap();
    assert!(same_bits(
        xt.as_slice().unwrap(),
        data.test.x.as_slice().unwrap()
    ));
    let y: Array1<i8> = read_npy(out.join("y_train.npy")).unwrap();
    assert_eq!(y.to_vec(), data.train.y);
    let yt: Array1<i8> = read_npy(out.join("y_true_train.npy")).unwrap();
    assert_eq!(yt.to_vec(), data.train.y_true);
    let noisy: Array1<bool> = read_npy(out.join("noisy_train.npy")).unwrap();
    assert_eq!(noisy.iter().filter(|b| **b).count(), cfg.exact_flip_count());
    let nu: Array1<f64> = read_npy(out.join("nu.npy")).unwrap();
    assert!(same_bits(
        nu.as_slice().unwrap(),
        data.nu.as_slice().unwrap()
    ));
    let p0: Array1<f64> = read_npy(out.join("p0.npy")).unwrap();
    assert!(same_bits(
        p0.as_slice().unwrap(),
        Params::init(&cfg).p.as_slice().unwrap()
    ));
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["format"], "tokensel-data/1");
    assert_eq!(manifest["seed"], 4);
    assert_eq!(manifest["w0"], "identity");
    assert!(!out.join("W0.npy").exists());
    for (name, entry) in manifest["arrays"].as_object().unwrap() {
        let bytes = std::fs::read(out.join(entry["file"].as_str().unwrap())).unwrap();
        let digest: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(entry["sha256"], digest.as_str(), "{name}");
    }
    assert_eq!(
        manifest["arrays"]["X_train"]["shape"],
        serde_json::json!([6, 8, 30])
    );
    let reread = Config::from_file(&out.join("config.toml")).unwrap();
    assert_eq!(reread, cfg);

    // a dense W(0) (official-final: Kaiming) is written
    let out2 = tmp.path().join("joint");
    let o = tokensel(&[
        "data",
        "--preset",
        "official-final",
        "--out",
        out2.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let w0: Array2<f64> = read_npy(out2.join("W0.npy")).unwrap();
    let want = Params::init(&Preset::OfficialFinal.config()).w.unwrap();
    assert!(same_bits(w0.as_slice().unwrap(), want.as_slice().unwrap()));

    if let Some(python) = std::env::var("TOKENSEL_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
    {
        let script = "import json, sys, numpy as np\n\
            d = sys.argv[1]\n\
            m = json.load(open(d + '/manifest.json'))\n\
            for name, e in m['arrays'].items():\n\
            \x20   a = np.load(d + '/' + e['file'])\n\
            \x20   assert list(a.shape) == e['shape'], name\n\
            \x20   assert str(a.dtype) == e['dtype'], (name, a.dtype)\n\
            print('ok', len(m['arrays']))\n";
        let o = std::process::Command::new(python)
            .args(["-c", script, out.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(String::from_utf8_lossy(&o.stdout).starts_with("ok 8"));
    } else {
        eprintln!("TOKENSEL_PYTHON not set: np.load check skipped (.ci/run sets it)");
    }
}
