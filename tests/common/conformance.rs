//! The conformance helper every model's tests call (issue 41, item 0): [`conform`] runs
//! one config through the trainer's driver (`Trainer::record`, `train::drive`), the
//! resumable state and the built binary's `diff`, and checks
//!
//! 1. the 53-bit predictor's trajectory equals the f64 trainer's (digest and every
//!    checkpoint, bit for bit);
//! 2. 1 and 2 threads give bit-identical trajectories, at sizes above every parallel
//!    threshold of the path the run takes (asserted: the predictor at the config's sizes,
//!    the f64 trainer at a copy grown past the f64 thresholds);
//! 3. the balls (128 bits, doubled where they lose every bit before the last step)
//!    enclose the 512-bit twin (at least twice the balls' bits): every real behind every
//!    recorded value of every checkpoint, and a decided top token is the twin's;
//! 4. the trainer's gradient (read off one constant-step update at alpha = 1 in the
//!    512-bit twin: the engine's own chain rule, prompt terms included) against a
//!    Richardson extrapolation of central differences of the twin's training loss, to a
//!    derived bound ([`gradient_errors`]);
//! 5. a run stopped halfway, saved as a resumable state file, loaded and resumed ends
//!    with the uninterrupted run's digest (f64 and the predictor, the twin command's
//!    arithmetic);
//! 6. diff sensitivity: perturbing any one leaf of the last checkpoint's JSON within its
//!    range makes `tokensel diff A B --json` exit 1, say `diverged: true` and report the
//!    leaf's key in `max_rel_dev` ([`leaf_key`]).

use std::collections::BTreeMap;
use std::time::Instant;

use rug::Float;
use tokensel::prelude::formats::state::State;
use tokensel::prelude::kernels::worth_parallel;
use tokensel::prelude::models::factorised::Factorised;
use tokensel::prelude::models::network::Encoder;
use tokensel::prelude::train::drive::{Control, Event, drive};
use tokensel::prelude::train::network::NetTrainer;
use tokensel::prelude::train::record::schedule;
use tokensel::prelude::{
    Arith, Ball, Config, Dataset, Engine, F64, Formulation, Method, Mode, Mpfr, Optimizer, Trainer,
    Trajectory,
};

/// Which checks [`conform`] runs (all by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    /// 1: the predictor is the f64 trainer bit for bit.
    pub predictor: bool,
    /// 2: 1 and 2 threads bit-identical above the parallel thresholds.
    pub threads: bool,
    /// 3: the balls enclose the 512-bit twin at every checkpoint.
    pub balls: bool,
    /// 4: the gradient against a Richardson difference of the twin's loss.
    pub gradient: bool,
    /// 5: a resumed run is bit-identical.
    pub resume: bool,
    /// 6: `diff` reports every perturbed leaf of the last checkpoint.
    pub diff: bool,
}

impl Checks {
    /// Every check.
    pub fn all() -> Checks {
        Checks {
            predictor: true,
            threads: true,
            balls: true,
            gradient: true,
            resume: true,
            diff: true,
        }
    }
}

/// What [`conform`] measured: seconds per check and the counts behind its assertions.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Wall-clock seconds of each check that ran, in order.
    pub seconds: Vec<(&'static str, f64)>,
    /// Reals compared in the ball check (each enclosed).
    pub enclosed: usize,
    /// The balls' precision the ball check needed (bits).
    pub ball_prec: u32,
    /// Directions whose derivative was checked.
    pub directions: usize,
    /// Leaves of the last checkpoint perturbed one at a time.
    pub leaves: usize,
}

impl Report {
    /// The total wall-clock seconds.
    pub fn total(&self) -> f64 {
        self.seconds.iter().map(|(_, s)| s).sum()
    }
}

/// Run `checks` on `cfg` (module docs). Panics naming the first failure; the diff check
/// lists every leaf it found unreported before it fails.
pub fn conform(cfg: &Config, checks: Checks) -> Report {
    cfg.validate().expect("a valid config");
    if cfg.model.is_network() {
        // a network's pass is checked where it is declared (its gradient against
        // Richardson in the twin and its balls against a 1024-bit twin: tests/encoder.rs);
        // its trainer keeps no resumable state
        assert!(
            !(checks.balls || checks.gradient || checks.resume),
            "a network model's conformance runs the predictor, thread and diff checks"
        );
    }
    let data = Dataset::generate(cfg);
    let mut report = Report::default();
    let mut time = |what: &'static str, f: &mut dyn FnMut(&mut Report)| {
        let t0 = Instant::now();
        f(&mut report);
        report.seconds.push((what, t0.elapsed().as_secs_f64()));
    };
    let f64_run = in_pool(1, || record(F64, cfg, &data));
    if checks.predictor || checks.threads {
        time("predictor and threads", &mut |_| {
            predictor_and_threads(cfg, &data, &f64_run, checks)
        });
    }
    if checks.balls {
        time("balls", &mut |r| {
            (r.ball_prec, r.enclosed) = balls_enclose_the_twin(cfg, &data)
        });
    }
    if checks.gradient {
        time("gradient", &mut |r| {
            let errs = gradient_errors(cfg, &data, 1.0);
            for e in &errs {
                assert!(
                    e.err <= e.bound,
                    "{}: |g - D| = {:e} above the bound {:e} (|g| = {:e})",
                    e.what,
                    e.err,
                    e.bound,
                    e.grad
                );
            }
            r.directions = errs.len();
        });
    }
    if checks.resume {
        time("resume", &mut |_| {
            resume_is_bit_identical(F64, cfg, &data, &f64_run);
            resume_is_bit_identical(Mpfr::predictor(), cfg, &data, &f64_run);
        });
    }
    if checks.diff {
        time("diff", &mut |r| {
            r.leaves = diff_reports_every_leaf(&f64_run.traj)
        });
    }
    eprintln!(
        "conform ({:?}, {:?}, {:?} prompt, {:?}): {:.2} s {:?}; {} reals enclosed ({}-bit balls), {} \
         directions, {} leaves",
        cfg.model.kind,
        cfg.mode,
        cfg.model.prompt,
        cfg.optimizer.kind,
        report.total(),
        report.seconds,
        report.enclosed,
        report.ball_prec,
        report.directions,
        report.leaves
    );
    report
}

