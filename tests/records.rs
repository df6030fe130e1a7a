//! A checkpoint's record has one visit order (`io::record::visit`) and its consumers are
//! visitors of it. What is checked here:
//! - `tokensel diff` sees the in-sequence prompt's per-sample records (it once answered
//!   "agree" for two trajectories whose `samples[0].prompt` differed);
//! - the serde shape of a checkpoint (binary, K = 3, prompt in sequence, `[direction]`)
//!   has exactly the leaves the visit reports, both ways: a field added to the record and
//!   not to the visit fails here;
//! - every leaf of the last checkpoint, perturbed within its range, is read back and
//!   reported by `diff` under its path (the contract of the generic conformance test).

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{run_out as run, stderr, tokensel};
use serde_json::Value;
use tokensel::prelude::Trajectory;
use tokensel::prelude::analysis::certify::Certificate;
use tokensel::prelude::analysis::diff::diff;
use tokensel::prelude::formats::record::Leaves;

/// The binary model with both sets non-empty (noisy samples at eta = 0.25).
const BINARY: &str = "d = 40\nn_train = 8\nn_test = 8\nmu_norm = 6.0\neta = 0.25\nsteps = 20\n";

/// Three classes (one weak token per other class: T = 9).
const K3: &str = "d = 40\nn_train = 9\nn_test = 9\nmu_norm = 6.0\neta = 0.25\nsteps = 20\n\
                  [model]\nkind = \"multiclass\"\nclasses = 3\n[layout]\ntokens = 9\nweak_opposite = 2\n";

/// The prompt in sequence, direct method.
const PROMPT: &str = "d = 40\nn_train = 8\nn_test = 8\nmu_norm = 6.0\neta = 0.25\nsteps = 20\n\
                      method = \"direct\"\n[model]\nprompt = \"in-sequence\"\n";

/// The direction against the attention SVM.
const DIRECTION: &str = "d = 60\nn_train = 6\nn_test = 20\nmu_norm = 6.0\neta = 0.25\nsteps = 20\n\
                         [direction]\npattern = \"theorem\"\n";

fn read(path: &Path) -> Trajectory {
    Trajectory::from_json(&std::fs::read_to_string(path).unwrap(), path).unwrap()
}

