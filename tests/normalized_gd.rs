//! Normalised gradient descent (`[optimizer] kind = "normalized-gd"`, SPEC section 15;
//! `train::step_rule`): each parameter block moves by alpha G / (||G|| + eps).
//!
//! Checked in the 256-bit twin, where rounding is far below every tolerance (each
//! tolerance is 1e-60 relative, against rounding errors of about steps x (d + nT) x
//! 2^-256 ~ 1e-73 of the quantities' sizes): the step lengths are alpha in every mode
//! and both methods, eps enters as its formula says, the direct and the span step take
//! the same trajectory, and Lemma A.6's W <-> p identity holds with the normalised
//! scaling (alpha |p(0)|, eps / |p(0)|). The balls enclose the 512-bit twin. The f64
//! predictor's bit-identity under normalised GD is in `tests/predictor.rs`.

mod common;

use rug::Float;
use tokensel::prelude::analysis::lemma_a6;
use tokensel::prelude::{Optimizer, OptimizerKind, PInit, *};

/// `cfg` under normalised GD with `eps`.
fn normalized(mut cfg: Config, eps: f64) -> Config {
    cfg.optimizer = Optimizer {
        kind: OptimizerKind::NormalizedGd,
        eps,
        ..Optimizer::default()
    };
    cfg.validate().unwrap();
    cfg
}

/// A small run (d = 40, n = 6, alpha = 0.5) in `mode` (Gaussian p(0) and Kaiming W(0)
/// outside p-mode), `steps` steps.
fn small(mode: Mode, method: Method, steps: u64) -> Config {
    let cfg = Config {
        seed: 7,
        d: 40,
        n_train: 6,
        n_test: 10,
        mu_norm: 6.0,
        eta: 0.34,
        step_size: 0.5,
        steps,
        method,
        ..Config::default()
    };
    match mode {
        Mode::P => cfg,
        _ => common::with_init(cfg, mode, 0.5, true),
    }
}

fn norm(v: &[Float]) -> Float {
    let mut s = Float::with_val(300, 0);
    for x in v {
        s += Float::with_val(300, x * x);
    }
    s.sqrt()
}

fn dist(a: &[Float], b: &[Float]) -> Float {
    let d: Vec<Float> = a
        .iter()
        .zip(b)
        .map(|(x, y)| Float::with_val(300, x - y))
        .collect();
    norm(&d)
}

fn rel_gap(a: &Float, b: &Float) -> f64 {
    let d = Float::with_val(300, a - b).abs();
    (d / Float::with_val(300, b.abs_ref()).max(&Float::with_val(300, 1e-300))).to_f64()
}

const TOL: f64 = 1e-60;

/// With eps = 0, every trained block moves by exactly alpha per step (|dp| in p- and
/// joint mode, |dW|_F in W- and joint mode), in the direct and the span step, for the
/// binary and the K = 3 model.
#[test]
fn each_block_moves_by_alpha() {
    for mode in [Mode::P, Mode::W, Mode::Joint] {
        for method in [Method::Direct, Method::Span] {
            for k in [2usize, 3] {
                let mut cfg = normalized(small(mode, method, 12), 0.0);
                if k == 3 {
                    cfg.model = ModelSpec {
                        kind: ModelKind::Multiclass,
                        classes: 3,
                        ..ModelSpec::default()
                    };
                    cfg.layout.weak_opposite = 2;
                    cfg.layout.tokens += 1;
                    cfg.validate().unwrap();
                }
                let data = Dataset::generate(&cfg);
                let mut t =
                    Trainer::new(&cfg, &data, Mpfr::truth(256).unwrap(), cfg.formulation).unwrap();
                let alpha = Float::with_val(300, cfg.step_size);
                for step in 0..cfg.steps {
                    t.forward_backward().unwrap();
                    let (p0, w0) = t.params();
                    t.update().unwrap();
                    let (p1, w1) = t.params();
                    let what = format!("{mode:?} {method:?} K = {k} step {step}");
                    if mode != Mode::W {
                        let g = rel_gap(&dist(&p1, &p0), &alpha);
                        assert!(g < TOL, "{what}: |dp| off alpha by {g:e}");
                    }
                    if mode != Mode::P {
                        let g = rel_gap(&dist(&w1.unwrap(), &w0.unwrap()), &alpha);
                        assert!(g < TOL, "{what}: |dW| off alpha by {g:e}");
                    }
                }
            }
        }
    }
}

