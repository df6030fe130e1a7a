//! Factorised query-key attention (`[factorised]`, SPEC section 17,
//! proofs-notes/factorised.md): the query map in every arithmetic (the predictor bit for
//! bit, balls enclosing the 512-bit twin), every block's gradient against Richardson
//! differences of the twin's loss, b_K's gradient at rounding level, the balance
//! identity of GD on (W_K, W_Q), rank one from a zero query and W-mode's selection.
//!
//! The shared conformance helper (`common::conformance::conform`) runs on four configs
//! (the `conforms_*` tests): it took over the threads and resume checks (the
//! `one_and_two_threads_are_byte_identical` and `resume_is_bit_identical` tests that
//! were here: the helper asserts the map's m d kernels above both thresholds and
//! compares every final block). The predictor test, the per-step ball test and the
//! every-entry Richardson test stay: they check every step, every gradient entry and
//! configs (biases with the Gaussian init, normalised GD with biases, Adam) the four
//! calls do not.

use rug::Float;
use tokensel::prelude::models::factorised::{Factorised, QkInit};
use tokensel::prelude::{
    Arith, Ball, Config, Dataset, Engine, F64, Method, Mode, Model, Mpfr, OptimizerKind, Params,
    Trainer, WInit,
};

mod common;

/// A small factorised config: n samples of T = 8 tokens in dimension d, m rows, p(0)
/// Gaussian (scale 0.5), `steps` steps of size `alpha`.
fn config(d: usize, n: usize, m: usize, bias: bool, train_p: bool, init: QkInit) -> Config {
    let mode = if train_p { Mode::Joint } else { Mode::W };
    let mut c = Config {
        d,
        n_train: n,
        n_test: 6,
        steps: 20,
        step_size: 0.2,
        mu_norm: 4.0,
        method: Method::Direct,
        ..Config::default()
    };
    c = common::with_init(c, mode, 0.5, true);
    common::with_factorised(c, m, bias, train_p, init)
}

/// The query map of a trainer.
fn fact<'t, A: Arith, M: Model>(tr: &'t Trainer<'_, A, M>) -> &'t Factorised<A::Real> {
    match &tr.engine {
        Engine::Direct(e) => e.fact().expect("a factorised run"),
        Engine::Span(_) => panic!("the factorised map runs in the direct step"),
    }
}

/// The query map of a trainer, mutably (for finite differences).
fn fact_mut<'t, A: Arith, M: Model>(
    tr: &'t mut Trainer<'_, A, M>,
) -> &'t mut tokensel::prelude::train::direct::Direct<A::Real> {
    match &mut tr.engine {
        Engine::Direct(e) => e,
        Engine::Span(_) => panic!("the factorised map runs in the direct step"),
    }
}

/// The configs every arithmetic is checked on: biases and a trained p from the linear
/// init, the zero-query init without biases, the Gaussian init; GD, normalised GD
/// (eps > 0), Adam and AdamW with clipping.
fn configs() -> Vec<Config> {
    let mut v = vec![
        config(12, 5, 3, true, true, QkInit::Linear),
        config(12, 5, 4, false, false, QkInit::ZeroQuery),
        config(10, 4, 2, true, false, QkInit::Gaussian),
    ];
    let mut ngd = config(12, 5, 3, true, true, QkInit::Linear);
    ngd.optimizer.kind = OptimizerKind::NormalizedGd;
    ngd.optimizer.eps = 1e-9;
    ngd.step_size = 0.05;
    v.push(ngd);
    for kind in [OptimizerKind::Adam, OptimizerKind::Adamw] {
        let mut a = config(12, 5, 3, true, true, QkInit::Linear);
        a.optimizer.kind = kind;
        a.optimizer.eps = 1e-8;
        a.optimizer.beta1 = Some(0.9);
        a.optimizer.beta2 = Some(0.999);
        a.optimizer.weight_decay = Some(0.01);
        a.optimizer.clip_norm = Some(0.5);
        a.step_size = 0.01;
        v.push(a);
    }
    for c in &v {
        c.validate().unwrap();
    }
    v
}

/// The helper's binary sizes (`conformance::sized`: d = 64, n = 12, T = 8, 100 steps of
/// 0.3) with a `[factorised]` section of m = 16 rows (m d = 1024: the map's kernels above
/// the predictor's parallel threshold, asserted by the helper), the direct step.
fn sized(bias: bool, train_p: bool, init: QkInit) -> Config {
    let mode = if train_p { Mode::Joint } else { Mode::W };
    common::with_factorised(common::conformance::sized(mode), 16, bias, train_p, init)
}

