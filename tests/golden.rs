//! The golden table: trajectory digests of small runs over every combination of model,
//! mode, method, optimiser, arithmetic and prompt position (`tests/golden/digests.txt`).
//!
//! It guards refactors: every combination that runs keeps its digest (SHA-256 of every
//! recorded f64's bits, [`Trajectory::digest`]), every combination refused today stays
//! refused with the same message. The predictor's digest must also equal f64's (the
//! predictor is f64 bit for bit). The default run's digest (`807f0b67...`, 30,000 steps)
//! is checked by `tests/theorem.rs` against `snapshots/default_trajectory.digest`.
//!
//! A deliberate change of a digest is re-blessed with `TOKENSEL_BLESS=1 cargo test --test
//! golden`, and the diff of `tests/golden/digests.txt` reviewed and committed with it.

use std::path::Path;

use tokensel::prelude::{
    Arith, ArithVisitor, Choice, Config, Dataset, Result, Trainer, Trajectory,
};

const TABLE: &str = "tests/golden/digests.txt";

/// The trajectory of `cfg` in the visited arithmetic.
struct Run<'a> {
    cfg: &'a Config,
    data: &'a Dataset,
}

impl ArithVisitor for Run<'_> {
    type Output = Trajectory;
    fn visit<A: Arith>(self, ar: A) -> Result<Trajectory> {
        Trainer::run(self.cfg, self.data, ar, &mut |_| {})
    }
}

/// The config text of one combination (small sizes: d = 64, n = 12, 200 steps).
fn config_text(model: &str, mode: &str, method: &str, opt: &str, prompt: &str) -> String {
    let mut t =
        String::from("seed = 7\nd = 64\nn_train = 12\nn_test = 6\nsteps = 200\nstep_size = 0.01\n");
    t += &format!("mode = \"{mode}\"\nmethod = \"{method}\"\n");
    if mode != "p" {
        t += "[init]\np = \"gaussian\"\np_scale = 0.5\nw = \"kaiming_uniform\"\n";
    }
    t += "[model]\n";
    if model == "k3" {
        t += "kind = \"multiclass\"\nclasses = 3\n";
    }
    t += &format!("prompt = \"{prompt}\"\n");
    if model == "k3" {
        t += "[layout]\ntokens = 9\nrelevant = 1\nweak_same = 1\nweak_opposite = 2\nirrelevant = 5\n";
    }
    t += match opt {
        "gd" => "",
        "ngd" => "[optimizer]\nkind = \"normalized-gd\"\neps = 1e-9\n",
        "adam" => "[optimizer]\nkind = \"adam\"\n",
        "adam-batch" => "[optimizer]\nkind = \"adam\"\nbatch = 5\n",
        _ => unreachable!("an optimiser of the table"),
    };
    t
}

/// Every combination's line: its key and its digest, or `refused: <first line>`.
fn table() -> String {
    let mut out = String::new();
    for model in ["binary", "k3"] {
        for mode in ["p", "W", "joint"] {
            for method in ["direct", "span"] {
                for opt in ["gd", "ngd", "adam", "adam-batch"] {
                    for prompt in ["separate", "in-sequence"] {
                        let text = config_text(model, mode, method, opt, prompt);
                        let key = format!("{model} {mode} {method} {opt} {prompt}");
                        let cfg = match Config::from_toml_str(&text, Path::new("golden.toml")) {
                            Ok(c) => c,
                            Err(e) => {
                                for arith in ["f64", "f32", "predictor"] {
                                    out += &format!("{key} {arith} refused: {}\n", first(&e));
                                }
                                continue;
                            }
                        };
                        let data = Dataset::generate(&cfg);
                        let mut f64_digest = None;
                        for arith in ["f64", "f32", "predictor"] {
                            let choice = Choice::parse(arith, None).unwrap();
                            let line = match choice.with(Run {
                                cfg: &cfg,
                                data: &data,
                            }) {
                                Ok(t) => {
                                    let d = t.digest();
                                    match arith {
                                        "f64" => f64_digest = Some(d.clone()),
                                        "predictor" => assert_eq!(
                                            Some(&d),
                                            f64_digest.as_ref(),
                                            "{key}: the predictor is not f64 bit for bit"
                                        ),
                                        _ => {}
                                    }
                                    d
                                }
                                Err(e) => format!("refused: {}", first(&e)),
                            };
                            out += &format!("{key} {arith} {line}\n");
                        }
                    }
                }
            }
        }
    }
    out
}

/// The first line of an error's message.
fn first(e: &tokensel::prelude::Error) -> String {
    e.to_string().lines().next().unwrap_or("").to_string()
}

#[test]
fn every_combination_keeps_its_digest_or_its_refusal() {
    let got = table();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(TABLE);
    if std::env::var_os("TOKENSEL_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).expect("tests/golden/digests.txt is committed");
    let changed: Vec<String> = want
        .lines()
        .zip(got.lines())
        .filter(|(w, g)| w != g)
        .map(|(w, g)| format!("  was: {w}\n  now: {g}"))
        .collect();
    assert!(
        changed.is_empty() && want.lines().count() == got.lines().count(),
        "{} of {} golden lines changed ({} lines now):\n{}",
        changed.len(),
        want.lines().count(),
        got.lines().count(),
        changed.join("\n")
    );
    let runs = got.lines().filter(|l| !l.contains("refused:")).count();
    assert!(
        runs >= 60,
        "only {runs} combinations run: the table lost its coverage"
    );
}
