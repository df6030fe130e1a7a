//! The real-setting model `OurAttention` with a trainable head
//! (`models::network::RealSetting`, proofs-notes/real-setting.md), as a network:
//! - every block's gradient is the derivative of the mean loss: Richardson-extrapolated
//!   central differences of the 512-bit twin's loss, with and without the bias, with a
//!   trainable and a fixed head (a fixed block's gradient is exactly 0);
//! - the predictor gives F64's bits, 1 and 2 threads the same bits, at a size where
//!   every parallel path of the pass is taken (asserted);
//! - F32 stays within a stated bound of F64;
//! - 128-bit balls enclose the 1024-bit twin's pass at d = 16;
//! - with W = I, no bias and nu fixed to the K-class config's head, the pass is the
//!   K-class p-mode trainer's, bit for bit.

mod common;

use ndarray::Array3;
use rug::Float;
use tokensel::prelude::kernels::worth_parallel;
use tokensel::prelude::models::network::{Blocks, Head, Network, Pass, RealSetting};
use tokensel::prelude::rng::Stream;
use tokensel::prelude::*;

/// The model at (d, T, K).
fn model(d: usize, t: usize, k: usize, head: Head, bias: bool) -> RealSetting {
    RealSetting {
        d,
        tokens: t,
        classes: k,
        head,
        bias,
    }
}

/// Data x (n, T, d) with entries U(-1, 1) and labels in [0, K), from a seeded stream.
fn data(seed: u64, n: usize, t: usize, d: usize, k: usize) -> (Array3<f64>, Vec<i8>) {
    let mut r = rng::stream(seed, Stream::Init);
    let x = Array3::from_shape_fn((n, t, d), |_| 2.0 * rng::uniform(&mut r) - 1.0);
    let y = (0..n).map(|i| (i % k) as i8).collect();
    (x, y)
}

/// Parameters in f64: the blocks' own draws (W orthogonal, nu uniform), with p and the
/// bias drawn too (their declared init is zeros, where dL/dW = g p^T vanishes) so that
/// every gradient entry is exercised.
fn params(m: &RealSetting, seed: u64) -> Vec<Vec<f64>> {
    let mut r = rng::stream(seed, Stream::HeadOrder);
    m.blocks()
        .iter()
        .map(|b| match b.name {
            "p" | "nu_bias" => (0..b.len())
                .map(|_| 2.0 * rng::uniform(&mut r) - 1.0)
                .collect(),
            _ => b.draw(seed).unwrap(),
        })
        .collect()
}

/// The f64 parameters in `ar` (exactly: f64, the predictor, the twin and balls hold
/// every f64; F32 rounds).
fn blocks<A: Arith>(ar: &A, m: &RealSetting, v: &[Vec<f64>]) -> Blocks<A::Real> {
    Blocks {
        decl: m.blocks(),
        values: v.iter().map(|b| ar.of_slice(b)).collect(),
    }
}

/// One pass with the gradient in `ar`.
fn run<A: Arith>(
    ar: &A,
    m: &RealSetting,
    x: &Array3<f64>,
    y: &[i8],
    theta: &Blocks<A::Real>,
) -> (Pass<A::Real>, Vec<Vec<A::Real>>) {
    let mut out = Pass::new(ar);
    let mut grad: Vec<Vec<A::Real>> = theta.values.iter().map(|v| ar.zeros(v.len())).collect();
    m.pass(ar, x.view(), y, theta, &mut out, Some(&mut grad));
    (out, grad)
}

/// Every value a pass produces, labelled, in one list: scores, attention, outputs,
/// losses, the loss, q, dL/dq and every block's gradient.
fn quantities<R: Clone>(out: &Pass<R>, grad: &[Vec<R>]) -> Vec<(String, Vec<R>)> {
    let mut v = vec![
        ("scores".to_string(), out.scores.clone()),
        ("attention".to_string(), out.attention.clone()),
        ("outputs".to_string(), out.outputs.clone()),
        ("losses".to_string(), out.losses.clone()),
        ("loss".to_string(), vec![out.loss.clone()]),
        ("q".to_string(), out.q.clone()),
        ("grad_q".to_string(), out.grad_q.clone()),
    ];
    for (i, g) in grad.iter().enumerate() {
        v.push((format!("grad block {i}"), g.clone()));
    }
    v
}