/// The binary model at the helper's sizes (above every parallel threshold of the
/// predictor, [`conform`] in well under 15 s): d = 64, n = 12, T = 8 (groups 2, 2, 2, 2),
/// 8 test samples, 100 steps at alpha = 0.3, ||mu|| = 4, label noise 0.2; p-mode from
/// W = I and p(0) = 0, W- and joint mode from a Gaussian p(0) (scale 0.5) and a
/// Kaiming-uniform W(0). The other models' tests derive their configs from it.
pub fn sized(mode: Mode) -> Config {
    let m = match mode {
        Mode::P => 0,
        Mode::W => 1,
        Mode::Joint => 2,
    };
    let mut cfg = super::small_config(7, 64, [2, 2, 2, 2], 12, 4.0, 0.2, 0.3, 100, m, false, false);
    cfg.n_test = 8;
    cfg.method = Method::Auto;
    cfg.validate().unwrap();
    cfg
}

/// `f` on a pool of `threads` threads.
fn in_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

/// A recorded run: the trajectory and the bits of every parameter at its end.
struct Run {
    traj: Trajectory,
    params: Vec<(String, Vec<u64>)>,
}

/// Every parameter of `tr` rounded to f64 (exact for f64 and the 53-bit predictor), as
/// bits, named: the factorised map's blocks (declaration order), or p and W.
fn final_params<A: Arith>(tr: &Trainer<'_, A>) -> Vec<(String, Vec<u64>)> {
    let bits = |v: &[A::Real]| v.iter().map(|x| tr.ar.to_f64(x).to_bits()).collect();
    if let Some(f) = fact(tr) {
        return f
            .blocks
            .iter()
            .map(|(b, v)| (b.name.to_string(), bits(v)))
            .collect();
    }
    let (p, w) = tr.params();
    let mut out = vec![("p".to_string(), bits(&p))];
    out.extend(w.map(|w| ("W".to_string(), bits(&w))));
    out
}

/// The factorised query map of `tr` (`None` without `[factorised]`).
fn fact<'t, A: Arith>(tr: &'t Trainer<'_, A>) -> Option<&'t Factorised<A::Real>> {
    match &tr.engine {
        Engine::Direct(e) => e.fact(),
        Engine::Span(_) => None,
    }
}

/// The recorded trajectory of `cfg` in `ar` (the config's formulation and method) and
/// the parameters at its end.
fn record<A: Arith>(ar: A, cfg: &Config, data: &Dataset) -> Run {
    if cfg.model.is_network() {
        let mut tr = NetTrainer::new(cfg, data, ar, Encoder::of(cfg)).unwrap();
        let traj = tr.record(&mut |_| ()).unwrap();
        let params = tr
            .theta
            .iter()
            .map(|(b, v)| {
                let bits = v.iter().map(|x| tr.ar.to_f64(x).to_bits()).collect();
                (b.name.to_string(), bits)
            })
            .collect();
        return Run { traj, params };
    }
    let mut tr = Trainer::new(cfg, data, ar, cfg.formulation).unwrap();
    let traj = tr.record(None, &mut |_, _| Ok(())).unwrap();
    Run {
        traj,
        params: final_params(&tr),
    }
}

/// Two runs bit-identical: the trajectories ([`assert_same_traj`]) and every parameter
/// at the end (every block of the factorised map; p and W).
fn assert_same(what: &str, a: &Run, b: &Run) {
    assert_same_traj(what, &a.traj, &b.traj);
    assert_eq!(a.params.len(), b.params.len(), "{what}: parameter blocks");
    for ((name, x), (_, y)) in a.params.iter().zip(&b.params) {
        assert!(x == y, "{what}: the final {name} differs");
    }
}

/// Two trajectories bit-identical: digest, and every checkpoint's JSON (which spells the
/// non-finite values: no NaN compares unequal to itself).
fn assert_same_traj(what: &str, a: &Trajectory, b: &Trajectory) {
    assert_eq!(a.digest(), b.digest(), "{what}: digests differ");
    assert_eq!(a.checkpoints.len(), b.checkpoints.len(), "{what}");
    for (x, y) in a.checkpoints.iter().zip(&b.checkpoints) {
        assert_eq!(
            serde_json::to_string(x).unwrap(),
            serde_json::to_string(y).unwrap(),
            "{what}: checkpoint {} differs",
            x.step
        );
    }
}

