//! SPEC section 7: the 53-bit MPFR arithmetic with binary64's range emulated (the f64
//! predictor) runs the one generic trainer and predicts the f64 trainer bit for bit, on
//! random small configs (p-, W- and joint mode, both formulations, direct and span
//! steps, step sizes large enough to drive exp into the subnormal range and to
//! underflow), on the K-class model (SPEC section 14), and on the paper's default
//! setting; under constant-step and normalised gradient descent (`[optimizer]`).

use proptest::prelude::*;

mod common;
use tokensel::prelude::analysis::compare::predictor_mismatch;
use tokensel::prelude::{
    Config, Dataset, F64, Formulation, Method, Mode, ModelKind, ModelSpec, Mpfr, Optimizer,
    OptimizerKind, PInit, Trainer, WInit,
};

/// The f64 trainer and the predictor on `cfg`, in lockstep: equal bits after every
/// forward pass, the K outputs of a K-class model included (both stop on the same
/// non-finite value, or neither does).
fn lockstep(cfg: &Config, data: &Dataset) -> Result<(), TestCaseError> {
    let mut a = Trainer::new(cfg, data, F64, cfg.formulation).unwrap();
    let mut p = Trainer::new(cfg, data, Mpfr::predictor(), cfg.formulation).unwrap();
    for step in 0..=cfg.steps {
        let (ra, rp) = (a.forward_backward(), p.forward_backward());
        prop_assert_eq!(ra.is_err(), rp.is_err(), "step {}", step);
        if ra.is_err() {
            break;
        }
        prop_assert_eq!(predictor_mismatch(&a, &p), None, "step {}", step);
        for (i, (x, y)) in a.samples.iter().zip(&p.samples).enumerate() {
            prop_assert_eq!(x.outputs.len(), y.outputs.len());
            for (c, (u, v)) in x.outputs.iter().zip(&y.outputs).enumerate() {
                prop_assert_eq!(
                    u.to_bits(),
                    v.to_f64().to_bits(),
                    "step {}, sample {}, output {}",
                    step,
                    i,
                    c
                );
            }
        }
        if step < cfg.steps {
            let (ua, up) = (a.update(), p.update());
            prop_assert_eq!(ua.is_err(), up.is_err(), "update {}", step);
            if ua.is_err() {
                break;
            }
        }
    }
    Ok(())
}

