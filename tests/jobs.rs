//! The snapshot and benchmark jobs (issue 42): `compare --fail-above` gates a CI job and
//! `--out` writes its report; `compare` on a `[factorised]` config names the query map
//! and refuses a span twin; `diff` says when and from what to what.

use std::process::Output;
use std::time::Duration;

use serde_json::json;

mod common;
use common::{stderr, tokensel, tokensel_within};

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).expect("stdout is one JSON object")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

/// The compared quantities' names, in report order.
fn compared() -> Vec<&'static str> {
    tokensel::prelude::analysis::compare::COMPARED
        .iter()
        .map(|q| q.name())
        .collect()
}

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
    let compared = compared();
    let max = compared
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
        for (k, name) in compared.iter().enumerate() {
            let e = row["rel_err"][name].as_f64().unwrap();
            if e > max / 2.0 {
                assert!(step <= s, "{name} passes at checkpoint {s}, before {step}");
            }
            // a tie within the step goes to the first quantity in report order
            if s == step && e > max / 2.0 && compared.iter().position(|x| *x == q) > Some(k) {
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
/// `compare --steps 1000000 --out PATH` is refused at once (exit 2, before the
/// million-step work), saying `what`.
fn refused_out(path: &std::path::Path, what: &str) {
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
    // a file that is not a compare report (a config, a trajectory, any other file given
    // as --out by mistake) is refused before any work and left as it was
    let other = tmp.path().join("config.toml");
    for content in [
        &b"steps = 3\n"[..],
        b"old",
        b"{\"format\": \"tokensel-trajectory/2\"}",
    ] {
        std::fs::write(&other, content).unwrap();
        refused_out(&other, "is not a `compare --json` report");
        assert_eq!(std::fs::read(&other).unwrap(), content);
    }
    // the readable table says where it went; an earlier report is replaced
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"prec_bits": 1, "steps": 1, "tolerance": 1, "max_rel_err": {}}))
            .unwrap(),
    )
    .unwrap();
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
        refused_out(path, what);
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

/// Two small runs' trajectories in `dir` (`a/trajectory.json`, `b/trajectory.json`):
/// A at the config text `a`, B at `b` (200 steps, d = 50, n = 8).
fn two_runs(dir: &std::path::Path, a: &str, b: &str) -> (String, String) {
    let base = "d = 50\nn_train = 8\nn_test = 8\nsteps = 200\n";
    let mut paths: Vec<String> = [("a", a), ("b", b)]
        .into_iter()
        .map(|(name, extra)| {
            let t = common::run_out(dir, name, &format!("{base}{extra}"));
            t.to_str().unwrap().to_string()
        })
        .collect();
    (paths.remove(0), paths.remove(0))
}

fn read_json(path: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The relative deviation diff documents: |a - b| / max(|a|, |b|), 0 when equal.
fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (a - b).abs() / a.abs().max(b.abs())
    }
}

