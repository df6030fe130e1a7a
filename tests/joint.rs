//! Joint mode (p and W trained together) and the official-final preset's label rules.

use tokensel::prelude::{Config, Dataset, F64, Method, Mode, PInit, Preset, Trainer, WInit};

fn small(mode: Mode) -> Config {
    let mut c = Config {
        d: 16,
        n_train: 6,
        n_test: 5,
        mu_norm: 3.0,
        step_size: 0.1,
        mode,
        // the direct step: its joint update is literally the p- and the W-update
        method: Method::Direct,
        ..Config::default()
    };
    c.init.p = PInit::Gaussian;
    c.init.p_scale = 0.4;
    c.init.w = WInit::KaimingUniform;
    c
}

/// One joint step is exactly (bit for bit) the p-mode step for p and the W-mode step
/// for W, both gradients taken at the same point.
#[test]
fn a_joint_step_is_the_p_step_and_the_w_step() {
    let (cj, cp, cw) = (small(Mode::Joint), small(Mode::P), small(Mode::W));
    let data = Dataset::generate(&cj);
    let mut trainers: Vec<Trainer<F64>> = [&cj, &cp, &cw]
        .iter()
        .map(|c| Trainer::new(c, &data, F64, c.formulation).unwrap())
        .collect();
    for t in trainers.iter_mut() {
        t.forward_backward().unwrap();
        t.update().unwrap();
    }
    let (j, p, w) = (
        trainers[0].params(),
        trainers[1].params(),
        trainers[2].params(),
    );
    assert_eq!(j.0, p.0, "p moved as in p-mode");
    assert_eq!(j.1, w.1, "W moved as in W-mode");
    assert_ne!(j.0, w.0, "p did move");
}

/// The official code's labels: first n/2 samples of class +1, the first floor(m/2)
/// samples of each class flipped (m = ceil(eta n) = 4 at n = 20, eta = 0.2).
#[test]
fn official_final_labels() {
    let cfg = Config {
        n_test: 4,
        ..Preset::OfficialFinal.config()
    };
    assert_eq!(cfg.mode, Mode::Joint);
    let data = Dataset::generate(&cfg);
    let t = &data.train;
    assert!(t.y_true[..10].iter().all(|y| *y == 1) && t.y_true[10..].iter().all(|y| *y == -1));
    let noisy: Vec<usize> = (0..t.len()).filter(|&i| t.is_noisy(i)).collect();
    assert_eq!(noisy, vec![0, 1, 10, 11]);
}
