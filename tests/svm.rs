//! `tokensel svm`: the attention SVM of a selection pattern (SPEC section 15), solved in
//! f64 and proved optimal by exact KKT checks (proofs-notes/max-margin.md).

use rug::{Integer, Rational};
use tokensel::prelude::models::svm;
use tokensel::prelude::models::svm::{
    Constraints, Failure, Gram, PatternChoice, Verdict, certificate_for, check, check_farkas,
    farkas_on, farkas_search, q_f64,
};
use tokensel::prelude::{Config, Dataset, Params};

mod common;
use common::{stderr, tokensel};

/// The hand instance (d = 2, W = I, two samples of three tokens, alpha = (0, 0)):
///
/// ```text
/// sample 0: x_00 = (2, 0) selected, x_01 = (0, 0), x_02 = (1, 1)
/// sample 1: x_10 = (0, 1) selected, x_11 = (0, 0), x_12 = (0, -1)
/// ```
///
/// Constraints p^T (x_{i,alpha_i} - x_it) >= 1, in the order (0,1), (0,2), (1,1), (1,2):
/// v = (2, 0), (1, -1), (0, 1), (0, 2), i.e. 2 p1 >= 1, p1 - p2 >= 1, p2 >= 1, 2 p2 >= 1.
/// The last two give p2 >= 1, then the second p1 >= 1 + p2 >= 2, so ||p||^2 >= 4 + 1
/// with equality only at p = (2, 1), which is feasible (margins 4, 1, 1, 2):
/// p_mm = (2, 1), ||p_mm||^2 = 5. KKT: p = l_(0,2) (1, -1) + l_(1,1) (0, 1) = (2, 1)
/// gives l_(0,2) = 2, l_(1,1) = 3 (>= 0), the other two multipliers 0 (margins 4 and 2
/// above 1), and ||p||^2 = sum_c l_c = 5.
fn hand() -> (Vec<f64>, Vec<usize>) {
    let x = vec![
        2.0, 0.0, 0.0, 0.0, 1.0, 1.0, //
        0.0, 1.0, 0.0, 0.0, 0.0, -1.0,
    ];
    (x, vec![0, 0])
}

/// The hand instance's p_mm is reproduced EXACTLY: ||p_mm||^2 = 5, multipliers 2 and 3 on
/// constraints (0, 2) and (1, 1), zero elsewhere, p = W X^T a = (2, 1) from the span
/// coefficients, 2 tight constraints.
#[test]
fn hand_instance_is_reproduced_exactly() {
    let (x, pattern) = hand();
    let s = svm::solve(&x, 3, 2, None, pattern).unwrap();
    let Verdict::ProvedOptimal {
        proved,
        certificate,
    } = &s.verdict
    else {
        panic!("not proved: {:?}", s.verdict);
    };
    assert_eq!(proved.norm2, Rational::from(5));
    assert_eq!(proved.tight, 2);
    assert_eq!(proved.support, 2);
    let l = |c: usize| Rational::from((certificate.lambda[c].clone(), certificate.den.clone()));
    assert_eq!([l(0), l(1), l(2), l(3)], [0, 2, 3, 0].map(Rational::from));
    // p = sum_j a_j x_j exactly (W = I)
    let mut p = [Rational::new(), Rational::new()];
    for (j, aj) in certificate.a.iter().enumerate() {
        for k in 0..2 {
            let xk = Rational::from_f64(x[j * 2 + k]).unwrap();
            p[k] += Rational::from((aj.clone(), certificate.den.clone())) * xk;
        }
    }
    assert_eq!(p, [Rational::from(2), Rational::from(1)]);
}

