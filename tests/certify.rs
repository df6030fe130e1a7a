//! Certified runs (SPEC section 11, proofs-notes/certify.md): the test set's two paths
//! (d-space scores and the span step's cross Gram rows) give enclosures of the same
//! exact outputs; the certificate encloses the MPFR twin at every checkpoint; the step-0
//! tie is proved; `tokensel certify`'s exit codes.

mod common;

use tokensel::arith::{Arith, Ball, Kind, Mpfr};
use tokensel::config::{Config, Method, Mode};
use tokensel::data::Dataset;
use tokensel::train::plan::test_path;
use tokensel::train::{TestPath, Trainer};

/// A small span run in p-mode (W(0) = I, p(0) = 0) or W-mode (p(0) Gaussian, W(0)
/// Kaiming), 30 test samples.
fn small(mode: Mode) -> Config {
    let mut cfg = common::small_config(5, 40, [1, 1, 1, 2], 6, 4.0, 0.3, 0.3, 60, 0, false, false);
    if mode == Mode::W {
        cfg = common::with_init(cfg, Mode::W, 0.5, true);
    }
    cfg.n_test = 30;
    cfg.method = Method::Span;
    cfg.validate().unwrap();
    cfg
}

/// The test outputs of `tr` by each path (the cross Gram rows, then d-space).
fn both_paths<A: Arith>(tr: &mut Trainer<'_, A>) -> (Vec<A::Real>, Vec<A::Real>) {
    tr.test_path = TestPath::CrossGram;
    let cross = tr.test_outputs(None);
    tr.test_path = TestPath::Tokens;
    let tokens = tr.test_outputs(None);
    (cross, tokens)
}

/// In p-mode (W(0) = I) and W-mode, the test outputs through the cross Gram rows
/// (`z_test = C a`) and through the d-space scores (`X_test q`) are both enclosures of
/// the exact outputs: at steps 0, 7 and 60 each 128-bit ball contains the 1024-bit
/// twin's value by either path, and the twin's two paths agree to its own precision
/// (relative 2^-1000: sums of ~2000 terms of size ~1 each rounded at 2^-1024).
#[test]
fn test_set_paths_enclose_the_same_outputs() {
    for mode in [Mode::P, Mode::W] {
        let cfg = small(mode);
        let data = Dataset::generate(&cfg);
        let ball = Ball::new(128).unwrap();
        let mut b = Trainer::new(&cfg, &data, ball, cfg.formulation).unwrap();
        let mut t = Trainer::new(&cfg, &data, Mpfr::truth(1024).unwrap(), cfg.formulation).unwrap();
        for step in 0..=cfg.steps {
            b.forward_backward().unwrap();
            t.forward_backward().unwrap();
            if [0, 7, 60].contains(&step) {
                let (bc, bt) = both_paths(&mut b);
                let (tc, tt) = both_paths(&mut t);
                for k in 0..bc.len() {
                    let what = format!("{mode:?} step {step} test sample {k}");
                    assert!(bc[k].contains(&tc[k]), "{what}: cross Gram ball");
                    assert!(bt[k].contains(&tc[k]), "{what}: d-space ball");
                    let diff = rug::Float::with_val(1024, &tc[k] - &tt[k]).abs();
                    assert!(
                        diff.to_f64() <= 2f64.powi(-1000),
                        "{what}: twin's two paths"
                    );
                }
                assert!(bc.iter().any(|v| !v.rad().is_zero()) || step == 0);
            }
            if step < cfg.steps {
                b.update().unwrap();
                t.update().unwrap();
            }
        }
    }
}

/// Which path each arithmetic takes on the default run: the ball and the MPFR twin the
/// cross Gram (span), the f64 trainer and the predictor the d-space scores (their bits,
/// and the committed digest, unchanged); a run without steps, the direct step, or a
/// dense W(0) in p-mode the d-space scores.
#[test]
fn the_test_path_follows_the_cost_model() {
    let cfg = Config::default();
    assert_eq!(
        test_path(&cfg, Kind::Ball, Method::Span),
        TestPath::CrossGram
    );
    assert_eq!(
        test_path(&cfg, Kind::Mpfr, Method::Span),
        TestPath::CrossGram
    );
    for kind in [Kind::F64, Kind::F32, Kind::Predictor] {
        assert_eq!(test_path(&cfg, kind, Method::Span), TestPath::Tokens);
    }
    assert_eq!(
        test_path(&cfg, Kind::Ball, Method::Direct),
        TestPath::Tokens
    );
    let one = Config {
        steps: 0,
        ..cfg.clone()
    };
    assert_eq!(test_path(&one, Kind::Ball, Method::Span), TestPath::Tokens);
    let dense = common::with_init(cfg.clone(), Mode::P, 0.5, true);
    assert_eq!(
        test_path(&dense, Kind::Ball, Method::Span),
        TestPath::Tokens
    );
    let official = tokensel::config::Preset::OfficialFinal.config();
    assert_eq!(
        test_path(&official, Kind::Ball, Method::Span),
        TestPath::Tokens
    );
    let w = common::with_init(cfg, Mode::W, 0.5, true);
    assert_eq!(test_path(&w, Kind::Ball, Method::Span), TestPath::CrossGram);
}
