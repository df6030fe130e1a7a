//! Parameter blocks in the files (issue 41 items 1 and 6, file side): `tokensel data`
//! writes one NPY per initial block of the run's query map by its declared name (the
//! factorised map's `W_Q0`, `W_K0`, `b_Q0`, `b_K0`, `p0`), read back by name and
//! shape-checked against the config before any work; and the twin's state files refuse
//! an unknown key or a non-finite parameter or moment when read (exit code 2), not at the
//! first step.

use std::path::{Path, PathBuf};
use std::process::Output;

use ndarray::ArrayD;
use ndarray_npy::read_npy;
use sha2::{Digest, Sha256};
use tokensel::prelude::formats::export::initial_blocks;
use tokensel::prelude::{Config, Dataset};

mod common;
use common::twin_with_state as twin;
use common::{stderr, supplied_files, tokensel};

/// A factorised config at a small size: m = 3, biases, the nn.Linear init, p fixed.
const FACTORISED: &str = "d = 24\nn_train = 6\nn_test = 5\nsteps = 12\nmode = \"W\"\n\
    [init]\np = \"gaussian\"\np_scale = 0.2\nw = \"identity\"\n\
    [factorised]\nm = 3\nbias = true\n";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn code(o: &Output) -> Option<i32> {
    o.status.code()
}

