//! The prompt in the sequence (`[model] prompt = "in-sequence"`, the rebuttal's bridge
//! A''1; proofs-notes/prompt.md): the attended sequence is [p; X_i], position 0 the
//! tunable token p itself, with score <p, W^T p> and head values <nu_c, p>.
//!
//! What is checked here:
//! - the 53-bit predictor is the f64 trainer bit for bit, in p-, W- and joint mode, for
//!   the binary and the K-class model (the prompt's values live in the run's arithmetic);
//! - the 128-bit balls enclose the 1024-bit twin at every step;
//! - the gradient (dL/dp with its two prompt terms, dL/dW) is the derivative of the loss:
//!   against a Richardson-extrapolated central difference of the 512-bit twin's loss;
//! - in W-mode (p fixed) the run IS the separate model's run on the data with p(0)
//!   prepended as token 0 of every sequence: bit-equal scores, attention, outputs, loss
//!   and parameters in f64 (the same operations in the same order: derived in
//!   proofs-notes/prompt.md);
//! - records: the prompt's attention and top share are recorded beside the groups,
//!   which hold the tokens' attention only; a separate prompt's files keep their bytes;
//! - refusals: what is not implemented for the prompt in sequence exits 2 naming the key.

mod common;

use rug::Float;
use tokensel::prelude::{Engine, PInit, Prompt, *};

/// `cfg` as the multi-class model with `k` classes (grown as in tests/multiclass.rs).
fn multiclass(mut cfg: Config, k: usize) -> Config {
    cfg.model.kind = ModelKind::Multiclass;
    cfg.model.classes = k;
    let extra = (k - 1) * cfg.layout.weak_opposite.max(1) - cfg.layout.weak_opposite;
    cfg.layout.weak_opposite += extra;
    cfg.layout.tokens += extra;
    cfg.validate().unwrap();
    cfg
}

/// A small in-sequence config where attention moves within a few dozen steps: d = 40,
/// n = 6, ||mu|| = 6, alpha = 0.5, in `mode` (Gaussian p(0); Kaiming W(0) where
/// `kaiming` or outside p-mode), binary or with `k` classes.
fn small(seed: u64, mode: Mode, kaiming: bool, steps: u64, k: Option<usize>) -> Config {
    let cfg = Config {
        seed,
        d: 40,
        n_train: 6,
        n_test: 20,
        mu_norm: 6.0,
        eta: 0.34,
        step_size: 0.5,
        steps,
        method: Method::Auto,
        ..Config::default()
    };
    let mut cfg = common::with_init(cfg, mode, 0.5, kaiming);
    cfg.model.prompt = Prompt::InSequence;
    cfg.validate().unwrap();
    match k {
        Some(k) => multiclass(cfg, k),
        None => cfg,
    }
}

/// Every combination the tests cover: (mode, dense W, classes).
fn cases() -> Vec<(Mode, bool, Option<usize>)> {
    let mut v = Vec::new();
    for k in [None, Some(3)] {
        for (mode, kaiming) in [
            (Mode::P, false),
            (Mode::P, true),
            (Mode::W, true),
            (Mode::Joint, true),
        ] {
            v.push((mode, kaiming, k));
        }
    }
    v
}

fn engine_p<A: Arith>(tr: &Trainer<'_, A>) -> Vec<A::Real> {
    match &tr.engine {
        Engine::Direct(e) => e.p().to_vec(),
        Engine::Span(_) => panic!("the prompt in sequence takes the direct step"),
    }
}

#[test]
fn auto_resolves_to_the_direct_step_and_positions_are_t_plus_one() {
    for (mode, kaiming, k) in cases() {
        let cfg = small(1, mode, kaiming, 3, k);
        let data = Dataset::generate(&cfg);
        let mut tr = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
        assert_eq!(tr.method(), Method::Direct);
        assert_eq!(tr.positions(), cfg.tokens() + 1);
        tr.forward_backward().unwrap();
        assert_eq!(tr.scores.len(), cfg.n_train * (cfg.tokens() + 1));
        // z_0 = <p, W^T p> in every sample
        let (p, q) = (tr.p(), tr.q());
        let z0: f64 = p.iter().zip(&q).map(|(a, b)| a * b).sum();
        for i in 0..cfg.n_train {
            let z = tr.scores[i * tr.positions()];
            assert!((z - z0).abs() <= 1e-12 * (1.0 + z0.abs()), "{z} vs {z0}");
        }
    }
}