#[test]
fn diff_sees_the_prompts_per_sample_records() {
    let tmp = tempfile::tempdir().unwrap();
    let a = run(tmp.path(), "a", PROMPT);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    let last = v["checkpoints"].as_array().unwrap().len() - 1;
    let prompt = &mut v["checkpoints"][last]["samples"][0]["prompt"];
    let attention = prompt["attention"].as_f64().unwrap();
    // an edit of each leaf alone, then of both (the case)
    let edits: [(&str, bool, bool); 3] = [
        ("samples.prompt.attention", true, false),
        ("samples.prompt.top", false, true),
        ("samples.prompt.attention", true, true),
    ];
    let original = prompt.clone();
    for (leaf, edit_attention, edit_top) in edits {
        let mut e = v.clone();
        let p = &mut e["checkpoints"][last]["samples"][0]["prompt"];
        *p = original.clone();
        if edit_attention {
            p["attention"] = (if attention == 0.5 { 0.25 } else { 0.5 }).into();
        }
        if edit_top {
            p["top"] = (!original["top"].as_bool().unwrap()).into();
        }
        let b = tmp.path().join("b.json");
        std::fs::write(&b, serde_json::to_string(&e).unwrap()).unwrap();
        let o = tokensel(&["diff", "--json", a.to_str().unwrap(), b.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{leaf}: {}", stderr(&o));
        let report: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(report["diverged"], true, "{leaf}");
        assert_eq!(report["first_quantity"], leaf, "{leaf}");
        for (path, edited) in [
            ("samples.prompt.attention", edit_attention),
            ("samples.prompt.top", edit_top),
        ] {
            let dev = report["max_rel_dev"][path].as_f64().unwrap();
            assert_eq!(dev > 0.0, edited, "{leaf}: {path} = {dev}");
        }
        let o = tokensel(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{leaf}");
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains(&format!("in `{leaf}`")), "{text}");
        assert!(text.contains("verdict: DIFFER"), "{text}");
    }
}

/// The four runs whose records together hold every kind of leaf.
fn runs(dir: &Path) -> Vec<(&'static str, std::path::PathBuf)> {
    [
        ("binary", BINARY),
        ("k3", K3),
        ("prompt", PROMPT),
        ("direction", DIRECTION),
    ]
    .into_iter()
    .map(|(name, cfg)| (name, run(dir, name, cfg)))
    .collect()
}

/// Whether the serde shape of a checkpoint's JSON `value` has exactly the leaves the
/// visit reports (`visited`), both ways: the first leaf no visitor sees, or the first
/// path the visit reports that the record does not hold.
fn covers(value: &Value, visited: &BTreeSet<String>) -> Result<(), String> {
    // every scalar leaf (numbers, booleans, strings, nulls), and whether it is null
    let mut leaves = Vec::new();
    pointers(value, "", "", &mut leaves);
    let shape: Vec<(String, bool)> = leaves
        .into_iter()
        .map(|(pointer, path)| (path, value.pointer(&pointer).unwrap().is_null()))
        .collect();
    // a null is a leaf, or an absent record whose leaves the visit names below it
    let covered = |p: &str, null: bool| {
        visited.contains(p) || (null && visited.iter().any(|v| v.starts_with(&format!("{p}."))))
    };
    if let Some((p, _)) = shape.iter().find(|(p, null)| !covered(p, *null)) {
        return Err(format!("`{p}` is in the record but no visitor sees it"));
    }
    let nulls: Vec<&String> = shape.iter().filter(|l| l.1).map(|l| &l.0).collect();
    for p in visited {
        let under_null = nulls
            .iter()
            .any(|n| *n == p || p.starts_with(&format!("{n}.")));
        if !(shape.iter().any(|(s, _)| s == p) || under_null) {
            return Err(format!(
                "the visit reports `{p}`, which the record does not hold"
            ));
        }
    }
    Ok(())
}

/// The paths of `leaves`.
fn paths<V>(leaves: Leaves<V>) -> BTreeSet<String> {
    leaves.0.into_iter().map(|(p, _)| p).collect()
}

#[test]
fn the_visit_reports_exactly_the_serde_leaves() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, path) in runs(tmp.path()) {
        let t = read(&path);
        let tokens = t.config.layout.tokens;
        for c in [&t.checkpoints[0], t.last()] {
            let value = serde_json::to_value(c).unwrap();
            if let Err(e) = covers(&value, &paths(Leaves::of(c, tokens))) {
                panic!("{name} step {}: {e}", c.step);
            }
        }
        // the runs hold what they are for: both sets, the K-class, prompt and direction
        // records
        let last = paths(Leaves::of(t.last(), tokens));
        let expect = match name {
            "binary" => "selection.noisy.R",
            "k3" => "classes.selection.noisy.W_observed",
            "prompt" => "samples.prompt.top",
            _ => "direction.support_deviation",
        };
        assert!(last.contains(expect), "{name}: {last:?}");
    }
}

/// A certificate's checkpoints are the same record over intervals, with their proof
/// (the counts behind the shares, the decisions, the radii, each sample's prediction,
/// the direction's `on_pattern` count): the visit reports exactly their serde leaves too,
/// for the binary model, K = 3 and `[direction]` (the in-sequence prompt is refused by
/// `certify`); and the check fails on a leaf no visitor sees (one added to a sample, to
/// the checkpoint, to its proof's counts).
#[test]
fn the_visit_reports_exactly_a_certificates_serde_leaves() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, config) in [("binary", BINARY), ("k3", K3), ("direction", DIRECTION)] {
        let cfg = tmp.path().join(format!("{name}.toml"));
        std::fs::write(&cfg, config).unwrap();
        let o = tokensel(&[
            "certify",
            "--quiet",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
        ]);
        assert!(
            o.status.code().is_some_and(|c| c < 2),
            "{name}: {}",
            stderr(&o)
        );
        let text = String::from_utf8(o.stdout).unwrap();
        let cert = Certificate::from_json(&text, Path::new("c")).unwrap();
        let tokens = cert.config.layout.tokens;
        for c in [&cert.checkpoints[0], cert.last()] {
            let mut value = serde_json::to_value(c).unwrap();
            let visited = paths(Leaves::of(c, tokens));
            if let Err(e) = covers(&value, &visited) {
                panic!("{name} certificate step {}: {e}", c.step);
            }
            let expect = match name {
                "binary" => "samples.prediction",
                "k3" => "classes.selection.noisy.W_observed",
                _ => "direction.on_pattern.hi",
            };
            assert!(visited.contains(expect), "{name}: {visited:?}");
            // a leaf no visitor sees fails the check, wherever it is
            for pointer in ["/samples/0", "", "/train_correct"] {
                let saved = value.clone();
                value
                    .pointer_mut(pointer)
                    .unwrap()
                    .as_object_mut()
                    .unwrap()
                    .insert("unseen".into(), 1.into());
                let e = covers(&value, &visited).unwrap_err();
                assert!(
                    e.contains("unseen") && e.contains("no visitor sees it"),
                    "{e}"
                );
                value = saved;
            }
        }
    }
}