/// The conformance helper (`common::conformance::conform`: the predictor and 1 / 2
/// threads bit-identical, trajectory and every final block; balls enclosing the twin at
/// every checkpoint, every block and every trained block's gradient among the reals;
/// every trained block's gradient against Richardson differences; resume; diff) on
/// p fixed, no biases, the zero-query init, GD.
#[test]
fn conforms_w_mode_zero_query() {
    common::conformance::conform(
        &sized(false, false, QkInit::ZeroQuery),
        common::conformance::Checks::all(),
    );
}

/// The helper on p trained with biases, the linear init, GD.
#[test]
fn conforms_joint_bias_linear() {
    common::conformance::conform(
        &sized(true, true, QkInit::Linear),
        common::conformance::Checks::all(),
    );
}

/// The helper on p fixed with biases, the linear init, AdamW with clipping (Adam's
/// moments per block, b_Q's and b_K's included, in the resumed state), every check the
/// balls included: b_K's gradient is the structural zero, so its moments stay exactly 0
/// and only AdamW's decay moves it (while it was the computed rounding noise, its ball
/// enclosed 0, Adam's second moment reached below 0 and the balls stopped at step 1).
#[test]
fn conforms_w_mode_bias_adamw() {
    let mut cfg = sized(true, false, QkInit::Linear);
    cfg.optimizer.kind = OptimizerKind::Adamw;
    cfg.optimizer.eps = 1e-8;
    cfg.optimizer.beta1 = Some(0.9);
    cfg.optimizer.beta2 = Some(0.999);
    cfg.optimizer.weight_decay = Some(0.01);
    cfg.optimizer.clip_norm = Some(0.5);
    cfg.step_size = 0.01;
    cfg.validate().unwrap();
    common::conformance::conform(&cfg, common::conformance::Checks::all());
}

/// The helper on p trained without biases, the Gaussian init, normalised GD (eps > 0;
/// with biases the balls stop at step 0, b_K's gradient norm enclosing 0: the hand test
/// below).
#[test]
fn conforms_joint_gaussian_normalised_gd() {
    let mut cfg = sized(false, true, QkInit::Gaussian);
    cfg.optimizer.kind = OptimizerKind::NormalizedGd;
    cfg.optimizer.eps = 1e-9;
    cfg.step_size = 0.05;
    cfg.validate().unwrap();
    common::conformance::conform(&cfg, common::conformance::Checks::all());
}

/// (a) The 53-bit predictor reproduces the f64 run bit for bit at every step: every
/// block, q, dL/dq, u, the loss.
#[test]
fn predictor_is_bit_identical_to_f64() {
    for cfg in configs() {
        let data = Dataset::generate(&cfg);
        let mut a = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
        let mut p = Trainer::new(&cfg, &data, Mpfr::predictor(), cfg.formulation).unwrap();
        for step in 0..=cfg.steps {
            a.forward_backward().unwrap();
            p.forward_backward().unwrap();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let pbits = |v: &[Float]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>();
            assert_eq!(a.loss.to_bits(), p.loss.to_f64().to_bits(), "step {step}");
            assert_eq!(bits(&a.q()), pbits(&p.q()), "q, step {step}");
            assert_eq!(bits(&a.grad_q()), pbits(&p.grad_q()), "dL/dq, step {step}");
            let (fa, fp) = (fact(&a), fact(&p));
            assert_eq!(bits(&fa.u), pbits(&fp.u), "u, step {step}");
            for ((b, va), (_, vp)) in fa.blocks.iter().zip(fp.blocks.iter()) {
                assert_eq!(bits(va), pbits(vp), "{}, step {step}: {cfg:?}", b.name);
            }
            if step < cfg.steps {
                a.update().unwrap();
                p.update().unwrap();
            }
        }
    }
}