/// Every parallel threshold (`linalg::worth_parallel`) of the path `tr` takes is crossed
/// on 2 threads in `tr`'s arithmetic: the per-sample loop (n P 16 ops, P positions),
/// the scores and X^T c (n P d), the head values and test set (n_test T d), W's kernels
/// where W is dense (d^2), the naive per-sample gradients (4 n T d) in the naive
/// formulation, and the span step's Gram precompute, basis, rows, scores and rebuilds
/// in the span method (the list of tests/threads.rs).
fn assert_above_thresholds<A: Arith>(tr: &Trainer<'_, A>) {
    let cfg = tr.cfg;
    let (n, t, d, n_test) = (cfg.n_train, cfg.tokens(), cfg.d, cfg.n_test);
    let pos = tr.positions();
    let r = n * t;
    let mut sizes = vec![
        ("per-sample loop", n * pos * 16),
        ("scores X q", n * t * d),
        ("X^T c", n * pos * d),
        ("head values and test set", n_test * t * d),
    ];
    let (p, w) = tr.params();
    assert_eq!(p.len(), d);
    if w.is_some() {
        sizes.push(("W update, W g, W^T p", d * d));
    }
    if let Some(f) = fact(tr) {
        sizes.push((
            "factorised map: W_Q p, W_K^T u, W_K dL/dq, the factored updates",
            f.m * d,
        ));
    }
    if tr.form == Formulation::Naive {
        sizes.push(("naive per-sample gradients", n * 4 * t * d));
    }
    if tr.method() == Method::Span {
        sizes.extend([
            ("Gram precompute", (r + 1) * ((r + 1) * d / 2)),
            ("basis W(0) x_j", r * d * d),
            ("W-mode span rows", r * (d + r)),
            ("span scores and joint updates", r * r),
            ("span rebuilds of p and q", r * d),
        ]);
    }
    in_pool(2, || {
        for (what, ops) in sizes {
            assert!(
                worth_parallel(&tr.ar, ops),
                "{what}: {ops} ops stay below the parallel threshold of {:?}: grow the config",
                tr.ar.kind()
            );
        }
    });
}

/// Checks 1 and 2. The predictor on 1 thread is the f64 trainer's trajectory (digest
/// and checkpoints); on 2 threads, above every threshold of its path at the config's
/// sizes (asserted), the same. The f64 trainer's thresholds are 64 times the predictor's
/// (`linalg::op_cost`), so its 1- and 2-thread runs take a copy of the config grown past
/// them (n T >= 4096, d >= 256, n_test T d >= 2^16; 3 steps; a minibatch the same share
/// of the training set; no `[direction]`, whose attention SVM is refused at that size).
fn predictor_and_threads(cfg: &Config, data: &Dataset, f64_run: &Run, checks: Checks) {
    let pred = Mpfr::predictor();
    let one = in_pool(1, || record(pred, cfg, data));
    if checks.predictor {
        assert_same("the predictor against f64", f64_run, &one);
    }
    if !checks.threads {
        return;
    }
    if cfg.model.is_network() {
        // the pass's sample loop and its sums of outer products, on 2 threads
        let enc = Encoder::of(cfg);
        in_pool(2, || {
            assert!(enc.parallel_samples(&pred, cfg.n_train), "grow the config");
            assert!(enc.parallel_rows(&pred, cfg.n_train), "grow the config");
        });
        let two = in_pool(2, || record(pred, cfg, data));
        assert_same("the predictor on 2 threads against 1", &one, &two);
        let two = in_pool(2, || record(F64, cfg, data));
        assert_same("f64 on 2 threads against 1", f64_run, &two);
        return;
    }
    assert_above_thresholds(&Trainer::new(cfg, data, pred, cfg.formulation).unwrap());
    let two = in_pool(2, || record(pred, cfg, data));
    assert_same("the predictor on 2 threads against 1", &one, &two);
    let t = cfg.tokens();
    let mut big = cfg.clone();
    big.n_train = cfg.n_train.max(4096usize.div_ceil(t));
    big.d = cfg.d.max(256);
    big.n_test = cfg.n_test.max(65536usize.div_ceil(t * big.d));
    big.steps = 3;
    // the attention SVM behind `[direction]` is refused past 1200 tokens; its values are
    // formed per checkpoint, not in the step's kernels
    big.direction = None;
    if let Some(f) = &mut big.factorised {
        // the map's kernels (m d ops) past the f64 threshold: m d >= 2^16 (3 steps in
        // f64: cheap)
        f.m = f.m.max(65536usize.div_ceil(big.d));
    }
    if let Some(b) = &mut big.optimizer.batch {
        // the same share of the training set per batch
        *b = (*b * big.n_train).div_ceil(cfg.n_train);
    }
    big.validate().expect("the grown config is valid");
    let big_data = Dataset::generate(&big);
    assert_above_thresholds(&Trainer::new(&big, &big_data, F64, big.formulation).unwrap());
    let one = in_pool(1, || record(F64, &big, &big_data));
    let two = in_pool(2, || record(F64, &big, &big_data));
    assert_same("f64 on 2 threads against 1 (grown config)", &one, &two);
}