/// `x` moved within the range of leaf `path` (a share stays in [0, 1], a top token below
/// T, a norm >= 0).
fn perturb(path: &str, x: &Value, tokens: usize) -> Option<Value> {
    if let Some(b) = x.as_bool() {
        return Some((!b).into());
    }
    let v = x.as_f64()?;
    if path == "samples.top" {
        return Some(((v as usize + 1) % tokens).into());
    }
    let shares = [
        "accuracy",
        "attention",
        "selection",
        "rest",
        "mass",
        "test_tie",
        "test_undecided",
        "on_pattern",
        "prompt",
    ];
    let share = shares.iter().any(|s| path.contains(s)) && path != "direction.norm";
    Some(if share || path == "direction.one_minus_corr" {
        if v < 0.5 { v + 0.25 } else { v - 0.25 }.into()
    } else {
        (v.abs() * 1.5 + 0.125).into()
    })
}

/// Every leaf of `v` by its JSON pointer and its path with indices dropped.
fn pointers(v: &Value, pointer: &str, path: &str, out: &mut Vec<(String, String)>) {
    let join = |k: &str| match path {
        "" => k.to_string(),
        p => format!("{p}.{k}"),
    };
    match v {
        Value::Object(m) => m
            .iter()
            .for_each(|(k, x)| pointers(x, &format!("{pointer}/{k}"), &join(k), out)),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, x)| pointers(x, &format!("{pointer}/{i}"), path, out)),
        _ => out.push((pointer.to_string(), path.to_string())),
    }
}

#[test]
fn diff_reports_every_leaf_perturbed_within_its_range() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, path) in runs(tmp.path()) {
        let text = std::fs::read_to_string(&path).unwrap();
        let a = read(&path);
        let tokens = a.config.layout.tokens;
        let v: Value = serde_json::from_str(&text).unwrap();
        let last = v["checkpoints"].as_array().unwrap().len() - 1;
        let base = format!("/checkpoints/{last}");
        let mut leaves = Vec::new();
        pointers(v.pointer(&base).unwrap(), &base, "", &mut leaves);
        let mut seen = BTreeSet::new();
        for (pointer, leaf) in leaves {
            let x = v.pointer(&pointer).unwrap();
            let Some(y) = perturb(&leaf, x, tokens).filter(|_| leaf != "step") else {
                continue;
            };
            let mut e = v.clone();
            *e.pointer_mut(&pointer).unwrap() = y;
            let b = Trajectory::from_json(&e.to_string(), Path::new("b.json"))
                .unwrap_or_else(|err| panic!("{name}: {pointer} perturbed is refused: {err}"));
            let r = diff(&a, &b, 1e-12, false);
            assert!(r.diverged, "{name}: {pointer}");
            let dev = r.max_rel_dev.get(&leaf).copied().unwrap_or(0.0);
            assert!(dev > 0.0, "{name}: {pointer} -> `{leaf}`: {dev}");
            seen.insert(leaf);
        }
        assert!(seen.len() > 30, "{name}: {seen:?}");
    }
}