/// The f64 trainer and the 53-bit predictor in lockstep: equal bits after every forward
/// pass (scores, attention, 1 - s_top, outputs, loss, coefficients, q, dL/dq) and of p
/// after every update, over 25 steps at alpha = 0.5.
#[test]
fn predictor_is_bit_identical() {
    for (mode, kaiming, k) in cases() {
        for seed in [0u64, 3] {
            let cfg = small(seed, mode, kaiming, 25, k);
            let data = Dataset::generate(&cfg);
            let mut a = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
            let mut b = Trainer::new(&cfg, &data, Mpfr::predictor(), cfg.formulation).unwrap();
            for step in 0..=cfg.steps {
                a.forward_backward().unwrap();
                b.forward_backward().unwrap();
                assert_eq!(
                    tokensel::prelude::analysis::compare::predictor_mismatch(&a, &b),
                    None,
                    "{mode:?} W dense {kaiming} K {k:?} seed {seed} step {step}"
                );
                let (pa, pb) = (engine_p(&a), engine_p(&b));
                assert!(
                    pa.iter()
                        .zip(&pb)
                        .all(|(x, y)| x.to_bits() == y.to_f64().to_bits()),
                    "p at step {step}"
                );
                let (ta, tb) = (a.test_outputs(None), b.test_outputs(None));
                assert!(
                    ta.iter()
                        .zip(&tb)
                        .all(|(x, y)| x.to_bits() == y.to_f64().to_bits()),
                    "test outputs at step {step}"
                );
                if step < cfg.steps {
                    a.update().unwrap();
                    b.update().unwrap();
                }
            }
        }
    }
}

/// The 128-bit balls enclose the 1024-bit twin at every one of 20 steps: scores
/// (the prompt's included), attention, coefficients, outputs, loss, q and p.
#[test]
fn balls_enclose_the_twin() {
    for (mode, kaiming, k) in cases() {
        let cfg = small(5, mode, kaiming, 20, k);
        let data = Dataset::generate(&cfg);
        let mut b = Trainer::new(&cfg, &data, Ball::new(128).unwrap(), cfg.formulation).unwrap();
        let mut t = Trainer::new(&cfg, &data, Mpfr::truth(1024).unwrap(), cfg.formulation).unwrap();
        for step in 0..=cfg.steps {
            b.forward_backward().unwrap();
            t.forward_backward().unwrap();
            let at = |q: &str| format!("{mode:?} dense {kaiming} K {k:?} step {step}: {q}");
            let inside =
                |q: &str, bs: &[BallReal], ts: &[Float]| common::assert_enclosed(&at(q), bs, ts);
            inside("z", &b.scores, &t.scores);
            inside("s", &b.attention, &t.attention);
            inside("c", &b.c, &t.c);
            for (sb, st) in b.samples.iter().zip(&t.samples) {
                inside("outputs", &sb.outputs, &st.outputs);
                inside(
                    "f",
                    std::slice::from_ref(&sb.f),
                    std::slice::from_ref(&st.f),
                );
            }
            inside(
                "loss",
                std::slice::from_ref(&b.loss),
                std::slice::from_ref(&t.loss),
            );
            inside("q", &b.q(), &t.q());
            inside("p", &b.p(), &t.p());
            inside("test outputs", &b.test_outputs(None), &t.test_outputs(None));
            if step < cfg.steps {
                b.update().unwrap();
                t.update().unwrap();
            }
        }
    }
}

