//! The multi-class model (SPEC section 14): its data, and the K = 2 identity as the guard
//! of the whole gradient path. With nu_0 = -nu_1 = nu / 2 the K = 2 cross-entropy is
//! log(1 + exp(-Y f)) with class 0 as +1, so in exact arithmetic the K = 2 run IS the
//! binary run: the same data (drawn from the same streams), the same losses, outputs
//! (f_0 - f_1 = f) and parameters at every step. The two runs form their gradients in
//! different orders, so in a finite arithmetic they agree to rounding only; the bounds
//! are derived where they are asserted. Further: the 1024-bit twin lies inside the
//! 128-bit balls, and the K-class gradient equals a central difference of the loss (the
//! predictor's bit-identity for K classes: tests/predictor.rs).

mod common;

use rug::Float;
use tokensel::prelude::{FlipRule, LabelRule, PInit, Signals, *};

/// `cfg` as the multi-class model with `k` classes (and `k - 1` weak tokens of the other
/// classes, T grown accordingly).
fn multiclass(mut cfg: Config, k: usize) -> Config {
    cfg.model = ModelSpec {
        kind: ModelKind::Multiclass,
        classes: k,
        ..ModelSpec::default()
    };
    let extra = (k - 1) * cfg.layout.weak_opposite.max(1) - cfg.layout.weak_opposite;
    cfg.layout.weak_opposite += extra;
    cfg.layout.tokens += extra;
    cfg.validate().unwrap();
    cfg
}

/// A small config where attention moves within a few dozen steps: d = 40, n = 6,
/// ||mu|| = 6, alpha = 0.5, in `mode` (Gaussian p(0), Kaiming W(0) outside p-mode).
fn small(seed: u64, mode: Mode, method: Method, steps: u64) -> Config {
    let cfg = Config {
        seed,
        d: 40,
        n_train: 6,
        n_test: 20,
        mu_norm: 6.0,
        eta: 0.34,
        step_size: 0.5,
        steps,
        method,
        ..Config::default()
    };
    let cfg = if mode == Mode::P {
        cfg
    } else {
        common::with_init(cfg, mode, 0.5, true)
    };
    cfg.validate().unwrap();
    cfg
}

/// Class 0 is the binary label +1, class 1 is -1.
fn as_binary(y: &[i8]) -> Vec<i8> {
    y.iter().map(|c| if *c == 0 { 1 } else { -1 }).collect()
}

