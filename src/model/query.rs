//! Query maps: how a model's parameter blocks ([`super::blocks`]) make the query q of
//! the attention core z = X q (+ a shift of every score), and how dL/dq (= X^T c, the
//! core's backward pass, formed by the engine) becomes each trained block's gradient.
//! Every map is written once over [`Arith`] and implements [`QueryMap`]; the direct
//! engine (`train::direct`) holds one ([`Query`]) and moves its blocks by one step
//! loop, naming no block itself.
//!
//! - [`Linear`]: today's p / W / joint modes, q = W^T p (W = I in p-mode: no W block).
//!   Blocks, in declaration order: `W` (d x d, row-major; W- and joint mode, trained
//!   there) and `p` (d; trained in p- and joint mode, fixed in W-mode), both at the
//!   run's initial parameters ([`crate::data::Params`]). Gradients:
//!
//!   ```text
//!   dL/dW = p (dL/dq)^T                  (rank one, kept FACTORED: p and dL/dq)
//!   dL/dp = W dL/dq  (+ the in-sequence prompt's own terms, train::direct)
//!   ```
//!
//!   The span engine (`train::span`) represents the same map in span coordinates (p
//!   and W as coefficients over the training tokens): a capability only this map has;
//!   it keeps its own p / W code.
//! - [`Factorised`] (`model::factorised`): q = W_K^T (W_Q p + b_Q), the shift
//!   <b_K, W_Q p + b_Q>.
//!
//! A new map is a file here with its blocks, forward and gradients, a variant of
//! [`Query`] and its construction in the trainer.

use super::blocks::{Block, BlockInit, BlockStream, Blocks};
use super::factorised::Factorised;
use crate::arith::Arith;
use crate::config::{Config, Mode};
use crate::data::Params;
use crate::linalg::{self, euclidean_norm};

/// One block's gradient: factored (rank one, `left right^T`) or dense.
#[derive(Debug, Clone)]
pub enum Grad<R> {
    /// left right^T (left: the rows' factors, right: the columns').
    Outer(Vec<R>, Vec<R>),
    /// The gradient itself.
    Dense(Vec<R>),
    /// A gradient of this many entries that is exactly 0 by the map's structure (the
    /// factorised map's b_K: a shift of every score of a sample, which softmax cancels;
    /// proofs-notes/factorised.md). Its block does not move under GD and normalised GD
    /// (its exact update is 0), Adam steps it with an exact zero gradient, and its norm is
    /// an exact 0 in every arithmetic.
    Zero(usize),
}

impl<R: Clone> Grad<R> {
    /// Row j of a factored gradient left right^T into `out` (`r.len()` entries): the
    /// rounded products `lj` right_k, one per entry (the one row computation of
    /// [`Grad::dense`] and of Adam's row-by-row step in `train::direct`).
    pub fn row<A: Arith<Real = R>>(ar: &A, lj: &R, r: &[R], out: &mut [R]) {
        for (o, rk) in out.iter_mut().zip(r) {
            ar.prod(o, lj, rk);
        }
    }

    /// The entries (a factored gradient's as rounded products left_j right_k, row-major).
    pub fn dense<A: Arith<Real = R>>(&self, ar: &A) -> Vec<R> {
        match self {
            Grad::Dense(v) => v.clone(),
            Grad::Zero(n) => ar.zeros(*n),
            Grad::Outer(l, r) => {
                let mut out = ar.zeros(l.len() * r.len());
                for (row, lj) in out.chunks_mut(r.len()).zip(l) {
                    Self::row(ar, lj, r, row);
                }
                out
            }
        }
    }

    /// The Frobenius norm (|left| |right| for a factored gradient).
    pub fn norm<A: Arith<Real = R>>(&self, ar: &A) -> R {
        match self {
            Grad::Dense(v) => euclidean_norm(ar, v),
            Grad::Zero(_) => ar.zero(),
            Grad::Outer(l, r) => {
                let mut n = euclidean_norm(ar, l);
                ar.mul(&mut n, &euclidean_norm(ar, r));
                n
            }
        }
    }
}

