//! Phase 1 of the fine-tuning protocol: the head fitted on the clean block with the
//! attention fixed (SPEC section 16: the official code trains the classifier alone, 300
//! epochs, with the Hugging Face Trainer's defaults).
//!
//! With the attention fixed at (p(0), W(0)), a sample's output is f = nu phi with phi =
//! X^T s(0) its attention-weighted token (the features at the prompt's position), so
//! phase 1 is multinomial logistic regression on phi (no bias: tokensel's head has none,
//! where the official classifier has one). It is trained in f64 by AdamW as
//! `torch.optim.AdamW` orders it, with the HF defaults:
//!
//! ```text
//! per step k = 0, 1, ..., N - 1 (N = epochs x ceil(n_clean / batch); batches in a seeded
//! order per epoch, the last one smaller: train::batch::Order on the HeadOrder stream):
//!   G = (1/|B|) sum_{i in B} (softmax(f_i) - e_{y_i}) phi_i^T   (the batch mean's gradient)
//!   G <- G min(1, clip / (||G||_F + 1e-6))                       (step_rule::clip_factor)
//!   lr_k = lr ((N - k) / N)                                      (StepRule::lr, linear)
//!   AdamW step t = k + 1 of nu                                   (train::adam::step)
//! ```
//!
//! with b1 = 0.9, b2 = 0.999, eps 1e-8, no weight decay (the HF defaults): the optimiser
//! pieces phase 2 runs (`train::adam`, `train::step_rule`), in f64; exp by CORE-MATH (the
//! f64 arithmetic's). The initial head is PyTorch's default `Linear`
//! initialisation, U(-1/sqrt d, 1/sqrt d) per entry, from the seed's `HeadInit` stream.
//! Every sum has a fixed order, so the head's bits do not depend on threads.

use ndarray::{Array2, ArrayView3};
use serde::{Deserialize, Serialize};

use crate::arith::{Arith, F64};
use crate::config::{Formulation, Protocol};
use crate::data::Params;
use crate::linalg;
use crate::linalg::euclidean_norm;
use crate::model::{self, Model, Multiclass, Softmax};
use crate::rng::{self, Stream};
use crate::train::adam::{self, Hyper};
use crate::train::batch::Order;
use crate::train::step_rule::{self, StepRule};

/// Phase 1's AdamW: the HF Trainer's defaults (betas 0.9, 0.999, eps 1e-8, no weight
/// decay).
const HEAD_ADAM: Hyper = Hyper {
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
    weight_decay: 0.0,
    decoupled: true,
};

/// How phase 1 ended, on the clean block (a full pass after the last step).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HeadFit {
    /// Steps taken (epochs x batches per epoch).
    pub steps: u64,
    /// Mean cross-entropy on the clean block at the fitted head.
    #[serde(with = "crate::io::nonfinite")]
    pub loss: f64,
    /// Share of the clean block whose largest output is its label.
    #[serde(with = "crate::io::nonfinite")]
    pub accuracy: f64,
}

/// The features phi_i = X_i^T s_i of every sample of `x` at the attention of `init`
/// (scores X W^T p, the stable softmax, in f64), row-major (n, d); phi_k = sum_t s_t x_tk
/// as an fma chain over t = 0, 1, ...
pub fn features(x: ArrayView3<'_, f64>, init: &Params) -> Array2<f64> {
    let (n, t, d) = x.dim();
    let ar = F64;
    let p = init.p.as_slice().expect("contiguous");
    let mut q = vec![0.0; d];
    match &init.w {
        None => q.copy_from_slice(p),
        Some(w) => linalg::matvec_t(&ar, w.as_slice().expect("standard layout"), p, &mut q),
    }
    let mut phi = Array2::zeros((n, d));
    let (mut z, mut s) = (vec![0.0; t], vec![0.0; t]);
    let mut att = Softmax::new(&ar);
    for (i, mut row) in phi.rows_mut().into_iter().enumerate() {
        let xi = x.index_axis(ndarray::Axis(0), i);
        model::scores(&ar, xi, &q, &mut z);
        model::softmax(&ar, &z, &mut s, Formulation::Stable, &mut att);
        for (st, xt) in s.iter().zip(xi.rows()) {
            for (pk, xk) in row.iter_mut().zip(xt) {
                *pk = st.mul_add(*xk, *pk);
            }
        }
    }
    phi
}

/// The K outputs f_c = nu_c . phi (an fma chain over k) into `f`.
fn logits(nu: &Array2<f64>, phi: &[f64], f: &mut [f64]) {
    for (fc, row) in f.iter_mut().zip(nu.rows()) {
        *fc = row.iter().zip(phi).fold(0.0, |a, (w, x)| w.mul_add(*x, a));
    }
}

