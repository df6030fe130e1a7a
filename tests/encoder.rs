//! The authors' one-layer encoder (`models::network::Encoder`, proofs-notes/encoder.md)
//! in every arithmetic:
//! - every block's gradient (several entries of each of the 14 blocks, skip on and off,
//!   both loss formulations) is the derivative of the 512-bit twin's mean loss
//!   (Richardson-extrapolated central differences, as tests/ops.rs);
//! - the f64 predictor gives f64's bits for every output of the pass, and 1 and 2 threads
//!   give the same bits, at a size where both parallel paths are taken (asserted);
//! - f32's pass is within a stated bound of f64's;
//! - 128-bit balls enclose the 1024-bit twin's pass, and how wide they get as d grows;
//! - (ignored) the cost of one f64 pass at the official size.

use ndarray::Array3;
use rug::Float;
use tokensel::prelude::models::network::{Blocks, Encoder, Network, Pass};
use tokensel::prelude::rng::Stream;
use tokensel::prelude::{Arith, Ball, F32, F64, Formulation, Mpfr, rng};

/// Data x (n, T, d) ~ N(0, 1) and labels +-1 from the seed's token and label streams.
fn data(enc: &Encoder, n: usize, seed: u64) -> (Array3<f64>, Vec<i8>) {
    let mut r = rng::stream(seed, Stream::TrainTokens);
    let mut x = vec![0.0; n * enc.tokens * enc.d];
    rng::fill_normal(&mut r, 1.0, &mut x);
    let mut r = rng::stream(seed, Stream::TrainLabels);
    let y = (0..n)
        .map(|_| if rng::uniform(&mut r) < 0.5 { -1 } else { 1 })
        .collect();
    (
        Array3::from_shape_vec((n, enc.tokens, enc.d), x).unwrap(),
        y,
    )
}

/// The blocks at `Blocks::init` under `seed`, in f64, with the LayerNorms' weights and
/// biases moved off 1 and 0 by up to 0.3 (from the init stream), so that a backward pass
/// that confuses gamma with 1 or drops beta is seen.
fn theta(enc: &Encoder, seed: u64) -> Vec<Vec<f64>> {
    let mut b = Blocks::init(&F64, enc.blocks(), seed);
    let mut r = rng::stream(seed, Stream::Init);
    for (decl, v) in b.iter_mut() {
        if decl.name.contains("norm") {
            v.iter_mut()
                .for_each(|x| *x += 0.3 * (2.0 * rng::uniform(&mut r) - 1.0));
        }
    }
    b.values
}

/// `values` as blocks in `ar` (exact in every arithmetic of at least 53 bits).
fn blocks<A: Arith>(ar: &A, enc: &Encoder, values: &[Vec<f64>]) -> Blocks<A::Real> {
    Blocks {
        decl: enc.blocks(),
        values: values.iter().map(|v| ar.of_slice(v)).collect(),
    }
}

/// One pass with the gradient in `ar`: the pass and the gradient of every block.
fn run<A: Arith>(
    ar: &A,
    enc: &Encoder,
    x: &Array3<f64>,
    y: &[i8],
    values: &[Vec<f64>],
) -> (Pass<A::Real>, Vec<Vec<A::Real>>) {
    let th = blocks(ar, enc, values);
    let mut out = Pass::new(ar);
    let mut grad = vec![Vec::new(); th.values.len()];
    enc.pass(ar, x.view(), y, &th, &mut out, Some(&mut grad));
    (out, grad)
}

/// Every number of a pass and its gradient in one list (the order is fixed: scores,
/// attention, outputs, losses, loss, q, grad_q, then the blocks in declaration order).
fn flatten<R: Clone>(p: &Pass<R>, grad: &[Vec<R>]) -> Vec<R> {
    let mut v = Vec::new();
    v.extend(p.scores.iter().cloned());
    v.extend(p.attention.iter().cloned());
    v.extend(p.outputs.iter().cloned());
    v.extend(p.losses.iter().cloned());
    v.push(p.loss.clone());
    v.extend(p.q.iter().cloned());
    v.extend(p.grad_q.iter().cloned());
    for g in grad {
        v.extend(g.iter().cloned());
    }
    v
}

