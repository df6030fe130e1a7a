//! Certified runs (SPEC section 11, proofs-notes/certify.md): the test set's two paths
//! (d-space scores and the span step's cross Gram rows) give enclosures of the same
//! exact outputs; the certificate encloses the MPFR twin at every checkpoint; the step-0
//! tie is proved; `tokensel certify`'s exit codes.

mod common;

use tokensel::analysis::certify::{Certificate, Interval, Options, certify};
use tokensel::arith::{Arith, Ball, Kind, Mpfr};
use tokensel::config::{Config, Method, Mode};
use tokensel::data::Dataset;
use tokensel::model::Selection;
use tokensel::train::plan::test_path;
use tokensel::train::{TestPath, Trainer};

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
    let official = tokensel::config::Preset::OfficialFinal.config();
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
    let data = Dataset::generate(cfg);
    let twin = Trainer::run(cfg, &data, Mpfr::truth(256).unwrap(), &mut |_| {}).unwrap();
    let cert = certify(cfg, &data, &Options::default(), &mut |_, _| {}).unwrap();
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
    cert
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
    assert_eq!(zero.decisions.ties, default.n_train);
    assert!(zero.samples.iter().all(|s| s.selection == Selection::Tie));
    assert_eq!((cert.ties.first, cert.ties.last), (Some(0), Some(0)));
    assert!(cert.first_undecided.is_none());
    assert!(cert.train_accuracy.is_point() && cert.test_accuracy.is_point());
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
    use tokensel::analysis::compare::{self, COMPARED};
    use tokensel::quantity::Quantity;
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
/// checkpoint is undecided (the direct step at 53 bits, whose radii pass 2^53 relative
/// at step 31 on this data); `--prec auto` going on past a precision whose radii became
/// non-finite (128 bits stop at step 106, 256 bits decide); exit 2 for bad input.
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
    assert_eq!(saved["format"], "tokensel-certificate/1");
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
    let (code, v) = run(&["--steps", "32", "--prec", "53", "--method", "direct"]);
    assert_eq!(code, Some(1));
    assert_eq!(v["decided"], false);
    assert_eq!(v["first_undecided"]["step"], 31);
    let acc = v["train_accuracy"].as_array().unwrap();
    assert!(acc[0].as_f64() < acc[1].as_f64(), "an interval: {acc:?}");
    let (code, v) = run(&["--steps", "108", "--prec", "auto", "--method", "direct"]);
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