/// The reader's range checks are a visitor of the record: a prompt attention of 1.5 is
/// refused (exit 2, naming the leaf) like an attention share of 1.5, and so is the
/// prompt's share of a set.
#[test]
fn the_reader_refuses_a_leaf_out_of_its_range_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let a = run(tmp.path(), "a", PROMPT);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    let edits: [(&str, &str); 4] = [
        (
            "/checkpoints/1/samples/2/prompt/attention",
            "samples[2].prompt.attention 1.5 is outside [0, 1]",
        ),
        (
            "/checkpoints/1/prompt/attention/noisy",
            "prompt.attention.noisy 1.5 is outside [0, 1]",
        ),
        (
            "/checkpoints/1/attention/clean/R",
            "attention.clean.R 1.5 is outside [0, 1]",
        ),
        (
            "/checkpoints/1/samples/0/selection_score",
            "samples[0].selection_score 1.5 is outside [0, 1]",
        ),
    ];
    for (pointer, message) in edits {
        let mut e = v.clone();
        *e.pointer_mut(pointer).unwrap() = 1.5.into();
        let b = tmp.path().join("b.json");
        std::fs::write(&b, e.to_string()).unwrap();
        let fig = tmp.path().join("f.svg");
        for args in [
            vec!["diff", a.to_str().unwrap(), b.to_str().unwrap()],
            vec!["plot", "--out", fig.to_str().unwrap(), b.to_str().unwrap()],
        ] {
            let o = tokensel(&args);
            assert_eq!(o.status.code(), Some(2), "{pointer}: {}", stderr(&o));
            assert!(stderr(&o).contains(message), "{pointer}: {}", stderr(&o));
        }
    }
}

/// The trajectory-level direction summary (the attention SVM's limit and the run's end
/// against it) is part of what diff compares: an edit of any one of its fields makes
/// the trajectories differ (exit 1, named under `limit_differences`), and the reader
/// refuses a limit accuracy outside [0, 1] (exit 2). Both used to pass as "agree".
#[test]
fn diff_and_the_reader_see_the_direction_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let a = run(tmp.path(), "a", DIRECTION);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    let b = tmp.path().join("b.json");
    let edits: [(&str, Value); 3] = [
        ("/direction/limit_test_accuracy", 0.25.into()),
        ("/direction/pattern_choice", "given".into()),
        ("/direction/verdict", "edited".into()),
    ];
    for (pointer, value) in edits {
        let mut e = v.clone();
        *e.pointer_mut(pointer).unwrap() = value;
        std::fs::write(&b, e.to_string()).unwrap();
        let o = tokensel(&["diff", a.to_str().unwrap(), b.to_str().unwrap(), "--json"]);
        assert_eq!(o.status.code(), Some(1), "{pointer}: {}", stderr(&o));
        let r: Value = serde_json::from_slice(&o.stdout).unwrap();
        let field = format!("direction.{}", pointer.rsplit('/').next().unwrap());
        assert!(
            r["limit_differences"]
                .as_array()
                .unwrap()
                .contains(&field.clone().into()),
            "{pointer}: {r}"
        );
    }
    let mut e = v;
    *e.pointer_mut("/direction/limit_test_accuracy").unwrap() = 1.5.into();
    std::fs::write(&b, e.to_string()).unwrap();
    let o = tokensel(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("limit_test_accuracy 1.5 is outside [0, 1]"),
        "{}",
        stderr(&o)
    );
}

/// `plot` and `diff` (whose reader checks the record's shape against the config:
/// `io::record::RecordParts`) on `text` written to `dir/name.json`: both exit 2 before
/// drawing or comparing, naming `want` on stderr. `other` is a valid trajectory diff
/// compares it with.
fn refused_by_plot_and_diff(dir: &Path, name: &str, text: &str, other: &Path, want: &str) {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap();
    let svg = dir.join(format!("{name}.svg"));
    let plot = tokensel(&["plot", p, "--out", svg.to_str().unwrap()]);
    let diff = tokensel(&["diff", other.to_str().unwrap(), p]);
    for (what, o) in [("plot", plot), ("diff", diff)] {
        assert_eq!(o.status.code(), Some(2), "{name}: {what}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{name}: {what}: {}", stderr(&o));
    }
    assert!(!svg.exists(), "{name}: nothing drawn");
}

/// Edit the last checkpoint of the trajectory JSON `text` by `edit`.
fn edited(text: &str, edit: impl Fn(&mut Value)) -> String {
    let mut v: Value = serde_json::from_str(text).unwrap();
    let last = v["checkpoints"].as_array_mut().unwrap().last_mut().unwrap();
    edit(last);
    serde_json::to_string(&v).unwrap()
}