/// (a) Every trained block's gradient against Richardson's derivative of the twin's mean
/// loss, at d = 8, T = 5, K = 3, n = 4; a fixed block's gradient is exactly 0. With h =
/// 2^-24 the truncation error is h^4 |L^(5)| / 480 < 2^-96 |L^(5)| and the rounding error
/// 2^-512 |L| / h negligible: a tolerance of 1e-20 (1 + |g|) leaves |L^(5)| up to about
/// 4e8 (the loss is a composition of exp, log and products of entries of size <= 1
/// here); a missing or transposed term is wrong by O(1e-3) or more.
#[test]
fn every_block_gradient_is_the_derivative_of_the_mean_loss() {
    let ar = Mpfr::truth(512).unwrap();
    let (d, t, k, n) = (8, 5, 3, 4);
    let (x, y) = data(31, n, t, d, k);
    let h = Float::with_val(512, Float::i_exp(1, -24));
    for head in [Head::Trainable, Head::Fixed] {
        for bias in [false, true] {
            let m = model(d, t, k, head, bias);
            let v = params(&m, 5);
            let theta = blocks(&ar, &m, &v);
            let (_, grad) = run(&ar, &m, &x, &y, &theta);
            let lens: Vec<usize> = theta.values.iter().map(Vec::len).collect();
            let flat: Vec<Float> = theta.values.concat();
            let loss = |f: &[Float]| {
                let mut values = Vec::new();
                let mut at = 0;
                for l in &lens {
                    values.push(f[at..at + l].to_vec());
                    at += l;
                }
                let th = Blocks {
                    decl: m.blocks(),
                    values,
                };
                let mut out = Pass::new(&ar);
                m.pass(&ar, x.view(), &y, &th, &mut out, None);
                out.loss
            };
            let mut at = 0;
            for (b, g) in m.blocks().iter().zip(&grad) {
                let what = format!("{head:?}, bias {bias}, block {}", b.name);
                assert_eq!(g.len(), b.len(), "{what}");
                if !b.trained {
                    assert!(g.iter().all(|v| v.is_zero()), "{what}: a fixed block moves");
                } else {
                    for (j, gj) in g.iter().enumerate() {
                        let r = common::richardson(&loss, &flat, at + j, &h);
                        let err = Float::with_val(512, &r - gj).abs().to_f64();
                        assert!(
                            err <= 1e-20 * (1.0 + gj.to_f64().abs()),
                            "{what}[{j}]: backward {gj:.20e}, Richardson {r:.20e}"
                        );
                    }
                    // the gradient is not trivially 0
                    assert!(g.iter().any(|v| v.to_f64().abs() > 1e-6), "{what}");
                }
                at += b.len();
            }
            let trained: Vec<&str> = m
                .blocks()
                .iter()
                .filter(|b| b.trained)
                .map(|b| b.name)
                .collect();
            match head {
                Head::Trainable if bias => assert_eq!(trained, ["W", "p", "nu", "nu_bias"]),
                Head::Trainable => assert_eq!(trained, ["W", "p", "nu"]),
                Head::Fixed => assert_eq!(trained, ["W", "p"]),
            }
        }
    }
}

/// The size where every parallel path of the pass is taken in f64 on 2 threads: the
/// per-sample loop (n T (d + 4 K)), the head values (n T rows of K d), X^T c and dL/dnu
/// (n T d), q = W p, dL/dW and W^T dL/dq (d^2), each >= 2^16 operations.
const PAR: (usize, usize, usize, usize) = (32, 8, 256, 3);

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

fn assert_parallel(m: &RealSetting, n: usize) {
    let (t, d, k) = (m.tokens, m.d, m.classes);
    assert!(m.parallel(&F64, n), "per-sample loop");
    for (what, ops) in [
        ("head values", n * t * k * d),
        ("X^T c", n * t * d),
        ("W p, dL/dW, W^T g", d * d),
    ] {
        assert!(worth_parallel(&F64, ops), "{what}");
    }
}

