//! Certified runs (SPEC section 11, proofs-notes/certify.md): the test set's two paths
//! (d-space scores and the span step's cross Gram rows) give enclosures of the same
//! exact outputs; the certificate encloses the MPFR twin at every checkpoint; the step-0
//! tie is proved; `tokensel certify`'s exit codes.

mod common;

use tokensel::prelude::analysis::certify::{Certificate, Interval, Options, Prec, certify};
use tokensel::prelude::models::factorised::QkInit;
use tokensel::prelude::train::plan::test_path;
use tokensel::prelude::{
    Arith, Ball, Config, Dataset, Kind, Method, Mode, Mpfr, OptimizerKind, Selection, TestPath,
    Trainer, Trajectory,
};

/// A small span run in p-mode (W(0) = I, p(0) = 0) or W-mode (p(0) Gaussian, W(0)
/// Kaiming), 30 test samples.
fn small(mode: Mode) -> Config {
    let mut cfg = common::small_config(5, 40, [1, 1, 1, 2], 6, 4.0, 0.3, 0.3, 60, 0, false, false);
    if mode == Mode::W {
        cfg = common::with_init(cfg, Mode::W, 0.5, true);
    }
    cfg.n_test = 30;
    cfg.method = Method::Span;
    cfg.validate().unwrap();
    cfg
}

/// The test outputs of `tr` by each path (the cross Gram rows, then d-space).
fn both_paths<A: Arith>(tr: &mut Trainer<'_, A>) -> (Vec<A::Real>, Vec<A::Real>) {
    tr.test_path = TestPath::CrossGram;
    let cross = tr.test_outputs(None);
    tr.test_path = TestPath::Tokens;
    let tokens = tr.test_outputs(None);
    (cross, tokens)
}

/// In p-mode (W(0) = I) and W-mode, the test outputs through the cross Gram rows
/// (`z_test = C a`) and through the d-space scores (`X_test q`) are both enclosures of
/// the exact outputs: at steps 0, 7 and 60 each 128-bit ball contains the 1024-bit
/// twin's value by either path, and the twin's two paths agree to its own precision
/// (relative 2^-1000: sums of ~2000 terms of size ~1 each rounded at 2^-1024).
#[test]
fn test_set_paths_enclose_the_same_outputs() {
    for mode in [Mode::P, Mode::W] {
        let cfg = small(mode);
        let data = Dataset::generate(&cfg);
        let ball = Ball::new(128).unwrap();
        let mut b = Trainer::new(&cfg, &data, ball, cfg.formulation).unwrap();
        let mut t = Trainer::new(&cfg, &data, Mpfr::truth(1024).unwrap(), cfg.formulation).unwrap();
        for step in 0..=cfg.steps {
            b.forward_backward().unwrap();
            t.forward_backward().unwrap();
            if [0, 7, 60].contains(&step) {
                let (bc, bt) = both_paths(&mut b);
                let (tc, tt) = both_paths(&mut t);
                for k in 0..bc.len() {
                    let what = format!("{mode:?} step {step} test sample {k}");
                    assert!(bc[k].contains(&tc[k]), "{what}: cross Gram ball");
                    assert!(bt[k].contains(&tc[k]), "{what}: d-space ball");
                    let diff = rug::Float::with_val(1024, &tc[k] - &tt[k]).abs();
                    assert!(
                        diff.to_f64() <= 2f64.powi(-1000),
                        "{what}: twin's two paths"
                    );
                }
                assert!(bc.iter().any(|v| !v.rad().is_zero()) || step == 0);
            }
            if step < cfg.steps {
                b.update().unwrap();
                t.update().unwrap();
            }
        }
    }
}

/// Which path each arithmetic takes on the default run: the ball and the MPFR twin the
/// cross Gram (span), the f64 trainer and the predictor the d-space scores (their bits,
/// and the committed digest, unchanged); a run without steps, the direct step, or a
/// dense W(0) in p-mode the d-space scores.
#[test]
fn the_test_path_follows_the_cost_model() {
    let cfg = Config::default();
    assert_eq!(
        test_path(&cfg, Kind::Ball, Method::Span),
        TestPath::CrossGram
    );
    assert_eq!(
        test_path(&cfg, Kind::Mpfr, Method::Span),
        TestPath::CrossGram
    );
    for kind in [Kind::F64, Kind::F32, Kind::Predictor] {
        assert_eq!(test_path(&cfg, kind, Method::Span), TestPath::Tokens);
    }
    assert_eq!(
        test_path(&cfg, Kind::Ball, Method::Direct),
        TestPath::Tokens
    );
    let one = Config {
        steps: 0,
        ..cfg.clone()
    };
    assert_eq!(test_path(&one, Kind::Ball, Method::Span), TestPath::Tokens);
    let dense = common::with_init(cfg.clone(), Mode::P, 0.5, true);
    assert_eq!(
        test_path(&dense, Kind::Ball, Method::Span),
        TestPath::Tokens
    );
    let official = tokensel::prelude::Preset::OfficialFinal.config();
    assert_eq!(
        test_path(&official, Kind::Ball, Method::Span),
        TestPath::Tokens
    );
    let w = common::with_init(cfg, Mode::W, 0.5, true);
    assert_eq!(test_path(&w, Kind::Ball, Method::Span), TestPath::CrossGram);
}

