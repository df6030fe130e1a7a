//! Stateful optimisers and minibatches (`[optimizer] kind = "adam" | "adamw"`, `schedule`,
//! `clip_norm`, `batch`: `train::adam`, `train::batch`, `train::step_rule`).
//!
//! - the 53-bit predictor takes the f64 run's bits under AdamW with weight decay, the
//!   linear schedule, clipping active at some steps and minibatches, in p-, W- and
//!   joint mode (one of them above the parallel thresholds);
//! - the balls (256 bits) enclose the 512-bit twin at every step of an AdamW run, and
//!   `certify` takes an AdamW config;
//! - the first Adam step moves every coordinate by lr |g| / (|g| + eps) against the
//!   sign of g (m_hat = g and v_hat = g^2 exactly at t = 1), in the 1024-bit twin and,
//!   within its rounding count, in f64;
//! - minibatches: each epoch's batches partition the samples, the run is the same on 1
//!   and 2 threads above the parallel threshold, batch = n is exactly the full-batch
//!   run, and a checkpoint's loss is a full-batch forward pass at that step's
//!   parameters;
//! - weight decay at the first step: decoupled in AdamW, L2 in Adam (1024-bit twin);
//!   clipping scales the first GD step to the clip norm, and a clip factor of 1 changes
//!   no bit;
//! - a resumed AdamW minibatch run is bit-identical to an uninterrupted one;
//! - bad values of every new key exit with code 2, naming the key.

mod common;

use rug::Float;
use rug::ops::Pow;
use tokensel::prelude::kernels::worth_parallel;
use tokensel::prelude::train::drive::{Control, Event, drive};
use tokensel::prelude::{
    Arith, Ball, Dataset, F64, Mpfr, Optimizer, OptimizerKind, Params, Schedule, Trainer, *,
};

use common::{stderr, tokensel};

/// AdamW (or Adam) with weight decay `wd`, the linear schedule, clipping at `clip` and
/// minibatches of `batch`.
fn adam(kind: OptimizerKind, wd: f64, clip: Option<f64>, batch: Option<usize>) -> Optimizer {
    Optimizer {
        kind,
        eps: 1e-8,
        beta1: Some(0.9),
        beta2: Some(0.999),
        weight_decay: Some(wd),
        schedule: Schedule::Linear,
        clip_norm: clip,
        batch,
    }
}

/// A run of n samples of T = 8 tokens in dimension d, `steps` steps, in `mode` (W- and
/// joint mode from a Gaussian p(0) and a Kaiming W(0)), under `opt`.
fn config(n: usize, d: usize, mode: Mode, steps: u64, opt: Optimizer) -> Config {
    let cfg = Config {
        seed: 11,
        d,
        n_train: n,
        n_test: 6,
        mu_norm: 4.0,
        eta: 0.25,
        step_size: 0.05,
        steps,
        optimizer: opt,
        ..Config::default()
    };
    let cfg = match mode {
        Mode::P => cfg,
        _ => common::with_init(cfg, mode, 0.5, true),
    };
    cfg.validate().unwrap();
    cfg
}

/// Per step: p and W (f64 values of the arithmetic's) and the step's loss (the batch's
/// mean loss under minibatches, else the full loss).
type Trace = Vec<(Vec<f64>, Option<Vec<f64>>, f64)>;

fn trace<A: Arith>(cfg: &Config, data: &Dataset, ar: A) -> Trace {
    let mut tr = Trainer::new(cfg, data, ar, cfg.formulation).unwrap();
    let mut out = Vec::new();
    drive(&mut tr, cfg.steps, |tr, ev| {
        if ev == Event::Forward {
            let (p, w) = tr.params();
            let f = |v: &[A::Real]| v.iter().map(|x| tr.ar.to_f64(x)).collect::<Vec<_>>();
            let loss = match &tr.batch {
                Some(bp) => tr.ar.to_f64(&bp.loss),
                None => tr.ar.to_f64(&tr.loss),
            };
            out.push((f(&p), w.as_deref().map(f), loss));
        }
        Ok(Control::Continue)
    })
    .unwrap();
    out
}