/// A small config for the gradient check: d = 12, n = 5, ||mu|| = 3, a Gaussian p of
/// scale 0.7, alpha = 1 (so one update moves each trained entry by exactly minus its
/// gradient, up to one 512-bit rounding), in `mode` with a Kaiming W.
fn grad_config(mode: Mode, k: Option<usize>) -> Config {
    let mut cfg = Config {
        d: 12,
        n_train: 5,
        n_test: 3,
        mu_norm: 3.0,
        eta: 0.4,
        step_size: 1.0,
        method: Method::Direct,
        ..Config::default()
    };
    cfg = common::with_init(cfg, mode, 0.7, true);
    cfg.init.p = PInit::Gaussian;
    cfg.model.prompt = Prompt::InSequence;
    cfg.validate().unwrap();
    match k {
        Some(k) => multiclass(cfg, k),
        None => cfg,
    }
}

/// The in-sequence gradient against the loss's derivative, in the 512-bit twin.
///
/// The trainer's gradient is read off one update at alpha = 1: p(1) = p(0) - dL/dp
/// (p-mode: W dL/dq + (sum_i c_i0) q + sum_c a_c nu_c) and W(1) = W(0) - p (dL/dq)^T
/// (W-mode), each entry rounded once at 512 bits. The derivative: the Richardson
/// extrapolation (4 D(h/2) - D(h)) / 3 of central differences D(h) of the 512-bit loss
/// at h = 2^-16, 2^-17 (perturbed entries exact in f64: asserted), truncation
/// ~|L^(5)| h^4 / 30 ~ 1e-20 |L^(5)|. Asserted to 1e-12 of max |grad|. That the
/// prompt's own terms matter: their norm is at least 1e-3 of the gradient's (a formula
/// without them fails the check by far more than the tolerance).
#[test]
fn gradient_is_the_derivative_of_the_loss() {
    let ar = Mpfr::truth(512).unwrap();
    for k in [None, Some(3)] {
        for mode in [Mode::P, Mode::W] {
            let cfg = grad_config(mode, k);
            let data = Dataset::generate(&cfg);
            let p0 = Params::init(&cfg);
            let w0 = p0.w.clone().expect("a dense W");
            let d = cfg.d;
            let loss_at = |params: &Params| -> Float {
                let mut tr = Trainer::from_params(
                    &cfg,
                    &data,
                    ar,
                    Formulation::Stable,
                    Method::Direct,
                    params,
                )
                .unwrap();
                tr.forward_backward().unwrap();
                tr.loss.clone()
            };
            let mut tr =
                Trainer::from_params(&cfg, &data, ar, Formulation::Stable, Method::Direct, &p0)
                    .unwrap();
            tr.forward_backward().unwrap();
            if mode == Mode::P {
                let extra = match &tr.engine {
                    Engine::Direct(e) => e.prompt_grad.clone().unwrap(),
                    Engine::Span(_) => unreachable!(),
                };
                let (p_old, _) = tr.params();
                tr.update().unwrap();
                let (p_new, _) = tr.params();
                let grad: Vec<Float> = p_old
                    .iter()
                    .zip(&p_new)
                    .map(|(a, b)| Float::with_val(512, a - b))
                    .collect();
                let gmax = grad.iter().map(|g| g.to_f64().abs()).fold(0.0, f64::max);
                let emax = extra.iter().map(|g| g.to_f64().abs()).fold(0.0, f64::max);
                assert!(gmax > 1e-3, "K {k:?}: a gradient of {gmax:e} tests nothing");
                assert!(emax > 1e-3 * gmax, "the prompt terms {emax:e} vs {gmax:e}");
                let diff = |kk: usize, h: f64| -> Float {
                    let (mut up, mut down) = (p0.p.clone(), p0.p.clone());
                    up[kk] += h;
                    down[kk] -= h;
                    assert_eq!(up[kk] - p0.p[kk], h, "p_k + h exact");
                    assert_eq!(p0.p[kk] - down[kk], h, "p_k - h exact");
                    let at = |p: ndarray::Array1<f64>| {
                        loss_at(&Params {
                            p,
                            w: Some(w0.clone()),
                        })
                    };
                    (at(up) - at(down)) / Float::with_val(512, 2.0 * h)
                };
                for (kk, g) in grad.iter().enumerate() {
                    let (h, h2) = (2f64.powi(-16), 2f64.powi(-17));
                    let rich = (Float::with_val(512, 4) * diff(kk, h2) - diff(kk, h)) / 3;
                    let err = Float::with_val(512, &rich - g).to_f64().abs();
                    assert!(
                        err <= 1e-12 * gmax,
                        "K {k:?} p-mode, p_{kk}: {err:e} (|grad| {gmax:e})"
                    );
                }
            } else {
                let (_, w_old) = tr.params();
                tr.update().unwrap();
                let (_, w_new) = tr.params();
                let (w_old, w_new) = (w_old.unwrap(), w_new.unwrap());
                let grad: Vec<Float> = w_old
                    .iter()
                    .zip(&w_new)
                    .map(|(a, b)| Float::with_val(512, a - b))
                    .collect();
                let gmax = grad.iter().map(|g| g.to_f64().abs()).fold(0.0, f64::max);
                assert!(gmax > 1e-3, "K {k:?}: a gradient of {gmax:e} tests nothing");
                let diff = |e: usize, h: f64| -> Float {
                    let (mut up, mut down) = (w0.clone(), w0.clone());
                    let (m, kk) = (e / d, e % d);
                    up[[m, kk]] += h;
                    down[[m, kk]] -= h;
                    assert_eq!(up[[m, kk]] - w0[[m, kk]], h, "W + h exact");
                    assert_eq!(w0[[m, kk]] - down[[m, kk]], h, "W - h exact");
                    let at = |w| {
                        loss_at(&Params {
                            p: p0.p.clone(),
                            w: Some(w),
                        })
                    };
                    (at(up) - at(down)) / Float::with_val(512, 2.0 * h)
                };
                // every 7th entry (the diagonal and off-diagonal entries alike)
                for e in (0..d * d).step_by(7) {
                    let (h, h2) = (2f64.powi(-16), 2f64.powi(-17));
                    let rich = (Float::with_val(512, 4) * diff(e, h2) - diff(e, h)) / 3;
                    let err = Float::with_val(512, &rich - &grad[e]).to_f64().abs();
                    assert!(
                        err <= 1e-12 * gmax,
                        "K {k:?} W-mode, W entry {e}: {err:e} (|grad| {gmax:e})"
                    );
                }
            }
        }
    }
}

