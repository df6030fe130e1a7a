//! Fuzzing every file tokensel reads. In process: random text to the config and
//! trajectory parsers. Through the command line, one target per file-reading command
//! and file kind (config, claims, grid TOML, grid directory and cell files, trajectory,
//! compare report, external JSON, external NPZ with lying headers, data directory and
//! manifest, twin state): random files, valid files with bytes replaced, numbers
//! replaced by extreme ones, cut short, or cut out; every exit must be 0-3 (never a
//! panic, 101, or an abort, 134) and no process may hang (each is killed after
//! [`HANG`]).
//!
//! `TOKENSEL_FUZZ_CASES=N` runs N cases per command-line target (default
//! [`CI_CASES`], a few dozen: about a minute for all targets on 2 cores).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use proptest::prelude::*;
use sha2::{Digest, Sha256};
use tokensel::config::Config;
use tokensel::io::trajectory::Trajectory;

mod common;
use common::npy::{external_header, f64_bytes, npy, npz};
use common::{stderr, tokensel, tokensel_within};

const VALID: &str =
    "seed = 3\nd = 40\nn_train = 5\neta = 0.2\n[layout]\ntokens = 8\n[init]\np = \"gaussian\"\n";

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_the_parsers(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = Config::from_toml_str(&text, Path::new("fuzz"));
        let _ = Trajectory::from_json(&text, Path::new("fuzz"));
    }

    /// Mutating one byte of a valid config, or truncating it, gives a config or a typed
    /// input error; whatever parses survives a round trip through `to_toml` unchanged
    /// (so the printed config of a run, `tokensel config`, reproduces it).
    #[test]
    fn mutated_configs_parse_or_fail_cleanly(pos in 0usize..VALID.len(), byte in any::<u8>(), cut in 0usize..VALID.len()) {
        let mut b = VALID.as_bytes().to_vec();
        b[pos] = byte;
        for text in [String::from_utf8_lossy(&b).into_owned(), VALID[..cut].to_string()] {
            match Config::from_toml_str(&text, Path::new("fuzz")) {
                Ok(cfg) => {
                    let again = Config::from_toml_str(&cfg.to_toml(), Path::new("again"));
                    prop_assert_eq!(again.ok(), Some(cfg));
                }
                Err(e) => prop_assert!(e.is_input_error() || e.is_stopped_run(), "{}", e),
            }
        }
    }
}

/// Truncated and corrupted trajectory files are refused with a parse error.
#[test]
fn corrupted_trajectories_are_refused() {
    let cfg = Config {
        d: 10,
        n_train: 3,
        n_test: 3,
        steps: 5,
        ..Config::default()
    };
    let data = tokensel::data::Dataset::generate(&cfg);
    let t = tokensel::train::Trainer::run(&cfg, &data, tokensel::arith::F64, &mut |_| {}).unwrap();
    let text = t.to_json();
    assert_eq!(Trajectory::from_json(&text, Path::new("t")).unwrap(), t);
    for cut in [0, 1, text.len() / 3, text.len() - 2] {
        let e = Trajectory::from_json(&text[..cut], Path::new("t")).unwrap_err();
        assert!(e.is_input_error(), "{e}");
    }
    let wrong = text.replace("tokensel-trajectory/2", "tokensel-trajectory/1");
    let e = Trajectory::from_json(&wrong, Path::new("t")).unwrap_err();
    assert!(e.to_string().contains("format"), "{e}");
}

/// Cases per command-line target in CI.
const CI_CASES: u32 = 24;

/// A process still running after this long hangs (a tiny run takes well under a second;
/// the margin is for a loaded machine).
const HANG: Duration = Duration::from_secs(120);