/// Distance of `v` outside `iv`, in ulps of `v`.
fn ulps_outside(v: f64, iv: Interval) -> f64 {
    let ulp = f64::from_bits(v.abs().to_bits() + 1) - v.abs();
    (iv.lo() - v).max(v - iv.hi()).max(0.0) / ulp
}

/// The certificate of `cfg` (128 bits, span) against the 256-bit twin's trajectory: at
/// every checkpoint every value the twin rounds to f64 once (f, 1 - s_top, the gap, S_i
/// and the group masses of each sample; the loss, ||q||, ||dL/dq||) lies in the
/// certificate's interval or within half an ulp of it (the twin's value is within
/// ~2^-240 of the exact one, which the interval contains; rounding it to f64 moves it by
/// at most half an ulp); the values the twin's recorder aggregates in f64 from rounded
/// values (mean attention, cumulative sums) within their rounding, k ulps for k
/// rounded terms; the accuracies and selection shares inside their intervals.
fn encloses_the_twin(cfg: &Config) -> Certificate {
    encloses_the_twin_at(cfg, 256)
}

/// [`encloses_the_twin`] against the twin at `bits` bits.
fn encloses_the_twin_at(cfg: &Config, bits: u32) -> Certificate {
    let data = Dataset::generate(cfg);
    let twin = Trainer::run(cfg, &data, Mpfr::truth(bits).unwrap(), &mut |_| {}).unwrap();
    let cert = certify(cfg, &data, &Options::default(), &mut |_, _| {}).unwrap();
    check_enclosure(cfg, &cert, &twin);
    cert
}

/// The checks of [`encloses_the_twin`] of the certificate `cert` against the twin's
/// trajectory `twin`.
fn check_enclosure(cfg: &Config, cert: &Certificate, twin: &Trajectory) {
    assert_eq!(cert.checkpoints.len(), twin.checkpoints.len());
    let half = |what: &str, v: f64, iv: Interval| {
        let d = ulps_outside(v, iv);
        assert!(d <= 0.5, "{what}: {v:e} is {d} ulps outside {iv:?}");
    };
    let n = cfg.n_train as f64;
    for (c, t) in cert.checkpoints.iter().zip(&twin.checkpoints) {
        let step = c.step;
        assert_eq!(step, t.step);
        half(&format!("step {step} loss"), t.train_loss, c.train_loss);
        half(&format!("step {step} |q|"), t.q_norm, c.q_norm);
        half(&format!("step {step} |grad|"), t.grad_norm, c.grad_norm);
        for (i, (sc, st)) in c.samples.iter().zip(&t.samples).enumerate() {
            let w = |q: &str| format!("step {step} sample {i} {q}");
            half(&w("f"), st.f, sc.f);
            half(&w("rest"), st.rest, sc.rest);
            if st.gap.is_finite() {
                half(&w("gap"), st.gap, sc.gap);
            }
            half(&w("S_i"), st.selection_score, sc.selection_score);
            for (g, (m, iv)) in st
                .mass
                .to_array()
                .iter()
                .zip(sc.mass.to_array())
                .enumerate()
            {
                half(&w(&format!("mass {g}")), *m, iv);
            }
            if sc.selection == Selection::Decided {
                assert_eq!(sc.top, st.top, "{}", w("top"));
            }
        }
        let inside = |what: &str, v: f64, iv: Interval| {
            assert!(
                iv.lo() <= v && v <= iv.hi(),
                "step {step} {what}: {v} not in {iv:?}"
            );
        };
        inside("train accuracy", t.train_accuracy, c.train_accuracy);
        inside("test accuracy", t.test_accuracy, c.test_accuracy);
        for (share, iv) in [
            (t.selection.clean, c.selection.clean),
            (t.selection.noisy, c.selection.noisy),
        ] {
            if let (Some(s), Some(iv)) = (share, iv) {
                for (v, w) in s.to_array().iter().zip(iv.to_array()) {
                    inside("selection share", *v, w);
                }
            }
        }
        // means of n rounded masses summed in f64: within n ulps
        for (m, iv) in [
            (t.attention.clean, c.attention.clean),
            (t.attention.noisy, c.attention.noisy),
        ] {
            if let (Some(m), Some(iv)) = (m, iv) {
                for (v, w) in m.to_array().iter().zip(iv.to_array()) {
                    assert!(
                        ulps_outside(*v, w) <= n,
                        "step {step} mean attention {v} vs {w:?}"
                    );
                }
            }
        }
        // (step + 1) n rounded S_i summed in f64
        let terms = (step + 1) as f64 * n;
        for (v, w) in [
            (t.cumulative.clean, c.cumulative.clean),
            (t.cumulative.noisy, c.cumulative.noisy),
            (t.cumulative.class_pos, c.cumulative.class_pos),
            (t.cumulative.class_neg, c.cumulative.class_neg),
        ] {
            assert!(
                ulps_outside(v, w) <= terms,
                "step {step} cumulative {v} vs {w:?}"
            );
        }
    }
}