/// (b) 128-bit balls enclose the 512-bit twin at every step: every block, q, dL/dq, the
/// loss; and (d) the balls' sum of the token coefficients behind b_K's gradient contains
/// 0. Normalised GD runs with and without biases (with biases it stopped at step 0 while
/// b_K's gradient was the computed rounding noise, whose norm's enclosure reaches 0: b_K
/// is now the structural zero and does not move).
#[test]
fn balls_enclose_the_twin_at_every_step() {
    let mut ngd = config(12, 5, 3, false, true, QkInit::Linear);
    ngd.optimizer.kind = OptimizerKind::NormalizedGd;
    ngd.optimizer.eps = 1e-9;
    ngd.step_size = 0.05;
    let mut all = configs();
    all.truncate(4);
    all.push(ngd);
    // normalised GD with biases and eps = 0: b_K's factor alpha / ||G|| is not formed
    // (its exact update is 0), so no arithmetic stops on b_K's zero norm
    let mut ngd0 = all[3].clone();
    ngd0.optimizer.eps = 0.0;
    all.push(ngd0);
    for cfg in all {
        let data = Dataset::generate(&cfg);
        let bar = Ball::new(128).unwrap();
        let tar = Mpfr::truth(512).unwrap();
        let mut b = Trainer::new(&cfg, &data, bar, cfg.formulation).unwrap();
        let mut t = Trainer::new(&cfg, &data, tar, cfg.formulation).unwrap();
        let zero = Float::new(128);
        for step in 0..=cfg.steps {
            b.forward_backward().unwrap();
            t.forward_backward().unwrap();
            common::assert_enclosed(
                &format!("loss {step}"),
                &[b.loss.clone()],
                &[t.loss.clone()],
            );
            common::assert_enclosed(&format!("q {step}"), &b.q(), &t.q());
            common::assert_enclosed(&format!("dL/dq {step}"), &b.grad_q(), &t.grad_q());
            let (fb, ft) = (fact(&b), fact(&t));
            for ((blk, vb), (_, vt)) in fb.blocks.iter().zip(ft.blocks.iter()) {
                common::assert_enclosed(&format!("{} {step}", blk.name), vb, vt);
            }
            let gb = fb.gradients(&bar, &b.grad_q());
            let gt = ft.gradients(&tar, &t.grad_q());
            for ((blk, g), h) in fb.blocks.decl.iter().zip(&gb).zip(&gt) {
                let (Some(g), Some(h)) = (g, h) else { continue };
                let (g, h) = (g.dense(&bar), h.dense(&tar));
                common::assert_enclosed(&format!("dL/d{} {step}", blk.name), &g, &h);
            }
            if cfg.factorised.is_some_and(|f| f.bias) {
                // the sum of the token coefficients behind b_K's gradient: its ball
                // encloses the exact 0 (b_K's gradient is that structural zero)
                assert!(
                    fb.coef_sum.contains(&zero),
                    "step {step}: {:?}",
                    fb.coef_sum
                );
            }
            if step < cfg.steps {
                b.update().unwrap();
                t.update().unwrap();
            }
        }
    }
}

