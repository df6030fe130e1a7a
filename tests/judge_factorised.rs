//! `tokensel judge` on a `[factorised]` config (issue 41 item 6): the blocks `W_Q`,
//! `W_K`, `b_Q`, `b_K` are quantities of the external format, tokensel's own float64
//! run (GD and Adam) is explained by the f64-stable replay (the naive candidates are
//! not run, and the report says so), planted faults (a W_K update 1.01 times the
//! truth's, b_Q never updated) are found at update 1 and named, and a block in the
//! external of a config without `[factorised]` (or `W` in one with it) is refused with
//! exit code 2 before any work.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tokensel::prelude::{Config, Dataset, Engine, F64, Formulation, Method, Quantity, Trainer};

mod common;
use common::{stderr, tokensel};

/// A small factorised W-mode config with biases (d = 40, n = 6, m = 4, 30 steps at step
/// size 0.5: the scores move by O(1), far from saturation); `optimizer` is put before
/// the sections.
fn config(optimizer: &str, step_size: f64) -> String {
    format!(
        "d = 40\nn_train = 6\nn_test = 10\nmu_norm = 5.0\nstep_size = {step_size}\nsteps = 30\n\
         seed = 2\nmode = \"W\"\n{optimizer}[init]\np = \"gaussian\"\np_scale = 0.3\n\
         w = \"identity\"\n[factorised]\nm = 4\nbias = true\n"
    )
}

