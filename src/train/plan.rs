//! Sizing a run before it starts: the memory a trainer's state takes (refused beyond a
//! limit, before anything is allocated), and which step method `auto` runs, by a cost
//! model of both methods.
//!
//! # The cost model of `method = "auto"`
//! Floating-point operations of a whole run (an fma counts 2), with r = nT training
//! tokens, d the dimension, S the number of steps and C the number of checkpoints of the
//! schedule; the work both methods share (softmax, outputs, loss, token coefficients,
//! O(r) per step, and the test set at checkpoints) is left out:
//!
//! ```text
//! direct, per step:   4 r d + 2 d                scores X q, gradient X^T c, update
//!                     + 4 d^2 (p- or W-mode with a dense W: W dL/dq or the rank-one
//!                       update, then q = W^T p), 6 d^2 (joint: all three)
//! span, per step:     2 r^2 + 2 r                p- and W-mode: scores G a, update of a
//!                     12 r^2                     joint: six (r+1) x r products
//! span, once:         (r+1)^2 d                  the Gram matrix of the basis (upper half)
//!                     + 2 r d^2                  the basis W(0) x_j when W(0) is dense
//!                     + r^2 d                    K = X X^T (W- and joint mode)
//! span, per checkpoint: 4 r d (+ 2 d^2 dense W)  q and dL/dq rebuilt in d-space
//!
//! direct total = S * direct step
//! span total   = span once + S * span step + C * span checkpoint
//! ```
//!
//! `auto` runs the span step when its total is the smaller and the formulation and the
//! optimizer allow it (span needs `stable`, and full-batch (normalised) GD without
//! clipping: Adam, minibatches and clipping take the direct step), and when its state fits the memory limit where the direct
//! one's does too; otherwise the direct step. Both are the same trajectory in exact
//! arithmetic; their bits differ (proofs-notes/span.md), so the method a run used is
//! recorded (`TrainerInfo::method`, resolved), and the config keeps `auto`. The model
//! is checked against measured step times in proofs-notes/span.md.
//!
//! # The test set at checkpoints
//! A checkpoint evaluates the m = n_test T test tokens' scores. [`test_path`] chooses
//! between the d-space scores `X_test q` (q rebuilt from the coefficients in the span
//! step: m d + (r+1) d operations per checkpoint) and the cross Gram rows of the span
//! step (`train::span`: `z_test = C a`, C = m x (r+1), built once, then m (r+1)
//! operations per checkpoint). The cross Gram is taken only by arithmetics that form
//! their Gram matrices exactly ([`exact_inputs`]: the ball and the MPFR twin), where an
//! entry costs one exact fixed-point sum of d products (about 1/16 of an operation of
//! the arithmetic: [`EXACT_PRODUCT_OPS`]) and rounds once, and only where its rows are
//! products of the data (p-mode with W(0) = I, W-mode: no d x d matrix between the test
//! and training tokens); the f64, f32 and predictor arithmetics keep the d-space scores
//! (their bits, and so the trajectory digests, do not change). With a dense W(0) in
//! p-mode or joint mode the rows would need W(0) applied to every test token (m d^2
//! products: 32 G at the official-final size), more than the d-space scores at every
//! checkpoint, so those modes evaluate in d-space.
//!
//! ```text
//! cross Gram total = m (r+1) d EXACT_PRODUCT_OPS (+ m d for X_test q(0) in W-mode)
//!                    + C m (r+1)
//! d-space total    = C (m d + (r+1) d)
//! ```

use crate::arith::Kind;
use crate::config::{Config, Formulation, Method, Mode, WInit};
use crate::error::{Error, Result};

use super::record;

/// Cost of one product of an exact Gram entry (`arith::exact`, ~2 ns) in operations of
/// an MPFR or ball arithmetic (~30-60 ns at 128-256 bits), for [`test_path`].
pub const EXACT_PRODUCT_OPS: f64 = 1.0 / 16.0;

/// How a trainer evaluates the test set's scores at checkpoints (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestPath {
    /// `X_test q` in d-space (q rebuilt from the coefficients in the span step).
    Tokens,
    /// `C a` with the span step's cross Gram rows of the test tokens, built once.
    CrossGram,
}

/// True for the arithmetics that take the data's Gram matrices exactly
/// (`Arith::exact_inputs`): the ball and the MPFR truth twin.
pub fn exact_inputs(kind: Kind) -> bool {
    matches!(kind, Kind::Ball | Kind::Mpfr)
}