/// Every real a checkpoint's record is computed from, in `tr`'s arithmetic at its last
/// forward pass, named: the loss, q and dL/dq (the norms' components), per sample the
/// outputs, the tokens' gap and 1 - s_top, the group masses, S_i, the prompt's attention
/// (in sequence), the prompt's head values, the test outputs, the direction record, and
/// with `[factorised]` every block's entries and every trained block's gradient
/// (factored ones as their rounded entries). Also each sample's tokens' (top, decided).
#[allow(clippy::type_complexity)]
fn checkpoint_reals<A: Arith>(tr: &Trainer<'_, A>) -> (Vec<(String, A::Real)>, Vec<(usize, bool)>) {
    let mut v: Vec<(String, A::Real)> = vec![("train_loss".into(), tr.loss.clone())];
    let q = tr.q();
    v.extend(
        q.iter()
            .enumerate()
            .map(|(k, x)| (format!("q[{k}]"), x.clone())),
    );
    let g = tr.grad_q();
    v.extend(
        g.into_iter()
            .enumerate()
            .map(|(k, x)| (format!("grad_q[{k}]"), x)),
    );
    let pos = tr.positions();
    let mut tops = Vec::new();
    for (i, s) in tr.samples.iter().enumerate() {
        v.push((format!("samples[{i}].f"), s.f.clone()));
        for (c, o) in s.outputs.iter().enumerate() {
            v.push((format!("samples[{i}].outputs[{c}]"), o.clone()));
        }
        let tok = tr.token_softmax(i);
        tops.push((
            tok.top,
            tok.selection == tokensel::prelude::Selection::Decided,
        ));
        if tr.ar.is_finite(&tok.gap) {
            v.push((format!("samples[{i}].gap"), tok.gap));
        }
        v.push((format!("samples[{i}].rest"), tok.rest));
        for (gr, m) in tr.group_mass(i).into_iter().enumerate() {
            v.push((format!("samples[{i}].mass[{gr}]"), m));
        }
        v.push((
            format!("samples[{i}].selection_score"),
            tr.selection_score_value(i),
        ));
        if tr.in_sequence() {
            v.push((
                format!("samples[{i}].prompt.attention"),
                tr.attention[i * pos].clone(),
            ));
        }
    }
    for (c, h) in tr.prompt_head_values().into_iter().enumerate() {
        v.push((format!("prompt head value {c}"), h));
    }
    for (k, f) in tr.test_outputs(Some(&q)).into_iter().enumerate() {
        v.push((format!("test output {k}"), f));
    }
    if let Some(dv) = tr.direction_values(&q) {
        let named = [
            ("direction.one_minus_corr", dv.one_minus_corr),
            ("direction.norm", Some(dv.norm)),
            ("direction.margin", dv.margin),
            ("direction.support_deviation", dv.support_deviation),
        ];
        v.extend(
            named
                .into_iter()
                .filter_map(|(n, x)| x.map(|x| (n.to_string(), x))),
        );
    }
    if let Some(f) = fact(tr) {
        for (b, x) in f.blocks.iter() {
            v.extend(
                x.iter()
                    .enumerate()
                    .map(|(k, x)| (format!("{}[{k}]", b.name), x.clone())),
            );
        }
        let grads = f.gradients(&tr.ar, &tr.grad_q());
        for (b, g) in f.blocks.decl.iter().zip(grads) {
            let Some(g) = g else { continue };
            v.extend(
                g.dense(&tr.ar)
                    .into_iter()
                    .enumerate()
                    .map(|(k, x)| (format!("dL/d{}[{k}]", b.name), x)),
            );
        }
    }
    (v, tops)
}

/// Check 3: balls and the MPFR twin driven in lockstep (one driver over the pair, each
/// in the config's method as `auto` resolves it for its arithmetic); at every checkpoint
/// step of the record's schedule every real of [`checkpoint_reals`] of the twin lies in
/// the ball's, and where the ball proves a sample's top token the twin's top is that
/// token. Returns the balls' precision and the number of reals compared (asserted > 0).
///
/// The balls start at 128 bits with the twin at 512. A ball's radius grows by a factor
/// per step (the wrapping effect of the update; joint mode at d = 64, alpha = 0.3: about
/// 70 per step), so where the balls lose every bit before the last step (a non-finite
/// output, or normalised GD's factor unbounded: the run stopped) the check is repeated at twice the precision, up to
/// [`MAX_BALL_PREC`] bits, the twin then at twice the balls' precision (at least 512
/// bits): a twin rounded at 2^-512 need not lie in a ball narrower than its own error.
fn balls_enclose_the_twin(cfg: &Config, data: &Dataset) -> (u32, usize) {
    let mut prec = 128;
    loop {
        match balls_at(cfg, data, prec, (2 * prec).max(PREC)) {
            Ok(count) => return (prec, count),
            Err(
                e @ (tokensel::prelude::Error::NonFinite { .. }
                | tokensel::prelude::Error::NormalizedStep { .. }),
            ) if prec < MAX_BALL_PREC => {
                eprintln!("{prec}-bit balls lose every bit ({e}): doubling");
                prec *= 2;
            }
            Err(e) => panic!("{prec}-bit balls: {e}"),
        }
    }
}

/// The most bits [`balls_enclose_the_twin`] gives the balls.
const MAX_BALL_PREC: u32 = 2048;