/// The checker can fail: a perturbed multiplier (its a left as it was: stationarity;
/// a recomputed from it: complementary slackness or feasibility) and a support with one
/// active constraint dropped (re-solved exactly: the dropped constraint is violated)
/// are rejected, each with the check and constraint named, on the hand instance.
#[test]
fn checker_rejects_perturbed_certificates_on_the_hand_instance() {
    let (x, pattern) = hand();
    let g = Gram::of_tokens(&x, 2, None);
    let cons = Constraints::new(3, pattern);
    let good = certificate_for(&g, &cons, &[1, 2]).unwrap();
    assert!(check(&g, &cons, &good).is_ok());
    let mut bad = good.clone();
    bad.lambda[1] += 1;
    assert_eq!(
        check(&g, &cons, &bad),
        Err(Failure::Stationarity {
            sample: 0,
            token: 0
        })
    );
    bad.a = cons.transpose_apply(&bad.lambda);
    assert!(matches!(
        check(&g, &cons, &bad),
        Err(Failure::ComplementarySlackness { .. } | Failure::PrimalFeasibility { .. })
    ));
    let mut neg = good.clone();
    neg.lambda[0] -= 1;
    neg.a = cons.transpose_apply(&neg.lambda);
    assert_eq!(
        check(&g, &cons, &neg),
        Err(Failure::DualFeasibility {
            sample: 0,
            token: 1
        })
    );
    // drop the active constraint (0, 2): the optimum of the rest is p = (0, 1), margin 0
    let dropped = certificate_for(&g, &cons, &[2]).unwrap();
    assert_eq!(
        check(&g, &cons, &dropped),
        Err(Failure::PrimalFeasibility {
            sample: 0,
            token: 1
        })
    );
}

/// An infeasible pattern is reported with an exact Farkas certificate: two identical
/// tokens with one selected (v = 0: the constraint 0 >= 1) and two samples whose
/// constraints are opposite (v and -v).
#[test]
fn infeasible_patterns_are_certified() {
    // sample 0: (1, 0) selected, (0, 0); sample 1: (1, 1) selected, (1, 1) again
    let x = vec![1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0];
    let s = svm::solve(&x, 2, 2, None, vec![0, 0]).unwrap();
    let Verdict::Infeasible { farkas } = &s.verdict else {
        panic!("{:?}", s.verdict);
    };
    assert!(farkas[0] == 0 && farkas[1] > 0, "{farkas:?}");
    // sample 0: v = (1, 0); sample 1: (0, 0) selected against (1, 0): v = (-1, 0)
    let x = vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0];
    let s = svm::solve(&x, 2, 2, None, vec![0, 0]).unwrap();
    let Verdict::Infeasible { farkas } = &s.verdict else {
        panic!("{:?}", s.verdict);
    };
    assert!(farkas[0] > 0 && farkas[0] == farkas[1], "{farkas:?}");
    // the Farkas check itself can fail: a y with sum y_c v_c != 0
    let g = Gram::of_tokens(&x, 2, None);
    let cons = Constraints::new(2, vec![0, 0]);
    assert!(check_farkas(&g, &cons, farkas));
    assert!(!check_farkas(
        &g,
        &cons,
        &[Integer::from(1), Integer::from(2)]
    ));
    assert!(!check_farkas(
        &g,
        &cons,
        &[Integer::from(0), Integer::from(0)]
    ));
}

/// A small generated config (d = 200, n = 20, T = 8: the balanced layout).
fn small() -> Config {
    Config {
        d: 200,
        n_test: 3,
        ..Config::default()
    }
}

fn solve_cfg(cfg: &Config, choice: &PatternChoice) -> (Dataset, svm::Solved) {
    let data = Dataset::generate(cfg);
    let pattern = svm::pattern(&data, choice).unwrap();
    let w = Params::init(cfg).w;
    let w = w.as_ref().map(|w| w.as_slice().unwrap());
    let x = data.train.x.as_slice().unwrap();
    let s = svm::solve(x, cfg.layout.tokens, cfg.d, w, pattern).unwrap();
    (data, s)
}

/// The f64 ||p||^2 (sum of multipliers) against the exact one: the active set's linear
/// system has a measured condition estimate kappa (<= 1e3 asserted); backward-stable
/// Cholesky on m <= 140 unknowns gives a relative error of order m kappa u, below 1e-10
/// here (stated tolerance; measured about 1e-16).
fn assert_f64_agrees(s: &svm::Solved, exact: &Rational) {
    let svm::F64Outcome::Optimal { lambda } = &s.f64.outcome else {
        panic!()
    };
    let f: f64 = lambda.iter().sum();
    assert!(s.f64.condition < 1e3, "{}", s.f64.condition);
    let rel = ((Rational::from_f64(f).unwrap() - exact.clone()) / exact.clone()).abs();
    assert!(rel.to_f64() < 1e-10, "{}", rel.to_f64());
}