/// With eps > 0 (here 0.5, large enough to matter) a p-mode step (W = I, so dL/dp =
/// dL/dq) has length alpha |g| / (|g| + eps), g = dL/dq of the forward pass before it.
#[test]
fn eps_shortens_the_step_as_its_formula_says() {
    for method in [Method::Direct, Method::Span] {
        let cfg = normalized(small(Mode::P, method, 10), 0.5);
        let data = Dataset::generate(&cfg);
        let mut t = Trainer::new(&cfg, &data, Mpfr::truth(256).unwrap(), cfg.formulation).unwrap();
        for step in 0..cfg.steps {
            t.forward_backward().unwrap();
            let g = norm(&t.grad_q());
            let want = Float::with_val(300, cfg.step_size) * &g / (g.clone() + 0.5);
            let p0 = t.p();
            t.update().unwrap();
            let gap = rel_gap(&dist(&t.p(), &p0), &want);
            assert!(gap < TOL, "{method:?} step {step}: off by {gap:e}");
        }
    }
}

/// The direct and the span step take the same normalised trajectory (q and the loss,
/// every step, p-, W- and joint mode).
#[test]
fn direct_and_span_agree() {
    for mode in [Mode::P, Mode::W, Mode::Joint] {
        let cfg = normalized(small(mode, Method::Direct, 15), 1e-9);
        let mut span_cfg = cfg.clone();
        span_cfg.method = Method::Span;
        let data = Dataset::generate(&cfg);
        let ar = Mpfr::truth(256).unwrap();
        let mut a = Trainer::new(&cfg, &data, ar, cfg.formulation).unwrap();
        let mut b = Trainer::new(&span_cfg, &data, ar, cfg.formulation).unwrap();
        assert_eq!((a.method(), b.method()), (Method::Direct, Method::Span));
        for step in 0..=cfg.steps {
            a.forward_backward().unwrap();
            b.forward_backward().unwrap();
            let (qa, qb) = (a.q(), b.q());
            // relative to max(|q|, 1): p(0) = 0 in p-mode
            let gap = (dist(&qa, &qb) / norm(&qa).max(&Float::with_val(300, 1))).to_f64();
            assert!(gap < TOL, "{mode:?} step {step}: q apart by {gap:e}");
            let gap = rel_gap(&b.loss, &a.loss);
            assert!(gap < TOL, "{mode:?} step {step}: loss apart by {gap:e}");
            if step < cfg.steps {
                a.update().unwrap();
                b.update().unwrap();
            }
        }
    }
}

