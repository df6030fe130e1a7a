//! Factorised query-key attention (SPEC section 17; proofs-notes/factorised.md): the
//! scores of sample i are
//!
//! ```text
//! z_it = (W_Q p + b_Q)^T (W_K x_it + b_K),   W_Q, W_K in R^{m x d}, b_Q, b_K in R^m
//!      = <x_it, q> + <b_K, u>,               u = W_Q p + b_Q (m),  q = W_K^T u (d)
//! ```
//!
//! so the attention core of the direct engine (z = X q, dL/dq = X^T c, with c the token
//! coefficients the model writes) is unchanged; this file is the **query map**, written
//! once over [`Arith`] (f64, f32, the MPFR twin, the 53-bit predictor, balls): its
//! forward pass (blocks -> u, q and the score shift <b_K, u>, the same for every
//! sample: the query p is shared) and its backward pass (dL/dq and the sum of the
//! token coefficients -> each block's gradient):
//!
//! ```text
//! dL/du   = W_K dL/dq                       (m; a dot product per row of W_K)
//! dL/dW_K = u (dL/dq)^T                     (rank one, kept FACTORED: u and dL/dq)
//! dL/dW_Q = (dL/du) p^T                     (rank one, kept FACTORED: dL/du and p)
//! dL/db_Q = dL/du
//! dL/db_K = (sum_i sum_t c_it) u            (0 in exact arithmetic: softmax cancels a
//!                                            shift of every score of a sample)
//! dL/dp   = W_Q^T dL/du                     (when p trains)
//! ```
//!
//! Each follows from the chain rule through z_it = <x_it, q> + <b_K, u> with dL/dz_it =
//! c_it: dL/dq = sum c_it x_it; q = W_K^T u gives dL/dW_K[j, k] = u_j (dL/dq)_k and a
//! contribution W_K dL/dq to dL/du; the shift gives (sum c_it) b_K to dL/du and (sum
//! c_it) u to dL/db_K; the former is dropped (it is 0 in exact arithmetic, and keeping
//! it would put rounding noise into every other block); u = W_Q p + b_Q gives the rest.
//!
//! The blocks ([`super::blocks`]) are `W_Q`, `W_K` (m x d, row-major), with `bias`
//! `b_Q`, `b_K` (m), and `p` (d: the config's p(0) from the `init` stream, as W-mode
//! draws it), in that order; W_Q, W_K, b_Q, b_K train, p trains with `train_p`.
//!
//! # Steps
//! Every factor is formed, and every gradient is taken, at the old parameters before
//! any block moves. Gradient descent and normalised GD (each block by its own norm:
//! |u| |dL/dq| and |dL/du| |p| for the factored blocks, as W-mode's |p| |dL/dq|; the
//! clip factor from the global norm of the trained blocks, as `train::step_rule` does
//! for p and W): a factored block's row j moves by ((factor) left_j) right (one
//! rounded product, then an fma per entry: W-mode's order), a vector block by an fma per
//! entry. Adam and AdamW: [`crate::train::adam::step`] per block, with the block's
//! gradient entries formed as rounded products (times the clip factor), moments per
//! block.

use serde::{Deserialize, Serialize};

use super::blocks::{Block, BlockInit, BlockStream, Blocks, FIRST_BLOCK_STREAM};
use crate::arith::Arith;
use crate::config::{Config, Formulation, Method, Mode};
use crate::error::{Error, Result};
use crate::linalg;
use crate::train::adam;
use crate::train::step_rule::{StepRule, Stopped, clip_factor, euclidean_norm};

/// Largest m d (entries of W_Q or W_K).
pub const MAX_BLOCK_ENTRIES: usize = 50_000_000;

/// The `[factorised]` section: the query map's shape, biases, whether p trains and the
/// init.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Section {
    /// Rows m of W_Q and W_K (the head dimension).
    pub m: usize,
    /// Biases b_Q, b_K (default false).
    #[serde(default)]
    pub bias: bool,
    /// Whether the query p trains (default false: p fixed, as in W-mode). `mode` must be
    /// "joint" with `train_p = true` and "W" without.
    #[serde(default)]
    pub train_p: bool,
    /// The init (default "linear").
    #[serde(default)]
    pub init: QkInit,
    /// The standard deviation of the "gaussian" init (required by it, refused
    /// otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
}