/// `data` with `p` prepended as token 0 of every sequence (training and test), and the
/// separate-prompt config of T + 1 tokens that describes it (the extra token counted as
/// irrelevant: groups play no part in the trajectory).
fn augmented(cfg: &Config, data: &Dataset, p: &[f64]) -> (Config, Dataset) {
    let mut c = cfg.clone();
    c.model.prompt = Prompt::Separate;
    c.layout.tokens += 1;
    c.layout.irrelevant += 1;
    c.validate().unwrap();
    let mut a = data.clone();
    for split in [&mut a.train, &mut a.test] {
        let (n, t, d) = split.x.dim();
        let mut x = ndarray::Array3::<f64>::zeros((n, t + 1, d));
        for i in 0..n {
            for k in 0..d {
                x[[i, 0, k]] = p[k];
            }
            for tt in 0..t {
                for k in 0..d {
                    x[[i, tt + 1, k]] = split.x[[i, tt, k]];
                }
            }
        }
        split.x = x;
        let g0 = p.iter().zip(&data.nu).map(|(a, b)| a * b).sum::<f64>();
        let mut g = ndarray::Array2::<f64>::zeros((n, t + 1));
        for i in 0..n {
            g[[i, 0]] = g0;
            for tt in 0..t {
                g[[i, tt + 1]] = split.g[[i, tt]];
            }
        }
        split.g = g;
    }
    a.groups.insert(0, tokensel::prelude::Group::I);
    (c, a)
}

