//! `tokensel judge` on K-class runs (SPEC sections 12 and 14): the external format's
//! `output` is (n, K) for a K-class config, tokensel's own K = 3 f64 trajectory is
//! judged to follow the f64 replays, one output perturbed at one step is a departure
//! there, and an output of the binary shape (n) is refused (exit 2) before any work.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tokensel::arith::F64;
use tokensel::config::{Config, Formulation, Method};
use tokensel::data::Dataset;
use tokensel::train::Trainer;

mod common;
use common::{stderr, tokensel};

/// Every quantity's key in the external format (`tokensel-external/2`).
const ALL: [&str; 9] = [
    "p",
    "q",
    "W",
    "scores",
    "attention",
    "rest",
    "output",
    "loss",
    "grad_q",
];

/// A small K = 3 p-mode run (d = 30, n = 9, T = 6, 20 steps at step size 0.5: far from
/// saturation, so the naive softmax gradient is as accurate as the stable one).
const SMALL_K3: &str = "d = 30\nn_train = 9\nn_test = 9\nmu_norm = 5.0\nstep_size = 0.5\n\
steps = 20\nseed = 2\n[model]\nkind = \"multiclass\"\nclasses = 3\n[layout]\ntokens = 6\n\
relevant = 1\nweak_same = 1\nweak_opposite = 2\nirrelevant = 2\n";

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

/// tokensel's own f64 trajectory of the K-class `cfg` (direct step, stable form) in
/// the external format, every step recorded, `output` the K outputs of each sample
/// (n, K), f64 values written exactly (serde_json round-trips).
fn own_trajectory(cfg: &Config) -> Value {
    let data = Dataset::generate(cfg);
    let mut t = Trainer::with_method(cfg, &data, F64, Formulation::Stable, Method::Direct).unwrap();
    let rows =
        |v: &[f64]| -> Vec<Vec<f64>> { v.chunks(cfg.tokens()).map(<[f64]>::to_vec).collect() };
    let (mut steps, mut p, mut q, mut w, mut z, mut s) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut rest, mut f, mut loss, mut grad) = (vec![], vec![], vec![], vec![]);
    let d = cfg.d;
    let identity: Vec<Vec<f64>> = (0..d)
        .map(|i| (0..d).map(|j| f64::from(u8::from(i == j))).collect())
        .collect();
    loop {
        t.forward_backward().unwrap();
        steps.push(t.step);
        let (pk, wk) = t.params();
        assert!(wk.is_none(), "p-mode from the identity");
        p.push(pk);
        q.push(t.q());
        w.push(identity.clone());
        z.push(rows(&t.scores));
        s.push(rows(&t.attention));
        rest.push(t.samples.iter().map(|x| x.softmax.rest).collect::<Vec<_>>());
        let outputs: Vec<Vec<f64>> = t.samples.iter().map(|x| x.outputs.clone()).collect();
        assert!(outputs.iter().all(|o| o.len() == cfg.model.classes));
        f.push(outputs);
        loss.push(t.loss);
        grad.push(t.grad_q());
        if t.step == cfg.steps {
            break;
        }
        t.update().unwrap();
    }
    json!({
        "format": "tokensel-external/2", "dtype": "float64", "implementation": "tokensel f64",
        "config": {"step_size": cfg.step_size, "mode": cfg.mode},
        "steps": steps, "p": p, "q": q, "W": w, "scores": z, "attention": s, "rest": rest,
        "output": f, "loss": loss, "grad_q": grad,
    })
}

/// Run `tokensel judge PATH --data DATA --json --quiet` on `ext` written to
/// `dir/name`; returns the exit code, the report (Null on exit 2) and stderr.
fn judge(ext: &Value, dir: &Path, data: &Path, name: &str) -> (i32, Value, String) {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string(ext).unwrap()).unwrap();
    let o = tokensel(&[
        "judge",
        path.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--json",
        "--quiet",
    ]);
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

/// The departure's (cause, step, first quantity), none when the run is explained.
fn departure(r: &Value) -> Option<(&str, u64, &str)> {
    let d = &r["diagnosis"]["departure"];
    (!d.is_null()).then(|| {
        (
            d["cause"].as_str().unwrap(),
            d["step"].as_u64().unwrap(),
            d["quantity"].as_str().unwrap(),
        )
    })
}

