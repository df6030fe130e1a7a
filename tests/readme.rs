//! Every command form the README and the user guide (`docs/`, the chapters of [`DOCS`], read
//! after the README as one text, in that order) show runs, and its output holds what they
//! say (keys, values, the files written and what they contain), not only its exit code:
//! - every `text` block that follows an `sh` block is that block's last command's printed
//!   output: each of its lines is a line of what the command prints ([`printed`]);
//! - every line of the README's `sh` blocks, in README order (`cargo run --release --
//!   ARGS` as the built binary with ARGS, `python ...` with the CI's venv), each looked
//!   up in [`BLOCKS`] with the check of its output: a line added to the README without
//!   an entry fails, and so does an entry whose line left the README;
//! - every command form written inline (`` `compare --steps 30000 ...` ``,
//!   `` `diff A B [--rtol X] ...` ``, `` `--seeds 0..4` ``, ...), each looked up in
//!   [`INLINE`] with a concrete command (placeholders filled in) and its check, or
//!   covered by the block commands: every `--flag` the README writes is passed by at
//!   least one command run here;
//! - the forms in the headers of `examples/grid_parallel.sh` and `examples/grid_slurm.sh`
//!   and the README's recipe lines, run through the scripts themselves.
//!
//! Shrunk forms: where the README's own form takes minutes, the test appends a
//! documented override (fewer steps, fewer precisions, a smaller grid) and says so next
//! to the form ([`Form::shrink`]); everything else runs as written.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::stderr;

/// What a check gets: the directory the commands run in, and the command's output.
type Check = fn(&Path, &Output);

/// A README command and what its output must hold.
struct Form {
    /// The text as the README (or a script header) writes it.
    text: &'static str,
    /// How it is run: `Run` as written (or with placeholders filled in), or why not.
    how: How,
    /// Arguments appended because the form as written takes minutes (the reason is in
    /// the entry's comment).
    shrink: &'static [&'static str],
    /// The check of its output.
    check: Check,
}

/// How a form runs.
enum How {
    /// `tokensel` with these arguments.
    Tokensel(&'static [&'static str]),
    /// The README line itself (a block line: `cargo run --release --` is the binary).
    AsWritten,
    /// The README line itself, which exits with this code (a failed claim, a difference
    /// found: the README says so).
    Exits(i32),
    /// Needs PyTorch and the user's checkout of the official repository (not in CI).
    Torch,
    /// Run with exactly these arguments by another test, which checks its output.
    Elsewhere(&'static str),
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tokensel")
}

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tokensel_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("binary runs")
}

