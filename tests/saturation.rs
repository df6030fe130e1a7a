//! Softmax saturation: the gap sweep thresholds and the step-by-step detector.
//! Derivations: proofs-notes/saturation.md.

use tokensel::prelude::analysis::compare::Options;
use tokensel::prelude::analysis::{compare, saturation};
use tokensel::prelude::{Config, Dataset, Formulation, Method, PInit, Quantity};

fn small() -> Config {
    Config {
        d: 100,
        n_train: 8,
        n_test: 50,
        mu_norm: 5.0,
        ..Config::default()
    }
}

/// SPEC section 6: judged by the 256-bit twin, the naive 1 - s_top and backprop gradient
/// lose every digit near gap 53 ln 2 ~ 36.7 (plus the log of how many tokens share the
/// gap), while the stable forms stay within 1e-10 until exp enters f64's subnormal
/// range (gap ~708) and fail only when it underflows (~745).
#[test]
fn gap_sweep_locates_the_breaking_points() {
    let cfg = small();
    let data = Dataset::generate(&cfg);
    let grid = saturation::default_grid(40);
    let r = saturation::sweep(&data.train, 0, 256, 1e-8, &grid).unwrap();
    let t = |k: &str| r.thresholds[k];
    let lost = |k: &str| t(k).all_digits_lost.unwrap_or(f64::INFINITY);
    let over = |k: &str| t(k).over_tol.unwrap_or(f64::INFINITY);
    assert!(
        (35.0..=40.0).contains(&lost("naive.rest")),
        "naive rest lost at {}",
        lost("naive.rest")
    );
    assert!(
        (30.0..=40.0).contains(&lost("naive.grad_q")),
        "naive grad_q lost at {}",
        lost("naive.grad_q")
    );
    assert!(over("naive.rest") < 25.0 && over("naive.grad_q") < 25.0);
    for k in ["stable.rest", "stable.grad_q"] {
        assert!(over(k) > 700.0, "{k} over tolerance at {}", over(k));
        assert!(
            (708.0..=746.0).contains(&lost(k)),
            "{k} lost at {}",
            lost(k)
        );
    }
    assert!(
        t("stable.output").over_tol.is_none(),
        "f stays accurate: it never depends on 1 - s alone"
    );
    for row in r.rows.iter().filter(|r| r.gap < 700.0) {
        let s = row.stable;
        assert!(
            s.rest <= 1e-10 && s.grad_q <= 1e-10 && s.output <= 1e-10,
            "stable at gap {}: {s:?}",
            row.gap
        );
    }
    // past the naive breaking point the gradient no longer points the right way
    let broken = r
        .rows
        .iter()
        .find(|r| r.gap > 40.0 && r.gap < 700.0)
        .unwrap();
    // (an exactly zero gradient has no direction at all: reported as None)
    assert!(
        !matches!(broken.naive.grad_cosine, Some(c) if c >= 0.5),
        "cosine {:?}",
        broken.naive.grad_cosine
    );
}

fn saturating(form: Formulation) -> Config {
    // alpha = 50 makes the first step jump to score gaps ~40: past the naive breaking point
    Config {
        step_size: 50.0,
        steps: 60,
        formulation: form,
        ..small()
    }
}

/// The detector, on whole runs: the naive formulation is caught at the first step whose
/// score gap passes ~37; on the same run the stable formulation stays within 1e-8, and
/// the 53-bit predictor reproduces both f64 runs bit for bit.
#[test]
fn compare_detects_naive_saturation_and_clears_the_stable_form() {
    let opts = Options {
        prec: 256,
        tol: 1e-8,
        predictor: true,
        predictor_steps: None,
        twin_method: Method::Span,
        certify: None,
    };
    let naive = saturating(Formulation::Naive);
    let data = Dataset::generate(&naive);
    let r = compare::compare(&naive, &data, opts, &mut |_| {}).unwrap();
    assert!(r.saturation.detected);
    let gap = r.saturation.score_gap.unwrap();
    assert!((20.0..=60.0).contains(&gap), "gap at detection {gap}");
    assert_eq!(r.saturation.quantity, Some(Quantity::Rest));
    assert_eq!(
        r.max_rel_err[&Quantity::Rest],
        1.0,
        "1 - s_top rounded to 0"
    );
    assert!(r.predictor.as_ref().unwrap().bits_equal);

    let stable = saturating(Formulation::Stable);
    let r = compare::compare(&stable, &data, opts, &mut |_| {}).unwrap();
    assert!(!r.saturation.detected, "{:?}", r.max_rel_err);
    assert!(
        r.max_rel_err.values().all(|e| *e <= 1e-10),
        "{:?}",
        r.max_rel_err
    );
    assert!(r.predictor.as_ref().unwrap().bits_equal);
    assert!(r.absorption.first_partial_step.is_none());
}

/// Update absorption: with |alpha g| far below ulp(q) the f64 q never moves, while the
/// twin's does; the detector says so from the first step.
#[test]
fn compare_detects_update_absorption() {
    let mut cfg = Config {
        step_size: 1e-22,
        steps: 5,
        ..small()
    };
    cfg.init.p = PInit::Gaussian;
    cfg.init.p_scale = 1.0;
    let data = Dataset::generate(&cfg);
    let opts = Options {
        prec: 128,
        tol: 1e-8,
        predictor: false,
        predictor_steps: None,
        twin_method: Method::Direct,
        certify: None,
    };
    let r = compare::compare(&cfg, &data, opts, &mut |_| {}).unwrap();
    assert_eq!(r.absorption.first_total_step, Some(0));
    assert_eq!(r.absorption.max_fraction, 1.0);
    // the twin moved by ~1e-22 relative: far below the tolerance, so no saturation verdict
    assert!(!r.saturation.detected);
}

/// proofs-notes/saturation.md quotes the thresholds that `tokensel saturation` prints on
/// the default data (sample 0, 60 grid points, 256-bit judge), to two decimals; and the
/// sweep reports an exactly-zero f64 gradient (no direction: `grad_cosine` None, from
/// gap ~50 on this data) differently from a merely wrong one.
#[test]
fn proofs_notes_quote_what_the_sweep_measures() {
    let cfg = Config {
        n_test: 1,
        ..Config::default()
    };
    let data = Dataset::generate(&cfg);
    let grid = saturation::default_grid(60);
    let r = saturation::sweep(&data.train, 0, 256, 1e-8, &grid).unwrap();
    let note = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("proofs-notes/saturation.md"),
    )
    .unwrap();
    let t = |k: &str| r.thresholds[k];
    for (k, v) in [
        ("naive.rest over", t("naive.rest").over_tol),
        ("naive.rest lost", t("naive.rest").all_digits_lost),
        ("naive.grad_q over", t("naive.grad_q").over_tol),
        ("naive.grad_q lost", t("naive.grad_q").all_digits_lost),
        ("stable.rest over", t("stable.rest").over_tol),
        ("stable.rest lost", t("stable.rest").all_digits_lost),
        ("stable.grad_q over", t("stable.grad_q").over_tol),
        ("stable.grad_q lost", t("stable.grad_q").all_digits_lost),
    ] {
        let shown = format!("{:.2}", v.unwrap());
        assert!(
            note.contains(&shown),
            "{k}: the note does not quote {shown}"
        );
    }
    assert!(
        r.rows
            .iter()
            .any(|row| row.gap > 45.0 && row.naive.grad_cosine.is_none()),
        "an exactly zero naive gradient is reported as such"
    );
    assert!(
        r.rows
            .iter()
            .all(|row| row.gap > 40.0 || row.naive.grad_cosine.is_some())
    );
}