prop_compose! {
    fn configs()(
        seed in 0u64..1000,
        d in 2usize..24,
        sizes in proptest::array::uniform4(0usize..3),
        n_train in 1usize..6,
        mu_norm in 0.5f64..30.0,
        rho in 0.0f64..1.0,
        sigma in 0.0f64..2.0,
        eta in 0.0f64..0.9,
        log_alpha in -4.0f64..3.0,
        steps in 1u64..25,
        mode in 0u8..3,
        naive in any::<bool>(),
        span in any::<bool>(),
        rule in 0u8..3,
    ) -> Config {
        let mut sizes = sizes;
        if sizes.iter().sum::<usize>() == 0 {
            sizes[0] = 1;
        }
        let mut c = Config {
            seed,
            d,
            n_train,
            n_test: 3,
            mu_norm,
            rho,
            sigma,
            eta,
            step_size: 10f64.powf(log_alpha),
            steps,
            mode: [Mode::P, Mode::W, Mode::Joint][mode as usize],
            formulation: if naive && !span { Formulation::Naive } else { Formulation::Stable },
            method: if span { Method::Span } else { Method::Direct },
            layout: common::layout(sizes),
            ..Config::default()
        };
        // constant-step GD, normalised GD (eps = 0), normalised GD with the public
        // code's eps = 1e-9
        if rule > 0 {
            c.optimizer = Optimizer {
                kind: OptimizerKind::NormalizedGd,
                eps: if rule == 2 { 1e-9 } else { 0.0 },
                ..Optimizer::default()
            };
        }
        if mode > 0 {
            c.init.p = PInit::Gaussian;
            c.init.p_scale = 1.0;
            c.init.w = WInit::KaimingUniform;
        }
        c
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn predictor_matches_f64_bit_for_bit(cfg in configs()) {
        cfg.validate().unwrap();
        let data = Dataset::generate(&cfg);
        lockstep(&cfg, &data)?;
    }
}

/// The K-class model (K = 2, 3, 4, 10; one weakly relevant token per other class), in
/// the direct and the span step, in p-, W- and joint mode, at step sizes from gentle to ones that saturate the
/// attention and the class softmax: the predictor matches the f64 trainer bit for bit,
/// outputs included (the K-class step's per-token fma chains run as one axpy per token
/// or class, a vector kernel in f64, so this checks that the vector path keeps the
/// scalar bits).
#[test]
fn predictor_matches_the_k_class_model() {
    for (k, seed) in [(2usize, 1u64), (3, 2), (4, 3), (10, 4)] {
        // the last: normalised GD
        for (alpha, ngd) in [(1e-2, false), (1.0, false), (30.0, false), (0.5, true)] {
            for (method, mode) in [Method::Direct, Method::Span]
                .into_iter()
                .flat_map(|m| [Mode::P, Mode::W, Mode::Joint].map(|w| (m, w)))
            {
                let cfg = Config {
                    seed,
                    d: 24,
                    n_train: 5,
                    n_test: 3,
                    step_size: alpha,
                    steps: 12,
                    method,
                    layout: common::layout([1, 1, k - 1, 2]),
                    model: ModelSpec {
                        kind: ModelKind::Multiclass,
                        classes: k,
                        ..ModelSpec::default()
                    },
                    optimizer: Optimizer {
                        kind: match ngd {
                            true => OptimizerKind::NormalizedGd,
                            false => OptimizerKind::Gd,
                        },
                        eps: 0.0,
                        ..Optimizer::default()
                    },
                    ..Config::default()
                };
                // W- and joint mode from a Gaussian p(0) and a Kaiming W(0)
                let cfg = match mode {
                    Mode::P => cfg,
                    _ => common::with_init(cfg, mode, 0.5, true),
                };
                cfg.validate().unwrap();
                let data = Dataset::generate(&cfg);
                let a = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
                assert_eq!(a.samples[0].outputs.len(), k, "a K-class trainer");
                if let Err(e) = lockstep(&cfg, &data) {
                    panic!("K = {k}, alpha {alpha}, ngd {ngd}, {method:?}, {mode:?}: {e}");
                }
            }
        }
    }
}

/// Runs whose attention reaches f64's subnormal range and underflows (gaps ~700-900):
/// the predictor still matches bit for bit, so the range emulation is exercised.
#[test]
fn predictor_matches_through_subnormal_attention() {
    let (mut subnormal, mut zero) = (false, false);
    for alpha in (140..=220).step_by(4) {
        let cfg = Config {
            d: 12,
            n_train: 3,
            n_test: 2,
            step_size: alpha as f64,
            steps: 4,
            ..Config::default()
        };
        let data = Dataset::generate(&cfg);
        let mut a = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
        let mut p = Trainer::new(&cfg, &data, Mpfr::predictor(), cfg.formulation).unwrap();
        for step in 0..=cfg.steps {
            a.forward_backward().unwrap();
            p.forward_backward().unwrap();
            assert_eq!(
                predictor_mismatch(&a, &p),
                None,
                "alpha {alpha}, step {step}"
            );
            subnormal |= a.attention.iter().any(|v| v.is_subnormal());
            zero |= a.attention.contains(&0.0);
            if step < cfg.steps {
                a.update().unwrap();
                p.update().unwrap();
            }
        }
    }
    assert!(
        subnormal && zero,
        "reached subnormal ({subnormal}) and zero ({zero}) attention"
    );
}

/// The paper's default setting (d = 2000, n = 20, 1000 test samples): the predictor's
/// whole trajectory over the first 15 steps (every checkpoint, test accuracy included)
/// has the f64 trainer's digest, and every step's quantities are equal bit for bit over
/// the first 200 steps, in the direct and in the span step. (All 30,000 direct steps
/// would take ~10 min of MPFR time; `compare --predictor` does that.)
#[test]
fn predictor_reproduces_the_default_run() {
    for method in [Method::Direct, Method::Span] {
        let cfg = Config {
            steps: 15,
            method,
            ..Config::default()
        };
        let data = Dataset::generate(&cfg);
        let a = Trainer::run(&cfg, &data, F64, &mut |_| {}).unwrap();
        let p = Trainer::run(&cfg, &data, Mpfr::predictor(), &mut |_| {}).unwrap();
        assert_eq!(a.checkpoints, p.checkpoints, "{method:?}");
        assert_eq!(a.digest(), p.digest(), "{method:?}");
        let cfg = Config { steps: 200, ..cfg };
        lockstep(&cfg, &data).unwrap();
    }
}
