//! The f64 trainer: its gradient, determinism and W-mode. (The paper's settings are
//! tested in tests/theorem.rs.)

use ndarray::Array2;
use tokensel::prelude::{Config, Dataset, F64, Method, Mode, PInit, Params, Trainer, WInit};

mod common;

fn small(mode: Mode) -> Config {
    let mut c = Config {
        d: 24,
        n_train: 7,
        n_test: 5,
        mu_norm: 3.0,
        mode,
        method: Method::Direct,
        ..Config::default()
    };
    c.init.p = PInit::Gaussian;
    c.init.p_scale = 0.3;
    c.init.w = WInit::KaimingUniform;
    c
}

fn loss_at(cfg: &Config, data: &Dataset, params: Params) -> f64 {
    let mut tr = common::f64_from(cfg, data, &params);
    tr.forward_backward().unwrap();
    tr.loss
}

/// SPEC section 3: dL/dp = W dL/dq, checked against central differences of L.
#[test]
fn p_gradient_matches_central_differences() {
    let cfg = small(Mode::P);
    let data = Dataset::generate(&cfg);
    let init = Params::init(&cfg);
    let mut tr = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
    tr.forward_backward().unwrap();
    let w = init.w.clone().unwrap();
    let grad_p = w.dot(&ndarray::Array1::from(tr.grad_q()));
    let h = 1e-5;
    for m in 0..cfg.d {
        let (mut plus, mut minus) = (init.clone(), init.clone());
        plus.p[m] += h;
        minus.p[m] -= h;
        let fd = (loss_at(&cfg, &data, plus) - loss_at(&cfg, &data, minus)) / (2.0 * h);
        assert!(
            (fd - grad_p[m]).abs() <= 1e-8 + 1e-6 * grad_p[m].abs(),
            "coordinate {m}: finite difference {fd}, gradient {}",
            grad_p[m]
        );
    }
}

/// SPEC section 3: dL/dW = p (dL/dq)^T, checked against central differences of L.
#[test]
fn w_gradient_matches_central_differences() {
    let cfg = small(Mode::W);
    let data = Dataset::generate(&cfg);
    let init = Params::init(&cfg);
    let mut tr = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
    tr.forward_backward().unwrap();
    let p = init.p.clone();
    let g = tr.grad_q();
    let h = 1e-5;
    for (a, b) in [(0, 0), (3, 7), (11, 2), (23, 23), (5, 19)] {
        let bump = |delta: f64| {
            let mut params = init.clone();
            let w: &mut Array2<f64> = params.w.as_mut().unwrap();
            w[[a, b]] += delta;
            params
        };
        let fd = (loss_at(&cfg, &data, bump(h)) - loss_at(&cfg, &data, bump(-h))) / (2.0 * h);
        let exact = p[a] * g[b];
        assert!(
            (fd - exact).abs() <= 1e-8 + 1e-6 * exact.abs(),
            "W[{a},{b}]: finite difference {fd}, gradient {exact}"
        );
    }
}

/// SPEC section 7: same seed and config give bit-identical trajectories; another seed
/// gives other data.
#[test]
fn same_seed_same_trajectory_bits() {
    let mut cfg = small(Mode::P);
    cfg.steps = 200;
    let run = |c: &Config| common::run_f64(c).digest();
    assert_eq!(run(&cfg), run(&cfg));
    let mut other = cfg.clone();
    other.seed += 1;
    assert_ne!(run(&cfg), run(&other));
}

/// W-mode moves W (every row with p_m != 0) and leaves p bit-identical, and lowers the
/// loss on a small problem.
#[test]
fn w_mode_trains_w_and_lowers_the_loss() {
    let mut cfg = small(Mode::W);
    cfg.steps = 300;
    cfg.step_size = 0.05;
    let data = Dataset::generate(&cfg);
    let init = Params::init(&cfg);
    let mut tr = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
    for _ in 0..cfg.steps {
        tr.forward_backward().unwrap();
        tr.update().unwrap();
    }
    let (p, w) = tr.params();
    let p0 = init.p.to_vec();
    assert!(
        p.iter().zip(&p0).all(|(a, b)| a.to_bits() == b.to_bits()),
        "p moved"
    );
    let (w, w0) = (w.unwrap(), init.w.unwrap());
    let d = cfg.d;
    for m in 0..d {
        let moved = (0..d).filter(|&k| w[m * d + k] != w0[[m, k]]).count();
        assert!(moved > 0, "row {m} of W did not move");
    }
    let traj = common::run_f64(&cfg);
    let (first, last) = (&traj.checkpoints[0], traj.last());
    assert!(
        last.train_loss < first.train_loss,
        "{} !< {}",
        last.train_loss,
        first.train_loss
    );
}