/// Whether the span step has cross Gram rows for the test set in `cfg`'s mode: p-mode
/// with W(0) = I, or W-mode.
pub fn has_cross_gram(cfg: &Config) -> bool {
    cfg.mode == Mode::W || (cfg.mode == Mode::P && cfg.init.w == WInit::Identity)
}

/// The test-set path of a trainer of `cfg` in arithmetic `kind` and `method` (`auto`
/// resolved by the caller): the cross Gram where the module docs' model makes it the
/// cheaper, else the d-space scores.
pub fn test_path(cfg: &Config, kind: Kind, method: Method) -> TestPath {
    if method != Method::Span || !exact_inputs(kind) || !has_cross_gram(cfg) {
        return TestPath::Tokens;
    }
    let (r, d) = ((cfg.n_train * cfg.tokens()) as f64, cfg.d as f64);
    let m = (cfg.n_test * cfg.tokens()) as f64;
    let c = record::schedule(cfg.steps, cfg.record.checkpoints_per_decade).len() as f64;
    let q0 = if cfg.mode == Mode::W { m * d } else { 0.0 };
    let cross = m * (r + 1.0) * d * EXACT_PRODUCT_OPS + q0 + c * m * (r + 1.0);
    let tokens = c * (m * d + (r + 1.0) * d);
    if cross < tokens {
        TestPath::CrossGram
    } else {
        TestPath::Tokens
    }
}

/// Largest memory a trainer's state may take, in bytes (refused beyond, before
/// anything is allocated).
pub const MAX_STATE_BYTES: u64 = 12 << 30;

/// The factorised query map's numbers (`[factorised]`; 0 without it): its blocks W_Q,
/// W_K (m d each), the biases (m each) and p, one dense block gradient (m d: Adam's
/// step and a normalised step read a block's entries), and with Adam two moments per
/// entry (of every block: an upper bound on the trained ones).
fn factorised_numbers(cfg: &Config) -> u128 {
    cfg.factorised.as_ref().map_or(0, |f| {
        let (m, d) = (f.m as u128, cfg.d as u128);
        let blocks = 2 * m * d + 2 * m + d;
        let adam = if cfg.optimizer.is_adam() {
            2 * blocks
        } else {
            0
        };
        blocks + m * d + adam
    })
}

/// The flop counts of the module docs for `cfg`'s run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// One direct step.
    pub direct_step: f64,
    /// One span step.
    pub span_step: f64,
    /// The span step's one-time precompute.
    pub span_setup: f64,
    /// The span step's d-space rebuild at one checkpoint.
    pub span_checkpoint: f64,
    /// Steps of the run.
    pub steps: f64,
    /// Checkpoints of the run.
    pub checkpoints: f64,
}

impl CostModel {
    /// The model of `cfg`'s run.
    pub fn of(cfg: &Config) -> CostModel {
        let (r, d) = (cfg.n_train as f64 * cfg.tokens() as f64, cfg.d as f64);
        let dense = cfg.dense_w();
        let w_step = match (dense, cfg.mode) {
            (false, _) => 0.0,
            (true, Mode::Joint) => 6.0 * d * d,
            (true, _) => 4.0 * d * d,
        };
        let (span_step, gram_k) = match cfg.mode {
            Mode::P => (2.0 * r * r + 2.0 * r, 0.0),
            Mode::W => (2.0 * r * r + 2.0 * r, r * r * d),
            Mode::Joint => (12.0 * r * r, r * r * d),
        };
        let basis = if dense { 2.0 * r * d * d } else { 0.0 };
        let per_decade = cfg.record.checkpoints_per_decade;
        CostModel {
            direct_step: 4.0 * r * d + 2.0 * d + w_step,
            span_step,
            span_setup: (r + 1.0) * (r + 1.0) * d + basis + gram_k,
            span_checkpoint: 4.0 * r * d + if dense { 2.0 * d * d } else { 0.0 },
            steps: cfg.steps as f64,
            checkpoints: record::schedule(cfg.steps, per_decade).len() as f64,
        }
    }

    /// Flops of the whole run by the direct step.
    pub fn direct_total(&self) -> f64 {
        self.steps * self.direct_step
    }

    /// Flops of the whole run by the span step.
    pub fn span_total(&self) -> f64 {
        self.span_setup + self.steps * self.span_step + self.checkpoints * self.span_checkpoint
    }
}