fn small(skip: bool, loss: Formulation) -> Encoder {
    Encoder::new(8, 4, 6, skip, loss)
}

#[test]
fn declares_the_official_blocks() {
    let enc = Encoder::new(5, 3, 7, true, Formulation::Naive);
    let b = enc.blocks();
    let got: Vec<(&str, Vec<usize>)> = b.iter().map(|b| (b.name, b.shape.clone())).collect();
    let want: Vec<(&str, Vec<usize>)> = vec![
        ("cls_token", vec![1, 1, 5]),
        ("attn.norm.weight", vec![5]),
        ("attn.norm.bias", vec![5]),
        ("attn.to_qkv.weight", vec![15, 5]),
        ("ff.net.0.weight", vec![5]),
        ("ff.net.0.bias", vec![5]),
        ("ff.net.1.weight", vec![7, 5]),
        ("ff.net.1.bias", vec![7]),
        ("ff.net.4.weight", vec![5, 7]),
        ("ff.net.4.bias", vec![5]),
        ("norm.weight", vec![5]),
        ("norm.bias", vec![5]),
        ("head.weight", vec![1, 5]),
        ("head.bias", vec![1]),
    ];
    assert_eq!(got, want);
    assert!(b.iter().all(|b| b.trained && !b.zero_grad));
    let ids: std::collections::BTreeSet<u64> = b.iter().map(|b| b.stream.id).collect();
    assert_eq!(ids.len(), 14, "every block its own stream");
    assert_eq!(enc.positions(), 4);
    assert_eq!(enc.name(), "encoder");
    let init = Blocks::init(&F64, b, 1);
    assert!(init.get("attn.norm.weight").iter().all(|&v| v == 1.0));
    assert!(init.get("norm.bias").iter().all(|&v| v == 0.0));
    let bound = 1.0 / 7f64.sqrt();
    assert!(init.get("ff.net.4.weight").iter().all(|v| v.abs() <= bound));
}

/// Richardson's extrapolation of central differences of `f` along coordinate `j`
/// (tests/ops.rs): R = (4 D(h/2) - D(h)) / 3, error h^4 |f^(5)| / 480 plus the twin's
/// rounding 2^-512 |f| / h.
fn richardson(
    f: &dyn Fn(&[Vec<Float>]) -> Float,
    theta: &[Vec<Float>],
    b: usize,
    j: usize,
    h: &Float,
) -> Float {
    let d = |h: &Float| {
        let mut plus = theta.to_vec();
        let mut minus = theta.to_vec();
        plus[b][j] += h;
        minus[b][j] -= h;
        (f(&plus) - f(&minus)) / Float::with_val(512, h * 2u32)
    };
    let half = Float::with_val(512, h / 2u32);
    (d(&half) * 4u32 - d(h)) / 3u32
}

/// Every block's gradient (its first and last entries and two drawn ones), skip on and
/// off, naive and stable loss, against Richardson's extrapolation of the twin's mean loss.
/// With h = 2^-24 the truncation error is h^4 |f^(5)| / 480 < 2^-104 |f^(5)|, the
/// rounding error 2^-512 |L| / h negligible: a tolerance of 1e-20 (1 + |g|) leaves
/// |f^(5)| up to about 4e11 (these losses' derivatives are O(1)-O(100) at these
/// parameters); a backward pass that drops a term is wrong by O(|g|), far above it.
#[test]
fn every_blocks_gradient_is_the_derivative_of_the_mean_loss() {
    let ar = Mpfr::truth(512).unwrap();
    let n = 3;
    for (skip, loss) in [
        (true, Formulation::Naive),
        (false, Formulation::Naive),
        (true, Formulation::Stable),
    ] {
        let enc = small(skip, loss);
        let (x, y) = data(&enc, n, 11);
        let values = theta(&enc, 12);
        let (_, grad) = run(&ar, &enc, &x, &y, &values);
        let th: Vec<Vec<Float>> = values.iter().map(|v| ar.of_slice(v)).collect();
        let f = |t: &[Vec<Float>]| {
            let b = Blocks {
                decl: enc.blocks(),
                values: t.to_vec(),
            };
            let mut out = Pass::new(&ar);
            enc.pass(&ar, x.view(), &y, &b, &mut out, None);
            out.loss
        };
        let h = Float::with_val(512, Float::i_exp(1, -24));
        let mut r = rng::stream(13, Stream::Init);
        for (b, (decl, g)) in enc.blocks().iter().zip(&grad).enumerate() {
            assert_eq!(g.len(), decl.len(), "{}", decl.name);
            let len = g.len() as f64;
            let mut entries = vec![0, g.len() - 1];
            entries.extend((0..2).map(|_| (rng::uniform(&mut r) * len) as usize));
            let mut nonzero = false;
            for j in entries {
                let rich = richardson(&f, &th, b, j, &h);
                let err = Float::with_val(512, &rich - &g[j]).abs().to_f64();
                nonzero |= g[j].to_f64().abs() > 1e-6;
                assert!(
                    err <= 1e-20 * (1.0 + g[j].to_f64().abs()),
                    "skip {skip}, {loss:?}, {}[{j}]: backward {:.20e}, Richardson {rich:.20e} \
                     (error {err:e})",
                    decl.name,
                    g[j]
                );
            }
            assert!(
                nonzero,
                "skip {skip}, {}: every checked entry is ~0",
                decl.name
            );
        }
    }
}