/// Runs at two step sizes: "configs differ in" gives both values (and `config_changes`
/// in `--json`); for the scalar records (loss, accuracies, norms) the largest relative
/// deviation, the first step at which it is reached and the first step at which the
/// quantity differs at all are the ones recomputed here from the two files; every
/// quantity keeps its entry in `--json` (a step where it differs, `null` where it
/// agrees exactly); the table lists the differing ones largest first (ties by name) and
/// folds the ones that agree exactly into one line naming each.
#[test]
fn diff_says_when_and_from_what_to_what() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = two_runs(tmp.path(), "", "step_size = 0.3\n");
    let o = tokensel(&["diff", &a, &b, "--json"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(
        v["config_changes"],
        serde_json::json!([{"key": "step_size", "a": 1e-4, "b": 0.3}]),
        "{v}"
    );
    assert_eq!(v["config_differences"], serde_json::json!(["step_size"]));
    let (ta, tb) = (read_json(&a), read_json(&b));
    let (ca, cb) = (
        ta["checkpoints"].as_array().unwrap(),
        tb["checkpoints"].as_array().unwrap(),
    );
    assert_eq!(ca.len(), cb.len());
    for q in [
        "train_loss",
        "train_accuracy",
        "test_accuracy",
        "q_norm",
        "grad_norm",
    ] {
        let (mut max, mut at, mut first) = (0.0f64, None, None);
        for (x, y) in ca.iter().zip(cb) {
            let step = x["step"].as_u64().unwrap();
            let d = rel(x[q].as_f64().unwrap(), y[q].as_f64().unwrap());
            if d > max {
                (max, at) = (d, Some(step));
            }
            if d != 0.0 && first.is_none() {
                first = Some(step);
            }
        }
        assert_eq!(v["max_rel_dev"][q].as_f64().unwrap(), max, "{q}");
        assert_eq!(v["max_rel_dev_step"][q].as_u64(), at, "{q}");
        assert_eq!(v["first_differs"][q].as_u64(), first, "{q}");
    }
    // every quantity keeps its entry; a step exactly where it differs
    let devs = v["max_rel_dev"].as_object().unwrap();
    for (map, what) in [
        ("max_rel_dev_step", "quantity"),
        ("first_differs", "quantity"),
    ] {
        let m = v[map].as_object().unwrap();
        assert_eq!(
            m.keys().collect::<Vec<_>>(),
            devs.keys().collect::<Vec<_>>(),
            "{map}: every {what}"
        );
        for (k, s) in m {
            assert_eq!(s.is_null(), devs[k].as_f64() == Some(0.0), "{map}.{k}");
        }
    }
    let agree: Vec<&String> = devs
        .iter()
        .filter(|(_, d)| d.as_f64() == Some(0.0))
        .map(|(k, _)| k)
        .collect();
    assert!(!agree.is_empty(), "some quantity agrees exactly: {v}");
    assert!(agree.len() < devs.len(), "some quantity differs: {v}");

    // the table
    let t = tokensel(&["diff", &a, &b]);
    assert_eq!(code(&t), 1);
    let text = String::from_utf8_lossy(&t.stdout).into_owned();
    assert!(
        text.contains("configs differ in: step_size: 0.0001 -> 0.3\n"),
        "{text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    let head = lines
        .iter()
        .position(|l| l.trim_start().starts_with("quantity") && l.contains("first differs"))
        .expect("a table of the differing quantities");
    let rows: Vec<(String, f64, String, String)> = lines[head + 1..]
        .iter()
        .take_while(|l| !l.is_empty() && !l.contains("agree"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 4, "{l}");
            (
                w[0].to_string(),
                w[1].parse().unwrap(),
                w[2].to_string(),
                w[3].to_string(),
            )
        })
        .collect();
    assert_eq!(rows.len(), devs.len() - agree.len(), "{text}");
    for pair in rows.windows(2) {
        let ((n0, d0, ..), (n1, d1, ..)) = (&pair[0], &pair[1]);
        let (e0, e1) = (devs[n0].as_f64().unwrap(), devs[n1].as_f64().unwrap());
        assert!(
            e0 > e1 || (e0 == e1 && n0 < n1),
            "sorted by deviation, ties by name: {n0} {d0} before {n1} {d1}"
        );
    }
    for (name, _, at, first) in &rows {
        assert_eq!(at, &v["max_rel_dev_step"][name].to_string(), "{name}");
        assert_eq!(first, &v["first_differs"][name].to_string(), "{name}");
    }
    let folded = format!(
        "  {} quantities agree exactly: {}\n",
        agree.len(),
        agree
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(text.contains(&folded), "{text}");
    for name in &agree {
        assert!(
            !lines
                .iter()
                .any(|l| l.split_whitespace().next() == Some(name.as_str())),
            "{name} has no row of its own: {text}"
        );
    }
}

/// One record changed at two checkpoints (the loss at checkpoints k1 < k2, by relative
/// amounts 1e-9 and 1e-3): diff finds it differing first at k1 and deviating most at k2
/// (deviation 1e-3 / (1 + 1e-3), to a few ulps of the edited values), everything else
/// agreeing exactly in one line.
#[test]
fn diff_finds_the_step_of_an_edited_record() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, _) = two_runs(tmp.path(), "", "");
    let mut t = read_json(&a);
    let cps = t["checkpoints"].as_array_mut().unwrap();
    let (k1, k2) = (
        cps[5]["step"].as_u64().unwrap(),
        cps[12]["step"].as_u64().unwrap(),
    );
    for (i, by) in [(5, 1e-9), (12, 1e-3)] {
        let x = cps[i]["train_loss"].as_f64().unwrap();
        cps[i]["train_loss"] = serde_json::json!(x * (1.0 + by));
    }
    let edited = tmp.path().join("edited.json");
    std::fs::write(&edited, serde_json::to_vec(&t).unwrap()).unwrap();
    let o = tokensel(&["diff", &a, edited.to_str().unwrap(), "--json"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["first_differs"]["train_loss"], k1, "{v}");
    assert_eq!(v["max_rel_dev_step"]["train_loss"], k2, "{v}");
    let dev = v["max_rel_dev"]["train_loss"].as_f64().unwrap();
    // two roundings of the edit (x (1 + 1e-3) and the division): a few ulps of 1
    assert!(
        (dev - 1e-3 / (1.0 + 1e-3)).abs() < 8.0 * f64::EPSILON,
        "{dev}"
    );
    let t = tokensel(&["diff", &a, edited.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&t.stdout).into_owned();
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("train_loss"))
        .expect("a row for train_loss");
    let w: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        (w[2], w[3]),
        (k2.to_string().as_str(), k1.to_string().as_str())
    );
    let n = v["max_rel_dev"].as_object().unwrap().len() - 1;
    assert!(
        text.contains(&format!("  {n} quantities agree exactly: ")),
        "{text}"
    );
    assert!(text.contains("  4 group masses agree exactly: I, R, W_opposite, W_same\n"));
}

