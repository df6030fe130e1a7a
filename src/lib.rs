//! tokensel: a reference implementation of the token-selection attention model of
//! Sakamoto & Sato, "Benign or Not-Benign Overfitting in Token Selection of Attention
//! Mechanism" (arXiv 2409.17625).
//!
//! f(X; p, W) = nu^T X^T softmax(X W^T p), trained by gradient descent on p, on W or on
//! both, on the paper's synthetic data model; one trainer, generic over the arithmetic
//! (f64, MPFR at any precision, the bit-exact 53-bit f64 predictor).
//!
//! The public surface is [`prelude`] (and [`Config`], [`Error`], [`Result`] at the root,
//! [`main_entry`] for the binary): every module below is `pub(crate)`, and the tests,
//! the Python binding (`python/`), the examples and the benches import the facade only
//! (`tests/facade.rs` fails naming any other `tokensel::` path they write).
//!
//! Layers inside the crate, bottom up (each imports only from the layers beneath it;
//! the math is in `proofs-notes/`):
//! 1. `error`, `rng`, `config`, `seeds`: the typed error, seeded streams, the one
//!    description of a run (`config/`: its sections, presets, validation and the data
//!    checks), the range of seeds and lists of them;
//! 2. `arith`: the arithmetic trait and its implementations, with fixed-order kernels;
//!    `linalg`: matrix-vector kernels over any arithmetic;
//! 3. `data`: the synthetic data (binary or K classes), the fixed heads and the
//!    initial parameters (one `init` stream); `model`: models as parts behind the
//!    `Model` trait (the binary token-selection model, the multi-class model of
//!    Section F, factorised query-key attention) over the shared attention (scores,
//!    softmax and **the softmax gradient**, `model::attention::grad_scores`), written
//!    once for every arithmetic; `quantity`: the one name of each quantity that runs
//!    record and analyses compare;
//! 4. `io`: formats only (the trajectory, the twin's state file, the NPY export, the
//!    external trajectory, atomic writes); nothing there knows how training works;
//! 5. `train`: the trainer (`train/mod.rs`, "what a step computes"), the one step
//!    loop with its observer (`train::drive`), what a checkpoint records
//!    (`train::record`), the resumable state (`train::resume`), the direct step
//!    (`train::direct`) and the span step (`train::span`);
//! 6. `analysis`: compare (saturation and absorption detector), the saturation sweep,
//!    the exact rational tier, theory constructions, trajectory diff, judge, certify;
//! 7. `report`: charts (SVG/PNG) and readable tables;
//! 8. `experiments`: sweep, grid (shards, merge, seeds), claims, cost, protocol;
//! 9. `cli`: the `tokensel` command line, one file per command.

#![warn(missing_docs)]
// The facade re-exports items whose docs cross-reference crate-internal items (a
// constant, a helper, a sibling module); those links resolve in the developer docs,
// `cargo doc --no-deps --document-private-items`, and are plain names in the public ones.
#![allow(rustdoc::private_intra_doc_links)]

pub(crate) mod analysis;
pub(crate) mod arith;
pub(crate) mod cli;
pub(crate) mod config;
pub(crate) mod data;
pub(crate) mod error;
pub(crate) mod experiments;
pub(crate) mod io;
pub(crate) mod linalg;
pub(crate) mod model;
pub(crate) mod quantity;
pub(crate) mod report;
pub(crate) mod rng;
pub(crate) mod seeds;
pub(crate) mod train;

pub use config::Config;
pub use error::{Error, Result};

/// The `tokensel` command line: parses `std::env::args`, runs the command and returns
/// its exit code (0 ok, 1 finding, 2 bad input, 3 refused or stopped); `src/main.rs`
/// is `std::process::exit(tokensel::main_entry())`.
pub fn main_entry() -> i32 {
    cli::main()
}