/// Export `config` with `tokensel data` into `dir/data`; returns that directory.
fn export(dir: &Path, config: &str) -> PathBuf {
    let cfg = dir.join("cfg.toml");
    std::fs::write(&cfg, config).unwrap();
    let out = dir.join("data");
    let o = tokensel(&[
        "data",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    out
}

/// Row-major `v` nested to `shape` (a scalar for `[]`).
fn nest(v: &[f64], shape: &[usize]) -> Value {
    match shape {
        [] => json!(v[0]),
        [_] => json!(v),
        [_, rest @ ..] => {
            let len: usize = rest.iter().product();
            Value::Array(v.chunks(len).map(|c| nest(c, rest)).collect())
        }
    }
}

/// The blocks before an update, by name.
type Before = [(&'static str, Vec<f64>)];

/// A fault applied after each update: (step, trainer, blocks before the update).
type Fault = dyn Fn(u64, &mut Trainer<'_, F64>, &Before);

/// The quantities recorded: every one a factorised run with biases has.
const RECORDED: [Quantity; 12] = [
    Quantity::P,
    Quantity::Q,
    Quantity::WQ,
    Quantity::WK,
    Quantity::BQ,
    Quantity::BK,
    Quantity::Scores,
    Quantity::Attention,
    Quantity::Rest,
    Quantity::Output,
    Quantity::Loss,
    Quantity::GradQ,
];

/// tokensel's own float64 run of `cfg` (direct step, stable form) in the external
/// format, every step recorded (f64 written exactly); `fault(step, trainer, before)`
/// is applied after each update (`before`: the blocks before it), then q is formed
/// again from the blocks.
fn own_run(cfg: &Config, fault: &Fault) -> Value {
    let data = Dataset::generate(cfg);
    let mut t = Trainer::with_method(cfg, &data, F64, Formulation::Stable, Method::Direct).unwrap();
    let mut ext = serde_json::Map::new();
    let mut steps = Vec::new();
    loop {
        t.forward_backward().unwrap();
        steps.push(t.step);
        for q in RECORDED {
            let v = t.quantity(q).unwrap();
            let entry = ext.entry(q.name()).or_insert_with(|| json!([]));
            entry.as_array_mut().unwrap().push(nest(&v, &q.shape(cfg)));
        }
        if t.step == cfg.steps {
            break;
        }
        let before: Vec<(&'static str, Vec<f64>)> =
            t.blocks().into_iter().map(|(n, _, v)| (n, v)).collect();
        t.update().unwrap();
        fault(t.step, &mut t, &before);
        if let Engine::Direct(e) = &mut t.engine {
            e.compute_q(&F64);
        }
    }
    ext.insert("format".into(), json!("tokensel-external/2"));
    ext.insert("dtype".into(), json!("float64"));
    ext.insert("implementation".into(), json!("tokensel f64 (factorised)"));
    ext.insert("steps".into(), json!(steps));
    Value::Object(ext)
}

/// No fault.
fn none(_: u64, _: &mut Trainer<'_, F64>, _: &Before) {}

/// Block `name` of a trainer's factorised map, mutably.
fn block<'t>(t: &'t mut Trainer<'_, F64>, name: &str) -> &'t mut Vec<f64> {
    match &mut t.engine {
        Engine::Direct(e) => e.fact_mut().expect("a factorised run").blocks.get_mut(name),
        Engine::Span(_) => panic!("the factorised map runs in the direct step"),
    }
}

/// `tokensel judge PATH --data DATA --json --quiet EXTRA`: exit code, report, stderr.
fn judge(ext: &Value, dir: &Path, data: &Path, extra: &[&str]) -> (i32, Value, String) {
    let path = dir.join("ext.json");
    std::fs::write(&path, serde_json::to_string(ext).unwrap()).unwrap();
    let mut args = vec![
        "judge",
        path.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--json",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let o = tokensel(&args);
    let code = o.status.code().unwrap();
    let report = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (code, report, stderr(&o))
}

/// The candidates that explain the run (or the records before its departure).
fn explained_by(r: &Value) -> Vec<&str> {
    r["diagnosis"]["explained_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect()
}

/// The candidates the report says were not run.
fn not_run(r: &Value) -> Vec<&str> {
    r["not_run"].as_array().map_or_else(Vec::new, |a| {
        a.iter().map(|n| n["candidate"].as_str().unwrap()).collect()
    })
}

/// tokensel's own float64 factorised run, GD and Adam, is explained by the f64-stable
/// replay (the same direct step bit for bit: every error of the external equals the
/// replay's, so its ratio to the limit is 1 / FACTOR), with the enclosure proving
/// nothing wrong; the naive candidates are listed as not run, with the reason, and no
/// fit of theirs is reported. Every block is judged (b_K too: kept at its init by both).
#[test]
fn own_factorised_runs_are_explained_by_f64_stable() {
    for (name, optimizer, step) in [
        ("gd", "", 0.5),
        ("adam", "[optimizer]\nkind = \"adam\"\n", 0.02),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let data = export(tmp.path(), &config(optimizer, step));
        let cfg = Config::from_file(&data.join("config.toml")).unwrap();
        let ext = own_run(&cfg, &none);
        let (code, r, err) = judge(&ext, tmp.path(), &data, &[]);
        assert_eq!(code, 0, "{name}: {err}{r:#}");
        assert_eq!(r["twin_method"], "direct", "{name}");
        assert_eq!(
            explained_by(&r),
            ["f64-stable"],
            "{name}: {}",
            r["diagnosis"]
        );
        assert!(r["diagnosis"]["departure"].is_null(), "{name}");
        assert_eq!(not_run(&r), ["f64-naive", "f32-naive"], "{name}: {r:#}");
        let fits: Vec<&str> = r["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["candidate"].as_str().unwrap())
            .collect();
        assert_eq!(fits, ["f64-stable", "f32-stable"], "{name}");
        let factor = r["envelope_factor"].as_f64().unwrap();
        assert!(
            r["candidates"][0]["max_ratio"].as_f64().unwrap() <= 1.0 / factor,
            "{name}: {}",
            r["candidates"][0]
        );
        for q in ["W_Q", "W_K", "b_Q", "b_K"] {
            assert!(r["quantities"][q].is_object(), "{name}: {q} judged");
            assert!(
                r["quantities"][q]["max_rel_err"].as_f64().unwrap() < 1e-12,
                "{name}: {q}: {}",
                r["quantities"][q]
            );
        }
        // b_K is kept exactly at its init: error 0 against the twin's exact b_K
        assert_eq!(r["quantities"]["b_K"]["max_rel_err"], 0.0, "{name}");
        assert!(r["proof"]["first"].is_null(), "{name}: {}", r["proof"]);
        let enclosed = r["proof"]["enclosed"].as_array().unwrap();
        assert!(enclosed.contains(&json!("W_K")), "{name}: {enclosed:?}");
        // the text report says which candidates were not run and why
        let path = tmp.path().join("ext.json");
        let o = tokensel(&[
            "judge",
            path.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--quiet",
            "--no-enclosure",
        ]);
        let text = String::from_utf8(o.stdout).unwrap();
        assert_eq!(o.status.code(), Some(0), "{name}: {text}");
        assert!(
            text.contains("f64-naive   not run: float64 rounding with the naive softmax gradient is not replayed: the factorised query map"),
            "{name}: {text}"
        );
    }
}

/// Planted faults are found at update 1 and named: a W_K update 1.01 times the truth's
/// (a W_K gradient scaled by 1.01; GD), and b_Q never updated (GD and Adam). Both change
/// q and the scores too, so the departure lists them beside the block; the block is
/// named first (blocks come before q in report order), the verdict is DIFFERS at step
/// 1 (exit 1), and the W_K fault is located as an update 1.01 times the truth's.
/// The same trainer without the fault is explained (the test above): the fault alone
/// makes the difference.
#[test]
fn planted_block_faults_are_found_at_update_1() {
    let scaled_wk = |_: u64, t: &mut Trainer<'_, F64>, before: &Before| {
        let old = &before.iter().find(|(n, _)| *n == "W_K").unwrap().1;
        let wk = block(t, "W_K");
        for (w, o) in wk.iter_mut().zip(old) {
            *w = o + 1.01 * (*w - o);
        }
    };
    let frozen_bq = |_: u64, t: &mut Trainer<'_, F64>, before: &Before| {
        let old = before.iter().find(|(n, _)| *n == "b_Q").unwrap().1.clone();
        *block(t, "b_Q") = old;
    };
    let cases: [(&str, &str, f64, &Fault, &str); 3] = [
        ("W_K x 1.01, gd", "", 0.5, &scaled_wk, "W_K"),
        ("b_Q frozen, gd", "", 0.5, &frozen_bq, "b_Q"),
        (
            "b_Q frozen, adam",
            "[optimizer]\nkind = \"adam\"\n",
            0.02,
            &frozen_bq,
            "b_Q",
        ),
    ];
    for (name, optimizer, step, fault, quantity) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let data = export(tmp.path(), &config(optimizer, step));
        let cfg = Config::from_file(&data.join("config.toml")).unwrap();
        let ext = own_run(&cfg, fault);
        let (code, r, err) = judge(&ext, tmp.path(), &data, &["--no-enclosure"]);
        assert_eq!(code, 1, "{name}: {err}{r:#}");
        assert_eq!(
            r["first_over_tol"]["step"], 1,
            "{name}: {}",
            r["first_over_tol"]
        );
        let dep = &r["diagnosis"]["departure"];
        assert_eq!(dep["step"], 1, "{name}: {dep}");
        let qs: Vec<&str> = dep["quantities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q.as_str().unwrap())
            .collect();
        // the blocks come before q in report order: the block is the one named
        assert_eq!(qs[0], quantity, "{name}: {qs:?}");
        assert_eq!(dep["quantity"], quantity, "{name}: {dep}");
        assert_eq!(r["first_over_tol"]["quantity"], quantity, "{name}");
        if quantity == "W_K" {
            // W_K right at step 0 and its update 1.01 times the truth's
            let located = &dep["located"];
            assert_eq!(located["stage"], "scaled-update", "{name}: {located}");
            let ratio = located["ratio"].as_f64().unwrap();
            assert!((ratio - 1.01).abs() < 1e-6, "{name}: {ratio}");
            assert_eq!(located["gradient_right"], false, "{name}: {located}");
        }
        assert_eq!(
            r["quantities"][quantity]["first_over_tol"], 1,
            "{name}: {}",
            r["quantities"][quantity]
        );
        // the block's error at step 1: b_Q is off by its whole first update, W_K by 1 %
        // of it
        let e = r["rows"][1]["rel_err"][quantity].as_f64().unwrap();
        assert!(e > 1e-6, "{name}: {e}");
    }
}

/// A factorised block in the external of a config without `[factorised]` is refused
/// (exit 2, naming the key and why, nothing printed on stdout), as are `W` in the
/// external of a factorised config and `b_K` of one without biases.
#[test]
fn blocks_where_the_config_has_none_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = export(
        tmp.path(),
        "d = 40\nn_train = 6\nn_test = 10\nmu_norm = 5.0\nstep_size = 0.5\nsteps = 30\nseed = 2\n",
    );
    let ext = json!({
        "format": "tokensel-external/2", "dtype": "float64", "steps": [0],
        "W_Q": [vec![vec![0.0; 40]; 4]],
    });
    let (code, r, err) = judge(&ext, tmp.path(), &plain, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(r.is_null());
    assert!(err.contains("quantity `W_Q`"), "{err}");
    assert!(err.contains("no [factorised] section"), "{err}");

    let tmp2 = tempfile::tempdir().unwrap();
    let fact = export(tmp2.path(), &config("", 0.5));
    let ext = json!({
        "format": "tokensel-external/2", "dtype": "float64", "steps": [0],
        "W": [vec![vec![0.0; 40]; 40]],
    });
    let (code, _, err) = judge(&ext, tmp2.path(), &fact, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("quantity `W`") && err.contains("has no W"),
        "{err}"
    );

    let tmp3 = tempfile::tempdir().unwrap();
    let no_bias = export(
        tmp3.path(),
        &config("", 0.5).replace("bias = true", "bias = false"),
    );
    let ext = json!({
        "format": "tokensel-external/2", "dtype": "float64", "steps": [0],
        "b_K": [vec![0.0; 4]],
    });
    let (code, _, err) = judge(&ext, tmp3.path(), &no_bias, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("quantity `b_K`") && err.contains("bias = false"),
        "{err}"
    );
}
