//! The network models' trainer (`train::network`: the encoder as a declared model) and
//! their commands: the shared conformance helper on an encoder config (the predictor
//! bit for bit, 1 and 2 threads above the pass's parallel thresholds, diff sensitivity
//! to every record leaf), the CLI's `run` and `twin` on it (f64, f32, the predictor and
//! the twin within the bound the pass's rounding gives), the record's parts (the cls
//! position as the in-sequence prompt, `test_loss`), and the refusals (every command
//! written for the token-selection trainer, exit 2 before any work, naming the model).
//!
//! The pass itself (its gradient against Richardson differences of the 512-bit twin,
//! balls against a 1024-bit twin, f32's bound) is tested in tests/encoder.rs.

use std::path::Path;

use tokensel::prelude::train::network::NetTrainer;
use tokensel::prelude::{Config, Dataset, F64, Formulation, ModelKind, Trajectory};

mod common;

use common::conformance::{Checks, conform};

/// The encoder at the conformance helper's sizes (d = 64, n = 12, T = 8, 8 test
/// samples: above the predictor's parallel thresholds, asserted by the helper), MLP
/// width 48, the official naive loss, 20 steps of SGD at 0.05.
fn encoder(mlp: usize, residual: Option<bool>) -> Config {
    let mut cfg = common::conformance::sized(tokensel::prelude::Mode::P);
    cfg.model.kind = ModelKind::Encoder;
    cfg.model.mlp = Some(mlp);
    cfg.model.residual = residual;
    cfg.formulation = Formulation::Naive;
    cfg.steps = 20;
    cfg.step_size = 0.05;
    cfg.validate().expect("a valid encoder config");
    cfg
}

/// The shared helper: the predictor is the f64 trainer bit for bit (trajectory and every
/// final block), 1 and 2 threads give the same bits, and diff sees every leaf of the
/// record (the cls token's `prompt` records and `test_loss` included); with and without
/// the residual connections.
#[test]
fn the_encoder_conforms() {
    let checks = Checks {
        balls: false,
        gradient: false,
        resume: false,
        ..Checks::all()
    };
    let r = conform(&encoder(48, None), checks);
    assert!(r.leaves > 0);
    conform(&encoder(48, Some(false)), checks);
}

/// The record of an encoder run: the cls position as the in-sequence prompt (each
/// sample's s_0 with its tokens' masses summing to 1 - s_0), the test loss at every
/// checkpoint, the trained blocks moved (every one of the 14), and the loss going down
/// over 20 steps of SGD (at step size 0.05 on this data: a property of this run, not a
/// theorem; it guards against a sign error in the update).
#[test]
fn an_encoder_run_records_the_cls_position_and_the_test_loss() {
    let cfg = encoder(48, None);
    let data = Dataset::generate(&cfg);
    let enc = tokensel::prelude::models::network::Encoder::of(&cfg);
    let mut tr = NetTrainer::new(&cfg, &data, F64, enc).unwrap();
    let start = tr.theta.clone();
    let traj = tr.record(&mut |_| ()).unwrap();
    let (first, last) = (&traj.checkpoints[0], traj.checkpoints.last().unwrap());
    assert_eq!(last.step, 20);
    for c in &traj.checkpoints {
        assert!(c.test_loss.is_some_and(|l| l.is_finite() && l >= 0.0));
        for s in &c.samples {
            let p = s.prompt.expect("the cls position's record");
            let tokens: f64 = s.mass.to_array().iter().sum();
            // T + 1 attention weights summing to 1, each rounded once and summed in
            // order: within (T + 2) ulp-sized terms of 1
            assert!(
                (tokens + p.attention - 1.0).abs() < 1e-14,
                "{tokens} + {}",
                p.attention
            );
        }
    }
    assert!(
        last.train_loss < first.train_loss,
        "{} -> {}",
        first.train_loss,
        last.train_loss
    );
    for ((b, v0), (_, v1)) in start.iter().zip(tr.theta.iter()) {
        assert_ne!(v0, v1, "block {} did not move", b.name);
    }
}