/// p-mode (the default setting, 300 steps, 100 test samples: the cross Gram path), and
/// small W-mode and joint runs (60 steps): the certificate encloses the twin at every
/// checkpoint; each decides everything; the default run's step 0 is a proved tie of
/// every sample and its certificate still decides.
#[test]
fn certificates_enclose_the_twin_in_every_mode() {
    let default = Config {
        steps: 300,
        n_test: 100,
        ..Config::default()
    };
    let cert = encloses_the_twin(&default);
    assert!(cert.decided, "{cert}");
    let zero = &cert.checkpoints[0];
    assert_eq!(zero.proof.decisions.ties, default.n_train);
    assert!(zero.samples.iter().all(|s| s.selection == Selection::Tie));
    assert_eq!((cert.ties.first, cert.ties.last), (Some(0), Some(0)));
    assert!(cert.first_undecided.is_none());
    assert!(cert.train_correct.is_exact() && cert.test_correct.is_exact());
    for mode in [Mode::W, Mode::Joint] {
        let mut cfg =
            common::small_config(3, 30, [1, 1, 1, 3], 6, 3.0, 0.3, 0.2, 60, 0, false, true);
        cfg = common::with_init(cfg, mode, 0.5, true);
        cfg.n_test = 20;
        cfg.validate().unwrap();
        let cert = encloses_the_twin(&cfg);
        assert!(cert.decided, "{mode:?}: {cert}");
    }
}

/// A small factorised config (`[factorised]`, m = 3): GD on W_Q, W_K (and b_Q, b_K with
/// `bias`; p too with `train_p`), 40 steps, 12 test samples.
fn factorised(bias: bool, train_p: bool, init: QkInit) -> Config {
    let mode = if train_p { Mode::Joint } else { Mode::W };
    let mut cfg = common::small_config(7, 16, [1, 1, 1, 2], 6, 4.0, 0.3, 0.2, 40, 0, false, true);
    cfg = common::with_init(cfg, mode, 0.5, true);
    cfg.n_test = 12;
    common::with_factorised(cfg, 3, bias, train_p, init)
}

/// `certify` takes the factorised query map (issue 41): on GD with biases (p trained,
/// the linear init) and without (p fixed, the zero-query init), and on normalised GD
/// (eps = 0) and AdamW with biases (which stopped at step 0-1 while b_K's gradient was
/// its computed rounding noise: it is now the structural zero,
/// proofs-notes/factorised.md), every interval of every checkpoint (losses, accuracies,
/// each sample's f, gap, rest, masses and S_i, ||q||, ||dL/dq||, the selection shares,
/// mean attention, cumulative sums) encloses the 1024-bit twin's value as in
/// [`encloses_the_twin`]: the twin's ||q|| and ||dL/dq|| are those of the attention
/// core's query q = W_K^T (W_Q p + b_Q) that the f64 trajectory records, the shift
/// <b_K, u> a common shift of a sample's scores. The certificate (256 bits: the direct
/// step's balls on the product W_K^T W_Q lose 2.2-2.8 bits per step under GD and 5.5
/// under normalised GD here, so 128 bits stop normalised GD at step 23) runs the direct
/// step (no span form: the resolved method and the note say so), has no stop, and
/// decides.
/// The check can fail: ||q||'s interval at the middle checkpoint replaced by the point
/// its upper end plus its width plus a relative 1e-12 (beyond half an ulp of every value
/// in it) is caught.
#[test]
fn certificates_of_the_factorised_map_enclose_the_twin() {
    let mut ngd = factorised(true, true, QkInit::Linear);
    ngd.optimizer.kind = OptimizerKind::NormalizedGd;
    ngd.step_size = 0.05;
    let mut adamw = factorised(true, false, QkInit::Linear);
    adamw.optimizer.kind = OptimizerKind::Adamw;
    adamw.optimizer.eps = 1e-8;
    adamw.optimizer.beta1 = Some(0.9);
    adamw.optimizer.beta2 = Some(0.999);
    adamw.optimizer.weight_decay = Some(0.01);
    adamw.step_size = 0.02;
    for cfg in [
        factorised(true, true, QkInit::Linear),
        factorised(false, false, QkInit::ZeroQuery),
        ngd,
        adamw,
    ] {
        cfg.validate().unwrap();
        let data = Dataset::generate(&cfg);
        let twin = Trainer::run(&cfg, &data, Mpfr::truth(1024).unwrap(), &mut |_| {}).unwrap();
        let opts = Options {
            prec: Prec::Bits(256),
            ..Options::default()
        };
        let cert = certify(&cfg, &data, &opts, &mut |_, _| {}).unwrap();
        let what = format!("{:?} {:?}", cfg.optimizer.kind, cfg.factorised);
        // the direct step's balls on the product W_K^T W_Q lose bits fast (measured at
        // 128 bits: 2.2-2.8 bits per step under GD, 5.5 under normalised GD)
        assert!(cert.bits_lost < 250.0, "{what}: {cert}");
        assert!(cert.stopped().is_none(), "{what}: {cert}");
        assert_eq!(cert.trainer.method, Method::Direct, "{what}");
        assert!(cert.decided, "{what}: {cert}");
        let note = cert
            .notes
            .iter()
            .find(|n| n.contains("the factorised query map ([factorised])"))
            .unwrap_or_else(|| panic!("{what}: {:?}", cert.notes));
        // the note names q as this config forms it, and b_K only where there is one
        let bias = cfg.factorised.is_some_and(|f| f.bias);
        assert_eq!(note.contains("W_K^T (W_Q p + b_Q)"), bias, "{what}: {note}");
        assert_eq!(
            note.contains("b_K keeps its exact update"),
            bias,
            "{what}: {note}"
        );
        assert_eq!(
            note.contains("W_K^T W_Q p (no biases)"),
            !bias,
            "{what}: {note}"
        );
        check_enclosure(&cfg, &cert, &twin);
        // the same check on a certificate with one interval moved off the twin fails
        let mut bad = cert.clone();
        let k = bad.checkpoints.len() / 2;
        let iv = bad.checkpoints[k].q_norm;
        let shift = (iv.hi() - iv.lo()) + 1e-12 * iv.hi().abs();
        bad.checkpoints[k].q_norm = Interval::point(iv.hi() + shift);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check_enclosure(&cfg, &bad, &twin)
        }));
        assert!(caught.is_err(), "{what}: a moved interval was not caught");
    }
}

