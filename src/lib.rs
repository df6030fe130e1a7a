//! tokensel: a reference implementation of the token-selection attention model of
//! Sakamoto & Sato, "Benign or Not-Benign Overfitting in Token Selection of Attention
//! Mechanism" (arXiv 2409.17625).
//!
//! f(X; p, W) = nu^T X^T softmax(X W^T p), trained by gradient descent on p or on W,
//! on the paper's synthetic data model.
//!
//! Module map (the math is in `proofs-notes/`):
//! - [`config`]: the one description of a run, TOML overlays, presets, validation;
//! - [`rng`]: seeded ChaCha streams, platform-independent Gaussians;
//! - [`data`]: the synthetic data model;
//! - [`linalg`]: f64 kernels with a fixed summation order;
//! - [`model`]: scores, softmax, output, loss and **the softmax gradient** (`grad_q`);
//! - [`train`]: the fast f64 trainer;
//! - [`twin`]: the high-precision MPFR twin of the trainer (truth and f64-predictor modes);
//! - [`compare`]: f64 trainer vs twin step by step (the saturation detector on runs);
//! - [`saturation`]: the gap sweep that locates each formulation's breaking point;
//! - [`exact`]: exact rational cross-checks and a rigorous enclosure of exp;
//! - [`theory`]: explicit constructions from the paper's theorems (Theorem 4.1);
//! - [`trajectory`]: the trajectory format every trainer emits, and the run summary;
//! - [`diff`]: comparison of two saved trajectories;
//! - [`cost`]: the f64 vs MPFR cost table (`tokensel cost`);
//! - [`sweep`]: label-noise sweeps over eta and seeds;
//! - [`plot`]: dependency-free SVG charts;
//! - [`claims`]: claim files checked by `tokensel check`;
//! - [`cli`]: the `tokensel` command line.

#![warn(missing_docs)]

pub mod claims;
pub mod cli;
pub mod compare;
pub mod config;
pub mod cost;
pub mod data;
pub mod diff;
pub mod error;
pub mod exact;
pub mod linalg;
pub mod model;
pub mod plot;
pub mod rng;
pub mod saturation;
pub mod sweep;
pub mod theory;
pub mod train;
pub mod trajectory;
pub mod twin;

pub use config::Config;
pub use error::{Error, Result};
