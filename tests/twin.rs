//! The MPFR truth twin against the f64 trainer, away from saturation: every recorded
//! quantity of every checkpoint, within tolerances derived from a stated error bound.
//!
//! The bound (first order in u = 2^-53; the twin's own error, ~2^-250 relative, is
//! below every term):
//! - **drift of q**: each f64 step makes a local error l_j = |Phi64(q_j) - Phi(q_j)|,
//!   measured exactly here (the twin takes one step from the f64 trainer's own q_j).
//!   If the exact step map Phi(q) = q - alpha dL/dq does not expand distances along
//!   the path (|I - alpha H| <= 1: steps small against the curvature H), the drift
//!   |q64(tau) - q(tau)| is at most B(tau) = sum_{j < tau} l_j; the test asserts it.
//! - **scores**: |z64_t - z_t| <= |x_t| B + (ceil(d/16) + 5) u sum_k |x_tk q_k| =: D
//!   (Cauchy-Schwarz, and the fixed-order dot kernel's rounding).
//! - **softmax**: scores moved by at most D change each s_t by a factor in
//!   [e^{-2D}, e^{2D}]; the f64 softmax adds a relative (|z_t - z_top| + T + 4) u
//!   (tests/exact.rs), so s_t is within sigma_t s_t, sigma_t = e^{2D} - 1 + that.
//! - masses and 1 - s_top (sums of s_t, and a quotient): 2 (sigma + (T + 1) u) of their
//!   value; S_i = m_R (1 - m_R): 4 (sigma + (T + 1) u) + 2 u; the gap: 2 D + u |gap|
//!   (and where the top tokens differ, the twin's gap is below 2 D).
//! - **f** = g_top + sum s_j (g_j - g_top): 2 (sigma + (T + 2) u) max_t |g_t| for the
//!   attention and the sums, plus (d + 8) u max_t sum_k |x_tk nu_k| for the head values.
//! - losses: max |delta f| (|l'| <= 1) plus (n + 6) u of the loss; accuracies: equal
//!   where every margin |f| exceeds its tolerance (asserted), the test set's margins
//!   taken from the f64 outputs at the f64 q.
//! - grad_norm: |X|^T |delta c| with delta c_t from delta s, delta f and
//!   delta coef <= |delta f| / (4 n) + 4 u |coef|, plus gamma_{nT} |X|^T |c|; q_norm: B
//!   plus (d + 2) u |q|; the cumulative S sums: the sums of the per-step S tolerances.

use tokensel::prelude::train::drive::{Control, Event, drive};
use tokensel::prelude::train::record::Recorder;
use tokensel::prelude::{
    Checkpoint, Config, Dataset, F64, Formulation, Method, Mode, Mpfr, Params, Trainer, kernels,
};

const U: f64 = f64::EPSILON / 2.0;

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// The tolerances of one step, from the drift budget B (module docs).
#[derive(Debug, Clone, Default)]
struct Tolerances {
    budget: f64,
    /// Tokens per sequence and the dimension.
    t: usize,
    dim: usize,
    /// Per training sample: scores' bound D, sigma, f's tolerance.
    d: Vec<f64>,
    sigma: Vec<f64>,
    f: Vec<f64>,
    /// Per training sample: the tolerance of S_i.
    s_score: Vec<f64>,
    grad_norm: f64,
    test_f: f64,
    /// Smallest |f| over the test set at the f64 q.
    test_margin: f64,
}