/// The step method a trainer of `cfg` in formulation `form` and arithmetic `kind` at
/// `prec` bits uses: `method` itself unless it is `auto`, which resolves by the
/// [`CostModel`] (module docs).
///
/// `span` where the config's optimizer needs the direct step (Adam, minibatches,
/// clipping: [`crate::config::Optimizer::needs_direct`]) resolves to `direct`: the
/// commands whose default is the span step (certify, compare's twin and enclosure,
/// judge's replays) then take the direct one; a config's own `method = "span"` with
/// such an optimizer is refused by its validation, and a trainer asked for the span
/// step of one refuses it too. The same holds for `[model] prompt = "in-sequence"` (the
/// span step's Gram matrices assume fixed tokens; the prompt token moves) and for a
/// `[factorised]` section (the span step's coefficients are p's and W's; the query map
/// runs in the direct step).
pub fn resolve_method(
    cfg: &Config,
    form: Formulation,
    kind: Kind,
    prec: u32,
    method: Method,
) -> Method {
    match method {
        Method::Span
            if cfg.optimizer.needs_direct(cfg.n_train)
                || cfg.model.in_sequence()
                || cfg.factorised.is_some() =>
        {
            Method::Direct
        }
        Method::Direct | Method::Span => method,
        Method::Auto => {
            if form == Formulation::Naive
                || cfg.optimizer.needs_direct(cfg.n_train)
                || cfg.model.in_sequence()
                || cfg.factorised.is_some()
            {
                return Method::Direct;
            }
            let model = CostModel::of(cfg);
            let fits = |m| state_bytes(cfg, kind, prec, m) <= MAX_STATE_BYTES;
            if model.span_total() < model.direct_total()
                && (fits(Method::Span) || !fits(Method::Direct))
            {
                Method::Span
            } else {
                Method::Direct
            }
        }
    }
}

/// Approximate bytes of a trainer's numbers at `prec` bits in `method` (`auto`
/// resolved): parameters and d-space buffers (direct: p, q, dL/dq, W when dense, n d for
/// the naive gradient, Adam's moments, a minibatch pass's buffers), or the Gram matrices, coefficients and basis (span), plus scores
/// and head values of the training and test sets. An MPFR number takes 32 bytes plus its
/// limbs; f64 8 bytes.
pub fn state_bytes(cfg: &Config, kind: Kind, prec: u32, method: Method) -> u64 {
    let method = match method {
        Method::Span
            if cfg.optimizer.needs_direct(cfg.n_train)
                || cfg.model.in_sequence()
                || cfg.factorised.is_some() =>
        {
            Method::Direct
        }
        m => m,
    };
    let per = match kind {
        Kind::F64 => 8,
        Kind::F32 => 4,
        // a ball: an MPFR midpoint and a 16-byte radius
        Kind::Ball => 48 + 8 * prec.div_ceil(64) as u128,
        Kind::Predictor | Kind::Mpfr => 32 + 8 * prec.div_ceil(64) as u128,
    };
    let (n, t, d) = (
        cfg.n_train as u128,
        cfg.layout.tokens as u128,
        cfg.d as u128,
    );
    if cfg.model.is_network() {
        // the blocks and their gradient (Adam: two moments more), and per sample of both
        // sets its T + 1 normalised tokens and its scores, attention and intermediates
        let params = u128::from(cfg.model.encoder_parameters(cfg.d));
        let copies = if cfg.optimizer.is_adam() { 4 } else { 2 };
        let samples = (n + cfg.n_test as u128) * (t + 1);
        let count = params * copies + samples * (d + 4);
        return u64::try_from(count.saturating_mul(per)).unwrap_or(u64::MAX);
    }
    let r = n * t;
    let w = if cfg.dense_w() { d * d } else { 0 };
    let common = 4 * r + cfg.n_test as u128 * t;
    let count = match method {
        Method::Direct => {
            let naive = if cfg.formulation == Formulation::Naive {
                n * d
            } else {
                0
            };
            // Adam's two moments of each trained block (p: d; W: d^2), and a
            // minibatch pass's scores and coefficients (2 |B| T)
            let adam = match (cfg.optimizer.is_adam(), cfg.mode) {
                (false, _) => 0,
                // the factorised map's moments are its blocks' (`factorised_numbers`)
                _ if cfg.factorised.is_some() => 2 * d,
                (true, Mode::P) => 2 * d,
                (true, Mode::W) => 2 * d * d,
                (true, Mode::Joint) => 2 * (d + d * d),
            };
            let batch = cfg
                .optimizer
                .minibatch(cfg.n_train)
                .map_or(0, |b| 2 * b as u128 * t);
            3 * d + w + naive + adam + batch + factorised_numbers(cfg)
        }
        // G, K, M, the basis (and X's rows while the Gram matrices are formed), W(0),
        // and the test set's cross Gram rows where they are used
        Method::Span => {
            let cross = match test_path(cfg, kind, method) {
                TestPath::CrossGram => cfg.n_test as u128 * t * (r + 1),
                TestPath::Tokens => 0,
            };
            3 * (r + 1) * (r + 1) + 2 * (r + 1) * d + w + 3 * d + cross
        }
        Method::Auto => {
            let resolved = resolve_method(cfg, cfg.formulation, kind, prec, Method::Auto);
            return state_bytes(cfg, kind, prec, resolved);
        }
    };
    ((common + count) * per).min(u64::MAX as u128) as u64
}