#[test]
fn k2_draws_the_binary_data() {
    let mut cases = 0;
    for seed in 0..4 {
        for labels in [LabelRule::Random, LabelRule::HalfSplit] {
            for flips in [
                FlipRule::Exact,
                FlipRule::Bernoulli,
                FlipRule::PerClassFirst,
            ] {
                for signals in [Signals::Axis, Signals::Random] {
                    let bin = Config {
                        seed,
                        d: 30,
                        n_train: 11,
                        n_test: 13,
                        eta: 0.4,
                        labels,
                        flips,
                        signals,
                        ..Config::default()
                    };
                    let mc = multiclass(bin.clone(), 2);
                    let (a, b) = (Dataset::generate(&bin), Dataset::generate(&mc));
                    assert_eq!(a.train.x, b.train.x, "seed {seed} {labels:?} {flips:?}");
                    assert_eq!(a.test.x, b.test.x);
                    assert_eq!(a.train.y, as_binary(&b.train.y));
                    assert_eq!(a.train.y_true, as_binary(&b.train.y_true));
                    assert_eq!(a.test.y_true, as_binary(&b.test.y_true));
                    assert_eq!(a.class_signals, b.class_signals);
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 48);
}

/// K = 3 and 5 without noise: R carries mu_{Y*}, W_{Y*} rho mu_{Y*}, the j-th weak token
/// of the other classes rho mu_c for the j-th class c != Y* (in class order), I nothing;
/// labels cover every class; flips go to another class, exactly ceil(eta n) of them.
#[test]
fn k_class_tokens_carry_their_signals_and_flips_go_to_other_classes() {
    for k in [3usize, 5] {
        let cfg = multiclass(
            Config {
                d: 12,
                n_train: 40,
                n_test: 30,
                sigma: 0.0,
                eta: 0.3,
                ..Config::default()
            },
            k,
        );
        let data = Dataset::generate(&cfg);
        let mu = |c: usize| &data.class_signals[c];
        for i in 0..cfg.n_train {
            let y = data.train.y_true[i] as usize;
            let x = data.train.tokens(i);
            assert_eq!(x.row(0), mu(y).view());
            assert_eq!(x.row(1).to_owned(), mu(y).mapv(|v| v * cfg.rho));
            let others: Vec<usize> = (0..k).filter(|c| *c != y).collect();
            for (j, c) in others.iter().enumerate() {
                assert_eq!(x.row(2 + j).to_owned(), mu(*c).mapv(|v| v * cfg.rho));
            }
            assert!(x.row(1 + k).iter().all(|v| *v == 0.0));
        }
        let noisy: Vec<usize> = (0..cfg.n_train)
            .filter(|&i| data.train.is_noisy(i))
            .collect();
        assert_eq!(noisy.len(), cfg.exact_flip_count());
        assert!(
            data.train
                .y
                .iter()
                .chain(&data.test.y_true)
                .all(|c| (0..k as i8).contains(c))
        );
        for c in 0..k as i8 {
            assert!(
                data.test.y_true.contains(&c),
                "K = {k}: class {c} never drawn"
            );
        }
        // orthogonal signals of norm ||mu||
        for a in 0..k {
            for b in 0..k {
                let dot: f64 = mu(a).iter().zip(mu(b)).map(|(u, v)| u * v).sum();
                let want = if a == b {
                    cfg.mu_norm * cfg.mu_norm
                } else {
                    0.0
                };
                assert_eq!(dot, want);
            }
        }
    }
}

/// Losses, outputs and q of two trainers in lockstep for `cfg.steps` steps; returns the
/// largest |difference| of the loss, of the outputs (binary f against f_0 - f_1) and of
/// q, each relative to the binary value's magnitude (loss, max |f|, max |q_k|).
fn k2_gap<A: Arith>(bin: &Config, ar: A) -> [f64; 3] {
    let mc = multiclass(bin.clone(), 2);
    let (db, dm) = (Dataset::generate(bin), Dataset::generate(&mc));
    let mut a = Trainer::new(bin, &db, ar, Formulation::Stable).unwrap();
    let mut b = Trainer::new(&mc, &dm, ar, Formulation::Stable).unwrap();
    let mut worst = [0.0f64; 3];
    let val = |x: &A::Real| ar.to_f64(x);
    for step in 0..=bin.steps {
        a.forward_backward().unwrap();
        b.forward_backward().unwrap();
        let rel = |x: f64, y: f64, scale: f64| (x - y).abs() / scale.max(f64::MIN_POSITIVE);
        let mut dl = ar.zero();
        ar.diff(&mut dl, &a.loss, &b.loss);
        worst[0] = worst[0].max(val(&dl).abs() / val(&a.loss).abs());
        let fmax = a
            .samples
            .iter()
            .map(|s| val(&s.f).abs())
            .fold(0.0, f64::max);
        for (sa, sb) in a.samples.iter().zip(&b.samples) {
            let mut f2 = ar.zero();
            ar.diff(&mut f2, &sb.outputs[0], &sb.outputs[1]);
            let mut d = ar.zero();
            ar.diff(&mut d, &sa.f, &f2);
            worst[1] = worst[1].max(rel(val(&d), 0.0, fmax));
        }
        let (qa, qb) = (a.q(), b.q());
        let qmax = qa.iter().map(|v| val(v).abs()).fold(0.0, f64::max);
        for (x, y) in qa.iter().zip(&qb) {
            let mut d = ar.zero();
            ar.diff(&mut d, x, y);
            worst[2] = worst[2].max(rel(val(&d), 0.0, qmax));
        }
        if step < bin.steps {
            a.update().unwrap();
            b.update().unwrap();
        }
    }
    // the runs went somewhere: some sample's top token holds most of its attention (from
    // 1/T at a uniform start, or near it)
    let rest = a
        .samples
        .iter()
        .map(|s| val(&s.softmax.rest))
        .fold(1.0, f64::min);
    assert!(rest < 0.5, "attention did not move: min 1 - s_top = {rest}");
    worst
}

/// The bound both K = 2 tests assert, relative: `steps` steps of a local rounding
/// difference of at most 32 u each (the two runs' gradients differ in their sums over
/// at most T K + T + 8 = 32 terms here, each rounding at most u relative), under the
/// assumption tests/twin.rs makes too: the step map does not expand distances along the
/// path (|I - alpha H| <= 1). Where it did, the gap would grow past this and the test
/// would fail.
fn k2_bound(steps: u64, u: f64) -> f64 {
    steps as f64 * 32.0 * u
}

/// The 256-bit twins of the binary and the K = 2 run agree over 40 steps in p-, W- and
/// joint mode, direct and span, to [`k2_bound`] with u = 2^-256 (1.1e-74; measured at
/// most 9e-77 relative on loss, outputs and q).
#[test]
fn k2_twins_agree_with_the_binary_twin() {
    let twin = Mpfr::truth(256).unwrap();
    let bound = k2_bound(40, 2f64.powi(-256));
    for mode in [Mode::P, Mode::W, Mode::Joint] {
        for method in [Method::Direct, Method::Span] {
            let cfg = small(3, mode, method, 40);
            let gap = k2_gap(&cfg, twin);
            assert!(
                gap.iter().all(|g| *g <= bound),
                "{mode:?} {method:?}: {gap:?} > {bound:e}"
            );
        }
    }
}

/// The f64 runs of the binary and the K = 2 model agree to [`k2_bound`] with u = 2^-53
/// (1.4e-13; measured at most 7.4e-16 relative).
#[test]
fn k2_f64_agrees_with_the_binary_f64() {
    let bound = k2_bound(40, 2f64.powi(-53));
    for mode in [Mode::P, Mode::W, Mode::Joint] {
        for method in [Method::Direct, Method::Span] {
            let cfg = small(3, mode, method, 40);
            let gap = k2_gap(&cfg, F64);
            assert!(
                gap.iter().all(|g| *g <= bound),
                "{mode:?} {method:?}: {gap:?} > {bound:e}"
            );
        }
    }
}

/// The 128-bit enclosures of the binary and the K = 2 run intersect at every step (loss
/// and q): both contain the one exact trajectory.
#[test]
fn k2_balls_intersect_the_binary_balls() {
    let ball = Ball::new(128).unwrap();
    for mode in [Mode::P, Mode::W, Mode::Joint] {
        for method in [Method::Direct, Method::Span] {
            let bin = small(3, mode, method, 30);
            let mc = multiclass(bin.clone(), 2);
            let (db, dm) = (Dataset::generate(&bin), Dataset::generate(&mc));
            let mut a = Trainer::new(&bin, &db, ball, Formulation::Stable).unwrap();
            let mut b = Trainer::new(&mc, &dm, ball, Formulation::Stable).unwrap();
            for step in 0..=bin.steps {
                a.forward_backward().unwrap();
                b.forward_backward().unwrap();
                let meet = |x: &BallReal, y: &BallReal| {
                    // exact at 256 bits: 128-bit midpoints of close exponents, f64 radii
                    let gap = Float::with_val(256, x.mid() - y.mid()).abs();
                    gap <= Float::with_val(256, x.rad_f64()) + y.rad_f64()
                };
                assert!(
                    meet(&a.loss, &b.loss),
                    "{mode:?} {method:?} step {step}: loss"
                );
                for (k, (x, y)) in a.q().iter().zip(&b.q()).enumerate() {
                    assert!(meet(x, y), "{mode:?} {method:?} step {step}: q[{k}]");
                }
                if step < bin.steps {
                    a.update().unwrap();
                    b.update().unwrap();
                }
            }
        }
    }
}

/// The 1024-bit twin lies inside the 128-bit balls for K = 3: scores, attention, the K
/// outputs, the margin, every loss term and the loss, and q, at every step.
#[test]
fn k_class_balls_enclose_the_twin() {
    for mode in [Mode::P, Mode::W, Mode::Joint] {
        for method in [Method::Direct, Method::Span] {
            let cfg = multiclass(small(5, mode, method, 20), 3);
            let data = Dataset::generate(&cfg);
            let ball = Ball::new(128).unwrap();
            let mut b = Trainer::new(&cfg, &data, ball, cfg.formulation).unwrap();
            let mut t =
                Trainer::new(&cfg, &data, Mpfr::truth(1024).unwrap(), cfg.formulation).unwrap();
            for step in 0..=cfg.steps {
                b.forward_backward().unwrap();
                t.forward_backward().unwrap();
                let at = |q: &str| format!("{mode:?} {method:?} step {step}: {q}");
                let inside = |q: &str, bs: &[BallReal], ts: &[Float]| {
                    common::assert_enclosed(&at(q), bs, ts)
                };
                inside("z", &b.scores, &t.scores);
                inside("s", &b.attention, &t.attention);
                inside("c", &b.c, &t.c);
                for (sb, st) in b.samples.iter().zip(&t.samples) {
                    inside("outputs", &sb.outputs, &st.outputs);
                    inside(
                        "margin",
                        std::slice::from_ref(&sb.f),
                        std::slice::from_ref(&st.f),
                    );
                    inside(
                        "loss term",
                        std::slice::from_ref(&sb.loss),
                        std::slice::from_ref(&st.loss),
                    );
                }
                inside(
                    "loss",
                    std::slice::from_ref(&b.loss),
                    std::slice::from_ref(&t.loss),
                );
                inside("q", &b.q(), &t.q());
                if step < cfg.steps {
                    b.update().unwrap();
                    t.update().unwrap();
                }
            }
        }
    }
}

/// The K-class gradient (X^T c from the model's token coefficients) against a central
/// difference of the loss in the 512-bit twin, at K = 3 and 4, in p-mode (W = I, so
/// dL/dp = dL/dq) at a Gaussian p. The perturbed p_k +- h (h = 2^-16, 2^-17) are exact
/// in f64 (asserted), so the twin evaluates L at exactly those points; Richardson's
/// (4 D(h/2) - D(h)) / 3 cancels the h^2 term, leaving |L^(5)| h^4 / 30 ~ 1e-20 |L^(5)|
/// truncation and ~2^-512 / h rounding. Asserted to 1e-13 of max |grad|.
#[test]
fn k_class_gradient_is_the_derivative_of_the_loss() {
    let ar = Mpfr::truth(512).unwrap();
    for k in [3usize, 4] {
        let mut cfg = multiclass(
            Config {
                d: 16,
                n_train: 5,
                n_test: 3,
                mu_norm: 3.0,
                eta: 0.4,
                method: Method::Direct,
                ..Config::default()
            },
            k,
        );
        cfg.init.p = PInit::Gaussian;
        cfg.init.p_scale = 0.7;
        let data = Dataset::generate(&cfg);
        let p0 = Params::init(&cfg);
        let loss_at = |p: &ndarray::Array1<f64>| -> Float {
            let params = Params {
                p: p.clone(),
                w: None,
            };
            let mut tr = Trainer::from_params(
                &cfg,
                &data,
                ar,
                Formulation::Stable,
                Method::Direct,
                &params,
            )
            .unwrap();
            tr.forward_backward().unwrap();
            tr.loss.clone()
        };
        let mut tr =
            Trainer::from_params(&cfg, &data, ar, Formulation::Stable, Method::Direct, &p0)
                .unwrap();
        tr.forward_backward().unwrap();
        let grad = tr.grad_q();
        let gmax = grad.iter().map(|g| g.to_f64().abs()).fold(0.0, f64::max);
        assert!(gmax > 1e-3, "K {k}: a gradient of {gmax:e} tests nothing");
        let diff = |kk: usize, h: f64| -> Float {
            let (mut up, mut down) = (p0.p.clone(), p0.p.clone());
            up[kk] += h;
            down[kk] -= h;
            assert_eq!(up[kk] - p0.p[kk], h, "p_k + h exact");
            assert_eq!(p0.p[kk] - down[kk], h, "p_k - h exact");
            (loss_at(&up) - loss_at(&down)) / Float::with_val(512, 2.0 * h)
        };
        for (kk, g) in grad.iter().enumerate() {
            let (h, h2) = (2f64.powi(-16), 2f64.powi(-17));
            let rich = (Float::with_val(512, 4) * diff(kk, h2) - diff(kk, h)) / 3;
            let err = Float::with_val(512, &rich - g).to_f64().abs();
            assert!(
                err <= 1e-13 * gmax,
                "K {k}, p_{kk}: {err:e} (|grad| {gmax:e})"
            );
        }
    }
}

/// The K-class naive (d-space) gradient, which judge's naive candidates replay
/// (`Model::naive_terms`: the binary naive form with g_t -> h_t and f -> sum_t s_t h_t),
/// is the stable gradient in exact arithmetic: at 512 bits the two agree at every one
/// of 6 steps of a run from a Gaussian p(0), K = 3 and 4, to 1e-120 relative. Bound:
/// each entry is a sum of at most n T (K + 2) = 330 products of data and head values of
/// magnitude below 1e3, formed in 512-bit arithmetic (u = 2^-512 < 1e-154), so the two
/// forms differ by far less than 1e-140 of the gradient (above 1e-3: asserted); a
/// wrong per-token value or centre differs by O(1) of it.
#[test]
fn k_class_naive_gradient_is_the_stable_one_in_exact_arithmetic() {
    let ar = Mpfr::truth(512).unwrap();
    for k in [3usize, 4] {
        let mut cfg = multiclass(
            Config {
                d: 16,
                n_train: 5,
                n_test: 3,
                mu_norm: 3.0,
                eta: 0.4,
                step_size: 0.5,
                method: Method::Direct,
                ..Config::default()
            },
            k,
        );
        cfg.init.p = PInit::Gaussian;
        cfg.init.p_scale = 0.7;
        let data = Dataset::generate(&cfg);
        let mut stable = Trainer::new(&cfg, &data, ar, Formulation::Stable).unwrap();
        let mut naive = Trainer::new(&cfg, &data, ar, Formulation::Naive).unwrap();
        for step in 0..6 {
            stable.forward_backward().unwrap();
            naive.forward_backward().unwrap();
            let (gs, gn) = (stable.grad_q(), naive.grad_q());
            let gmax = gs.iter().map(|g| g.to_f64().abs()).fold(0.0, f64::max);
            assert!(gmax > 1e-3, "K {k}: a gradient of {gmax:e} tests nothing");
            for (a, b) in gs.iter().zip(&gn) {
                let err = Float::with_val(512, a - b).to_f64().abs();
                assert!(err <= 1e-120 * gmax, "K {k}, step {step}: {err:e}");
            }
            stable.update().unwrap();
            naive.update().unwrap();
        }
    }
}

/// `certify` on a K = 3 run decides every argmax: at step 0 (p = 0, uniform attention)
/// every training sample's outputs are the mean head values, proved in the 128-bit
/// balls, and after 300 steps the certificate's train and test counts equal the f64
/// run's (no undecided argmax, the counts exact: lo == hi), with the selection counts
/// of the clean samples proved on R.
#[test]
fn certify_decides_k_class_argmaxes() {
    use tokensel::prelude::analysis::certify;
    use tokensel::prelude::analysis::certify::Options;
    let cfg = multiclass(
        Config {
            n_train: 12,
            n_test: 40,
            steps: 3000,
            method: Method::Span,
            ..Config::default()
        },
        3,
    );
    let data = Dataset::generate(&cfg);
    let cert = certify::certify(&cfg, &data, &Options::default(), &mut |_, _| {}).unwrap();
    assert!(cert.first_undecided.is_none(), "{:?}", cert.first_undecided);
    let run = common::run_f64(&cfg);
    let end = run.last();
    let (tr, te) = (&cert.train_correct, &cert.test_correct);
    assert_eq!((tr.lo, tr.hi), (tr.lo, tr.lo));
    assert_eq!((te.lo, te.hi), (te.lo, te.lo));
    assert_eq!(tr.lo as f64 / tr.of as f64, end.train_accuracy);
    assert_eq!(te.lo as f64 / te.of as f64, end.test_accuracy);
    // the run moved: some training label is not yet predicted (the noisy ones), and
    // the test set is
    assert!(
        end.train_accuracy < 1.0 && end.test_accuracy > 0.9,
        "{end:?}"
    );
}

/// A K = 3 certificate carries the per-class metrics and each sample's K outputs as
/// intervals (before, it had neither), and they enclose the 1024-bit twin at every
/// checkpoint (d = 40, n = 6, 60 steps, span, 128-bit balls): each output, which the
/// twin rounds to f64 once, within half an ulp of its interval (the twin is within
/// ~2^-1000 of the exact value the interval contains; rounding moves it by at most half
/// an ulp); the per-class accuracies, the test set's tie share and the selection shares,
/// counts over n the twin rounds once, inside their outward-rounded intervals; the
/// per-class mean S_i, a sum of n rounded terms divided in f64, within n ulps. A binary
/// certificate still has neither record.
#[test]
fn k_class_certificates_enclose_the_per_class_records() {
    use tokensel::prelude::analysis::certify::{self, Interval, Options};
    let cfg = multiclass(small(3, Mode::P, Method::Span, 60), 3);
    let data = Dataset::generate(&cfg);
    let cert = certify::certify(&cfg, &data, &Options::default(), &mut |_, _| {}).unwrap();
    let twin = Trainer::run(&cfg, &data, Mpfr::truth(1024).unwrap(), &mut |_| {}).unwrap();
    assert_eq!(cert.checkpoints.len(), twin.checkpoints.len());
    let ulps_outside = |v: f64, iv: Interval| {
        let ulp = f64::from_bits(v.abs().to_bits() + 1) - v.abs();
        (iv.lo() - v).max(v - iv.hi()).max(0.0) / ulp
    };
    let n = cfg.n_train as f64;
    let (mut outputs, mut shares) = (0usize, 0usize);
    for (c, t) in cert.checkpoints.iter().zip(&twin.checkpoints) {
        let step = c.step;
        assert_eq!(step, t.step);
        for (i, (sc, st)) in c.samples.iter().zip(&t.samples).enumerate() {
            let (ic, ft) = (sc.outputs.as_ref(), st.outputs.as_ref());
            let (ic, ft) = (ic.expect("K outputs"), ft.expect("twin's outputs"));
            assert_eq!(ic.len(), 3);
            for (k, (iv, v)) in ic.iter().zip(ft).enumerate() {
                let d = ulps_outside(*v, *iv);
                assert!(
                    d <= 0.5,
                    "step {step} sample {i} f_{k}: {v:e} is {d} ulps outside {iv:?}"
                );
                outputs += 1;
            }
        }
        let (kc, kt) = (
            c.classes.as_ref().expect("classes"),
            t.classes.as_ref().unwrap(),
        );
        let mut inside = |what: &str, v: Option<f64>, iv: Option<Interval>| {
            assert_eq!(v.is_some(), iv.is_some(), "step {step} {what}");
            if let (Some(v), Some(iv)) = (v, iv) {
                assert!(
                    iv.lo() <= v && v <= iv.hi(),
                    "step {step} {what}: {v} not in {iv:?}"
                );
                shares += 1;
            }
        };
        for (k, (v, iv)) in kt.train_accuracy.iter().zip(&kc.train_accuracy).enumerate() {
            inside(&format!("train accuracy of class {k}"), *v, *iv);
        }
        for (k, (v, iv)) in kt.test_accuracy.iter().zip(&kc.test_accuracy).enumerate() {
            inside(&format!("test accuracy of class {k}"), *v, *iv);
        }
        assert_eq!(kc.train_accuracy.len(), 3);
        assert_eq!(kc.test_accuracy.len(), 3);
        inside("test tie", Some(kt.test_tie), Some(kc.test_tie));
        inside(
            "test undecided",
            Some(kt.test_undecided),
            Some(kc.test_undecided),
        );
        for (set, (v, iv)) in [
            ("clean", (kt.selection.clean, kc.selection.clean)),
            ("noisy", (kt.selection.noisy, kc.selection.noisy)),
        ] {
            assert_eq!(v.is_some(), iv.is_some(), "step {step} {set} selection");
            if let (Some(v), Some(iv)) = (v, iv) {
                for (j, (v, iv)) in v.to_array().iter().zip(iv.to_array()).enumerate() {
                    inside(&format!("{set} selection {j}"), Some(*v), Some(iv));
                }
            }
        }
        assert_eq!(kc.selection_score.len(), 3);
        for (k, (v, iv)) in kt
            .selection_score
            .iter()
            .zip(&kc.selection_score)
            .enumerate()
        {
            assert_eq!(v.is_some(), iv.is_some(), "step {step} S of class {k}");
            if let (Some(v), Some(iv)) = (v, iv) {
                let d = ulps_outside(*v, *iv);
                assert!(
                    d <= n,
                    "step {step} mean S of class {k}: {v} is {d} ulps outside {iv:?}"
                );
            }
        }
    }
    assert!(outputs > 0 && shares > 0);
    // the run moved: some class's mean S_i differs between the first and last checkpoint
    let (first, last) = (&twin.checkpoints[0], twin.last());
    assert_ne!(
        first.classes.as_ref().unwrap().selection_score,
        last.classes.as_ref().unwrap().selection_score
    );
    // a binary certificate has neither record
    let binary = small(3, Mode::P, Method::Span, 10);
    let data = Dataset::generate(&binary);
    let cert = certify::certify(&binary, &data, &Options::default(), &mut |_, _| {}).unwrap();
    assert!(cert.checkpoints.iter().all(|c| c.classes.is_none()));
    assert!(
        cert.checkpoints
            .iter()
            .all(|c| c.samples.iter().all(|s| s.outputs.is_none()))
    );
}

/// A K-class trajectory's CSV carries the per-class columns, its JSON the K outputs per
/// sample and the per-class metrics; a binary trajectory has neither (its files keep
/// their bytes).
#[test]
fn k_class_files_carry_the_per_class_record() {
    let cfg = multiclass(
        Config {
            n_train: 9,
            n_test: 12,
            steps: 50,
            d: 30,
            ..Config::default()
        },
        3,
    );
    let t = common::run_f64(&cfg);
    let csv = t.to_csv();
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    for col in [
        "train_accuracy_class_2",
        "test_accuracy_class_0",
        "test_tie",
        "class_selection_noisy_W_observed",
        "selection_score_class_1",
    ] {
        assert!(head.contains(&col), "{col}: {head:?}");
    }
    for row in csv.lines().skip(1) {
        assert_eq!(row.split(',').count(), head.len(), "{row}");
    }
    let json: serde_json::Value = serde_json::from_str(&t.to_json()).unwrap();
    let c = &json["checkpoints"][1];
    assert_eq!(c["samples"][0]["outputs"].as_array().unwrap().len(), 3);
    assert_eq!(c["classes"]["test_accuracy"].as_array().unwrap().len(), 3);
    let bin = common::run_f64(&Config {
        model: ModelSpec::default(),
        ..small(0, Mode::P, Method::Span, 5)
    });
    let text = bin.to_json();
    assert!(!text.contains("outputs") && !text.contains("\"classes\""));
    assert!(!bin.to_csv().contains("class_selection"));
}

/// Bad `[model]` sections are refused before any work, with exit code 2 and the field's
/// name; K-class configs are refused by the commands that are binary only.
#[test]
fn bad_model_sections_are_refused_with_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let k3 =
        "[model]\nkind = \"multiclass\"\nclasses = 3\n[layout]\ntokens = 9\nweak_opposite = 2\n";
    for (text, needle) in [
        (
            "[model]\nkind = \"multiclass\"\nclasses = 1\n",
            "model.classes",
        ),
        (
            "[model]\nkind = \"multiclass\"\nclasses = 101\n",
            "model.classes",
        ),
        (
            "[model]\nkind = \"token-selection\"\nclasses = 3\n",
            "model.classes",
        ),
        (
            // a layout the user sets is kept (and checked); without one it follows K
            "[model]\nkind = \"multiclass\"\nclasses = 3\n[layout]\ntokens = 8\n",
            "layout.weak_opposite",
        ),
        ("[model]\nkind = \"softmax\"\n", "kind"),
        (
            "[model]\nkind = \"multiclass\"\nclasses = 2\nheads = 2\n",
            "heads",
        ),
        (
            "d = 2\n[model]\nkind = \"multiclass\"\nclasses = 3\n[layout]\ntokens = 9\nweak_opposite = 2\n",
            "d",
        ),
        (
            &format!("formulation = \"naive\"\nmethod = \"direct\"\n{k3}"),
            "formulation",
        ),
    ] {
        let path = file("bad.toml", text);
        let o = common::tokensel(&["run", "--config", &path, "--steps", "1", "--quiet"]);
        assert_eq!(o.status.code(), Some(2), "{text}: {}", common::stderr(&o));
        assert!(
            common::stderr(&o).contains(needle),
            "{text}: {}",
            common::stderr(&o)
        );
    }
    let path = file("k3.toml", k3);
    let out = dir.path().join("g");
    let out = out.to_str().unwrap();
    for args in [
        vec!["saturation", "--config", &path],
        vec!["svm", "--config", &path],
        vec![
            "grid",
            "--config",
            &path,
            "--seeds",
            "0",
            "--set",
            "eta=0.1,0.2",
            "--out",
            out,
        ],
    ] {
        let o = common::tokensel(&args);
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("binary token-selection model only"),
            "{args:?}: {err}"
        );
        // the refusal names the command, the capability it lacks and the config key
        let cap = match args[0] {
            "grid" => "grid_metrics",
            c => c,
        };
        let want = format!("`model.kind`: {} needs the capability `{cap}`", args[0]);
        assert!(err.contains(&want), "{args:?}: {err}");
    }
}

/// `diff` compares a K-class trajectory's outputs and per-class record: a copy with one
/// output or one per-class accuracy changed differs (exit 1, naming the quantity); an
/// unchanged copy agrees bit for bit; a K-class against a binary trajectory is refused
/// (exit 2: their f and labels mean different things).
#[test]
fn diff_reads_the_k_class_record_and_refuses_other_models() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = multiclass(
        Config {
            n_train: 9,
            n_test: 12,
            steps: 30,
            d: 30,
            ..Config::default()
        },
        3,
    );
    let t = common::run_f64(&cfg);
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    std::fs::write(path("a.json"), t.to_json()).unwrap();
    let edit = |name: &str, f: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value = serde_json::from_str(&t.to_json()).unwrap();
        f(&mut v);
        std::fs::write(path(name), v.to_string()).unwrap();
    };
    edit("outputs.json", &|v| {
        let o = &mut v["checkpoints"][2]["samples"][0]["outputs"][1];
        *o = serde_json::json!(o.as_f64().unwrap() + 0.5);
    });
    edit("accuracy.json", &|v| {
        v["checkpoints"][2]["classes"]["test_accuracy"][0] = serde_json::json!(0.125);
    });
    let same = common::tokensel(&["diff", &path("a.json"), &path("a.json")]);
    assert_eq!(same.status.code(), Some(0), "{}", common::stderr(&same));
    for (file, quantity) in [
        ("outputs.json", "samples.outputs"),
        ("accuracy.json", "classes.test_accuracy"),
    ] {
        let o = common::tokensel(&["diff", &path("a.json"), &path(file)]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(1), "{file}: {out}");
        assert!(out.contains(quantity), "{file}: {out}");
    }
    let bin = common::run_f64(&Config {
        model: ModelSpec::default(),
        layout: Config::default().layout,
        ..cfg.clone()
    });
    std::fs::write(path("bin.json"), bin.to_json()).unwrap();
    let o = common::tokensel(&["diff", &path("a.json"), &path("bin.json")]);
    assert_eq!(o.status.code(), Some(2), "{}", common::stderr(&o));
    assert!(
        common::stderr(&o).contains("multiclass (K = 3)"),
        "{}",
        common::stderr(&o)
    );
}