/// (c) Every block's gradient (every entry) against a Richardson extrapolation of
/// central differences of the 512-bit twin's training loss, at step 3.
///
/// R(h) = (4 D(h/2) - D(h)) / 3 with D(h) = (L(x + h) - L(x - h)) / (2h) has truncation
/// error h^4 |L^(5)| / 480 (Taylor: D(h) = L' + h^2 L'''/6 + h^4 L^(5)/120 + ...).
/// Along one entry the scores are affine or quadratic (W_Q, p through u, and u^T b_K)
/// in the entry with slopes |x_t| |.| <= s = 40 at these sizes (|x_t| <= mu_norm + 4
/// sqrt(d) ~ 18, entries of u, W and p below 2), the loss a composition of log-sum-exp
/// and the logistic loss whose k-th derivatives are below k! per unit slope, so
/// |L^(5)| <= 5! (2 s)^5 ~ 4e11: with h = 2^-16 the truncation is below 4e11 2^-64 /
/// 480 ~ 5e-11... far too loose to test a gradient of size 1e-3 at 1e-9; with h =
/// 2^-30 it is below 4e11 2^-120 / 480 ~ 7e-34. Rounding: each L is the twin's, with
/// relative error below 2^-500 (a few hundred roundings of 2^-512), so D carries
/// 2^-500 |L| / h ~ 2^-470 |L|, and R at most 3 times that. Tolerance: 1e-30 + 2^-460
/// |L|, against gradients of size 1e-6 and up (the test asserts a gradient of that size
/// exists per block, so an error of any size above 1e-30 fails).
#[test]
fn every_block_gradient_matches_richardson_differences() {
    let tar = Mpfr::truth(512).unwrap();
    for cfg in [
        config(6, 4, 3, true, true, QkInit::Linear),
        config(6, 4, 2, false, true, QkInit::Gaussian),
    ] {
        let data = Dataset::generate(&cfg);
        let mut tr = Trainer::new(&cfg, &data, tar, cfg.formulation).unwrap();
        for _ in 0..3 {
            tr.forward_backward().unwrap();
            tr.update().unwrap();
        }
        tr.forward_backward().unwrap();
        let loss0 = tr.loss.to_f64().abs();
        let grads: Vec<Option<Vec<Float>>> = fact(&tr)
            .gradients(&tar, &tr.grad_q())
            .into_iter()
            .map(|g| g.map(|g| g.dense(&tar)))
            .collect();
        let decl = fact(&tr).blocks.decl.clone();
        let h = 2f64.powi(-30);
        let tol = 1e-30 + 2f64.powi(-460) * loss0;
        for (bi, (blk, g)) in decl.iter().zip(&grads).enumerate() {
            let Some(g) = g else { continue };
            let mut largest = 0f64;
            for (k, gk) in g.iter().enumerate() {
                let loss_at = |tr: &mut Trainer<'_, Mpfr>, delta: f64| -> Float {
                    let e = fact_mut(tr);
                    let f = e.fact_mut().unwrap();
                    let x0 = f.blocks.values[bi][k].clone();
                    tar.add_f64(&mut f.blocks.values[bi][k], delta);
                    e.compute_q(&tar);
                    tr.forward_backward().unwrap();
                    let l = tr.loss.clone();
                    let e = fact_mut(tr);
                    e.fact_mut().unwrap().blocks.values[bi][k] = x0;
                    e.compute_q(&tar);
                    l
                };
                let d = |tr: &mut Trainer<'_, Mpfr>, h: f64| -> Float {
                    let mut v = loss_at(tr, h);
                    tar.sub(&mut v, &loss_at(tr, -h));
                    tar.div_f64(&mut v, 2.0 * h);
                    v
                };
                let mut r = d(&mut tr, h / 2.0);
                tar.mul_f64(&mut r, 4.0);
                tar.sub(&mut r, &d(&mut tr, h));
                tar.div_f64(&mut r, 3.0);
                let mut err = gk.clone();
                tar.sub(&mut err, &r);
                let err = err.to_f64().abs();
                assert!(
                    err <= tol,
                    "dL/d{}[{k}] = {} vs Richardson {}: error {err:e} > {tol:e}",
                    blk.name,
                    gk.to_f64(),
                    r.to_f64()
                );
                largest = largest.max(gk.to_f64().abs());
            }
            if blk.name != "b_K" {
                assert!(largest > 1e-6, "{}'s gradient is {largest:e}", blk.name);
            }
        }
    }
}

/// u = 2^-512, the unit roundoff of the 512-bit twin.
fn twin_u() -> f64 {
    2f64.powi(-512)
}