/// (b) The f64 predictor (53-bit MPFR) gives F64's bits for every quantity of the pass,
/// on 2 threads at a size where every parallel path is taken.
#[test]
fn the_predictor_gives_f64s_bits_on_the_parallel_path() {
    let (n, t, d, k) = PAR;
    let (x, y) = data(41, n, t, d, k);
    let predictor = Mpfr::predictor();
    pool(2).install(|| {
        for bias in [false, true] {
            let m = model(d, t, k, Head::Trainable, bias);
            assert_parallel(&m, n);
            let v = params(&m, 6);
            let (o1, g1) = run(&F64, &m, &x, &y, &blocks(&F64, &m, &v));
            let (o2, g2) = run(&predictor, &m, &x, &y, &blocks(&predictor, &m, &v));
            for ((what, a), (_, b)) in quantities(&o1, &g1).iter().zip(quantities(&o2, &g2)) {
                assert_eq!(a.len(), b.len(), "{what}");
                for (j, (u, w)) in a.iter().zip(&b).enumerate() {
                    assert!(u.is_finite(), "{what}[{j}]");
                    assert_eq!(
                        u.to_bits(),
                        predictor.to_f64(w).to_bits(),
                        "bias {bias}, {what}[{j}]: f64 {u:e}, predictor {w}"
                    );
                }
            }
        }
    });
}

/// (c) 1 and 2 threads give the same bits (f64, at the parallel size).
#[test]
fn one_and_two_threads_give_the_same_bits() {
    let (n, t, d, k) = PAR;
    let (x, y) = data(43, n, t, d, k);
    let m = model(d, t, k, Head::Trainable, true);
    let v = params(&m, 7);
    let theta = blocks(&F64, &m, &v);
    let one = pool(1).install(|| {
        assert!(!m.parallel(&F64, n));
        run(&F64, &m, &x, &y, &theta)
    });
    let two = pool(2).install(|| {
        assert_parallel(&m, n);
        run(&F64, &m, &x, &y, &theta)
    });
    for ((what, a), (_, b)) in quantities(&one.0, &one.1)
        .iter()
        .zip(quantities(&two.0, &two.1))
    {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(a), bits(&b), "{what}");
    }
}

/// (d) F32 (the data and parameters rounded to binary32 on entry, every operation in
/// binary32) within a normwise relative 1e-4 of F64, at d = 16, T = 5, K = 3, n = 6.
/// The bound: every quantity is a composition of at most a few sums of m <= n T + d = 46
/// rounded terms (dot products, the softmax's sum, X^T c), each with a relative error
/// below gamma_m = m u / (1 - m u) ~ 2.7e-6 for u = 2^-24 (Higham, eq. 3.4), amplified by
/// the conditioning of the softmax and the cross-entropy at these O(1) scores (a factor
/// of a few tens at most): 1e-4 leaves a margin of about 1.5; a wrong term in F32 alone
/// (e.g. a gradient in another order with a missed term) is O(1).
#[test]
fn f32_stays_within_its_bound_of_f64() {
    let (d, t, k, n) = (16, 5, 3, 6);
    let (x, y) = data(47, n, t, d, k);
    for bias in [false, true] {
        let m = model(d, t, k, Head::Trainable, bias);
        let v = params(&m, 8);
        let (o64, g64) = run(&F64, &m, &x, &y, &blocks(&F64, &m, &v));
        let (o32, g32) = run(&F32, &m, &x, &y, &blocks(&F32, &m, &v));
        for ((what, a), (_, b)) in quantities(&o64, &g64).iter().zip(quantities(&o32, &g32)) {
            let b: Vec<f64> = b.iter().map(|v| *v as f64).collect();
            let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
            let diff: Vec<f64> = a.iter().zip(&b).map(|(u, w)| u - w).collect();
            let err = norm(&diff) / norm(a).max(f64::MIN_POSITIVE);
            assert!(err <= 1e-4, "bias {bias}, {what}: {err:e}");
        }
    }
}