/// The tolerances at the f64 trainer's current state, for drift budget `budget`.
fn tolerances(a: &Trainer<'_, F64>, budget: f64) -> Tolerances {
    let (cfg, data) = (a.cfg, a.data);
    let (n, t, d) = data.train.x.dim();
    let m = d.div_ceil(16) + 5;
    let q = a.q();
    let nu = data.nu.as_slice().unwrap();
    let head = |x: &[f64]| x.iter().zip(nu).map(|(a, b)| (a * b).abs()).sum::<f64>();
    let score_bound = |x: &[f64]| {
        norm(x) * budget + m as f64 * U * x.iter().zip(&q).map(|(a, b)| (a * b).abs()).sum::<f64>()
    };
    let rows = data.train.x.as_slice().unwrap();
    let g_abs = rows.chunks(d).map(head).fold(0.0, f64::max);
    let mut tol = Tolerances {
        budget,
        t,
        dim: d,
        ..Tolerances::default()
    };
    let mut delta_c = vec![0.0; n * t];
    for i in 0..n {
        let xi = &rows[i * t * d..(i + 1) * t * d];
        let di = xi.chunks(d).map(score_bound).fold(0.0, f64::max);
        let z = &a.scores[i * t..(i + 1) * t];
        let top = a.samples[i].softmax.top;
        let spread = z.iter().map(|v| (z[top] - v).abs()).fold(0.0, f64::max);
        let sigma = (2.0 * di).exp_m1() + (spread + t as f64 + 4.0) * U;
        let g = data.train.g.row(i);
        let g_max = g.iter().map(|v| v.abs()).fold(0.0, f64::max);
        let tol_f = 2.0 * (sigma + (t as f64 + 2.0) * U) * g_max + (d as f64 + 8.0) * U * g_abs;
        // delta c_t = delta(coef s_t (g_t - f))
        let (coef, f) = (a.samples[i].coef.abs(), a.samples[i].f);
        let delta_coef = tol_f / (4.0 * n as f64) + 4.0 * U * coef;
        for k in 0..t {
            let s = a.attention[i * t + k];
            let gf = (g[k] - f).abs();
            delta_c[i * t + k] = delta_coef * s * gf + coef * (sigma * s * gf + s * tol_f);
        }
        tol.d.push(di);
        tol.sigma.push(sigma);
        tol.f.push(tol_f);
        tol.s_score
            .push(4.0 * (sigma + (t as f64 + 1.0) * U) + 2.0 * U);
    }
    // |X|^T |delta c| + gamma_{nT} |X|^T |c|
    let mut gx = vec![0.0; d];
    for (r, row) in rows.chunks(d).enumerate() {
        let w = delta_c[r] + (n * t + 1) as f64 * U * a.c[r].abs();
        for (o, x) in gx.iter_mut().zip(row) {
            *o += w * x.abs();
        }
    }
    tol.grad_norm = norm(&gx);
    // the test set: scores' bound, f's tolerance and the f64 margins at the f64 q
    let test_rows = data.test.x.as_slice().unwrap();
    let d_test = test_rows.chunks(d).map(score_bound).fold(0.0, f64::max);
    let g_test_max = data.test.g.iter().map(|v| v.abs()).fold(0.0, f64::max);
    let g_test_abs = test_rows.chunks(d).map(head).fold(0.0, f64::max);
    let spread_max = 60.0; // |z_t - z_top| on the test set stays below this (asserted)
    let sigma_test = (2.0 * d_test).exp_m1() + (spread_max + t as f64 + 4.0) * U;
    tol.test_f =
        2.0 * (sigma_test + (t as f64 + 2.0) * U) * g_test_max + (d as f64 + 8.0) * U * g_test_abs;
    tol.test_margin = f64::INFINITY;
    for i in 0..data.test.len() {
        let mut z = vec![0.0; t];
        kernels::scores(&F64, data.test.tokens(i), &q, &mut z);
        let zmax = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        assert!(z.iter().all(|v| zmax - v < spread_max));
        let mut s = vec![0.0; t];
        let mut att = kernels::Softmax::new(&F64);
        kernels::softmax(&F64, &z, &mut s, cfg.formulation, &mut att);
        let mut f = 0.0;
        let g = data.test.g.row(i).to_vec();
        kernels::output(&F64, &s, &g, att.top, cfg.formulation, &mut f);
        tol.test_margin = tol.test_margin.min(f.abs());
    }
    tol
}

/// `|a - b| <= tol`, with a message naming the quantity.
fn within(what: &str, a: f64, b: f64, tol: f64) {
    assert!(
        (a - b).abs() <= tol,
        "{what}: f64 {a:e} vs twin {b:e}, |diff| {:e} > tolerance {tol:e}",
        (a - b).abs()
    );
}