/// How W_Q, W_K, b_Q, b_K are drawn (each from its own stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QkInit {
    /// PyTorch's `nn.Linear(d, m)`: weights and biases U(-1/sqrt(d), 1/sqrt(d)).
    #[default]
    Linear,
    /// W_Q = 0, b_Q = 0; W_K and b_K as "linear".
    ZeroQuery,
    /// Weights N(0, scale^2), biases 0.
    Gaussian,
}

/// The block streams: W_Q, W_K, b_Q, b_K (stream ids 64-67).
const STREAMS: [BlockStream; 4] = [
    BlockStream {
        name: "factorised.W_Q",
        id: FIRST_BLOCK_STREAM,
    },
    BlockStream {
        name: "factorised.W_K",
        id: FIRST_BLOCK_STREAM + 1,
    },
    BlockStream {
        name: "factorised.b_Q",
        id: FIRST_BLOCK_STREAM + 2,
    },
    BlockStream {
        name: "factorised.b_K",
        id: FIRST_BLOCK_STREAM + 3,
    },
];

impl Section {
    /// The section against the rest of `cfg` (a config error, exit code 2, before any
    /// work): m in range, the mode matching `train_p`, the scale of the Gaussian init,
    /// and what the query map does not implement refused by name.
    pub fn validate(&self, cfg: &Config) -> Result<()> {
        let bad = |key: &str, what: String| Err(Error::config(key, what));
        if self.m == 0 {
            return bad("factorised.m", "must be at least 1".into());
        }
        if self.m.saturating_mul(cfg.d) > MAX_BLOCK_ENTRIES {
            return bad(
                "factorised.m",
                format!(
                    "m d = {} x {} entries per block is above the limit of {MAX_BLOCK_ENTRIES}",
                    self.m, cfg.d
                ),
            );
        }
        let want = if self.train_p { Mode::Joint } else { Mode::W };
        if cfg.mode != want {
            return bad(
                "mode",
                format!(
                    "[factorised] with train_p = {} needs mode = \"{}\" (got \"{}\"): W_Q and W_K \
                     always train, p trains exactly in joint mode",
                    self.train_p,
                    want.name(),
                    cfg.mode.name()
                ),
            );
        }
        match (self.init, self.scale) {
            (QkInit::Gaussian, Some(s)) if s.is_finite() && s > 0.0 => {}
            (QkInit::Gaussian, s) => {
                return bad(
                    "factorised.scale",
                    match s {
                        Some(s) => format!("init = \"gaussian\" needs a finite scale > 0, got {s}"),
                        None => "init = \"gaussian\" needs a finite scale > 0 (none given)".into(),
                    },
                );
            }
            (_, Some(_)) => {
                return bad(
                    "factorised.scale",
                    "applies to init = \"gaussian\" only".into(),
                );
            }
            _ => {}
        }
        let not =
            |key: &str, what: &str| bad(key, format!("[factorised] is implemented for {what}"));
        if cfg.method == Method::Span {
            return not(
                "method",
                "the direct step only: the span step's coefficients are p's and W's (set method = \"direct\" or \"auto\")",
            );
        }
        if cfg.formulation == Formulation::Naive {
            return not(
                "formulation",
                "the stable formulation only (set formulation = \"stable\")",
            );
        }
        if cfg.optimizer.minibatch(cfg.n_train).is_some() {
            return not(
                "optimizer.batch",
                "full-batch steps only (remove optimizer.batch)",
            );
        }
        if cfg.model.in_sequence() {
            return not(
                "model.prompt",
                "the separate prompt only (set prompt = \"separate\")",
            );
        }
        if cfg.direction.is_some() {
            return not(
                "direction",
                "runs without [direction] only (its attention SVM is W's; remove [direction])",
            );
        }
        Ok(())
    }

    /// The blocks in declaration order: W_Q, W_K (m x d), b_Q, b_K (m) with `bias`, and
    /// p (d) with the given initial values `p0` (the config's p(0)).
    pub fn blocks(&self, d: usize, p0: &[f64]) -> Vec<Block> {
        let linear = BlockInit::Uniform {
            bound: 1.0 / (d as f64).sqrt(),
        };
        let (wq, wk, bq, bk) = match self.init {
            QkInit::Linear => (linear.clone(), linear.clone(), linear.clone(), linear),
            QkInit::ZeroQuery => (BlockInit::Zero, linear.clone(), BlockInit::Zero, linear),
            QkInit::Gaussian => {
                let g = BlockInit::Gaussian {
                    scale: self.scale.unwrap_or(1.0),
                };
                (g.clone(), g, BlockInit::Zero, BlockInit::Zero)
            }
        };
        let block = |name, shape, init, stream| Block {
            name,
            shape,
            init,
            stream,
            trained: true,
        };
        let mut v = vec![
            block("W_Q", vec![self.m, d], wq, STREAMS[0]),
            block("W_K", vec![self.m, d], wk, STREAMS[1]),
        ];
        if self.bias {
            v.push(block("b_Q", vec![self.m], bq, STREAMS[2]));
            v.push(block("b_K", vec![self.m], bk, STREAMS[3]));
        }
        v.push(Block {
            trained: self.train_p,
            ..block("p", vec![d], BlockInit::Given(p0.to_vec()), STREAMS[0])
        });
        v
    }
}