/// W-mode (p fixed): the in-sequence run is the separate run on [p(0); X_i], bit for
/// bit in f64 at every one of 30 steps (scores, attention, coefficients, outputs, loss,
/// q, dL/dq, W, test outputs), binary and K = 3: position 0's score <p, q>, head values
/// <nu_c, p> and the fma chain of X^T c over [p; X_i] are the separate run's operations
/// on the augmented rows, in the same order (proofs-notes/prompt.md).
#[test]
fn w_mode_is_the_separate_model_on_augmented_data() {
    for k in [None, Some(3)] {
        for seed in [0u64, 7] {
            let cfg = small(seed, Mode::W, true, 30, k);
            let data = Dataset::generate(&cfg);
            let init = Params::init(&cfg);
            let (cfg_a, data_a) = augmented(&cfg, &data, init.p.as_slice().unwrap());
            let direct = Method::Direct;
            let form = Formulation::Stable;
            let mut a = Trainer::from_params(&cfg, &data, F64, form, direct, &init).unwrap();
            let mut b = Trainer::from_params(&cfg_a, &data_a, F64, form, direct, &init).unwrap();
            let bits = |x: &[f64]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            for step in 0..=cfg.steps {
                a.forward_backward().unwrap();
                b.forward_backward().unwrap();
                let at = format!("K {k:?} seed {seed} step {step}");
                assert_eq!(bits(&a.scores), bits(&b.scores), "scores {at}");
                assert_eq!(bits(&a.attention), bits(&b.attention), "attention {at}");
                assert_eq!(bits(&a.c), bits(&b.c), "coefficients {at}");
                assert_eq!(a.loss.to_bits(), b.loss.to_bits(), "loss {at}");
                for (x, y) in a.samples.iter().zip(&b.samples) {
                    assert_eq!(x.f.to_bits(), y.f.to_bits(), "f {at}");
                    assert_eq!(bits(&x.outputs), bits(&y.outputs), "outputs {at}");
                }
                assert_eq!(bits(&a.grad_q()), bits(&b.grad_q()), "dL/dq {at}");
                assert_eq!(bits(&a.q()), bits(&b.q()), "q {at}");
                assert_eq!(
                    bits(&a.test_outputs(None)),
                    bits(&b.test_outputs(None)),
                    "test outputs {at}"
                );
                if step < cfg.steps {
                    a.update().unwrap();
                    b.update().unwrap();
                }
            }
            let (wa, wb) = (a.params().1.unwrap(), b.params().1.unwrap());
            assert_eq!(bits(&wa), bits(&wb), "W after {} steps", cfg.steps);
        }
    }
}

/// What a checkpoint records with the prompt in sequence: per sample, s_0 and whether
/// the prompt is the top position; the groups' masses are the tokens' attention (with
/// s_0 they sum to 1); the top token is a token of X (below T); the checkpoint's prompt
/// share is the mean of the samples'. A separate prompt records none of it, and its
/// config text has no `prompt` key.
#[test]
fn records_keep_the_prompt_out_of_the_groups() {
    for k in [None, Some(3)] {
        let cfg = small(2, Mode::P, false, 40, k);
        let traj = Trainer::run(&cfg, &Dataset::generate(&cfg), F64, &mut |_| {}).unwrap();
        for c in &traj.checkpoints {
            let share = c.prompt.expect("the prompt's record");
            let mut clean = (0.0, 0.0, 0usize);
            for (i, s) in c.samples.iter().enumerate() {
                let p = s.prompt.expect("a sample's prompt record");
                let m = s.mass.to_array();
                let total: f64 = m.iter().sum::<f64>() + p.attention;
                assert!((total - 1.0).abs() < 1e-12, "masses + s_0 = {total}");
                assert!(s.top < cfg.tokens());
                if traj.y[i] == traj.y_true[i] {
                    clean.0 += p.attention;
                    clean.1 += f64::from(u8::from(p.top));
                    clean.2 += 1;
                }
            }
            let n = clean.2 as f64;
            let (att, top) = (share.attention.clean.unwrap(), share.top.clean.unwrap());
            assert!((att - clean.0 / n).abs() < 1e-12);
            assert!((top - clean.1 / n).abs() < 1e-12);
        }
        assert!(cfg.to_toml().contains("prompt = \"in-sequence\""));
        let back = Config::from_toml_str(&cfg.to_toml(), std::path::Path::new("t")).unwrap();
        assert_eq!(back, cfg);
    }
    let mut sep = small(2, Mode::P, false, 5, None);
    sep.model.prompt = Prompt::Separate;
    assert!(!sep.to_toml().contains("prompt"));
    assert!(!sep.to_toml().contains("[model]"));
    let traj = Trainer::run(&sep, &Dataset::generate(&sep), F64, &mut |_| {}).unwrap();
    let json = serde_json::to_string(&traj).unwrap();
    assert!(
        !json.contains("prompt"),
        "a separate run's record has no prompt field"
    );
}

