//! The authors' real-setting model (official `main_real_setting.py`, class
//! `OurAttention`, commit a258264) as a [`Network`]: token selection by softmax attention
//! with a **trainable head**, every parameter a block.
//!
//! Blocks (declaration order), for samples X (T x d) and K classes:
//!
//! ```text
//! W        (d, d)  orthogonal (torch's orthogonal_, BlockInit::Orthogonal { gain: 1 })
//! p        (d)     zeros      (the official (d, 1) column)
//! nu       (d, K)  U(-1/sqrt(d), 1/sqrt(d)), row-major nu[j * K + c]
//! nu_bias  (K)     zeros      (only with `bias`; the official model has none)
//! ```
//!
//! **W is the code's W, not the paper's.** The official logits are `x @ W @ p`, so the
//! query in token space is q = W p (the paper's W^T p with W_paper = W^T): scores
//! z_t = <x_t, q>. The pass:
//!
//! ```text
//! q     = W p                                  (Pass::q)
//! s     = softmax(X q)                         (attention over the T tokens)
//! G_tc  = <x_t, nu_c>                          (nu_c the c-th column of nu)
//! f_c   = sum_t s_t G_tc (+ b_c)               (outputs, n x K)
//! l     = -log softmax(f)_Y                    (nn.functional.cross_entropy)
//! L     = (1/n) sum_i l_i
//! ```
//!
//! and, with gamma_i = softmax(f_i) - e_{Y_i}, the head values h_it = sum_c gamma_ic G_itc
//! and the softmax backward c_it = s_it (h_it - sum_u s_iu h_iu) / n:
//!
//! ```text
//! dL/dnu_c = (1/n) sum_i gamma_ic sum_t s_it x_it    dL/db_c = (1/n) sum_i gamma_ic
//! dL/dq    = sum_i X_i^T c_i                         (Pass::grad_q)
//! dL/dW    = (dL/dq) p^T                             (rank one, formed once)
//! dL/dp    = W^T dL/dq
//! ```
//!
//! Derivations: proofs-notes/real-setting.md.
//!
//! # Relation to the fixed-head models
//! The loss, its gradient gamma and the backward pass to the scores are the K-class
//! model's ([`super::multiclass`]: the same functions, the same operations in the same
//! order). With W = I, nu fixed to the K-class config's head (nu_c its class-c row) and
//! no bias, this pass is the K-class p-mode model's: outputs, losses and dL/dq equal
//! bit for bit (tests/real_setting.rs), and dL/dp = W^T dL/dq = dL/dq exactly (a product
//! with the identity rounds nothing). [`Head::Fixed`] declares nu `trained: false`: the
//! fixed-head variant the official code left unwritten (`forward_with_fixed_head`).
//!
//! # Order and threads
//! Per-sample work (scores, softmax, outputs, loss, gamma, token coefficients) runs on
//! several threads above [`crate::linalg::worth_parallel`], each sample's in a fixed
//! order; every sum over samples runs after, in sample order: the mean loss; dL/dq as
//! one fma chain over the rows (i, t) ([`crate::linalg::matvec_t_f64`], the trainer's
//! X^T c); dL/dnu_c likewise with the weights s_it gamma_ic; dL/db_c in sample order.
//! dL/dW's rows (g_j p) are independent (row-parallel); dL/dp is
//! [`crate::linalg::matvec_t`]. Any thread count gives the same bits.

use ndarray::{ArrayView2, ArrayView3};
use rayon::prelude::*;

use super::attention::{Softmax, scores, softmax};
use super::blocks::{Block, BlockInit, BlockStream, Blocks, FIRST_BLOCK_STREAM};
use super::multiclass::{cross_entropy, head_coefficients, outputs_into};
use super::network::{Network, Pass};
use crate::arith::Arith;
use crate::config::Formulation;
use crate::data::head::multiclass_head_values;
use crate::linalg;

/// Whether the head nu (and its bias) trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// nu is trained with W and p (the official `OurAttention`).
    Trainable,
    /// nu stays at its initial values (`trained: false`; its gradient is 0).
    Fixed,
}

/// The real-setting model `OurAttention` (module docs): attention over T tokens with a
/// trainable (or fixed) K-class head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RealSetting {
    /// Token dimension d.
    pub d: usize,
    /// Tokens per sample T.
    pub tokens: usize,
    /// Classes K.
    pub classes: usize,
    /// Whether nu (and its bias) trains.
    pub head: Head,
    /// Whether the head has a bias `nu_bias` (K, zeros; not in the official model).
    pub bias: bool,
}

