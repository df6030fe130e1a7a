//! Adversarial flag and config values for every command: each process exits 0, 1, 2 or
//! 3 within its timeout, never with a panic (101), an abort (134) or a signal.
//!
//! Values come from pools of edge cases (0, 1, 2^32, 2^53 + 1, 2^63 - 1, 2^63, 2^64 - 1,
//! 2^64, negatives, NaN, infinities, 1e-300, 1e308, 1e400, empty and garbage text, ranges
//! that are empty, reversed or astronomically long, shards out of range, lists with
//! empty items), combined at random over each command's flags, on a tiny base config so
//! that an accepted combination finishes quickly. Sizes are taken either small or past
//! their limits (a valid but huge amount of work, `--steps 999999999`, is work, not a
//! defect, and is not drawn). `TOKENSEL_FUZZ_CASES` sets the number of cases.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;

/// Longest a process may take (tiny configs finish in well under a second).
const TIMEOUT: Duration = Duration::from_secs(60);

const BIG: &[&str] = &[
    "0",
    "1",
    "2",
    "-1",
    "4294967296",
    "9007199254740993",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "",
    "x",
    "1e3",
    " 3",
];

const REALS: &[&str] = &[
    "0", "-0", "1", "-1", "nan", "NaN", "inf", "-inf", "1e-300", "5e-324", "1e308", "1e400", "0.5",
    "1e-8", "", "x", "1e", "0x10",
];

const SEEDS: &[&str] = &[
    "0",
    "0..4",
    "0,3,7",
    "4..2",
    "3..3",
    "0..10000000000",
    "0..18446744073709551615",
    "18446744073709551615",
    "9223372036854775807",
    "9223372036854775806..9223372036854775807",
    "1,,2",
    "-1",
    "",
    "a..b",
    "0..1001",
];

const AXES: &[&str] = &[
    "mu_norm=5,10",
    "eta=0:0.5:1e-300",
    "eta=0:0.5:0.25",
    "eta=0.5:0:0.1",
    "eta=0:1:0",
    "d=3:4:1",
    "d=9223372036854775808",
    "d=18446744073709551616",
    "d=1e400",
    "d=nan",
    "mu_norm=1e-400",
    "seed=1,2",
    "mode=1",
    "layout.relevant=1,2",
    "record.checkpoints_per_decade=4294967296",
    "n_train=9223372036854775807",
    "eta",
    "=1",
    "d=",
    "d=1:2:3:4",
];

const SHARDS: &[&str] = &[
    "1/1",
    "1/2",
    "2/2",
    "0/0",
    "3/2",
    "1/18446744073709551615",
    "18446744073709551616/1",
    "1/",
    "x",
];

const METHODS: &[&str] = &["auto", "direct", "span", "fast", ""];

const PRECS: &[&str] = &[
    "53",
    "64",
    "2",
    "0",
    "1048577",
    "4294967296",
    "53,64",
    "53,,64",
    "-1",
];

const PRESETS: &[&str] = &["balanced", "sweep", "label-noise-sweep", "", "heatmap-v1"];

/// A command's fuzzed flags: flag and its pool (`None`: a switch).
type Flags = &'static [(&'static str, Option<&'static [&'static str]>)];

const CONFIG_FLAGS: Flags = &[
    ("--seed", Some(BIG)),
    (
        "--steps",
        Some(&[
            "0",
            "1",
            "3",
            "1000000001",
            "18446744073709551615",
            "-1",
            "x",
        ]),
    ),
    ("--method", Some(METHODS)),
    ("--preset", Some(PRESETS)),
];

/// (command, its fuzzed flags, whether it takes the tiny base config).
const COMMANDS: &[(&str, Flags, bool)] = &[
    ("run", &[("--json", None)], true),
    ("config", &[], true),
    (
        "twin",
        &[
            ("--prec", Some(PRECS)),
            ("--predictor", None),
            ("--save-every", Some(BIG)),
        ],
        true,
    ),
    (
        "compare",
        &[
            ("--prec", Some(PRECS)),
            ("--tol", Some(REALS)),
            ("--twin-method", Some(METHODS)),
            ("--no-predictor", None),
        ],
        true,
    ),
    (
        "saturation",
        &[
            ("--sample", Some(BIG)),
            (
                "--points",
                Some(&["0", "1", "2", "3", "10001", "18446744073709551615", "-1"]),
            ),
            ("--prec", Some(PRECS)),
            ("--tol", Some(REALS)),
        ],
        true,
    ),
    (
        "sweep",
        &[("--etas", Some(REALS)), ("--seeds", Some(SEEDS))],
        true,
    ),
    (
        "cost",
        &[
            ("--precs", Some(PRECS)),
            (
                "--reps",
                Some(&[
                    "0",
                    "1",
                    "100001",
                    "100000000000",
                    "18446744073709551615",
                    "-1",
                ]),
            ),
            (
                "--twin-reps",
                Some(&["0", "1", "100001", "18446744073709551615"]),
            ),
            (
                "--classes",
                Some(&[
                    "2",
                    "3,4",
                    "1",
                    "0",
                    "101",
                    "18446744073709551615",
                    "-1",
                    "2,,3",
                    "",
                    "x",
                ]),
            ),
        ],
        true,
    ),
    ("data", &[], true),
    (
        "grid",
        &[
            ("--set", Some(AXES)),
            ("--seeds", Some(SEEDS)),
            ("--shard", Some(SHARDS)),
            ("--json", None),
        ],
        true,
    ),
    (
        "svm",
        &[
            (
                "--pattern",
                Some(&["optimal", "theorem", "", "c.toml", "/nonexistent.json", "."]),
            ),
            ("--out", Some(&["o.json", "", ".", "/nonexistent/o.json"])),
            ("--json", None),
        ],
        true,
    ),
    (
        "diff",
        &[
            ("--rtol", Some(REALS)),
            ("--common-only", None),
            ("--json", None),
        ],
        false,
    ),
    // `snapshot check s` (a fresh snapshot directory; the run is tiny)
    (
        "snapshot",
        &[("--rtol", Some(REALS)), ("--quiet", None)],
        true,
    ),
];