/// Every recorded number of checkpoint `a` (f64) against `b` (twin); `cum`: the
/// tolerances of the cumulative S sums before their own rounding.
fn compare_checkpoint(a: &Checkpoint, b: &Checkpoint, tol: &Tolerances, cum: &[f64; 4]) {
    assert_eq!(a.step, b.step);
    let at = |what: &str| format!("step {} {what}", a.step);
    let (n, t, d) = (a.samples.len() as f64, tol.t as f64, tol.dim as f64);
    let mut f_max = 0.0f64;
    let mut undecided = 0; // samples whose margin lies within f's tolerance
    let mut same_tops = true;
    let mut rel_max = 0.0f64;
    for (i, (sa, sb)) in a.samples.iter().zip(&b.samples).enumerate() {
        let (sigma, tf) = (tol.sigma[i], tol.f[i]);
        within(&at(&format!("sample {i} f")), sa.f, sb.f, tf);
        f_max = f_max.max(tf);
        undecided += usize::from(sb.f.abs() <= tf);
        same_tops &= sa.top == sb.top;
        if sa.top == sb.top {
            assert_eq!(sa.selection, sb.selection, "{}", at("selection"));
            within(
                &at(&format!("sample {i} gap")),
                sa.gap,
                sb.gap,
                2.0 * tol.d[i] + U * sb.gap.abs(),
            );
        } else {
            assert!(
                sb.gap <= 2.0 * tol.d[i],
                "{}: tops differ off a near tie",
                at("top")
            );
        }
        let rel = 2.0 * (sigma + (t + 1.0) * U);
        rel_max = rel_max.max(rel);
        within(
            &at(&format!("sample {i} rest")),
            sa.rest,
            sb.rest,
            rel * sb.rest,
        );
        for (ma, mb) in sa.mass.to_array().iter().zip(sb.mass.to_array()) {
            within(&at(&format!("sample {i} mass")), *ma, mb, rel * mb + U);
        }
        within(
            &at(&format!("sample {i} S_i")),
            sa.selection_score,
            sb.selection_score,
            tol.s_score[i] * sb.selection_score + U,
        );
    }
    within(
        &at("train_loss"),
        a.train_loss,
        b.train_loss,
        f_max + (n + 6.0) * U * b.train_loss,
    );
    // predictions agree wherever the margin exceeds f's tolerance
    let acc_diff = (a.train_accuracy - b.train_accuracy).abs();
    assert!(
        acc_diff * n <= undecided as f64 + 0.5,
        "{}",
        at("train_accuracy")
    );
    // a margin within ~1e-12 of zero is rare; more would leave the comparison vacuous
    assert!(
        undecided <= 1,
        "{}: {undecided} margins within tolerance",
        at("f")
    );
    if same_tops {
        assert_eq!(a.selection, b.selection, "{}", at("selection shares"));
    }
    // group means of the masses: the largest mass tolerance, plus the mean's rounding
    for (ga, gb) in [
        (a.attention.clean, b.attention.clean),
        (a.attention.noisy, b.attention.noisy),
    ] {
        if let (Some(ga), Some(gb)) = (ga, gb) {
            for (x, y) in ga.to_array().iter().zip(gb.to_array()) {
                within(&at("attention mean"), *x, y, rel_max + (n + 1.0) * U);
            }
        }
    }
    within(
        &at("q_norm"),
        a.q_norm,
        b.q_norm,
        tol.budget + (d + 2.0) * U * b.q_norm,
    );
    within(
        &at("grad_norm"),
        a.grad_norm,
        b.grad_norm,
        tol.grad_norm + (d + 2.0) * U * b.grad_norm,
    );
    // test set: every f64 margin exceeds the tolerance of f, so the signs (accuracy)
    // agree and the loss differs by at most that tolerance
    assert!(tol.test_margin > tol.test_f, "{}", at("test margin"));
    assert_eq!(a.test_accuracy, b.test_accuracy, "{}", at("test_accuracy"));
    let cs = [
        a.cumulative.clean,
        a.cumulative.noisy,
        a.cumulative.class_pos,
        a.cumulative.class_neg,
    ];
    let ct = [
        b.cumulative.clean,
        b.cumulative.noisy,
        b.cumulative.class_pos,
        b.cumulative.class_neg,
    ];
    // each sum adds n terms per step: (step + 1) n roundings of at most u of the sum
    let additions = (a.step as f64 + 1.0) * n;
    for k in 0..4 {
        within(
            &at("cumulative S"),
            cs[k],
            ct[k],
            cum[k] + additions * U * ct[k],
        );
    }
}

