//! The MPFR twin against the f64 trainer.

use tokensel::config::{Config, Formulation, Mode, PInit, WInit};
use tokensel::data::Dataset;
use tokensel::train::Trainer;
use tokensel::twin::Arith;
use tokensel::twin::train::TwinTrainer;

fn small(mode: Mode, form: Formulation) -> Config {
    let mut c = Config {
        d: 40,
        n_train: 8,
        n_test: 20,
        mu_norm: 4.0,
        steps: 150,
        step_size: 0.05,
        mode,
        formulation: form,
        ..Config::default()
    };
    if mode == Mode::W {
        c.init.p = PInit::Gaussian;
        c.init.p_scale = 0.5;
        c.init.w = WInit::KaimingUniform;
    }
    c
}

/// SPEC section 7: the 53-bit twin with binary64 range emulated predicts every f64
/// quantity of the trainer bit for bit (both modes, both formulations).
#[test]
fn f64_predictor_is_bit_exact() {
    for (mode, form) in [
        (Mode::P, Formulation::Stable),
        (Mode::P, Formulation::Naive),
        (Mode::W, Formulation::Stable),
        (Mode::W, Formulation::Naive),
    ] {
        let cfg = small(mode, form);
        let data = Dataset::generate(&cfg);
        let mut a = Trainer::new(&cfg, &data);
        let mut b = TwinTrainer::new(&cfg, &data, Arith::f64_predictor(), form);
        for step in 0..=cfg.steps {
            a.forward_backward().unwrap();
            b.forward_backward().unwrap();
            let bits = |v: f64| v.to_bits();
            assert_eq!(
                bits(a.loss),
                bits(b.loss.to_f64()),
                "{mode:?} {form:?} loss at step {step}"
            );
            for (k, (x, y)) in a.grad_q.iter().zip(&b.grad_q).enumerate() {
                assert_eq!(
                    bits(*x),
                    bits(y.to_f64()),
                    "{mode:?} {form:?} grad_q[{k}] at step {step}"
                );
            }
            for (x, y) in a.s.iter().zip(&b.s) {
                assert_eq!(
                    bits(*x),
                    bits(y.to_f64()),
                    "{mode:?} {form:?} s at step {step}"
                );
            }
            if step < cfg.steps {
                a.update().unwrap();
                b.update();
            }
        }
        for (x, y) in a.q.iter().zip(&b.q) {
            assert_eq!(
                x.to_bits(),
                y.to_f64().to_bits(),
                "{mode:?} {form:?} final q"
            );
        }
        let ta = Trainer::run(&cfg, &data, &mut |_| {}).unwrap();
        let tb = TwinTrainer::run(&cfg, &data, Arith::f64_predictor(), form, &mut |_| {}).unwrap();
        assert_eq!(
            ta.digest(),
            tb.digest(),
            "{mode:?} {form:?} trajectory digest"
        );
    }
}

/// Away from saturation the f64 trainer agrees with the 256-bit twin to a few ulps
/// times the step count.
#[test]
fn truth_twin_agrees_with_f64_away_from_saturation() {
    let cfg = small(Mode::P, Formulation::Stable);
    let data = Dataset::generate(&cfg);
    let ta = Trainer::run(&cfg, &data, &mut |_| {}).unwrap();
    let tb = TwinTrainer::run(
        &cfg,
        &data,
        Arith::truth(256).unwrap(),
        Formulation::Stable,
        &mut |_| {},
    )
    .unwrap();
    for (a, b) in ta.checkpoints.iter().zip(&tb.checkpoints) {
        assert_eq!(a.step, b.step);
        let rel = (a.q_norm - b.q_norm).abs() / b.q_norm.max(1e-300);
        assert!(rel < 1e-12, "step {}: q_norm rel err {rel}", a.step);
        assert!((a.train_loss - b.train_loss).abs() < 1e-13);
    }
}