/// (e) A 128-bit ball of every quantity of the pass encloses the 1024-bit twin's value,
/// at d = 16 (the twin's own error, below 2^-1000 relative, is far inside the ball's
/// 2^-129 per operation: a twin value outside is the ball's error).
#[test]
fn balls_enclose_the_1024_bit_twin() {
    let (d, t, k, n) = (16, 6, 3, 5);
    let (x, y) = data(53, n, t, d, k);
    let (ball, twin) = (Ball::new(128).unwrap(), Mpfr::truth(1024).unwrap());
    for head in [Head::Trainable, Head::Fixed] {
        for bias in [false, true] {
            let m = model(d, t, k, head, bias);
            let v = params(&m, 9);
            let (ob, gb) = run(&ball, &m, &x, &y, &blocks(&ball, &m, &v));
            let (ot, gt) = run(&twin, &m, &x, &y, &blocks(&twin, &m, &v));
            for ((what, a), (_, b)) in quantities(&ob, &gb).iter().zip(quantities(&ot, &gt)) {
                let what = format!("{head:?}, bias {bias}, {what}");
                common::assert_enclosed(&what, a, &b);
                for (j, (u, w)) in a.iter().zip(&b).enumerate() {
                    assert!(
                        u.rad_f64() <= 1e-25 * (1.0 + w.to_f64().abs()),
                        "{what}[{j}]: the ball is wide: {u:?}"
                    );
                }
            }
        }
    }
}

/// With W = I, no bias and nu fixed to the K-class config's head (nu_c its class-c row),
/// the pass is the K-class p-mode trainer's at the same p: outputs, losses, the loss and
/// dL/dq bit for bit (the same functions in the same order: the head values of the
/// class-major head, the centred outputs, the cross-entropy, the softmax backward and X^T
/// c as one fma chain over the rows), and dL/dp = W^T dL/dq = dL/dq (a product with the
/// identity rounds nothing).
#[test]
fn with_the_identity_and_the_fixed_head_it_is_the_k_class_model() {
    let cfg = Config {
        seed: 3,
        d: 40,
        n_train: 6,
        n_test: 4,
        mu_norm: 6.0,
        eta: 0.34,
        step_size: 0.5,
        steps: 3,
        model: ModelSpec {
            kind: ModelKind::Multiclass,
            classes: 3,
            ..ModelSpec::default()
        },
        layout: common::layout([1, 2, 2, 1]),
        ..Config::default()
    };
    cfg.validate().unwrap();
    let data = Dataset::generate(&cfg);
    let mut tr = Trainer::new(&cfg, &data, F64, Formulation::Stable).unwrap();
    // move p off 0 (at p = 0 every score is 0): two steps, then compare at the third
    for _ in 0..2 {
        tr.forward_backward().unwrap();
        tr.update().unwrap();
    }
    tr.forward_backward().unwrap();
    let (n, t, d) = data.train.x.dim();
    let k = 3;
    let m = model(d, t, k, Head::Fixed, false);
    let head = data.multiclass_head(&F64);
    let mut nu = vec![0.0; d * k];
    for c in 0..k {
        for j in 0..d {
            nu[j * k + c] = head[c * d + j];
        }
    }
    let mut w = vec![0.0; d * d];
    for j in 0..d {
        w[j * d + j] = 1.0;
    }
    let p = tr.p();
    assert!(p.iter().any(|v| *v != 0.0));
    let theta = blocks(&F64, &m, &[w, p.clone(), nu]);
    let (out, grad) = run(&F64, &m, &data.train.x, &data.train.y, &theta);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let outputs: Vec<f64> = tr.samples.iter().flat_map(|s| s.outputs.clone()).collect();
    let losses: Vec<f64> = tr.samples.iter().map(|s| s.loss).collect();
    assert_eq!(out.outputs.len(), n * k);
    assert_eq!(bits(&out.q), bits(&p), "q = I p");
    assert_eq!(bits(&out.scores), bits(&tr.scores), "scores");
    assert_eq!(bits(&out.attention), bits(&tr.attention), "attention");
    assert_eq!(bits(&out.outputs), bits(&outputs), "outputs");
    assert_eq!(bits(&out.losses), bits(&losses), "losses");
    assert_eq!(out.loss.to_bits(), tr.loss.to_bits(), "loss");
    assert_eq!(bits(&out.grad_q), bits(&tr.grad_q()), "dL/dq");
    assert_eq!(bits(&grad[1]), bits(&tr.grad_q()), "dL/dp = I dL/dq");
    assert!(grad[2].iter().all(|v| *v == 0.0), "the fixed head");
}