/// A claim's K-class quantity is checked against the config's model before any work: a
/// class index at or past K, a non-canonical index, or a K-class path on a binary config
/// is refused (exit 2) naming the quantity.
#[test]
fn k_class_claim_paths_are_checked_before_work() {
    let dir = tempfile::tempdir().unwrap();
    let k3 = r#"config = { model = { kind = "multiclass", classes = 3 }, layout = { tokens = 9, weak_opposite = 2 }, steps = 100000 }"#;
    for (config, quantity, needle) in [
        (k3, "classes/train_accuracy/3", "class index (K) 0..2"),
        (k3, "classes/test_accuracy/00", "class index (K) 0..2"),
        (
            "config = { steps = 100000 }",
            "classes/train_accuracy/0",
            "binary model",
        ),
    ] {
        let o = common::check_one_claim(dir.path(), config, "", quantity);
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{quantity}: {err}");
        assert!(err.contains(needle), "{quantity}: {err}");
    }
}

/// The trainer generic over its model: `Trainer<F64, Multiclass>` and
/// `Trainer<F64, TokenSelection>`, built with `Trainer::with_model`, record the same
/// trajectory, bit for bit, as the config's dispatched `Trainer<F64, AnyModel>` (the
/// same operations in the same order: any difference is a bug of the generic path, so
/// the comparison is exact), in p- and joint mode, direct and span; a model whose
/// outputs differ from the config's is refused before any work.
#[test]
fn the_trainer_generic_over_the_model_equals_the_dispatched_one() {
    fn same<M: Model>(cfg: &Config, model: M) {
        let data = Dataset::generate(cfg);
        let init = Params::init(cfg);
        let run = |mut tr: Trainer<'_, F64, M>| {
            let t = tr.record(None, &mut |_, _| Ok(())).unwrap();
            serde_json::to_string(&t).unwrap()
        };
        let dispatched = Trainer::from_params(cfg, &data, F64, cfg.formulation, cfg.method, &init)
            .unwrap()
            .record(None, &mut |_, _| Ok(()))
            .unwrap();
        let generic =
            Trainer::with_model(cfg, &data, F64, cfg.formulation, cfg.method, &init, model)
                .unwrap();
        assert_eq!(
            run(generic),
            serde_json::to_string(&dispatched).unwrap(),
            "{:?} {:?} {:?}",
            model,
            cfg.mode,
            cfg.method
        );
    }
    for (mode, method) in [(Mode::P, Method::Direct), (Mode::Joint, Method::Span)] {
        let bin = small(3, mode, method, 30);
        same(&bin, TokenSelection);
        let k3 = multiclass(bin.clone(), 3);
        same(&k3, Multiclass { classes: 3 });
        let data = Dataset::generate(&k3);
        let err = Trainer::with_model(
            &k3,
            &data,
            F64,
            k3.formulation,
            k3.method,
            &Params::init(&k3),
            Multiclass { classes: 4 },
        )
        .unwrap_err();
        assert!(err.to_string().contains("model"), "{err}");
        // a model the config does not name, and data made for another config, are
        // refused (they indexed past the head's end, or trained silently)
        let bin_data = Dataset::generate(&bin);
        let init = Params::init(&bin);
        let form = bin.formulation;
        let e = Trainer::with_model(
            &bin,
            &bin_data,
            F64,
            form,
            method,
            &init,
            Multiclass { classes: 1 },
        );
        assert!(e.unwrap_err().to_string().contains("[model]"));
        let k2 = multiclass(bin.clone(), 2);
        for (cfg, data) in [
            (&k2, &bin_data),
            (&k3, &Dataset::generate(&k2)),
            (&bin, &data),
        ] {
            let e = Trainer::from_params(cfg, data, F64, form, method, &Params::init(cfg));
            assert!(e.unwrap_err().to_string().contains("data"));
        }
    }
}

