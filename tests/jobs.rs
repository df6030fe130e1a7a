//! The snapshot and benchmark jobs (issue 42): `compare --fail-above` gates a CI job and
//! `--out` writes its report; `compare` on a `[factorised]` config names the query map
//! and refuses a span twin; `diff` says when and from what to what.

use std::process::Output;
use std::time::Duration;

mod common;
use common::{stderr, tokensel, tokensel_within};

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).expect("stdout is one JSON object")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

/// The compared quantities, in report order.
const COMPARED: [&str; 7] = [
    "q",
    "scores",
    "attention",
    "rest",
    "output",
    "grad_q",
    "loss",
];

/// A 20-step comparison (the default data; q and grad_q at the checkpoints), with
/// `extra` flags.
fn compare(extra: &[&str]) -> Output {
    let mut args = vec![
        "compare",
        "--steps",
        "20",
        "--no-predictor",
        "--quiet",
        "--json",
    ];
    args.extend_from_slice(extra);
    tokensel(&args)
}

/// The gate passes exactly where the errors do: set it at half the largest relative
/// error of the run (M / 2) and the report names a quantity, a step and an error in
/// (M / 2, M], the first step at which one passed it (no checkpoint row passes it
/// earlier; at a checkpoint the error is that row's), exit 1; set it at 2 M and the run
/// passes, exit 0; without it the report has no gate and exits 0 as before.
#[test]
fn fail_above_gates_on_the_first_error_past_it() {
    let plain = compare(&[]);
    assert_eq!(code(&plain), 0, "{}", stderr(&plain));
    let v = json(&plain);
    assert!(v.get("gate").is_none(), "no gate without the flag: {v}");
    let max = COMPARED
        .iter()
        .map(|q| v["max_rel_err"][q].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(max > 0.0, "some rounding error in 20 steps: {v}");

    let half = format!("{:e}", max / 2.0);
    let failed = compare(&["--fail-above", &half]);
    assert_eq!(code(&failed), 1, "{}", stderr(&failed));
    let g = json(&failed);
    // everything but the gate is the plain report
    let mut without = g.clone();
    without.as_object_mut().unwrap().remove("gate");
    assert_eq!(
        without, v,
        "the gate adds a record and changes nothing else"
    );
    let gate = &g["gate"];
    assert_eq!(gate["failed"], true, "{gate}");
    let first = &gate["first"];
    let (q, step, err) = (
        first["quantity"].as_str().unwrap(),
        first["step"].as_u64().unwrap(),
        first["rel_err"].as_f64().unwrap(),
    );
    assert!(
        err > max / 2.0 && err <= v["max_rel_err"][q].as_f64().unwrap(),
        "{gate}"
    );
    for row in v["checkpoints"].as_array().unwrap() {
        let s = row["step"].as_u64().unwrap();
        for (k, name) in COMPARED.iter().enumerate() {
            let e = row["rel_err"][name].as_f64().unwrap();
            if e > max / 2.0 {
                assert!(step <= s, "{name} passes at checkpoint {s}, before {step}");
            }
            // a tie within the step goes to the first quantity in report order
            if s == step && e > max / 2.0 && COMPARED.iter().position(|x| *x == q) > Some(k) {
                panic!("{name} passes at step {s} before {q} in report order");
            }
        }
        if s == step {
            assert_eq!(row["rel_err"][q].as_f64().unwrap(), err, "{row}");
        }
    }

    // the table says the same
    let text = tokensel(&[
        "compare",
        "--steps",
        "20",
        "--no-predictor",
        "--quiet",
        "--fail-above",
        &half,
    ]);
    assert_eq!(code(&text), 1);
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(
        out.contains(&format!(
            "gate: FAILED --fail-above {half}: `{q}` passes it first at step {step} (relative error {err:.3e})"
        )),
        "{out}"
    );

    let double = format!("{:e}", max * 2.0);
    let passed = compare(&["--fail-above", &double]);
    assert_eq!(code(&passed), 0, "{}", stderr(&passed));
    let gate = &json(&passed)["gate"];
    assert_eq!(gate["failed"], false, "{gate}");
    assert!(gate["first"].is_null(), "{gate}");
}

/// A bad gate (not a number, negative, zero, NaN, infinite) is exit 2 before any work:
/// a million-step comparison refuses at once, printing nothing on stdout.
#[test]
fn bad_fail_above_is_refused_before_any_work() {
    for bad in ["abc", "-1e-8", "0", "nan", "inf"] {
        let flag = format!("--fail-above={bad}");
        let o = tokensel_within(
            &["compare", "--steps", "1000000", "--quiet", &flag],
            Duration::from_secs(60),
        )
        .unwrap_or_else(|| panic!("{flag}: still running after 60 s (not refused)"));
        assert_eq!(code(&o), 2, "{flag}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{flag}");
        assert!(stderr(&o).contains("fail-above"), "{flag}: {}", stderr(&o));
    }
}

/// `--out FILE` writes the report `--json` prints (pretty), atomically, replacing an
/// existing regular file; a directory, a symbolic link or a FIFO there is refused with
/// exit 2 before any work and left as it was.
#[test]
fn out_writes_the_json_report_and_refuses_what_is_not_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("reports").join("compare.json");
    let f = file.to_str().unwrap();
    let o = compare(&["--out", f]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(written, json(&o));
    // the readable table says where it went; a regular file is replaced
    std::fs::write(&file, b"old").unwrap();
    let t = tokensel(&[
        "compare",
        "--steps",
        "20",
        "--no-predictor",
        "--quiet",
        "--out",
        f,
    ]);
    assert_eq!(code(&t), 0, "{}", stderr(&t));
    let text = String::from_utf8_lossy(&t.stdout);
    assert!(text.contains(&format!("report written to {f}")), "{text}");
    let again: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(again, written, "the same run, the same report");

    let dir = tmp.path().join("a-dir");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("keep"), b"mine").unwrap();
    let target = tmp.path().join("target.txt");
    std::fs::write(&target, b"mine").unwrap();
    let link = tmp.path().join("link.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for (path, what) in [(&dir, "is a directory"), (&link, "symbolic link")] {
        let o = tokensel_within(
            &[
                "compare",
                "--steps",
                "1000000",
                "--quiet",
                "--out",
                path.to_str().unwrap(),
            ],
            Duration::from_secs(60),
        )
        .expect("refused at once");
        assert_eq!(code(&o), 2, "{}", stderr(&o));
        assert!(stderr(&o).contains(what), "{}", stderr(&o));
    }
    assert_eq!(std::fs::read(dir.join("keep")).unwrap(), b"mine");
    assert_eq!(std::fs::read(&target).unwrap(), b"mine");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
}