/// A trajectory whose record does not have its config's optional parts is refused by
/// `plot` and `diff` with exit code 2 (the reader's shape checks derive from one
/// declaration, `RecordParts::of`, which the writers follow too): for a K = 3 run a
/// missing `classes`, a sample without outputs or with 2 of 3, a per-class list of 2;
/// for a binary run a `classes` block, a sample's `outputs` or a `direction` record the
/// config does not have, and for the in-sequence prompt a sample without its prompt
/// record.
#[test]
fn readers_refuse_a_record_that_does_not_fit_the_config() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let runs = runs(dir);
    let text = |name: &str| {
        let path = &runs.iter().find(|r| r.0 == name).unwrap().1;
        (std::fs::read_to_string(path).unwrap(), path.clone())
    };
    let (k3, k3_path) = text("k3");
    let (binary, binary_path) = text("binary");
    let (prompt, prompt_path) = text("prompt");
    let (direction, _) = text("direction");
    let dir_record: Value =
        serde_json::from_str::<Value>(&direction).unwrap()["checkpoints"][0]["direction"].clone();
    let classes: Value =
        serde_json::from_str::<Value>(&k3).unwrap()["checkpoints"][0]["classes"].clone();
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, &str, &Path, Edit, &str)> = vec![
        (
            "k3-no-classes",
            &k3,
            &k3_path,
            Box::new(|c| {
                c.as_object_mut().unwrap().remove("classes");
            }),
            "per-class metrics (`classes`) is missing",
        ),
        (
            "k3-two-outputs",
            &k3,
            &k3_path,
            Box::new(|c| {
                c["samples"][0]["outputs"].as_array_mut().unwrap().pop();
            }),
            "samples[0] has 2 outputs; the config's 3-class model has 3",
        ),
        (
            "k3-no-outputs",
            &k3,
            &k3_path,
            Box::new(|c| {
                c["samples"][1].as_object_mut().unwrap().remove("outputs");
            }),
            "samples[1] has no `outputs`",
        ),
        (
            "k3-short-list",
            &k3,
            &k3_path,
            Box::new(|c| {
                c["classes"]["test_accuracy"].as_array_mut().unwrap().pop();
            }),
            "`classes.test_accuracy` has 2 entries",
        ),
        (
            "binary-classes",
            &binary,
            &binary_path,
            Box::new(move |c| c["classes"] = classes.clone()),
            "it has per-class metrics (`classes`)",
        ),
        (
            "binary-outputs",
            &binary,
            &binary_path,
            Box::new(|c| c["samples"][0]["outputs"] = serde_json::json!([0.5, -0.5])),
            "samples[0] has `outputs`",
        ),
        (
            "binary-direction",
            &binary,
            &binary_path,
            Box::new(move |c| c["direction"] = dir_record.clone()),
            "it has a direction record (`direction`)",
        ),
        (
            "prompt-missing",
            &prompt,
            &prompt_path,
            Box::new(|c| {
                c["samples"][2].as_object_mut().unwrap().remove("prompt");
            }),
            "samples[2].prompt is missing",
        ),
    ];
    for (name, text, other, edit, want) in cases {
        refused_by_plot_and_diff(dir, name, &edited(text, edit), other, want);
    }
    // edits of the whole trajectory (the adversary's: plot drew them, diff read them):
    // a checkpoint past the config's steps, a label the model does not take
    type Whole = Box<dyn Fn(&mut Value)>;
    let whole: Vec<(&str, &str, &Path, Whole, &str)> = vec![
        (
            "k3-step-past",
            &k3,
            &k3_path,
            Box::new(|t| {
                let last = t["checkpoints"].as_array_mut().unwrap().last_mut().unwrap();
                last["step"] = 1_000_000.into();
            }),
            "checkpoint 1000000 is past the run's",
        ),
        (
            "k3-label",
            &k3,
            &k3_path,
            Box::new(|t| t["y"][0] = 5.into()),
            "`y[0]` = 5 is not a label of this model (a class index 0..2)",
        ),
        (
            "binary-label",
            &binary,
            &binary_path,
            Box::new(|t| t["y_true"][0] = (-7).into()),
            "`y_true[0]` = -7 is not a label of this model (+1 or -1)",
        ),
    ];
    for (name, text, other, edit, want) in whole {
        let mut v: Value = serde_json::from_str(text).unwrap();
        edit(&mut v);
        refused_by_plot_and_diff(dir, name, &serde_json::to_string(&v).unwrap(), other, want);
    }
}