/// Away from saturation the f64 trainer agrees with the 256-bit twin (direct and span)
/// on every recorded quantity at every checkpoint, within the tolerances of the module
/// docs, and its q stays within the drift budget. The model is written once for every
/// arithmetic, so what this catches is what differs between them: an f64 kernel that
/// computes something else than the trait's (the F64 fast paths of dot, axpy, gemv, exp,
/// log1p), a span step that leaves the direct trajectory (the twin's span run against
/// the f64 direct run: a wrong Gram matrix, coefficient update or rebuild of q), a
/// recorder that reads the arithmetics differently (rounding the twin's values, the
/// cumulative sums), and a drift that outgrows the sum of the steps' local errors.
#[test]
fn truth_twin_agrees_with_f64_on_every_recorded_quantity() {
    let cfg = Config {
        d: 40,
        n_train: 8,
        n_test: 20,
        mu_norm: 4.0,
        steps: 150,
        step_size: 0.05,
        mode: Mode::P,
        formulation: Formulation::Stable,
        method: Method::Direct,
        ..Config::default()
    };
    let data = Dataset::generate(&cfg);
    let twin = Mpfr::truth(256).unwrap();
    let n = cfg.n_train;
    for method in [Method::Direct, Method::Span] {
        let a = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
        let b = Trainer::with_method(&cfg, &data, twin, cfg.formulation, method).unwrap();
        let (mut ra, mut rb) = (Recorder::new(&cfg), Recorder::new(&cfg));
        let mut budget = 0.0f64;
        let mut pending: Option<Vec<rug::Float>> = None; // the twin's step from q64(j)
        let mut cum = [0.0f64; 4];
        let mut tols = Vec::new();
        drive(&mut (a, b), cfg.steps, |(a, b), event| {
            if event == Event::Update {
                return Ok(Control::Continue);
            }
            let qa = a.q();
            // the local error of the step that led here, exactly
            if let Some(next) = pending.take() {
                let diff: Vec<f64> = next
                    .iter()
                    .zip(&qa)
                    .map(|(t, v)| (rug::Float::with_val(256, t - v)).to_f64())
                    .collect();
                budget += norm(&diff);
            }
            // q64 - q (the twin's), formed in 256 bits, then rounded
            let drift: Vec<f64> = b
                .q()
                .iter()
                .zip(&qa)
                .map(|(t, v)| rug::Float::with_val(256, t - v).to_f64())
                .collect();
            assert!(
                norm(&drift) <= budget * (1.0 + 1e-6) + 1e-60,
                "{method:?} step {}: drift {:e} above the budget {budget:e}",
                a.step,
                norm(&drift)
            );
            let tol = tolerances(a, budget);
            let (y, yt) = (&data.train.y, &data.train.y_true);
            let s_now = a.selection_scores();
            for i in 0..n {
                let e = tol.s_score[i] * s_now[i] + U;
                cum[if y[i] == yt[i] { 0 } else { 1 }] += e;
                cum[if yt[i] > 0 { 2 } else { 3 }] += e;
            }
            ra.observe(a);
            rb.observe(b);
            if ra.checkpoints.len() > tols.len() {
                tols.push((tol, cum));
            }
            // the twin's step from this very q, for the next local error
            let mut from = Trainer::from_params(
                &cfg,
                &data,
                twin,
                cfg.formulation,
                Method::Direct,
                &Params {
                    p: qa.clone().into(),
                    w: None,
                },
            )
            .unwrap();
            from.forward_backward().unwrap();
            from.update().unwrap();
            pending = Some(from.q());
            Ok(Control::Continue)
        })
        .unwrap();
        assert_eq!(ra.checkpoints.len(), tols.len());
        for ((ca, cb), (tol, cum)) in ra.checkpoints.iter().zip(&rb.checkpoints).zip(&tols) {
            compare_checkpoint(ca, cb, tol, cum);
        }
        assert!(budget > 0.0, "the f64 steps carry some rounding error");
    }
}