/// `plot` draws a K-class trajectory in four panels under a title naming the model: the
/// attention per token group, the test accuracy per true class (one line per class for
/// K = 3; min, mean and max across the classes tested for K = 9 > 8), and the top token
/// of the clean and of the noisy samples by the K-class groups; SVG and PNG. A binary
/// trajectory's plot stays one chart, titled with its model.
#[test]
fn plot_draws_the_k_class_panels() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let base = Config {
        n_train: 10,
        n_test: 12,
        steps: 30,
        d: 30,
        ..Config::default()
    };
    // K = 9 with every class in the test set, and with 4 test samples (5 classes without)
    for (k, n_test) in [(3, 40), (9, 40), (9, 4)] {
        let t = common::run_f64(&multiclass(
            Config {
                n_test,
                ..base.clone()
            },
            k,
        ));
        let noisy = t.y.iter().zip(&t.y_true).filter(|(a, b)| a != b).count();
        assert!(noisy > 0 && noisy < t.y.len(), "both panels drawn: {noisy}");
        std::fs::write(path("t.json"), t.to_json()).unwrap();
        let o = common::tokensel(&["plot", &path("t.json"), "--out", &path("k.svg")]);
        assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
        let svg = std::fs::read_to_string(path("k.svg")).unwrap();
        let title = format!(
            "multiclass, K = {k}: f64 53 bits, d = 30, ||mu|| = 20, n = 10 ({noisy} noisy), seed 0"
        );
        assert!(svg.contains(&title), "K = {k}: {svg}");
        let m = t.last().classes.as_ref().unwrap();
        let tested = m.test_accuracy.iter().flatten().count();
        assert_eq!(tested == k, n_test == 40, "K = {k}, n_test = {n_test}");
        let accuracy = match (k, tested) {
            (3, _) => "test accuracy per true class".to_string(),
            (_, 9) => format!("test accuracy: min, mean, max over the {k} true classes"),
            _ => format!("test accuracy: min, mean, max over the {tested} of {k} classes tested"),
        };
        for panel in [
            "attention per token group (W_opposite: other classes' weak tokens)".to_string(),
            accuracy,
            format!("top token of the {} clean training samples", 10 - noisy),
            format!("top token of the {noisy} noisy training samples"),
        ] {
            assert!(
                svg.contains(&format!(">{panel}</text>")),
                "K = {k}: {panel}"
            );
        }
        assert_eq!(svg.matches("<g transform").count(), 4, "four panels");
        // attention 4 groups x clean/noisy, accuracy 3 lines and the whole test set, the
        // 7 K-class groups for clean and for noisy samples
        assert_eq!(svg.matches("<polyline").count(), 8 + 4 + 7 + 7, "K = {k}");
        let lines: &[&str] = match k {
            3 => &["class 0", "class 1", "class 2"],
            _ => &["min", "mean", "max"],
        };
        for name in lines
            .iter()
            .chain(&["R", "W_true", "W_observed", "W_other", "tie"])
        {
            assert!(
                svg.contains(&format!(">{name} = ")) || svg.contains(&format!(">{name} → ")),
                "K = {k}: {name}"
            );
        }
        // the legend gives the last value: the whole test set's accuracy
        let last = format!("{:.3}", t.last().test_accuracy);
        let last = last.trim_end_matches('0').trim_end_matches('.');
        assert!(
            svg.contains(&format!(">all classes = {last}<"))
                || svg.contains(&format!(">all classes → {last}<")),
            "K = {k}: {last}"
        );
        let o = common::tokensel(&["plot", &path("t.json"), "--out", &path("k.png")]);
        assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
        let png = std::fs::read(path("k.png")).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let size = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
        assert_eq!(
            (size(16), size(20)),
            (2 * 720, 36 + 2 * 440),
            "2 x 2 panels"
        );
    }
    let bin = common::run_f64(&base);
    std::fs::write(path("b.json"), bin.to_json()).unwrap();
    let o = common::tokensel(&["plot", &path("b.json"), "--out", &path("b.svg")]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let svg = std::fs::read_to_string(path("b.svg")).unwrap();
    assert!(svg.contains("attention per token group (binary token selection, f64 53 bits"));
    assert!(!svg.contains("<g transform") && !svg.contains("W_observed"));
}