/// What is not implemented for the prompt in sequence exits 2 before any work, naming
/// the key: the span step, the naive formulation, minibatches, direction tracking (in
/// the config), and the commands that replay, certify, sweep or time the separate
/// model's fixed tokens.
#[test]
fn refusals_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let base = "d = 20\nn_train = 4\nn_test = 4\nsteps = 2\n[model]\nprompt = \"in-sequence\"\n";
    for (text, needle) in [
        (format!("method = \"span\"\n{base}"), "method"),
        (
            format!("formulation = \"naive\"\nmethod = \"direct\"\n{base}"),
            "formulation",
        ),
        (
            format!("{base}[optimizer]\nkind = \"adam\"\nbatch = 2\n"),
            "optimizer.batch",
        ),
        (
            format!("{base}[direction]\npattern = \"theorem\"\n"),
            "direction",
        ),
        ("[model]\nprompt = \"inside\"\n".to_string(), "model.prompt"),
    ] {
        let path = file("bad.toml", &text);
        let o = common::tokensel(&["run", "--config", &path, "--quiet"]);
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(needle), "{text}: {err}");
    }
    let path = file("ok.toml", base);
    let out = dir.path().join("o");
    let out = out.to_str().unwrap();
    for args in [
        vec!["certify", "--config", &path],
        vec!["compare", "--config", &path],
        vec!["saturation", "--config", &path],
        vec!["svm", "--config", &path],
        vec!["cost", "--config", &path],
        vec![
            "grid",
            "--config",
            &path,
            "--seeds",
            "0",
            "--set",
            "eta=0.1,0.2",
            "--out",
            out,
        ],
    ] {
        let o = common::tokensel(&args);
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("model.prompt"), "{args:?}: {err}");
        // the refusal names the command and the capability it lacks
        let cap = match args[0] {
            "grid" => "grid_metrics",
            "cost" => "span_form",
            c => c,
        };
        let want = format!("{} needs the capability `{cap}`", args[0]);
        assert!(err.contains(&want), "{args:?}: {err}");
        assert!(!std::path::Path::new(out).exists(), "{args:?} wrote output");
    }
    // judge reads the config of a data directory: refused before the trajectory is read
    let data_dir = dir.path().join("data");
    let data_dir = data_dir.to_str().unwrap();
    let o = common::tokensel(&["data", "--config", &path, "--out", data_dir]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let o = common::tokensel(&["judge", "--data", data_dir, "absent.json"]);
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(2), "judge: {err}");
    assert!(err.contains("model.prompt"), "judge: {err}");
    assert!(
        err.contains("judge needs the capability `judge_replay`"),
        "judge: {err}"
    );
    // run and twin take it
    for cmd in ["run", "twin"] {
        let o = common::tokensel(&[cmd, "--config", &path, "--quiet", "--json"]);
        assert_eq!(o.status.code(), Some(0), "{cmd}: {}", common::stderr(&o));
    }
}