/// Lemma A.6 under normalised GD: a W-mode run with p(0) = (2, 0, ..., 0) (|p(0)| = 2,
/// so alpha' = 2 alpha and eps' = eps / 2 are exact in f64) and its p-mode twin from
/// q(0) with the step `lemma_a6::scale_step` sets move q alike, to 1e-60 at 256 bits.
/// The constant-step scaling (alpha |p(0)|^2) is wrong under normalised GD: the same
/// runs with it drift apart by more than 1e-3 (so the check can fail).
#[test]
fn lemma_a6_holds_with_the_normalized_scaling() {
    let cfg = normalized(small(Mode::W, Method::Direct, 15), 0.25);
    let (w_cfg, p_cfg) = lemma_a6::configs(&cfg);
    let data = Dataset::generate(&w_cfg);
    let mut init = Params::init(&w_cfg);
    init.p.fill(0.0);
    init.p[0] = 2.0;
    let ar = Mpfr::truth(256).unwrap();
    let drift = |p_cfg: &Config| {
        let mut w = Trainer::from_params(&w_cfg, &data, ar, w_cfg.formulation, w_cfg.method, &init)
            .unwrap();
        let q0 = Params {
            p: common::to_f64(&w.q()).into(),
            w: None,
        };
        // q(0) = W(0)^T p(0) = 2 W(0)[0, :] is exact in f64
        assert!(w.q().iter().zip(&q0.p).all(|(a, b)| *a == *b));
        let mut p =
            Trainer::from_params(p_cfg, &data, ar, p_cfg.formulation, p_cfg.method, &q0).unwrap();
        let mut worst = 0.0f64;
        for _ in 0..cfg.steps {
            w.forward_backward().unwrap();
            p.forward_backward().unwrap();
            w.update().unwrap();
            p.update().unwrap();
            let (qw, qp) = (w.q(), p.q());
            worst = worst.max((dist(&qw, &qp) / norm(&qw)).to_f64());
        }
        worst
    };
    let mut scaled = p_cfg.clone();
    lemma_a6::scale_step(&w_cfg, &mut scaled, &init.p);
    assert_eq!((scaled.step_size, scaled.optimizer.eps), (1.0, 0.125));
    let d = drift(&scaled);
    assert!(d < TOL, "normalised scaling: q drift {d:e}");
    let mut wrong = p_cfg.clone();
    wrong.step_size = w_cfg.step_size * 4.0;
    wrong.optimizer.eps = w_cfg.optimizer.eps;
    let d = drift(&wrong);
    assert!(
        d > 1e-3,
        "the constant-step scaling should not fit: drift {d:e}"
    );
}

/// 128-bit balls enclose the 512-bit twin under normalised GD (eps = 0 and 1e-9), in
/// p-, W- and joint mode, direct and span: scores, loss and q at every step.
#[test]
fn balls_enclose_the_twin() {
    for mode in [Mode::P, Mode::W, Mode::Joint] {
        for (method, eps) in [(Method::Direct, 0.0), (Method::Span, 1e-9)] {
            let cfg = normalized(small(mode, method, 12), eps);
            let data = Dataset::generate(&cfg);
            let mut b =
                Trainer::new(&cfg, &data, Ball::new(128).unwrap(), cfg.formulation).unwrap();
            let mut t =
                Trainer::new(&cfg, &data, Mpfr::truth(512).unwrap(), cfg.formulation).unwrap();
            for step in 0..=cfg.steps {
                b.forward_backward().unwrap();
                t.forward_backward().unwrap();
                let at = |q: &str| format!("{mode:?} {method:?} step {step}: {q}");
                common::assert_enclosed(&at("z"), &b.scores, &t.scores);
                common::assert_enclosed(&at("loss"), &[b.loss.clone()], &[t.loss.clone()]);
                common::assert_enclosed(&at("q"), &b.q(), &t.q());
                if step < cfg.steps {
                    b.update().unwrap();
                    t.update().unwrap();
                }
            }
        }
    }
}