/// [`balls_enclose_the_twin`] at `prec` bits against the twin at `twin_prec` bits.
fn balls_at(
    cfg: &Config,
    data: &Dataset,
    prec: u32,
    twin_prec: u32,
) -> tokensel::prelude::Result<usize> {
    let ball = Ball::new(prec).unwrap();
    let twin = Mpfr::truth(twin_prec).unwrap();
    let b = Trainer::new(cfg, data, ball, cfg.formulation).unwrap();
    let t = Trainer::new(cfg, data, twin, cfg.formulation).unwrap();
    let mut pair = (b, t);
    if let Some(choice) = tokensel::prelude::models::limit::choice_of(cfg) {
        let limit = tokensel::prelude::models::limit::Limit::of_config(cfg, data, &choice).unwrap();
        pair.0.track_direction(&limit).unwrap();
        pair.1.track_direction(&limit).unwrap();
    }
    let steps = schedule(cfg.steps, cfg.record.checkpoints_per_decade);
    let mut count = 0;
    let mut checkpoints = 0;
    drive(&mut pair, cfg.steps, |(b, t), event| {
        if event == Event::Forward && steps.binary_search(&b.step).is_ok() {
            assert_eq!(b.step, t.step);
            let (bv, btops) = checkpoint_reals(b);
            let (tv, ttops) = checkpoint_reals(t);
            assert_eq!(bv.len(), tv.len(), "step {}: the same reals", b.step);
            for ((name, x), (tname, v)) in bv.iter().zip(&tv) {
                assert_eq!(name, tname);
                assert!(
                    x.contains(v),
                    "step {}: {name}: the {twin_prec}-bit twin's {v} is not in the \
                     {prec}-bit ball {x:?}",
                    b.step
                );
            }
            for (i, ((bt, decided), (tt, _))) in btops.iter().zip(&ttops).enumerate() {
                assert!(
                    !decided || bt == tt,
                    "step {}: sample {i}: the ball proves top {bt}, the twin has {tt}",
                    b.step
                );
            }
            count += bv.len();
            checkpoints += 1;
        }
        Ok(Control::Continue)
    })?;
    assert_eq!(checkpoints, steps.len(), "every checkpoint step visited");
    assert!(count > 0, "no value checked");
    Ok(count)
}

/// One checked direction of [`gradient_errors`].
#[derive(Debug, Clone)]
pub struct GradientError {
    /// The block, point and direction.
    pub what: String,
    /// |g . v - R| (R the Richardson extrapolation).
    pub err: f64,
    /// The derived bound on it.
    pub bound: f64,
    /// |g . v|.
    pub grad: f64,
}

/// A seeded stream of u64 (SplitMix64): the helper's choice of coordinates and
/// directions.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1) on a grid of 2^-52.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * 2f64.powi(-52) - 1.0
    }
}

const PREC: u32 = 512;