/// (d) b_K's gradient is (sum_i sum_t c_it) u, and sum_t c_it = 0 in exact arithmetic
/// (softmax cancels a shift of every score of a sample): the step takes it as the
/// structural zero (asserted: exactly 0 entries), and the computed sum times u is in the
/// twin the rounding of that sum. Bound (proofs-notes/factorised.md): with the computed s, f,
/// coef, c of sample i (top token a),
/// |sum_t c_it| <= 4 (T + 4) u |coef_i| sum_t s_t (|g_t| + |g_a| + 2 |f_i|) =: B_i
/// (each c_t carries three roundings, f and the centred sum T + 1, 1 - sum_t s_t T + 1
/// ulps), and the sum over i and t adds n T u sum |c_it|: |dL/db_K[j]| <=
/// (sum_i B_i + n T u sum |c|) |u_j| (1 + 2u).
#[test]
fn b_k_gradient_is_zero_to_the_twins_rounding() {
    let tar = Mpfr::truth(512).unwrap();
    let cfg = config(12, 6, 3, true, true, QkInit::Linear);
    let data = Dataset::generate(&cfg);
    let mut tr = Trainer::new(&cfg, &data, tar, cfg.formulation).unwrap();
    let (n, t) = (cfg.n_train, cfg.layout.tokens);
    let g = tr.model.head_values(&tar, &data, data.train.x.view());
    let uu = twin_u();
    let mut checked = 0;
    for step in 0..=cfg.steps {
        tr.forward_backward().unwrap();
        let mut bound = 0.0;
        let mut csum = 0.0;
        for (i, s) in tr.samples.iter().enumerate() {
            let a = s.softmax.top;
            let gi = &g[i * t..(i + 1) * t];
            let f = s.f.to_f64().abs();
            let si = &tr.attention[i * t..(i + 1) * t];
            let mut sum = 0.0;
            for k in 0..t {
                sum += si[k].to_f64() * (gi[k].to_f64().abs() + gi[a].to_f64().abs() + 2.0 * f);
                csum += tr.c[i * t + k].to_f64().abs();
            }
            bound += 4.0 * (t as f64 + 4.0) * uu * s.coef.to_f64().abs() * sum * 1.01;
        }
        bound += (n * t) as f64 * uu * csum * 1.01;
        let f = fact(&tr);
        // the step takes b_K's gradient as the structural zero (exactly 0 entries) ...
        let grads = f.gradients(&tar, &tr.grad_q());
        let bk = f.blocks.index("b_K");
        let zero = grads[bk].as_ref().unwrap().dense(&tar);
        assert!(zero.iter().all(|x| x.is_zero()), "step {step}: {zero:?}");
        // ... which the computed (sum_i sum_t c_it) u is, to the twin's rounding
        let gk: Vec<Float> =
            f.u.iter()
                .map(|uj| Float::with_val(512, uj * &f.coef_sum))
                .collect();
        for (j, (gj, uj)) in gk.iter().zip(&f.u).enumerate() {
            let lim = bound * uj.to_f64().abs() * (1.0 + 1e-10);
            assert!(
                gj.to_f64().abs() <= lim,
                "step {step}: dL/db_K[{j}] = {:e} > {lim:e}",
                gj.to_f64()
            );
            checked += 1;
        }
        // the bound is at rounding level: far below the other blocks' gradients
        assert!(bound < 1e-140, "{bound:e}");
        if step < cfg.steps {
            tr.update().unwrap();
        }
    }
    assert_eq!(checked, 3 * 21);
}

/// A 2048-bit float.
fn big(v: &Float) -> Float {
    Float::with_val(2048, v)
}