/// tokensel's own K = 3 f64 trajectory, its outputs (n, K), agrees with the twin (f64
/// rounding over 20 steps: far below 1e-12 in every quantity) and is the f64-stable
/// replay itself, bit for bit (its errors equal the replay's: a ratio of at most
/// 1/FACTOR to the limit, which fails if any quantity of the K-class model, the outputs
/// among them, were measured at other entries or in another order than the external's);
/// the run does not saturate, so the f64-naive replay (the K-class naive gradient)
/// explains it too and no value is proved wrong. The same trajectory with one output
/// f_1 of sample 4 off by a relative 1e-6 from step 7 on (a float64 bug) departs from
/// rounding at step 7 in `output`, from update 7, the records before explained by the
/// f64 replays, and the enclosure proves it wrong there.
#[test]
fn own_k3_trajectory_agrees_and_a_perturbed_output_departs() {
    let tmp = tempfile::tempdir().unwrap();
    let data = export(tmp.path(), SMALL_K3);
    let cfg = Config::from_file(&data.join("config.toml")).unwrap();
    assert_eq!(cfg.model.classes, 3);
    let ext = own_trajectory(&cfg);

    let (code, r, err) = judge(&ext, tmp.path(), &data, "own.json");
    assert_eq!(code, 0, "{err}{r:#}");
    assert_eq!(r["within_tolerance"], true);
    for q in ALL {
        let e = r["quantities"][q]["max_rel_err"].as_f64().unwrap();
        assert!(e < 1e-12, "{q}: {e}");
    }
    assert_eq!(r["rows"].as_array().unwrap().len(), 21);
    assert_eq!(departure(&r), None, "{}", r["diagnosis"]);
    assert_eq!(
        explained_by(&r),
        ["f64-stable", "f64-naive"],
        "{}",
        r["diagnosis"]
    );
    let factor = r["envelope_factor"].as_f64().unwrap();
    let stable = &r["candidates"][0];
    assert_eq!(stable["candidate"], "f64-stable");
    assert!(
        stable["max_ratio"].as_f64().unwrap() <= 1.0 / factor,
        "{stable}"
    );
    assert!(r["proof"]["first"].is_null(), "{}", r["proof"]);
    assert!(
        r["proof"]["enclosed"]
            .as_array()
            .unwrap()
            .contains(&json!("output")),
        "{}",
        r["proof"]
    );

    let mut bug = ext.clone();
    for k in 7..=20 {
        let v = bug["output"][k][4][1].as_f64().unwrap();
        bug["output"][k][4][1] = json!(v * (1.0 + 1e-6));
    }
    let (code, r, err) = judge(&bug, tmp.path(), &data, "bug.json");
    assert_eq!(code, 1, "{err}{r:#}");
    assert_eq!(departure(&r), Some(("wrong-model", 7, "output")), "{r:#}");
    assert_eq!(r["diagnosis"]["departure"]["updates"], json!([7, 7]));
    assert_eq!(r["diagnosis"]["departure"]["quantities"], json!(["output"]));
    assert_eq!(explained_by(&r), ["f64-stable", "f64-naive"]);
    assert_eq!(r["diagnosis"]["explained_until"], 6);
    let first = &r["proof"]["first"];
    assert_eq!(
        (&first["step"], &first["quantity"]),
        (&json!(7), &json!("output"))
    );
}

/// A K-class config's `output` must be (n, K) per step: the binary shape (n), and a
/// wrong K, are refused with exit 2, the shapes named, before any replay (no report).
#[test]
fn k_class_outputs_of_the_wrong_shape_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let data = export(tmp.path(), SMALL_K3);
    let cfg = Config::from_file(&data.join("config.toml")).unwrap();
    let ext = own_trajectory(&cfg);
    let margins: Vec<Vec<f64>> = ext["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            step.as_array()
                .unwrap()
                .iter()
                .map(|o| o[0].as_f64().unwrap())
                .collect()
        })
        .collect();
    let two: Vec<Vec<Vec<f64>>> = ext["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            step.as_array()
                .unwrap()
                .iter()
                .map(|o| vec![o[0].as_f64().unwrap(), o[1].as_f64().unwrap()])
                .collect()
        })
        .collect();
    for (name, output, found) in [
        ("binary-shape.json", json!(margins), "[9]"),
        ("two-classes.json", json!(two), "[9, 2]"),
    ] {
        let mut bad = json!({
            "format": ext["format"], "dtype": "float64", "steps": ext["steps"],
            "p": ext["p"],
        });
        bad["output"] = output;
        let (code, r, err) = judge(&bad, tmp.path(), &data, name);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(r.is_null(), "{name}: exit 2 prints no report");
        assert!(
            err.starts_with("error: ")
                && err.contains("`output`")
                && err.contains(&format!("shape {found} per step"))
                && err.contains("[9, 3]"),
            "{name}: {err}"
        );
    }
}