/// The K = 3 model through the conformance helper (`common::conformance`: the predictor,
/// 1 and 2 threads, the balls around the twin, the gradient against a Richardson
/// difference of the twin's loss, resume, diff's sensitivity to every leaf of the last
/// checkpoint), in p- and joint mode at the helper's sizes (T grown to 10 for the other
/// classes' weak tokens).
#[test]
fn k_class_conforms() {
    use common::conformance::{Checks, conform, sized};
    for mode in [Mode::P, Mode::Joint] {
        conform(&multiclass(sized(mode), 3), Checks::all());
    }
}

/// `compare` measures a K-class run's `output` as the K outputs f_c of each sample (the
/// quantity judge measures, `Trainer::quantity`), not the margin f_Y - max_{c != Y} f_c:
/// with the ball trainer in lockstep (K = 3, p-mode span run, 20 steps), the outputs
/// measured against their enclosures are K per sample, K times the 1 - s_top values
/// (one per sample), and the 256-bit twin's outputs lie inside the 128-bit enclosures.
#[test]
fn compare_measures_the_k_outputs() {
    use tokensel::prelude::Quantity;
    use tokensel::prelude::analysis::compare;
    let k = 3;
    let cfg = multiclass(small(0, Mode::P, Method::Span, 20), k);
    let data = Dataset::generate(&cfg);
    let opts = compare::Options {
        prec: 256,
        tol: 1e-8,
        predictor: false,
        predictor_steps: None,
        twin_method: Method::Span,
        certify: Some(128),
    };
    let r = compare::compare(&cfg, &data, opts, &mut |_| {}).unwrap();
    let e = r.enclosure.as_ref().unwrap();
    let (out, rest) = (e.f64[&Quantity::Output], e.f64[&Quantity::Rest]);
    assert!(rest.compared > 0, "{rest:?}");
    assert_eq!(out.compared, k as u64 * rest.compared, "{out:?} {rest:?}");
    assert_eq!(e.twin[&Quantity::Output].outside, 0, "{e:?}");
    assert!(r.error_ulps.contains_key(&Quantity::Output));
}