/// The summary's trajectory digest of a successful `--json` run.
fn digest(o: &Output) -> String {
    assert_eq!(code(o), Some(0), "{}", stderr(o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["trajectory_digest"].as_str().unwrap().to_string()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `file` of the data directory `dir` replaced by `bytes`; with `manifest`, the
/// manifest's entry for `name` made to match (shape and SHA-256): a coherent set, only
/// wrong against its config.
fn replace(dir: &Path, name: &str, bytes: &[u8], shape: &[usize], manifest: bool) {
    std::fs::write(dir.join(format!("{name}.npy")), bytes).unwrap();
    if manifest {
        let path = dir.join("manifest.json");
        let mut m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        m["arrays"][name]["shape"] = serde_json::json!(shape);
        m["arrays"][name]["sha256"] = sha256_hex(bytes).into();
        std::fs::write(&path, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    }
}

/// NPY bytes of an (r, c) float64 array of `v`.
fn npy_f64(shape: &[usize], v: &[f64]) -> Vec<u8> {
    common::npy::npy("<f8", shape, &common::npy::f64_bytes(v))
}

/// `tokensel data` takes a `[factorised]` config (the capability `export` no longer needs
/// the plain query): it writes W_Q0, W_K0 (m, d), b_Q0, b_K0 (m) and p0 (d), listed in
/// the manifest (`w0`: "none", the map has no W), whose values are the run's initial
/// blocks bit for bit (`initial_blocks`, the blocks of the query map the trainer starts
/// from); reading the directory back runs the same trajectory as the config.
#[test]
fn factorised_export_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg_path = write(tmp.path(), "f.toml", FACTORISED);
    let out = tmp.path().join("data");
    let o = tokensel(&["data", "--config", s(&cfg_path), "--out", s(&out)]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    let printed = String::from_utf8_lossy(&o.stdout);
    assert!(
        printed.contains("initial blocks W_Q0, W_K0, b_Q0, b_K0, p0"),
        "{printed}"
    );
    let cfg = Config::from_file(&cfg_path).unwrap();
    let blocks = initial_blocks(&cfg);
    let names: Vec<&str> = blocks.iter().map(|b| b.0).collect();
    assert_eq!(names, ["W_Q", "W_K", "b_Q", "b_K", "p"]);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["w0"], "none");
    assert!(!out.join("W0.npy").exists());
    for (name, shape, values) in &blocks {
        let want: &[usize] = match *name {
            "W_Q" | "W_K" => &[3, 24],
            "b_Q" | "b_K" => &[3],
            _ => &[24],
        };
        assert_eq!(shape, want, "{name}");
        let file = format!("{name}0");
        assert_eq!(manifest["arrays"][&file]["shape"], serde_json::json!(want));
        let a: ArrayD<f64> = read_npy(out.join(format!("{file}.npy"))).unwrap();
        assert_eq!(a.shape(), want, "{file}");
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(a.as_slice().unwrap()), bits(values), "{file}");
        assert!(values.iter().any(|x| *x != 0.0), "{file} is drawn");
    }
    let from_config = digest(&tokensel(&[
        "run",
        "--quiet",
        "--json",
        "--config",
        s(&cfg_path),
    ]));
    let from_data = digest(&tokensel(&["run", "--quiet", "--json", "--data", s(&out)]));
    assert_eq!(from_data, from_config);
}

/// A data directory whose W_K0 has another shape than the config's factorised map
/// declares is refused before any work with exit code 2, naming the array and the
/// declared shape: a generated set with a coherent manifest (shape and SHA-256 edited to
/// match), one whose file alone was replaced (its NPY header read), and a supplied set.
/// The same files with the right shape are taken.
#[test]
fn a_wrong_shaped_block_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg_path = write(tmp.path(), "f.toml", FACTORISED);
    let cfg = Config::from_file(&cfg_path).unwrap();
    let generated = tmp.path().join("gen");
    let o = tokensel(&["data", "--config", s(&cfg_path), "--out", s(&generated)]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    // supplied: eta = 0 (the labels final), written by the library's export
    let cfg0 = Config {
        eta: 0.0,
        ..cfg.clone()
    };
    let supplied = tmp.path().join("sup");
    std::fs::create_dir_all(&supplied).unwrap();
    for (name, bytes) in supplied_files(&cfg0, &Dataset::generate(&cfg)) {
        std::fs::write(supplied.join(name), bytes).unwrap();
    }
    let run = |dir: &Path| tokensel(&["run", "--quiet", "--json", "--data", s(dir)]);
    assert_eq!(
        code(&run(&supplied)),
        Some(0),
        "{}",
        stderr(&run(&supplied))
    );
    let wrong = npy_f64(&[2, 24], &[0.25; 48]);
    for (dir, manifest) in [(&generated, true), (&supplied, true), (&generated, false)] {
        let copy = tmp.path().join(format!(
            "bad-{}-{manifest}",
            dir.file_name().unwrap().to_str().unwrap()
        ));
        std::fs::create_dir_all(&copy).unwrap();
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
        }
        replace(&copy, "W_K0", &wrong, &[2, 24], manifest);
        let o = run(&copy);
        let err = stderr(&o);
        assert_eq!(code(&o), Some(2), "{err}");
        assert!(err.contains("W_K0"), "{err}");
        assert!(err.contains("[2, 24]"), "{err}");
        assert!(
            err.contains("declares block `W_K` of shape [3, 24]"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// A generated data directory whose block NPY was replaced by an array of the right
/// shape and other values, with the manifest's SHA-256 fixed up to the new file: refused
/// before any work (exit 2), the message saying what was seen (the file agrees with the
/// manifest, and its content is not the array config.toml generates), not guessing a
/// cause ("config.toml edited, or another tokensel version" before).
#[test]
fn an_edited_block_with_its_sha_fixed_up_is_named_by_what_was_seen() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg_path = write(tmp.path(), "f.toml", FACTORISED);
    let dir = tmp.path().join("gen");
    let o = tokensel(&["data", "--config", s(&cfg_path), "--out", s(&dir)]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    replace(
        &dir,
        "W_K0",
        &npy_f64(&[3, 24], &[0.25; 72]),
        &[3, 24],
        true,
    );
    let o = tokensel(&["run", "--quiet", "--json", "--data", s(&dir)]);
    let err = stderr(&o);
    assert_eq!(code(&o), Some(2), "{err}");
    for word in [
        "W_K0.npy",
        "agrees with the manifest's SHA-256",
        "is not the array config.toml generates",
    ] {
        assert!(err.contains(word), "{word}: {err}");
    }
    assert!(!err.contains("config.toml edited"), "{err}");
}

/// A twin run of `cfg` stopped after step 4 (state saved every 2 steps): its state file.
fn saved_state(dir: &Path, cfg: &Path) -> PathBuf {
    let state = dir.join("state.json");
    let o = twin(cfg, &state, &["--stop-after", "4"]);
    assert_eq!(code(&o), Some(3), "{}", stderr(&o));
    state
}

/// Re-sign an edited state (its `sha256` made to match its content again), as an
/// adversary would.
fn resign(m: &mut serde_json::Map<String, serde_json::Value>) -> String {
    m.remove("sha256");
    let body = serde_json::Value::Object(m.clone()).to_string();
    m.insert("sha256".into(), sha256_hex(body.as_bytes()).into());
    serde_json::Value::Object(m.clone()).to_string()
}

/// A state edited by `edit` (and re-signed) is refused on resume with exit code 2 and a
/// message holding every one of `words`.
fn refused(
    cfg: &Path,
    state: &Path,
    edit: impl Fn(&mut serde_json::Map<String, serde_json::Value>),
    words: &[&str],
) {
    let text = std::fs::read_to_string(state).unwrap();
    let serde_json::Value::Object(mut m) = serde_json::from_str(&text).unwrap() else {
        panic!("a state is an object")
    };
    edit(&mut m);
    let bad = state.with_file_name("edited.json");
    std::fs::write(&bad, resign(&mut m)).unwrap();
    let o = twin(cfg, &bad, &["--resume"]);
    let err = stderr(&o);
    assert_eq!(code(&o), Some(2), "{words:?}: {err}");
    for w in words {
        assert!(err.contains(w), "{w}: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

/// Set entry `k` of `values.<key>` to `v`.
fn set_value(m: &mut serde_json::Map<String, serde_json::Value>, key: &str, k: usize, v: &str) {
    m["values"][key][k] = v.into();
}

/// A state with an unknown extra key (in `values`, or beside them) is refused by name;
/// a NaN or an infinity in p, in a factorised block or in Adam's first moment is
/// refused when the state is read (exit code 2, naming the entry), not at the first
/// step (exit code 3, before the fix). The unedited states resume (exit code 0).
#[test]
fn state_files_refuse_unknown_keys_and_non_finite_values() {
    let tmp = tempfile::tempdir().unwrap();
    let configs = [
        // p-mode GD: values `p` only
        (
            "gd",
            "d = 20\nn_train = 4\nn_test = 4\nmu_norm = 5.0\nsteps = 8\n",
        ),
        // Adam in joint mode: p, W and their moments
        (
            "adam",
            "d = 12\nn_train = 4\nn_test = 4\nmu_norm = 5.0\nsteps = 8\nmode = \"joint\"\n\
             [init]\np = \"gaussian\"\nw = \"kaiming_uniform\"\n[optimizer]\nkind = \"adam\"\n",
        ),
        // the factorised map's blocks, by their state names
        ("fac", FACTORISED),
    ];
    let runs: Vec<(PathBuf, PathBuf)> = configs
        .iter()
        .map(|(name, text)| {
            let dir = tmp.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            let cfg = write(&dir, "cfg.toml", text);
            let st = saved_state(&dir, &cfg);
            (cfg, st)
        })
        .collect();
    type Map = serde_json::Map<String, serde_json::Value>;
    /// (the run whose state is edited, the edit, the words of the refusal)
    type Case = (usize, fn(&mut Map), &'static [&'static str]);
    let cases: [Case; 9] = [
        (
            0,
            |m| {
                let p = m["values"]["p"].clone();
                m["values"]
                    .as_object_mut()
                    .unwrap()
                    .insert("W_extra".into(), p);
            },
            &["unknown key `W_extra`", "holds p only"],
        ),
        (
            0,
            |m| {
                m.insert("note".into(), "hello".into());
            },
            &["unknown field `note`"],
        ),
        (
            0,
            |m| set_value(m, "p", 3, "@NaN@"),
            &["`p` entry 3 is NaN: a state's parameters and Adam moments are finite numbers"],
        ),
        (
            0,
            |m| set_value(m, "p", 0, "-@Inf@"),
            &["`p` entry 0 is -inf"],
        ),
        // a finite number as written, past the twin's exponent range (16^1000000000):
        // it reads as inf, said as written (it was reported as "inf")
        (
            0,
            |m| set_value(m, "p", 0, "1@1000000000"),
            &[
                "`p` entry 0 is `1@1000000000` (base 16)",
                "past the exponent range of the state's mpfr arithmetic",
            ],
        ),
        (
            1,
            |m| set_value(m, "adam.m.p", 1, "@NaN@"),
            &["`adam.m.p` entry 1 is NaN"],
        ),
        (
            1,
            |m| set_value(m, "W", 5, "@NaN@"),
            &["`W` entry 5 is NaN"],
        ),
        (
            2,
            |m| set_value(m, "factorised.W_K", 2, "@NaN@"),
            &["`factorised.W_K` entry 2 is NaN"],
        ),
        (
            2,
            |m| {
                let p = m["values"]["factorised.p"].clone();
                m["values"].as_object_mut().unwrap().insert("p".into(), p);
            },
            &["unknown key `p`", "factorised.W_Q"],
        ),
    ];
    for (run, edit, words) in cases {
        let (cfg, st) = &runs[run];
        refused(cfg, st, edit, words);
    }
    // the unedited states resume
    for (cfg, st) in &runs {
        let o = twin(cfg, st, &["--resume"]);
        assert_eq!(code(&o), Some(0), "{}", stderr(&o));
    }
}

/// b_K's gradient is the structural zero, so a run's Adam moments of b_K are exactly 0:
/// a state with another value (which would move b_K under Adam, by 9e7 in the adversary's
/// run) is refused when read; so is a state whose Definition 4.1 sums are negative or
/// NaN (sums of S_i in [0, 1/4]; before the fix the twin resumed them and wrote a
/// trajectory its own readers refuse). Exit code 2, naming the entry; the unedited state
/// resumes.
#[test]
fn states_refuse_moving_b_k_moments_and_impossible_sums() {
    let tmp = tempfile::tempdir().unwrap();
    let text = format!("{FACTORISED}[optimizer]\nkind = \"adam\"\n");
    let cfg = write(tmp.path(), "cfg.toml", &text);
    let st = saved_state(tmp.path(), &cfg);
    // the saved moments of b_K are exactly 0
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&st).unwrap()).unwrap();
    for key in ["factorised.adam.m.b_K", "factorised.adam.v.b_K"] {
        let v = saved["values"][key].as_array().unwrap();
        assert_eq!(v.len(), 3, "{key}");
        assert!(v.iter().all(|x| x == "0"), "{key}: {v:?}");
    }
    type Map = serde_json::Map<String, serde_json::Value>;
    /// (the edit, the words of the refusal)
    type Case = (fn(&mut Map), &'static [&'static str]);
    let cases: [Case; 4] = [
        (
            |m| set_value(m, "factorised.adam.m.b_K", 1, "1"),
            &["`factorised.adam.m.b_K` entry 1 is 1", "structural zero"],
        ),
        (
            |m| set_value(m, "factorised.adam.v.b_K", 2, "1"),
            &["`factorised.adam.v.b_K` entry 2 is 1", "structural zero"],
        ),
        (
            |m| m["cumulative"]["clean"] = (-1000.0).into(),
            &["`cumulative.clean` is -1000", "finite and >= 0"],
        ),
        (
            |m| m["cumulative"]["noisy"] = "nan".into(),
            &["`cumulative.noisy` is NaN"],
        ),
    ];
    for (edit, words) in cases {
        refused(&cfg, &st, edit, words);
    }
    let o = twin(&cfg, &st, &["--resume"]);
    assert_eq!(code(&o), Some(0), "{}", stderr(&o));
}
