//! The MPFR truth twin against the f64 trainer, away from saturation.

use tokensel::arith::{F64, Mpfr};
use tokensel::config::{Config, Formulation, Method, Mode};
use tokensel::data::Dataset;
use tokensel::train::Trainer;

/// Away from saturation the f64 trainer agrees with the 256-bit twin (direct and span)
/// to a few ulps times the step count: 150 steps of error growth at most ~1e-16 each,
/// amplified by the conditioning of this small problem, stay below 1e-12 relative in
/// ||q|| and 1e-13 absolute in the loss (~0.69).
#[test]
fn truth_twin_agrees_with_f64_away_from_saturation() {
    let cfg = Config {
        d: 40,
        n_train: 8,
        n_test: 20,
        mu_norm: 4.0,
        steps: 150,
        step_size: 0.05,
        mode: Mode::P,
        formulation: Formulation::Stable,
        ..Config::default()
    };
    let data = Dataset::generate(&cfg);
    let ta = Trainer::run(&cfg, &data, F64, &mut |_| {}).unwrap();
    for method in [Method::Direct, Method::Span] {
        let twin_cfg = Config {
            method,
            ..cfg.clone()
        };
        let tb = Trainer::run(&twin_cfg, &data, Mpfr::truth(256).unwrap(), &mut |_| {}).unwrap();
        for (a, b) in ta.checkpoints.iter().zip(&tb.checkpoints) {
            assert_eq!(a.step, b.step);
            let rel = (a.q_norm - b.q_norm).abs() / b.q_norm.max(1e-300);
            assert!(
                rel < 1e-12,
                "{method:?} step {}: q_norm rel err {rel}",
                a.step
            );
            assert!((a.train_loss - b.train_loss).abs() < 1e-13);
        }
    }
}
