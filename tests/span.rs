//! The span step (SPEC section 9, proofs-notes/span.md) against the direct step: in
//! exact arithmetic they are the same trajectory, so in every arithmetic they differ by
//! rounding only.
//!
//! The bound (proofs-notes/span.md, "How close in floating point"): at step tau each
//! score is a sum computed by fixed-order kernels. The direct score x.q has the
//! dot-product error gamma_{m_d} sum_k |x_k q_k| <= gamma_{m_d} |x| |q|, with
//! m_d = ceil(d/16) + 4; the span score G a the same with m_r = ceil((r+1)/16) + 4 (joint
//! mode: three such products); and q (or a) carries the rounding of every earlier
//! update. While the trajectory is stable over the horizon (small alpha L, checked here
//! by the two runs staying close), these errors add at most linearly in tau, so
//!
//!   |z_direct - z_span| <= B_tau = 4 (tau + 1) (m_d + 3 m_r) u max_r |x_r| |q|,
//!
//! with u the unit roundoff and a factor 4 for the products and sums outside the
//! kernels. Attention then differs by at most (2 max|dz| + 2 (|z_t - z_top| + T + 4) u)
//! s_t: softmax's log-sensitivity to the scores is at most 2, and each evaluation rounds
//! z_t - z_top (an error of |z_t - z_top| u in the exponent), exp, the sum and the
//! division (T + 4 roundings; proofs-notes/error-bounds.md, "exp enclosure").

use proptest::prelude::*;

mod common;
use tokensel::prelude::{Arith, Config, Dataset, F64, Method, Mode, Mpfr, Trainer};

/// max over training rows of |x_r| |q| (the scale of every score's rounding bound).
fn score_scale(data: &Dataset, q: &[f64]) -> f64 {
    let d = q.len();
    let x = data.train.x.as_slice().unwrap();
    let qn = tokensel::prelude::kernels::norm(q);
    x.chunks(d)
        .map(|r| tokensel::prelude::kernels::norm(r) * qn)
        .fold(0.0, f64::max)
}

/// Run direct and span in lockstep in `ar` for `cfg.steps` steps and return the largest
/// ratio of the score difference to B_tau (u = 2^-prec), asserting the attention bound.
fn lockstep<A: Arith>(cfg: &Config, data: &Dataset, ar: A) -> f64 {
    let u = 2f64.powi(-(ar.prec() as i32));
    let mut a = Trainer::with_method(cfg, data, ar, cfg.formulation, Method::Direct).unwrap();
    let mut b = Trainer::with_method(cfg, data, ar, cfg.formulation, Method::Span).unwrap();
    let (t, d) = (cfg.layout.tokens, cfg.d);
    let r = cfg.n_train * t;
    let (m_d, m_r) = (d.div_ceil(16) + 4, (r + 1).div_ceil(16) + 4);
    let mut worst = 0.0f64;
    for step in 0..=cfg.steps {
        a.forward_backward().unwrap();
        b.forward_backward().unwrap();
        let q: Vec<f64> = a.q().iter().map(|v| ar.to_f64(v)).collect();
        let bound = 4.0
            * (step + 1) as f64
            * (m_d + 3 * m_r) as f64
            * u
            * score_scale(data, &q).max(f64::MIN_POSITIVE);
        let mut dz = 0.0f64;
        for (za, zb) in a.scores.iter().zip(&b.scores) {
            let mut diff = za.clone();
            ar.sub(&mut diff, zb);
            dz = dz.max(ar.to_f64(&diff).abs());
        }
        worst = worst.max(dz / bound);
        assert!(
            dz <= bound,
            "{:?} step {step}: |dz| = {dz:e} > B = {bound:e}",
            cfg.mode
        );
        for (i, (sa, sb)) in a.attention.iter().zip(&b.attention).enumerate() {
            let row = &a.scores[i / t * t..(i / t + 1) * t];
            let top = row
                .iter()
                .map(|v| ar.to_f64(v))
                .fold(f64::NEG_INFINITY, f64::max);
            let spread = (top - ar.to_f64(&a.scores[i])).abs();
            let ds = 2.0 * dz + 2.0 * (spread + (t + 4) as f64) * u;
            let (sa, sb) = (ar.to_f64(sa), ar.to_f64(sb));
            assert!(
                (sa - sb).abs() <= ds * sa.max(sb) * 1.01 + f64::MIN_POSITIVE,
                "{:?} step {step}: s {sa:e} vs {sb:e}",
                cfg.mode
            );
        }
        if step < cfg.steps {
            a.update().unwrap();
            b.update().unwrap();
        }
    }
    worst
}

