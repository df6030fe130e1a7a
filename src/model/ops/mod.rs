//! The operations of the authors' one-layer encoder and of a trainable head (SPEC section
//! 18), each with its backward pass, written once for every arithmetic ([`Arith`]): f64,
//! f32, the MPFR twin and the f64 predictor (which keeps f64's bits: every operation here
//! is a sequence of correctly rounded ones in a fixed order), and balls (an enclosure of
//! the exact value; `proofs-notes/ops.md`).
//!
//! - [`layer_norm`]: PyTorch's `nn.LayerNorm` over one vector (biased variance, eps
//!   inside the square root, affine);
//! - [`gelu`]: the exact GELU u Phi(u) = u (1 + erf(u / sqrt 2)) / 2 (`nn.GELU()`);
//! - [`dense`]: a dense layer with bias, y = W x + b, and the residual sum;
//! - [`logistic`]: the logistic loss log(1 + exp(-u)), naive (as the official code
//!   writes it) and stable.
//!
//! A backward pass takes the gradient of a scalar loss with respect to the operation's
//! output and returns the gradients with respect to its inputs and parameters.
//!
//! [`Arith`]: crate::arith::Arith

pub(crate) mod dense;
pub(crate) mod gelu;
pub(crate) mod layer_norm;
pub(crate) mod logistic;

pub use dense::{DenseGrad, dense, dense_backward, residual};
pub use gelu::{gelu, gelu_backward, gelu_derivative};
pub use layer_norm::{LayerNorm, LayerNormGrad, layer_norm, layer_norm_backward};
pub use logistic::{Loss, loss, loss_derivative};