/// (e) Without biases, GD on (K, Q) = (W_K, W_Q) keeps the balance identity
/// Delta(K K^T - Q Q^T) = eta^2 (|dL/dq|^2 u u^T - |p|^2 du du^T) exactly
/// (proofs-notes/factorised.md: SPEC 17's eta^2 (Q G^T G Q^T - K G G^T K^T) with M =
/// K^T Q, G = dL/dM = (dL/dq) p^T), checked at every step of a 512-bit twin run against
/// the bound derived there: the rounding of each new entry (e^K_jk = u (|eta u_j
/// dq_k| + 2 |K'_jk|), the same for Q with du_j p_k) and the first-order term of the
/// rounding of u = Q p and du = K dq (gamma_d sum_k |Q_jk| |p_k|, gamma_d sum_k |K_jk|
/// |dq_k|), doubled.
#[test]
fn balance_identity_holds_to_the_twins_rounding() {
    let tar = Mpfr::truth(512).unwrap();
    let mut cfg = config(10, 6, 4, false, false, QkInit::Linear);
    cfg.steps = 30;
    cfg.step_size = 0.5;
    let data = Dataset::generate(&cfg);
    let mut tr = Trainer::new(&cfg, &data, tar, cfg.formulation).unwrap();
    let (m, d) = (4, cfg.d);
    let u = twin_u();
    let gamma_d = d as f64 * u / (1.0 - d as f64 * u);
    let eta = Float::with_val(2048, cfg.step_size);
    let abs = |x: &Float| x.to_f64().abs();
    let mut largest_rhs = 0f64;
    for step in 0..cfg.steps {
        tr.forward_backward().unwrap();
        let f = fact(&tr);
        let (k0, q0) = (f.blocks.get("W_K").to_vec(), f.blocks.get("W_Q").to_vec());
        let p = f.blocks.get("p").to_vec();
        let (uh, duh) = (f.u.clone(), f.du.clone());
        let dq = tr.grad_q();
        tr.update().unwrap();
        let f = fact(&tr);
        let (k1, q1) = (f.blocks.get("W_K").to_vec(), f.blocks.get("W_Q").to_vec());
        let gram = |a: &[Float], j: usize, l: usize| {
            let mut s = Float::new(2048);
            for k in 0..d {
                s += big(&a[j * d + k]) * big(&a[l * d + k]);
            }
            s
        };
        let sq = |v: &[Float]| {
            let mut s = Float::new(2048);
            for x in v {
                s += big(x) * big(x);
            }
            s
        };
        let (dq2, p2) = (sq(&dq), sq(&p));
        // a priori bounds on the rounding of u and du
        let a: Vec<f64> = (0..m)
            .map(|j| {
                gamma_d
                    * (0..d)
                        .map(|k| abs(&q0[j * d + k]) * abs(&p[k]))
                        .sum::<f64>()
            })
            .collect();
        let b: Vec<f64> = (0..m)
            .map(|j| {
                gamma_d
                    * (0..d)
                        .map(|k| abs(&k0[j * d + k]) * abs(&dq[k]))
                        .sum::<f64>()
            })
            .collect();
        let e = |new: &[Float], l: &[Float], r: &[Float], j: usize, k: usize| {
            u * (cfg.step_size * abs(&l[j]) * abs(&r[k]) + 2.0 * abs(&new[j * d + k]))
        };
        for j in 0..m {
            for l in 0..m {
                let lhs = (gram(&k1, j, l) - gram(&k0, j, l)) - (gram(&q1, j, l) - gram(&q0, j, l));
                let rhs = eta.clone()
                    * eta.clone()
                    * (dq2.clone() * big(&uh[j]) * big(&uh[l])
                        - p2.clone() * big(&duh[j]) * big(&duh[l]));
                let resid = (lhs - rhs.clone()).to_f64().abs();
                let mut bound = 0.0;
                for k in 0..d {
                    let (ekj, ekl) = (e(&k1, &uh, &dq, j, k), e(&k1, &uh, &dq, l, k));
                    let (eqj, eql) = (e(&q1, &duh, &p, j, k), e(&q1, &duh, &p, l, k));
                    bound += abs(&k1[j * d + k]) * ekl + ekj * abs(&k1[l * d + k]) + ekj * ekl;
                    bound += abs(&q1[j * d + k]) * eql + eqj * abs(&q1[l * d + k]) + eqj * eql;
                }
                let (uj, ul, dj, dl) = (abs(&uh[j]), abs(&uh[l]), abs(&duh[j]), abs(&duh[l]));
                bound += cfg.step_size * (a[j] * (dl + b[l]) + (uj + a[j]) * b[l]);
                bound += cfg.step_size * ((dj + b[j]) * a[l] + b[j] * (ul + a[l]));
                let bound = 2.0 * bound;
                assert!(
                    resid <= bound,
                    "step {step} ({j}, {l}): residual {resid:e} > bound {bound:e}"
                );
                largest_rhs = largest_rhs.max(rhs.to_f64().abs());
            }
        }
    }
    // the identity is not trivially 0 = 0: its right-hand side is of order eta^2 |G|^2
    assert!(largest_rhs > 1e-12, "{largest_rhs:e}");
}