/// Write `cfg` to `dir/name.toml`.
fn write_config(dir: &Path, name: &str, cfg: &Config) -> String {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, toml::to_string(cfg).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

/// Read `dir/trajectory.json`.
fn trajectory(dir: &Path) -> Trajectory {
    serde_json::from_str(&std::fs::read_to_string(dir.join("trajectory.json")).unwrap()).unwrap()
}

/// The CLI: `run` (f64 and f32) and `twin` (the predictor, 256-bit MPFR) on an encoder
/// config; the predictor's digest is f64's; the twin agrees with f64 within
/// `diff`'s default rtol 1e-12 (20 steps of a pass whose every value is a few hundred
/// rounded operations deep: observed ~1e-13, and `diff` exits 1 past its rtol); f32
/// differs (its data rounded to binary32); the summary names the encoder, not a p / W
/// mode, and prints the test loss and the cls token's row.
#[test]
fn run_and_twin_take_an_encoder_config() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "enc", &encoder(48, None));
    let out = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let o = common::tokensel(&["run", "--config", &cfg, "--out", &out("f64"), "--quiet"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("encoder (m = 48, residual on; every block trained)"),
        "{text}"
    );
    assert!(!text.contains("p-mode"), "{text}");
    assert!(text.contains("test loss"), "{text}");
    assert!(text.contains("cls token (position 0)"), "{text}");
    for (name, args) in [
        ("f32", vec!["run", "--arith", "f32"]),
        ("pred", vec!["twin", "--predictor"]),
        ("mpfr", vec!["twin", "--prec", "256"]),
    ] {
        let mut a = args.clone();
        let o_name = out(name);
        a.extend(["--config", &cfg, "--out", &o_name, "--quiet"]);
        let o = common::tokensel(&a);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let f64_traj = trajectory(&dir.path().join("f64"));
    assert_eq!(
        f64_traj.digest(),
        trajectory(&dir.path().join("pred")).digest()
    );
    assert_ne!(
        f64_traj.digest(),
        trajectory(&dir.path().join("f32")).digest()
    );
    let d = common::tokensel(&[
        "diff",
        &format!("{}/trajectory.json", out("f64")),
        &format!("{}/trajectory.json", out("mpfr")),
    ]);
    assert_eq!(
        d.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&d.stdout)
    );
    assert!(String::from_utf8_lossy(&d.stdout).contains("verdict: agree"));
}

/// Every command written for the token-selection trainer refuses an encoder config with
/// exit code 2 before any work, naming the model and the commands that take it; `twin`
/// refuses a state file; the encoder's keys on another model are refused.
#[test]
fn commands_refuse_an_encoder_config() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "enc", &encoder(48, None));
    for cmd in [
        vec!["compare"],
        vec!["certify"],
        vec!["saturation"],
        vec!["svm"],
        vec!["cost"],
        vec!["data", "--out", "unused"],
    ] {
        let mut a = cmd.clone();
        a.extend(["--config", &cfg]);
        let o = common::tokensel(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(
            err.contains("the encoder is a network model"),
            "{cmd:?}: {err}"
        );
        assert!(!dir.path().join("unused").exists());
    }
    let state = dir.path().join("s.state").to_str().unwrap().to_string();
    let o = common::tokensel(&["twin", "--config", &cfg, "--state", &state]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no resumable state"));
    let mut plain = encoder(48, None);
    plain.model.kind = ModelKind::TokenSelection;
    let p = write_config(dir.path(), "plain", &plain);
    let o = common::tokensel(&["run", "--config", &p]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("model.mlp"));
}

/// Two encoder runs that differ in `mlp` or `residual` are the same model to `diff` (a
/// config difference, exit 1, named with both values) and to `plot` (one overlay,
/// titled with the encoder); an encoder against the token-selection model is refused
/// with exit 2, naming both models; the encoder's figure is titled with it.
#[test]
fn diff_and_plot_name_the_encoder() {
    let dir = tempfile::tempdir().unwrap();
    let mut small = encoder(48, None);
    small.steps = 3;
    let mut narrow = small.clone();
    narrow.model.mlp = Some(40);
    let mut plain = small.clone();
    plain.model = tokensel::prelude::ModelSpec::default();
    plain.formulation = Formulation::Stable;
    let mut trajs = Vec::new();
    for (name, cfg) in [("a", &small), ("b", &narrow), ("t", &plain)] {
        let c = write_config(dir.path(), name, cfg);
        let out = dir.path().join(name).to_str().unwrap().to_string();
        let o = common::tokensel(&["run", "--config", &c, "--out", &out, "--quiet"]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        trajs.push(format!("{out}/trajectory.json"));
    }
    let o = common::tokensel(&["diff", &trajs[0], &trajs[1]]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains("model.mlp: 48 -> 40"), "{text}");
    let o = common::tokensel(&["diff", &trajs[0], &trajs[2]]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the encoder (binary)") && err.contains("token-selection (binary)"),
        "{err}"
    );
    let svg = dir.path().join("o.svg").to_str().unwrap().to_string();
    let o = common::tokensel(&["plot", &trajs[0], &trajs[1], "--out", &svg]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let fig = std::fs::read_to_string(&svg).unwrap();
    assert!(fig.contains("encoder") && !fig.contains("binary token selection"));
    let one = dir.path().join("one.svg").to_str().unwrap().to_string();
    let o = common::tokensel(&["plot", &trajs[0], "--out", &one]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        std::fs::read_to_string(&one)
            .unwrap()
            .contains("one-layer encoder, m = 48")
    );
}

/// The keys of the token-selection models are refused on an encoder config for the
/// encoder's reason (mode, [init], classes), before any other section's check.
#[test]
fn token_selection_keys_are_refused_for_the_encoder() {
    let base = encoder(48, None);
    let mut w = base.clone();
    w.mode = tokensel::prelude::Mode::W;
    let mut init = base.clone();
    init.init.p_scale = 3.0;
    let mut k3 = base.clone();
    k3.model.classes = 3;
    for (cfg, key) in [(w, "mode"), (init, "init"), (k3, "model.classes")] {
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains(key) && e.contains("the encoder"), "{key}: {e}");
    }
}