/// A query map: its blocks, forward pass (blocks -> q and the score shift) and backward
/// pass (dL/dq -> each trained block's gradient), over any [`Arith`].
pub trait QueryMap<R: Clone> {
    /// The blocks, in declaration order (the order of the step loop: factors formed,
    /// blocks stepped, Adam's moments).
    fn blocks(&self) -> &Blocks<R>;

    /// The blocks, mutably.
    fn blocks_mut(&mut self) -> &mut Blocks<R>;

    /// The prefix of the blocks' names in state files (`""` for the linear map's `p`,
    /// `W`, `adam.t`, ...; `"factorised."` for the factorised map's).
    fn state_prefix(&self) -> &'static str;

    /// The forward pass: q (d) from the blocks, and the shift (if any).
    fn forward<A: Arith<Real = R>>(&mut self, ar: &A, q: &mut [R]);

    /// The shift every score carries (`None` where there is none).
    fn shift(&self) -> Option<&R>;

    /// What the map keeps of the backward pass from dL/dq `dq` and the token
    /// coefficients `c` (before [`QueryMap::gradients`]).
    fn backward<A: Arith<Real = R>>(&mut self, ar: &A, dq: &[R], c: &[R]);

    /// Every block's gradient, in declaration order (`None` for a block that does not
    /// train), at the current (old) blocks, from dL/dq `dq`; `prompt`: the in-sequence
    /// prompt's own terms of dL/dp, added to p's gradient (`None` with a separate
    /// prompt).
    fn gradients<A: Arith<Real = R>>(
        &self,
        ar: &A,
        dq: &[R],
        prompt: Option<&[R]>,
    ) -> Vec<Option<Grad<R>>>;

    /// The trained blocks' gradient norms in the order the global-norm clip takes them
    /// (default: declaration order).
    fn clip_norms<A: Arith<Real = R>>(&self, ar: &A, grads: &[Option<Grad<R>>]) -> Vec<R> {
        grads.iter().flatten().map(|g| g.norm(ar)).collect()
    }
}

/// The linear map q = W^T p of the p / W / joint modes (module docs).
#[derive(Debug, Clone)]
pub struct Linear<R> {
    /// `W` (W- and joint mode) and `p`, in that order.
    pub blocks: Blocks<R>,
}

/// The linear map's blocks are the run's initial parameters, not drawn from a stream.
const NO_STREAM: BlockStream = BlockStream {
    name: "init",
    id: crate::rng::Stream::Init as u64,
};

impl<R: Clone> Linear<R> {
    /// The blocks of `mode` at the initial parameters `init` (W present exactly when
    /// `init.w` is), converted exactly.
    pub fn new<A: Arith<Real = R>>(ar: &A, init: &Params, mode: Mode) -> Self {
        let decl = Self::declare(init.p.len(), init.w.is_some(), mode);
        let mut values = Vec::new();
        if let Some(w) = &init.w {
            values.push(ar.of_slice(w.as_slice().expect("standard layout")));
        }
        values.push(ar.of_slice(init.p.as_slice().expect("contiguous")));
        Linear {
            blocks: Blocks { decl, values },
        }
    }

    /// The declarations of the blocks in dimension `d`: `W` (d x d) when W is `dense`
    /// (trained unless `mode` is p-mode), then `p` (d; trained unless W-mode).
    pub fn declare(d: usize, dense: bool, mode: Mode) -> Vec<Block> {
        let block = |name, shape, trained| Block {
            name,
            shape,
            init: BlockInit::Initial,
            stream: NO_STREAM,
            trained,
            zero_grad: false,
        };
        let mut decl = Vec::new();
        if dense {
            decl.push(block("W", vec![d, d], mode != Mode::P));
        }
        decl.push(block("p", vec![d], mode != Mode::W));
        decl
    }
}

impl<R: Clone + Send + Sync> QueryMap<R> for Linear<R> {
    fn blocks(&self) -> &Blocks<R> {
        &self.blocks
    }

    fn blocks_mut(&mut self) -> &mut Blocks<R> {
        &mut self.blocks
    }