/// On a `[factorised]` config: an explicit span twin is refused as `run --method span`
/// is (exit 2, before any work, naming the capability), while the default twin runs
/// the direct step; the header names the query map exactly as `run`'s does, and
/// `--json` records it (a config without the map has no `query_map`).
#[test]
fn compare_on_factorised_names_the_map_and_refuses_a_span_twin() {
    let cfg = "examples/factorised.toml";
    let o = tokensel_within(
        &[
            "compare",
            "--config",
            cfg,
            "--steps",
            "1000000",
            "--quiet",
            "--twin-method",
            "span",
        ],
        Duration::from_secs(60),
    )
    .expect("refused at once");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    let err = stderr(&o);
    assert!(
        err.contains("compare --twin-method span needs the capability `span_form`"),
        "{err}"
    );
    let run = tokensel(&["run", "--config", cfg, "--method", "span", "--quiet"]);
    assert_eq!(code(&run), 2, "run refuses it too: {}", stderr(&run));

    let args = ["compare", "--config", cfg, "--steps", "5", "--no-predictor"];
    let text = tokensel(&[&args[..], &["--quiet"]].concat());
    assert_eq!(code(&text), 0, "{}", stderr(&text));
    let j = tokensel(&[&args[..], &["--quiet", "--json"]].concat());
    let v = json(&j);
    assert_eq!(v["twin_method"], "direct", "{v}");
    let map = v["query_map"].as_str().expect("query_map recorded");
    assert!(
        map.starts_with("factorised query-key (m = 16, no biases") && map.ends_with("p fixed)"),
        "{map}"
    );
    let header = String::from_utf8_lossy(&text.stdout);
    let header = header.lines().next().unwrap();
    assert!(header.contains("twin (stable, direct)"), "{header}");
    assert!(header.contains(&format!(", {map},")), "{header}");
    let run = tokensel(&["run", "--config", cfg, "--steps", "5", "--quiet"]);
    let run_text = String::from_utf8_lossy(&run.stdout);
    assert!(
        run_text.lines().next().unwrap().contains(map),
        "run's header names it the same way: {run_text}"
    );
    assert!(json(&compare(&[])).get("query_map").is_none());
}
