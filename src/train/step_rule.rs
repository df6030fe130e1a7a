//! The step rule of the `[optimizer]` section ([`crate::config::Optimizer`]): the factor
//! each parameter block's gradient is multiplied by, -alpha (constant-step GD) or
//! -alpha / (||G|| + eps) (normalised GD), in the run's arithmetic.
//!
//! The engines supply each block's squared gradient norm in their own coordinates
//! (the direct step from d-space vectors, the span step from its Gram matrices:
//! proofs-notes/max-margin.md, "Normalised GD in span coordinates"); the norm is
//! evaluated only under normalised GD, so a constant-step run's operations, and
//! therefore its bits, are those of the trainer without this module.

use crate::arith::Arith;
use crate::config::Config;

/// Step size alpha and, under normalised GD, its eps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepRule {
    /// The step size alpha.
    pub alpha: f64,
    /// `Some(eps)` under normalised GD.
    pub normalized: Option<f64>,
}

impl StepRule {
    /// The rule of `cfg` (its step size and `[optimizer]`).
    pub fn of(cfg: &Config) -> StepRule {
        StepRule {
            alpha: cfg.step_size,
            normalized: cfg.optimizer.is_normalized().then_some(cfg.optimizer.eps),
        }
    }

    /// Constant-step gradient descent with step size `alpha`.
    pub fn constant(alpha: f64) -> StepRule {
        StepRule {
            alpha,
            normalized: None,
        }
    }

    /// The factor of a block's gradient: -alpha, or -alpha / (sqrt(nsq()) + eps) with
    /// `nsq()` the block's squared gradient norm (called under normalised GD only). Each
    /// operation is the arithmetic's own (correctly rounded in f64, f32 and MPFR, so the
    /// predictor stays bit-identical; enclosing in balls, where a squared norm whose
    /// enclosure reaches below 0 gives an unbounded factor: a non-finite error, never a
    /// wrong step). `Err(ZeroBlock)` where eps = 0 and the squared norm is known to be
    /// exactly 0 ([`Arith::decide_sign`]): the step is 0 / 0.
    pub fn neg_factor<A: Arith>(
        &self,
        ar: &A,
        nsq: impl FnOnce() -> A::Real,
    ) -> Result<A::Real, ZeroBlock> {
        let mut f = ar.of(-self.alpha);
        if let Some(eps) = self.normalized {
            let mut norm = nsq();
            if eps == 0.0 && ar.decide_sign(&norm) == Some(0) {
                return Err(ZeroBlock);
            }
            ar.sqrt(&mut norm);
            ar.add_f64(&mut norm, eps);
            ar.div(&mut f, &norm);
        }
        Ok(f)
    }
}

/// A parameter block whose squared gradient norm is exactly 0 in the arithmetic under
/// normalised GD with eps = 0 ([`StepRule::neg_factor`]); the engine names the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZeroBlock;

impl ZeroBlock {
    /// The trainer's error for block `block` ("p" or "W") at step `step`.
    pub fn error(block: &'static str, step: u64) -> crate::error::Error {
        crate::error::Error::ZeroGradient { step, block }
    }
}
