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
//! dL/db_K = (sum_i sum_t c_it) u = 0        (exactly: softmax cancels a shift of every
//!                                            score of a sample; [`Grad::Zero`])
//! dL/dp   = W_Q^T dL/du                     (when p trains)
//! ```
//!
//! Each follows from the chain rule through z_it = <x_it, q> + <b_K, u> with dL/dz_it =
//! c_it: dL/dq = sum c_it x_it; q = W_K^T u gives dL/dW_K[j, k] = u_j (dL/dq)_k and a
//! contribution W_K dL/dq to dL/du; the shift gives (sum c_it) b_K to dL/du and (sum
//! c_it) u to dL/db_K; both are 0 in exact arithmetic (sum_t c_it = 0 for every
//! sample) and neither is formed: the former is dropped (it would put rounding noise into
//! every other block), the latter is the structural zero [`Grad::Zero`], so b_K keeps its
//! value exactly under GD and normalised GD (the exact update; normalising the computed
//! rounding noise would move b_K by a full step in a noise direction, and its enclosure
//! in balls would reach 0) and Adam steps it with an exact zero gradient (only AdamW's
//! decay moves it), in every arithmetic alike (proofs-notes/factorised.md). The
//! computed sum stays in [`Factorised::coef_sum`] as a check; u = W_Q p + b_Q gives the
//! rest.
//!
//! The blocks ([`super::blocks`]) are `W_Q`, `W_K` (m x d, row-major), with `bias`
//! `b_Q`, `b_K` (m), and `p` (d: the config's p(0) from the `init` stream, as W-mode
//! draws it), in that order; W_Q, W_K, b_Q, b_K train, p trains with `train_p`.
//!
//! # Steps
//! This file declares the blocks and their gradients ([`QueryMap`]); the direct
//! engine's one step loop over blocks (`train::direct`, shared with the linear map of
//! the p / W / joint modes) moves them. Every factor is formed, and every gradient is
//! taken, at the old parameters before any block moves. Gradient descent and normalised
//! GD (each block by its own norm: |u| |dL/dq| and |dL/du| |p| for the factored blocks,
//! as W-mode's |p| |dL/dq|; the clip factor from the global norm of the trained blocks,
//! in declaration order): a factored block's row j moves by ((factor) left_j) right (one
//! rounded product, then an fma per entry: W-mode's order), a vector block by an fma per
//! entry. Adam and AdamW: [`crate::train::adam::step`] per block, with the block's
//! gradient entries formed as rounded products (times the clip factor), moments per
//! block.

use serde::{Deserialize, Serialize};

use super::blocks::{Block, BlockInit, BlockStream, Blocks, FIRST_BLOCK_STREAM};
pub use super::query::Grad;
use super::query::QueryMap;
use crate::arith::Arith;
use crate::config::{Config, Formulation, Method, Mode};
use crate::error::{Error, Result};
use crate::linalg;

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
    /// What it trains, for reports: e.g. `factorised query-key (m = 16, no biases, W_Q,
    /// W_K trained, p fixed)`.
    pub fn describe(&self) -> String {
        format!(
            "factorised query-key (m = {}, {}W_Q, W_K{} trained{})",
            self.m,
            if self.bias { "biases, " } else { "no biases, " },
            if self.bias { ", b_Q, b_K" } else { "" },
            if self.train_p {
                ", p trained"
            } else {
                ", p fixed"
            }
        )
    }

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
            zero_grad: false,
        };
        let mut v = vec![
            block("W_Q", vec![self.m, d], wq, STREAMS[0]),
            block("W_K", vec![self.m, d], wk, STREAMS[1]),
        ];
        if self.bias {
            v.push(block("b_Q", vec![self.m], bq, STREAMS[2]));
            // b_K shifts every score of a sample alike: its exact gradient is 0
            v.push(Block {
                zero_grad: true,
                ..block("b_K", vec![self.m], bk, STREAMS[3])
            });
        }
        v.push(Block {
            trained: self.train_p,
            ..block("p", vec![d], BlockInit::Given(p0.to_vec()), STREAMS[0])
        });
        v
    }
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
    /// sum_i sum_t c_it of the last backward pass (in sample, then token order; with
    /// biases): 0 in exact arithmetic, so the computed value is rounding noise (a ball
    /// around 0). A check only: b_K's gradient is the structural zero ([`Grad::Zero`]),
    /// not this sum times u.
    pub coef_sum: R,
}

impl<R: Clone + Send + Sync> Factorised<R> {
    /// The blocks of `sec` at their initial values (streams under `seed`; p from `p0`),
    /// converted exactly.
    pub fn new<A: Arith<Real = R>>(ar: &A, sec: &Section, seed: u64, p0: &[f64]) -> Self {
        Factorised {
            m: sec.m,
            u: ar.zeros(sec.m),
            shift: sec.bias.then(|| ar.zero()),
            du: ar.zeros(sec.m),
            coef_sum: ar.zero(),
            blocks: Blocks::init(ar, sec.blocks(p0.len(), p0), seed),
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
                    // (sum_i sum_t c_it) u is 0 exactly (module docs): the structural zero,
                    // not the rounding noise the computed `coef_sum` carries
                    _ if b.zero_grad => Grad::Zero(b.len()),
                    "W_K" => Grad::Outer(self.u.clone(), dq.to_vec()),
                    "W_Q" => Grad::Outer(self.du.clone(), self.blocks.get("p").to_vec()),
                    "b_Q" => Grad::Dense(self.du.clone()),
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
}

impl<R: Clone + Send + Sync> QueryMap<R> for Factorised<R> {
    fn blocks(&self) -> &Blocks<R> {
        &self.blocks
    }

    fn blocks_mut(&mut self) -> &mut Blocks<R> {
        &mut self.blocks
    }

    fn state_prefix(&self) -> &'static str {
        "factorised."
    }

    /// u = W_Q p + b_Q (a dot product per row, then the bias added), q = W_K^T u
    /// ([`linalg::matvec_t`]: an fma chain over the rows), the shift <b_K, u>.
    fn forward<A: Arith<Real = R>>(&mut self, ar: &A, q: &mut [R]) {
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

    fn shift(&self) -> Option<&R> {
        self.shift.as_ref()
    }

    /// dL/du = W_K dL/dq, and (with biases) sum_i sum_t c_it in order.
    fn backward<A: Arith<Real = R>>(&mut self, ar: &A, dq: &[R], c: &[R]) {
        linalg::matvec(ar, self.blocks.get("W_K"), dq, &mut self.du);
        if self.shift.is_some() {
            let mut s = ar.zero();
            for ci in c {
                ar.add(&mut s, ci);
            }
            self.coef_sum = s;
        }
    }

    /// [`Factorised::gradients`] (the in-sequence prompt is refused with
    /// `[factorised]`, so `prompt` is `None`).
    fn gradients<A: Arith<Real = R>>(
        &self,
        ar: &A,
        dq: &[R],
        prompt: Option<&[R]>,
    ) -> Vec<Option<Grad<R>>> {
        debug_assert!(prompt.is_none(), "[factorised] takes the separate prompt");
        Factorised::gradients(self, ar, dq)
    }
}