fn cases() -> u32 {
    std::env::var("TOKENSEL_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_CASES)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Numbers put in place of a number of a valid file: extremes, non-finite spellings,
/// other types.
const NUMBERS: [&str; 16] = [
    "0",
    "-1",
    "1",
    "2",
    "7",
    "0.5",
    "1e308",
    "1e999",
    "-1e-320",
    "18446744073709551616",
    "4611686018427387904",
    "\"inf\"",
    "\"nan\"",
    "null",
    "[]",
    "{}",
];

/// One change to a valid file.
#[derive(Debug, Clone)]
enum Edit {
    /// Replace the file by random bytes.
    Random(Vec<u8>),
    /// Replace bytes (positions modulo the length).
    Bytes(Vec<(usize, u8)>),
    /// Replace the k-th number (modulo the count) by one of [`NUMBERS`].
    Number(usize, usize),
    /// Keep the first bytes (a fraction in 1/1000 of the length).
    Truncate(usize),
    /// Cut out a range (start and length in 1/1000 of the length).
    Cut(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        1 => proptest::collection::vec(any::<u8>(), 0..300).prop_map(Edit::Random),
        3 => proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4).prop_map(Edit::Bytes),
        4 => (any::<usize>(), 0..NUMBERS.len()).prop_map(|(k, n)| Edit::Number(k, n)),
        1 => (0usize..1000).prop_map(Edit::Truncate),
        1 => (0usize..1000, 0usize..200).prop_map(|(a, b)| Edit::Cut(a, b)),
    ]
}

/// Byte ranges of the numbers in `bytes` (digits with a sign, point and exponent).
fn numbers(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < bytes.len() {
        let starts = bytes[k].is_ascii_digit()
            && (k == 0 || !(bytes[k - 1].is_ascii_alphanumeric() || bytes[k - 1] == b'_'));
        if starts {
            let mut end = k;
            while end < bytes.len()
                && (bytes[end].is_ascii_digit() || b".eE+-".contains(&bytes[end]))
            {
                end += 1;
            }
            let start = if k > 0 && bytes[k - 1] == b'-' {
                k - 1
            } else {
                k
            };
            out.push((start, end));
            k = end;
        } else {
            k += 1;
        }
    }
    out
}

impl Edit {
    fn apply(&self, valid: &[u8]) -> Vec<u8> {
        let n = valid.len().max(1);
        match self {
            Edit::Random(b) => b.clone(),
            Edit::Bytes(changes) => {
                let mut b = valid.to_vec();
                for &(pos, byte) in changes {
                    if !b.is_empty() {
                        let k = pos % b.len();
                        b[k] = byte;
                    }
                }
                b
            }
            Edit::Number(k, choice) => {
                let spans = numbers(valid);
                if spans.is_empty() {
                    return valid.to_vec();
                }
                let (a, e) = spans[k % spans.len()];
                [&valid[..a], NUMBERS[*choice].as_bytes(), &valid[e..]].concat()
            }
            Edit::Truncate(f) => valid[..valid.len() * f / 1000].to_vec(),
            Edit::Cut(a, len) => {
                let start = (n * a / 1000).min(valid.len());
                let end = (start + n * len / 1000).min(valid.len());
                [&valid[..start], &valid[end..]].concat()
            }
        }
    }
}

/// Run a command on a fuzzed input: an exit status 0-3, no panic, no hang. With
/// `TOKENSEL_FUZZ_LOG=FILE`, each command and its exit status is appended to FILE (to
/// see how deep the cases reach).
fn run(args: &[&str]) -> Result<(), TestCaseError> {
    let o = tokensel_within(args, HANG);
    if let Ok(log) = std::env::var("TOKENSEL_FUZZ_LOG") {
        use std::io::Write;
        let code = o.as_ref().map(|o| format!("{:?}", o.status.code()));
        let first = o.as_ref().map_or(String::new(), |o| {
            stderr(o)
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(100)
                .collect()
        });
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(log)
        {
            let _ = writeln!(f, "{} {} {:?}\t{}", args[0], args[1], code, first);
        }
    }
    let Some(o) = o else {
        return Err(TestCaseError::fail(format!("{args:?} hangs")));
    };
    let err = stderr(&o);
    prop_assert!(
        matches!(o.status.code(), Some(0..=3)),
        "{:?}: {:?}: {}",
        args,
        o.status,
        err
    );
    prop_assert!(!err.contains("panicked"), "{:?}: {}", args, err);
    Ok(())
}

/// The valid files every target starts from, computed once (read into memory; the
/// directory they were made in is removed).
struct Fixtures {
    config: Vec<u8>,
    claims: Vec<u8>,
    grid_toml: Vec<u8>,
    /// A merged grid directory's grid.json and cell files (relative paths).
    grid_dir: BTreeMap<String, Vec<u8>>,
    trajectory: Vec<u8>,
    report: Vec<u8>,
    external_json: Vec<u8>,
    external_npz: Vec<u8>,
    /// A data export (file name, bytes).
    data: BTreeMap<String, Vec<u8>>,
    state: Vec<u8>,
}

/// A tiny run: every command on it takes well under a second.
const TINY: &str = "d = 20\nn_train = 4\nn_test = 4\nmu_norm = 5.0\nsteps = 3\n";

fn ok(o: &std::process::Output) {
    assert!(o.status.success(), "fixture: {}", stderr(o));
}

fn p(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_string()
}

fn files_under(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for e in std::fs::read_dir(dir.join(&rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                todo.push(r);
            } else {
                out.insert(
                    r.to_str().unwrap().to_string(),
                    std::fs::read(e.path()).unwrap(),
                );
            }
        }
    }
    out
}