/// Refuse a run whose state (see [`state_bytes`]) would exceed [`MAX_STATE_BYTES`]
/// (`auto` resolved for the config's formulation).
pub fn check_memory(cfg: &Config, kind: Kind, prec: u32, method: Method) -> Result<()> {
    let method = resolve_method(cfg, cfg.formulation, kind, prec, method);
    let bytes = state_bytes(cfg, kind, prec, method);
    if bytes > MAX_STATE_BYTES {
        return Err(Error::TooLarge {
            field: "prec".into(),
            reason: format!(
                "a {} run at {prec} bits ({} method) needs about {:.1} GiB for d = {}, n = {} \
                 (limit {} GiB)",
                kind.name(),
                method.name(),
                bytes as f64 / (1u64 << 30) as f64,
                cfg.d,
                cfg.n_train,
                MAX_STATE_BYTES >> 30
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn auto(cfg: &Config) -> Method {
        resolve_method(cfg, cfg.formulation, Kind::F64, 53, Method::Auto)
    }

    /// The default run (r = 160, d = 2000, 30,000 steps) runs the span step; a tiny d,
    /// no steps, or the naive formulation the direct one; explicit methods stay.
    #[test]
    fn auto_picks_the_cheaper_method() {
        let cfg = Config::default();
        assert_eq!(cfg.method, Method::Auto);
        let m = CostModel::of(&cfg);
        assert_eq!(m.direct_step, 4.0 * 160.0 * 2000.0 + 4000.0);
        assert_eq!(m.span_step, 2.0 * 160.0 * 160.0 + 320.0);
        assert_eq!(m.checkpoints, 44.0);
        assert_eq!(auto(&cfg), Method::Span);
        // d = 25: a span step (2 r^2 ~ 51,000 flops) costs more than a direct one (~16,000)
        assert_eq!(
            auto(&Config {
                d: 25,
                ..cfg.clone()
            }),
            Method::Direct
        );
        assert_eq!(
            auto(&Config {
                steps: 0,
                ..cfg.clone()
            }),
            Method::Direct
        );
        let naive = Config {
            formulation: Formulation::Naive,
            ..cfg.clone()
        };
        assert_eq!(auto(&naive), Method::Direct);
        for m in [Method::Direct, Method::Span] {
            assert_eq!(resolve_method(&cfg, cfg.formulation, Kind::F64, 53, m), m);
        }
        // 256-bit MPFR: the same flops, the same choice
        let mpfr = resolve_method(&cfg, cfg.formulation, Kind::Mpfr, 256, Method::Auto);
        assert_eq!(mpfr, Method::Span);
    }

    /// Where the span step would be cheaper but its Gram matrices do not fit the memory
    /// limit and the direct state does, auto runs the direct step (r = 30,000 tokens,
    /// d = 20,000: 3 r^2 numbers are 22 GB in f64; the data 4.8 GB).
    #[test]
    fn auto_respects_the_memory_limit() {
        let cfg = Config {
            n_train: 3750,
            n_test: 1,
            d: 20_000,
            steps: 1_000_000,
            ..Config::default()
        };
        cfg.validate().unwrap();
        let m = CostModel::of(&cfg);
        assert!(m.span_total() < m.direct_total(), "{m:?}");
        assert!(state_bytes(&cfg, Kind::F64, 53, Method::Span) > MAX_STATE_BYTES);
        assert_eq!(auto(&cfg), Method::Direct);
        assert!(check_memory(&cfg, Kind::F64, 53, Method::Auto).is_ok());
    }
}