    fn state_prefix(&self) -> &'static str {
        ""
    }

    /// q = W^T p ([`linalg::matvec_t`]: q_k = sum_m p_m W[m, k], an fma chain over m),
    /// a copy of p without W.
    fn forward<A: Arith<Real = R>>(&mut self, ar: &A, q: &mut [R]) {
        let b = &self.blocks;
        match b.has("W") {
            false => q.clone_from_slice(b.get("p")),
            true => linalg::matvec_t(ar, b.get("W"), b.get("p"), q),
        }
    }

    fn shift(&self) -> Option<&R> {
        None
    }

    fn backward<A: Arith<Real = R>>(&mut self, _: &A, _: &[R], _: &[R]) {}

    /// W: (p, dL/dq) factored; p: W dL/dq ([`linalg::matvec`]; dL/dq itself without W)
    /// plus `prompt`, each entry one rounded sum.
    fn gradients<A: Arith<Real = R>>(
        &self,
        ar: &A,
        dq: &[R],
        prompt: Option<&[R]>,
    ) -> Vec<Option<Grad<R>>> {
        let b = &self.blocks;
        b.decl
            .iter()
            .map(|blk| {
                blk.trained.then(|| match blk.name {
                    "W" => Grad::Outer(b.get("p").to_vec(), dq.to_vec()),
                    "p" => {
                        let mut dp = match b.has("W") {
                            false => dq.to_vec(),
                            true => {
                                let mut dp = ar.zeros(dq.len());
                                linalg::matvec(ar, b.get("W"), dq, &mut dp);
                                dp
                            }
                        };
                        if let Some(extra) = prompt {
                            for (v, e) in dp.iter_mut().zip(extra) {
                                ar.add(v, e);
                            }
                        }
                        Grad::Dense(dp)
                    }
                    other => unreachable!("no gradient rule for block {other}"),
                })
            })
            .collect()
    }

    /// p's norm, then W's (the order the clip has always taken them in).
    fn clip_norms<A: Arith<Real = R>>(&self, ar: &A, grads: &[Option<Grad<R>>]) -> Vec<R> {
        ["p", "W"]
            .into_iter()
            .filter(|name| self.blocks.has(name))
            .filter_map(|name| grads[self.blocks.index(name)].as_ref())
            .map(|g| g.norm(ar))
            .collect()
    }
}

/// The query map a direct engine holds.
#[derive(Debug, Clone)]
pub enum Query<R> {
    /// q = W^T p.
    Linear(Linear<R>),
    /// q = W_K^T (W_Q p + b_Q).
    Factorised(Box<Factorised<R>>),
}

impl<R: Clone + Send + Sync> Query<R> {
    /// The query map of `cfg` (the factorised map with a `[factorised]` section, else
    /// the linear map of its mode) at the run's initial parameters `init`
    /// ([`Params::init`], or supplied), in `ar`: the map a direct engine starts from.
    pub fn of_config<A: Arith<Real = R>>(ar: &A, cfg: &Config, init: &Params) -> Self {
        match &cfg.factorised {
            Some(sec) => Query::Factorised(Box::new(Factorised::new(
                ar,
                sec,
                cfg.seed,
                init.p.as_slice().expect("contiguous"),
            ))),
            None => Query::Linear(Linear::new(ar, init, cfg.mode)),
        }
    }

    /// The block declarations of `cfg`'s query map (names, shapes, whether each
    /// trains), in declaration order, without drawing a value: what a file of initial
    /// blocks is checked against before any work.
    pub fn declare(cfg: &Config) -> Vec<Block> {
        match &cfg.factorised {
            Some(sec) => sec.blocks(cfg.d, &[]),
            None => Linear::<R>::declare(cfg.d, cfg.dense_w(), cfg.mode),
        }
    }

    /// The prefix of `cfg`'s query map's names in state files
    /// ([`QueryMap::state_prefix`] of the map [`Query::of_config`] builds).
    pub fn state_prefix_of(cfg: &Config) -> &'static str {
        match cfg.factorised {
            Some(_) => "factorised.",
            None => "",
        }
    }

    /// The blocks, by value.
    pub fn into_blocks(self) -> Blocks<R> {
        match self {
            Query::Linear(m) => m.blocks,
            Query::Factorised(m) => m.blocks,
        }
    }
}