/// The block streams of W, nu (p and nu_bias are zeros, drawn from nothing): ids 104
/// and 105, clear of the factorised map's (64-67) and of the encoder's.
const STREAMS: [BlockStream; 2] = [
    BlockStream {
        name: "real_setting.W",
        id: FIRST_BLOCK_STREAM + 40,
    },
    BlockStream {
        name: "real_setting.nu",
        id: FIRST_BLOCK_STREAM + 41,
    },
];

/// One sample's forward results and its token coefficients.
struct SampleOut<R> {
    scores: Vec<R>,
    attention: Vec<R>,
    outputs: Vec<R>,
    loss: R,
    /// gamma / n = (softmax(f) - e_Y) / n.
    gamma: Vec<R>,
    /// c_t = s_t (h_t - hbar) / n (with a gradient pass; empty otherwise).
    c: Vec<R>,
}

impl RealSetting {
    /// Whether the per-sample loop of a pass over `n` samples runs on several threads
    /// in `ar` (n T (d + 4 K) operations above [`crate::linalg::worth_parallel`]).
    pub fn parallel<A: Arith>(&self, ar: &A, n: usize) -> bool {
        linalg::worth_parallel(ar, n * self.tokens * (self.d + 4 * self.classes))
    }

    /// The forward pass of sample `i` and, with `grad`, its token coefficients.
    #[allow(clippy::too_many_arguments)]
    fn sample<A: Arith>(
        &self,
        ar: &A,
        xi: ArrayView2<'_, f64>,
        g: &[A::Real],
        y: usize,
        q: &[A::Real],
        bias: Option<&[A::Real]>,
        coef: &A::Real,
        grad: bool,
    ) -> SampleOut<A::Real> {
        let (t, k) = (self.tokens, self.classes);
        let mut z = ar.zeros(t);
        scores(ar, xi, q, &mut z);
        let mut s = ar.zeros(t);
        let mut att = Softmax::new(ar);
        softmax(ar, &z, &mut s, Formulation::Stable, &mut att);
        let mut f = ar.zeros(k);
        let mut work = ar.zeros(k);
        outputs_into(ar, &s, g, att.top, Formulation::Stable, &mut f, &mut work);
        if let Some(b) = bias {
            for (fc, bc) in f.iter_mut().zip(b) {
                ar.add(fc, bc);
            }
        }
        let mut gamma = ar.zeros(k);
        let loss = cross_entropy(ar, &f, y, &mut work, &mut gamma);
        let mut c = Vec::new();
        if grad {
            c = ar.zeros(t);
            let (mut gt, mut h) = (ar.zeros(k * t), ar.zeros(t));
            head_coefficients(ar, &s, g, &gamma, att.top, coef, &mut gt, &mut h, &mut c);
        }
        for gc in gamma.iter_mut() {
            ar.mul(gc, coef);
        }
        SampleOut {
            scores: z,
            attention: s,
            outputs: f,
            loss,
            gamma,
            c,
        }
    }
}