/// `compare` with the ball trainer in lockstep (p-mode span run, 60 steps) and the
/// predictor over a prefix of 10 steps: the predictor checks steps 0-10 and matches;
/// the 256-bit twin's values, rounded to f64, lie inside the 128-bit enclosures (the
/// twin is within ~2^-240 of the exact value, which the enclosure contains, and rounding
/// to nearest cannot leave an interval with f64 ends); and for the componentwise
/// quantities (attention, 1 - s_top, the loss) the f64 value's distance outside its
/// enclosure, in ulps of the value, is at most its relative error against the twin in
/// units of 2^-53 (distance <= |a - exact| ~ |a - b| = rel |b|, and ulp(a) > 2^-53 |a|).
#[test]
fn compare_measures_against_the_enclosure() {
    use tokensel::prelude::Quantity;
    use tokensel::prelude::analysis::compare;
    use tokensel::prelude::analysis::compare::COMPARED;
    let cfg = small(Mode::P);
    let data = Dataset::generate(&cfg);
    let opts = compare::Options {
        prec: 256,
        tol: 1e-8,
        predictor: true,
        predictor_steps: Some(10),
        twin_method: Method::Span,
        certify: Some(128),
    };
    let r = compare::compare(&cfg, &data, opts, &mut |_| {}).unwrap();
    let p = r.predictor.as_ref().unwrap();
    assert_eq!(p.steps, 10);
    assert!(p.bits_equal, "{:?}", p.first_mismatch);
    let e = r.enclosure.as_ref().unwrap();
    assert_eq!(e.prec_bits, 128);
    for q in COMPARED {
        let (a, t) = (&e.f64[&q], &e.twin[&q]);
        assert!(a.compared > 0 && a.compared == t.compared, "{q}");
        assert_eq!(t.outside, 0, "{q}: the twin outside the enclosure: {t:?}");
        assert!(a.max_width_ulps.is_finite(), "{q}");
        if matches!(q, Quantity::Attention | Quantity::Rest | Quantity::Loss) {
            let bound = r.error_ulps[&q].max * (1.0 + 1e-9);
            assert!(
                a.max_ulps_outside <= bound,
                "{q}: {} ulps outside, relative error {bound} units",
                a.max_ulps_outside
            );
        }
    }
    // the d-space quantities at the 60-step schedule's checkpoints only
    let checkpoints = r.checkpoints.len() as u64;
    assert_eq!(e.f64[&Quantity::Q].compared, checkpoints * cfg.d as u64);
    assert!(r.to_string().contains("enclosure"), "{r}");
}