/// (f) From W_Q(0) = 0 (zero-query init, no biases) with the one shared query p, the f64
/// run keeps W_Q = c p^T up to rounding, so M = W_K^T W_Q is rank one: each step's new
/// W_Q entry is fma(a_j, p_k, W_Q[j, k]) with a_j a rounded scalar, so W_Q' = W_Q + a
/// p^T + E with |E_jk| <= u |W_Q'[j, k]|; the residual R = W_Q (I - p p^T / |p|^2)
/// starts at 0 and grows by at most ||E||_F <= u ||W_Q'||_F per step. Then sigma_2(M) <=
/// ||W_K||_F ||R||_F and sigma_1(M) >= |M p| / |p| = |q| / |p|. And the run ends in
/// W-mode's selection pattern: every training sample's top token and the test accuracy
/// equal those of a W-mode run on the same data from W(0) = 0 (the same q(0) = 0 and
/// p), at the last checkpoint (||mu|| = 8, d = 32, n = 12, 2000 steps of 0.5; measured
/// while writing this test: at ||mu|| = 4, where the noise dominates, 3 of the 12
/// samples' top tokens still differ after 2000 steps: there the two runs memorise
/// different tokens).
#[test]
fn zero_query_stays_rank_one_and_selects_as_w_mode() {
    let mut cfg = config(32, 12, 6, false, false, QkInit::ZeroQuery);
    cfg.steps = 2000;
    cfg.step_size = 0.5;
    cfg.mu_norm = 8.0;
    cfg.validate().unwrap();
    let data = Dataset::generate(&cfg);
    let mut tr = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
    let mut allowed = 0.0;
    for _ in 0..cfg.steps {
        tr.forward_backward().unwrap();
        tr.update().unwrap();
        let wq = fact(&tr).blocks.get("W_Q");
        allowed += 2f64.powi(-53) * wq.iter().map(|x| x * x).sum::<f64>().sqrt() * (1.0 + 1e-12);
    }
    tr.forward_backward().unwrap();
    let f = fact(&tr);
    let (wq, wk, p) = (f.blocks.get("W_Q"), f.blocks.get("W_K"), f.blocks.get("p"));
    let d = cfg.d;
    let prec = 256;
    let p2: Float = p
        .iter()
        .map(|x| Float::with_val(prec, x) * x)
        .fold(Float::new(prec), |a, b| a + b);
    let mut r2 = Float::new(prec);
    for row in wq.chunks(d) {
        let dot = row
            .iter()
            .zip(p)
            .map(|(a, b)| Float::with_val(prec, a) * b)
            .fold(Float::new(prec), |a, b| a + b);
        let c = dot / p2.clone();
        for (a, b) in row.iter().zip(p) {
            let r = Float::with_val(prec, a) - c.clone() * b;
            r2 += r.clone() * r;
        }
    }
    let resid = r2.sqrt().to_f64();
    assert!(resid <= allowed, "||R||_F = {resid:e} > {allowed:e}");
    let fro = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let q = tr.q();
    let ratio = fro(wk) * resid * fro(p) / fro(&q);
    eprintln!(
        "rank one: ||R||_F = {resid:e} (allowed {allowed:e}), sigma_2/sigma_1 of W_K^T W_Q <= {ratio:e}, ||W_Q||_F = {:e}",
        fro(wq)
    );
    assert!(ratio < 1e-12, "{ratio:e}");
    // W-mode on the same data from W(0) = 0 and the same p
    let mut wcfg = cfg.clone();
    wcfg.factorised = None;
    wcfg.init.w = WInit::KaimingUniform;
    wcfg.validate().unwrap();
    let init = Params::init(&wcfg);
    let zero_w = Params {
        p: init.p.clone(),
        w: Some(ndarray::Array2::zeros((d, d))),
    };
    assert_eq!(init.p.as_slice().unwrap(), p);
    let mut w =
        Trainer::from_params(&wcfg, &data, F64, wcfg.formulation, Method::Direct, &zero_w).unwrap();
    let wt = w.record(None, &mut |_, _| Ok(())).unwrap();
    let ft = tr.clone().record(None, &mut |_, _| Ok(())).unwrap();
    let (lw, lf) = (
        wt.checkpoints.last().unwrap(),
        ft.checkpoints.last().unwrap(),
    );
    assert_eq!(lw.step, cfg.steps);
    assert_eq!(lf.step, cfg.steps);
    let tops =
        |c: &tokensel::prelude::Checkpoint| c.samples.iter().map(|s| s.top).collect::<Vec<_>>();
    assert_eq!(tops(lw), tops(lf), "top tokens: W-mode vs factorised");
    assert_eq!(lw.test_accuracy, lf.test_accuracy);
    eprintln!(
        "W-mode from W = 0: train acc {}, test acc {}, tops {:?}; factorised: train acc {}, test acc {}",
        lw.train_accuracy,
        lw.test_accuracy,
        tops(lw),
        lf.train_accuracy,
        lf.test_accuracy
    );
}

/// What the query map does not implement is refused by config validation, naming it.
#[test]
fn unimplemented_combinations_are_refused() {
    let base = config(12, 5, 3, true, false, QkInit::Linear);
    let check = |c: Config, key: &str| {
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains(key), "{e}");
    };
    check(
        Config {
            method: Method::Span,
            ..base.clone()
        },
        "span",
    );
    check(
        Config {
            mode: Mode::Joint,
            ..base.clone()
        },
        "train_p",
    );
    let mut c = base.clone();
    c.optimizer.batch = Some(2);
    check(c, "optimizer.batch");
    let mut c = base.clone();
    c.factorised.as_mut().unwrap().m = 0;
    check(c, "factorised.m");
    let mut c = base;
    c.factorised.as_mut().unwrap().init = QkInit::Gaussian;
    check(c, "factorised.scale");
}

