//! The float32 trainer (`Trainer<F32>`) against the f64 trainer, in lockstep, in every
//! mode, formulation and method: attention and loss differ by more than f64 rounding
//! (it IS float32) and by less than a first-order float32 error bound (named below).

mod common;

use tokensel::prelude::{
    Arith, Config, Dataset, Engine, F32, F64, Formulation, Method, Mode, Trainer,
};

/// binary32's unit roundoff.
const U: f64 = 1.0 / (1u64 << 24) as f64;

/// gamma_n = n u / (1 - n u).
fn gamma(n: usize) -> f64 {
    n as f64 * U / (1.0 - n as f64 * U)
}

/// The absolute-value version of q's formula in the f32 trainer: |q| (direct, W = I),
/// |W|^T |p| (direct, dense W), |p(0)| + sum_j |a_j| |x_j| (span, p-mode, W = I): the
/// scale of the rounding errors of the scores (each z_t's error is at most gamma_N
/// sum_k |x_tk| Q_k).
fn abs_q(tr: &Trainer<'_, F32>, x: &[f64], d: usize) -> Vec<f64> {
    match &tr.engine {
        Engine::Direct(e) => match e.w() {
            None => e.q.iter().map(|v| v.abs() as f64).collect(),
            Some(w) => {
                let mut q = vec![0.0; d];
                for (m, pm) in e.p().iter().enumerate() {
                    for (k, qk) in q.iter_mut().enumerate() {
                        *qk += (w[m * d + k].abs() * pm.abs()) as f64;
                    }
                }
                q
            }
        },
        Engine::Span(e) => {
            let (p, _) = tr.params();
            let mut q: Vec<f64> = p.iter().map(|_| 0.0).collect();
            for (j, aj) in e.a.iter().enumerate().skip(1) {
                for (k, qk) in q.iter_mut().enumerate() {
                    *qk += (aj.abs() as f64) * x[(j - 1) * d + k].abs();
                }
            }
            q
        }
    }
}

/// Lockstep over `cfg.steps` steps. The bound (first order: products of error terms
/// dropped), for the forward pass at the f32 trainer's own parameters: with N =
/// ceil(d/16) + ceil(nT/16) + 2T + 12 (the longest chain of roundings of one forward
/// pass: the data's rounding to binary32, a fixed-pattern dot of length d, the span's
/// Gram and matrix-vector product, softmax and output over T tokens), the score z_t
/// errs by at most dz_t = |<x_t, q32 - q64>| + gamma_N sum_k |x_tk| Q_k (the measured
/// parameter drift plus this pass's rounding; Q from [`abs_q`]). Softmax is
/// 2-Lipschitz in the max norm (|ds_t| <= s_t sum_u s_u |dz_t - dz_u|), plus its own
/// (T + 4) u: ds = 2 max dz + (T + 4) u. The output f = sum_t s_t g_t with |g_t| <= G
/// (each g_t a rounded dot, error gamma_N G): df = T G ds + 2 gamma_N G; the loss is
/// 1-Lipschitz in f, plus the rounding of l and of the mean: dL = df + (n + 4) u. The
/// drift itself is bounded by the accumulation of one such score error per step:
/// max_t |<x_t, q32 - q64>| <= (step + 1) gamma_N max_t sum_k |x_tk| Q_k (the initial
/// parameters are rounded to binary32 too). Returns the largest
/// observed fraction of the forward bounds.
fn lockstep(cfg: &Config, method: Method, form: Formulation) -> f64 {
    let data = Dataset::generate(cfg);
    let (n, t, d) = data.train.x.dim();
    let x = tokensel::prelude::train::train_rows(&data);
    let mut a = Trainer::with_method(cfg, &data, F32, form, method).unwrap();
    let mut b = Trainer::with_method(cfg, &data, F64, form, method).unwrap();
    let big_n = d.div_ceil(16) + (n * t).div_ceil(16) + 2 * t + 12;
    let (mut worst, mut largest_ds) = (0.0f64, 0.0f64);
    for step in 0..=cfg.steps {
        a.forward_backward().unwrap();
        b.forward_backward().unwrap();
        let q = abs_q(&a, x, d);
        let s_max = (0..n * t)
            .map(|r| (0..d).map(|k| x[r * d + k].abs() * q[k]).sum::<f64>())
            .fold(0.0, f64::max);
        // |g_t| = |<nu, x_t>| <= ||x_t|| / ||mu|| (||nu|| = 1 / ||mu||)
        let g = (0..n * t)
            .map(|r| {
                x[r * d..(r + 1) * d]
                    .iter()
                    .map(|v| v * v)
                    .sum::<f64>()
                    .sqrt()
            })
            .fold(0.0, f64::max)
            / data.mu_norm;
        let (q32, q64) = (a.q(), b.q());
        let drift = (0..n * t)
            .map(|r| {
                let row = &x[r * d..(r + 1) * d];
                row.iter()
                    .zip(q32.iter().zip(&q64))
                    .map(|(v, (p, q))| v * (*p as f64 - q))
                    .sum::<f64>()
                    .abs()
            })
            .fold(0.0, f64::max);
        let scale = gamma(big_n) * s_max;
        assert!(
            drift <= (step as f64 + 1.0) * scale,
            "step {step}: drift {drift:e}"
        );
        let dz = drift + scale;
        let ds = 2.0 * dz + (t as f64 + 4.0) * U;
        let df = t as f64 * g * ds + 2.0 * gamma(big_n) * g;
        let dl = df + (n as f64 + 4.0) * U;
        for (sa, sb) in a.attention.iter().zip(&b.attention) {
            let e = (*sa as f64 - sb).abs();
            assert!(e <= ds, "step {step}: |ds| {e:e} above {ds:e}");
            worst = worst.max(e / ds);
            largest_ds = largest_ds.max(e);
        }
        let e = (a.loss as f64 - b.loss).abs();
        assert!(e <= dl, "step {step}: |dL| {e:e} above {dl:e}");
        worst = worst.max(e / dl);
        if step < cfg.steps {
            a.update().unwrap();
            b.update().unwrap();
        }
    }
    // float32, not f64 in disguise: some attention differs by more than f64 rounding
    assert!(largest_ds > 1e-12, "largest |ds| {largest_ds:e}");
    worst
}