fn euclid(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// Check 4's measurements: for every block `cfg.mode` trains (p in p- and joint mode, W
/// in W- and joint mode; with `[factorised]` every trained block of the map: W_Q, W_K,
/// b_Q and b_K with biases, p with `train_p`), at two points (step 0 and the twin's parameters after
/// steps / 2 steps of the config's own optimiser), along three coordinates drawn from a
/// stream seeded by the config's seed and one random direction, the trainer's
/// directional derivative g . v against the Richardson extrapolation of central
/// differences of the 512-bit twin's training loss (`gscale` multiplies the trainer's
/// gradient: 1 for the check, 1 + 1e-12 to see it fail).
///
/// The trainer's gradient: one update of the twin at alpha = 1 (constant-step GD, no
/// clip, full batch, direct step) from the point: g = theta_old - theta_new, each entry
/// of theta_new one rounding at 512 bits (the engine's own W dL/dq, the in-sequence
/// prompt's own terms, p (dL/dq)^T; the factorised map's factored u (dL/dq)^T and
/// (dL/du) p^T, b_Q's dL/du, b_K's (sum c) u and p's W_Q^T dL/du).
///
/// The bound. phi(t) = L(theta + t v); D(h) = (phi(h) - phi(-h)) / (2h) = phi'(0) +
/// phi'''(0) h^2 / 6 + E(h) with |E(h)| <= M5 h^4 / 120 (Lagrange remainders of the
/// odd part), M5 = max |phi^(5)| on [-h, h]. R = (4 D(h/2) - D(h)) / 3 cancels the h^2
/// term: |R - phi'(0)| <= (4 M5 (h/2)^4 / 120 + M5 h^4 / 120) / 3 = M5 h^4 / 288.
/// M5: the loss is the logistic or cross-entropy loss (its k-th derivative in f at most
/// k! 2^k in size) of f = sum_t s_t g_t, s the softmax of the scores z, head values
/// |g_t| <= H = 1 + G (X + P) (X the largest token norm, G the largest head row norm,
/// P = |p| + |W|_F, or |p| + sqrt(d) for W = I; the prompt's head value <nu, p> is at
/// most G P); along the line (one block moves) every score (x^T W^T p, the prompt's
/// p^T W^T p) and the prompt's head value have |dz/dt| + |d^2z/dt^2|^(1/2) <=
/// S = (1 + X + G + 2 P)(1 + P) |v|. The factorised map (separate prompt only, so H =
/// 1 + G (X + |p|)): z = (W_Q p + b_Q)^T (W_K x + b_K) is affine along any one block
/// (d^2z/dt^2 = 0) with |dz/dt| at most |v| times |p| (|W_K| X + |b_K|) (W_Q), |u| X
/// (W_K, |u| <= |W_Q| |p| + |b_Q|), |W_K| X + |b_K| (b_Q), |u| (b_K), |W_Q| (|W_K| X +
/// |b_K|) (p), each below S = (1 + X)(1 + |W_Q| + |b_Q|)(1 + |W_K| + |b_K|)(1 + |p|) |v|
/// (Frobenius norms; a perturbation of size h |v| = 2^-40 |v| is inside the 1s); the
/// fifth derivative of the composition is a sum over the
/// 52 set partitions of 5 (Faa di Bruno) of products of derivatives of the softmax and
/// the loss (each at most k! 2^k for the k-th) with powers of S and H, so
/// M5 <= C (H S)^5 with C = 10^6 (52 * 5! * 2^5 = 2e5, rounded up). Rounding: the loss at
/// 512 bits has relative error <= kappa 2^-512 with kappa = 4 n P (d + K + 16) + 4 d^2
/// operations (+ 8 m d + 4 m for the factorised map's u, q and shift), so R carries
/// 3 kappa 2^-512 (|L| + 1) / h; g carries 2^-511 (|theta| + |g|)_1 |v|_inf. h = 2^-40: the truncation term is ~2.4e-51 C (H S)^5: measured at the
/// helper's sizes, 1e-29 (a coordinate) to 1e-21 (a random direction of W's d^2
/// entries), far below |g . v| (1e-6 to 4e-2) and below the 1e-12 relative change a
/// perturbed gradient makes; the errors measured are 1e-60 to 1e-46.
pub fn gradient_errors(cfg: &Config, data: &Dataset, gscale: f64) -> Vec<GradientError> {
    let twin = Mpfr::truth(PREC).unwrap();
    let mut gcfg = cfg.clone();
    gcfg.optimizer = Optimizer::default();
    gcfg.step_size = 1.0;
    gcfg.direction = None;
    gcfg.validate().expect("the gradient's GD config");
    // the points: step 0, and the twin's parameters after steps / 2 steps of cfg
    let mut run = Trainer::new(cfg, data, twin, Formulation::Stable).unwrap();
    let mut points = vec![(0, params_of(&run))];
    let mid = cfg.steps / 2;
    drive(&mut run, mid, |_, _| Ok(Control::Continue)).unwrap();
    points.push((mid, params_of(&run)));
    let base =
        Trainer::with_method(&gcfg, data, twin, Formulation::Stable, Method::Direct).unwrap();
    // the blocks: (name, trained), in the order of `params_of`
    let decl: Vec<(String, bool)> = match fact(&base) {
        Some(f) => f
            .blocks
            .decl
            .iter()
            .map(|b| (b.name.to_string(), b.trained))
            .collect(),
        None => vec![
            ("p".into(), cfg.mode != Mode::W),
            ("W".into(), cfg.mode != Mode::P),
        ],
    };
    let (n, t, d) = data.train.x.dim();
    let k = cfg.model.classes.max(1);
    let pos = cfg.model.positions(t);
    let x_max = data
        .train
        .x
        .rows()
        .into_iter()
        .map(|r| euclid(r.as_slice().unwrap()))
        .fold(0.0, f64::max);
    let g_max = match &data.nu_classes {
        Some(nu) => nu
            .rows()
            .into_iter()
            .map(|r| r.iter().map(|x| x * x).sum::<f64>().sqrt())
            .fold(0.0, f64::max),
        None => euclid(data.nu.as_slice().unwrap()),
    };
    let m = cfg.factorised.map_or(0, |f| f.m);
    let kappa = (4 * n * pos * (d + k + 16) + 4 * d * d + 8 * m * d + 4 * m) as f64;
    let h = 2f64.powi(-40);
    let c = 1e6;
    let mut stream = Stream(cfg.seed ^ 0xC0FF_EE00_D1FF_0001);
    let mut out = Vec::new();
    for (step, theta) in points {
        let mut tr = base.clone();
        set_params(&mut tr, &theta);
        tr.forward_backward().unwrap();
        let loss = tr.loss.to_f64().abs();
        let mut moved = tr.clone();
        moved.update().unwrap();
        let theta1 = params_of(&moved);
        let diff = |a: &[Float], b: &[Float]| -> Vec<Float> {
            a.iter()
                .zip(b)
                .map(|(x, y)| Float::with_val(PREC, x - y) * gscale)
                .collect()
        };
        let f64s = |v: &[Float]| v.iter().map(Float::to_f64).collect::<Vec<_>>();
        let norm_of = |name: &str| {
            decl.iter()
                .position(|(b, _)| b == name)
                .map_or(0.0, |i| euclid(&f64s(&theta[i])))
        };
        // P = |p| + |W|_F (|p| + sqrt(d) for W = I; |p| for the factorised map)
        let big_p = norm_of("p")
            + if cfg.factorised.is_some() {
                0.0
            } else if theta[1].is_empty() {
                (d as f64).sqrt()
            } else {
                norm_of("W")
            };
        // S / |v|: the bound on the scores' first and second derivatives along a block
        let slope = if cfg.factorised.is_some() {
            // z = (W_Q p + b_Q)^T (W_K x + b_K) is affine along each block; |dz/dt| <=
            // (1 + X)(1 + |W_Q| + |b_Q|)(1 + |W_K| + |b_K|)(1 + |p|) |v| (the comments
            // above)
            (1.0 + x_max)
                * (1.0 + norm_of("W_Q") + norm_of("b_Q"))
                * (1.0 + norm_of("W_K") + norm_of("b_K"))
                * (1.0 + norm_of("p"))
        } else {
            (1.0 + x_max + g_max + 2.0 * big_p) * (1.0 + big_p)
        };
        // H: the head values (the separate prompt's <nu, p> at most G P)
        let hh = 1.0 + g_max * (x_max + big_p);
        for (bi, (block, trained)) in decl.iter().enumerate() {
            if !trained {
                continue;
            }
            let g = diff(&theta[bi], &theta1[bi]);
            let len = g.len();
            assert!(len > 0, "{block}: a trained block with no entries");
            let theta_f = f64s(&theta[bi]);
            let g_f64 = f64s(&g);
            let mut dirs: Vec<(String, Vec<f64>)> = (0..3)
                .map(|_| {
                    let j = (stream.next() % len as u64) as usize;
                    let mut v = vec![0.0; len];
                    v[j] = 1.0;
                    (format!("{block}[{j}]"), v)
                })
                .collect();
            let v: Vec<f64> = (0..len).map(|_| stream.unit()).collect();
            dirs.push((format!("{block} along a random direction"), v));
            for (name, v) in dirs {
                let loss_at = |s: f64| -> Float {
                    let mut tr = base.clone();
                    let mut at = theta.clone();
                    at[bi] = theta[bi]
                        .iter()
                        .zip(&v)
                        .map(|(xi, vi)| Float::with_val(PREC, xi + s * vi))
                        .collect();
                    set_params(&mut tr, &at);
                    tr.forward_backward().unwrap();
                    tr.loss
                };
                let central = |h: f64| (loss_at(h) - loss_at(-h)) / Float::with_val(PREC, 2.0 * h);
                let rich = (Float::with_val(PREC, 4) * central(h / 2.0) - central(h)) / 3;
                let mut gv = Float::with_val(PREC, 0);
                for (gk, vk) in g.iter().zip(&v) {
                    gv += Float::with_val(PREC, gk * vk);
                }
                let err = Float::with_val(PREC, &rich - &gv).abs().to_f64();
                let v_norm = euclid(&v);
                let v_inf = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
                let s = slope * v_norm;
                let truncation = c * (hh * s).powi(5) * h.powi(4) / 288.0;
                let eps = 2f64.powi(-(PREC as i32));
                let rounding = 3.0 * kappa * eps * (loss + 1.0) / h
                    + 2.0
                        * eps
                        * v_inf
                        * theta_f
                            .iter()
                            .zip(&g_f64)
                            .map(|(a, b)| a.abs() + b.abs())
                            .sum::<f64>();
                out.push(GradientError {
                    what: format!(
                        "{:?} {:?}{} step {step}: {name}",
                        cfg.model.kind,
                        cfg.mode,
                        if cfg.factorised.is_some() {
                            " factorised"
                        } else {
                            ""
                        }
                    ),
                    err,
                    bound: truncation + rounding,
                    grad: gv.to_f64().abs(),
                });
            }
        }
    }
    assert!(
        out.iter().any(|e| e.grad > 1e6 * e.bound),
        "no direction's derivative is far above its bound: the check tests nothing"
    );
    out
}

/// The parameters of a direct-step trainer as blocks: the factorised map's (declaration
/// order), or [p, W] (W empty for the identity).
fn params_of(tr: &Trainer<'_, Mpfr>) -> Vec<Vec<Float>> {
    if let Some(f) = fact(tr) {
        return f.blocks.values.clone();
    }
    let (p, w) = tr.params();
    vec![p, w.unwrap_or_default()]
}

/// Set a direct-step twin's parameters to `theta` ([`params_of`]'s order) and form q.
fn set_params(tr: &mut Trainer<'_, Mpfr>, theta: &[Vec<Float>]) {
    let twin = tr.ar;
    match &mut tr.engine {
        Engine::Direct(e) => {
            match e.fact_mut() {
                Some(f) => f.blocks.values = theta.to_vec(),
                None => {
                    *e.p_mut() = theta[0].clone();
                    if let Some(w) = e.w_mut() {
                        *w = theta[1].clone();
                    }
                }
            }
            e.compute_q(&twin);
        }
        Engine::Span(_) => unreachable!("the direct step"),
    }
}

/// Check 5 in `ar`: the run stopped after step steps / 2 (the after-update callback
/// saves the resumable state, `Trainer::state`, to a file and stops the run with an
/// error, as a crash would), the state loaded from the file (`State::load`) and resumed
/// by a new trainer (`Trainer::record` from it) ends with `whole`'s digest and
/// checkpoints.
fn resume_is_bit_identical<A: Arith>(ar: A, cfg: &Config, data: &Dataset, whole: &Run) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let half = cfg.steps / 2;
    let mut tr = Trainer::new(cfg, data, ar, cfg.formulation).unwrap();
    let stopped = tr.record(None, &mut |tr, rec| {
        if tr.step == half {
            tr.state(rec).save(&path)?;
            return Err(tokensel::prelude::Error::Refused("stopped halfway".into()));
        }
        Ok(())
    });
    assert!(stopped.is_err() || half == 0 || cfg.steps == 0);
    let state = State::load(&path).unwrap();
    assert_eq!(state.step, half);
    let mut tr = Trainer::new(cfg, data, ar, cfg.formulation).unwrap();
    let traj = tr.record(Some(&state), &mut |_, _| Ok(())).unwrap();
    let resumed = Run {
        traj,
        params: final_params(&tr),
    };
    assert_same(
        &format!("{:?} resumed at {half}", ar.kind()),
        whole,
        &resumed,
    );
}