/// One block's gradient: factored (rank one, `left right^T`) or dense.
#[derive(Debug, Clone)]
pub enum Grad<R> {
    /// left right^T (left: the rows' factors, right: the columns').
    Outer(Vec<R>, Vec<R>),
    /// The gradient itself.
    Dense(Vec<R>),
}

impl<R: Clone> Grad<R> {
    /// The entries (a factored gradient's as rounded products left_j right_k, row-major).
    pub fn dense<A: Arith<Real = R>>(&self, ar: &A) -> Vec<R> {
        match self {
            Grad::Dense(v) => v.clone(),
            Grad::Outer(l, r) => {
                let mut out = ar.zeros(l.len() * r.len());
                for (row, lj) in out.chunks_mut(r.len()).zip(l) {
                    for (o, rk) in row.iter_mut().zip(r) {
                        ar.prod(o, lj, rk);
                    }
                }
                out
            }
        }
    }

    /// The Frobenius norm (|left| |right| for a factored gradient).
    pub fn norm<A: Arith<Real = R>>(&self, ar: &A) -> R {
        match self {
            Grad::Dense(v) => euclidean_norm(ar, v),
            Grad::Outer(l, r) => {
                let mut n = euclidean_norm(ar, l);
                ar.mul(&mut n, &euclidean_norm(ar, r));
                n
            }
        }
    }
}

/// Adam's state of the blocks: the step counter and each block's moments (`None` for a
/// block that does not train), in declaration order.
#[derive(Debug, Clone, PartialEq)]
pub struct AdamBlocks<R> {
    /// Steps taken.
    pub t: u64,
    /// Moments per block.
    pub moments: Vec<Option<adam::Moments<R>>>,
}

/// The query map's state in the direct engine: the blocks, the forward pass's u and
/// score shift, the backward pass's dL/du and sum of token coefficients.
#[derive(Debug, Clone)]
pub struct Factorised<R> {
    /// The blocks (declaration order: [`Section::blocks`]).
    pub blocks: Blocks<R>,
    /// Rows m.
    pub m: usize,
    /// u = W_Q p + b_Q.
    pub u: Vec<R>,
    /// <b_K, u>: added to every score (`None` without biases).
    pub shift: Option<R>,
    /// dL/du = W_K dL/dq of the last backward pass.
    pub du: Vec<R>,
    /// sum_i sum_t c_it of the last backward pass (in sample, then token order).
    pub coef_sum: R,
    /// Adam's state (Adam and AdamW).
    pub adam: Option<Box<AdamBlocks<R>>>,
}

impl<R: Clone + Send + Sync> Factorised<R> {
    /// The blocks of `sec` at their initial values (streams under `seed`; p from `p0`),
    /// converted exactly; with `adam`, zero moments for every trained block.
    pub fn new<A: Arith<Real = R>>(
        ar: &A,
        sec: &Section,
        seed: u64,
        p0: &[f64],
        adam: bool,
    ) -> Self {
        let blocks = Blocks::init(ar, sec.blocks(p0.len(), p0), seed);
        let adam = adam.then(|| {
            Box::new(AdamBlocks {
                t: 0,
                moments: blocks
                    .decl
                    .iter()
                    .map(|b| b.trained.then(|| adam::Moments::zeros(ar, b.len())))
                    .collect(),
            })
        });
        Factorised {
            m: sec.m,
            u: ar.zeros(sec.m),
            shift: sec.bias.then(|| ar.zero()),
            du: ar.zeros(sec.m),
            coef_sum: ar.zero(),
            blocks,
            adam,
        }
    }