fn fixtures() -> &'static Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let cfg = p(dir, "tiny.toml");
        std::fs::write(&cfg, TINY).unwrap();
        ok(&tokensel(&["run", "--quiet", "--config", &cfg, "--out", &p(dir, "t")]));
        let report = tokensel(&[
            "compare", "--quiet", "--json", "--prec", "64", "--config", &cfg,
        ]);
        ok(&report);
        let grid_toml = "steps = 3\nseeds = \"0..2\"\n[config]\nd = 20\nn_train = 4\nn_test = 4\n[axes]\nmu_norm = [3.0, 5.0]\nd = [20, 24]\n";
        std::fs::write(p(dir, "grid.toml"), grid_toml).unwrap();
        let g = p(dir, "g");
        ok(&tokensel(&[
            "grid",
            "--quiet",
            "--grid",
            &p(dir, "grid.toml"),
            "--out",
            &g,
        ]));
        std::fs::remove_dir_all(dir.join("g/merged")).unwrap();
        ok(&tokensel(&["data", "--config", &cfg, "--out", &p(dir, "data")]));
        let state = p(dir, "state.json");
        let o = tokensel(&[
            "twin",
            "--quiet",
            "--prec",
            "64",
            "--config",
            &cfg,
            "--steps",
            "6",
            "--state",
            &state,
            "--save-every",
            "2",
            "--stop-after",
            "2",
        ]);
        assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
        let p0: ndarray::Array1<f64> =
            ndarray_npy::read_npy(dir.join("data/p0.npy")).unwrap();
        let p0 = p0.to_vec();
        let external_json = serde_json::json!({
            "format": "tokensel-external/2",
            "dtype": "float64",
            "config": {"d": 20, "steps": 3},
            "steps": [0],
            "p": [p0],
        })
        .to_string()
        .into_bytes();
        let external_npz = npz(
            &[
                ("header", external_header()),
                ("steps", npy("<i8", &[1], &0i64.to_le_bytes())),
                ("p", npy("<f8", &[1, 20], &f64_bytes(&p0))),
            ],
            true,
        );
        let claims = "[[claim]]\nname = \"tiny\"\nconfig = { d = 20, n_train = 4, n_test = 4, steps = 3 }\nsource = \"run\"\nquantity = \"train_accuracy\"\nop = \">=\"\nbound = 0.0\n";
        let f = Fixtures {
            config: TINY.as_bytes().to_vec(),
            claims: claims.as_bytes().to_vec(),
            grid_toml: grid_toml.as_bytes().to_vec(),
            grid_dir: files_under(&dir.join("g")),
            trajectory: std::fs::read(dir.join("t/trajectory.json")).unwrap(),
            report: report.stdout,
            external_json,
            external_npz,
            data: files_under(&dir.join("data")),
            state: std::fs::read(&state).unwrap(),
        };
        // every fixture is valid: the targets start from accepted input
        let check = tempfile::tempdir().unwrap();
        let c = check.path();
        write_all(c, "data", &f.data);
        std::fs::write(c.join("ext.json"), &f.external_json).unwrap();
        std::fs::write(c.join("ext.npz"), &f.external_npz).unwrap();
        for ext in ["ext.json", "ext.npz"] {
            ok(&tokensel(&[
                "judge",
                "--quiet",
                &p(c, ext),
                "--data",
                &p(c, "data"),
            ]));
        }
        std::fs::write(c.join("claims.toml"), &f.claims).unwrap();
        ok(&tokensel(&["check", &p(c, "claims.toml")]));
        f
    })
}