/// The size of the determinism tests: d = m = 96, T = 4, n = 6, at which a pass in f64
/// runs its samples and its outer-product rows on several threads (asserted).
fn parallel_size() -> (Encoder, Array3<f64>, Vec<i8>, Vec<Vec<f64>>) {
    let enc = Encoder::new(96, 4, 96, true, Formulation::Naive);
    let (x, y) = data(&enc, 6, 21);
    let values = theta(&enc, 22);
    (enc, x, y, values)
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

fn bits<A: Arith>(ar: &A, v: &[A::Real]) -> Vec<u64> {
    v.iter().map(|x| ar.to_f64(x).to_bits()).collect()
}

#[test]
fn the_predictor_and_any_thread_count_give_f64s_bits() {
    let (enc, x, y, values) = parallel_size();
    let predictor = Mpfr::predictor();
    let two = pool(2);
    let (f64_2, pred_2) = two.install(|| {
        assert!(enc.parallel_samples(&F64, y.len()) && enc.parallel_rows(&F64, y.len()));
        assert!(enc.parallel_samples(&predictor, y.len()));
        assert!(enc.parallel_rows(&predictor, y.len()));
        let (p, g) = run(&F64, &enc, &x, &y, &values);
        let (pp, pg) = run(&predictor, &enc, &x, &y, &values);
        (
            bits(&F64, &flatten(&p, &g)),
            bits(&predictor, &flatten(&pp, &pg)),
        )
    });
    let (f64_1, pred_1) = pool(1).install(|| {
        assert!(!enc.parallel_samples(&F64, y.len()) && !enc.parallel_rows(&F64, y.len()));
        let (p, g) = run(&F64, &enc, &x, &y, &values);
        let (pp, pg) = run(&predictor, &enc, &x, &y, &values);
        (
            bits(&F64, &flatten(&p, &g)),
            bits(&predictor, &flatten(&pp, &pg)),
        )
    });
    assert!(f64_2.iter().all(|b| f64::from_bits(*b).is_finite()));
    for (what, a, b) in [
        ("f64, 1 vs 2 threads", &f64_1, &f64_2),
        ("predictor, 1 vs 2 threads", &pred_1, &pred_2),
        ("f64 vs the predictor", &f64_2, &pred_2),
    ] {
        assert_eq!(a.len(), b.len());
        if let Some(k) = (0..a.len()).find(|&k| a[k] != b[k]) {
            panic!(
                "{what}: entry {k} differs: {:e} vs {:e}",
                f64::from_bits(a[k]),
                f64::from_bits(b[k])
            );
        }
    }
}

/// f32's pass vs f64's at the parallel size. Each output is a chain of about ten layers
/// (LayerNorm, dot products of length <= 96, softmax, GELU), each with a relative
/// forward error of at most k u sum|a b| / |sum a b| (Higham, k <= 96, u = 2^-24 ~
/// 6e-8): ~6e-6 per layer where nothing cancels. The bound asserted, a normwise relative
/// error of 1e-3 for every block's gradient and 1e-4 for the loss, leaves a conditioning
/// factor of ~20 over ten layers; measured: see the printout.
#[test]
fn f32_is_within_its_bound_of_f64() {
    let (enc, x, y, values) = parallel_size();
    let (p64, g64) = run(&F64, &enc, &x, &y, &values);
    let (p32, g32) = run(&F32, &enc, &x, &y, &values);
    let rel = |a: &[f64], b: &[f32]| {
        let num = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - *y as f64).abs())
            .fold(0.0, f64::max);
        let den = a.iter().map(|x| x.abs()).fold(0.0, f64::max);
        num / den
    };
    let loss = rel(&[p64.loss], &[p32.loss]);
    println!("f32 vs f64: loss {loss:e}");
    assert!(loss <= 1e-4, "loss: {loss:e}");
    for (what, a, b) in [
        ("attention", &p64.attention, &p32.attention),
        ("outputs", &p64.outputs, &p32.outputs),
    ] {
        let e = rel(a, b);
        println!("f32 vs f64: {what} {e:e}");
        assert!(e <= 1e-4, "{what}: {e:e}");
    }
    for (decl, (a, b)) in enc.blocks().iter().zip(g64.iter().zip(&g32)) {
        let e = rel(a, b);
        println!("f32 vs f64: grad {} {e:e}", decl.name);
        assert!(e <= 1e-3, "{}: {e:e}", decl.name);
    }
}

