//! tokensel's side of the official check of the real-setting model
//! (`examples/real_setting_official.py`, docs/models.md, "The real-setting model with a
//! trainable head"): writes seeded data, the model's initial blocks and K steps of
//! gradient descent on its pass, in f64 and in f32, as NPY files (float64).
//!
//! ```text
//! cargo run --example real_setting_pass -- out=DIR [d=32] [tokens=8] [classes=3] [n=20]
//!     [steps=5] [lr=0.5] [seed=0] [bias=false] [momentum=0] [weight_decay=0]
//! ```
//!
//! `DIR/` receives `x.npy` (n, T, d; N(0, 1) entries), `y.npy` (n; class indices as
//! float64), `<block>.npy` for every block at step 0 (`W` (d, d) orthogonal, `p` (d)
//! zeros, `nu` (d, K) uniform, `nu_bias` (K) with `bias=true`), and for each arithmetic
//! `f64/`, `f32/`: `loss.npy` (steps + 1), `outputs.npy` (steps + 1, n, K),
//! `attention.npy` (steps + 1, n, T), `grad_<block>.npy` (the gradient at step 0) and
//! `<block>_final.npy` (after the steps). A step is PyTorch's SGD without dampening or
//! Nesterov: b = g + wd theta (the first step), b = momentum b + g + wd theta (later),
//! theta -= lr b; with momentum = wd = 0 plain theta -= lr g. The f32 run starts from
//! the f64 blocks rounded to binary32 (as a float32 model loading them would).

use std::path::{Path, PathBuf};

use tokensel::prelude::formats::export::npy_f64;
use tokensel::prelude::models::network::{Blocks, Head, Network, Pass, RealSetting};
use tokensel::prelude::rng::Stream;
use tokensel::prelude::*;

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::args()
        .skip(1)
        .find_map(|a| {
            a.strip_prefix(&format!("{name}="))
                .map(|v| v.parse().ok().expect("a value of the right type"))
        })
        .unwrap_or(default)
}

/// Write `values` of `shape` as `dir/name.npy`.
fn write(dir: &Path, name: &str, shape: &[usize], values: &[f64]) -> Result<()> {
    let path = dir.join(format!("{name}.npy"));
    std::fs::write(&path, npy_f64(shape, values)?).map_err(|e| Error::InvalidArgument {
        name: "out".into(),
        reason: format!("cannot write {}: {e}", path.display()),
    })
}

/// The sizes and the step rule of a run.
struct Run {
    m: RealSetting,
    steps: usize,
    lr: f64,
    momentum: f64,
    weight_decay: f64,
}

/// K steps of `run` in `ar` from the f64 blocks `init`, written to `dir`.
fn steps<A: Arith>(
    ar: &A,
    run: &Run,
    x: &ndarray::Array3<f64>,
    y: &[i8],
    init: &[Vec<f64>],
    dir: &Path,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::InvalidArgument {
        name: "out".into(),
        reason: format!("{}: {e}", dir.display()),
    })?;
    let m = &run.m;
    let decl = m.blocks();
    let mut theta = Blocks {
        decl: decl.clone(),
        values: init.iter().map(|v| ar.of_slice(v)).collect(),
    };
    let mut grad: Vec<Vec<A::Real>> = decl.iter().map(|b| ar.zeros(b.len())).collect();
    let mut buf: Option<Vec<Vec<A::Real>>> = None;
    let mut out = Pass::new(ar);
    let (mut loss, mut outputs, mut attention) = (Vec::new(), Vec::new(), Vec::new());
    let f = |v: &[A::Real]| v.iter().map(|x| ar.to_f64(x)).collect::<Vec<f64>>();
    for step in 0..=run.steps {
        m.pass(ar, x.view(), y, &theta, &mut out, Some(&mut grad));
        loss.push(ar.to_f64(&out.loss));
        outputs.extend(f(&out.outputs));
        attention.extend(f(&out.attention));
        if step == 0 {
            for (b, g) in decl.iter().zip(&grad) {
                write(dir, &format!("grad_{}", b.name), &b.shape, &f(g))?;
            }
        }
        if step == run.steps {
            break;
        }
        // b = g + wd theta; with momentum, b = mu b_prev + b (the first step: b)
        let mut step_dir: Vec<Vec<A::Real>> = Vec::with_capacity(grad.len());
        for (g, v) in grad.iter().zip(&theta.values) {
            let mut b = g.clone();
            if run.weight_decay != 0.0 {
                let wd = ar.of(run.weight_decay);
                for (bk, vk) in b.iter_mut().zip(v) {
                    ar.fma(bk, &wd, vk);
                }
            }
            step_dir.push(b);
        }
        if run.momentum != 0.0 {
            let mu = ar.of(run.momentum);
            if let Some(prev) = &buf {
                for (b, p) in step_dir.iter_mut().zip(prev) {
                    for (bk, pk) in b.iter_mut().zip(p) {
                        ar.fma(bk, &mu, pk);
                    }
                }
            }
            buf = Some(step_dir.clone());
        }
        let neg_lr = ar.of(-run.lr);
        for ((blk, v), b) in theta.iter_mut().zip(&step_dir) {
            if blk.trained {
                ar.axpy(&neg_lr, b, v);
            }
        }
    }
    let (n, t, k) = (y.len(), m.tokens, m.classes);
    let s = run.steps + 1;
    write(dir, "loss", &[s], &loss)?;
    write(dir, "outputs", &[s, n, k], &outputs)?;
    write(dir, "attention", &[s, n, t], &attention)?;
    for (b, v) in theta.iter() {
        write(dir, &format!("{}_final", b.name), &b.shape, &f(v))?;
    }
    Ok(())
}