/// Every command that does not implement the query map refuses `examples/factorised.toml`
/// before any work (exit code 2), naming the `factorised` key and the capability it
/// lacks (`model::caps`): none of them writes an output.
#[test]
fn commands_without_the_query_map_refuse_naming_the_capability() {
    let dir = tempfile::tempdir().unwrap();
    let c = "examples/factorised.toml";
    let out = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    for (args, cap) in [
        (vec!["svm", "--config", c], "svm"),
        (vec!["saturation", "--config", c], "saturation"),
        (vec!["sweep", "--config", c], "theory"),
        (vec!["cost", "--config", c], "span_form"),
        (vec!["protocol", "--config", c], "protocol"),
        (
            vec!["grid", "--config", c, "--out", &out("grid")],
            "grid_metrics",
        ),
    ] {
        let o = common::tokensel(&args);
        let e = common::stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.contains("`factorised`") && e.contains(&format!("the capability `{cap}`")),
            "{args:?}: {e}"
        );
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// The factorised map has no W: `Params::init` draws none (its p is W-mode's), the data
/// size check does not count d * d for it, and the memory check counts the map's blocks:
/// a 1024-bit twin with m d = 5e7 (two blocks of ~8 GB each) is refused with exit code 3
/// before any work, where it used to be allowed by a W-less count and abort in GMP.
#[test]
fn the_map_has_no_w_and_its_blocks_are_counted() {
    let c = config(12, 5, 3, false, false, QkInit::Linear);
    let init = Params::init(&c);
    assert!(init.w.is_none());
    let mut w_mode = c.clone();
    w_mode.factorised = None;
    assert_eq!(init.p, Params::init(&w_mode).p);
    // d = 50,000: a W-mode run's d * d would be 18.6 GiB; the map's two 1 x d blocks are not
    let mut wide = c.clone();
    wide.d = 50_000;
    wide.factorised.as_mut().unwrap().m = 1;
    assert!(wide.data_bytes() < 1 << 30, "{}", wide.data_bytes());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bigm.toml");
    std::fs::write(
        &path,
        "d = 1000\nn_train = 4\nn_test = 4\nsteps = 1\nstep_size = 0.5\nmode = \"W\"\n\
         [init]\np = \"gaussian\"\np_scale = 0.03\n[factorised]\nm = 50000\n",
    )
    .unwrap();
    let o = common::tokensel(&[
        "twin",
        "--config",
        path.to_str().unwrap(),
        "--quiet",
        "--prec",
        "1024",
    ]);
    let e = common::stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{e}");
    assert!(e.contains("GiB"), "{e}");
}

/// p = 0 with p fixed trains with biases (u = b_Q != 0: W_K and b_Q get gradients) and
/// is refused without them, for the map's reason (u = 0, every block's gradient 0), not
/// W-mode's; with p trained and W_Q(0) != 0 it trains without biases too (dL/dp =
/// W_Q^T W_K dL/dq != 0), and from the zero-query init it is refused.
#[test]
fn p_zero_is_refused_only_where_nothing_moves() {
    for (bias, train_p, init) in [
        (false, false, QkInit::Linear),
        (true, false, QkInit::Linear),
        (false, true, QkInit::Linear),
        (false, true, QkInit::ZeroQuery),
    ] {
        let stuck = !bias && (!train_p || init == QkInit::ZeroQuery);
        let mut c = config(12, 5, 3, bias, train_p, init);
        c.init.p = tokensel::prelude::PInit::Zero;
        match c.validate() {
            Ok(()) => {
                assert!(!stuck);
                let data = Dataset::generate(&c);
                let t = Trainer::run(&c, &data, F64, &mut |_| {}).unwrap();
                let (first, last) = (&t.checkpoints[0], t.checkpoints.last().unwrap());
                assert!(last.train_loss < first.train_loss, "{first:?} {last:?}");
            }
            Err(e) => {
                let e = e.to_string();
                assert!(stuck, "{e}");
                assert!(e.contains("init.p") && e.contains("u = W_Q p = 0"), "{e}");
                assert!(!e.contains("dL/dW = p"), "{e}");
            }
        }
    }
}