/// The `[optimizer]` section's bad values are refused before any work (exit 2, the
/// field named); the default writes no section, a normalised one reads back.
#[test]
fn optimizer_sections_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let base = toml::to_string(&small(Mode::P, Method::Direct, 5)).unwrap();
    assert!(!base.contains("optimizer"), "the default is not written");
    for (section, field) in [
        ("kind = \"normalized-gd\"\neps = -1.0", "optimizer.eps"),
        ("kind = \"normalized-gd\"\neps = nan", "optimizer.eps"),
        ("kind = \"normalized-gd\"\neps = inf", "optimizer.eps"),
        ("kind = \"gd\"\neps = 1e-9", "optimizer.eps"),
        // (`adam` was the unknown kind here until Adam was added: tests/optimizer.rs)
        ("kind = \"sgd\"", "sgd"),
        ("kind = \"normalized-gd\"\nbeta = 0.9", "beta"),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, format!("{base}\n[optimizer]\n{section}\n")).unwrap();
        let o = common::tokensel(&["run", "--config", path.to_str().unwrap()]);
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{section}: {err}");
        assert!(err.contains(field), "{section}: {err}");
    }
    let good = normalized(small(Mode::P, Method::Direct, 5), 1e-9);
    let text = toml::to_string(&good).unwrap();
    assert!(
        text.contains("[optimizer]") && text.contains("normalized-gd"),
        "{text}"
    );
    let back: Config = toml::from_str(&text).unwrap();
    assert_eq!(back, good);
}