/// Config values for the tiny base config's TOML: key, pool.
const CONFIG_VALUES: &[(&str, &[&str])] = &[
    (
        "seed",
        &[
            "0",
            "9223372036854775807",
            "9223372036854775808",
            "-1",
            "1.5",
        ],
    ),
    (
        "d",
        &[
            "0",
            "1",
            "2",
            "3",
            "9223372036854775807",
            "18446744073709551616",
            "-3",
            "2.0",
        ],
    ),
    ("n_train", &["0", "1", "2", "9223372036854775807"]),
    ("n_test", &["0", "1", "9223372036854775807"]),
    (
        "mu_norm",
        &[
            "0.0",
            "-1.0",
            "1e-300",
            "1000000.0",
            "1000001.0",
            "1e308",
            "nan",
            "inf",
        ],
    ),
    ("sigma", &["0.0", "-1.0", "1e-300", "1e308", "nan", "-inf"]),
    ("rho", &["0.0", "1.0", "1.5", "-0.0", "nan"]),
    (
        "eta",
        &["0.0", "0.5", "0.9999999999999999", "1.0", "-1e-300", "nan"],
    ),
    (
        "step_size",
        &[
            "0.0",
            "1e-300",
            "1e308",
            "1.7976931348623157e308",
            "-1.0",
            "inf",
        ],
    ),
    (
        "steps",
        &["0", "1", "3", "1000000001", "9223372036854775807"],
    ),
    (
        "[record]\ncheckpoints_per_decade",
        &["0", "1", "1000", "1001", "4294967295", "4294967296"],
    ),
    (
        "[layout]\ntokens = 2\nrelevant = 1\nweak_same = 0\nweak_opposite = 0\nirrelevant",
        &["1", "0", "9223372036854775807", "18446744073709551615"],
    ),
    (
        "[layout]\ntokens = 8\nrelevant = 9223372036854775807\nweak_same = 9223372036854775807\nweak_opposite = 0\nirrelevant",
        &["10", "9", "0"],
    ),
    ("[init]\np_scale", &["0.0", "-1.0", "1e308", "nan"]),
];

/// Run `args` with a timeout; its exit code (`None`: killed by a signal).
fn run(dir: &Path, args: &[String]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokensel"))
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code(), err);
        }
        if t0.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The tiny base config plus the drawn config values (later keys of a table follow it).
fn config_text(values: &[(usize, usize)]) -> String {
    let mut top = String::from("d = 3\nn_train = 2\nn_test = 2\nsteps = 3\n");
    let mut tables = String::new();
    for &(k, v) in values {
        let (key, pool) = CONFIG_VALUES[k % CONFIG_VALUES.len()];
        let line = format!("{key} = {}\n", pool[v % pool.len()]);
        if key.starts_with('[') {
            tables += &line;
        } else {
            top += &line;
        }
    }
    top + &tables
}

fn cases() -> u32 {
    std::env::var("TOKENSEL_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(160)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// A command with random flags and a base config with random values.
    #[test]
    fn random_flags_and_config_values_never_crash(
        command in 0usize..COMMANDS.len(),
        flags in proptest::collection::vec((0usize..16, 0usize..64), 0..4),
        common in proptest::collection::vec((0usize..4, 0usize..64), 0..2),
        // most cases keep the tiny base config as it is, so that the flags are what
        // is tried; the others change one or two of its values
        values in prop_oneof![
            3 => Just(Vec::new()),
            2 => proptest::collection::vec((0usize..64, 0usize..64), 1..3),
        ],
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (name, own, config) = COMMANDS[command];
        std::fs::write(dir.join("c.toml"), config_text(&values)).unwrap();
        let mut args = vec![name.to_string()];
        if name == "diff" {
            // two saved trajectories of the tiny config
            let t = run(dir, &["run".into(), "--quiet".into(), "--config".into(), "c.toml".into(), "--out".into(), "t".into()]);
            if t.0 != Some(0) {
                return Ok(());
            }
            args.extend(["t/trajectory.json".to_string(), "t/trajectory.json".to_string()]);
        }
        if name == "snapshot" {
            args.extend(["check".to_string(), "s".to_string()]);
        }
        if config {
            args.extend(["--config".to_string(), "c.toml".to_string()]);
            for &(k, v) in &common {
                let (flag, pool) = CONFIG_FLAGS[k % CONFIG_FLAGS.len()];
                args.push(flag.to_string());
                if let Some(pool) = pool {
                    args.push(pool[v % pool.len()].to_string());
                }
            }
        }
        for &(k, v) in &flags {
            if own.is_empty() {
                break;
            }
            let (flag, pool) = own[k % own.len()];
            args.push(flag.to_string());
            if let Some(pool) = pool {
                args.push(pool[v % pool.len()].to_string());
            }
        }
        if ["run", "twin", "compare", "sweep", "grid"].contains(&name) {
            args.push("--quiet".into());
        }
        if ["data", "grid"].contains(&name) {
            args.extend(["--out".to_string(), "out".to_string()]);
        }
        let (code, err) = run(dir, &args);
        eprintln!("FUZZ {name} exit {code:?}");
        prop_assert!(
            matches!(code, Some(0..=3)),
            "{:?} with config\n{}\n→ exit {:?}: {}",
            args,
            config_text(&values),
            code,
            err
        );
        prop_assert!(!err.contains("panicked"), "{:?}: {}", args, err);
    }
}