/// softmax(f) - e_y into `gamma` (the largest output subtracted; exp by CORE-MATH).
fn softmax_minus_label(f: &[f64], y: usize, gamma: &mut [f64]) {
    let ar = F64;
    let m = f.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for (g, fc) in gamma.iter_mut().zip(f) {
        *g = fc - m;
        ar.exp(g);
        sum += *g;
    }
    for g in gamma.iter_mut() {
        *g /= sum;
    }
    gamma[y] -= 1.0;
}

/// Mean cross-entropy and accuracy of head `nu` on features `phi` with labels `y` (the
/// K-class model's loss, so phase 1 and phase 2 measure the same loss).
pub fn evaluate(nu: &Array2<f64>, phi: &Array2<f64>, y: &[i8]) -> (f64, f64) {
    let k = nu.nrows();
    let m = Multiclass { classes: k };
    let mut f = vec![0.0; k];
    let (mut loss, mut right) = (0.0, 0usize);
    for (row, &yi) in phi.rows().into_iter().zip(y) {
        logits(nu, row.as_slice().expect("standard layout"), &mut f);
        let mut l = 0.0;
        m.loss(&F64, &f, yi, &mut l);
        loss += l;
        if m.decide(&F64, &f, yi) == Some(true) {
            right += 1;
        }
    }
    let n = y.len() as f64;
    (loss / n, right as f64 / n)
}

/// The initial head (K, d) of seed `seed`: PyTorch's default `Linear` initialisation,
/// U(-1/sqrt d, 1/sqrt d) per entry, row-major, from the seed's `HeadInit` stream.
pub fn initial(classes: usize, d: usize, seed: u64) -> Array2<f64> {
    let bound = 1.0 / (d as f64).sqrt();
    let mut init = rng::stream(seed, Stream::HeadInit);
    Array2::from_shape_simple_fn((classes, d), || {
        (2.0 * rng::uniform(&mut init) - 1.0) * bound
    })
}

/// Fit the K-class head on features `phi` (n_clean, d) with labels `y` by phase 1's AdamW
/// (module docs), under seed `seed`'s streams; `progress` is called with the steps done
/// every epoch.
pub fn fit(
    prot: &Protocol,
    classes: usize,
    phi: &Array2<f64>,
    y: &[i8],
    seed: u64,
    progress: &mut dyn FnMut(u64),
) -> (Array2<f64>, HeadFit) {
    let (n, d) = phi.dim();
    let mut nu = initial(classes, d, seed);
    let mut order = Order::from_stream(seed, Stream::HeadOrder, n, prot.head_batch);
    let total = prot.head_epochs * order.per_epoch();
    let (mut m, mut v) = (vec![0.0; classes * d], vec![0.0; classes * d]);
    let mut grad = vec![0.0; classes * d];
    let (mut f, mut gamma) = (vec![0.0; classes], vec![0.0; classes]);
    let ar = F64;
    for k in 0..total {
        let batch = order.at(k);
        grad.fill(0.0);
        let inv = 1.0 / batch.len() as f64;
        for &i in &batch {
            let row = phi.row(i);
            let row = row.as_slice().expect("standard layout");
            logits(&nu, row, &mut f);
            softmax_minus_label(&f, y[i] as usize, &mut gamma);
            for (gc, grow) in gamma.iter().zip(grad.chunks_mut(d)) {
                let a = gc * inv;
                for (g, x) in grow.iter_mut().zip(row) {
                    *g = a.mul_add(*x, *g);
                }
            }
        }
        if prot.head_clip_norm > 0.0 {
            let c = step_rule::clip_factor(&ar, prot.head_clip_norm, &[euclidean_norm(&ar, &grad)]);
            grad.iter_mut().for_each(|g| *g *= c);
        }
        let mut rule = StepRule::constant(prot.head_step_size);
        rule.linear = Some((k, total));
        let scalars = HEAD_ADAM.scalars(&ar, &rule.lr(&ar), k + 1);
        let params = nu.as_slice_mut().expect("standard layout");
        adam::step(&ar, &scalars, params, &grad, &mut m, &mut v);
        if (k + 1) % order.per_epoch() == 0 {
            progress(k + 1);
        }
    }
    let (loss, accuracy) = evaluate(&nu, phi, y);
    (
        nu,
        HeadFit {
            steps: total,
            loss,
            accuracy,
        },
    )
}