/// The largest relative radius of the balls of a pass: the loss' (rad / |loss|) and the
/// gradient's (per block rad / max |entry| of the block, the largest over the blocks).
fn radii(
    p: &Pass<tokensel::prelude::BallReal>,
    g: &[Vec<tokensel::prelude::BallReal>],
) -> (f64, f64) {
    let loss = p.loss.rad_f64() / p.loss.mid().to_f64().abs();
    let grad = g
        .iter()
        .map(|b| {
            let rad = b.iter().map(|x| x.rad_f64()).fold(0.0, f64::max);
            let top = b.iter().map(|x| x.mid().to_f64().abs()).fold(0.0, f64::max);
            rad / top
        })
        .fold(0.0, f64::max);
    (loss, grad)
}

/// 128-bit balls enclose the 1024-bit twin's pass at d = 16 (every score, attention,
/// output, loss, q, dL/dq and gradient entry), skip on and off. The twin's own error over
/// this pass (a few hundred roundings of 2^-1024 relative, amplified by the pass'
/// conditioning) is far inside a ball's radius of at least 2^-129 relative per
/// operation: a twin value outside a ball is the ball's error.
#[test]
fn balls_enclose_the_1024_bit_twin() {
    let (ball, twin) = (Ball::new(128).unwrap(), Mpfr::truth(1024).unwrap());
    for skip in [true, false] {
        let enc = Encoder::new(16, 4, 12, skip, Formulation::Naive);
        let (x, y) = data(&enc, 3, 31);
        let values = theta(&enc, 32);
        let (bp, bg) = run(&ball, &enc, &x, &y, &values);
        let (tp, tg) = run(&twin, &enc, &x, &y, &values);
        let (b, t) = (flatten(&bp, &bg), flatten(&tp, &tg));
        assert_eq!(b.len(), t.len());
        for (k, (x, y)) in b.iter().zip(&t).enumerate() {
            assert!(
                x.contains(y),
                "skip {skip}, entry {k}: twin {y} outside {x:?}"
            );
        }
        let (rl, rg) = radii(&bp, &bg);
        println!("d = 16, skip {skip}: relative radius loss {rl:e}, gradient {rg:e}");
        assert!(rl <= 1e-20 && rg <= 1e-15, "loss {rl:e}, gradient {rg:e}");
    }
}