/// The default layout at d = 200: both the optimal and the theorem pattern proved
/// optimal, margin 1 attained exactly, the f64 solution in agreement; perturbing one
/// multiplier or dropping an active constraint (re-solved exactly: the equality system of
/// the rest, whose multipliers need not stay >= 0) fails the checks.
#[test]
fn small_config_is_proved_and_the_checker_can_fail() {
    let cfg = small();
    for choice in [PatternChoice::Optimal, PatternChoice::Theorem] {
        let (_, s) = solve_cfg(&cfg, &choice);
        let Verdict::ProvedOptimal {
            proved,
            certificate,
        } = &s.verdict
        else {
            panic!("{:?}", s.verdict)
        };
        assert!(proved.tight >= proved.support && proved.support > 0);
        assert_f64_agrees(&s, &proved.norm2);
        let (g, cons) = (&s.gram, &s.constraints);
        let c = s.support[0];
        let mut bad = certificate.clone();
        bad.lambda[c] += 1;
        bad.a = cons.transpose_apply(&bad.lambda);
        assert!(check(g, cons, &bad).is_err());
        let rest: Vec<usize> = s.support[1..].to_vec();
        let dropped = certificate_for(g, cons, &rest).unwrap();
        let (i, t) = cons.sample_token(c);
        let got = check(g, cons, &dropped);
        assert!(
            matches!(
                got,
                Err(Failure::PrimalFeasibility { .. } | Failure::DualFeasibility { .. })
            ),
            "dropping ({i}, {t}): {got:?}"
        );
    }
}

/// A dense W(0) (Kaiming-uniform, d = 24, n = 6): H = X W^T W X^T exactly, proved.
#[test]
fn dense_w_is_proved() {
    let mut cfg = common::with_init(small(), tokensel::prelude::Mode::P, 0.0, true);
    cfg.init.p = tokensel::prelude::PInit::Zero;
    cfg.d = 24;
    cfg.n_train = 6;
    let (_, s) = solve_cfg(&cfg, &PatternChoice::Theorem);
    let Verdict::ProvedOptimal { proved, .. } = &s.verdict else {
        panic!("{:?}", s.verdict)
    };
    assert_f64_agrees(&s, &proved.norm2);
}