macro_rules! each {
    ($self:expr, $m:ident => $e:expr) => {
        match $self {
            Query::Linear($m) => $e,
            Query::Factorised($m) => $e,
        }
    };
}

impl<R: Clone + Send + Sync> QueryMap<R> for Query<R> {
    fn blocks(&self) -> &Blocks<R> {
        each!(self, m => m.blocks())
    }

    fn blocks_mut(&mut self) -> &mut Blocks<R> {
        each!(self, m => m.blocks_mut())
    }

    fn state_prefix(&self) -> &'static str {
        each!(self, m => m.state_prefix())
    }

    fn forward<A: Arith<Real = R>>(&mut self, ar: &A, q: &mut [R]) {
        each!(self, m => m.forward(ar, q))
    }

    fn shift(&self) -> Option<&R> {
        each!(self, m => m.shift())
    }

    fn backward<A: Arith<Real = R>>(&mut self, ar: &A, dq: &[R], c: &[R]) {
        each!(self, m => m.backward(ar, dq, c))
    }

    fn gradients<A: Arith<Real = R>>(
        &self,
        ar: &A,
        dq: &[R],
        prompt: Option<&[R]>,
    ) -> Vec<Option<Grad<R>>> {
        match self {
            Query::Linear(m) => m.gradients(ar, dq, prompt),
            Query::Factorised(m) => QueryMap::gradients(&**m, ar, dq, prompt),
        }
    }

    fn clip_norms<A: Arith<Real = R>>(&self, ar: &A, grads: &[Option<Grad<R>>]) -> Vec<R> {
        each!(self, m => m.clip_norms(ar, grads))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arith::F64;

    /// The linear map declares W (d x d) before p, trained as the mode says, names
    /// its state blocks as ever (no prefix), forms q = W^T p, keeps W's gradient
    /// factored as (p, dL/dq), adds the prompt's terms to p's W dL/dq, and gives the
    /// clip its norms p's first, then W's (the order the digests depend on).
    #[test]
    fn linear_map_declares_w_then_p_and_clips_p_first() {
        let init = Params {
            p: ndarray::array![1.0, 2.0],
            w: Some(ndarray::array![[1.0, 0.0], [3.0, 4.0]]),
        };
        let names = |m: &Linear<f64>| {
            m.blocks
                .iter()
                .map(|(b, _)| (b.name, b.trained))
                .collect::<Vec<_>>()
        };
        let joint = Linear::new(&F64, &init, Mode::Joint);
        assert_eq!(names(&joint), [("W", true), ("p", true)]);
        assert_eq!(
            names(&Linear::new(&F64, &init, Mode::W)),
            [("W", true), ("p", false)]
        );
        let p_only = Params {
            p: init.p.clone(),
            w: None,
        };
        let mut pm = Linear::new(&F64, &p_only, Mode::P);
        assert_eq!(names(&pm), [("p", true)]);
        let mut q = vec![0.0; 2];
        pm.forward(&F64, &mut q);
        assert_eq!(q, [1.0, 2.0]);
        let mut jm = joint.clone();
        assert_eq!(jm.state_prefix(), "");
        jm.forward(&F64, &mut q);
        assert_eq!(q, [7.0, 8.0]);
        let dq = [1.0, -1.0];
        let g = jm.gradients(&F64, &dq, Some(&[0.5, 0.5]));
        match &g[0] {
            Some(Grad::Outer(l, r)) => assert_eq!((&l[..], &r[..]), (&[1.0, 2.0][..], &dq[..])),
            other => panic!("W's gradient: {other:?}"),
        }
        match &g[1] {
            Some(Grad::Dense(v)) => assert_eq!(v, &[1.5, -0.5]),
            other => panic!("p's gradient: {other:?}"),
        }
        let norms = jm.clip_norms(&F64, &g);
        assert_eq!(norms[0], (1.5f64 * 1.5 + 0.5 * 0.5).sqrt());
        assert_eq!(norms[1], 5f64.sqrt() * 2f64.sqrt());
    }
}