/// How wide 128-bit balls get as d grows (m = d, T = 4, n = 3): the largest relative
/// radius of the loss and of the gradient after one pass, and how the parameters' radii
/// compound along 4 steps of GD (lr 0.05) in balls. Printed; asserted only to enclose
/// the twin at d <= 64 (the twin at 1024 bits) and to be finite. Measured (2026-12-07):
///
/// | d   | loss      | gradient  | growth per step | steps to 1e-3 |
/// | --- | --------- | --------- | --------------- | ------------- |
/// | 16  | 1.6e-35   | 4.9e-31   | 7.7e4           | ~7            |
/// | 32  | 2.2e-34   | 4.4e-29   | 9.5e6           | ~5            |
/// | 64  | 5.4e-33   | 1.5e-27   | 1.6e8           | ~4            |
/// | 128 | 1.3e-31   | 2.5e-25   | 6.9e10          | ~3            |
///
/// One pass stays tight to d = 128 (relative radii growing about as d^4 for the loss
/// and d^6 for the gradient); a trajectory does not: each step multiplies the
/// parameters' radii by the ball-evaluated gain of the pass (every ball treated as
/// independent of the others it was computed from: LayerNorm's x - mean(x), the
/// backward pass' reuse of the forward values), 16 bits per step at d = 16, 36 at
/// d = 128, far above the exact step map's 1 + lr ||H||. So 128-bit balls certify a
/// trajectory of a few steps only, and K steps need about 16 K bits at d = 16
/// (docs/encoder.md).
#[test]
fn ball_radii_as_d_grows() {
    let (ball, twin) = (Ball::new(128).unwrap(), Mpfr::truth(1024).unwrap());
    for d in [16, 32, 64, 128] {
        let enc = Encoder::new(d, 4, d, true, Formulation::Naive);
        let (x, y) = data(&enc, 3, 41);
        let values = theta(&enc, 42);
        let (bp, bg) = run(&ball, &enc, &x, &y, &values);
        if d <= 64 {
            let (tp, _) = run(&twin, &enc, &x, &y, &values);
            assert!(bp.loss.contains(&tp.loss), "d = {d}");
        }
        let (rl, rg) = radii(&bp, &bg);
        // then 4 steps of GD (lr 0.05) in balls: how the radii compound along a
        // trajectory; the growth factor per step of the parameters' largest radius (from
        // step 3 to step 4), and the steps until a relative radius of 1e-3 at that rate
        let mut th = blocks(&ball, &enc, &values);
        let (mut p, mut g) = (Pass::new(&ball), vec![Vec::new(); th.values.len()]);
        let minus_lr = ball.of(-0.05);
        let mut rad = Vec::new();
        for _ in 0..4 {
            enc.pass(&ball, x.view(), &y, &th, &mut p, Some(&mut g));
            for (v, gb) in th.values.iter_mut().zip(&g) {
                for (vi, gi) in v.iter_mut().zip(gb) {
                    let mut step = ball.zero();
                    ball.prod(&mut step, &minus_lr, gi);
                    ball.add(vi, &step);
                }
            }
            rad.push(
                th.values
                    .iter()
                    .flatten()
                    .map(|v| v.rad_f64())
                    .fold(0.0, f64::max),
            );
        }
        let growth = rad[3] / rad[2];
        let steps = (1e-3 / rad[3]).ln() / growth.ln() + 4.0;
        println!(
            "d = {d}: relative radius loss {rl:e}, gradient {rg:e}; parameters' radius \
             after 1..4 steps {}, growth per step {growth:.1e}: 1e-3 after ~{steps:.0} \
             steps",
            rad.iter()
                .map(|r| format!("{r:.1e}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        assert!(
            rl.is_finite() && rg.is_finite() && growth.is_finite(),
            "d = {d}"
        );
    }
}

/// The cost of one f64 pass with the gradient at the official size (d = m = 2000,
/// n = 20, T = 8): timed once, printed (not a timed assertion). Run with
/// `cargo test --test encoder -- --ignored --nocapture official_size`.
#[test]
#[ignore]
fn official_size_cost() {
    let enc = Encoder::new(2000, 8, 2000, true, Formulation::Naive);
    let (x, y) = data(&enc, 20, 51);
    let th = Blocks::init(&F64, enc.blocks(), 52);
    let mut out = Pass::new(&F64);
    let mut grad = vec![Vec::new(); th.values.len()];
    let t0 = std::time::Instant::now();
    enc.pass(&F64, x.view(), &y, &th, &mut out, Some(&mut grad));
    let s = t0.elapsed().as_secs_f64();
    println!(
        "one f64 pass with gradient at d = m = 2000, n = 20, T = 8: {s:.3} s on {} threads \
         (loss {:e})",
        rayon::current_num_threads(),
        out.loss
    );
    assert!(out.loss.is_finite());
}