/// A hand-made tie after training steps: without noise (sigma = 0) every irrelevant token
/// is exactly 0, and from p(0) = -(e_1 + e_2) every relevant and weakly relevant score is
/// negative, so the top score (0) is shared by the irrelevant tokens at every step. The
/// checkpoints at later steps report each sample's top token as a tie, and count it as
/// `tie`, not as the irrelevant group its lowest index lies in; a decided top token at
/// another config is counted in its group.
#[test]
fn ties_at_later_steps_are_reported_as_ties() {
    use tokensel::prelude::Selection;
    let cfg = Config {
        d: 6,
        n_train: 6,
        n_test: 4,
        sigma: 0.0,
        steps: 20,
        step_size: 1e-3,
        ..Config::default()
    };
    let data = Dataset::generate(&cfg);
    let mut p = ndarray::Array1::zeros(cfg.d);
    p[0] = -1.0;
    p[1] = -1.0;
    let params = Params { p, w: None };
    let mut tr = common::f64_from(&cfg, &data, &params);
    let t = tr.record(None, &mut |_, _| Ok(())).unwrap();
    let last = t.last();
    assert_eq!(last.step, 20);
    for c in &t.checkpoints {
        assert!(
            c.samples.iter().all(|s| s.selection == Selection::Tie),
            "step {}",
            c.step
        );
        for set in [c.selection.clean, c.selection.noisy].into_iter().flatten() {
            assert_eq!((set.tie, set.i, set.r), (1.0, 0.0, 0.0), "step {}", c.step);
        }
    }
    // the same data from p(0) = e_1 + e_2: every top token is decided (R or W_same)
    let mut p = ndarray::Array1::zeros(cfg.d);
    p[0] = 1.0;
    p[1] = 1.0;
    let mut tr = common::f64_from(&cfg, &data, &Params { p, w: None });
    let t = tr.record(None, &mut |_, _| Ok(())).unwrap();
    let c = t.last();
    assert!(c.samples.iter().all(|s| s.selection == Selection::Decided));
    let clean = c.selection.clean.unwrap();
    assert_eq!((clean.r, clean.tie), (1.0, 0.0));
}

/// ||q|| of a finite q whose squares overflow (p(0) of scale 1e160 in f64, 1e20 in
/// f32: q = p in p-mode) is recorded finite, the scaled norm of p(0) (it was inf); the
/// plain norm's bits are kept wherever it does not overflow.
#[test]
fn the_norm_of_a_finite_q_is_finite() {
    use tokensel::prelude::F32;
    use tokensel::prelude::train::record::scaled_norm;
    for (scale, f32_run) in [(1e160, false), (1e20, true), (1.0, false)] {
        let mut cfg = small(Mode::P);
        cfg.init.p = PInit::Gaussian;
        cfg.init.p_scale = scale;
        cfg.init.w = WInit::Identity;
        cfg.steps = 1;
        let data = Dataset::generate(&cfg);
        let p = Params::init(&cfg).p;
        let cp = if f32_run {
            let t = Trainer::run(&cfg, &data, F32, &mut |_| {}).unwrap();
            t.checkpoints[0].clone()
        } else {
            let t = Trainer::run(&cfg, &data, F64, &mut |_| {}).unwrap();
            t.checkpoints[0].clone()
        };
        assert_eq!(cp.step, 0);
        assert!(cp.q_norm.is_finite(), "{scale}: {}", cp.q_norm);
        let want = if f32_run {
            let p32: Vec<f64> = p.iter().map(|&v| v as f32 as f64).collect();
            scaled_norm(&p32)
        } else {
            scaled_norm(p.as_slice().unwrap())
        };
        assert!(
            ((cp.q_norm - want) / want).abs() < 1e-12,
            "{scale}: {} vs {want}",
            cp.q_norm
        );
        if scale == 1.0 {
            let plain = p.iter().map(|v| v * v).sum::<f64>().sqrt();
            assert!(((cp.q_norm - plain) / plain).abs() < 1e-15);
        }
    }
}
