//! tokensel's side of the official-code check of the one-layer encoder (docs/encoder.md,
//! `examples/encoder_official.py`): draws data and the encoder's blocks from a seed,
//! writes them as NPY files (one `<block name>.npy` per block, by PyTorch's
//! `state_dict` key), and runs K steps of plain gradient descent (theta -= lr * grad of
//! the mean naive loss) in f64 and in f32, writing each step's loss, outputs f and the
//! cls row's attention over the T + 1 positions, the first gradient and the final blocks.
//!
//! ```text
//! cargo run --example encoder_pass -- out=DIR [d=32] [m=24] [t=8] [n=20] [seed=0]
//!     [steps=5] [lr=5e-3] [skip=true]
//! ```
//!
//! DIR receives `meta.json` (the sizes, steps, lr, skip), `x.npy` (n, T, d),
//! `y.npy` (n, float64 +-1), `init/<block>.npy`, and per arithmetic (`f64/`, `f32/`, the
//! f32 values widened exactly to float64): `loss.npy` (K + 1), `f.npy` (K + 1, n),
//! `attention.npy` (K + 1, n, T + 1), one row per step before it is taken and one after
//! the last, `grad0/<block>.npy` (the gradient at the initial blocks) and
//! `final/<block>.npy` (the blocks after K steps).
//!
//! The data: tokens N(0, 1) with a signal +-mu (||mu|| = 2, on the first coordinate) added
//! to the first token along the label, labels +-1 with probability 1/2 each, from the
//! seed's token and label streams; the blocks from `Blocks::init` under the seed.

use std::fs::{File, create_dir_all};
use std::path::{Path, PathBuf};

use ndarray::{ArrayD, IxDyn};
use ndarray_npy::WriteNpyExt;
use tokensel::prelude::models::network::{Blocks, Encoder, Network, Pass};
use tokensel::prelude::rng::Stream;
use tokensel::prelude::{Arith, F32, F64, Formulation, rng};

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::args()
        .skip(1)
        .find_map(|a| {
            a.strip_prefix(&format!("{name}="))
                .map(|v| v.parse().ok().expect("a value of the right type"))
        })
        .unwrap_or(default)
}

/// Write `values` with `shape` as a float64 NPY file at `path`.
fn write(path: &Path, shape: &[usize], values: Vec<f64>) {
    let a = ArrayD::from_shape_vec(IxDyn(shape), values).expect("shape and values agree");
    a.write_npy(File::create(path).expect("a writable file"))
        .expect("NPY written");
}

/// Every block of `blocks` as `<dir>/<name>.npy`.
fn write_blocks<A: Arith>(ar: &A, dir: &Path, blocks: &Blocks<A::Real>) {
    create_dir_all(dir).expect("a directory");
    for (name, shape, v) in blocks.to_f64(ar) {
        write(&dir.join(format!("{name}.npy")), &shape, v);
    }
}

/// K steps of gradient descent from `init` in `ar`, written under `dir`.
#[allow(clippy::too_many_arguments)]
fn descend<A: Arith>(
    ar: &A,
    enc: &Encoder,
    x: &ndarray::Array3<f64>,
    y: &[i8],
    init: &Blocks<f64>,
    steps: usize,
    lr: f64,
    dir: &Path,
) {
    let mut theta = Blocks {
        decl: init.decl.clone(),
        values: init.values.iter().map(|v| ar.of_slice(v)).collect(),
    };
    let mut out = Pass::new(ar);
    let mut grad = vec![Vec::new(); theta.values.len()];
    let (mut loss, mut f, mut att) = (Vec::new(), Vec::new(), Vec::new());
    let minus_lr = ar.of(-lr);
    for k in 0..=steps {
        enc.pass(ar, x.view(), y, &theta, &mut out, Some(&mut grad));
        loss.push(ar.to_f64(&out.loss));
        f.extend(out.outputs.iter().map(|v| ar.to_f64(v)));
        att.extend(out.attention.iter().map(|v| ar.to_f64(v)));
        if k == 0 {
            let g = Blocks {
                decl: theta.decl.clone(),
                values: grad.clone(),
            };
            write_blocks(ar, &dir.join("grad0"), &g);
        }
        if k < steps {
            for (v, g) in theta.values.iter_mut().zip(&grad) {
                for (vi, gi) in v.iter_mut().zip(g) {
                    let mut step = ar.zero();
                    ar.prod(&mut step, &minus_lr, gi);
                    ar.add(vi, &step);
                }
            }
        }
    }
    let n = y.len();
    write(&dir.join("loss.npy"), &[steps + 1], loss);
    write(&dir.join("f.npy"), &[steps + 1, n], f);
    write(
        &dir.join("attention.npy"),
        &[steps + 1, n, enc.positions()],
        att,
    );
    write_blocks(ar, &dir.join("final"), &theta);
}

fn main() {
    let out: PathBuf = arg("out", PathBuf::from("encoder_check"));
    let (d, m, t, n) = (arg("d", 32), arg("m", 24), arg("t", 8), arg("n", 20));
    let (seed, steps, lr, skip) = (
        arg("seed", 0u64),
        arg("steps", 5),
        arg("lr", 5e-3),
        arg("skip", true),
    );
    let enc = Encoder::new(d, t, m, skip, Formulation::Naive);
    let mut r = rng::stream(seed, Stream::TrainLabels);
    let y: Vec<i8> = (0..n)
        .map(|_| if rng::uniform(&mut r) < 0.5 { -1 } else { 1 })
        .collect();
    let mut r = rng::stream(seed, Stream::TrainTokens);
    let mut xs = vec![0.0; n * t * d];
    rng::fill_normal(&mut r, 1.0, &mut xs);
    for (i, yi) in y.iter().enumerate() {
        xs[i * t * d] += 2.0 * f64::from(*yi);
    }
    let x = ndarray::Array3::from_shape_vec((n, t, d), xs.clone()).expect("n T d");
    create_dir_all(&out).expect("a directory");
    write(&out.join("x.npy"), &[n, t, d], xs);
    write(
        &out.join("y.npy"),
        &[n],
        y.iter().map(|v| f64::from(*v)).collect(),
    );
    let init = Blocks::init(&F64, enc.blocks(), seed);
    write_blocks(&F64, &out.join("init"), &init);
    let meta = format!(
        "{{\"d\": {d}, \"m\": {m}, \"t\": {t}, \"n\": {n}, \"seed\": {seed}, \"steps\": {steps}, \
         \"lr\": {lr:e}, \"skip\": {skip}}}\n"
    );
    std::fs::write(out.join("meta.json"), meta).expect("meta.json written");
    descend(&F64, &enc, &x, &y, &init, steps, lr, &out.join("f64"));
    descend(&F32, &enc, &x, &y, &init, steps, lr, &out.join("f32"));
    println!("wrote {}", out.display());
}