/// The public surface, the only one (`use tokensel::prelude::*;`).
///
/// Flat: the run's description (the config and its sections), its data, the models,
/// the arithmetics, the trainer, what it records and the errors. The rest is grouped in
/// documented namespaces: [`kernels`](crate::prelude::kernels) (the fixed-order linear-algebra, arithmetic and
/// attention kernels), [`train`](crate::prelude::train) (the step loop, the optimisers, the recorder),
/// [`analysis`](crate::prelude::analysis) (compare, certify, diff, judge, the exact tier, theory), [`formats`](crate::prelude::formats)
/// (state files, exports, external trajectories, record leaves, output sets),
/// [`experiments`](crate::prelude::experiments) (grid, claims, schema, cost, protocol), [`models`](crate::prelude::models) (capabilities,
/// the factorised model, the limit and SVM of the token-selection model), [`rng`](crate::prelude::rng) (the
/// seeded streams) and [`supplied`](crate::prelude::supplied) (supplied data sets).
pub mod prelude {
    pub use crate::arith::{
        Arith, ArithVisitor, Ball, BallReal, Choice, DEFAULT_BALL_PREC, DEFAULT_PREC, F32, F64,
        Kind, Mag, Mpfr,
    };
    pub use crate::config::{
        Config, Direction, FlipRule, Formulation, Group, LabelRule, Layout, Method, Mode,
        ModelKind, ModelSpec, Optimizer, OptimizerKind, PInit, PatternSpec, Preset, Prompt,
        Protocol, Schedule, Signals, WInit,
    };
    pub use crate::data::supplied::Supplied;
    pub use crate::data::{Dataset, Params};
    pub use crate::error::{Error, Result};
    pub use crate::io::trajectory::{Checkpoint, ClassMetrics, Cumulative, Summary, Trajectory};
    pub use crate::model::{AnyModel, Model, Multiclass, Sample, Selection, TokenSelection};
    pub use crate::quantity::Quantity;
    pub use crate::train::{Engine, TestPath, Trainer};

    /// Fixed-order kernels: dot products and norms, relative errors, the matrix kernels
    /// over any arithmetic, and the attention's scores, softmax and query gradient.
    pub mod kernels {
        pub use crate::arith::{dot, norm, normwise_rel_err, rel_err};
        pub use crate::linalg::{cross_gram, data_gram, matvec_prepared, worth_parallel};
        pub use crate::model::{Softmax, grad_q, grad_q_naive, output, scores, softmax};
    }

    /// Seeded random streams: one stream per purpose, and the draws made from it.
    pub mod rng {
        pub use crate::rng::{Stream, fill_normal, stream, uniform};
    }

    /// Supplied data sets (the NPY/NPZ import) and their label rule.
    pub mod supplied {
        pub use crate::data::supplied::{Supplied, label_of};
    }

    /// The trainer's parts: the step loop and its observer, the optimisers, the direct
    /// engine, the plan's checks and what a checkpoint records.
    pub mod train {
        pub use crate::train::{check_memory, train_rows};

        /// Adam's hyper-parameters, its power kernel and one step.
        pub mod adam {
            pub use crate::train::adam::{Hyper, pow, step};
        }
        /// The direct engine's state.
        pub mod direct {
            pub use crate::train::direct::Direct;
        }
        /// The one step loop and its observer.
        pub mod drive {
            pub use crate::train::drive::{Control, Event, drive};
        }
        /// The plan: which test path a run takes.
        pub mod plan {
            pub use crate::train::plan::test_path;
        }
        /// What a checkpoint records and when.
        pub mod record {
            pub use crate::train::record::{Recorder, check_size, scaled_norm, schedule};
        }
        /// The block trainer of the network models (the encoder).
        pub mod network {
            pub use crate::train::network::{NetTrainer, run};
        }
        /// The step rules (GD, normalised GD, Adam).
        pub mod step_rule {
            pub use crate::train::step_rule::StepRule;
        }
    }

    /// Analyses of runs: compare, certify, diff, judge, the exact tier, the saturation
    /// sweep, Lemma A.6 and theory constructions.
    pub mod analysis {
        /// Certificates: a run's quantities enclosed by balls.
        pub mod certify {
            pub use crate::analysis::certify::{Certificate, Interval, Options, Prec, certify};
        }
        /// Compare: a run against its 512-bit twin (saturation and absorption detector).
        pub mod compare {
            pub use crate::analysis::compare::{
                COMPARED, DEFAULT_PREDICTOR_STEPS, Exceedance, Gate, Options, Report, compare,
                compare_gated, compare_in, predictor_mismatch,
            };
        }
        /// Trajectory diff.
        pub mod diff {
            pub use crate::analysis::diff::diff;
        }
        /// The exact rational tier and its rounding bounds.
        pub mod exact {
            pub use crate::analysis::exact::{
                dot, dot_bound, grad_definition, grad_naive, grad_naive_bound, pow2, rat, rat_mpfr,
                softmax_enclosure, unit_roundoff,
            };
        }
        /// Judge: an external trajectory replayed and checked.
        pub mod judge {
            pub use crate::analysis::judge::{Options, Report, judge};
        }
        /// Lemma A.6's construction.
        pub mod lemma_a6 {
            pub use crate::analysis::lemma_a6::{LemmaA6, configs, lemma_a6, scale_step};
        }
        /// The saturation sweep.
        pub mod saturation {
            pub use crate::analysis::saturation::{default_grid, sweep, threshold_keys};
        }
        /// Theory constructions.
        pub mod theory {
            pub use crate::analysis::theory::theorem_4_1_solution;
        }
    }