fn bits(t: &Trace) -> Vec<u64> {
    t.iter()
        .flat_map(|(p, w, l)| {
            p.iter()
                .chain(w.iter().flatten())
                .chain(std::iter::once(l))
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The predictor (53-bit MPFR, correctly rounded like f64) takes the f64 run's bits in
/// every mode under AdamW + L2-free decay, the linear schedule, clipping and batches of
/// 4 of 6 (the last batch of an epoch 2); the joint run (n = 12, batch 8: 8 T 16 x 64 =
/// 65536 operations per batch pass) on 2 threads crosses the per-sample loop's parallel
/// threshold. Clipping is active at some step: the unclipped run differs.
#[test]
fn the_predictor_takes_the_f64_bits_under_adamw_and_minibatches() {
    for (mode, n, batch, kind) in [
        (Mode::P, 6, 4, OptimizerKind::Adamw),
        (Mode::W, 6, 4, OptimizerKind::Adam),
        (Mode::Joint, 12, 8, OptimizerKind::Adamw),
    ] {
        let cfg = config(n, 24, mode, 12, adam(kind, 0.01, Some(0.05), Some(batch)));
        let data = Dataset::generate(&cfg);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (a, b) = pool.install(|| {
            if n == 12 {
                assert!(worth_parallel(&Mpfr::predictor(), batch * 8 * 16));
            }
            (
                trace(&cfg, &data, F64),
                trace(&cfg, &data, Mpfr::predictor()),
            )
        });
        assert_eq!(a.len(), 13);
        assert_eq!(
            bits(&a),
            bits(&b),
            "{mode:?}: the predictor left the f64 bits"
        );
        let mut free = cfg.clone();
        free.optimizer.clip_norm = None;
        let c = trace(&free, &data, F64);
        assert_ne!(bits(&a), bits(&c), "{mode:?}: clipping never active");
    }
}

/// The ball trainer (256 bits, the direct step) encloses the 512-bit twin's p, W and
/// loss at every step of an AdamW run with weight decay, the linear schedule and
/// clipping, in every mode, and with batches of 3 of 5 in joint mode (the loss of a
/// minibatch run is the full set's, from its last checkpoint); `certify` takes the
/// full-batch config (exit 0).
#[test]
fn balls_enclose_the_twin_under_adamw() {
    for (mode, batch) in [
        (Mode::P, None),
        (Mode::W, None),
        (Mode::Joint, None),
        (Mode::Joint, Some(3)),
    ] {
        let cfg = config(
            5,
            16,
            mode,
            15,
            adam(OptimizerKind::Adamw, 0.01, Some(0.05), batch),
        );
        let data = Dataset::generate(&cfg);
        let ball = Trainer::new(&cfg, &data, Ball::new(256).unwrap(), Formulation::Stable).unwrap();
        let twin =
            Trainer::new(&cfg, &data, Mpfr::truth(512).unwrap(), Formulation::Stable).unwrap();
        assert_eq!(ball.method(), Method::Direct);
        let mut pair = (ball, twin);
        let mut checked = 0;
        drive(&mut pair, cfg.steps, |(b, t), ev| {
            if ev == Event::Forward {
                let ((bp, bw), (tp, tw)) = (b.params(), t.params());
                common::assert_enclosed("p", &bp, &tp);
                if let (Some(bw), Some(tw)) = (bw, tw) {
                    common::assert_enclosed("W", &bw, &tw);
                }
                common::assert_enclosed(
                    "loss",
                    std::slice::from_ref(&b.loss),
                    std::slice::from_ref(&t.loss),
                );
                checked += 1;
            }
            Ok(Control::Continue)
        })
        .unwrap();
        assert_eq!(checked, 16);
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("adamw.toml");
    std::fs::write(
        &path,
        "d = 16\nn_train = 5\nn_test = 4\nsteps = 10\nstep_size = 0.05\n[optimizer]\nkind = \"adamw\"\nweight_decay = 0.01\nschedule = \"linear\"\nclip_norm = 1.0\n",
    )
    .unwrap();
    let o = tokensel(&[
        "certify",
        "--quiet",
        "--config",
        path.to_str().unwrap(),
        "--prec",
        "128",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// The first Adam step (t = 1): m = (1 - b1) g and v = (1 - b2) g^2, so m_hat = g and
/// v_hat = g^2 exactly, and every coordinate moves by -lr g / (|g| + eps) (here from
/// p(0) = 0 with W = I, so dp = dL/dq; the linear schedule's factor at step 0 is 1).
/// In the 1024-bit twin to 2^-1000 relative (a few dozen roundings of 2^-1024); in f64
/// to 12 u relative, u = 2^-53: 1 - b1 and 1 - b2 are exact (Sterbenz), and m, (c2 g) g,
/// sqrt(bc2), lr / bc1, sqrt(v), the division by sqrt(bc2), + eps, the product of the
/// step size with m and its quotient by denom round once each (10 roundings; 12 u
/// covers the second order).
#[test]
fn the_first_adam_step_is_lr_times_the_sign() {
    let cfg = config(
        6,
        20,
        Mode::P,
        1,
        adam(OptimizerKind::Adam, 0.0, None, None),
    );
    let data = Dataset::generate(&cfg);
    let lr = cfg.step_size;
    // twin
    let ar = Mpfr::truth(1024).unwrap();
    let mut tr = Trainer::new(&cfg, &data, ar, Formulation::Stable).unwrap();
    tr.forward_backward().unwrap();
    let g = tr.grad_q();
    let p0 = tr.p();
    tr.update().unwrap();
    let p1 = tr.p();
    for ((g, a), b) in g.iter().zip(&p0).zip(&p1) {
        assert!(a.is_zero());
        let want = Float::with_val(1100, -lr) * g / (Float::with_val(1100, g.abs_ref()) + 1e-8);
        let diff = Float::with_val(1100, b - &want);
        let rel = Float::with_val(1100, diff / &want).abs().to_f64();
        assert!(rel < 2f64.powi(-1000), "twin: {b} vs {want}");
        assert!(b.to_f64().abs() > 0.99 * lr && b.to_f64().abs() < lr);
    }
    // f64
    let mut tr = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
    tr.forward_backward().unwrap();
    let g = tr.grad_q();
    tr.update().unwrap();
    for (g, b) in g.iter().zip(tr.p()) {
        let want = Float::with_val(200, -lr) * g / (Float::with_val(200, g.abs()) + 1e-8);
        let diff = Float::with_val(200, Float::with_val(200, b) - &want);
        let rel = Float::with_val(200, diff / &want).abs().to_f64();
        assert!(
            rel <= 12.0 * f64::EPSILON / 2.0,
            "f64: {b:e} vs {want}: {rel:e}"
        );
    }
}

/// Minibatches: over an epoch the batches (sorted, of 3, 3 and 1) partition 0..n; the
/// next epoch is another permutation. batch = n gives exactly the full-batch run's
/// checkpoints (GD, normalised GD and AdamW). A checkpoint of a minibatch run records a
/// forward pass over every sample: its loss is the loss of a full-batch trainer started
/// from that step's parameters.
#[test]
fn minibatches_partition_match_the_full_batch_and_record_full_checkpoints() {
    let cfg = config(
        7,
        12,
        Mode::P,
        9,
        adam(OptimizerKind::Adamw, 0.0, None, Some(3)),
    );
    let data = Dataset::generate(&cfg);
    let mut tr = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
    let mut epochs: Vec<Vec<Vec<usize>>> = vec![Vec::new(); 4];
    let mut at_checkpoints = Vec::new();
    drive(&mut tr, cfg.steps, |tr, ev| {
        if ev == Event::Forward {
            let b = tr.batch_indices().unwrap().to_vec();
            assert!(b.windows(2).all(|w| w[0] < w[1]));
            epochs[(tr.step / 3) as usize].push(b);
            if tr.full_forward() {
                let (p, _) = tr.params();
                at_checkpoints.push((tr.step, p, tr.loss));
            }
        }
        Ok(Control::Continue)
    })
    .unwrap();
    for e in &epochs[..3] {
        let sizes: Vec<usize> = e.iter().map(Vec::len).collect();
        assert_eq!(sizes, [3, 3, 1]);
        let mut all: Vec<usize> = e.concat();
        all.sort_unstable();
        assert_eq!(all, (0..7).collect::<Vec<_>>());
    }
    assert_ne!(epochs[0], epochs[1]);
    // checkpoints: 0..=9 every step at 10 per decade
    assert!(at_checkpoints.len() >= 3);
    let mut full = cfg.clone();
    full.optimizer.batch = None;
    for (step, p, loss) in &at_checkpoints {
        let init = Params {
            p: p.clone().into(),
            w: None,
        };
        let mut f =
            Trainer::from_params(&full, &data, F64, full.formulation, Method::Direct, &init)
                .unwrap();
        f.forward_backward().unwrap();
        assert_eq!(f.loss.to_bits(), loss.to_bits(), "step {step}");
    }
    // batch = n is the full-batch run, bit for bit
    for opt in [
        Optimizer::default(),
        Optimizer {
            kind: OptimizerKind::NormalizedGd,
            eps: 1e-9,
            ..Optimizer::default()
        },
        adam(OptimizerKind::Adamw, 0.01, Some(0.05), None),
    ] {
        for mode in [Mode::P, Mode::Joint] {
            let a = config(7, 12, mode, 20, opt);
            let mut b = a.clone();
            b.optimizer.batch = Some(7);
            let (ta, tb) = (common::run_f64(&a), common::run_f64(&b));
            assert_eq!(ta.checkpoints, tb.checkpoints, "{opt:?} {mode:?}");
            assert_eq!(ta.trainer, tb.trainer);
        }
    }
}

/// A minibatch AdamW run above the per-sample loop's parallel threshold (batches of 512
/// samples of 8 tokens: 65536 f64 operations) gives the same trajectory on 1 and 2
/// threads, byte for byte.
#[test]
fn minibatch_runs_do_not_depend_on_the_thread_count() {
    let cfg = config(
        1100,
        8,
        Mode::Joint,
        4,
        adam(OptimizerKind::Adamw, 0.01, Some(0.5), Some(512)),
    );
    let data = Dataset::generate(&cfg);
    let run = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                if threads == 2 {
                    assert!(worth_parallel(&F64, 512 * 8 * 16));
                }
                Trainer::run(&cfg, &data, F64, &mut |_| {})
                    .unwrap()
                    .to_json()
            })
    };
    assert_eq!(run(1), run(2));
}

/// A run resumed from its state (saved to a file and read back) after step 5 of 12 is
/// the uninterrupted run, byte for byte: AdamW's moments and step counter are in the
/// state, the batch order is drawn again from the seed. The state names the moments.
#[test]
fn a_resumed_adamw_minibatch_run_is_bit_identical() {
    for mode in [Mode::P, Mode::Joint] {
        let cfg = config(
            7,
            12,
            mode,
            12,
            adam(OptimizerKind::Adamw, 0.01, Some(0.05), Some(3)),
        );
        let data = Dataset::generate(&cfg);
        let mut saved = None;
        let mut tr = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
        let whole = tr
            .record(None, &mut |tr, rec| {
                if tr.step == 5 {
                    saved = Some(tr.state(rec));
                }
                Ok(())
            })
            .unwrap();
        let st = saved.unwrap();
        assert!(st.values.contains_key("adam.m.p") && st.values.contains_key("adam.v.p"));
        assert_eq!(st.values.contains_key("adam.m.W"), mode != Mode::P);
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("state.json");
        st.save(&path).unwrap();
        let st = tokensel::prelude::formats::state::State::load(&path).unwrap();
        let mut again = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
        let resumed = again.record(Some(&st), &mut |_, _| Ok(())).unwrap();
        assert_eq!(whole.to_json(), resumed.to_json(), "{mode:?}");
        // a state whose moments were lost is refused
        let mut broken = st.clone();
        broken.values.remove("adam.v.p");
        let mut t3 = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
        assert!(t3.record(Some(&broken), &mut |_, _| Ok(())).is_err());
    }
}

/// Bad values of every new key exit with code 2 and name the key.
#[test]
fn bad_optimizer_values_exit_2_naming_the_key() {
    let cases = [
        ("kind = \"adam\"\nbeta1 = 1.0", "optimizer.beta1"),
        ("kind = \"adamw\"\nbeta2 = -0.1", "optimizer.beta2"),
        ("kind = \"adam\"\nbeta1 = nan", "optimizer.beta1"),
        ("kind = \"adam\"\neps = 0.0", "optimizer.eps"),
        (
            "kind = \"adamw\"\nweight_decay = -1.0",
            "optimizer.weight_decay",
        ),
        ("kind = \"gd\"\nbeta1 = 0.9", "optimizer.beta1"),
        (
            "kind = \"normalized-gd\"\nweight_decay = 0.1",
            "optimizer.weight_decay",
        ),
        ("kind = \"gd\"\nbatch = 0", "optimizer.batch"),
        ("kind = \"gd\"\nbatch = 21", "optimizer.batch"),
        ("kind = \"adam\"\nclip_norm = 0.0", "optimizer.clip_norm"),
        ("kind = \"adam\"\nclip_norm = nan", "optimizer.clip_norm"),
        ("kind = \"gd\"\nschedule = \"cosine\"", "schedule"),
        ("kind = \"adam\"\nmomentum = 0.9", "momentum"),
    ];
    let tmp = tempfile::tempdir().unwrap();
    for (i, (body, key)) in cases.iter().enumerate() {
        let path = tmp.path().join(format!("bad{i}.toml"));
        std::fs::write(
            &path,
            format!("n_train = 20\nsteps = 3\n[optimizer]\n{body}\n"),
        )
        .unwrap();
        let o = tokensel(&["run", "--quiet", "--config", path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{body}: {}", stderr(&o));
        assert!(stderr(&o).contains(key), "{body}: {}", stderr(&o));
    }
    // method = "span" with Adam, minibatches or clipping
    for opt in [
        "kind = \"adam\"",
        "kind = \"gd\"\nbatch = 4",
        "kind = \"gd\"\nclip_norm = 1.0",
    ] {
        let path = tmp.path().join("span.toml");
        std::fs::write(
            &path,
            format!("steps = 3\nmethod = \"span\"\n[optimizer]\n{opt}\n"),
        )
        .unwrap();
        let o = tokensel(&["run", "--quiet", "--config", path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{opt}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("`method`") && stderr(&o).contains("span"),
            "{}",
            stderr(&o)
        );
    }
    // commands that read every sample at every step refuse minibatches; Lemma A.6
    // refuses Adam
    let path = tmp.path().join("batch.toml");
    std::fs::write(
        &path,
        "d = 10\nn_train = 6\nsteps = 3\n[optimizer]\nkind = \"gd\"\nbatch = 2\n",
    )
    .unwrap();
    for cmd in ["compare", "certify"] {
        let o = tokensel(&[cmd, "--quiet", "--config", path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("optimizer.batch"),
            "{cmd}: {}",
            stderr(&o)
        );
    }
    let cfg = config(
        6,
        10,
        Mode::W,
        3,
        adam(OptimizerKind::Adam, 0.0, None, None),
    );
    let data = Dataset::generate(&cfg);
    let e = tokensel::prelude::analysis::lemma_a6::lemma_a6(&cfg, &data).unwrap_err();
    assert!(
        e.is_input_error() && e.to_string().contains("Lemma A.6"),
        "{e}"
    );
}

/// `auto` resolves to the direct step under Adam and minibatches; a trainer asked for
/// the span step of an Adam config gets the direct step (the commands' span default),
/// and the config's name in outputs says what ran.
#[test]
fn auto_and_span_defaults_take_the_direct_step() {
    let cfg = config(
        6,
        10,
        Mode::P,
        3,
        adam(OptimizerKind::Adamw, 0.0, Some(1.0), Some(4)),
    );
    let data = Dataset::generate(&cfg);
    for m in [Method::Auto, Method::Span] {
        let tr = Trainer::with_method(
            &cfg,
            &data,
            Mpfr::truth(128).unwrap(),
            Formulation::Stable,
            m,
        )
        .unwrap();
        assert_eq!(tr.method(), Method::Direct);
    }
    assert_eq!(
        cfg.optimizer.name_with(Some(5e-5)),
        "adamw (lr 5e-5, betas 0.9/0.999, eps 1e-8, wd 0, linear, clip 1, batch 4)"
    );
}

/// Clipping (`clip_grad_norm_`): under GD from p(0) = 0 with W = I, the first step is
/// -lr c g / (|g| + 1e-6) with c = clip where the gradient norm |g| exceeds clip, so
/// |dp| = lr clip |g| / (|g| + 1e-6) (in the 1024-bit twin to 2^-1000 relative; the
/// linear schedule's factor at step 0 is 1); with a clip norm far above every
/// gradient's (1e300) the factor is exactly 1 and the f64 run is the unclipped one, bit
/// for bit, in p- and joint mode.
#[test]
fn clipping_scales_the_gradient_to_the_clip_norm() {
    let mut opt = Optimizer {
        schedule: Schedule::Linear,
        clip_norm: Some(1e-3),
        ..Optimizer::default()
    };
    let cfg = config(6, 20, Mode::P, 2, opt);
    let data = Dataset::generate(&cfg);
    let ar = Mpfr::truth(1024).unwrap();
    let mut tr = Trainer::new(&cfg, &data, ar, Formulation::Stable).unwrap();
    tr.forward_backward().unwrap();
    let g = tr.grad_q();
    let gn = {
        let mut s = Float::with_val(1100, 0);
        for x in &g {
            s += Float::with_val(1100, x * x);
        }
        s.sqrt()
    };
    assert!(gn > 1e-3, "the gradient's norm {gn} is below the clip norm");
    tr.update().unwrap();
    let lr = cfg.step_size;
    let coef = Float::with_val(1100, 1e-3) / Float::with_val(1100, &gn + 1e-6);
    for (gk, pk) in g.iter().zip(tr.p()) {
        let want = Float::with_val(1100, -lr) * &coef * gk;
        let diff = Float::with_val(1100, &pk - &want);
        let rel = Float::with_val(1100, diff / &want).abs().to_f64();
        assert!(rel < 2f64.powi(-1000), "{pk} vs {want}");
    }
    for mode in [Mode::P, Mode::Joint] {
        opt.clip_norm = Some(1e300);
        let a = config(6, 20, mode, 10, opt);
        let mut b = a.clone();
        b.optimizer.clip_norm = None;
        let data = Dataset::generate(&a);
        assert_eq!(bits(&trace(&a, &data, F64)), bits(&trace(&b, &data, F64)));
    }
}

/// Weight decay at the first step (t = 1, m_hat = g', v_hat = g'^2) from a Gaussian
/// p(0) with W = I, in the 1024-bit twin to 2^-1000 relative: AdamW decouples it,
/// p1 = p0 (1 - lr wd) - lr g / (|g| + eps); Adam adds it to the gradient,
/// g' = g + wd p0 and p1 = p0 - lr g' / (|g'| + eps).
#[test]
fn weight_decay_is_decoupled_in_adamw_and_l2_in_adam() {
    let wd = 0.3;
    for kind in [OptimizerKind::Adamw, OptimizerKind::Adam] {
        let mut opt = adam(kind, wd, None, None);
        opt.schedule = Schedule::Constant;
        let cfg = common::with_init(config(6, 20, Mode::P, 1, opt), Mode::P, 0.5, false);
        cfg.validate().unwrap();
        let data = Dataset::generate(&cfg);
        let mut tr =
            Trainer::new(&cfg, &data, Mpfr::truth(1024).unwrap(), Formulation::Stable).unwrap();
        tr.forward_backward().unwrap();
        let (g, p0) = (tr.grad_q(), tr.p());
        tr.update().unwrap();
        let lr = cfg.step_size;
        const P: u32 = 1100;
        let lr_f = Float::with_val(P, lr);
        // lr x / (|x| + eps), each operation at 1100 bits
        let adam_step = |x: &Float| {
            let num = Float::with_val(P, &lr_f * x);
            let den = Float::with_val(P, x.abs_ref()) + 1e-8;
            Float::with_val(P, num / den)
        };
        for ((g, p0), p1) in g.iter().zip(&p0).zip(tr.p()) {
            assert!(!p0.is_zero());
            let want = match kind {
                OptimizerKind::Adamw => {
                    let decay = Float::with_val(P, 1.0) - Float::with_val(P, &lr_f * wd);
                    Float::with_val(P, p0 * decay) - adam_step(g)
                }
                _ => {
                    let gp = Float::with_val(P, g + Float::with_val(P, p0 * wd));
                    Float::with_val(P, p0 - adam_step(&gp))
                }
            };
            let diff = Float::with_val(1100, &p1 - &want);
            let rel = Float::with_val(1100, diff / &want).abs().to_f64();
            assert!(rel < 2f64.powi(-1000), "{kind:?}: {p1} vs {want}");
        }
    }
}

/// beta^t, 1024 bits, rounded ONCE to f64: the correctly rounded f64 value (the
/// definition; no f64 midpoint is within 2^-1024 relative of a power of an f64 with
/// more than one significant bit, which the sizes below keep away from).
fn power_1024(beta: f64, t: u64) -> Float {
    Float::with_val(1024, beta).pow(t)
}

/// A value (here >= 0) rounded once to binary32: below 2^-126 to the nearest multiple of
/// 2^-149 (ties to even), else to 24 bits. (rug's `to_f32` rounds to 24 bits and then
/// again into the subnormal range: twice.)
fn to_f32_once(v: &Float) -> f32 {
    if *v < Float::with_val(24, Float::i_exp(1, -126)) {
        let q = Float::with_val(v.prec(), v << 149u32).round_even();
        Float::with_val(v.prec(), q >> 149u32).to_f32()
    } else {
        Float::with_val(24, v).to_f32()
    }
}

/// beta^t is correctly rounded in every arithmetic, at every t in 1..=2000 (issue 40,
/// item 2: binary powering was off by up to 417 ulp there) and at a few large t
/// (where binary32's exponent cannot hold t exactly, t > 2^24, and where binary64's
/// cannot, t > 2^53; and results in binary32's subnormal range): f64 and the
/// predictor equal the 1024-bit power rounded once to f64 (so the predictor keeps the
/// f64 bits); f32 equals the 1024-bit power of the binary32 beta rounded once to
/// binary32; the 256-bit twin equals it rounded once to 256 bits; the balls (53 and 128
/// bits) enclose it, and a ball with a radius encloses the power of both its ends
/// and its midpoint (odd and even t, a negative base).
#[test]
fn beta_to_the_t_is_correctly_rounded_in_every_arithmetic() {
    let pred = Mpfr::predictor();
    let twin = Mpfr::truth(256).unwrap();
    let (b53, b128) = (Ball::new(53).unwrap(), Ball::new(128).unwrap());
    let mut cases: Vec<(f64, u64)> = Vec::new();
    for beta in [0.9, 0.999, 0.95, 0.98, 0.9999] {
        cases.extend((1..=2000).map(|t| (beta, t)));
    }
    cases.extend([
        (0.999, 123_457),
        (1.0 - 2f64.powi(-24), (1 << 24) + 1),
        (1.0 - 2f64.powi(-24), 1_000_000_000),
        (1.0 - 4.6e-6, 20_000_001),
        (0.5, 1100),
        (1.0 - 2f64.powi(-53), (1 << 53) + 3),
    ]);
    let mut off = 0;
    for (beta, t) in cases {
        let exact = power_1024(beta, t);
        let want = exact.to_f64();
        let got = tokensel::prelude::train::adam::pow(&F64, &beta, t);
        if got.to_bits() != want.to_bits() {
            off += 1;
            continue;
        }
        let got = pred.to_f64(&tokensel::prelude::train::adam::pow(
            &pred,
            &pred.of(beta),
            t,
        ));
        assert_eq!(got.to_bits(), want.to_bits(), "predictor {beta}^{t}");
        let b32 = F32.of(beta);
        let want32 = to_f32_once(&Float::with_val(1024, b32).pow(t));
        let got32 = tokensel::prelude::train::adam::pow(&F32, &b32, t);
        assert_eq!(got32.to_bits(), want32.to_bits(), "f32 {b32}^{t}");
        let got = tokensel::prelude::train::adam::pow(&twin, &twin.of(beta), t);
        assert_eq!(got, Float::with_val(256, &exact), "twin {beta}^{t}");
        for b in [b53, b128] {
            let got = tokensel::prelude::train::adam::pow(&b, &b.of(beta), t);
            assert!(got.contains(&exact), "ball {beta}^{t}: {got:?}");
        }
    }
    assert_eq!(off, 0, "f64 powers not correctly rounded");
    // balls with a radius: [m - r, m + r]^t contains (m - r)^t, m^t, (m + r)^t
    let r = Float::with_val(64, 1e-9);
    for m in [0.999, -0.999, 1e-10, -0.5] {
        for t in [0u64, 1, 2, 3, 1000, 1001] {
            let mid = Float::with_val(53, m);
            let x = BallReal::new(mid.clone(), tokensel::prelude::Mag::of_float(&r));
            for b in [b53, b128] {
                let got = tokensel::prelude::train::adam::pow(&b, &x, t);
                for point in [
                    Float::with_val(200, &mid - &r),
                    mid.clone(),
                    Float::with_val(200, &mid + &r),
                ] {
                    // exact: the point has at most 128 significant bits
                    let v = Float::with_val(128 * (t as u32 + 1), &point).pow(t);
                    assert!(got.contains(&v), "ball [{m} +- 1e-9]^{t}: {got:?}");
                }
            }
        }
    }
}

/// Adam's documented order, hand-written in f64 (the module docs of `train::adam`):
/// with t the step, g the gradient, beta^t the correctly rounded power,
/// Adam: g <- g + wd p; AdamW: p <- p (1 - lr wd); m <- m + (1 - b1)(g - m);
/// v <- v b2 + ((1 - b2) g) g; p <- p + ((-(lr / (1 - b1^t))) m) / (sqrt(v) /
/// sqrt(1 - b2^t) + eps), every operation rounded once (Rust does not contract a
/// product and a sum into an fma). The powers come from 1024 bits rounded once (the
/// definition of correct rounding), not from the code under test.
#[allow(clippy::too_many_arguments)]
fn hand_adam_step(
    p: &mut [f64],
    g: &[f64],
    m: &mut [f64],
    v: &mut [f64],
    t: u64,
    lr: f64,
    wd: f64,
    decoupled: bool,
) {
    let (b1, b2, eps) = (0.9, 0.999, 1e-8);
    let bc1 = 1.0 - power_1024(b1, t).to_f64();
    let bc2_sqrt = (1.0 - power_1024(b2, t).to_f64()).sqrt();
    let neg_step = -(lr / bc1);
    let (w1, c2) = (1.0 - b1, 1.0 - b2);
    for k in 0..p.len() {
        let mut gk = g[k];
        if wd != 0.0 {
            if decoupled {
                p[k] *= 1.0 - lr * wd;
            } else {
                gk += p[k] * wd;
            }
        }
        m[k] += w1 * (gk - m[k]);
        v[k] = v[k] * b2 + (c2 * gk) * gk;
        let den = v[k].sqrt() / bc2_sqrt + eps;
        p[k] += (neg_step * m[k]) / den;
    }
}

/// The first two Adam steps in f64 (p-mode, W = I so p's gradient is dL/dq; 20
/// coordinates; the constant schedule) are bit for bit the hand-written documented
/// order ([`hand_adam_step`]) fed the trainer's own gradients: Adam from p(0) = 0
/// without decay, Adam with L2 decay and AdamW with decoupled decay from a Gaussian
/// p(0). For the first, p(2) is also checked against the twin's Adam step (1024 bits,
/// `train::adam::step` in `Mpfr::truth(1024)`) fed the same f64 gradients (exact at 1024
/// bits: this measures Adam's rounding alone, not the gradient's), within the
/// first-order bound derived below (u = 2^-53, times 1.01 for the second-order terms,
/// plus 2^-1000 |p2| for the twin's own roundings):
///
/// - step 1: 1 - b1 and 1 - b2 are exact (Sterbenz), b^1 = b, so bc1 and bc2 are exact;
///   m1 = w1 g1 (u), v1 = (c2 g1) g1 (2u), -lr / bc1 (u), sqrt(v1) (2u), / sqrt(bc2)
///   (4u), + eps (5u: positive terms), the product with m1 and the quotient: 9u, and
///   p1 = 0 + that is exact: |dp1| <= 9u |p1|;
/// - step 2: |dm2| <= u (|m1| (1 + w1) + 2 w1 |g2 - m1| + |m2|) (m1's error through
///   both terms of m1 + w1 (g2 - m1), the difference, the product and the sum rounded
///   once each); v2 = v1 b2 + (c2 g2) g2, positive terms: 4u relative; bc = 1 - b^2 with
///   b^2 correctly rounded: rel(bc) <= u (b^2 / bc + 1) (about 5.3u for bc1, 500u for
///   bc2: the bias correction's cancellation); rel(-lr / bc1) <= rel(bc1) + u;
///   rel(sqrt(bc2)) <= rel(bc2) / 2 + u; rel(den2) <= 3u + rel(sqrt(bc2)) + u + u;
///   |du2| <= |u2| (rel(step) + u + rel(den2) + u) + |step / den2| |dm2|;
///   |dp2| <= |dp1| + |du2| + u |p2|.
///
/// On the code before issue 40 (p + (m / den)(-lr / bc1)) the bits differ.
#[test]
fn the_first_two_adam_steps_follow_the_documented_order() {
    let u = f64::EPSILON / 2.0;
    for (kind, wd, init) in [
        (OptimizerKind::Adam, 0.0, false),
        (OptimizerKind::Adam, 0.01, true),
        (OptimizerKind::Adamw, 0.01, true),
    ] {
        let mut opt = adam(kind, wd, None, None);
        opt.schedule = Schedule::Constant;
        let mut cfg = config(6, 20, Mode::P, 2, opt);
        if init {
            cfg = common::with_init(cfg, Mode::P, 0.5, false);
        }
        cfg.validate().unwrap();
        let data = Dataset::generate(&cfg);
        let lr = cfg.step_size;
        let mut tr = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
        let mut p = tr.p();
        let (mut m, mut v) = (vec![0.0; p.len()], vec![0.0; p.len()]);
        let mut grads = Vec::new();
        let mut ps = vec![p.clone()];
        for t in 1..=2 {
            tr.forward_backward().unwrap();
            let g = tr.grad_q();
            tr.update().unwrap();
            hand_adam_step(
                &mut p,
                &g,
                &mut m,
                &mut v,
                t,
                lr,
                wd,
                kind == OptimizerKind::Adamw,
            );
            let got: Vec<u64> = tr.p().iter().map(|x| x.to_bits()).collect();
            let want: Vec<u64> = p.iter().map(|x| x.to_bits()).collect();
            assert_eq!(
                got, want,
                "{kind:?} wd {wd}: step {t} left the documented order"
            );
            grads.push(g);
            ps.push(p.clone());
        }
        if init {
            continue;
        }
        // the twin's Adam step on the same gradients
        let ar = Mpfr::truth(1024).unwrap();
        let h = tokensel::prelude::train::adam::Hyper::of(&cfg).unwrap();
        let lr_t = ar.of(lr);
        let n = ps[0].len();
        let mut tp = ar.zeros(n);
        let (mut tm, mut tv) = (ar.zeros(n), ar.zeros(n));
        let mut twin = Vec::new();
        for (t, g) in (1..=2).zip(&grads) {
            let s = h.scalars(&ar, &lr_t, t);
            tokensel::prelude::train::adam::step(
                &ar,
                &s,
                &mut tp,
                &ar.of_slice(g),
                &mut tm,
                &mut tv,
            );
            twin.push((tp.clone(), tm.clone(), tv.clone()));
        }
        let (b1, b2, w1) = (0.9f64, 0.999f64, 1.0 - 0.9f64);
        let bc = |b: f64| 1.0 - b * b;
        let rel_bc = |b: f64| u * (b * b / bc(b) + 1.0);
        let rel_step = rel_bc(b1) + u;
        let rel_den = 3.0 * u + (rel_bc(b2) / 2.0 + u) + u + u;
        let den2 = |v2: f64| v2.sqrt() / bc(b2).sqrt() + 1e-8;
        for k in 0..n {
            let f = |x: &Float| x.to_f64();
            let (p1, m1) = (f(&twin[0].0[k]), f(&twin[0].1[k]));
            let (p2, m2, v2) = (f(&twin[1].0[k]), f(&twin[1].1[k]), f(&twin[1].2[k]));
            let g2 = grads[1][k];
            let step = lr / bc(b1);
            let u2 = p2 - p1;
            let dp1 = 9.0 * u * p1.abs();
            let dm2 = u * (m1.abs() * (1.0 + w1) + 2.0 * w1 * (g2 - m1).abs() + m2.abs());
            let du2 = u2.abs() * (rel_step + u + rel_den + u) + step / den2(v2) * dm2;
            let bound = 1.01 * (dp1 + du2 + u * p2.abs()) + 2f64.powi(-1000) * p2.abs();
            let err = Float::with_val(1100, Float::with_val(1100, ps[2][k]) - &twin[1].0[k])
                .abs()
                .to_f64();
            assert!(
                err <= bound,
                "p2[{k}]: f64 {:e} twin {p2:e}: {err:e} > {bound:e}",
                ps[2][k]
            );
            let err1 = Float::with_val(1100, Float::with_val(1100, ps[1][k]) - &twin[0].0[k])
                .abs()
                .to_f64();
            assert!(err1 <= 1.01 * dp1, "p1[{k}]: {err1:e} > {:e}", 1.01 * dp1);
        }
    }
}

/// `batch >= n_train` is the full-batch run everywhere: `certify` and `compare` take
/// `batch = n_train` (exit 0; `certify` once refused it as "a minibatch run"), and its
/// trainer takes the full-batch step (no batch pass, the method `auto` picks for the
/// full batch); `batch = n_train - 1` is still refused there (exit 2), naming both.
#[test]
fn batch_of_n_train_is_the_full_batch_run_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, batch: usize| {
        let path = tmp.path().join(name);
        std::fs::write(
            &path,
            format!(
                "d = 16\nn_train = 5\nn_test = 4\nsteps = 10\nstep_size = 0.05\n[optimizer]\nkind = \"gd\"\nbatch = {batch}\n"
            ),
        )
        .unwrap();
        path
    };
    let (full, mini) = (write("full.toml", 5), write("mini.toml", 4));
    for (cmd, extra) in [("certify", &["--prec", "128"][..]), ("compare", &[][..])] {
        let run = |path: &std::path::Path| {
            let mut args = vec![cmd, "--quiet", "--config", path.to_str().unwrap()];
            args.extend(extra);
            tokensel(&args)
        };
        let o = run(&full);
        assert_eq!(o.status.code(), Some(0), "{cmd}: {}", stderr(&o));
        let o = run(&mini);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("batch = 4 < n_train = 5"),
            "{cmd}: {}",
            stderr(&o)
        );
    }
    let mut cfg = config(5, 16, Mode::P, 10, Optimizer::default());
    let plain = Trainer::new(&cfg, &Dataset::generate(&cfg), F64, cfg.formulation)
        .unwrap()
        .method();
    cfg.optimizer.batch = Some(5);
    let data = Dataset::generate(&cfg);
    let mut tr = Trainer::new(&cfg, &data, F64, cfg.formulation).unwrap();
    assert_eq!(tr.method(), plain);
    tr.forward_backward().unwrap();
    assert!(tr.batch_indices().is_none(), "no batch pass");
}

/// `compare --certify` on an Adam run whose 128-bit balls blow up at step 31 (only the
/// enclosure: the f64 run and the twin stay finite): the comparison and the predictor
/// cover every step, the enclosure's stop is reported as the enclosure's (what blew up,
/// the steps it covers), and the exit code is 1 (an incomplete certificate, undecided as
/// `certify`'s), not 3 (a run stopped). Once it said "STOPPED after comparing step 30 of
/// 40" and exited 3.
#[test]
fn an_enclosure_that_blows_up_ends_the_enclosure_not_the_comparison() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("a7.toml");
    std::fs::write(
        &path,
        "d = 16\nn_train = 6\nn_test = 4\nsteps = 40\nstep_size = 0.05\nmode = \"p\"\n\
         [init]\np = \"gaussian\"\n[optimizer]\nkind = \"adam\"\nbeta1 = 0.3\nweight_decay = 0.05\n",
    )
    .unwrap();
    let args = [
        "compare",
        "--quiet",
        "--certify",
        "--config",
        path.to_str().unwrap(),
    ];
    let o = tokensel(&args);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    assert!(!out.contains("STOPPED"), "{out}");
    assert!(
        out.contains("the 128-bit enclosure stopped: the ball of")
            && out.contains("became non-finite at step 31")
            && out.contains("cover steps 0-30"),
        "{out}"
    );
    assert!(out.contains("bit for bit at steps 0-40\n"), "{out}");
    let mut json = args.to_vec();
    json.push("--json");
    let o = tokensel(&json);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r.get("stopped").is_none(), "{r}");
    assert_eq!(r["predictor"]["steps"], 40);
    assert_eq!(
        r["checkpoints"].as_array().unwrap().last().unwrap()["step"],
        40
    );
    assert_eq!(r["enclosure"]["stopped"]["last_step"], 30);
    assert_eq!(r["enclosure"]["f64"]["loss"]["compared"], 31);
}

/// `compare --certify` on a normalised-GD run whose 128-bit enclosure blows up after
/// step 19 and whose f64 run then stops after step 83 of 200 (the gradient's norm
/// underflows, eps = 0): each sentence says what it covers. Once the enclosure's line
/// said the f64 run and the twin "are compared at every step all the same" and the stop's
/// line "(everything above covers steps 0-83)", against the enclosure table's 0-19; and
/// a width of 6e16 ulps ran into the twin column (`0/64062276671782913.0`).
#[test]
fn an_enclosure_then_a_run_that_stop_each_say_what_they_cover() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ngd5.toml");
    std::fs::write(
        &path,
        "d = 20\nn_train = 4\nn_test = 4\nmu_norm = 5.0\nstep_size = 5\nsteps = 200\nseed = 1\n\
         [optimizer]\nkind = \"normalized-gd\"\neps = 0\n",
    )
    .unwrap();
    let args = [
        "compare",
        "--quiet",
        "--certify",
        "--config",
        path.to_str().unwrap(),
    ];
    let o = tokensel(&args);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(3), "{out}{}", stderr(&o));
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("the distances above cover steps 0-19"),
        "{out}"
    );
    assert!(!flat.contains("at every step"), "{out}");
    assert!(
        flat.contains("the twin are compared up to step 83 of 200 (where the run itself stopped"),
        "{out}"
    );
    assert!(
        flat.contains("STOPPED after comparing step 83 of 200"),
        "{out}"
    );
    assert!(!flat.contains("everything above"), "{out}");
    assert!(
        flat.contains(
            "the f64 and twin errors above cover steps 0-83; the enclosure's distances, steps 0-19"
        ),
        "{out}"
    );
    // the enclosure table: a name and four numbers on each row, none run together
    let table = out
        .split("width (ulps)\n")
        .nth(1)
        .unwrap()
        .split("  ENCLOSURE INCOMPLETE")
        .next()
        .unwrap();
    let rows = table.lines().collect::<Vec<_>>();
    assert_eq!(rows.len(), 7, "{out}");
    for row in rows {
        let cols = row.split_whitespace().collect::<Vec<_>>();
        assert_eq!(cols.len(), 5, "{row}\n{out}");
        assert!(
            cols[3].split('/').all(|n| n.parse::<u64>().is_ok()),
            "{row}"
        );
        assert!(cols[4].parse::<f64>().is_ok(), "{row}");
    }
    let mut json = args.to_vec();
    json.push("--json");
    let o = tokensel(&json);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["stopped"]["last_step"], 83);
    assert_eq!(r["enclosure"]["stopped"]["last_step"], 19);
}
