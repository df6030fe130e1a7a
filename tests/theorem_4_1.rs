//! Theorem 4.1's explicit solution (SPEC section 2b; proofs-notes/theorem-4-1.md):
//! p = mu_{+1} + mu_{-1} + beta sum_i eps_{u_i} at d = 10000, ||mu|| = 20, n = 100.

use tokensel::prelude::analysis::theory::theorem_4_1_solution;
use tokensel::prelude::{Config, Dataset};
mod common;

fn accuracies(data: &Dataset, cfg: &Config, beta: f64) -> (f64, f64) {
    let params = theorem_4_1_solution(data, cfg.rho, beta).unwrap();
    let mut tr = common::f64_from(cfg, data, &params);
    tr.forward_backward().unwrap();
    let train = tr.checkpoint(Default::default()).train_accuracy;
    (train, tr.test_accuracy(&tr.q()))
}

/// beta = 0.06 overfits benignly (paper: 1.0 / 1.0), beta = 1 overfits harmfully
/// (paper: 1.0 / ~0.58), beta = 0.001 does not fit the noise (paper: ~0.8 / 1.0).
#[test]
fn explicit_solution_regimes() {
    let cfg = Config {
        d: 10_000,
        mu_norm: 20.0,
        n_train: 100,
        n_test: 400,
        ..Config::default()
    };
    let data = Dataset::generate(&cfg);
    let benign = accuracies(&data, &cfg, 0.06);
    let harmful = accuracies(&data, &cfg, 1.0);
    let no_fit = accuracies(&data, &cfg, 0.001);
    eprintln!("benign {benign:?} harmful {harmful:?} no_fit {no_fit:?}");
    assert_eq!(benign.0, 1.0, "beta = 0.06 fits every training label");
    assert!(benign.1 >= 0.99, "beta = 0.06 test {}", benign.1);
    assert_eq!(harmful.0, 1.0, "beta = 1 fits every training label");
    assert!(harmful.1 < 0.8, "beta = 1 test {}", harmful.1);
    assert!(
        no_fit.0 < 0.95,
        "beta = 0.001 leaves noisy labels unfitted: {}",
        no_fit.0
    );
    assert!(no_fit.1 >= 0.99, "beta = 0.001 test {}", no_fit.1);
}