/// A leaf of the last checkpoint: its JSON pointer (indices kept) and its diff key.
#[derive(Debug, Clone)]
struct Leaf {
    pointer: String,
    key: String,
}

/// The key `diff` reports a leaf under: its JSON path below the checkpoint, array
/// indices removed, dotted (`samples[3].mass.R` -> `samples.mass.R`,
/// `classes.train_accuracy[1]` -> `classes.train_accuracy`, `samples[0].prompt.top` ->
/// `samples.prompt.top`). Today's keys of `analysis::diff` follow this rule for every
/// leaf they report (the scalars, `cumulative.*`, `attention.SET.GROUP`,
/// `selection.SET.ENTRY`, `samples.*`, `samples.mass.GROUP`, `classes.*`,
/// `direction.*`).
pub fn leaf_key(path: &[String]) -> String {
    path.iter()
        .filter(|p| p.parse::<usize>().is_err())
        .cloned()
        .collect::<Vec<_>>()
        .join(".")
}

fn leaves(v: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<Leaf>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                path.push(k.clone());
                leaves(x, path, out);
                path.pop();
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                path.push(i.to_string());
                leaves(x, path, out);
                path.pop();
            }
        }
        // null: an absent value (no noisy sample, theta = theta0): nothing to move
        serde_json::Value::Null => {}
        _ => out.push(Leaf {
            pointer: path.iter().map(|p| format!("/{p}")).collect(),
            key: leaf_key(path),
        }),
    }
}