fn write_all(dir: &Path, sub: &str, files: &BTreeMap<String, Vec<u8>>) {
    for (name, bytes) in files {
        let path = dir.join(sub).join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

/// Re-sign an edited state (its `sha256` made to match its content again), so the
/// fuzzing reaches past the digest check into the state's fields.
fn resign(bytes: &[u8]) -> Vec<u8> {
    let Ok(serde_json::Value::Object(mut m)) = serde_json::from_slice(bytes) else {
        return bytes.to_vec();
    };
    m.remove("sha256");
    let body = serde_json::Value::Object(m.clone()).to_string();
    let digest: String = Sha256::digest(body.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    m.insert("sha256".into(), digest.into());
    serde_json::Value::Object(m).to_string().into_bytes()
}

/// An NPY member whose header may lie: a dtype from a list, a shape whose dimensions
/// may be far larger than the data, and a data length of its own.
fn lying_npy() -> impl Strategy<Value = Vec<u8>> {
    let descr = prop::sample::select(vec![
        "<f8", "<f4", "<i8", "<u8", "|u1", "<i2", ">f8", "|b1", "<c16", "xyz",
    ]);
    let dim = prop_oneof![
        4 => 0usize..25,
        1 => Just(usize::MAX),
        1 => Just(1usize << 40),
        1 => Just(1usize << 61),
    ];
    (
        descr,
        proptest::collection::vec(dim, 0..4),
        proptest::collection::vec(any::<u8>(), 0..400),
    )
        .prop_map(|(d, shape, data)| npy(d, &shape, &data))
}

proptest! {
    #![proptest_config(config())]

    /// `run --config FILE` on a fuzzed config.
    #[test]
    fn fuzz_config(e in edit()) {
        let tmp = tempfile::tempdir().unwrap();
        let f = p(tmp.path(), "c.toml");
        std::fs::write(&f, e.apply(&fixtures().config)).unwrap();
        run(&["run", "--quiet", "--config", &f])?;
    }

    /// `check FILE` on a fuzzed claims file.
    #[test]
    fn fuzz_claims(e in edit()) {
        let tmp = tempfile::tempdir().unwrap();
        let f = p(tmp.path(), "claims.toml");
        std::fs::write(&f, e.apply(&fixtures().claims)).unwrap();
        run(&["check", &f])?;
    }

    /// `grid --grid FILE --out DIR` on a fuzzed grid TOML.
    #[test]
    fn fuzz_grid_toml(e in edit()) {
        let tmp = tempfile::tempdir().unwrap();
        let f = p(tmp.path(), "grid.toml");
        std::fs::write(&f, e.apply(&fixtures().grid_toml)).unwrap();
        run(&["grid", "--quiet", "--grid", &f, "--out", &p(tmp.path(), "g")])?;
    }

    /// `grid merge DIR` (and a resumed `grid --out DIR`) on a grid directory whose
    /// grid.json or one cell file is fuzzed.
    #[test]
    fn fuzz_grid_dir(e in edit(), which in any::<usize>(), resume in any::<bool>()) {
        let tmp = tempfile::tempdir().unwrap();
        let files = &fixtures().grid_dir;
        write_all(tmp.path(), "g", files);
        let name = files.keys().nth(which % files.len()).unwrap();
        let path = tmp.path().join("g").join(name);
        std::fs::write(&path, e.apply(&files[name])).unwrap();
        let g = p(tmp.path(), "g");
        if resume {
            std::fs::write(tmp.path().join("grid.toml"), &fixtures().grid_toml).unwrap();
            run(&["grid", "--quiet", "--grid", &p(tmp.path(), "grid.toml"), "--out", &g])?;
        } else {
            run(&["grid", "merge", &g])?;
        }
    }

    /// `diff` and `plot` on a fuzzed trajectory.
    #[test]
    fn fuzz_trajectory(e in edit()) {
        let tmp = tempfile::tempdir().unwrap();
        let f = p(tmp.path(), "t.json");
        let good = p(tmp.path(), "good.json");
        std::fs::write(&f, e.apply(&fixtures().trajectory)).unwrap();
        std::fs::write(&good, &fixtures().trajectory).unwrap();
        run(&["diff", &f, &good])?;
        run(&["plot", &f, "--out", &p(tmp.path(), "t.svg")])?;
    }

    /// `plot` on a fuzzed compare report.
    #[test]
    fn fuzz_compare_report(e in edit()) {
        let tmp = tempfile::tempdir().unwrap();
        let f = p(tmp.path(), "report.json");
        std::fs::write(&f, e.apply(&fixtures().report)).unwrap();
        run(&["plot", &f, "--out", &p(tmp.path(), "r.png")])?;
    }

    /// `judge` on a fuzzed external JSON trajectory.
    #[test]
    fn fuzz_external_json(e in edit()) {
        let tmp = tempfile::tempdir().unwrap();
        write_all(tmp.path(), "data", &fixtures().data);
        let f = p(tmp.path(), "ext.json");
        std::fs::write(&f, e.apply(&fixtures().external_json)).unwrap();
        run(&["judge", "--quiet", &f, "--data", &p(tmp.path(), "data")])?;
    }

    /// `judge` on an external NPZ: the valid archive's bytes fuzzed, or members whose NPY
    /// headers lie (shapes larger than the data, wrong dtypes, truncated members).
    #[test]
    fn fuzz_external_npz(
        e in edit(),
        lie in proptest::option::of((0usize..3, lying_npy())),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        write_all(tmp.path(), "data", &fixtures().data);
        let bytes = match lie {
            None => e.apply(&fixtures().external_npz),
            Some((k, member)) => {
                let mut members = vec![
                    ("header", external_header()),
                    ("steps", npy("<i8", &[1], &0i64.to_le_bytes())),
                    ("p", npy("<f8", &[1, 20], &f64_bytes(&[0.0; 20]))),
                ];
                members[k].1 = member;
                npz(&members, true)
            }
        };
        let f = p(tmp.path(), "ext.npz");
        std::fs::write(&f, bytes).unwrap();
        run(&["judge", "--quiet", &f, "--data", &p(tmp.path(), "data")])?;
    }

    /// `judge` on a data directory whose manifest, config.toml or one array is fuzzed.
    #[test]
    fn fuzz_data_dir(e in edit(), which in any::<usize>()) {
        let tmp = tempfile::tempdir().unwrap();
        let files = &fixtures().data;
        write_all(tmp.path(), "data", files);
        let name = files.keys().nth(which % files.len()).unwrap();
        std::fs::write(tmp.path().join("data").join(name), e.apply(&files[name])).unwrap();
        let f = p(tmp.path(), "ext.json");
        std::fs::write(&f, &fixtures().external_json).unwrap();
        run(&["judge", "--quiet", &f, "--data", &p(tmp.path(), "data")])?;
    }

    /// `twin --resume` from a fuzzed state file (re-signed or not).
    #[test]
    fn fuzz_state(e in edit(), signed in any::<bool>()) {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = p(tmp.path(), "tiny.toml");
        std::fs::write(&cfg, TINY).unwrap();
        let mut bytes = e.apply(&fixtures().state);
        if signed {
            bytes = resign(&bytes);
        }
        let f = p(tmp.path(), "state.json");
        std::fs::write(&f, bytes).unwrap();
        run(&[
            "twin", "--quiet", "--prec", "64", "--config", &cfg, "--steps", "6", "--state", &f,
            "--resume",
        ])?;
    }
}