/// Lemma A.6 breaks with the prompt in sequence, and only then: `analysis::lemma_a6`
/// (a W-mode run and its p-mode twin W = I, p(0) = q(0), step alpha |p(0)|^2) measures
/// max ||q_W - q_p|| / ||q_W|| at rounding level (below 1e-12) for the separate prompt
/// and above 1e-4 in sequence, at d = 40, 100 steps, seeds 0-2 (proofs-notes/prompt.md
/// has the break at the balanced setting: 1-6 %). The runs differ by derivation: in the
/// W-mode run the prompt token is the fixed p, in the p-mode twin it is q itself.
#[test]
fn lemma_a6_breaks_in_sequence_only() {
    for seed in 0..3u64 {
        let mut cfg = Config {
            seed,
            d: 40,
            n_train: 8,
            n_test: 8,
            mu_norm: 6.0,
            step_size: 1e-3,
            steps: 100,
            ..Config::default()
        };
        cfg.init.w = tokensel::prelude::WInit::KaimingUniform;
        let data = Dataset::generate(&cfg);
        let sep = tokensel::prelude::analysis::lemma_a6::lemma_a6(&cfg, &data).unwrap();
        cfg.model.prompt = Prompt::InSequence;
        let ins = tokensel::prelude::analysis::lemma_a6::lemma_a6(&cfg, &data).unwrap();
        assert!(sep.max_rel_q_diff < 1e-12, "seed {seed}: {sep:?}");
        assert!(ins.max_rel_q_diff > 1e-4, "seed {seed}: {ins:?}");
    }
}

/// A library caller that skips validation is refused too: the trainer refuses the naive
/// formulation and minibatches with the prompt in sequence (a span step asked of it
/// resolves to the direct one, as the commands' span defaults do), and the protocol's
/// settings refuse it (exit-2 config errors naming the key).
#[test]
fn the_library_refuses_what_is_not_implemented() {
    let cfg = small(0, Mode::P, false, 2, None);
    let data = Dataset::generate(&cfg);
    let key = |r: tokensel::prelude::Result<Trainer<'_, F64>>| match r {
        Err(Error::InvalidConfig { field, .. }) => field,
        Err(e) => panic!("not a config error: {e}"),
        Ok(_) => panic!("accepted"),
    };
    let init = Params::init(&cfg);
    let tr = Trainer::from_params(&cfg, &data, F64, Formulation::Stable, Method::Span, &init);
    assert_eq!(tr.unwrap().method(), Method::Direct);
    let r = Trainer::from_params(&cfg, &data, F64, Formulation::Naive, Method::Direct, &init);
    assert_eq!(key(r), "model.prompt");
    let mut batched = cfg.clone();
    batched.optimizer.batch = Some(2);
    let r = Trainer::new(&batched, &data, F64, Formulation::Stable);
    assert_eq!(key(r), "model.prompt");
    let err = tokensel::prelude::experiments::protocol::settings(&cfg).unwrap_err();
    assert!(err.to_string().contains("model.prompt"), "{err}");
}

/// The in-sequence prompt in p-mode (the prompt runs in the direct step only), binary
/// and with K = 3 classes, through the conformance helper (`common::conformance`): the
/// predictor, 1 and 2 threads, the balls around the twin (the prompt's attention and
/// head values among the reals), the gradient with the prompt's own terms against a
/// Richardson difference of the twin's loss, resume, and diff's sensitivity to every
/// leaf of the last checkpoint. That last check fails until `diff` visits the prompt's
/// records (`samples[i].prompt.attention`, `samples[i].prompt.top`, the checkpoint's
/// `prompt.attention.{clean,noisy}` and `prompt.top.{clean,noisy}`; issue 41): today it
/// lists those 28 leaves as unreported (of 177 binary, 238 with K = 3).
fn prompt_conforms(k: Option<usize>) {
    use common::conformance::{Checks, conform, sized};
    let mut cfg = sized(Mode::P);
    cfg.model.prompt = Prompt::InSequence;
    cfg.validate().unwrap();
    let cfg = match k {
        Some(k) => multiclass(cfg, k),
        None => cfg,
    };
    conform(&cfg, Checks::all());
}

#[test]
fn in_sequence_prompt_conforms() {
    prompt_conforms(None);
}

#[test]
fn in_sequence_k_class_prompt_conforms() {
    prompt_conforms(Some(3));
}