fn main() -> Result<()> {
    let out: PathBuf = arg("out", PathBuf::from("real_setting_check"));
    let (d, t, k, n): (usize, usize, usize, usize) = (
        arg("d", 32),
        arg("tokens", 8),
        arg("classes", 3),
        arg("n", 20),
    );
    let seed: u64 = arg("seed", 0);
    let run = Run {
        m: RealSetting {
            d,
            tokens: t,
            classes: k,
            head: Head::Trainable,
            bias: arg("bias", false),
        },
        steps: arg("steps", 5),
        lr: arg("lr", 0.5),
        momentum: arg("momentum", 0.0),
        weight_decay: arg("weight_decay", 0.0),
    };
    if d * t * n * k == 0 || d > 4096 || t > 4096 || n > 1 << 16 || k > 100 || run.steps > 10_000 {
        return Err(Error::InvalidArgument {
            name: "d, tokens, classes, n, steps".into(),
            reason: "each >= 1, d and tokens <= 4096, n <= 65536, classes <= 100, steps <= 10000"
                .into(),
        });
    }
    std::fs::create_dir_all(&out).map_err(|e| Error::InvalidArgument {
        name: "out".into(),
        reason: format!("{}: {e}", out.display()),
    })?;
    let mut r = rng::stream(seed, Stream::TrainTokens);
    let mut xs = vec![0.0; n * t * d];
    rng::fill_normal(&mut r, 1.0, &mut xs);
    let x = ndarray::Array3::from_shape_vec((n, t, d), xs).expect("n T d values");
    let mut r = rng::stream(seed, Stream::TrainLabels);
    let y: Vec<i8> = (0..n)
        .map(|_| ((rng::uniform(&mut r) * k as f64) as usize).min(k - 1) as i8)
        .collect();
    write(
        &out,
        "x",
        &[n, t, d],
        x.as_slice().expect("standard layout"),
    )?;
    let yf: Vec<f64> = y.iter().map(|c| *c as f64).collect();
    write(&out, "y", &[n], &yf)?;
    let init: Vec<Vec<f64>> = run
        .m
        .blocks()
        .iter()
        .map(|b| b.draw(seed).expect("drawn blocks"))
        .collect();
    for (b, v) in run.m.blocks().iter().zip(&init) {
        write(&out, b.name, &b.shape, v)?;
    }
    steps(&F64, &run, &x, &y, &init, &out.join("f64"))?;
    steps(&F32, &run, &x, &y, &init, &out.join("f32"))?;
    println!(
        "wrote {} (d = {d}, T = {t}, K = {k}, n = {n}, {} steps, lr {})",
        out.display(),
        run.steps,
        run.lr
    );
    Ok(())
}