/// The command: `svm --json` on a small config file proves optimality (exit 0) and its
/// JSON holds the verdict, the exact ||p_mm||^2 as num/den strings agreeing with the
/// rounded-down decimal and the minimum margin 1; `--out` writes the same report;
/// `--pattern FILE` takes a list of indices.
#[test]
fn command_proves_and_writes_json() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "d = 200\nn_test = 3\n").unwrap();
    let out = dir.path().join("svm.json");
    let o = tokensel(&[
        "svm",
        "--config",
        cfg.to_str().unwrap(),
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "proved optimal");
    assert_eq!(v["min_margin"]["num"], "1");
    let num: Integer = v["norm2"]["num"].as_str().unwrap().parse().unwrap();
    let den: Integer = v["norm2"]["den"].as_str().unwrap().parse().unwrap();
    let q = Rational::from((num, den));
    let dec: Rational =
        Rational::from_f64(v["norm2_decimal_down"].as_str().unwrap().parse().unwrap()).unwrap();
    assert!((q.clone() - dec).abs() < q.clone() * Rational::from((1, 100_000_000_000_000i64)));
    let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(written, v);
    // every sample on its first irrelevant token (position 3)
    let pat = dir.path().join("p.json");
    std::fs::write(&pat, serde_json::to_string(&vec![3; 20]).unwrap()).unwrap();
    let o = tokensel(&[
        "svm",
        "--config",
        cfg.to_str().unwrap(),
        "--pattern",
        pat.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["pattern"], "given");
    assert_eq!(v["verdict"], "proved optimal");
    let irrelevant = &v["groups"][3];
    assert_eq!(irrelevant["group"], "I");
    assert_eq!(
        irrelevant["clean"].as_u64().unwrap() + irrelevant["noisy"].as_u64().unwrap(),
        20
    );
}

/// Bad input exits 2 before any work: an unknown flag, a missing or malformed pattern
/// file, a pattern of the wrong length or with an index past T, a K-class config; a size
/// past the limit is refused with 3.
#[test]
fn bad_input_exits_2_and_sizes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "d = 20\nn_test = 3\n").unwrap();
    let c = cfg.to_str().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let (garbage, short, past) = (
        write("g.json", "[1, 2"),
        write("s.json", "[0, 0]"),
        write("p.json", &serde_json::to_string(&vec![8; 20]).unwrap()),
    );
    let multi = write(
        "m.toml",
        "d = 20\nn_test = 3\n[model]\nkind = \"multiclass\"\nclasses = 3\n[layout]\ntokens = 9\nrelevant = 1\nweak_same = 1\nweak_opposite = 2\nirrelevant = 5\n",
    );
    for args in [
        vec!["svm", "--config", c, "--bogus"],
        vec![
            "svm",
            "--config",
            c,
            "--pattern",
            "/nonexistent/pattern.json",
        ],
        vec!["svm", "--config", c, "--pattern", &garbage],
        vec!["svm", "--config", c, "--pattern", &short],
        vec!["svm", "--config", c, "--pattern", &past],
        vec!["svm", "--config", &multi],
    ] {
        let o = tokensel(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
    let big = write("b.toml", "d = 20\nn_test = 3\nn_train = 200\n");
    let o = tokensel(&["svm", "--config", &big]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("over the limit"), "{}", stderr(&o));
}

/// The exact re-solve is refused before its work past MAX_SUPPORT support constraints
/// (TooLarge: exit code 3 from the command).
#[test]
fn exact_work_past_the_limit_is_refused() {
    let (x, pattern) = hand();
    let g = Gram::of_tokens(&x, 2, None);
    let cons = Constraints::new(3, pattern);
    assert!(svm::exact_size(&g, &cons, &[1, 2]).is_ok());
    let e = svm::exact_size(&g, &cons, &vec![1; svm::MAX_SUPPORT + 1]).unwrap_err();
    assert!(e.is_stopped_run(), "{e}");
}

/// Degenerate instances (d = 3 with 14 constraints; d = 10 with 140): the active-set
/// method ends on every seed tried (no cycling: an exchange along a dependent
/// constraint is followed by the re-solve on the new free set), and every verdict is a
/// proof, of optimality or of infeasibility.
#[test]
fn degenerate_instances_end_with_a_proof() {
    for (d, n) in [(3, 2), (10, 20)] {
        for seed in 0..8 {
            let cfg = Config {
                d,
                n_train: n,
                n_test: 2,
                seed,
                ..Config::default()
            };
            for choice in [PatternChoice::Optimal, PatternChoice::Theorem] {
                let (_, s) = solve_cfg(&cfg, &choice);
                assert!(
                    matches!(
                        s.verdict,
                        Verdict::ProvedOptimal { .. } | Verdict::Infeasible { .. }
                    ),
                    "d {d} n {n} seed {seed} {choice:?}: {:?}",
                    s.verdict
                );
            }
        }
    }
}

/// `svm --data DIR` solves the SVM on a `tokensel data` directory: a generated export
/// gives the same exact ||p_mm||^2 (and report) as its config, and so does the supplied
/// export of the same arrays (the labels as generated, eta = 0 and the true labels
/// given); `--data` with `--config` is refused (exit 2).
#[test]
fn data_dir_gives_the_configs_svm() {
    let dir = tempfile::tempdir().unwrap();
    let cfg_path = dir.path().join("c.toml");
    std::fs::write(&cfg_path, "d = 30\nn_train = 12\nn_test = 3\nseed = 4\n").unwrap();
    let c = cfg_path.to_str().unwrap();
    let svm_json = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["svm", "--json"];
        all.extend_from_slice(args);
        let o = tokensel(&all);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let direct = svm_json(&["--config", c]);
    assert_eq!(direct["verdict"], "proved optimal");
    // generated export
    let gen_dir = dir.path().join("gen");
    let o = tokensel(&["data", "--config", c, "--out", gen_dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let generated = svm_json(&["--data", gen_dir.to_str().unwrap()]);
    assert_eq!(generated["norm2"], direct["norm2"]);
    assert_eq!(generated, direct);
    // supplied export of the same arrays
    let cfg = Config::from_file(&cfg_path).unwrap();
    let sup_dir = dir.path().join("sup");
    common::write_supplied(&cfg, &sup_dir);
    let supplied = svm_json(&["--data", sup_dir.to_str().unwrap()]);
    assert_eq!(supplied["verdict"], "proved optimal");
    assert_eq!(supplied["norm2"], direct["norm2"]);
    let o = tokensel(&["svm", "--data", sup_dir.to_str().unwrap(), "--config", c]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// `svm --out FILE` whose write fails after the work (here a file size limit of 64
/// bytes, RLIMIT_FSIZE as a shell's `ulimit -f` sets it, SIGXFSZ at its default action:
/// tokensel ignores that signal, so the write fails with EFBIG, as on a full disk, instead
/// of the signal killing the process with nothing printed) still prints the proved report and exits 3 naming the failed write, as `run`,
/// `twin`, `certify`, `sweep` and `protocol` do (it was exit 2 with nothing printed);
/// no partial file is left.
#[test]
fn a_report_that_cannot_be_written_is_still_printed() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "d = 200\nn_test = 3\n").unwrap();
    let out = dir.path().join("svm.json");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tokensel"));
    cmd.args([
        "svm",
        "--config",
        cfg.to_str().unwrap(),
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    // SAFETY: only async-signal-safe calls between fork and exec
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
            let limit = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("not written"), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("nothing printed: {}", stderr(&o)));
    assert_eq!(v["verdict"], "proved optimal");
    assert!(!out.exists());
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "only the config is left: {left:?}");
}

/// The Farkas search (nonnegative least squares on the columns (v_c, 1), then the exact
/// solve on its passive set) proves a hand instance infeasible: v = (1, 0), (-1, 1),
/// (-1, -1) (each sample's token 1 is 0, token 0 selected) have 2 v_1 + v_2 + v_3 = 0,
/// so y = (2, 1, 1) up to scale; and finds nothing for a feasible instance (v = (1, 0),
/// (0, 1): p = (1, 1) has margins 1).
#[test]
fn the_farkas_search_proves_a_hand_instance_infeasible() {
    let x = vec![
        1.0, 0.0, 0.0, 0.0, //
        -1.0, 1.0, 0.0, 0.0, //
        -1.0, -1.0, 0.0, 0.0,
    ];
    let g = Gram::of_tokens(&x, 2, None);
    let cons = Constraints::new(2, vec![0, 0, 0]);
    let q = q_f64(&g, &cons);
    let set = farkas_search(&q, 3).expect("a Farkas set");
    assert_eq!(set.len(), 3, "{set:?}");
    let y = farkas_on(&g, &cons, &set).expect("an exact Farkas vector");
    assert!(check_farkas(&g, &cons, &y));
    assert_eq!(Integer::from(&y[0] - &y[1] * 2u32), 0, "{y:?}");
    assert_eq!(y[1], y[2], "{y:?}");
    let x = vec![1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0];
    let g = Gram::of_tokens(&x, 2, None);
    let cons = Constraints::new(2, vec![0, 0]);
    assert_eq!(farkas_search(&q_f64(&g, &cons), 2), None);
}

/// The optimal pattern of 600 samples of T = 2 tokens at d = 30 has 600 constraints in
/// 30 dimensions and is infeasible. The f64 active set's Cholesky refactorisation fails
/// there (at iteration 68: a constraint numerically dependent on the free set), which
/// `svm` reported as "did not converge in 68 iterations", "not proved", exit 1. Now the
/// report names the failed refactorisation and its iteration, the Farkas search proves
/// the pattern infeasible ("infeasible (proved)", exit 0: an answer), and the Farkas
/// vector of the JSON is re-checked here in exact arithmetic on the test's own Gram
/// matrix: y >= 0, not all 0, and sum_c y_c v_c = 0.
#[test]
fn a_failed_refactorisation_is_reported_and_infeasibility_proved() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let text = "d = 30\nn_train = 600\nn_test = 3\n[layout]\ntokens = 2\nrelevant = 1\n\
                weak_same = 0\nweak_opposite = 0\nirrelevant = 1\n";
    std::fs::write(&path, text).unwrap();
    let o = tokensel(&["svm", "--config", path.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "infeasible (proved)", "{v}");
    assert_eq!(v["f64_outcome"], "factorisation failed", "{v}");
    let stop = v["f64_stop"].as_str().unwrap();
    assert!(
        stop.contains("stopped at iteration 68")
            && stop.contains("Cholesky refactorisation of its free set failed"),
        "{stop}"
    );
    let o = tokensel(&["svm", "--config", path.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("did not converge"), "{out}");
    assert!(out.contains("verdict: infeasible (proved)"), "{out}");
    // the help's exit codes say the same (it once said "1 not proved or infeasible")
    let help = tokensel(&["--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains(
            "exit 0 proved optimal or proved infeasible, 1 not proved or feasibility undecided"
        ),
        "{help}"
    );
    // the Farkas vector, checked independently
    let cfg = Config::from_toml_str(text, &path).unwrap();
    let data = Dataset::generate(&cfg);
    let pattern: Vec<usize> = v["selected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_u64().unwrap() as usize)
        .collect();
    let x = data.train.x.as_slice().unwrap();
    let g = Gram::of_tokens(x, cfg.d, None);
    let cons = Constraints::new(2, pattern.clone());
    let mut y = vec![Integer::new(); cons.count()];
    let entries = v["farkas"].as_array().unwrap();
    assert!(!entries.is_empty());
    for e in entries {
        let (i, t) = (
            e["sample"].as_u64().unwrap() as usize,
            e["token"].as_u64().unwrap() as usize,
        );
        assert_ne!(t, pattern[i]);
        assert_eq!(e["value"]["den"], "1");
        y[i] = e["value"]["num"].as_str().unwrap().parse().unwrap();
    }
    assert!(check_farkas(&g, &cons, &y));
}

/// Where the f64 stage stopped and no Farkas vector passed the exact check, the report
/// says what happened (the refactorisation that failed, its iteration and constraint;
/// or the iteration limit) and "feasibility undecided", which is not an answer (exit
/// code 1: `decided()` false); it once said "did not converge in N iterations" for a
/// failed refactorisation.
#[test]
fn an_undecided_feasibility_is_reported_as_such() {
    let cfg = small();
    let (data, s) = solve_cfg(&cfg, &PatternChoice::Theorem);
    // 20 samples of 8 tokens: 140 constraints, at most 20 * 140 + 1000 iterations
    assert_eq!(svm::iteration_limit(s.constraints.count()), 3800);
    let (i, t) = s.constraints.sample_token(9);
    for (outcome, needle) in [
        (
            svm::F64Outcome::FactorisationFailed {
                iteration: 43,
                set: vec![0, 1, 2],
                c: 9,
            },
            format!(
                "stopped at iteration 43 (of at most 3800): the Cholesky refactorisation of \
                 its free set failed, constraint (sample {i}, token {t}) being numerically \
                 dependent on the 3 before it"
            ),
        ),
        (
            svm::F64Outcome::NoConvergence,
            "reached its limit of 3800 iterations".to_string(),
        ),
    ] {
        let solved = svm::Solved {
            f64: svm::F64Solution {
                outcome,
                iterations: 43,
                condition: 1.0,
            },
            support: Vec::new(),
            exact: None,
            verdict: Verdict::NoCertificate {
                reason: "no Farkas vector: feasibility undecided".into(),
            },
            ..s.clone()
        };
        let r = svm::Report::new(&data, &PatternChoice::Theorem, cfg.d, false, &solved);
        assert_eq!(r.verdict, "feasibility undecided");
        assert!(!r.decided() && !r.proved());
        let stop = r.f64_stop.as_deref().unwrap();
        assert!(stop.contains(&needle), "{stop}");
        let text = r.to_string();
        assert!(
            text.contains(&needle) && !text.contains("did not converge"),
            "{text}"
        );
    }
}