/// The layout follows K unless the user sets it (issue 42): `kind = "multiclass"` with
/// `classes = 3` (or 5) and nothing else was refused ("weak_opposite must be a multiple
/// of K - 1"); it now gets one weakly relevant token per other class (T = K + 6 on the
/// balanced sizes, `cost --classes`'s layout) and runs. A layout the user sets is kept
/// and still validated (a wrong one refused, exit 2); K = 2 keeps the binary layout.
#[test]
fn the_layout_follows_k_unless_set() {
    let dir = tempfile::tempdir().unwrap();
    // `run` 3 steps of the config `text`, written to `name`
    let run = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        common::tokensel(&[
            "run",
            "--quiet",
            "--steps",
            "3",
            "--config",
            path.to_str().unwrap(),
        ])
    };
    for k in [2usize, 3, 5] {
        let text = format!("[model]\nkind = \"multiclass\"\nclasses = {k}\n");
        let cfg = Config::from_toml_str(&text, std::path::Path::new("k.toml")).unwrap();
        let l = cfg.layout;
        assert_eq!((l.tokens, l.weak_opposite), (k + 6, k - 1), "K = {k}");
        assert_eq!(
            (l.relevant, l.weak_same, l.irrelevant),
            (1, 1, 5),
            "K = {k}"
        );
        let o = run(&format!("k{k}.toml"), &text);
        assert!(o.status.success(), "K = {k}: {}", common::stderr(&o));
    }
    let wrong = "[model]\nkind = \"multiclass\"\nclasses = 3\n[layout]\ntokens = 8\nrelevant = 1\nweak_same = 1\nweak_opposite = 1\nirrelevant = 5\n";
    let e = Config::from_toml_str(wrong, std::path::Path::new("w.toml")).unwrap_err();
    assert!(e.to_string().contains("multiple of K - 1 = 2"), "{e}");
    let o = run("wrong.toml", wrong);
    assert_eq!(o.status.code(), Some(2), "{}", common::stderr(&o));
    let kept = wrong
        .replace("tokens = 8", "tokens = 9")
        .replace("weak_opposite = 1", "weak_opposite = 2");
    let l = Config::from_toml_str(&kept, std::path::Path::new("k.toml"))
        .unwrap()
        .layout;
    assert_eq!((l.tokens, l.weak_opposite, l.irrelevant), (9, 2, 5));
}