    /// The forward pass: u = W_Q p + b_Q (a dot product per row, then the bias added),
    /// q = W_K^T u ([`linalg::matvec_t`]: an fma chain over the rows), the shift
    /// <b_K, u>.
    pub fn forward<A: Arith<Real = R>>(&mut self, ar: &A, q: &mut [R]) {
        let b = &self.blocks;
        linalg::matvec(ar, b.get("W_Q"), b.get("p"), &mut self.u);
        if let Some(shift) = &mut self.shift {
            for (uj, bj) in self.u.iter_mut().zip(b.get("b_Q")) {
                ar.add(uj, bj);
            }
            ar.dot(b.get("b_K"), &self.u, shift);
        }
        linalg::matvec_t(ar, b.get("W_K"), &self.u, q);
    }

    /// The backward pass from dL/dq `dq` and the token coefficients `c`: dL/du = W_K
    /// dL/dq, and (with biases) sum_i sum_t c_it in order.
    pub fn backward<A: Arith<Real = R>>(&mut self, ar: &A, dq: &[R], c: &[R]) {
        linalg::matvec(ar, self.blocks.get("W_K"), dq, &mut self.du);
        if self.shift.is_some() {
            let mut s = ar.zero();
            for ci in c {
                ar.add(&mut s, ci);
            }
            self.coef_sum = s;
        }
    }

    /// Every block's gradient from the last backward pass (`dq`: its dL/dq), in
    /// declaration order; `None` for a block that does not train.
    pub fn gradients<A: Arith<Real = R>>(&self, ar: &A, dq: &[R]) -> Vec<Option<Grad<R>>> {
        self.blocks
            .decl
            .iter()
            .map(|b| {
                b.trained.then(|| match b.name {
                    "W_K" => Grad::Outer(self.u.clone(), dq.to_vec()),
                    "W_Q" => Grad::Outer(self.du.clone(), self.blocks.get("p").to_vec()),
                    "b_Q" => Grad::Dense(self.du.clone()),
                    "b_K" => {
                        let mut g = self.u.clone();
                        g.iter_mut().for_each(|x| ar.mul(x, &self.coef_sum));
                        Grad::Dense(g)
                    }
                    "p" => {
                        let mut g = ar.zeros(self.blocks.get("p").len());
                        linalg::matvec_t(ar, self.blocks.get("W_Q"), &self.du, &mut g);
                        Grad::Dense(g)
                    }
                    other => unreachable!("no gradient rule for block {other}"),
                })
            })
            .collect()
    }

    /// One step of every trained block from the last backward pass (`dq`: its dL/dq;
    /// module docs), then the forward pass into `q`. `Err` where normalised GD cannot
    /// form a block's factor; nothing moves then.
    pub fn update<A: Arith<Real = R>>(
        &mut self,
        ar: &A,
        rule: &StepRule,
        dq: &[R],
        q: &mut [R],
    ) -> std::result::Result<(), Stopped> {
        let grads = self.gradients(ar, dq);
        let clip = rule.clip.map(|c| {
            let norms: Vec<R> = grads.iter().flatten().map(|g| g.norm(ar)).collect();
            clip_factor(ar, c, &norms)
        });
        if let Some(h) = rule.adam {
            let st = self
                .adam
                .as_mut()
                .expect("an Adam run's query map holds Adam's state");
            st.t += 1;
            let s = h.scalars(ar, &rule.lr(ar), st.t);
            for ((g, v), mom) in grads
                .iter()
                .zip(&mut self.blocks.values)
                .zip(&mut st.moments)
            {
                let (Some(g), Some(mom)) = (g, mom) else {
                    continue;
                };
                let mut g = g.dense(ar);
                if let Some(c) = &clip {
                    g.iter_mut().for_each(|x| ar.mul(x, c));
                }
                adam::step(ar, &s, v, &g, &mut mom.m, &mut mom.v);
            }
            self.forward(ar, q);
            return Ok(());
        }
        let mut factors = Vec::with_capacity(grads.len());
        for (g, b) in grads.iter().zip(&self.blocks.decl) {
            factors.push(match g {
                None => None,
                Some(g) => Some(rule.neg_factor(ar, b.name, clip.as_ref(), || g.norm(ar))?),
            });
        }
        for ((g, f), v) in grads.iter().zip(&factors).zip(&mut self.blocks.values) {
            let (Some(g), Some(f)) = (g, f) else {
                continue;
            };
            match g {
                Grad::Dense(g) => ar.axpy(f, g, v),
                Grad::Outer(l, r) => {
                    linalg::for_each_row(ar, v, r.len(), r.len(), |j, row| {
                        let mut a = ar.zero();
                        ar.prod(&mut a, f, &l[j]);
                        ar.axpy(&a, r, row);
                    });
                }
            }
        }
        self.forward(ar, q);
        Ok(())
    }
}
