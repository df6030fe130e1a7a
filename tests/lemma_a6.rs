//! The paper's Lemma A.6 (W <-> p equivalence), SPEC section 4.
//! Derivation: proofs-notes/lemma-a6.md.
//!
//! With q = W^T p: W-mode (p fixed, step alpha) moves q by -alpha ||p||^2 dL/dq, exactly
//! as p-mode with W = I, p(0) = q(0) and step alpha ||p||^2; and
//! W(tau) = W(0) + p (q(tau) - q(0))^T / ||p||^2.

use ndarray::Array2;
use num_rational::BigRational;
use num_traits::Zero;
use tokensel::prelude::analysis::exact::rat_mpfr;
use tokensel::prelude::kernels::norm;
use tokensel::prelude::train::step_rule::StepRule;
use tokensel::prelude::{
    Arith, Config, Dataset, Engine, Mode, Mpfr, PInit, Params, Trainer, WInit,
};

mod common;

/// A fixed p with ||p||^2 = 2 exactly (entries +-1/2 and +-1/4), so that the p-mode step
/// alpha ||p||^2 is exact in f64 and the twin compares the lemma itself, not a rounded
/// step size.
fn exact_p(d: usize) -> ndarray::Array1<f64> {
    assert_eq!(d, 20);
    ndarray::Array1::from_iter((0..d).map(|k| {
        let sign = if (k * 7) % 3 == 0 { -1.0 } else { 1.0 };
        sign * if k < 4 { 0.5 } else { 0.25 }
    }))
}

fn configs(d: usize, steps: u64) -> (Config, Config) {
    let mut w_mode = Config {
        d,
        n_train: 6,
        n_test: 10,
        mu_norm: 4.0,
        step_size: 0.02,
        steps,
        mode: Mode::W,
        ..Config::default()
    };
    w_mode.init.p = PInit::Gaussian;
    w_mode.init.p_scale = 0.7;
    w_mode.init.w = WInit::KaimingUniform;
    let mut p_mode = w_mode.clone();
    p_mode.mode = Mode::P;
    p_mode.init.w = WInit::Identity;
    p_mode.init.p = PInit::Zero;
    p_mode.step_size = w_mode.step_size * 2.0; // alpha ||p||^2, exact
    (w_mode, p_mode)
}

/// Lemma A.6 on a whole trajectory, in f64 and in the 256-bit twin. f64 agreement is
/// limited by rounding: each step computes q = W^T p (d-term sums) in W-mode, so the two
/// q's drift apart by ~ steps * d * u relative at most (we allow 4x that, u = 2^-53); in
/// the twin the same bound holds with u = 2^-256, asserted as a normwise relative error
/// computed in MPFR; and W(tau) matches the mapping.
#[test]
fn w_mode_and_p_mode_agree_on_whole_trajectories() {
    let (wc, pc) = configs(20, 200);
    let data = Dataset::generate(&wc);
    let w_params = Params {
        p: exact_p(wc.d),
        w: Params::init(&wc).w,
    };
    assert_eq!(w_params.p.dot(&w_params.p), 2.0);
    let mut w_run = common::f64_from(&wc, &data, &w_params);
    let q0 = w_run.q();
    let q0_params = Params {
        p: q0.clone().into(),
        w: None,
    };
    let mut p_run = common::f64_from(&pc, &data, &q0_params);
    let prec = 256;
    let ar = Mpfr::truth(prec).unwrap();
    let method = tokensel::prelude::Method::Direct;
    let mut w_twin =
        Trainer::from_params(&wc, &data, ar, wc.formulation, method, &w_params).unwrap();
    let mut p_twin =
        Trainer::from_params(&pc, &data, ar, pc.formulation, method, &q0_params).unwrap();
    // p(0) = the twin's own q(0) = W(0)^T p, exact at 256 bits (W = I in p-mode: q = p)
    if let Engine::Direct(e) = &mut p_twin.engine {
        *e.p_mut() = w_twin.q();
        e.compute_q(&ar);
    }
    let tol64 = 4.0 * (wc.steps as f64) * (wc.d as f64) * f64::EPSILON / 2.0;
    let mut moved = 0.0f64;
    for step in 0..wc.steps {
        for t in [&mut w_run, &mut p_run] {
            t.forward_backward().unwrap();
            t.update().unwrap();
        }
        for t in [&mut w_twin, &mut p_twin] {
            t.forward_backward().unwrap();
            t.update().unwrap();
        }
        let (wq, pq) = (w_run.q(), p_run.q());
        let diff: Vec<f64> = wq.iter().zip(&pq).map(|(a, b)| a - b).collect();
        let rel = norm(&diff) / norm(&wq);
        assert!(
            rel <= tol64,
            "f64 step {step}: |q_W - q_p| / |q| = {rel:e} > {tol64:e}"
        );
        let (wt, pt) = (w_twin.q(), p_twin.q());
        let mut num = rug::Float::new(prec);
        let mut den = rug::Float::new(prec);
        for (a, b) in wt.iter().zip(&pt) {
            num += rug::Float::with_val(prec, a - b).square();
            den += rug::Float::with_val(prec, a.square_ref());
        }
        let rel_twin = (num / den).sqrt();
        let tol_twin = rug::Float::with_val(prec, 4.0 * (wc.steps as f64) * (wc.d as f64) * 0.5)
            * rug::Float::with_val(prec, rug::Float::i_exp(1, -(prec as i32)));
        assert!(rel_twin <= tol_twin, "twin step {step}");
        let dq: Vec<f64> = wq.iter().zip(&q0).map(|(a, b)| a - b).collect();
        moved = norm(&dq);
    }
    assert!(moved > 0.1, "q moved by {moved}: the check is not vacuous");
    // the mapping W(tau) = W(0) + p (q(tau) - q(0))^T / ||p||^2, in f64
    let (p, w) = w_run.params();
    let p = ndarray::Array1::from(p);
    let p2 = p.dot(&p);
    let w0 = Params::init(&wc).w.unwrap();
    let dq = ndarray::Array1::from_iter(w_run.q().iter().zip(&q0).map(|(a, b)| a - b));
    let mapped: Array2<f64> = &w0
        + &(p
            .view()
            .insert_axis(ndarray::Axis(1))
            .dot(&dq.view().insert_axis(ndarray::Axis(0)))
            / p2);
    let w = Array2::from_shape_vec((wc.d, wc.d), w.unwrap()).unwrap();
    let err = (&mapped - &w).iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(err <= tol64 * scale, "W mapping error {err:e}");
}

