//! Cost of a gradient step: f64 trainer vs MPFR twin at several precisions
//! (`tokensel cost`). A measurement, not a test: the numbers depend on the machine.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::config::{Config, Mode};
use crate::data::Dataset;
use crate::error::Result;
use crate::train::Trainer;
use crate::twin::Arith;
use crate::twin::train::TwinTrainer;

/// One row of the cost table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// `f64`, `mpfr-53-f64-predictor` or `mpfr-BITS`.
    pub trainer: String,
    /// Median seconds per step (forward, backward, update).
    pub seconds_per_step: f64,
    /// Ratio to the f64 step.
    pub ratio_to_f64: f64,
}

/// The cost report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// n, T, d of the measured config.
    pub n: usize,
    /// Tokens per sequence.
    pub tokens: usize,
    /// Dimension.
    pub d: usize,
    /// Floating-point operations of one f64 step (p-mode, W = I, stable form; counted
    /// from the loops in `model.rs`/`train.rs`).
    pub flops_per_step: f64,
    /// Achieved f64 rate, GFLOP/s.
    pub f64_gflops: f64,
    /// Rows: f64 first, then each precision.
    pub rows: Vec<Row>,
}

/// Flops of one f64 step: scores 2nTd, xbar 3n(T-1)d, centred gradient 3n(T-1)d plus
/// the weights, the sum over samples nd, the update 2d.
pub fn flops_per_step(cfg: &Config) -> f64 {
    let (n, t, d) = (cfg.n_train as f64, cfg.layout.tokens as f64, cfg.d as f64);
    let mut f = 2.0 * n * t * d + 6.0 * n * (t - 1.0) * d + n * d + 2.0 * d;
    if cfg.mode != Mode::P {
        f += 4.0 * d * d; // rank-one update and q = W^T p
    }
    f
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Time `reps` samples of `steps` steps each (f64) and `twin_reps` single steps per
/// twin precision; `precs` entries of 53 mean the f64 predictor.
pub fn measure(
    cfg: &Config,
    precs: &[u32],
    reps: usize,
    twin_reps: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<Report> {
    let data = Dataset::generate(cfg);
    let mut tr = Trainer::new(cfg, &data);
    let block = 20;
    tr.forward_backward()?;
    tr.update()?;
    progress("f64");
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let t0 = Instant::now();
        for _ in 0..block {
            tr.forward_backward()?;
            tr.update()?;
        }
        samples.push(t0.elapsed().as_secs_f64() / block as f64);
    }
    let f64_step = median(samples);
    let mut rows = vec![Row {
        trainer: "f64".into(),
        seconds_per_step: f64_step,
        ratio_to_f64: 1.0,
    }];
    for &prec in precs {
        let (ar, name) = if prec == 53 {
            (Arith::f64_predictor(), "mpfr-53-f64-predictor".to_string())
        } else {
            (Arith::truth(prec)?, format!("mpfr-{prec}"))
        };
        progress(&name);
        let mut twin = TwinTrainer::new(cfg, &data, ar, cfg.formulation);
        twin.forward_backward()?;
        twin.update();
        let mut samples = Vec::with_capacity(twin_reps);
        for _ in 0..twin_reps.max(1) {
            let t0 = Instant::now();
            twin.forward_backward()?;
            twin.update();
            samples.push(t0.elapsed().as_secs_f64());
        }
        let s = median(samples);
        rows.push(Row {
            trainer: name,
            seconds_per_step: s,
            ratio_to_f64: s / f64_step,
        });
    }
    let flops = flops_per_step(cfg);
    Ok(Report {
        n: cfg.n_train,
        tokens: cfg.layout.tokens,
        d: cfg.d,
        flops_per_step: flops,
        f64_gflops: flops / f64_step / 1e9,
        rows,
    })
}