/// A K = 3 certificate is read with the same shape and range checks: `plot` refuses one
/// with 2 outputs in a sample, one without `classes`, and one whose accuracy interval
/// is [1.5, 2] (exit 2); the certificate as written is drawn. `diff` given a
/// certificate says what it is and what diff takes (exit 2; it said "invalid type:
/// sequence").
#[test]
fn certificates_are_read_with_the_records_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = dir.join("k3.toml");
    std::fs::write(&cfg, K3).unwrap();
    let out = dir.join("cert");
    let o = tokensel(&[
        "certify",
        "--quiet",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.code().is_some_and(|c| c < 2), "{}", stderr(&o));
    let cert = out.join("certificate.json");
    let text = std::fs::read_to_string(&cert).unwrap();
    let plot = |name: &str, text: &str| {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, text).unwrap();
        let svg = dir.join(format!("{name}.svg"));
        tokensel(&[
            "plot",
            path.to_str().unwrap(),
            "--out",
            svg.to_str().unwrap(),
        ])
    };
    let o = plot("as-written", &text);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "two-outputs",
            Box::new(|c| {
                c["samples"][0]["outputs"].as_array_mut().unwrap().pop();
            }),
            "samples[0] has 2 outputs",
        ),
        (
            "no-classes",
            Box::new(|c| {
                c.as_object_mut().unwrap().remove("classes");
            }),
            "per-class metrics (`classes`) is missing",
        ),
        (
            "accuracy",
            Box::new(|c| c["train_accuracy"] = serde_json::json!([1.5, 2.0])),
            "train_accuracy [1.5, 2] is outside [0, 1]",
        ),
    ];
    for (name, edit, want) in cases {
        let o = plot(name, &edited(&text, edit));
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{name}: {}", stderr(&o));
    }
    let o = tokensel(&["diff", cert.to_str().unwrap(), cert.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("this is a certificate (`tokensel certify`), not a trajectory")
            && e.contains("compares two trajectories"),
        "{e}"
    );
    assert!(!e.contains("invalid type"), "{e}");
    // plot --direction draws trajectories only, and says so of a certificate
    let svg = cert.with_file_name("direction.svg");
    let o = tokensel(&[
        "plot",
        "--direction",
        cert.to_str().unwrap(),
        "--out",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("this is a certificate (`tokensel certify`), not a trajectory")
            && e.contains("`tokensel plot --direction` draws trajectories"),
        "{e}"
    );
    assert!(!e.contains("invalid type") && !svg.exists(), "{e}");
}

/// Every writer records checkpoint 0 (run, twin, resumed and minibatch runs: the
/// recorder's schedule starts at 0 and a state holds the checkpoints before it), and a
/// loss is >= 0 in every arithmetic (l(u) = log1p(exp(-u)) or -u + log1p(exp(u)), each
/// term >= 0; the K-class (f_m - f_Y) + log1p(...) alike): a trajectory without
/// checkpoint 0, or whose `train_loss` is negative, is refused by `plot` and `diff`
/// (exit 2, naming it); both were drawn and compared before.
#[test]
fn readers_refuse_a_trajectory_without_step_0_or_with_a_negative_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let good = run(dir, "binary", BINARY);
    let text = std::fs::read_to_string(&good).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["checkpoints"][0]["step"], 0);
    v["checkpoints"].as_array_mut().unwrap().remove(0);
    let no_zero = serde_json::to_string(&v).unwrap();
    refused_by_plot_and_diff(
        dir,
        "no-step-0",
        &no_zero,
        &good,
        "the first checkpoint is step 1",
    );
    let negative = edited(&text, |c| c["train_loss"] = (-0.5).into());
    refused_by_plot_and_diff(
        dir,
        "negative-loss",
        &negative,
        &good,
        "train_loss -0.5 is out of range: it can only be >= 0",
    );
    // a loss at rounding level below 0 (within the ranges' slack) is read
    let svg = dir.join("tiny.svg");
    let tiny = dir.join("tiny.json");
    std::fs::write(&tiny, edited(&text, |c| c["train_loss"] = (-1e-9).into())).unwrap();
    let o = tokensel(&[
        "plot",
        tiny.to_str().unwrap(),
        "--out",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}