/// `cost --follow N` (issue 42): each hardware row's "follows the twin" cell is compare's
/// own first exceedance. On the default data f32 leaves 1e-8 at once (its inputs
/// rounded to 24 bits: errors near 2^-24 = 6e-8) while f64 follows the 256-bit twin over
/// all 60 steps (errors near 2^-53 times the condition, measured 6e-15 over 200 steps);
/// the JSON's cells equal a direct `compare` call's (the earliest of its
/// `first_exceed`, its largest `max_rel_err`), the twin's rows are `null`, and the text
/// table prints the column with a dash for the twin.
#[test]
fn cost_follow_is_compares_first_exceedance() {
    use tokensel::prelude::analysis::compare;
    use tokensel::prelude::{Config, Dataset, F32, Formulation, Method};
    let args = [
        "cost",
        "--quiet",
        "--precs",
        "256",
        "--reps",
        "1",
        "--twin-reps",
        "1",
        "--method",
        "span",
        "--follow",
        "60",
    ];
    let o = tokensel(&[&args[..], &["--json"]].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let j = json(&o);
    let rows = j["rows"].as_array().unwrap();
    let cfg = Config {
        steps: 60,
        method: Method::Span,
        formulation: Formulation::Stable,
        ..Config::default()
    };
    let data = Dataset::generate(&cfg);
    let opts = compare::Options {
        prec: 256,
        tol: 1e-8,
        predictor: false,
        predictor_steps: Some(0),
        twin_method: Method::Span,
        certify: None,
    };
    let f64_report = compare::compare(&cfg, &data, opts, &mut |_| {}).unwrap();
    let f32_report = compare::compare_in(&cfg, &data, F32, opts, None, &mut |_| {}).unwrap();
    let earliest = |r: &compare::Report| {
        r.first_exceed
            .iter()
            .filter_map(|(q, s)| s.map(|s| (s, *q)))
            .min_by_key(|(s, q)| (*s, compare::COMPARED.iter().position(|c| c == q)))
    };
    let largest = |r: &compare::Report| r.max_rel_err.values().copied().fold(0.0, f64::max);
    for (trainer, report) in [("f64", &f64_report), ("f32", &f32_report)] {
        let row = rows.iter().find(|r| r["trainer"] == trainer).unwrap();
        let f = &row["follow"];
        assert_eq!(
            (f["steps"].as_u64(), f["prec_bits"].as_u64()),
            (Some(60), Some(256))
        );
        assert_eq!(f["tolerance"], 1e-8);
        assert_eq!(
            f["max_rel_err"].as_f64().unwrap(),
            largest(report),
            "{trainer}"
        );
        match earliest(report) {
            Some((step, q)) => {
                assert_eq!(f["first_exceed"]["step"], step, "{trainer}");
                assert_eq!(f["first_exceed"]["quantity"], q.name(), "{trainer}");
            }
            None => assert!(f["first_exceed"].is_null(), "{trainer}: {f}"),
        }
    }
    // the bound: f32 leaves 1e-8 within the first steps, f64 never over these 60
    let (f32_step, _) = earliest(&f32_report).expect("f32 leaves 1e-8");
    assert!(f32_step < 5, "f32 left at step {f32_step}");
    assert_eq!(earliest(&f64_report), None, "{:?}", f64_report.max_rel_err);
    let twin = rows.iter().find(|r| r["trainer"] == "mpfr").unwrap();
    assert!(
        twin["follow"].is_null() && twin.get("follow").is_some(),
        "{twin}"
    );
    let o = tokensel(&args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("follows the twin"), "{text}");
    let line = |t: &str| text.lines().find(|l| l.starts_with(t)).unwrap().to_string();
    assert!(line("  f64 ").contains("  all 60 (max "), "{text}");
    assert!(
        line("  f32 ").contains(&format!("step {f32_step} (")),
        "{text}"
    );
    assert!(line("  mpfr ").ends_with('\u{2014}'), "{text}");
    // without --follow, no column and no key (the table as before)
    let o = tokensel(&[&args[..args.len() - 2], &["--json"]].concat());
    assert!(json(&o)["rows"][0].get("follow").is_none());
    // --tol and --follow-prec need --follow; a bad --follow is refused before any work
    for (extra, words) in [
        (&["--tol", "1e-6"][..], "--follow"),
        (&["--follow", "0"][..], "--follow"),
        (&["--follow", "5", "--follow-prec", "53"][..], "truth twin"),
    ] {
        let o = tokensel(&[&["cost", "--quiet", "--reps", "1"][..], extra].concat());
        assert_eq!(code(&o), 2, "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(words), "{extra:?}: {}", stderr(&o));
    }
}

/// `twin --state` says where it wrote the state and `--resume` from which step (issue
/// 42: both were silent), one line each on stderr, none with --quiet: a run that crashes
/// after step 3 (state saved every 2 steps: at step 2) resumes from step 2 and writes
/// its last state at step 6.
#[test]
fn twin_says_what_it_did_with_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("s.json");
    let s = state.to_str().unwrap();
    let cfg = dir.path().join("small.toml");
    std::fs::write(&cfg, "d = 40\n").unwrap();
    let c = cfg.to_str().unwrap();
    let twin = |extra: &[&str]| {
        let base = [
            "twin",
            "--prec",
            "64",
            "--steps",
            "6",
            "--config",
            c,
            "--state",
            s,
            "--save-every",
            "2",
        ];
        tokensel_within(&[&base[..], extra].concat(), Duration::from_secs(60)).expect("no hang")
    };
    let o = twin(&["--stop-after", "3"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(!stderr(&o).contains("wrote state"), "{}", stderr(&o));
    // a state of another config is refused before any step, and nothing says it resumed
    let o = twin(&["--resume", "--seed", "5"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(!stderr(&o).contains("resumed"), "{}", stderr(&o));
    let o = twin(&["--resume"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("resumed from step 2 of {s}\n")),
        "{err}"
    );
    assert!(
        err.contains(&format!("wrote state at step 6 to {s}\n")),
        "{err}"
    );
    std::fs::remove_file(&state).unwrap();
    let o = twin(&["--quiet"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!stderr(&o).contains("state"), "{}", stderr(&o));
    let o = twin(&["--quiet", "--resume"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!stderr(&o).contains("resumed"), "{}", stderr(&o));
    std::fs::remove_file(&state).unwrap();
    let o = twin(&[]);
    assert!(
        stderr(&o).contains(&format!("wrote state at step 6 to {s}\n")),
        "{}",
        stderr(&o)
    );
}
