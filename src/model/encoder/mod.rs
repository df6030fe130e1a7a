//! The authors' one-layer Transformer encoder (`main_one_layer.py`'s `OneLayerEncoder`,
//! SPEC section 18; proofs-notes/encoder.md) as a [`Network`]: every parameter a
//! block named as PyTorch's `state_dict` key, with its shape, in `named_parameters()`
//! order, each drawn from its own seeded stream, every block trained.
//!
//! For a sample x (T, d) with Z = [c; x] (T + 1 positions, the cls token c first):
//!
//! ```text
//! zhat_t = LN_a(Z_t)                             (t = 0..T; zhat_0 = LN_a(c) shared)
//! q      = d^-1/2 W_k^T W_q zhat_0               (one query, shared by the samples)
//! z_t    = <q, zhat_t>,  a = softmax(z)          (the cls row's scores and attention)
//! out    = W_v (sum_t a_t zhat_t)                (no output projection)
//! H      = out + c  (skip)     |  out             (no skip)
//! H'     = W_2 GELU(W_1 LN_b(H) + b_1) + b_2 + H  (skip)  |  without "+ H" (no skip)
//! f      = <w_h, LN_c(H')> + b_h
//! loss   = mean_i l(y_i f_i),  l(u) = log(1 + exp(-u)) (naive, as the official loop)
//! ```
//!
//! Only row 0 (the cls row) reaches f, so only row 0 is computed: positions 1..T's
//! outputs never reach the loss, their gradient contribution is exactly 0. A pass costs
//! O(n (T d + d^2 + m d)): W_q zhat_0 and W_k^T of it once, then per sample the T + 1
//! scores, the softmax, one d x d product (W_v) and the MLP on one vector.
//!
//! The backward pass composes the operations' backward passes (`model::ops`) with the
//! attention core (softmax backward c_t = a_t (g_t - sum_u a_u g_u)); dL/dW_q and
//! dL/dW_k are rank one (zhat_0 is shared), dL/dW_v, dL/dW_1, dL/dW_2 are sums over the
//! samples of outer products, each entry an fma chain in sample order, formed by rows
//! (spread over threads above a threshold): every thread count gives the same bits.

mod pass;

use crate::arith::Arith;
use crate::linalg::worth_parallel;

use super::blocks::{Block, BlockInit, BlockStream, FIRST_BLOCK_STREAM};
use super::network::Network;
use super::ops::Loss;

/// LayerNorm's eps (`nn.LayerNorm`'s default).
pub const EPS: f64 = 1e-5;

/// The first block stream id of the encoder (the factorised map's are +0..+3).
pub const FIRST_ENCODER_STREAM: u64 = FIRST_BLOCK_STREAM + 16;

/// The blocks' names: PyTorch's `state_dict` keys of `OneLayerEncoder`, in its
/// `named_parameters()` order (the module's own `cls_token` first, then its children's
/// parameters in registration order).
pub const BLOCK_NAMES: [&str; 14] = [
    "cls_token",
    "attn.norm.weight",
    "attn.norm.bias",
    "attn.to_qkv.weight",
    "ff.net.0.weight",
    "ff.net.0.bias",
    "ff.net.1.weight",
    "ff.net.1.bias",
    "ff.net.4.weight",
    "ff.net.4.bias",
    "norm.weight",
    "norm.bias",
    "head.weight",
    "head.bias",
];

/// The blocks' stream names, "encoder." + the block's name (stream id
/// [`FIRST_ENCODER_STREAM`] + the block's index).
const STREAM_NAMES: [&str; 14] = [
    "encoder.cls_token",
    "encoder.attn.norm.weight",
    "encoder.attn.norm.bias",
    "encoder.attn.to_qkv.weight",
    "encoder.ff.net.0.weight",
    "encoder.ff.net.0.bias",
    "encoder.ff.net.1.weight",
    "encoder.ff.net.1.bias",
    "encoder.ff.net.4.weight",
    "encoder.ff.net.4.bias",
    "encoder.norm.weight",
    "encoder.norm.bias",
    "encoder.head.weight",
    "encoder.head.bias",
];

/// Block indices (declaration order).
pub(crate) mod idx {
    pub const CLS: usize = 0;
    pub const NA_W: usize = 1;
    pub const NA_B: usize = 2;
    pub const QKV: usize = 3;
    pub const NB_W: usize = 4;
    pub const NB_B: usize = 5;
    pub const W1: usize = 6;
    pub const B1: usize = 7;
    pub const W2: usize = 8;
    pub const B2: usize = 9;
    pub const NC_W: usize = 10;
    pub const NC_B: usize = 11;
    pub const HEAD_W: usize = 12;
    pub const HEAD_B: usize = 13;
}