impl Network for RealSetting {
    fn name(&self) -> &'static str {
        "real_setting"
    }

    fn blocks(&self) -> Vec<Block> {
        let (d, k) = (self.d, self.classes);
        let head = self.head == Head::Trainable;
        let mut blocks = vec![
            Block {
                name: "W",
                shape: vec![d, d],
                init: BlockInit::Orthogonal { gain: 1.0 },
                stream: STREAMS[0],
                trained: true,
                zero_grad: false,
            },
            Block {
                name: "p",
                shape: vec![d],
                init: BlockInit::Zero,
                stream: STREAMS[0],
                trained: true,
                zero_grad: false,
            },
            Block {
                name: "nu",
                shape: vec![d, k],
                init: BlockInit::Uniform {
                    bound: 1.0 / (d as f64).sqrt(),
                },
                stream: STREAMS[1],
                trained: head,
                zero_grad: false,
            },
        ];
        if self.bias {
            blocks.push(Block {
                name: "nu_bias",
                shape: vec![k],
                init: BlockInit::Zero,
                stream: STREAMS[1],
                trained: head,
                zero_grad: false,
            });
        }
        blocks
    }

    fn positions(&self) -> usize {
        self.tokens
    }

    fn pass<A: Arith>(
        &self,
        ar: &A,
        x: ArrayView3<'_, f64>,
        y: &[i8],
        theta: &Blocks<A::Real>,
        out: &mut Pass<A::Real>,
        grad: Option<&mut [Vec<A::Real>]>,
    ) {
        let (n, t, d) = x.dim();
        let k = self.classes;
        debug_assert_eq!((t, d), (self.tokens, self.d));
        debug_assert_eq!(y.len(), n);
        // labels are class indices in [0, K): the config and the data check them
        debug_assert!(y.iter().all(|c| (0..k as i64).contains(&(*c as i64))));
        let x = x.as_standard_layout();
        let rows = x.as_slice().expect("standard layout");
        let (w, p, nu) = (theta.get("W"), theta.get("p"), theta.get("nu"));
        let bias = self.bias.then(|| theta.get("nu_bias"));
        // q = W p (the code's W: logits x W p)
        let mut q = ar.zeros(d);
        linalg::matvec(ar, w, p, &mut q);
        // G = X nu through the class-major head (K x d), as the K-class model forms it
        let mut nu_rows = Vec::with_capacity(k * d);
        for c in 0..k {
            nu_rows.extend((0..d).map(|j| nu[j * k + c].clone()));
        }
        let g = multiclass_head_values(ar, x.view(), &nu_rows);
        let mut coef = ar.zero();
        ar.set_f64(&mut coef, 1.0);
        ar.div_f64(&mut coef, n as f64);
        let with_grad = grad.is_some();
        let one = |i: usize| {
            let xi = x.index_axis(ndarray::Axis(0), i);
            self.sample(
                ar,
                xi,
                &g[i * t * k..(i + 1) * t * k],
                y[i] as usize,
                &q,
                bias,
                &coef,
                with_grad,
            )
        };
        let samples: Vec<SampleOut<A::Real>> = if self.parallel(ar, n) {
            (0..n).into_par_iter().map(one).collect()
        } else {
            (0..n).map(one).collect()
        };
        out.positions = t;
        out.classes = k;
        out.scores.clear();
        out.attention.clear();
        out.outputs.clear();
        out.losses.clear();
        let mut total = ar.zero();
        for so in &samples {
            out.scores.extend_from_slice(&so.scores);
            out.attention.extend_from_slice(&so.attention);
            out.outputs.extend_from_slice(&so.outputs);
            ar.add(&mut total, &so.loss);
            out.losses.push(so.loss.clone());
        }
        ar.div_f64(&mut total, n as f64);
        out.loss = total;
        out.q = q;
        let Some(grad) = grad else {
            out.grad_q.clear();
            return;
        };
        let decl = self.blocks();
        debug_assert_eq!(grad.len(), decl.len());
        for (gb, b) in grad.iter_mut().zip(&decl) {
            *gb = ar.zeros(b.len());
        }
        // dL/dq = X^T c, one fma chain over the rows (i, t) in order
        let c: Vec<A::Real> = samples.iter().flat_map(|so| so.c.iter().cloned()).collect();
        let mut gq = ar.zeros(d);
        linalg::matvec_t_f64(ar, rows, &c, &mut gq);
        // dL/dW = (dL/dq) p^T, rows independent
        linalg::for_each_row(ar, &mut grad[0], d, d, |j, row| {
            for (r, pl) in row.iter_mut().zip(p) {
                ar.prod(r, &gq[j], pl);
            }
        });
        // dL/dp = W^T dL/dq
        linalg::matvec_t(ar, w, &gq, &mut grad[1]);
        if self.head == Head::Trainable {
            // dL/dnu_c = X^T (s gamma_c), one fma chain over the rows (i, t) per class
            let mut wts = ar.zeros(n * t);
            let mut col = ar.zeros(d);
            for cl in 0..k {
                for (so, wi) in samples.iter().zip(wts.chunks_mut(t)) {
                    for (wt, st) in wi.iter_mut().zip(&so.attention) {
                        ar.prod(wt, st, &so.gamma[cl]);
                    }
                }
                linalg::matvec_t_f64(ar, rows, &wts, &mut col);
                for (j, v) in col.iter().enumerate() {
                    ar.set(&mut grad[2][j * k + cl], v);
                }
            }
            if self.bias {
                for so in &samples {
                    for (gb, gc) in grad[3].iter_mut().zip(&so.gamma) {
                        ar.add(gb, gc);
                    }
                }
            }
        }
        out.grad_q = gq;
    }
}