/// Where f64's gradient norm falls below its range (the balanced setting with
/// alpha = 0.1 reaches a norm of 2.8e-310 at step 638), normalised GD with eps = 0 stops
/// with the typed error naming the step and the norm (exit code 3), not a NaN; the
/// 256-bit twin runs past it; with the public code's eps = 1e-9 the run completes
/// (`examples/normalized_gd.toml`).
#[test]
fn a_vanishing_gradient_stops_exactly_normalized_gd() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ngd.toml");
    let body = "step_size = 0.1\nsteps = 2000\n\n[optimizer]\nkind = \"normalized-gd\"\n";
    std::fs::write(&path, body).unwrap();
    let o = common::tokensel(&["run", "--config", path.to_str().unwrap()]);
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    for needle in [
        "normalised GD stopped at step 638",
        "has norm 2.82429119250474e-310",
        "optimizer.eps = 0 is not a finite number",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    // the twin's exponent range: it runs past step 638
    let o = common::tokensel(&[
        "twin",
        "--config",
        path.to_str().unwrap(),
        "--steps",
        "700",
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    std::fs::write(&path, format!("{body}eps = 1e-9\n")).unwrap();
    let o = common::tokensel(&["run", "--config", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("normalized-gd (eps = 1e-9)"), "{out}");
}

/// A tiny eps (1e-300, below what f64 can add to a squared norm that underflows) does
/// not lengthen the f64 steps: the norm is formed from the gradient scaled by a power of
/// two (`step_rule::scaled_norm`), so every step of p has length at most alpha (to 1e-12
/// relative, the rebuild of p from the span coefficients) over 700 steps, past where the
/// gradient's squares underflow (step ~330); unscaled, the steps were alpha G / eps.
#[test]
fn a_tiny_eps_keeps_steps_within_alpha() {
    let mut cfg = normalized(Config::default(), 1e-300);
    cfg.step_size = 0.1;
    cfg.steps = 700;
    let data = Dataset::generate(&cfg);
    let mut t = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
    for step in 0..cfg.steps {
        t.forward_backward().unwrap();
        let p0 = t.p();
        t.update().unwrap();
        let dp: f64 = t
            .p()
            .iter()
            .zip(&p0)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f64>()
            .sqrt();
        assert!(dp <= 0.1 * (1.0 + 1e-12), "step {step}: |dp| = {dp:e}");
    }
}

/// The NumPy peer (examples/numpy_reference.py) takes constant steps of the binary
/// model: given a data directory whose config asks for normalised GD, or the K-class
/// model, it refuses with a message naming the section instead of writing a
/// constant-step trajectory that `judge` would then call wrong (NumPy venv only:
/// TOKENSEL_PYTHON, as `.ci/run` sets it).
#[test]
fn the_numpy_peer_refuses_what_it_does_not_implement() {
    let Ok(python) = std::env::var("TOKENSEL_PYTHON") else {
        eprintln!("TOKENSEL_PYTHON not set: the NumPy peer's refusals skipped");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/numpy_reference.py");
    for (name, body, needle) in [
        (
            "ngd",
            "steps = 10\n[optimizer]\nkind = \"normalized-gd\"\n",
            "[optimizer] kind = 'normalized-gd'",
        ),
        (
            "k3",
            "steps = 10\n[model]\nkind = \"multiclass\"\nclasses = 3\n[layout]\ntokens = 9\nrelevant = 1\nweak_same = 1\nweak_opposite = 2\nirrelevant = 5\n",
            "[model] kind = 'multiclass'",
        ),
    ] {
        let cfg = dir.path().join(format!("{name}.toml"));
        std::fs::write(&cfg, body).unwrap();
        let data = dir.path().join(name);
        let o = common::tokensel(&[
            "data",
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            data.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", common::stderr(&o));
        let out = dir.path().join(format!("{name}.json"));
        let o = std::process::Command::new(&python)
            .arg(&script)
            .arg(&data)
            .args(["--out", out.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains(needle), "{name}: {err}");
        assert!(!out.exists(), "{name}: no trajectory written");
    }
}

/// The reports of a normalised-GD run name its step rule: `run`, `compare` (text, and
/// its JSON's `optimizer`) and `certify`.
#[test]
fn reports_name_the_step_rule() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ngd.toml");
    std::fs::write(
        &path,
        "d = 30\nn_train = 6\nn_test = 6\nmu_norm = 5.0\nstep_size = 0.5\nsteps = 20\n\n[optimizer]\nkind = \"normalized-gd\"\neps = 1e-9\n",
    )
    .unwrap();
    let f = path.to_str().unwrap();
    let text = |args: &[&str]| {
        let o = common::tokensel(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", common::stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let rule = "normalized-gd (eps = 1e-9)";
    assert!(text(&["run", "--config", f, "--quiet"]).contains(rule));
    assert!(text(&["compare", "--config", f, "--quiet"]).contains(&format!("20 steps of {rule}")));
    let json: serde_json::Value =
        serde_json::from_str(&text(&["compare", "--config", f, "--quiet", "--json"])).unwrap();
    assert_eq!(
        json["optimizer"],
        serde_json::json!({"kind": "normalized-gd", "eps": 1e-9})
    );
    assert!(text(&["certify", "--config", f, "--quiet"]).contains(&format!("20 steps of {rule}")));
}

#[test]
fn cost_times_a_normalised_run_that_stops_again_from_step_0() {
    // f32 under normalised GD with eps = 0 stops at step 88 here (its gradient's norm
    // leaves binary32's range); 15 blocks of 20 steps reach past it, and `cost` times
    // the trainer again from step 0 instead of failing
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("ngd.toml");
    std::fs::write(
        &cfg,
        "d = 60\nn_train = 6\nn_test = 20\nmu_norm = 6.0\neta = 0.0\nstep_size = 0.5\n\
         steps = 2000\nmethod = \"span\"\n[optimizer]\nkind = \"normalized-gd\"\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let stop = common::tokensel(&["run", "--config", cfg, "--arith", "f32", "--quiet"]);
    assert_eq!(stop.status.code(), Some(3), "{}", common::stderr(&stop));
    assert!(common::stderr(&stop).contains("stopped at step 88"));
    let out = common::tokensel(&[
        "cost", "--config", cfg, "--precs", "53", "--reps", "15", "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let f32_rows: Vec<&serde_json::Value> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["trainer"] == "f32")
        .collect();
    assert!(!f32_rows.is_empty());
    for r in f32_rows {
        assert!(r["seconds_per_step"].as_f64().unwrap() > 0.0, "{r}");
    }
}

#[test]
fn compare_reports_the_steps_before_an_f64_stop() {
    // exact normalised GD (eps = 0): the f64 run stops at step 694 here (its gradient's
    // norm leaves f64's range), the twin does not; compare reports steps 0-694 and the
    // stop, with exit code 3
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("ngd.toml");
    std::fs::write(
        &cfg,
        "d = 60\nn_train = 6\nn_test = 20\nmu_norm = 6.0\neta = 0.0\nstep_size = 0.5\n\
         steps = 800\nmethod = \"span\"\n[optimizer]\nkind = \"normalized-gd\"\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let out = common::tokensel(&["compare", "--config", cfg, "--quiet", "--no-predictor"]);
    assert_eq!(out.status.code(), Some(3), "{}", common::stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("STOPPED after comparing step 694 of 800: normalised GD stopped at step 694"),
        "{text}"
    );
    let json = common::tokensel(&[
        "compare",
        "--config",
        cfg,
        "--quiet",
        "--no-predictor",
        "--json",
    ]);
    assert_eq!(json.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["stopped"]["last_step"], 694);
    let rows = v["checkpoints"].as_array().unwrap();
    assert!(rows.last().unwrap()["step"].as_u64().unwrap() <= 694);
}

/// `compare` with the f64 predictor on a run that stops (normalised GD, eps = 0: the f64
/// run stops at step 694 here, `compare_reports_the_steps_before_an_f64_stop`) names the
/// steps the predictor actually compared, 0-694, and says the run stopped there and why
/// (it printed "equal bit for bit at steps 0-800", the config's steps); the JSON's
/// `predictor.steps` is 694.
#[test]
fn compare_names_the_predictor_steps_before_a_stop() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("ngd.toml");
    std::fs::write(
        &cfg,
        "d = 60\nn_train = 6\nn_test = 20\nmu_norm = 6.0\neta = 0.0\nstep_size = 0.5\n\
         steps = 800\nmethod = \"span\"\n[optimizer]\nkind = \"normalized-gd\"\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let out = common::tokensel(&["compare", "--config", cfg, "--quiet"]);
    assert_eq!(out.status.code(), Some(3), "{}", common::stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "equal bit for bit at steps 0-694 (the steps compared: the run stopped after step \
             694, normalised GD stopped at step 694"
        ),
        "{text}"
    );
    assert!(!text.contains("0-800"), "{text}");
    let json = common::tokensel(&["compare", "--config", cfg, "--quiet", "--json"]);
    assert_eq!(json.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["predictor"]["steps"], 694);
    assert_eq!(v["predictor"]["bits_equal"], true);
}

/// Joint-mode normalised GD with eps = 0 from p(0) = 0 is refused before any work (exit
/// 2, naming `optimizer.eps`): W's gradient p (dL/dq)^T is exactly 0 at step 0, so the
/// step alpha G / ||G|| is undefined there (the run once stopped at step 0 without
/// saying why). With eps > 0, or a Gaussian p(0), the config is taken.
#[test]
fn joint_normalized_gd_from_p0_zero_is_refused_before_work() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("joint.toml");
    let body = "d = 20\nn_train = 4\nn_test = 4\nsteps = 1000000\nmode = \"joint\"\n\
                [init]\nw = \"kaiming_uniform\"\n[optimizer]\nkind = \"normalized-gd\"\n";
    std::fs::write(&path, body).unwrap();
    let f = path.to_str().unwrap();
    for cmd in ["run", "twin", "certify", "compare"] {
        let o = common::tokensel_within(
            &[cmd, "--quiet", "--config", f],
            std::time::Duration::from_secs(20),
        )
        .unwrap_or_else(|| panic!("{cmd}: worked"));
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {err}");
        assert!(err.contains("`optimizer.eps`"), "{cmd}: {err}");
        assert!(
            err.contains("gradient with respect to W at step 0"),
            "{cmd}: {err}"
        );
    }
    let mut cfg = normalized(small(Mode::Joint, Method::Direct, 3), 0.0);
    cfg.init.p = PInit::Zero;
    assert!(cfg.validate().is_err());
    cfg.optimizer.eps = 1e-9;
    cfg.validate().unwrap();
}