prop_compose! {
    fn configs()(
        seed in 0u64..1000,
        d in 2usize..30,
        sizes in proptest::array::uniform4(0usize..3),
        n_train in 1usize..6,
        mu_norm in 0.5f64..8.0,
        eta in 0.0f64..0.5,
        alpha in 0.001f64..0.1,
        steps in 1u64..30,
        mode in 0u8..3,
        kaiming in any::<bool>(),
        p0 in any::<bool>(),
    ) -> Config {
        common::small_config(
            seed, d, sizes, n_train, mu_norm, eta, alpha, steps, mode, kaiming, p0,
        )
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// f64: span and direct stay within B_tau in p-, W- and joint mode, with p(0) zero or
    /// not and W(0) the identity or dense.
    #[test]
    fn span_matches_direct_in_f64(cfg in configs()) {
        cfg.validate().unwrap();
        let data = Dataset::generate(&cfg);
        lockstep(&cfg, &data, F64);
    }
}

/// The default setting's first 1,000 steps in f64 (p-mode, W = I): within B_tau; the
/// observed ratio to the bound is printed.
#[test]
fn span_matches_direct_on_the_default_first_1000_steps() {
    let cfg = Config {
        steps: 1000,
        n_test: 10,
        ..Config::default()
    };
    let data = Dataset::generate(&cfg);
    let worst = lockstep(&cfg, &data, F64);
    eprintln!("largest |dz| / B_tau over 1000 steps: {worst:.3e}");
}

/// MPFR at 256 bits, all three modes, 20 steps: the span twin agrees with the direct twin
/// within B_tau at u = 2^-256 (for these sizes B_tau < 2^-(256-20) max|x||q|).
#[test]
fn mpfr_span_twin_matches_mpfr_direct_twin() {
    for mode in [Mode::P, Mode::W, Mode::Joint] {
        let base = Config {
            d: 24,
            n_train: 4,
            n_test: 3,
            mu_norm: 3.0,
            step_size: 0.05,
            steps: 20,
            ..Config::default()
        };
        let cfg = common::with_init(base, mode, 0.5, false);
        let data = Dataset::generate(&cfg);
        let worst = lockstep(&cfg, &data, Mpfr::truth(256).unwrap());
        eprintln!("{mode:?}: largest |dz| / B_tau {worst:.3e}");
    }
}

/// The span step rebuilds p and W: after 30 joint steps they equal the direct step's to
/// f64 rounding (relative 1e-12: 30 steps of B_tau-sized errors, d = 12).
#[test]
fn span_rebuilds_p_and_w() {
    for mode in [Mode::P, Mode::W, Mode::Joint] {
        let base = Config {
            d: 12,
            n_train: 3,
            n_test: 3,
            step_size: 0.05,
            steps: 30,
            ..Config::default()
        };
        let cfg = common::with_init(base, mode, 0.5, false);
        let data = Dataset::generate(&cfg);
        let mut a =
            Trainer::with_method(&cfg, &data, F64, cfg.formulation, Method::Direct).unwrap();
        let mut b = Trainer::with_method(&cfg, &data, F64, cfg.formulation, Method::Span).unwrap();
        for _ in 0..cfg.steps {
            for t in [&mut a, &mut b] {
                t.forward_backward().unwrap();
                t.update().unwrap();
            }
        }
        let ((pa, wa), (pb, wb)) = (a.params(), b.params());
        let close = |x: &[f64], y: &[f64], what: &str| {
            let scale = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for (u, v) in x.iter().zip(y) {
                assert!(
                    (u - v).abs() <= 1e-12 * scale,
                    "{mode:?} {what}: {u} vs {v}"
                );
            }
        };
        close(&pa, &pb, "p");
        match (wa, wb) {
            (Some(wa), Some(wb)) => close(&wa, &wb, "W"),
            (None, None) => {}
            _ => panic!("{mode:?}: W stored in one method only"),
        }
        close(&a.q(), &b.q(), "q");
    }
}