/// The authors' one-layer encoder (`OneLayerEncoder(dim = d, mlp_dim = m,
/// use_skip_connection = skip)`) with its loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoder {
    /// Token dimension d (`embed_dim`).
    pub d: usize,
    /// Tokens per sample T (`seq_len`; the pass attends over T + 1 positions).
    pub tokens: usize,
    /// Hidden width m of the MLP (`mlp_dim`).
    pub mlp: usize,
    /// The residual connections (`use_skip_connection`, the official default true).
    pub skip: bool,
    /// The loss' formulation: `Naive` as the official training loop writes it,
    /// log(1 + exp(-y f)); `Stable` without overflow.
    pub loss: Loss,
}

impl Encoder {
    /// The encoder of these sizes (nothing checked: the config validates them).
    pub fn new(d: usize, tokens: usize, mlp: usize, skip: bool, loss: Loss) -> Self {
        Encoder {
            d,
            tokens,
            mlp,
            skip,
            loss,
        }
    }

    /// The encoder a config describes (`[model] kind = "encoder"`: d, T, `mlp` (absent:
    /// d), `residual` (absent: true), the loss in the config's `formulation`).
    pub fn of(cfg: &crate::config::Config) -> Self {
        Encoder::new(
            cfg.d,
            cfg.layout.tokens,
            cfg.model.mlp_width(cfg.d),
            cfg.model.residual.unwrap_or(true),
            cfg.formulation,
        )
    }

    /// Whether a pass over `n` samples in `ar` runs its samples on several threads
    /// (each sample's forward and backward pass is independent of the others').
    pub fn parallel_samples<A: Arith>(&self, ar: &A, n: usize) -> bool {
        let (d, m, t) = (self.d, self.mlp, self.tokens + 1);
        let per_sample = 4 * t * d + 2 * d * d + 4 * m * d;
        worth_parallel(ar, n.saturating_mul(per_sample))
    }

    /// Whether a pass over `n` samples in `ar` forms the sums of outer products
    /// (dL/dW_v, dL/dW_1, dL/dW_2) by rows on several threads.
    pub fn parallel_rows<A: Arith>(&self, ar: &A, n: usize) -> bool {
        let (d, m) = (self.d, self.mlp);
        worth_parallel(ar, n.saturating_mul(d * d + 2 * m * d))
    }
}

impl Network for Encoder {
    fn name(&self) -> &'static str {
        "encoder"
    }

    /// The 14 blocks of `OneLayerEncoder`, PyTorch's inits: `cls_token` N(0, 1); the
    /// LayerNorms' weights 1 and biases 0; every `nn.Linear` weight and bias
    /// U(+-1/sqrt(fan_in)) (kaiming_uniform with a = sqrt 5 gives that bound).
    fn blocks(&self) -> Vec<Block> {
        let (d, m) = (self.d, self.mlp);
        let uniform = |fan_in: usize| BlockInit::Uniform {
            bound: 1.0 / (fan_in as f64).sqrt(),
        };
        let ones = |k: usize| BlockInit::Given(vec![1.0; k]);
        let spec: [(Vec<usize>, BlockInit); 14] = [
            (vec![1, 1, d], BlockInit::Gaussian { scale: 1.0 }),
            (vec![d], ones(d)),
            (vec![d], BlockInit::Zero),
            (vec![3 * d, d], uniform(d)),
            (vec![d], ones(d)),
            (vec![d], BlockInit::Zero),
            (vec![m, d], uniform(d)),
            (vec![m], uniform(d)),
            (vec![d, m], uniform(m)),
            (vec![d], uniform(m)),
            (vec![d], ones(d)),
            (vec![d], BlockInit::Zero),
            (vec![1, d], uniform(d)),
            (vec![1], uniform(d)),
        ];
        spec.into_iter()
            .enumerate()
            .map(|(k, (shape, init))| Block {
                name: BLOCK_NAMES[k],
                shape,
                init,
                stream: BlockStream {
                    name: STREAM_NAMES[k],
                    id: FIRST_ENCODER_STREAM + k as u64,
                },
                trained: true,
                zero_grad: false,
            })
            .collect()
    }

    fn positions(&self) -> usize {
        self.tokens + 1
    }

    fn pass<A: Arith>(
        &self,
        ar: &A,
        x: ndarray::ArrayView3<'_, f64>,
        y: &[i8],
        theta: &super::blocks::Blocks<A::Real>,
        out: &mut super::network::Pass<A::Real>,
        grad: Option<&mut [Vec<A::Real>]>,
    ) {
        pass::pass(self, ar, x, y, theta, out, grad)
    }
}