/// Lemma A.6 for one step, exactly, through the trainer's own update code
/// (`train::direct`): the gradient g = dL/dq of the W-run is computed by the trainer at
/// 1000 bits and handed to both engines; the W-mode engine (p fixed, step alpha) and the
/// p-mode engine (W = I, p(0) = q(0), step alpha ||p||^2 = 2 alpha) then update at 3000
/// bits, where every product and sum of one update fits: MPFR's inexact flag, cleared
/// before and read after both updates, proves that no operation rounded. So the two q(1)
/// are equal as real numbers, and W(1) = W(0) + p (q(1) - q(0))^T / ||p||^2 holds in
/// exact rationals on the trainer's values.
#[test]
fn one_step_is_exact_through_the_trainers_update() {
    use gmp_mpfr_sys::mpfr;
    let (wc, pc) = configs(20, 1);
    let data = Dataset::generate(&wc);
    let w_params = Params {
        p: exact_p(wc.d),
        w: Params::init(&wc).w,
    };
    let method = tokensel::prelude::Method::Direct;
    let g = {
        let ar = Mpfr::truth(1000).unwrap();
        let mut tr =
            Trainer::from_params(&wc, &data, ar, wc.formulation, method, &w_params).unwrap();
        tr.forward_backward().unwrap();
        tr.grad_q()
    };
    let ar = Mpfr::truth(3000).unwrap();
    let mut w_run =
        Trainer::from_params(&wc, &data, ar, wc.formulation, method, &w_params).unwrap();
    let q0_params = Params {
        p: ndarray::Array1::zeros(wc.d),
        w: None,
    };
    let mut p_run =
        Trainer::from_params(&pc, &data, ar, pc.formulation, method, &q0_params).unwrap();
    let (Engine::Direct(we), Engine::Direct(pe)) = (&mut w_run.engine, &mut p_run.engine) else {
        unreachable!("direct method")
    };
    // p(0) of the p-run = q(0) of the W-run, exactly
    *pe.p_mut() = we.q.clone();
    pe.compute_q(&ar);
    let (q0, w0, p) = (we.q.clone(), we.w().unwrap().to_vec(), we.p().to_vec());
    for v in we
        .grad_q
        .iter_mut()
        .chain(pe.grad_q.iter_mut())
        .zip(g.iter().cycle())
    {
        ar.set(v.0, v.1);
    }
    // SAFETY: plain calls to MPFR's (thread-local) flag functions.
    unsafe { mpfr::clear_inexflag() };
    we.update(&ar, &StepRule::constant(wc.step_size)).unwrap();
    pe.update(&ar, &StepRule::constant(pc.step_size)).unwrap();
    let inexact = unsafe { mpfr::inexflag_p() } != 0;
    assert!(
        !inexact,
        "an operation of the updates rounded: raise the precision"
    );
    let rats = |v: &[rug::Float]| v.iter().map(rat_mpfr).collect::<Vec<BigRational>>();
    let (q_w, q_p) = (rats(&we.q), rats(&pe.q));
    assert_eq!(q_w, q_p, "q after the W-step = q after the p-step");
    let q0 = rats(&q0);
    assert!(q_w != q0, "the step moved q");
    let (p, w0, w1) = (rats(&p), rats(&w0), rats(we.w().unwrap()));
    let p2 = p.iter().fold(BigRational::zero(), |a, v| a + v * v);
    let d = wc.d;
    for m in 0..d {
        for k in 0..d {
            let mapped = &w0[m * d + k] + &p[m] * (&q_p[k] - &q0[k]) / &p2;
            assert_eq!(mapped, w1[m * d + k], "W[{m},{k}]");
        }
    }
}