/// p-mode (direct stable and naive, span), W-mode and joint mode (direct), 20 steps of a
/// small setting: within the bound of [`lockstep`] at every step.
#[test]
fn f32_trainer_stays_within_float32_error_of_f64() {
    let base = Config {
        d: 64,
        n_train: 6,
        n_test: 3,
        mu_norm: 3.0,
        step_size: 0.05,
        steps: 20,
        layout: common::layout([1, 1, 1, 1]),
        ..Config::default()
    };
    let runs = [
        (Mode::P, Method::Direct, Formulation::Stable),
        (Mode::P, Method::Direct, Formulation::Naive),
        (Mode::P, Method::Span, Formulation::Stable),
        (Mode::W, Method::Direct, Formulation::Stable),
        (Mode::Joint, Method::Direct, Formulation::Stable),
    ];
    for (mode, method, form) in runs {
        let cfg = if mode == Mode::P {
            Config {
                mode,
                ..base.clone()
            }
        } else {
            common::with_init(base.clone(), mode, 0.5, true)
        };
        cfg.validate().unwrap();
        let worst = lockstep(&cfg, method, form);
        eprintln!("{mode:?} {method:?} {form:?}: largest error / bound {worst:.3}");
    }
}

/// A float32 trainer reports its kind and precision, and its state round-trips bit for
/// bit through the exact text.
#[test]
fn f32_trainer_info_and_state() {
    let cfg = Config {
        d: 16,
        n_train: 3,
        n_test: 3,
        steps: 3,
        ..Config::default()
    };
    let data = Dataset::generate(&cfg);
    let mut tr = Trainer::new(&cfg, &data, F32, cfg.formulation).unwrap();
    assert_eq!(tr.info().kind.name(), "f32");
    assert_eq!(tr.info().prec_bits, 24);
    tr.forward_backward().unwrap();
    tr.update().unwrap();
    let st = tr.state(&tokensel::prelude::train::record::Recorder::new(&cfg));
    let mut back = Trainer::new(&cfg, &data, F32, cfg.formulation).unwrap();
    back.restore(&st).unwrap();
    assert_eq!(
        F32.to_exact_string(&tr.q()[0]),
        F32.to_exact_string(&back.q()[0])
    );
}