/// `tokensel certify` on the command line: exit 0 with the certificate set written by
/// `--out` (its JSON the same certificate `--json` prints); exit 1 when the final
/// checkpoint is undecided (the direct step at 53 bits on this data: a top token first
/// undecided at step 51, the radii non-finite at step 54); `--prec auto` going on past
/// a precision whose radii became non-finite (128 bits stop at step 206, 256 bits
/// decide); exit 2 for bad input.
#[test]
fn the_certify_command() {
    use common::{stderr, tokensel};
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    std::fs::write(
        p("small.toml"),
        "d = 60\nn_train = 8\nn_test = 40\nmu_norm = 5.0\n",
    )
    .unwrap();
    let args = [
        "certify",
        "--quiet",
        "--config",
        &p("small.toml"),
        "--steps",
        "50",
    ];
    let o = tokensel(&[&args[..], &["--out", &p("cert")]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("verdict: DECIDED") && text.contains("proved ties"),
        "{text}"
    );
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(p("cert/certificate.json")).unwrap())
            .unwrap();
    let summary = std::fs::read_to_string(p("cert/certificate.txt")).unwrap();
    assert!(summary.contains("verdict: DECIDED"));
    // `plot` draws a certificate's radius growth
    let o = tokensel(&["plot", &p("cert/certificate.json"), "--out", &p("bits.svg")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let svg = std::fs::read_to_string(p("bits.svg")).unwrap();
    assert!(
        svg.contains("bits lost") && svg.matches("<polyline").count() >= 5,
        "{svg}"
    );
    let o = tokensel(&[&args[..], &["--json"]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let printed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(printed, saved);
    assert_eq!(saved["format"], "tokensel-certificate/2");
    assert_eq!(saved["decided"], true);
    assert_eq!(saved["checkpoints"][0]["decisions"]["ties"], 8);

    std::fs::write(
        p("wild.toml"),
        "d = 600\nn_train = 8\nn_test = 10\nstep_size = 3e-3\n",
    )
    .unwrap();
    let wild = ["certify", "--quiet", "--json", "--config", &p("wild.toml")];
    let run = |extra: &[&str]| {
        let o = tokensel(&[&wild[..], extra].concat());
        let v: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", stderr(&o)));
        (o.status.code(), v)
    };
    let (code, v) = run(&["--steps", "53", "--prec", "53", "--method", "direct"]);
    assert_eq!(code, Some(1));
    assert_eq!(v["decided"], false);
    // step 52 since X^T c is one exact dot product per entry in the ball (51 when it was
    // an fma chain rounded once per row)
    assert_eq!(v["first_undecided"]["step"], 52);
    let acc = v["train_accuracy"].as_array().unwrap();
    assert!(acc[0].as_f64() < acc[1].as_f64(), "an interval: {acc:?}");
    let (code, v) = run(&["--steps", "240", "--prec", "auto", "--method", "direct"]);
    assert_eq!(code, Some(0));
    let attempts = v["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert!(
        attempts[0]["stopped"]
            .as_str()
            .unwrap()
            .contains("non-finite")
    );
    assert_eq!(attempts[1]["prec_bits"], 256);
    assert_eq!(v["trainer"]["prec_bits"], 256);

    for bad in [
        vec!["certify", "--prec", "16"],
        vec!["certify", "--prec", "x"],
        vec!["certify", "--method", "x"],
        vec!["certify", "--steps", "-1"],
    ] {
        let o = tokensel(&bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
    }
}

/// An enclosure that blows up mid-run (step size 1 at 53 bits: a ball of an output
/// becomes infinite at step 19) exits 3 and still writes the certificate of the
/// checkpoints before it, undecided, its verdict STOPPED saying where (it wrote nothing
/// and said "non-finite output", as if the run itself had failed); `plot` draws it.
#[test]
fn a_blown_up_enclosure_keeps_its_certified_checkpoints() {
    use common::{stderr, tokensel};
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    std::fs::write(
        p("c.toml"),
        "d = 20\nn_train = 4\nn_test = 4\nsteps = 100\nstep_size = 1.0\n",
    )
    .unwrap();
    let o = tokensel(&[
        "certify",
        "--quiet",
        "--config",
        &p("c.toml"),
        "--prec",
        "53",
        "--out",
        &p("cert"),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("verdict: STOPPED: the enclosure blew up at step 19"),
        "{text}"
    );
    assert!(text.contains("certificate written to"), "{text}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(p("cert/certificate.json")).unwrap())
            .unwrap();
    assert_eq!(v["decided"], false);
    let stopped = v["attempts"][0]["stopped"].as_str().unwrap();
    assert!(stopped.contains("blew up at step 19"), "{stopped}");
    let last = v["checkpoints"].as_array().unwrap().last().unwrap()["step"]
        .as_u64()
        .unwrap();
    assert!(last < 19, "checkpoints after the blow-up: {last}");
    assert!(stopped.contains(&format!("checkpoints to step {last} are certified")));
    let o = tokensel(&["plot", &p("cert/certificate.json"), "--out", &p("bits.svg")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Counts are exact fractions with outward-rounded intervals: the default run's training
/// accuracy at step 1,000 is 16 of 20, and the interval of its share contains the exact
/// 4/5 (f64's 0.8 is 0.8000000000000000444, above it: a point at 0.8 would exclude it),
/// checked in rationals; every count of the certificate is consistent (lo <= hi <= of).
#[test]
fn counts_are_exact_fractions_in_outward_intervals() {
    let cfg = Config {
        steps: 1000,
        n_test: 50,
        ..Config::default()
    };
    let data = Dataset::generate(&cfg);
    let cert = certify(&cfg, &data, &Options::default(), &mut |_, _| {}).unwrap();
    let k = cert.last();
    assert_eq!(k.step, 1000);
    assert_eq!(
        (
            k.proof.train_correct.lo,
            k.proof.train_correct.hi,
            k.proof.train_correct.of,
        ),
        (16, 16, 20)
    );
    let contains = |iv: Interval, num: usize, den: usize| {
        let q = rug::Rational::from((num, den));
        rug::Rational::from_f64(iv.lo()).unwrap() <= q
            && q <= rug::Rational::from_f64(iv.hi()).unwrap()
    };
    assert!(contains(k.train_accuracy, 16, 20), "{:?}", k.train_accuracy);
    assert!(
        !k.train_accuracy.is_point(),
        "0.8 is not an f64: the interval has width"
    );
    let c = &k.proof.test_correct;
    assert!(contains(k.test_accuracy, c.lo, c.of) && contains(k.test_accuracy, c.hi, c.of));
    for (shares, counts) in [
        (&k.selection.clean, &k.proof.selection_counts.clean),
        (&k.selection.noisy, &k.proof.selection_counts.noisy),
    ] {
        let (shares, counts) = (shares.unwrap(), counts.unwrap());
        for (iv, c) in shares.to_array().into_iter().zip(counts.to_array()) {
            assert!(c.lo <= c.hi && c.hi <= c.of);
            assert!(
                contains(iv, c.lo, c.of) && contains(iv, c.hi, c.of),
                "{iv:?} {c:?}"
            );
        }
    }
}

/// Past MPFR's exponent range (step size 1e9 on a small run: score gaps ~4.6e9, so the
/// attention of every other token is exp(-4.6e9), below MPFR's smallest number): the
/// certificate writes the infinite relative radii as "inf" (no null), says every bit is
/// lost (bits lost = the precision, not infinity), encloses 1 - s_top and the masses
/// inside [0, 1] (the underflowed ball [0 +- 2^(emin - 1)] rounds outward to [-5e-324,
/// 5e-324]), and `plot` draws it; a reversed interval, another format version or no
/// checkpoint is refused by the reader with exit 2.
#[test]
fn extremes_are_reported_honestly_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    std::fs::write(
        p("huge.toml"),
        "step_size = 1e9\nsteps = 20\nd = 50\nn_test = 20\n",
    )
    .unwrap();
    let o = common::tokensel(&[
        "certify",
        "--quiet",
        "--config",
        &p("huge.toml"),
        "--out",
        &p("c"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let text = std::fs::read_to_string(p("c/certificate.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["largest_rel_radius"], "inf");
    assert_eq!(v["bits_lost"], 128.0);
    let summary = std::fs::read_to_string(p("c/certificate.txt")).unwrap();
    assert!(
        summary.contains("128 of 128 bits lost (every bit"),
        "{summary}"
    );
    assert!(!summary.contains("inf of"), "{summary}");
    let cert = Certificate::from_json(&text, std::path::Path::new("c")).unwrap();
    let k = cert.last();
    assert_eq!(k.proof.radius.largest, f64::INFINITY);
    for s in &k.samples {
        for iv in [s.rest, s.mass.r, s.mass.w_same, s.mass.w_opposite, s.mass.i] {
            assert!(iv.lo() >= 0.0 && iv.hi() <= 1.0, "{iv:?}");
        }
        assert!(s.selection_score.lo() >= 0.0);
    }
    assert!(
        k.samples
            .iter()
            .any(|s| s.rest.lo() == 0.0 && s.rest.hi() > 0.0)
    );
    let o = common::tokensel(&["plot", &p("c/certificate.json"), "--out", &p("bits.svg")]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    // readers refuse what is not a certificate of this format
    type Edit = (&'static str, fn(&mut serde_json::Value));
    let edits: [Edit; 4] = [
        ("format `tokensel-certificate/9`", |v| {
            v["format"] = "tokensel-certificate/9".into()
        }),
        ("not an interval", |v| {
            v["checkpoints"][0]["train_loss"] = serde_json::json!([1.0, 0.5])
        }),
        ("no checkpoint", |v| {
            v["checkpoints"] = serde_json::json!([])
        }),
        ("a count needs", |v| v["train_correct"]["hi"] = 21.into()),
    ];
    for (want, edit) in edits {
        let mut bad = v.clone();
        edit(&mut bad);
        std::fs::write(p("bad.json"), bad.to_string()).unwrap();
        let o = common::tokensel(&["plot", &p("bad.json"), "--out", &p("bad.svg")]);
        assert_eq!(o.status.code(), Some(2), "{want}");
        assert!(
            common::stderr(&o).contains(want),
            "{want}: {}",
            common::stderr(&o)
        );
    }
}

/// The default run certifies at 64 bits (issue 27): l'(u) enclosed as the increasing
/// logistic function over its whole input ball, the softmax shifted by an exact number
/// and the Gram products rounded once keep the radii small enough that the first 16,000
/// steps of the balanced run (its training data; 10 test samples to keep the test cheap)
/// are DECIDED at `--prec 64`. The enclosure of 335dfb4 (l' as a formula, the shift by
/// the top score's ball, Gram products in MPFR) blew up at step 15,231 (exit 3).
#[test]
fn the_default_run_certifies_at_64_bits() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("c.toml");
    std::fs::write(&cfg, "n_test = 10\nsteps = 16000\n").unwrap();
    let o = common::tokensel(&[
        "certify",
        "--config",
        cfg.to_str().unwrap(),
        "--prec",
        "64",
        "--json",
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["decided"], true, "{v}");
    assert_eq!(v["train_correct"]["lo"], 20, "{}", v["train_correct"]);
    let lost = v["bits_lost"].as_f64().unwrap();
    assert!(lost < 64.0, "{lost} bits lost");
}

/// examples/arb_peer.py checks its arguments before any work, argparse style (exit 2,
/// naming the flag, no traceback), where the CI's venv has python-flint
/// (TOKENSEL_PYTHON): `--prec 53` (tokensel's 53-bit row is the f64 predictor, not an
/// MPFR twin: its JSON held NaN after the whole run) and precisions past MPFR's limit, a
/// missing `--tokensel` binary (a Python traceback) or one that is not tokensel.
#[test]
fn arb_peer_checks_its_arguments_before_any_work() {
    use std::time::{Duration, Instant};
    let Ok(python) = std::env::var("TOKENSEL_PYTHON") else {
        eprintln!("TOKENSEL_PYTHON not set: examples/arb_peer.py not run");
        return;
    };
    let has_flint = std::process::Command::new(&python)
        .args(["-c", "import flint"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_flint {
        eprintln!("no python-flint in TOKENSEL_PYTHON's venv: examples/arb_peer.py not run");
        return;
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/arb_peer.py");
    let binary = env!("CARGO_BIN_EXE_tokensel");
    let cases: [(&[&str], &str); 6] = [
        (&["--prec", "53", "--tokensel", binary], "--prec 53"),
        (&["--prec", "63", "--tokensel", binary], "64..=1048576"),
        (
            &["--prec", "1048577", "--tokensel", binary],
            "--prec 1048577",
        ),
        (
            &["--tokensel", "/nonexistent/tokensel"],
            "--tokensel /nonexistent/tokensel",
        ),
        (&["--tokensel", "true"], "does not answer as tokensel"),
        (&["--steps", "19", "--tokensel", binary], "--steps 19"),
    ];
    for (args, says) in cases {
        let mut child = std::process::Command::new(&python)
            .arg(&script)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // refused before the work: at once (the work takes minutes)
        let t0 = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if t0.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{args:?}: not refused before the work");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("usage:"), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("Traceback"), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: printed a result");
    }
}

/// `plot` (every certificate reader) refuses a certificate that describes an impossible
/// run (exit 2, naming the field): a NaN or negative radius, a largest radius that is not
/// the largest of its parts or the run's, bits lost that do not match it, a step past the run's
/// steps in any field that names one, a precision no ball has, a trainer other than the
/// ball. Each was drawn before. Its `--out` directories are created as every other
/// command's outputs' are (`run --out`, state files: `io::files::check_output_file`).
#[test]
fn plot_refuses_certificates_of_impossible_runs() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let v = small_certificate(dir.path(), 4);
    let last = v["checkpoints"].as_array().unwrap().len() - 1;
    assert_eq!(v["checkpoints"][last]["step"], 20);
    let o = common::tokensel(&[
        "plot",
        &p("c/certificate.json"),
        "--out",
        &p("new/dirs/bits.svg"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert!(dir.path().join("new/dirs/bits.svg").is_file());
    let edits: Vec<Edit> = vec![
        (
            "`checkpoints[1].radius.largest` is NaN",
            Box::new(|v| v["checkpoints"][1]["radius"]["largest"] = "nan".into()),
        ),
        (
            "`checkpoints[1].radius.scores` is -1",
            Box::new(|v| v["checkpoints"][1]["radius"]["scores"] = (-1.0).into()),
        ),
        (
            "`checkpoints[1].radius.q` is NaN",
            Box::new(|v| v["checkpoints"][1]["radius"]["q"] = "nan".into()),
        ),
        (
            "`checkpoints[1].radius.largest` is 5e-1 but the largest of the radii beside it",
            Box::new(|v| v["checkpoints"][1]["radius"]["largest"] = 0.5.into()),
        ),
        (
            "`checkpoints[1].radius.bits_lost` is 3 but `largest`",
            Box::new(|v| v["checkpoints"][1]["radius"]["bits_lost"] = 3.0.into()),
        ),
        (
            "exceeds `largest_rel_radius` 1e-300",
            Box::new(|v| v["largest_rel_radius"] = 1e-300.into()),
        ),
        (
            "`largest_rel_radius` is -0.5",
            Box::new(|v| v["largest_rel_radius"] = (-0.5).into()),
        ),
        (
            "`trainer.prec_bits` 1000000000",
            Box::new(|v| v["trainer"]["prec_bits"] = 1_000_000_000.into()),
        ),
        (
            "`attempts[0].prec_bits` 1000000000",
            Box::new(|v| v["attempts"][0]["prec_bits"] = 1_000_000_000.into()),
        ),
        (
            "`trainer.kind` is `mpfr`",
            Box::new(|v| v["trainer"]["kind"] = "mpfr".into()),
        ),
        (
            "`largest_at_step` 25 is past the run's 20 steps",
            Box::new(|v| v["largest_at_step"] = 25.into()),
        ),
        (
            "`ties.last` 25 is past the run's 20 steps",
            Box::new(|v| v["ties"]["last"] = 25.into()),
        ),
        (
            "`first_undecided.step` 25 is past the run's 20 steps",
            Box::new(|v| {
                v["first_undecided"] =
                    serde_json::json!({"step": 25, "what": "sign of f of test sample 0"})
            }),
        ),
        (
            "is past the run's 20 steps",
            Box::new(move |v| v["checkpoints"][last]["step"] = 21.into()),
        ),
    ];
    refused_by_plot(dir.path(), &v, edits);
}

/// A certificate edit: the words its refusal holds, and the edit.
type Edit = (&'static str, Box<dyn Fn(&mut serde_json::Value)>);

/// The certificate JSON of `certify` on a small span run (d = 20, n_train = 4, `n_test`
/// test samples, 20 steps) in `dir/c`.
fn small_certificate(dir: &std::path::Path, n_test: usize) -> serde_json::Value {
    let config = dir.join("small.toml");
    std::fs::write(
        &config,
        format!(
            "d = 20\nn_train = 4\nn_test = {n_test}\nmu_norm = 5.0\nsteps = 20\nmethod = \"span\"\n"
        ),
    )
    .unwrap();
    let out = dir.join("c");
    let o = common::tokensel(&[
        "certify",
        "--quiet",
        "--config",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let text = std::fs::read_to_string(out.join("certificate.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `plot` refuses certificate `v` edited by each of `edits` (exit 2, its words and the
/// file's name on stderr, nothing drawn).
fn refused_by_plot(dir: &std::path::Path, v: &serde_json::Value, edits: Vec<Edit>) {
    let (bad, svg) = (dir.join("bad.json"), dir.join("bad.svg"));
    for (want, edit) in edits {
        let mut edited = v.clone();
        edit(&mut edited);
        std::fs::write(&bad, edited.to_string()).unwrap();
        let o = common::tokensel(&[
            "plot",
            bad.to_str().unwrap(),
            "--out",
            svg.to_str().unwrap(),
        ]);
        let err = common::stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{want}: {err}");
        assert!(err.contains(want), "{want}: {err}");
        assert!(err.contains("bad.json"), "{want}: {err}");
        assert!(!svg.exists(), "{want}: drawn");
    }
}

/// `plot` (every certificate reader) refuses a certificate whose summary or proof
/// contradicts what its writer guarantees (exit 2, naming the field and its value; each
/// was drawn, exit 0, before): the summary's accuracies, counts and selection shares
/// are the last checkpoint's; `decided` is the last checkpoint's decisions (and the last
/// attempt's); the bits lost follow the largest radius; a checkpoint's counts are of
/// n_train / n_test samples and its decision counts are its samples'; checkpoint 0 is
/// recorded; a loss enclosure lies in [0, inf) (the writer intersects it with that
/// range). The certificate as written is drawn.
#[test]
fn plot_refuses_certificates_whose_summary_contradicts_their_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let v = small_certificate(dir.path(), 6);
    let last = v["checkpoints"].as_array().unwrap().len() - 1;
    assert_eq!(v["decided"], true, "the run this test edits is decided");
    assert_eq!(v["train_correct"], v["checkpoints"][last]["train_correct"]);
    std::fs::write(p("as-written.json"), v.to_string()).unwrap();
    let o = common::tokensel(&["plot", &p("as-written.json"), "--out", &p("as-written.svg")]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    // a count other than the written one (the run's counts are 4 of 4 or fewer)
    let other = serde_json::json!({"lo": 0, "hi": 1, "of": 4});
    assert_ne!(v["train_correct"], other);
    let edits: Vec<Edit> = vec![
        (
            "`train_accuracy` [0.125, 0.25] is not the last checkpoint's",
            Box::new(|v| v["train_accuracy"] = serde_json::json!([0.125, 0.25])),
        ),
        (
            "`test_accuracy` [0, 1] is not the last checkpoint's",
            Box::new(|v| v["test_accuracy"] = serde_json::json!([0.0, 1.0])),
        ),
        (
            "`train_correct` [0, 1]/4 is not the last checkpoint's",
            Box::new(move |v| v["train_correct"] = other.clone()),
        ),
        (
            "`selection.clean.R` [0.015625, 0.03125] is not the last checkpoint's",
            Box::new(|v| v["selection"]["clean"]["R"] = serde_json::json!([0.015625, 0.03125])),
        ),
        (
            "`selection_counts.clean.tie` [0, 1]/4 is not the last checkpoint's",
            Box::new(|v| {
                v["selection_counts"]["clean"]["tie"] =
                    serde_json::json!({"lo": 0, "hi": 1, "of": 4})
            }),
        ),
        (
            "`decided` is false",
            Box::new(|v| v["decided"] = false.into()),
        ),
        (
            "`attempts[0].decided` is false",
            Box::new(|v| v["attempts"][0]["decided"] = false.into()),
        ),
        (
            "`attempts[0].prec_bits` 256 is not the certificate's",
            Box::new(|v| v["attempts"][0]["prec_bits"] = 256.into()),
        ),
        (
            "`bits_lost` is 100 but `largest_rel_radius`",
            Box::new(|v| v["bits_lost"] = 100.0.into()),
        ),
        (
            "checkpoint 1: `train_correct.of` is 5; the config's n_train is 4",
            Box::new(|v| {
                v["checkpoints"][1]["train_correct"] =
                    serde_json::json!({"lo": 0, "hi": 5, "of": 5})
            }),
        ),
        (
            "checkpoint 1: `test_correct.of` is 4; the config's n_test is 6",
            Box::new(|v| {
                v["checkpoints"][1]["test_correct"] = serde_json::json!({"lo": 0, "hi": 4, "of": 4})
            }),
        ),
        (
            "checkpoint 1: `decisions.ties` is 99",
            Box::new(|v| v["checkpoints"][1]["decisions"]["ties"] = 99.into()),
        ),
        (
            "checkpoint 1: `decisions.train_signs_undecided` is 1",
            Box::new(|v| v["checkpoints"][1]["decisions"]["train_signs_undecided"] = 1.into()),
        ),
        (
            "checkpoint 1: train_loss [-2, -1] is out of range",
            Box::new(|v| v["checkpoints"][1]["train_loss"] = serde_json::json!([-2.0, -1.0])),
        ),
        (
            "the first checkpoint is step 1",
            Box::new(|v| {
                v["checkpoints"].as_array_mut().unwrap().remove(0);
            }),
        ),
    ];
    refused_by_plot(dir.path(), &v, edits);
}