fn ok(o: &Output, what: &str) {
    assert!(o.status.success(), "`{what}` failed: {}", stderr(o));
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json_out(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is one JSON object ({e}): {}", stdout(o)))
}

fn json_file(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn has_keys(v: &serde_json::Value, keys: &[&str], what: &str) {
    for k in keys {
        assert!(v.get(k).is_some(), "{what}: no `{k}` in {v}");
    }
}

/// The run summary's documented keys (README, `run --json`).
fn summary_keys(v: &serde_json::Value) {
    has_keys(
        v,
        &[
            "train_accuracy",
            "test_accuracy",
            "train_loss",
            "steps",
            "seed",
            "selection",
            "attention",
            "n_noisy",
            "trajectory_digest",
            "config",
            "arith",
        ],
        "run --json",
    );
    for set in ["clean", "noisy"] {
        let sel = &v["selection"][set];
        let total: f64 = ["R", "W_same", "W_opposite", "I", "tie", "undecided"]
            .iter()
            .map(|g| {
                sel[g]
                    .as_f64()
                    .unwrap_or_else(|| panic!("selection.{set}.{g}: {sel}"))
            })
            .sum();
        assert!((total - 1.0).abs() < 1e-12, "{set}: {total}");
        for g in ["R", "W_same", "W_opposite", "I"] {
            assert!(v["attention"][set][g].is_number(), "attention.{set}.{g}");
        }
    }
    let digest = v["trajectory_digest"].as_str().unwrap();
    assert!(digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()));
}

/// The readable run report (`run`, `twin` without `--json`).
fn run_report(o: &Output, steps: &str) {
    let text = stdout(o);
    let head = format!("{steps} steps");
    for needle in [
        head.as_str(),
        "train accuracy",
        "test accuracy",
        "train loss",
        "top-token group",
        "mean attention mass",
        "trajectory digest",
    ] {
        assert!(text.contains(needle), "no `{needle}`: {text}");
    }
}

/// A trajectory directory: trajectory.json (format, config, one CSV row per checkpoint).
fn trajectory_dir(dir: &Path, steps: u64) -> serde_json::Value {
    let t = json_file(&dir.join("trajectory.json"));
    assert_eq!(t["format"], "tokensel-trajectory/2");
    assert_eq!(t["config"]["steps"], steps);
    let checkpoints = t["checkpoints"].as_array().unwrap();
    assert_eq!(checkpoints.last().unwrap()["step"], steps);
    let csv = std::fs::read_to_string(dir.join("trajectory.csv")).unwrap();
    assert_eq!(csv.lines().count(), checkpoints.len() + 1);
    t
}

/// The compare report's documented `--json` keys.
fn compare_keys(v: &serde_json::Value) {
    has_keys(
        v,
        &[
            "prec_bits",
            "steps",
            "formulation",
            "method",
            "method_auto",
            "twin_method",
            "d_space_compared_at",
            "max_rel_err",
            "first_exceed",
            "error_ulps",
            "saturation",
            "absorption",
            "predictor",
            "judge_out_of_range",
            "checkpoints",
        ],
        "compare --json",
    );
    has_keys(
        &v["saturation"],
        &["detected", "step", "score_gap", "quantity"],
        "compare --json saturation",
    );
    for q in [
        "q",
        "scores",
        "attention",
        "rest",
        "output",
        "grad_q",
        "loss",
    ] {
        assert!(v["max_rel_err"][q].is_number(), "max_rel_err.{q}: {v}");
    }
}

/// The readable compare table.
fn compare_table(o: &Output, steps: &str) {
    let text = stdout(o);
    assert!(text.contains(&format!("{steps} steps")), "{text}");
    for q in [
        "q ",
        "scores",
        "attention",
        "rest",
        "output",
        "grad_q",
        "loss",
    ] {
        assert!(text.contains(&format!("\n  {q}")), "no row `{q}`: {text}");
    }
    assert!(text.contains("verdict: f64 stays within 1e-8"), "{text}");
}

/// The grid outputs of a merged two-axis grid directory, with `runs` runs: `grid.json`
/// and `cells/` in DIR, the merged set in `DIR/merged/`.
fn grid_dir(dir: &Path, runs: u64) -> serde_json::Value {
    assert!(
        dir.join("grid.json").exists(),
        "{}: no grid.json",
        dir.display()
    );
    let cells = std::fs::read_dir(dir.join("cells")).unwrap().count() as u64;
    assert_eq!(cells, runs);
    let dir = &dir.join("merged");
    for f in [
        "grid.csv",
        "summary.csv",
        "summary.json",
        "heatmap.svg",
        "heatmap.png",
    ] {
        assert!(dir.join(f).exists(), "{}: no {f}", dir.display());
    }
    let s = json_file(&dir.join("summary.json"));
    assert_eq!(s["runs_ok"], runs, "{s}");
    assert_eq!(s["runs_missing"], 0);
    let csv = std::fs::read_to_string(dir.join("grid.csv")).unwrap();
    assert_eq!(csv.lines().count() as u64, runs + 1);
    let png = std::fs::read(dir.join("heatmap.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    s
}

/// The outputs of two grid directories are the same bytes.
fn same_grid(a: &Path, b: &Path) {
    let (a, b) = (&a.join("merged"), &b.join("merged"));
    for f in [
        "grid.csv",
        "summary.csv",
        "summary.json",
        "heatmap.svg",
        "heatmap.png",
    ] {
        assert_eq!(a.join(f).exists(), b.join(f).exists(), "{f}");
        if !a.join(f).exists() {
            continue; // heat maps: two-axis grids only
        }
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f}: {} vs {}",
            a.display(),
            b.display()
        );
    }
}

fn none(_: &Path, _: &Output) {}

/// `certify`'s readable certificate: decided, with the step-0 tie reported as a tie.
fn certificate_text(o: &Output) {
    let out = stdout(o);
    assert!(out.contains("verdict: DECIDED"), "{out}");
    assert!(out.contains("proved ties at 1 step(s), first 0"), "{out}");
}

/// The README's `sh` block lines, each with its check (see the module docs).
const BLOCKS: &[Form] = &[
    Form {
        text: "cargo run --release -- protocol --config examples/protocol.toml",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let text = stdout(o);
            for needle in [
                "fine-tuning protocol (Section I) on generated tokens: K = 3",
                "p-mode attention reset and trained on a noisy block of n = 20 (eta 0.2",
                "adamw (betas 0.9/0.999, eps 1e-8, wd 0, linear, clip 1, batch 16), step size 5e-5",
                "4000 steps (2000 epochs of 2 batches)",
                "yes (training accuracy 1)",
                "3 of 3 seeds fit their noisy labels",
            ] {
                assert!(text.contains(needle), "{needle}: {text}");
            }
            // the README's ranges: test accuracy 0.63-0.67 after phase 1, 0.66-0.71 after
            // phase 2, training losses 0.048-0.072
            for seed in ["42", "314", "2718"] {
                let row = text
                    .lines()
                    .find(|l| l.trim_start().starts_with(&format!("{seed} ")))
                    .unwrap_or_else(|| panic!("seed {seed}'s row: {text}"));
                let cells: Vec<f64> = row
                    .split_whitespace()
                    .filter_map(|c| c.parse::<f64>().ok())
                    .collect();
                // seed, head acc, base test, train loss, train acc, noisy fit, test, ...
                let (base, loss, test) = (cells[2], cells[3], cells[6]);
                assert!((0.63..=0.67).contains(&base), "{row}");
                assert!((0.048..=0.073).contains(&loss), "{row}");
                assert!((0.65..=0.71).contains(&test), "{row}");
            }
        },
    },
    Form {
        text: "cargo run --release -- check claims/protocol.toml",
        how: How::Elsewhere(
            "tests/claims.rs::protocol_claims_read_a_seeds_row runs `check claims/protocol.toml --seeds 0 --json` (every claim measured on one seed, a value equal to the protocol's row); the ten-seed check, about 30 s here, is this command, run by hand for the README's numbers: it exits 1",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "venv/bin/python examples/protocol_real.py --mode p --out protocol_real.png",
        how: How::Elsewhere(
            "not in CI (needs scikit-learn, mnist1d and matplotlib, 11.5 min of runs): run once for the README's table and figure; python/tests/test_protocol.py runs it at small sizes where those are installed",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- run --config examples/adamw.toml",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            run_report(o, "2000");
            let text = stdout(o);
            for needle in [
                "adamw (lr 5e-5, betas 0.9/0.999, eps 1e-8, wd 0, linear, clip 1, batch 16)",
                "direct step (auto)",
                "alpha = 5e-5",
            ] {
                assert!(text.contains(needle), "{needle}: {text}");
            }
        },
    },
    Form {
        text: "cargo run --release -- run --config examples/normalized_gd.toml",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            run_report(o, "2000");
            let text = stdout(o);
            for needle in [
                "normalized-gd (eps = 1e-9)",
                "alpha = 1e-1",
                "train accuracy   1.0000",
            ] {
                assert!(text.contains(needle), "{needle}: {text}");
            }
        },
    },
    Form {
        text: "cargo run --release -- run --config examples/factorised.toml",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            run_report(o, "2000");
            let text = stdout(o);
            for needle in [
                "factorised query-key (m = 16, no biases, W_Q, W_K trained, p fixed)",
                "train accuracy   1.0000",
                "test accuracy    0.9990",
                "clean (16)                  1.0000      0.0000      0.0000      0.0000",
                "noisy (4)                   0.0000      0.0000      1.0000      0.0000",
            ] {
                assert!(text.contains(needle), "{needle}: {text}");
            }
        },
    },
    Form {
        text: "cargo run --release -- certify --config examples/factorised.toml --steps 10",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let text = stdout(o);
            for needle in [
                "ball arithmetic at 128 bits, direct step, 10 steps, seed 0, factorised query-key (m = 16, no biases, W_Q, W_K trained, p fixed), d = 2000",
                "train accuracy  20/20 = 1.0000 (certified)",
                "test accuracy   1000/1000 = 1.0000 (certified)",
                "clean samples' top token: R 16/16",
                "noisy samples' top token: W_opposite 3/4, I 1/4",
                "every decision proved",
                "note: the factorised query map ([factorised]) runs in the direct step only",
                "q = W_K^T W_Q p (no biases)",
                "verdict: DECIDED",
            ] {
                assert!(text.contains(needle), "{needle}: {text}");
            }
            // no biases: the note says nothing of b_Q or b_K
            assert!(!text.contains("b_K") && !text.contains("b_Q"), "{text}");
        },
    },
    // docs/models.md, the real-setting model: the official check, a one-off (the
    // example writes files only the PyTorch script reads; examples/real_setting_pass.rs
    // is built by `cargo clippy --all-targets` and its pass tested by
    // tests/real_setting.rs)
    Form {
        text: "cargo run --example real_setting_pass -- out=rs-check d=32 tokens=8 classes=3 n=20 steps=5 lr=0.5",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "python examples/real_setting_official.py rs-check --official ../benign-attention --steps 5 --lr 0.5",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- run --config examples/direction.toml --out ngd-f64",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            let t = trajectory_dir(&dir.join("ngd-f64"), 2000);
            let last = &t["checkpoints"].as_array().unwrap().last().unwrap()["direction"];
            // the README: eps = 1e-9 stalls the direction at 1 - corr = 3.6e-3
            let v = last["one_minus_corr"].as_f64().unwrap();
            assert!((3.5e-3..3.7e-3).contains(&v), "{v}");
            assert_eq!(t["direction"]["verdict"], "proved optimal");
            assert_eq!(t["direction"]["support"].as_array().unwrap().len(), 101);
            assert_eq!(
                t["direction"]["local_optimality"]["verdict"],
                "locally optimal"
            );
            assert_eq!(t["direction"]["limit_test_accuracy"], 0.998);
            let text = stdout(o);
            assert!(
                text.contains("direction against the attention SVM (theorem pattern")
                    && text.contains("1 - corr 3.588e-3"),
                "{text}"
            );
        },
    },
    Form {
        text: "cargo run --release -- twin --config examples/direction_exact.toml --out ngd-twin",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            let t = trajectory_dir(&dir.join("ngd-twin"), 2000);
            let last = &t["checkpoints"].as_array().unwrap().last().unwrap()["direction"];
            // the README: 1 - corr = 1.57e-6 at step 2000, margin x ||p_mm|| 0.9992
            let v = last["one_minus_corr"].as_f64().unwrap();
            assert!((1.56e-6..1.58e-6).contains(&v), "{v}");
            let m = last["margin"].as_f64().unwrap() * t["direction"]["norm"].as_f64().unwrap();
            assert!((0.9991..0.9993).contains(&m), "{m}");
            let s = last["support_deviation"].as_f64().unwrap();
            assert!((2.95e-3..3.05e-3).contains(&s), "{s}");
            assert!(stdout(o).contains("all 20 training samples end on the pattern"));
        },
    },
    Form {
        text: "cargo run --release -- plot ngd-f64/trajectory.json ngd-twin/trajectory.json --direction --out direction.png",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            assert!(stdout(o).contains("wrote direction.png"));
            assert!(
                std::fs::read(dir.join("direction.png"))
                    .unwrap()
                    .starts_with(b"\x89PNG")
            );
        },
    },
    // docs/encoder.md: the encoder's example as written (about 25 s in a debug build);
    // its printed lines are checked by the text block after it
    Form {
        text: "cargo run --release -- run --config examples/encoder.toml --out runs/encoder",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            run_report(o, "1000");
            let t = std::fs::read_to_string(dir.join("runs/encoder/trajectory.json")).unwrap();
            let v: serde_json::Value = serde_json::from_str(&t).unwrap();
            assert_eq!(v["config"]["model"]["kind"], "encoder");
            let last = v["checkpoints"].as_array().unwrap().last().unwrap().clone();
            assert!(last["test_loss"].as_f64().is_some_and(|l| l > 0.0));
            assert!(last["samples"][0]["prompt"]["attention"].is_number());
        },
    },
    Form {
        text: "cargo run --release -- run --config examples/multiclass.toml",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            run_report(o, "30000");
            let text = stdout(o);
            // the README: K = 3, every label fitted, clean on R, noisy on the weak token
            // of their observed class
            for needle in [
                "multiclass K = 3",
                "per class",
                "train accuracy (Y)      1.0000  1.0000  1.0000",
                "test accuracy (Y*)      1.0000  1.0000  1.0000",
                "test predictions: 0.0000 tied, 0.0000 undecided",
                "W_true  W_observed     W_other",
            ] {
                assert!(text.contains(needle), "no `{needle}`: {text}");
            }
            let row = |label: &str| -> Vec<f64> {
                let at = text
                    .rfind(label)
                    .unwrap_or_else(|| panic!("{label}: {text}"));
                text[at + label.len()..]
                    .lines()
                    .next()
                    .unwrap()
                    .split_whitespace()
                    .map(|v| v.parse().unwrap())
                    .collect()
            };
            // the last table: R, W_true, W_observed, W_other, I, tie, undecided
            assert_eq!(row("clean (24)"), [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
            assert_eq!(row("noisy (6)"), [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        },
    },
    Form {
        text: "cargo run --release -- run",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            run_report(o, "30000");
            // the README: the default run says whether it is Figure 3(a)'s pattern
            let text = stdout(o);
            assert!(
                text.contains("Figure 3(a)") && text.contains("this run shows that pattern"),
                "{text}"
            );
            assert!(
                stderr(o).contains("set-up and output included"),
                "{}",
                stderr(o)
            );
        },
    },
    Form {
        text: "cargo run --release -- run --arith f32 --steps 3000 --json",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let v = json_out(o);
            summary_keys(&v);
            assert_eq!(v["arith"], "f32", "{v}");
            assert_eq!(v["steps"], 3000, "{v}");
        },
    },
    Form {
        text: "cargo run --release -- run --json --steps 3000 --seed 1",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let v = json_out(o);
            summary_keys(&v);
            assert_eq!(
                (v["steps"].as_u64(), v["seed"].as_u64()),
                (Some(3000), Some(1))
            );
            assert_eq!(v["config"]["seed"], 1);
        },
    },
    Form {
        text: "cargo run --release -- run --preset large-signal --out out/large-signal",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            run_report(o, "30000");
            assert!(stdout(o).contains("trajectory written to out/large-signal/trajectory.json"));
            let t = trajectory_dir(&dir.join("out/large-signal"), 30000);
            assert_eq!(
                (t["config"]["d"].as_u64(), t["config"]["mu_norm"].as_f64()),
                (Some(1000), Some(80.0))
            );
        },
    },
    Form {
        text: "cargo run --release -- config --preset large-noise",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let cfg =
                tokensel::prelude::Config::from_toml_str(&stdout(o), Path::new("stdout")).unwrap();
            assert_eq!((cfg.d, cfg.mu_norm), (4500, 5.0));
            assert_eq!(cfg, tokensel::prelude::Preset::LargeNoise.config());
        },
    },
    Form {
        text: "cargo run --release -- run --method span --json",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let v = json_out(o);
            summary_keys(&v);
            assert_eq!(v["config"]["method"], "span");
            assert_eq!(v["steps"], 30000);
        },
    },
    Form {
        text: "cargo run --release -- compare --steps 10",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            compare_table(o, "10");
            assert!(
                stdout(o)
                    .contains("f64 predictor (53-bit twin): every f64 quantity equal bit for bit")
            );
        },
    },
    Form {
        text: "cargo run --release -- compare --steps 20 --twin-method direct --no-predictor",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            compare_table(o, "20");
            let text = stdout(o);
            assert!(text.contains("(stable, direct)"), "{text}");
            assert!(
                !text.contains("f64 predictor (53-bit twin): every"),
                "{text}"
            );
        },
    },
    Form {
        text: "cargo run --release -- saturation",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let text = stdout(o);
            for key in tokensel::prelude::analysis::saturation::threshold_keys() {
                assert!(text.contains(&key), "no threshold {key}: {text}");
            }
            // 60 grid points, one row each
            let rows = text
                .lines()
                .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
                .count();
            assert_eq!(rows, 60, "{text}");
        },
    },
    Form {
        text: "cargo run --release -- twin --steps 3 --prec 128 --state twin-state.json --save-every 1",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            run_report(o, "3");
            let st = json_file(&dir.join("twin-state.json"));
            assert_eq!(st["step"], 3);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("wrote state at step 3 to twin-state.json\n"),
                "{err}"
            );
            std::fs::write(dir.join("twin-first.txt"), &o.stdout).unwrap();
        },
    },
    Form {
        text: "cargo run --release -- twin --steps 3 --prec 128 --state twin-state.json --resume",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            // the resumed run reports what the uninterrupted one did, digest included
            let first = std::fs::read(dir.join("twin-first.txt")).unwrap();
            assert_eq!(String::from_utf8_lossy(&first), stdout(o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("resumed from step 3 of twin-state.json\n"),
                "{err}"
            );
        },
    },
    Form {
        text: "cargo run --release -- sweep --etas 0.2,0.7 --seeds 0 --steps 100 --out sweep-out",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            assert!(
                stdout(o).contains("written: sweep-out/sweep.{csv,json,svg}"),
                "{}",
                stdout(o)
            );
            let v = json_file(&dir.join("sweep-out/sweep.json"));
            let etas: Vec<f64> = v["points"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["eta"].as_f64().unwrap())
                .collect();
            assert_eq!(etas, [0.2, 0.7]);
            assert_eq!(v["runs"].as_array().unwrap().len(), 2);
            assert_eq!(v["config"]["d"], 6000, "the label-noise-sweep preset");
            assert_eq!(v["config"]["steps"], 100);
            let csv = std::fs::read_to_string(dir.join("sweep-out/sweep.csv")).unwrap();
            assert_eq!(csv.lines().count(), 3);
            assert!(
                std::fs::read_to_string(dir.join("sweep-out/sweep.svg"))
                    .unwrap()
                    .starts_with("<svg")
            );
        },
    },
    Form {
        text: "cargo run --release -- run --steps 2000 --out traj-a",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, _| {
            trajectory_dir(&dir.join("traj-a"), 2000);
        },
    },
    Form {
        text: "cargo run --release -- run --steps 2000 --out traj-b",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, _| {
            trajectory_dir(&dir.join("traj-b"), 2000);
        },
    },
    Form {
        text: "cargo run --release -- diff traj-a/trajectory.json traj-b/trajectory.json",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let text = stdout(o);
            assert!(
                text.contains("bit-identical on every common checkpoint"),
                "{text}"
            );
            assert!(text.contains("verdict: agree"), "{text}");
            assert!(text.contains(" quantities agree exactly: "), "{text}");
        },
    },
    Form {
        text: "cargo run --release -- run --steps 2000 --out snap-a",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, _| {
            trajectory_dir(&dir.join("snap-a"), 2000);
        },
    },
    Form {
        text: "cargo run --release -- run --steps 2000 --arith f32 --out snap-b",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, _| {
            let v = trajectory_dir(&dir.join("snap-b"), 2000);
            assert_eq!(v["trainer"]["kind"], "f32", "{}", v["trainer"]);
        },
    },
    Form {
        // the README: the f32 run parts from the f64 one at step 0, and both select the
        // same tokens at every checkpoint
        text: "cargo run --release -- diff snap-a/trajectory.json snap-b/trajectory.json",
        how: How::Exits(1),
        shrink: &[],
        check: |_, o| {
            let text = stdout(o);
            assert!(text.contains("verdict: DIFFER"), "{text}");
        },
    },
    Form {
        // the README: the template's first claim fails on 2 of 5 seeds, its second holds
        text: "cargo run --release -- check claims/template.toml",
        how: How::Exits(1),
        shrink: &[],
        check: |_, o| {
            let text = stdout(o);
            assert!(text.contains("1 passed, 1 failed"), "{text}");
        },
    },
    Form {
        // docs/claims.md: the quick check on seed 0 passes where the five seeds fail
        text: "cargo run --release -- check --seeds 0 claims/template.toml",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let text = stdout(o);
            assert!(text.contains("2 passed, 0 failed"), "{text}");
            assert!(
                text.contains("not on the file's own seeds: these are not the file's claims"),
                "{text}"
            );
        },
    },
    Form {
        text: "cargo run --release -- plot traj-a/trajectory.json --out attention.svg",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            assert!(stdout(o).contains("wrote attention.svg"));
            let svg = std::fs::read_to_string(dir.join("attention.svg")).unwrap();
            assert_eq!(
                svg.matches("<polyline").count(),
                8,
                "4 groups x clean/noisy"
            );
        },
    },
    Form {
        text: "cargo run --release -- plot traj-a/trajectory.json --out attention.png",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, _| {
            let png = std::fs::read(dir.join("attention.png")).unwrap();
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
            assert!(png.len() > 5000);
        },
    },
    Form {
        // docs/snapshots.md, "Snapshot workflow in CI": a first check records nothing
        // accepted, writes the run as pending and fails
        text: "cargo run --release -- snapshot check ci-snap --steps 300",
        how: How::Exits(1),
        shrink: &[],
        check: |dir, o| {
            assert!(
                stdout(o).contains("no accepted snapshot yet"),
                "{}",
                stdout(o)
            );
            assert!(dir.join("ci-snap/pending/snapshot.toml").is_file());
            assert!(!dir.join("ci-snap/accepted").exists());
        },
    },
    Form {
        // run twice: the first snapshot, then the reviewed change
        text: "cargo run --release -- snapshot accept ci-snap",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            let text = stdout(o);
            assert!(
                text.starts_with("accepted ci-snap/accepted: 300 steps, 24 checkpoints"),
                "{text}"
            );
            assert!(text.contains("  changed: "), "{text}");
            assert!(!dir.join("ci-snap/pending").exists());
        },
    },
    Form {
        text: "cargo run --release -- snapshot check ci-snap --steps 300 --quiet",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| assert!(stdout(o).contains("bit-identical"), "{}", stdout(o)),
    },
    Form {
        text: "cargo run --release -- snapshot check ci-snap --steps 300 --seed 1 --quiet",
        how: How::Exits(1),
        shrink: &[],
        check: |dir, o| {
            assert!(stdout(o).contains("verdict: DIFFER"), "{}", stdout(o));
            assert!(dir.join("ci-snap/pending/trajectory.json").is_file());
        },
    },
    Form {
        text: "cargo run --release -- snapshot status ci-snap",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| assert!(stdout(o).contains("pending vs accepted: "), "{}", stdout(o)),
    },
    Form {
        text: "cargo run --release -- snapshot check ci-snap --steps 300 --seed 1",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| assert!(stdout(o).contains("bit-identical"), "{}", stdout(o)),
    },
    Form {
        text: "cargo run --release -- plot traj-a/trajectory.json ci-snap/accepted/trajectory.json --out overlay.png",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, _| {
            let png = std::fs::read(dir.join("overlay.png")).unwrap();
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        },
    },
    Form {
        text: "cargo run --release -- check claims/paper.toml",
        how: How::Elsewhere(
            "tests/claims.rs::paper_claims_hold runs `check claims/paper.toml --seeds 0 --json` (every claim on one seed; the ten-seed run, ~6 min of CPU, is this command: a proof, not a test) and checks every outcome is measured and every claim required of all seeds holds",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- certify --steps 300",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| certificate_text(o),
    },
    Form {
        text: "cargo run --release -- certify --steps 300 --prec auto --json",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let v = json_out(o);
            assert_eq!(v["decided"], true, "{v}");
            assert_eq!(v["ties"]["first"], 0, "{v}");
            assert_eq!(v["format"], "tokensel-certificate/2", "{v}");
        },
    },
    Form {
        text: "cargo run --release -- certify --steps 300 --out cert-out",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            certificate_text(o);
            let v = json_file(&dir.join("cert-out/certificate.json"));
            assert_eq!(v["decided"], true, "{v}");
            let txt = std::fs::read_to_string(dir.join("cert-out/certificate.txt")).unwrap();
            assert!(txt.contains("verdict: DECIDED"), "{txt}");
        },
    },
    Form {
        text: "cargo run --release -- plot cert-out/certificate.json --out bits-lost.png",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, _| {
            let png = std::fs::read(dir.join("bits-lost.png")).unwrap();
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        },
    },
    Form {
        text: "cargo run --release -- compare --steps 300 --certify",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let out = stdout(o);
            assert!(out.contains("128-bit enclosure"), "{out}");
        },
    },
    Form {
        text: "cargo run --release -- check claims/certified.toml",
        how: How::Elsewhere(
            "tests/claims.rs::certified_claims_are_proved runs `check claims/certified.toml --seeds 0 --json` and checks that every claim is proved on seed 0 (the file's 3 seeds: this command, a proof run by hand)",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- svm",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(out.contains("verdict: proved optimal"), "{out}");
            assert!(out.contains("||p_mm||^2 = 0.00571836160652954..."), "{out}");
            assert!(out.contains("101 support constraints"), "{out}");
            assert!(out.contains("R             16 / 0"), "{out}");
            assert!(out.contains("W_opposite     0 / 4"), "{out}");
        },
    },
    Form {
        text: "cargo run --release -- svm --pattern theorem --json --out svm.json",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            let v = json_out(o);
            assert_eq!(v["verdict"], "proved optimal", "{v}");
            assert_eq!(v["pattern"], "theorem", "{v}");
            assert_eq!(v["min_margin"]["num"], "1", "{v}");
            assert_eq!(v["norm2_decimal_down"], "0.00571836160652954", "{v}");
            assert!(v["f64_relative_error"].as_f64().unwrap() < 1e-10, "{v}");
            assert_eq!(json_file(&dir.join("svm.json")), v);
        },
    },
    Form {
        text: "cargo run --release -- cost --method span --precs 128,256 --ball 128,256 --twin-reps 30 --reps 5",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let out = stdout(o);
            for row in ["ball", "128", "256"] {
                assert!(out.contains(row), "{row}: {out}");
            }
        },
    },
    Form {
        text: "python3 -m venv venv && venv/bin/pip install ./python      # or: cd python && maturin develop --release",
        how: How::Elsewhere(
            "`.ci/run` builds the extension into its venv (maturin develop) and runs pytest",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "venv/bin/pip install pytest && venv/bin/python -m pytest python/tests   # the binding's tests",
        how: How::Elsewhere("`.ci/run` runs pytest on python/tests in its venv"),
        shrink: &[],
        check: none,
    },
    Form {
        text: "venv/bin/pip install scikit-learn matplotlib",
        how: How::Elsewhere(
            "the digits example's dependencies: not in CI (the example is run by hand; its figure and numbers are in the README)",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "venv/bin/python examples/digits.py --seeds 5 --steps 10000 --step-size 0.02 --out digits.png",
        how: How::Elsewhere(
            "not in CI (needs scikit-learn and matplotlib, minutes of runs): run once for the README's figure and table",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "venv/bin/python examples/digits.py --seeds 5 --steps 10000 --step-size 0.02 --token-noise 0 --out digits0.png",
        how: How::Elsewhere(
            "not in CI (needs scikit-learn and matplotlib): run once for the README's numbers without the token noise",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "venv/bin/pip install scikit-learn matplotlib mnist1d",
        how: How::Elsewhere(
            "the K-class example's dependencies: not in CI (the example is run by hand; its figure and numbers are in the README)",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "venv/bin/python examples/multiclass_real.py --out multiclass.png",
        how: How::Elsewhere(
            "not in CI (needs scikit-learn, mnist1d and matplotlib, minutes of runs): run once for the README's figure and table; python/tests/test_example_multiclass.py runs it at small sizes where those are installed",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "venv/bin/pip install torch transformers",
        how: How::Elsewhere(
            "the features example's dependencies: not in CI; python/tests/test_features.py runs the example where they are installed and is skipped, saying why, where not",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "venv/bin/python examples/features.py --model vit --tiny --n-train 12 --n-test 6 --out feat-vit",
        how: How::Elsewhere(
            "python/tests/test_features.py::test_tokens_are_what_the_last_attention_layer_reads runs this form as written (needs torch and transformers: skipped in CI) and checks its output, the directory and the tensor",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "venv/bin/python examples/features.py --model bert --tiny --n-train 12 --n-test 6 --max-length 8 --out feat-bert",
        how: How::Elsewhere(
            "python/tests/test_features.py::test_tokens_are_what_the_last_attention_layer_reads runs this form as written (needs torch and transformers: skipped in CI) and checks its output, the directory, the tensor and the length rule",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- run --data feat-vit --steps 50",
        how: How::Elsewhere(
            "python/tests/test_features.py runs `run --data DIR --steps 50` on the directory of the line above (which needs torch and transformers: skipped in CI) and checks its text and its digest against the binding's",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "venv/bin/pip install torch transformers datasets pillow",
        how: How::Elsewhere(
            "the features example's dependencies for the paper's data sets: not in CI (the Hugging Face hub is not reachable)",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "venv/bin/python examples/features.py --model vit --dataset mnist --n-train 2000 --n-test 1000 --seed 42 --out mnist-42",
        how: How::Elsewhere(
            "not run: needs the Hugging Face hub (the checkpoint and the data set), unreachable here and in CI; python/tests/test_features.py runs the --dataset path on a tiny ViT saved locally with a stand-in for `datasets`",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "venv/bin/python examples/features.py --model bert --dataset sst2 --n-train 5000 --n-test 300 --max-length 8 --seed 42 --out sst2-42",
        how: How::Elsewhere(
            "not run: needs the Hugging Face hub (the checkpoint and the data set), unreachable here and in CI; python/tests/test_features.py runs the --dataset path on a tiny BERT and tokenizer saved locally with a stand-in for `datasets`",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- data --preset balanced --out data-out",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            assert!(stdout(o).contains("wrote 8 arrays, config.toml and manifest.json to data-out (seed 0, W(0) identity)"), "{}", stdout(o));
            let m = json_file(&dir.join("data-out/manifest.json"));
            assert_eq!(m["format"], "tokensel-data/1");
            assert_eq!(
                m["arrays"]["X_train"]["shape"],
                serde_json::json!([20, 8, 2000])
            );
            for name in [
                "X_train",
                "y_train",
                "y_true_train",
                "noisy_train",
                "nu",
                "X_test",
                "y_test",
                "p0",
            ] {
                let file = m["arrays"][name]["file"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{name}"));
                assert!(dir.join("data-out").join(file).exists(), "{file}");
            }
            let cfg = std::fs::read_to_string(dir.join("data-out/config.toml")).unwrap();
            tokensel::prelude::Config::from_toml_str(&cfg, Path::new("config.toml")).unwrap();
        },
    },
    Form {
        text: "cargo run --release -- grid --preset heatmap-v1 --set d=250:5000:1250 --set mu_norm=5:100:25 --out grid-out",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            let s = grid_dir(&dir.join("grid-out"), 16);
            assert_eq!(s["name"], "heatmap-v1");
            assert_eq!(s["axes"], serde_json::json!(["d", "mu_norm"]));
            let spec = json_file(&dir.join("grid-out/grid.json"));
            assert_eq!(
                spec["axes"][0]["values"],
                serde_json::json!([250.0, 1500.0, 2750.0, 4000.0])
            );
            assert_eq!(
                spec["axes"][1]["values"],
                serde_json::json!([5.0, 30.0, 55.0, 80.0])
            );
            assert!(stdout(o).contains(
                "wrote grid.csv, summary.csv, summary.json, heatmap.svg, heatmap.png to grid-out/merged"
            ));
            std::fs::create_dir_all(dir.join("grid-first/merged")).unwrap();
            for f in [
                "grid.csv",
                "summary.csv",
                "summary.json",
                "heatmap.svg",
                "heatmap.png",
            ] {
                std::fs::copy(
                    dir.join("grid-out/merged").join(f),
                    dir.join("grid-first/merged").join(f),
                )
                .unwrap();
            }
        },
    },
    Form {
        text: "cargo run --release -- grid merge grid-out",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            assert!(
                stdout(o).contains("runs ok 16, failed 0, missing 0"),
                "{}",
                stdout(o)
            );
            same_grid(&dir.join("grid-out"), &dir.join("grid-first"));
        },
    },
    Form {
        text: "python examples/numpy_reference.py data-out --out ext.json --steps 1000 --every 10",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, _| {
            let e = json_file(&dir.join("ext.json"));
            assert_eq!(e["format"], "tokensel-external/2");
            assert_eq!(e["steps"].as_array().unwrap().len(), 101);
            assert_eq!(e["steps"][100], 1000);
        },
    },
    Form {
        text: "cargo run --release -- judge ext.json --data data-out",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            assert!(stdout(o).contains("verdict: AGREES"), "{}", stdout(o));
        },
    },
    Form {
        text: "cargo run --release -- data --preset official-final --out official-data",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, o| {
            assert!(stdout(o).contains("W(0) W0.npy"), "{}", stdout(o));
            let m = json_file(&dir.join("official-data/manifest.json"));
            assert_eq!(m["arrays"]["W0"]["shape"], serde_json::json!([2000, 2000]));
        },
    },
    Form {
        text: "python examples/official_adapter.py official-data --official ../benign-attention --out official-f32.npz --every 10 --w-every 100",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- judge official-f32.npz --data official-data",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- judge official-f32.W.npz --data official-data",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "python examples/official_adapter.py official-data --official ../benign-attention --out official-f64.npz --every 10 --w-every 100 --float64",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- judge official-f64.npz --data official-data",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "python examples/official_adapter.py official-data --official ../benign-attention --out official-bug.npz --every 10 --w-every 1000 --bug untransposed-w",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- judge official-bug.W.npz --data official-data",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- data --config examples/normalized_gd.toml --out nd-data",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, _| {
            let cfg = std::fs::read_to_string(dir.join("nd-data/config.toml")).unwrap();
            let cfg = tokensel::prelude::Config::from_toml_str(&cfg, Path::new("c")).unwrap();
            assert!(cfg.optimizer.is_normalized() && cfg.optimizer.eps == 1e-9);
        },
    },
    // docs/encoder.md: the official encoder judged, a one-off with PyTorch and the
    // user's checkout of the official repository (not in CI); the example's output is
    // only the Python check's input
    Form {
        text: "cargo run --example encoder_pass -- out=enc-check d=32 m=24 t=8 n=20 steps=5",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "python examples/encoder_official.py --official ../benign-attention --dir enc-check",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "python examples/encoder_official.py --official ../benign-attention --dir enc-check --plant scale",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    // needs PyTorch and the user's checkout of the max-margin repository (README)
    Form {
        text: "python examples/max_margin_adapter.py nd-data --mma ../max_margin_attention --out mm-f32.npz --every 10",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    // needs PyTorch and the user's checkout of the max-margin repository (README)
    Form {
        text: "cargo run --release -- judge mm-f32.npz --data nd-data",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    // needs PyTorch and the user's checkout of the max-margin repository (README)
    Form {
        text: "python examples/max_margin_adapter.py single --notebook single    # or multi",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    // needs PyTorch and the user's checkout of the max-margin repository (README)
    Form {
        text: "python examples/max_margin_adapter.py single --mma ../max_margin_attention --out single-f32.npz",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    // needs PyTorch and the user's checkout of the max-margin repository (README)
    Form {
        text: "cargo run --release -- judge single-f32.npz --data single",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    // needs PyTorch and the user's checkout of the max-margin repository (README)
    Form {
        text: "python examples/max_margin_svm_check.py nd-data --mma ../max_margin_attention [--cvxopt-tol 1e-12]",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- data --preset official-final --config examples/official_small.toml --out official-small",
        how: How::AsWritten,
        shrink: &[],
        check: |dir, _| {
            let m = json_file(&dir.join("official-small/manifest.json"));
            assert_eq!(m["w0"], "W0.npy");
            let cfg = std::fs::read_to_string(dir.join("official-small/config.toml")).unwrap();
            let cfg = tokensel::prelude::Config::from_toml_str(&cfg, Path::new("c")).unwrap();
            assert_eq!(
                (cfg.d, cfg.steps, cfg.mode),
                (40, 30, tokensel::prelude::Mode::Joint)
            );
        },
    },
    Form {
        text: "python examples/official_adapter.py official-small --official ../benign-attention --out small-f32.npz",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- judge small-f32.npz --data official-small",
        how: How::Torch,
        shrink: &[],
        check: none,
    },
    Form {
        text: "cargo run --release -- cost --precs 256 --classes 2,4,10 --twin-reps 3 --reps 30",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let text = stdout(o);
            assert!(text.contains("n = 20, T = 8, d = 2000"), "{text}");
            assert!(text.contains("vs binary    vs same T"), "{text}");
            for row in [
                "K = 2        8  f64             53  direct",
                "K = 2        8  mpfr           256    span",
                "binary      10  f64             53    span",
                "K = 4       10  f64             53    span",
                "binary      16  mpfr           256    span",
                "K = 10      16  f64             53  direct",
                "K = 10      16  f64             53    span",
                "K = 10      16  mpfr           256    span",
            ] {
                assert!(text.contains(row), "no row `{row}`: {text}");
            }
            // every K-class row has both ratios; the binary baselines only the first
            for line in text.lines().filter(|l| l.starts_with("  K = ")) {
                let cells: Vec<&str> = line.split_whitespace().collect();
                let last: Vec<f64> = cells[cells.len() - 2..]
                    .iter()
                    .map(|c| c.parse().unwrap())
                    .collect();
                assert!(last.iter().all(|r| *r > 0.0), "{line}");
            }
            for line in text.lines().filter(|l| l.starts_with("  binary ")) {
                assert!(line.ends_with(" -"), "{line}");
            }
        },
    },
    Form {
        text: "python examples/numpy_multiclass_step.py --classes 2,4,10",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let text = stdout(o);
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 6, "{text}");
            for (line, (k, t, m)) in lines.iter().zip([
                (2, 8, "direct"),
                (2, 8, "span"),
                (4, 10, "direct"),
                (4, 10, "span"),
                (10, 16, "direct"),
                (10, 16, "span"),
            ]) {
                let head = format!("numpy_multiclass_step_us K={k} T={t} {m} ");
                let us: f64 = line.strip_prefix(&head).expect(line).parse().unwrap();
                assert!(us > 0.0 && us.is_finite(), "{line}");
            }
        },
    },
    Form {
        text: "cargo run --release -- cost --method span --precs 256 --reps 2 --twin-reps 1 --follow 100",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let text = stdout(o);
            let line = |t: &str| text.lines().find(|l| l.starts_with(t)).unwrap_or_default();
            assert!(text.contains("CPU vs f64  follows the twin"), "{text}");
            assert!(line("  f64 ").contains("  all 100 (max "), "{text}");
            assert!(line("  f32 ").contains("  step 0 (output "), "{text}");
            assert!(line("  mpfr ").ends_with('\u{2014}'), "{text}");
        },
    },
    Form {
        text: "cargo run --release -- cost --precs 53,128,256,1024 --twin-reps 3 --reps 40",
        how: How::AsWritten,
        shrink: &[],
        check: |_, o| {
            let text = stdout(o);
            assert!(text.contains("n = 20, T = 8, d = 2000"), "{text}");
            for row in [
                "f64             53  direct",
                "f64             53    span",
                "predictor       53  direct",
                "predictor       53    span",
                "mpfr           128  direct",
                "mpfr           128    span",
                "mpfr           256  direct",
                "mpfr          1024    span",
            ] {
                assert!(text.contains(row), "no row `{row}`: {text}");
            }
            assert!(text.contains("auto runs span for this config"), "{text}");
        },
    },
];

/// Command forms the README writes inline (in backticks), with the concrete command
/// each runs as (placeholders filled in) and its check. Run after the block commands,
/// in the same directory (they read `traj-a`, `data-out`, `grid-out`).
const INLINE: &[Form] = &[
    Form {
        text: "protocol --config FILE --data DIR --out OUT --json",
        how: How::Elsewhere(
            "tests/protocol.rs::cli_on_a_data_directory_publishes_the_report runs this form on a supplied directory and checks the printed report against protocol.json and the CSVs",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "plot --direction",
        how: How::Elsewhere(
            "the README's block line `plot ngd-f64/trajectory.json ngd-twin/trajectory.json --direction --out direction.png` runs it here (checked above); tests/direction.rs checks its refusals",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "compare --steps 30000 --prec 256 --no-predictor",
        // the README's measurement takes about a minute: 30 steps here
        how: How::Tokensel(&[
            "compare",
            "--steps",
            "30",
            "--prec",
            "256",
            "--no-predictor",
            "--quiet",
        ]),
        shrink: &["shrunk: --steps 30 for 30000"],
        check: |_, o| compare_table(o, "30"),
    },
    Form {
        text: "compare --steps 30000 --prec 256 --no-predictor --method direct --json",
        // as above: 30 steps
        how: How::Tokensel(&[
            "compare",
            "--steps",
            "30",
            "--prec",
            "256",
            "--no-predictor",
            "--method",
            "direct",
            "--json",
            "--quiet",
        ]),
        shrink: &["shrunk: --steps 30 for 30000"],
        check: |_, o| {
            let v = json_out(o);
            compare_keys(&v);
            assert_eq!(
                (v["method"].as_str(), v["twin_method"].as_str()),
                (Some("direct"), Some("span"))
            );
            assert!(v["predictor"].is_null());
            assert_eq!(v["prec_bits"], 256);
        },
    },
    Form {
        text: "compare --json",
        // the default run's 30,000 steps take a minute: 5 steps
        how: How::Tokensel(&["compare", "--json", "--steps", "5", "--quiet"]),
        shrink: &["shrunk: --steps 5 for 30000"],
        check: |_, o| {
            let v = json_out(o);
            compare_keys(&v);
            assert_eq!(v["predictor"]["bits_equal"], true);
        },
    },
    Form {
        text: "cost --preset official-final",
        // the default precisions' joint span precompute takes minutes at d = 2000: 53 bits only, few repetitions
        how: How::Tokensel(&[
            "cost",
            "--preset",
            "official-final",
            "--precs",
            "53",
            "--reps",
            "2",
            "--twin-reps",
            "1",
            "--method",
            "span",
        ]),
        shrink: &["shrunk: --precs 53 --reps 2 --twin-reps 1 --method span"],
        check: |_, o| {
            let text = stdout(o);
            assert!(text.contains("f64             53    span"), "{text}");
            assert!(text.contains("predictor       53    span"), "{text}");
        },
    },
    Form {
        text: "cost --method span",
        how: How::Tokensel(&[
            "cost",
            "--method",
            "span",
            "--precs",
            "53,256",
            "--twin-reps",
            "1",
            "--reps",
            "3",
        ]),
        shrink: &["shrunk: --precs 53,256 --twin-reps 1 --reps 3"],
        check: |_, o| {
            let text = stdout(o);
            assert!(!text.contains("direct  "), "only the span step: {text}");
            assert!(text.contains("mpfr           256    span"), "{text}");
        },
    },
    Form {
        text: "cost --method span --precs 256",
        how: How::Tokensel(&[
            "cost",
            "--method",
            "span",
            "--precs",
            "256",
            "--twin-reps",
            "3",
            "--reps",
            "3",
        ]),
        shrink: &["shrunk: --twin-reps 3 --reps 3"],
        check: |_, o| {
            let text = stdout(o);
            assert!(text.contains("mpfr           256    span"), "{text}");
            assert!(!text.contains("predictor"), "{text}");
        },
    },
    Form {
        text: "run --json",
        how: How::Tokensel(&["run", "--json", "--steps", "300", "--quiet"]),
        shrink: &["shrunk: --steps 300 (the main run is a block command)"],
        check: |_, o| summary_keys(&json_out(o)),
    },
    Form {
        text: "run --method span",
        how: How::Tokensel(&[
            "run", "--method", "span", "--steps", "300", "--out", "span-run", "--quiet",
        ]),
        shrink: &["shrunk: --steps 300"],
        check: |dir, _| {
            let t = trajectory_dir(&dir.join("span-run"), 300);
            assert_eq!(t["trainer"]["method"], "span");
        },
    },
    Form {
        text: "run --out DIR",
        how: How::Tokensel(&["run", "--steps", "50", "--out", "out-dir", "--quiet"]),
        shrink: &["shrunk: --steps 50"],
        check: |dir, _| {
            trajectory_dir(&dir.join("out-dir"), 50);
        },
    },
    Form {
        text: "twin --state FILE",
        how: How::Tokensel(&[
            "twin",
            "--steps",
            "2",
            "--predictor",
            "--method",
            "direct",
            "--state",
            "state-file.json",
            "--quiet",
            "--json",
        ]),
        shrink: &[],
        check: |dir, o| {
            summary_keys(&json_out(o));
            assert_eq!(json_file(&dir.join("state-file.json"))["step"], 2);
        },
    },
    Form {
        text: "check CLAIMS.toml",
        how: How::Tokensel(&["check", "small-claims.toml", "--json"]),
        shrink: &[],
        check: |_, o| {
            let v = json_out(o);
            let outcomes = v.as_array().unwrap();
            assert_eq!(outcomes.len(), 2);
            assert!(outcomes.iter().all(|c| c["pass"] == true), "{v}");
            assert_eq!(outcomes[1]["per_seed"].as_array().unwrap().len(), 3);
        },
    },
    Form {
        text: "data --out DIR",
        how: How::Tokensel(&["data", "--out", "data-dir", "--config", "small.toml"]),
        shrink: &[],
        check: |dir, _| {
            assert_eq!(
                json_file(&dir.join("data-dir/manifest.json"))["format"],
                "tokensel-data/1"
            );
        },
    },
    Form {
        text: "diff A B [--rtol X] [--common-only] [--json]",
        how: How::Tokensel(&[
            "diff",
            "traj-a/trajectory.json",
            "traj-b/trajectory.json",
            "--rtol",
            "1e-12",
            "--common-only",
            "--json",
        ]),
        shrink: &[],
        check: |_, o| {
            let v = json_out(o);
            has_keys(
                &v,
                &[
                    "rtol",
                    "common_only",
                    "diverged",
                    "first_divergence",
                    "max_rel_dev",
                    "only_in_a",
                    "only_in_b",
                    "config_differences",
                    "config_changes",
                    "max_rel_dev_step",
                    "first_differs",
                    "max_group_mass_dev_step",
                    "group_mass_first_differs",
                ],
                "diff --json",
            );
            // bit-identical runs: every quantity kept, each agreeing (no step)
            let devs = v["max_rel_dev"].as_object().unwrap();
            assert!(!devs.is_empty(), "{v}");
            for k in devs.keys() {
                assert!(v["first_differs"][k].is_null(), "{k}: {v}");
            }
            assert_eq!(
                (v["common_only"].as_bool(), v["diverged"].as_bool()),
                (Some(true), Some(false))
            );
            assert!(
                v["config_differences"].as_array().unwrap().is_empty(),
                "{v}"
            );
        },
    },
    Form {
        text: "plot A.json B.json [C.json ...] --out FIG.svg|png",
        how: How::Tokensel(&[
            "plot",
            "traj-a/trajectory.json",
            "traj-b/trajectory.json",
            "snap-b/trajectory.json",
            "--out",
            "overlay3.svg",
        ]),
        shrink: &[],
        check: |dir, _| {
            let svg = std::fs::read_to_string(dir.join("overlay3.svg")).unwrap();
            for name in ["traj-a", "traj-b", "snap-b"] {
                assert!(
                    svg.contains(&format!(">{name}/trajectory.json</text>")),
                    "{name}"
                );
            }
            assert_eq!(svg.matches("<polyline").count(), 8 * 3);
        },
    },
    Form {
        text: "snapshot check DIR [--preset NAME] [--seed S] [--steps N] [--method M] [--rtol X] [--quiet]",
        // the snapshot the guide's blocks accepted last, checked with every flag
        how: How::Tokensel(&[
            "snapshot", "check", "ci-snap", "--preset", "balanced", "--seed", "1", "--steps",
            "300", "--method", "auto", "--rtol", "1e-12", "--quiet",
        ]),
        shrink: &[],
        check: |_, o| assert!(stdout(o).contains("bit-identical"), "{}", stdout(o)),
    },
    Form {
        text: "snapshot status DIR",
        how: How::Tokensel(&["snapshot", "status", "ci-snap"]),
        shrink: &[],
        check: |_, o| assert!(stdout(o).contains("pending: none"), "{}", stdout(o)),
    },
    Form {
        text: "snapshot accept DIR",
        how: How::Elsewhere(
            "the guide's blocks run `snapshot accept ci-snap` twice (a first snapshot and a reviewed change); tests/snapshot.rs::a_ci_records_reviews_and_accepts runs the whole workflow with its refusals",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "plot FILE --out FIG.svg",
        how: How::Tokensel(&["plot", "compare-report.json", "--out", "error.svg"]),
        shrink: &[],
        check: |dir, _| {
            assert!(
                std::fs::read_to_string(dir.join("error.svg"))
                    .unwrap()
                    .contains("relative error")
            );
        },
    },
    Form {
        text: "judge EXT --data DIR [--prec 256] [--tol 1e-8] [--enclosure-prec 128] [--no-enclosure] [--json] [--quiet]",
        // EXT: the loss at step 0 of tokensel's own f64 run on data-out (no Python needed);
        // once with the enclosure at 128 bits, once without it
        how: How::Tokensel(&[
            "judge",
            "loss-ext.json",
            "--data",
            "data-out",
            "--prec",
            "256",
            "--tol",
            "1e-8",
            "--enclosure-prec",
            "128",
            "--json",
            "--quiet",
        ]),
        shrink: &[],
        check: |dir, o| {
            let v = json_out(o);
            assert_eq!(v["within_tolerance"], true, "{v}");
            assert!(!v["proof"].is_null(), "the loss is enclosed: {v}");
            let o = tokensel_in(
                dir,
                &[
                    "judge",
                    "loss-ext.json",
                    "--data",
                    "data-out",
                    "--no-enclosure",
                    "--json",
                    "--quiet",
                ],
            );
            ok(&o, "judge --no-enclosure");
            let v = json_out(&o);
            assert_eq!(v["within_tolerance"], true, "{v}");
            assert!(v["proof"].is_null(), "{v}");
        },
    },
    Form {
        text: "grid merge DIR",
        how: How::Tokensel(&["grid", "merge", "grid-out", "--json"]),
        shrink: &[],
        check: |_, o| {
            let v = json_out(o);
            assert_eq!(v["runs_ok"], 16);
        },
    },
    Form {
        text: "--seeds 0..4",
        how: How::Tokensel(&[
            "grid",
            "--config",
            "small.toml",
            "--set",
            "mu_norm=5,10",
            "--seeds",
            "0..4",
            "--steps",
            "5",
            "--out",
            "seeds-range",
            "--json",
            "--quiet",
        ]),
        shrink: &[],
        check: |_, o| {
            let v = json_out(o);
            assert_eq!(v["seeds"], serde_json::json!([0, 1, 2, 3]));
            assert_eq!(v["runs_ok"], 8);
        },
    },
    Form {
        text: "0,3,7",
        how: How::Tokensel(&[
            "grid",
            "--config",
            "small.toml",
            "--set",
            "mu_norm=5,10",
            "--seeds",
            "0,3,7",
            "--steps",
            "5",
            "--out",
            "seeds-list",
            "--json",
            "--quiet",
        ]),
        shrink: &[],
        check: |_, o| {
            let v = json_out(o);
            assert_eq!(v["seeds"], serde_json::json!([0, 3, 7]));
            assert_eq!(v["runs_ok"], 6);
        },
    },
    Form {
        text: "0,1,2",
        how: How::Tokensel(&[
            "sweep",
            "--config",
            "small.toml",
            "--etas",
            "0.2",
            "--seeds",
            "0,1,2",
            "--steps",
            "5",
            "--json",
            "--quiet",
        ]),
        shrink: &[],
        check: |_, o| {
            let seeds: Vec<u64> = json_out(o)["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["seed"].as_u64().unwrap())
                .collect();
            assert_eq!(seeds, [0, 1, 2]);
        },
    },
    Form {
        text: "0..3",
        how: How::Tokensel(&[
            "sweep",
            "--config",
            "small.toml",
            "--etas",
            "0.2",
            "--seeds",
            "0..3",
            "--steps",
            "5",
            "--json",
            "--quiet",
        ]),
        shrink: &[],
        check: |_, o| {
            let seeds: Vec<u64> = json_out(o)["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["seed"].as_u64().unwrap())
                .collect();
            assert_eq!(seeds, [0, 1, 2]);
        },
    },
    Form {
        text: "0:0.5:1e-1",
        how: How::Tokensel(&[
            "grid",
            "--config",
            "small.toml",
            "--set",
            "eta=0:0.5:1e-1",
            "--steps",
            "2",
            "--out",
            "eta-tenths",
            "--quiet",
            "--json",
        ]),
        shrink: &[],
        check: |_, o| {
            let points: Vec<f64> = json_out(o)["points"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["point"][0].as_f64().unwrap())
                .collect();
            assert_eq!(points, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]);
        },
    },
    Form {
        text: "--set key=a:b:step",
        how: How::Tokensel(&[
            "grid",
            "--config",
            "small.toml",
            "--set",
            "d=10:30:10",
            "--set",
            "mu_norm=5,10",
            "--steps",
            "5",
            "--method",
            "direct",
            "--out",
            "set-forms",
            "--quiet",
        ]),
        shrink: &[],
        check: |dir, _| {
            let s = grid_dir(&dir.join("set-forms"), 6);
            let spec = json_file(&dir.join("set-forms/grid.json"));
            assert_eq!(
                spec["axes"][0]["values"],
                serde_json::json!([10.0, 20.0, 30.0])
            );
            assert_eq!(spec["axes"][1]["values"], serde_json::json!([5.0, 10.0]));
            assert_eq!(spec["base"]["method"], "direct");
            assert_eq!(s["axes"], serde_json::json!(["d", "mu_norm"]));
        },
    },
    Form {
        text: "--set key=v1,v2,...",
        how: How::Tokensel(&[
            "grid",
            "--config",
            "small.toml",
            "--set",
            "d=10,20",
            "--steps",
            "5",
            "--out",
            "set-list",
            "--quiet",
            "--json",
        ]),
        shrink: &[],
        check: |dir, o| {
            assert_eq!(json_out(o)["runs_ok"], 2);
            let spec = json_file(&dir.join("set-list/grid.json"));
            assert_eq!(spec["axes"][0]["values"], serde_json::json!([10.0, 20.0]));
        },
    },
    Form {
        text: "--shard K/N",
        how: How::Tokensel(&[
            "grid",
            "--config",
            "small.toml",
            "--set",
            "d=10:30:10",
            "--set",
            "mu_norm=5,10",
            "--steps",
            "5",
            "--method",
            "direct",
            "--out",
            "sharded",
            "--quiet",
            "--shard",
            "1/2",
        ]),
        shrink: &[],
        check: |dir, o| {
            assert!(stdout(o).contains("shard 1/2: 3 runs"), "{}", stdout(o));
            let second = tokensel_in(
                dir,
                &[
                    "grid",
                    "--config",
                    "small.toml",
                    "--set",
                    "d=10:30:10",
                    "--set",
                    "mu_norm=5,10",
                    "--steps",
                    "5",
                    "--method",
                    "direct",
                    "--out",
                    "sharded",
                    "--quiet",
                    "--shard",
                    "2/2",
                ],
            );
            ok(&second, "shard 2/2");
            assert!(
                !dir.join("sharded/merged").exists(),
                "a shard does not merge"
            );
            let merged = tokensel_in(dir, &["grid", "merge", "sharded"]);
            ok(&merged, "grid merge sharded");
            same_grid(&dir.join("sharded"), &dir.join("set-forms"));
        },
    },
    Form {
        text: "--grid FILE",
        how: How::Tokensel(&[
            "grid",
            "--grid",
            "my-grid.toml",
            "--out",
            "from-file",
            "--quiet",
            "--json",
        ]),
        shrink: &[],
        check: |_, o| {
            let v = json_out(o);
            assert_eq!(v["name"], "mine");
            assert_eq!(v["runs_ok"], 8);
        },
    },
    Form {
        text: "--method auto",
        how: How::Tokensel(&[
            "run",
            "--method",
            "auto",
            "--config",
            "small.toml",
            "--steps",
            "20",
            "--out",
            "auto-run",
            "--quiet",
        ]),
        shrink: &[],
        check: |dir, _| {
            let t = trajectory_dir(&dir.join("auto-run"), 20);
            assert_eq!(
                (
                    t["config"]["method"].as_str(),
                    t["trainer"]["method"].as_str()
                ),
                (Some("auto"), Some("direct"))
            );
        },
    },
    Form {
        text: "--method direct",
        how: How::Tokensel(&[
            "twin",
            "--method",
            "direct",
            "--config",
            "small.toml",
            "--steps",
            "2",
            "--prec",
            "64",
            "--out",
            "twin-direct",
            "--quiet",
        ]),
        shrink: &[],
        check: |dir, _| {
            let t = trajectory_dir(&dir.join("twin-direct"), 2);
            assert_eq!(
                (
                    t["trainer"]["method"].as_str(),
                    t["trainer"]["kind"].as_str()
                ),
                (Some("direct"), Some("mpfr"))
            );
        },
    },
    Form {
        text: "--preset label-noise-sweep",
        how: How::Tokensel(&["config", "--preset", "label-noise-sweep"]),
        shrink: &[],
        check: |_, o| {
            let cfg =
                tokensel::prelude::Config::from_toml_str(&stdout(o), Path::new("stdout")).unwrap();
            assert_eq!(
                (cfg.d, cfg.mu_norm, cfg.rho, cfg.n_train),
                (6000, 100.0, 0.05, 100)
            );
        },
    },
    Form {
        text: "--twin-method direct",
        how: How::Elsewhere(
            "the block command `compare --steps 20 --twin-method direct --no-predictor`",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "grid --out DIR",
        how: How::Elsewhere(
            "tests/files.rs::output_targets_are_checked_before_any_work (a DIR with other files is refused) and concurrent_writers_never_fail_each_other",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "plot --out",
        how: How::Elsewhere(
            "tests/files.rs::output_targets_are_checked_before_any_work (only a regular file is replaced)",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "plot --out FIG",
        how: How::Elsewhere(
            "tests/files.rs::concurrent_writers_never_fail_each_other (plot --out fig.png by concurrent writers)",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "sweep --out DIR",
        how: How::Elsewhere("tests/files.rs::sweep_outputs_are_one_set"),
        shrink: &[],
        check: none,
    },
    Form {
        text: "tokensel saturation | head -1",
        how: How::Elsewhere(
            "tests/files.rs::closed_and_failing_standard_streams_end_quietly (saturation with its reader gone: SIGPIPE, no message)",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "twin --out DIR",
        how: How::Elsewhere(
            "tests/files.rs::output_targets_are_checked_before_any_work (run and twin) and non_finite_values_are_read_back",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "twin --state",
        how: How::Elsewhere("tests/files.rs::state_files_are_checked_and_never_replaced"),
        shrink: &[],
        check: none,
    },
    Form {
        text: "certify --out DIR",
        how: How::Elsewhere("the block command `certify --steps 300 --out cert-out`"),
        shrink: &[],
        check: none,
    },
    Form {
        text: "check --seeds 0",
        how: How::Elsewhere(
            "tests/claims.rs::paper_claims_hold (`check claims/paper.toml --seeds 0 --json`)",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "compare --certify",
        how: How::Elsewhere("the block command `compare --steps 300 --certify`"),
        shrink: &[],
        check: none,
    },
    Form {
        text: "cost --ball",
        how: How::Elsewhere("the block command `cost --method span ... --ball 128,256 ...`"),
        shrink: &[],
        check: none,
    },
    Form {
        text: "compare --steps 30000 --prec 256 --json",
        // the README's measurement takes minutes: 30 steps here
        how: How::Tokensel(&[
            "compare", "--steps", "30", "--prec", "256", "--json", "--quiet",
        ]),
        shrink: &["shrunk: --steps 30 for 30000"],
        check: |_, o| {
            let v = json_out(o);
            compare_keys(&v);
            assert_eq!(v["prec_bits"], 256);
            assert_eq!(v["predictor"]["steps"], 30, "{v}");
            assert_eq!(v["predictor"]["bits_equal"], true, "{v}");
        },
    },
    Form {
        text: "compare --steps 20 --fail-above 1e-8",
        how: How::Tokensel(&[
            "compare",
            "--steps",
            "20",
            "--fail-above",
            "1e-8",
            "--quiet",
        ]),
        shrink: &[],
        check: |_, o| {
            compare_table(o, "20");
            let text = stdout(o);
            assert!(
                text.contains("gate: held --fail-above 1e-8 (every compared quantity"),
                "{text}"
            );
        },
    },
    Form {
        text: "compare --steps 20 --out compare.json",
        how: How::Tokensel(&[
            "compare",
            "--steps",
            "20",
            "--out",
            "compare.json",
            "--quiet",
        ]),
        shrink: &[],
        check: |dir, o| {
            compare_table(o, "20");
            assert!(stdout(o).contains("report written to compare.json"));
            let v = json_file(&dir.join("compare.json"));
            compare_keys(&v);
            assert_eq!(v["steps"], 20, "{v}");
        },
    },
    Form {
        text: "compare --fail-above X",
        how: How::Elsewhere(
            "`compare --steps 20 --fail-above 1e-8` runs it here; tests/jobs.rs checks a gate that is passed (exit 1, the quantity, step and error)",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "compare --steps 300 --predictor-steps all",
        how: How::Tokensel(&[
            "compare",
            "--steps",
            "300",
            "--predictor-steps",
            "all",
            "--json",
            "--quiet",
        ]),
        shrink: &[],
        check: |_, o| {
            let v = json_out(o);
            assert_eq!(v["predictor"]["steps"], 300, "{v}");
            assert_eq!(v["predictor"]["bits_equal"], true, "{v}");
        },
    },
    Form {
        text: "twin --method span",
        how: How::Tokensel(&["twin", "--method", "span", "--steps", "30", "--quiet"]),
        shrink: &["shrunk: --steps 30"],
        check: |_, o| {
            let out = stdout(o);
            assert!(out.contains("span"), "{out}");
        },
    },
    Form {
        text: "cargo run --release -- check claims/multiclass.toml",
        how: How::Elsewhere(
            "tests/claims.rs::multiclass_claims_read_their_k_class_quantities runs `check claims/multiclass.toml --seeds 0 --json` (every claim on one seed, every K-class quantity measured); the ten-seed run, ~17 min here, is this command: a measurement run by hand, which exits 1 (proofs-notes/multiclass.md)",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "run --data DIR",
        how: How::Elsewhere(
            "python/tests/test_multiclass.py (a K-class directory from write_data, run by the CLI with --data to the Python run's summary and digest), run by .ci/run",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "svm --data DIR",
        how: How::Elsewhere(
            "tests/svm.rs (`data_dir_gives_the_configs_svm`: a generated and a supplied directory)",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "judge --data DIR",
        how: How::Elsewhere(
            "tests/judge.rs (every judge test reads a data directory) and the inline form `judge EXT --data DIR ...`",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "tokensel compare --json",
        how: How::Elsewhere(
            "python/tests/test_supplied.py (compare through Python against the CLI), run by .ci/run",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "tokensel judge --json",
        how: How::Elsewhere(
            "python/tests/test_judge.py (judge from a dict against the CLI's JSON), run by .ci/run",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "tokensel judge EXT.npz",
        how: How::Elsewhere(
            "python/tests/test_judge.py (a dict and an NPZ file give the same report) and python/bench.py",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "tokensel run --json",
        how: How::Elsewhere(
            "python/tests/test_cli_identity.py (the same keys and bits), run by .ci/run",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "tokensel run --json --quiet",
        how: How::Elsewhere(
            "python/bench.py (the Python call against the CLI) and python/tests/test_cli_identity.py",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "tokensel certify --json",
        how: How::Elsewhere(
            "python/tests/test_certify.py (tokensel.certify against the CLI's certify --json), run by .ci/run",
        ),
        shrink: &[],
        check: none,
    },
    Form {
        text: "tokensel grid merge DIR",
        how: How::Elsewhere("the script forms below (the Slurm recipe's merge)"),
        shrink: &[],
        check: none,
    },
    Form {
        text: "examples/grid_parallel.sh DIR N GRID-ARGS...",
        how: How::Elsewhere("the script forms below"),
        shrink: &[],
        check: none,
    },
    Form {
        text: "sbatch --array=1-N examples/grid_slurm.sh DIR N --preset heatmap-final",
        how: How::Elsewhere("the script forms below (`sbatch --array=1-64 ...`)"),
        shrink: &[],
        check: none,
    },
];

/// Flags the README writes that belong to other programs, with where they are run.
const OTHER_PROGRAMS: &[(&str, &str)] = &[
    (
        "--mode",
        "examples/protocol_real.py's (needs scikit-learn, mnist1d and matplotlib: run once by hand; python/tests/test_protocol.py runs it with --mode p at small sizes where they are installed)",
    ),
    (
        "--mma",
        "examples/max_margin_adapter.py's and max_margin_svm_check.py's (need PyTorch and the max-margin checkout: run once by hand, README)",
    ),
    (
        "--notebook",
        "examples/max_margin_adapter.py's (needs PyTorch: run once by hand)",
    ),
    (
        "--notebook-w",
        "examples/max_margin_adapter.py's (needs PyTorch: run once by hand)",
    ),
    (
        "--cvxopt-tol",
        "examples/max_margin_svm_check.py's (needs PyTorch and cvxopt: run once by hand)",
    ),
    (
        "--release",
        "cargo's (`cargo run --release --` is the built binary here)",
    ),
    (
        "--sshlogin",
        "GNU parallel's (examples/grid_parallel.sh's header)",
    ),
    ("--bench", "cargo's (`cargo bench --bench step`)"),
    (
        "--example",
        "cargo's (`cargo run --example encoder_pass`, docs/encoder.md: PyTorch check, not in CI)",
    ),
    (
        "--dir",
        "examples/encoder_official.py's (PyTorch, not in CI)",
    ),
    (
        "--plant",
        "examples/encoder_official.py's (PyTorch, not in CI)",
    ),
    (
        "--threads",
        "examples/numpy_multiclass_step.py's, run by tests/cli.rs::numpy_multiclass_step_peer_answers_and_checks_its_arguments",
    ),
    ("--path", "cargo's (`cargo install --path .`)"),
    (
        "--array",
        "sbatch's (run through examples/grid_slurm.sh below)",
    ),
    (
        "--float32",
        "examples/numpy_reference.py's, run by tests/judge.rs",
    ),
    (
        "--step-scale",
        "examples/numpy_reference.py's, run by tests/judge.rs::numpy_faults_are_named",
    ),
    (
        "--perturb-p",
        "examples/numpy_reference.py's, run by tests/judge.rs::numpy_faults_are_named",
    ),
    (
        "--p0-offset",
        "examples/numpy_reference.py's, run by tests/judge.rs::numpy_faults_are_named",
    ),
    (
        "--freeze-p-after",
        "examples/numpy_reference.py's, run by tests/judge.rs::numpy_faults_are_named",
    ),
    (
        "--step-size",
        "examples/digits.py's (not in CI: needs scikit-learn and matplotlib)",
    ),
    (
        "--token-noise",
        "examples/digits.py's (not in CI: needs scikit-learn and matplotlib)",
    ),
    (
        "--no-enclosure",
        "tokensel's own: passed by the check of the `judge EXT --data DIR ...` inline form",
    ),
    (
        "--naive-softmax",
        "examples/numpy_reference.py's, run by tests/judge.rs",
    ),
    (
        "--bug",
        "examples/numpy_reference.py's (tests/judge.rs) and official_adapter.py's (PyTorch)",
    ),
    (
        "--float64",
        "examples/official_adapter.py's (PyTorch, not in CI)",
    ),
    (
        "--every",
        "examples/numpy_reference.py's (the block line above)",
    ),
    (
        "--w-every",
        "examples/official_adapter.py's (PyTorch, not in CI)",
    ),
    (
        "--official",
        "examples/official_adapter.py's and real_setting_official.py's (PyTorch, not in CI)",
    ),
    (
        "--example",
        "cargo's own: the real-setting check's Rust half (docs/models.md; PyTorch, not in CI)",
    ),
    (
        "--lr",
        "examples/real_setting_official.py's (PyTorch, not in CI)",
    ),
    (
        "--model",
        "examples/features.py's (needs torch and transformers: python/tests/test_features.py, skipped in CI)",
    ),
    (
        "--tiny",
        "examples/features.py's (needs torch and transformers: python/tests/test_features.py, skipped in CI)",
    ),
    (
        "--n-train",
        "examples/features.py's (needs torch and transformers: python/tests/test_features.py, skipped in CI)",
    ),
    (
        "--n-test",
        "examples/features.py's (needs torch and transformers: python/tests/test_features.py, skipped in CI)",
    ),
    (
        "--max-length",
        "examples/features.py's (needs torch and transformers: python/tests/test_features.py, skipped in CI)",
    ),
    (
        "--dataset",
        "examples/features.py's (the hub: not run; python/tests/test_features.py runs it with a stand-in for `datasets`)",
    ),
    (
        "--checkpoint",
        "examples/features.py's (the hub or a local directory: python/tests/test_features.py passes a local one)",
    ),
];

/// The inline code spans of `text` outside its code blocks, newlines as spaces.
fn inline_spans(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (k, part) in text.split("```").enumerate() {
        if k % 2 == 1 {
            continue;
        }
        for (j, span) in part.split('`').enumerate() {
            if j % 2 == 1 {
                out.push(span.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
    }
    out
}

/// Whether an inline span is a command form (a flag, a command with arguments, a seed
/// list, a recipe line) rather than the name of a command: a form needs an entry in
/// [`INLINE`] (flags alone are checked by the flags they pass).
fn is_form(span: &str, commands: &BTreeSet<String>) -> bool {
    let value = span.bytes().any(|b| b.is_ascii_digit())
        && span
            .bytes()
            .all(|b| b.is_ascii_digit() || b",.:e-".contains(&b));
    if span.starts_with("--") || value || span.starts_with("sbatch ") {
        return true;
    }
    if span.starts_with("examples/grid_") {
        return span.contains(' ');
    }
    let rest = span
        .strip_prefix("cargo run --release -- ")
        .or_else(|| span.strip_prefix("tokensel "))
        .unwrap_or(span);
    let first = rest.split_whitespace().next().unwrap_or("");
    if !commands.contains(first) && rest.len() == span.len() {
        return false; // not a tokensel command: prose, a file, a format name
    }
    // a command's name (`grid merge`, `tokensel judge`) is not a form
    !rest
        .split_whitespace()
        .all(|w| commands.contains(w) || w == "merge")
}

/// The setup files the inline forms use.
fn setup(dir: &Path) {
    std::fs::write(dir.join("small.toml"), "d = 10\nn_train = 4\nn_test = 8\n").unwrap();
    std::fs::write(
        dir.join("my-grid.toml"),
        "name = \"mine\"\npreset = \"balanced\"\nseeds = \"0..2\"\nsteps = 5\n[config]\nd = 10\nn_train = 4\nn_test = 8\n[axes]\nd = [10, 12]\nmu_norm = [3.0, 8.0]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("small-claims.toml"),
        "[[claim]]\nname = \"steps\"\nconfig = { d = 10, n_train = 4, n_test = 8, steps = 20 }\nsource = \"run\"\nquantity = \"steps\"\nop = \"==\"\nbound = 20\n\n\
         [[claim]]\nname = \"loss falls\"\nconfig = { d = 10, n_train = 4, n_test = 8, steps = 20, step_size = 0.5 }\nsource = \"run\"\nquantity = \"train_loss\"\nbaseline_step = 0\nop = \"<\"\nbound = 0\nseeds = \"0..3\"\n",
    )
    .unwrap();
    // a compare report to plot, and an external trajectory of the loss at step 0
    let o = tokensel_in(
        dir,
        &[
            "compare", "--steps", "3", "--json", "--quiet", "--prec", "128",
        ],
    );
    ok(&o, "compare --json for plot");
    std::fs::write(dir.join("compare-report.json"), &o.stdout).unwrap();
    let o = tokensel_in(dir, &["run", "--steps", "0", "--json", "--quiet"]);
    ok(&o, "run --steps 0");
    let loss = json_out(&o)["train_loss"].clone();
    let ext = serde_json::json!({
        "format": "tokensel-external/2",
        "dtype": "float64",
        "implementation": "tokensel's f64 trainer, loss at step 0",
        "config": {"mode": "p"},
        "steps": [0],
        "loss": [loss],
    });
    std::fs::write(dir.join("loss-ext.json"), ext.to_string()).unwrap();
}

/// The user guide's chapters, in the order they are read after the README (the order
/// the sections had in the one-file README, so a chapter's commands find the files the
/// earlier ones wrote).
const DOCS: &[&str] = &[
    "run.md",
    "claims.md",
    "snapshots.md",
    "benchmarks.md",
    "models.md",
    "optimizers.md",
    "protocol.md",
    "grids.md",
    "judge.md",
    "encoder.md",
    "certify.md",
    "svm.md",
    "python.md",
    "exit-codes.md",
    "files.md",
    "layout.md",
];

/// The README followed by every chapter of [`DOCS`]; `docs/` holds exactly those
/// chapters and its index, `docs/README.md`, which links each of them.
fn guide_text() -> String {
    let docs = manifest().join("docs");
    let mut found: Vec<String> = std::fs::read_dir(&docs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n != "README.md")
        .collect();
    found.sort();
    let mut listed: Vec<String> = DOCS.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed, "docs/ holds exactly the chapters of DOCS");
    let index = std::fs::read_to_string(docs.join("README.md")).unwrap();
    let readme = std::fs::read_to_string(manifest().join("README.md")).unwrap();
    for chapter in DOCS {
        assert!(
            index.contains(&format!("]({chapter})"))
                && readme.contains(&format!("](docs/{chapter})")),
            "docs/README.md and README.md link docs/{chapter}"
        );
    }
    let mut text = readme;
    for chapter in DOCS {
        text.push('\n');
        text.push_str(&std::fs::read_to_string(docs.join(chapter)).unwrap());
    }
    text
}

/// The printed outputs the text shows: for each `text` block that directly follows an
/// `sh` block, that block's last command and the block's non-empty lines (trailing
/// spaces trimmed; a line `...` marks lines left out and is not one).
fn printed(text: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out = std::collections::BTreeMap::new();
    for part in text.split("```sh\n").skip(1) {
        let Some((block, rest)) = part.split_once("```") else {
            continue;
        };
        let Some(shown) = rest
            .trim_start_matches(['\n', ' '])
            .strip_prefix("```text\n")
        else {
            continue;
        };
        let shown = shown.split("```").next().unwrap();
        let Some(command) = block.lines().map(str::trim).rfind(|l| !l.is_empty()) else {
            continue;
        };
        let lines: Vec<String> = shown
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.is_empty() && l.trim() != "...")
            .map(str::to_string)
            .collect();
        assert!(
            out.insert(command.to_string(), lines).is_none(),
            "`{command}`: two printed outputs shown"
        );
    }
    out
}

#[test]
fn every_readme_command_form_runs_and_says_what_the_readme_says() {
    let text = guide_text();
    let expected_output = printed(&text);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for sub in ["claims", "examples"] {
        std::fs::create_dir(dir.join(sub)).unwrap();
        for entry in std::fs::read_dir(manifest().join(sub)).unwrap() {
            let entry = entry.unwrap();
            if entry.path().is_file() {
                std::fs::copy(entry.path(), dir.join(sub).join(entry.file_name())).unwrap();
            }
        }
    }
    let python = std::env::var("TOKENSEL_PYTHON")
        .ok()
        .filter(|p| !p.is_empty());
    let mut ran: Vec<Vec<String>> = Vec::new();

    // 0. before anything runs (minutes): every README form has an entry here and every
    // entry a README form, all mismatches listed at once
    let commands: BTreeSet<String> = tokensel_commands();
    let block_lines: BTreeSet<&str> = text
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .flat_map(str::lines)
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && *l != "cargo test"
                && !l.starts_with("apt-get install")
                && *l != "apt-get update"
        })
        .collect();
    let inline: BTreeSet<String> = inline_spans(&text)
        .into_iter()
        .filter(|s| is_form(s, &commands))
        .collect();
    let mut mismatches: Vec<String> = Vec::new();
    for line in &block_lines {
        if !BLOCKS.iter().any(|f| f.text == *line) {
            mismatches.push(format!(
                "README command without a check in BLOCKS: `{line}`"
            ));
        }
    }
    for span in &inline {
        if !span.starts_with("--") && !INLINE.iter().any(|f| f.text == span) {
            mismatches.push(format!(
                "README inline form without a check in INLINE: `{span}`"
            ));
        }
    }
    for f in BLOCKS {
        if !block_lines.contains(f.text) {
            mismatches.push(format!(
                "BLOCKS has `{}`, which the README no longer shows",
                f.text
            ));
        }
    }
    for f in INLINE {
        if !inline.contains(f.text) {
            mismatches.push(format!(
                "INLINE has `{}`, which the README no longer shows",
                f.text
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "tests/readme.rs:\n{}",
        mismatches.join("\n")
    );

    // 1. the sh blocks, in README order
    let blocks: Vec<&str> = text
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    let mut seen = BTreeSet::new();
    let mut skipped_python = false;
    for line in blocks
        .iter()
        .flat_map(|b| b.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        if line == "cargo test" {
            let ci = std::fs::read_to_string(manifest().join(".ci/run")).unwrap();
            assert!(
                ci.lines().any(|l| l.trim() == "cargo test"),
                ".ci/run runs the README's test command"
            );
            continue;
        }
        if line == "apt-get update" {
            let ci = std::fs::read_to_string(manifest().join(".ci/run")).unwrap();
            assert!(ci.contains("apt-get update"), ".ci/run updates apt's lists");
            continue;
        }
        if let Some(pkgs) = line.strip_prefix("apt-get install -y ") {
            let ci = std::fs::read_to_string(manifest().join(".ci/run")).unwrap();
            for p in pkgs.split_whitespace() {
                assert!(ci.contains(p), ".ci/run installs {p}");
            }
            continue;
        }
        let form = BLOCKS.iter().find(|f| f.text == line).unwrap_or_else(|| {
            panic!("README command without a check in tests/readme.rs BLOCKS: `{line}`")
        });
        seen.insert(form.text);
        let out = match &form.how {
            How::Torch => {
                eprintln!("not run (needs PyTorch and the official checkout): {line}");
                continue;
            }
            How::Elsewhere(why) => {
                eprintln!("`{line}`: {why}");
                continue;
            }
            How::Tokensel(_) => unreachable!("block lines run as written"),
            How::AsWritten | How::Exits(_) => {
                if let Some(args) = line.strip_prefix("cargo run --release -- ") {
                    if args.starts_with("judge ext.json") && python.is_none() {
                        continue; // reads the Python line's output
                    }
                    let args: Vec<&str> = args
                        .split_whitespace()
                        .chain(form.shrink.iter().copied())
                        .collect();
                    ran.push(args.iter().map(|s| s.to_string()).collect());
                    tokensel_in(dir, &args)
                } else if let Some(args) = line.strip_prefix("python ") {
                    let Some(python) = &python else {
                        skipped_python = true;
                        continue;
                    };
                    Command::new(python)
                        .args(args.split_whitespace())
                        .current_dir(dir)
                        .output()
                        .unwrap()
                } else {
                    panic!("README block line of an unknown program: `{line}`")
                }
            }
        };
        match form.how {
            How::Exits(code) => assert_eq!(
                out.status.code(),
                Some(code),
                "`{line}` exits {code} as the README says: {}",
                stderr(&out)
            ),
            _ => ok(&out, line),
        }
        (form.check)(dir, &out);
        if let Some(lines) = expected_output.get(line) {
            let got = stdout(&out);
            let got: BTreeSet<&str> = got.lines().map(str::trim_end).collect();
            for want in lines {
                assert!(
                    got.contains(want.as_str()),
                    "`{line}`: the printed output the README shows has `{want}`, which the command no longer prints:\n{}",
                    stdout(&out)
                );
            }
        }
    }
    if skipped_python {
        eprintln!(
            "TOKENSEL_PYTHON not set: the README's Python lines and the judge that reads them were skipped"
        );
    }
    for form in BLOCKS {
        assert!(
            seen.contains(form.text),
            "tests/readme.rs BLOCKS has `{}`, which the README no longer shows",
            form.text
        );
    }

    // 2. the inline forms
    setup(dir);
    let commands: BTreeSet<String> = tokensel_commands();
    assert!(
        commands.contains("grid") && commands.contains("run"),
        "{commands:?}"
    );
    let spans: BTreeSet<String> = inline_spans(&text)
        .into_iter()
        .filter(|s| is_form(s, &commands))
        .collect();
    for span in &spans {
        let Some(form) = INLINE.iter().find(|f| f.text == span) else {
            // a flag alone, or a flag with a placeholder: some command here must pass it
            assert!(
                span.starts_with("--"),
                "README inline form without a check in tests/readme.rs INLINE: `{span}`"
            );
            continue;
        };
        let out = match &form.how {
            How::Tokensel(args) => {
                ran.push(args.iter().map(|s| s.to_string()).collect());
                tokensel_in(dir, args)
            }
            How::Elsewhere(why) => {
                eprintln!("`{span}`: {why}");
                continue;
            }
            How::AsWritten | How::Exits(_) | How::Torch => {
                unreachable!("inline forms name their command")
            }
        };
        ok(&out, span);
        (form.check)(dir, &out);
    }
    for form in INLINE {
        assert!(
            spans.contains(form.text),
            "tests/readme.rs INLINE has `{}`, which the README no longer shows",
            form.text
        );
    }

    // 3. the recipes, through the scripts
    ran.extend(script_forms(dir));

    // every --flag the README writes is passed by a command run here (or is another
    // program's)
    let passed: BTreeSet<&str> = ran
        .iter()
        .flatten()
        .map(|a| a.split('=').next().unwrap())
        .filter(|a| a.starts_with("--"))
        .collect();
    let written: BTreeSet<String> = spans
        .iter()
        .chain(
            blocks
                .iter()
                .flat_map(|b| b.lines())
                .map(str::to_string)
                .collect::<Vec<_>>()
                .iter(),
        )
        .flat_map(|s| s.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| {
            w.split('=')
                .next()
                .unwrap()
                .trim_end_matches([',', ')', '.'])
                .to_string()
        })
        .collect();
    let unpassed: Vec<&String> = written
        .iter()
        .filter(|flag| {
            !passed.contains(flag.as_str()) && !OTHER_PROGRAMS.iter().any(|(f, _)| f == *flag)
        })
        .collect();
    assert!(
        unpassed.is_empty(),
        "the README writes {unpassed:?}, which no command of this test passes"
    );
}

/// The names of tokensel's commands (from its help).
fn tokensel_commands() -> BTreeSet<String> {
    let o = Command::new(bin()).arg("--help").output().unwrap();
    let help = stdout(&o);
    help.split_once("Commands:")
        .unwrap()
        .1
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

/// The usage lines in the headers of the grid scripts, run through the scripts; the
/// arguments of every tokensel command they ran.
fn script_forms(dir: &Path) -> Vec<Vec<String>> {
    let examples = manifest().join("examples");
    let header = |name: &str| -> Vec<String> {
        std::fs::read_to_string(examples.join(name))
            .unwrap()
            .lines()
            .take_while(|l| l.starts_with('#'))
            .filter_map(|l| l.strip_prefix("#   "))
            .map(|l| l.trim().to_string())
            .filter(|l| l.starts_with("examples/") || l.starts_with("sbatch "))
            .collect()
    };
    let have_parallel = Command::new("parallel").arg("--version").output().is_ok();
    if std::env::var("TOKENSEL_REQUIRE_PARALLEL").is_ok() {
        assert!(
            have_parallel,
            "GNU parallel is required here (.ci/run installs it)"
        );
    }
    // heatmap-final's 1521 joint runs of 1000 steps take 14 minutes: 2 x 2 points of 2 steps
    let final_shrink = [
        "--set",
        "d=250,375",
        "--set",
        "mu_norm=5,7.5",
        "--steps",
        "2",
    ];
    let mut ran = Vec::new();
    let mut seen = BTreeSet::new();
    let script = |script: &str, args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new("bash");
        cmd.arg(examples.join(script))
            .args(args)
            .current_dir(dir)
            .env("TOKENSEL", bin());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = cmd.output().unwrap();
        ok(&o, &format!("{script} {args:?}"));
        o
    };
    for line in header("grid_parallel.sh") {
        seen.insert(line.clone());
        let mut args: Vec<String> = line
            .split_whitespace()
            .skip(1)
            .map(str::to_string)
            .collect();
        match args.as_slice() {
            [d, n, ..] if d == "DIR" && n == "N" => continue, // the usage line: the forms below
            _ => {}
        }
        if line.contains("heatmap-final") {
            args.extend(final_shrink.iter().map(|s| s.to_string()));
        }
        if !have_parallel {
            eprintln!("GNU parallel not installed: `{line}` not run");
            continue;
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = script("grid_parallel.sh", &a, &[]);
        assert!(
            stdout(&o).contains("wrote grid.csv, summary.csv, summary.json"),
            "{}",
            stdout(&o)
        );
        // the same grid without shards: the same bytes
        let out = PathBuf::from(a[0]);
        let whole = format!("{}-whole", a[0].replace('/', "-"));
        let mut grid: Vec<&str> = vec!["grid"];
        grid.extend(&a[2..]);
        grid.extend(["--out", &whole, "--quiet"]);
        let o = tokensel_in(dir, &grid);
        ok(&o, &format!("{grid:?}"));
        same_grid(&dir.join(&out), &dir.join(&whole));
        if line.contains("--seeds 0..5") {
            let s = grid_dir(&dir.join(&out), 20);
            assert_eq!(s["seeds"], serde_json::json!([0, 1, 2, 3, 4]));
        } else {
            let s = grid_dir(&dir.join(&out), 4);
            assert_eq!(s["name"], "heatmap-final");
        }
        ran.push(grid.iter().map(|s| s.to_string()).collect());
    }
    for line in header("grid_slurm.sh") {
        seen.insert(line.clone());
        if let Some(rest) = line.strip_prefix("sbatch --array=1-64 examples/grid_slurm.sh ") {
            // the array's 64 tasks, one after another
            let mut args: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
            args[0] = "slurm-final".into();
            args.extend(final_shrink.iter().map(|s| s.to_string()));
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            for task in 1..=64 {
                script(
                    "grid_slurm.sh",
                    &a,
                    &[("SLURM_ARRAY_TASK_ID", &task.to_string())],
                );
            }
            let mut grid = vec!["grid".to_string()];
            grid.extend(args[2..].iter().cloned());
            ran.push(grid);
        } else if line.contains("--wrap \"tokensel grid merge /shared/out/final\"") {
            let o = tokensel_in(dir, &["grid", "merge", "slurm-final"]);
            ok(&o, "the Slurm recipe's merge");
            grid_dir(&dir.join("slurm-final"), 4);
            if have_parallel {
                same_grid(&dir.join("slurm-final"), &dir.join("out/final"));
            }
        } else {
            panic!("grid_slurm.sh usage line without a run in tests/readme.rs: `{line}`");
        }
    }
    assert!(seen.len() >= 4, "the scripts' usage lines: {seen:?}");
    ran
}