    /// File formats: the twin's state file, the NPY export, the external trajectory,
    /// non-finite parsing, output sets and the record's leaves.
    pub mod formats {
        /// The NPY export of a run's data and initial parameters.
        pub mod export {
            pub use crate::io::export::{InitialBlock, files, initial_blocks, npy_f64};
        }
        /// The external trajectory format (judge's input).
        pub mod external {
            pub use crate::io::external::{
                Dtype, EXTERNAL_FORMAT, External, Header, Series, quantity_of_steps_key,
            };
        }
        /// Non-finite values in text formats.
        pub mod nonfinite {
            pub use crate::io::nonfinite::parse;
        }
        /// Small input files read with a size bound (config, claims and grid TOML).
        pub mod files {
            pub use crate::io::files::{SMALL_INPUT, read_text};
        }
        /// Output sets published atomically.
        pub mod publish {
            pub use crate::io::publish::{OutputDir, SetKind};
        }
        /// A checkpoint's record leaves.
        pub mod record {
            pub use crate::io::record::{Leaf, Leaves, RecordParts, visit};
        }
        /// The twin's resumable state file.
        pub mod state {
            pub use crate::io::state::State;
        }
    }

    /// Experiments: grid, claims and their schemas, cost, the protocol.
    pub mod experiments {
        /// Claims files and their sources.
        pub mod claims {
            pub use crate::experiments::claims::{ClaimsFile, Source};
        }
        /// The cost model.
        pub mod cost {
            pub use crate::experiments::cost::with_classes;
        }
        /// Grids of runs: specs, presets and cells.
        pub mod grid {
            pub use crate::experiments::grid::{
                Cell, CellFile, GridPreset, Outcome, Request, Spec, cell, cell_path, merge,
                merged_dir, read_cell, run_cells, run_in_memory,
            };
        }
        /// The training protocol (epochs, pools, seeds).
        pub mod protocol {
            pub use crate::experiments::protocol::{
                Pool, Report, batches_per_epoch, blocks, head, run, run_seed, settings,
            };
        }
        /// The claim sources' output schemas.
        pub mod schema {
            pub use crate::experiments::schema::{Shape, Source, certified, of_source, record};
        }
    }

    /// Model parts: capabilities, the factorised query-key model, the token-selection
    /// model's limit and its SVM.
    pub mod models {
        /// Capabilities a command requires.
        pub mod caps {
            pub use crate::model::caps::{Capability, require};
        }
        /// The encoder's operations with their backward passes (LayerNorm, the exact
        /// GELU, a dense layer, the residual sum, the logistic loss), in every arithmetic.
        pub mod ops {
            pub use crate::model::ops::{
                DenseGrad, LayerNorm, LayerNormGrad, Loss, dense, dense_backward, gelu,
                gelu_backward, gelu_derivative, layer_norm, layer_norm_backward, loss,
                loss_derivative, residual,
            };
        }
        /// Models that own every parameter as blocks: the network trait and its pass.
        pub mod network {
            pub use crate::model::blocks::{Block, BlockInit, BlockStream, Blocks};
            pub use crate::model::encoder::{BLOCK_NAMES, EPS, Encoder, FIRST_ENCODER_STREAM};
            pub use crate::model::network::{Network, Pass};
            pub use crate::model::real_setting::{Head, RealSetting};
        }
        /// Factorised query-key attention.
        pub mod factorised {
            pub use crate::model::factorised::{Factorised, QkInit, Section};
        }
        /// The token-selection model's limit direction.
        pub mod limit {
            pub use crate::model::token_selection::limit::{Limit, Space, choice_of};
        }
        /// The token-selection model's max-margin SVM.
        pub mod svm {
            pub use crate::model::token_selection::svm::{
                Constraints, F64Outcome, F64Solution, Failure, Gram, MAX_SUPPORT, PatternChoice,
                Report, Solved, Verdict, certificate_for, check, check_farkas, check_sizes,
                exact_size, farkas_on, farkas_search, iteration_limit, pattern, q_f64, report,
                solve,
            };
        }
    }
}