/// The leaf moved within its range: a flag flipped; a selection (`decided`, `tie`,
/// `undecided`) changed to the next; an index (`top`) to the next valid position; a
/// value in [0, 1] (a share, a mass, 1 - s_top, S_i, an accuracy, and any other value
/// there) moved 1e-6 toward 0.5; any other number scaled by 1 + 1e-6 and moved by
/// 1e-9.
fn perturb(leaf: &Leaf, v: &serde_json::Value, tokens: usize) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Bool(b) => Value::Bool(!b),
        Value::String(s) => {
            let all = ["decided", "tie", "undecided"];
            let i = all
                .iter()
                .position(|x| x == s)
                .unwrap_or_else(|| panic!("{}: a string leaf `{s}` with no rule", leaf.pointer));
            Value::String(all[(i + 1) % 3].into())
        }
        Value::Number(n) if n.is_u64() && !n.is_f64() => {
            assert!(
                leaf.key.ends_with("top"),
                "{}: an integer leaf with no rule",
                leaf.pointer
            );
            Value::from((n.as_u64().unwrap() as usize + 1) % tokens)
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap();
            let y = if (0.0..=1.0).contains(&x) {
                x + if x < 0.5 { 1e-6 } else { -1e-6 }
            } else {
                x * (1.0 + 1e-6) + 1e-9
            };
            assert_ne!(x, y);
            Value::from(y)
        }
        _ => unreachable!("containers and nulls are not leaves"),
    }
}

/// Check 6 on `run` (the f64 trajectory): every leaf of its last checkpoint but `step`
/// (the step matches checkpoints between the two files, so a moved step is a different
/// checkpoint set, not a leaf's deviation) perturbed alone ([`perturb`]), written beside
/// the original, and `tokensel diff A B --json` run on the pair: exit 1, `diverged`
/// true, `max_rel_dev[leaf_key] > 0`. Every leaf that fails is printed before the
/// assertion. Returns the number of leaves.
fn diff_reports_every_leaf(run: &Trajectory) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.json");
    let b = dir.path().join("b.json");
    std::fs::write(&a, run.to_json()).unwrap();
    let whole: serde_json::Value = serde_json::from_str(&run.to_json()).unwrap();
    let last = whole["checkpoints"].as_array().unwrap().len() - 1;
    let mut found = Vec::new();
    leaves(&whole["checkpoints"][last], &mut Vec::new(), &mut found);
    found.retain(|l| l.pointer != "/step");
    assert!(!found.is_empty());
    let tokens = run.config.tokens();
    let mut missed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for leaf in &found {
        let mut copy = whole.clone();
        let at = format!("/checkpoints/{last}{}", leaf.pointer);
        let slot = copy.pointer_mut(&at).unwrap();
        *slot = perturb(leaf, slot, tokens);
        std::fs::write(&b, serde_json::to_string_pretty(&copy).unwrap()).unwrap();
        let o = super::tokensel(&["diff", a.to_str().unwrap(), b.to_str().unwrap(), "--json"]);
        assert_ne!(
            o.status.code(),
            Some(2),
            "{}: the perturbed file is refused (the leaf was not moved within range): {}",
            leaf.pointer,
            super::stderr(&o)
        );
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        // a deviation > 0: a number, or an infinite one (spelled as a string)
        let dev = &r["max_rel_dev"][&leaf.key];
        let reported = dev.as_f64().is_some_and(|x| x > 0.0) || dev.as_str() == Some("inf");
        let ok = o.status.code() == Some(1)
            && r["diverged"] == serde_json::Value::Bool(true)
            && reported;
        if !ok {
            missed.entry(leaf.key.clone()).or_default().push(format!(
                "{} (exit {:?}, max_rel_dev[{}] = {})",
                leaf.pointer,
                o.status.code(),
                leaf.key,
                r["max_rel_dev"][&leaf.key]
            ));
        }
    }
    for (key, at) in &missed {
        eprintln!(
            "diff does not report `{key}` ({} leaves), e.g. {}",
            at.len(),
            at[0]
        );
    }
    assert!(
        missed.is_empty(),
        "diff misses {} of {} leaves under the keys {:?}",
        missed.values().map(Vec::len).sum::<usize>(),
        found.len(),
        missed.keys().collect::<Vec<_>>()
    );
    found.len()
}
