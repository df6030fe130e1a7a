//! Models that own every parameter: a network declares its parameter blocks
//! ([`Block`]) and computes one pass over a set of samples (outputs, losses, the
//! attention of its attending row, and with a gradient buffer the gradient of the mean
//! loss with respect to every block), written once over [`Arith`]. The block trainer
//! (`train::network`) moves the blocks by the step rule and records the pass; it never
//! names a block.
//!
//! The token-selection models ([`super::Model`]: a fixed head and a loss over the
//! engines' p and W) are not networks yet; the authors' one-layer encoder
//! ([`super::encoder`]) is the first.

use ndarray::ArrayView3;

use crate::arith::Arith;

use super::blocks::{Block, Blocks};

/// One pass of a network over `n` samples, in its arithmetic.
///
/// The attention is that of the row that reaches the output (the encoder's cls row):
/// `positions` entries per sample, the in-sequence positions first (the encoder's cls
/// token at position 0), then the sample's T tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct Pass<R> {
    /// Attention positions per sample.
    pub positions: usize,
    /// Scores of the attending row (n x positions, row-major).
    pub scores: Vec<R>,
    /// Its attention, the softmax of `scores` (n x positions).
    pub attention: Vec<R>,
    /// Outputs per sample: 1 (a binary model's f) or K (a K-class model's f_0, ...,
    /// f_{K-1}).
    pub classes: usize,
    /// The outputs of each sample (n x classes, row-major).
    pub outputs: Vec<R>,
    /// Each sample's loss term (n), not divided by n: l(Y f) of a binary model, the
    /// cross-entropy -log softmax(f)_Y of a K-class one.
    pub losses: Vec<R>,
    /// The mean loss, sum of `losses` in sample order divided by n.
    pub loss: R,
    /// The attending row's query in token space, where the model has one shared by the
    /// samples (the encoder: q = W_K^T W_Q LN_a(c) / sqrt(d), so that the scores are
    /// <q, LN_a(x_t)>); empty otherwise.
    pub q: Vec<R>,
    /// dL/dq of the mean loss (with a gradient pass; empty otherwise or without `q`).
    pub grad_q: Vec<R>,
}

impl<R: Clone> Pass<R> {
    /// An empty pass (every vector empty, the loss 0), filled by [`Network::pass`].
    pub fn new<A: Arith<Real = R>>(ar: &A) -> Self {
        Pass {
            positions: 0,
            classes: 1,
            scores: Vec::new(),
            attention: Vec::new(),
            outputs: Vec::new(),
            losses: Vec::new(),
            loss: ar.zero(),
            q: Vec::new(),
            grad_q: Vec::new(),
        }
    }
}

/// A model that owns its parameters as blocks.
///
/// A network is a small value (its sizes), shared by threads.
pub trait Network: std::fmt::Debug + Send + Sync {
    /// Its name in configs and outputs (`[model] kind`).
    fn name(&self) -> &'static str;

    /// The parameter blocks in declaration order: names, resolved shapes, inits from
    /// their own named seeded streams, trained or fixed.
    fn blocks(&self) -> Vec<Block>;

    /// Attention positions per sample of [`Pass`] (in-sequence positions + T).
    fn positions(&self) -> usize;

    /// One pass over the samples `x` (n, T, d) with labels `y` (+-1 for a binary model,
    /// 0..K for a K-class one) at the parameters
    /// `theta` (declared by [`Network::blocks`]): fills `out` (its vectors resized).
    /// With `grad`, also the gradient of the mean loss with respect to every block into
    /// `grad` (one vector per block, in declaration order, each of its block's length;
    /// overwritten, a fixed block's gradient left 0) and `out.grad_q`.
    ///
    /// Every sum runs in a fixed order (any thread count gives the same bits).
    fn pass<A: Arith>(
        &self,
        ar: &A,
        x: ArrayView3<'_, f64>,
        y: &[i8],
        theta: &Blocks<A::Real>,
        out: &mut Pass<A::Real>,
        grad: Option<&mut [Vec<A::Real>]>,
    );
}

/// Why a network model (the encoder) is not taken by the token-selection trainer and
/// the analyses written for it: the message of their refusal.
pub fn refusal(cfg: &crate::config::Config) -> String {
    format!(
        "the {} is a network model (every parameter a trained block): `run` and `twin` \
         train it (the block trainer); this command is written for the token-selection \
         models' trainer",
        cfg.model.kind.name()
    )
}
