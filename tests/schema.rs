//! The claim sources' output schemas (`experiments::schema`), traced from the report
//! types, against the JSON the sources really write: every number, boolean or null in a
//! real output is a path the schema accepts (so a valid claim is never refused before
//! the work), and every text, object or array is one it refuses (so a claim that could
//! only fail after the work is refused before it). Typos in claim quantities and steps
//! are found when the file is read.

use std::path::Path;

use tokensel::prelude::analysis::lemma_a6::LemmaA6;
use tokensel::prelude::experiments::claims::ClaimsFile;
use tokensel::prelude::experiments::grid::Spec;
use tokensel::prelude::experiments::schema::Source;
use tokensel::prelude::experiments::{grid, schema};
use tokensel::prelude::{Config, Dataset, Summary};

mod common;

/// Every leaf of `v` with its '/'-path: (path, is a number (a non-finite one spelled as
/// its name included)/boolean/null).
fn leaves(v: &serde_json::Value, path: String, out: &mut Vec<(String, bool)>) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                leaves(x, format!("{path}/{k}"), out);
            }
            out.push((path, false));
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                leaves(x, format!("{path}/{i}"), out);
            }
            out.push((path, false));
        }
        // a non-finite number is written as its name (`io::nonfinite`)
        Value::String(s) => out.push((
            path,
            tokensel::prelude::formats::nonfinite::parse(s).is_some(),
        )),
        Value::Number(_) | Value::Bool(_) | Value::Null => out.push((path, true)),
    }
}

/// The schema accepts exactly the paths of `output` that hold a number, boolean or null
/// (a null where the type has an optional number; a null where it holds no number at
/// all, as an empty optional object, is refused, and so are the paths below it).
fn assert_matches(source: Source, step: bool, output: &serde_json::Value) {
    let s = schema::of_source(source, step);
    assert!(s.shape.is_known(), "{source:?}: {:?}", s.shape);
    let mut all = Vec::new();
    leaves(output, String::new(), &mut all);
    assert!(all.len() > 10, "{source:?}: a real output");
    for (path, numeric) in all {
        let verdict = s.check(&path);
        if numeric && !output.pointer(&path).is_some_and(|v| v.is_null()) {
            assert!(verdict.is_ok(), "{source:?} {path}: {verdict:?}");
        }
        if !numeric {
            assert!(verdict.is_err(), "{source:?} {path} is not a number");
        }
    }
}

fn small() -> Config {
    Config {
        d: 12,
        n_train: 6,
        n_test: 10,
        steps: 30,
        eta: 0.34,
        ..Config::default()
    }
}

#[test]
fn run_summary_and_checkpoints() {
    let t = common::run_f64(&small());
    let summary = serde_json::to_value(Summary::of(&t)).unwrap();
    assert!(!summary["selection"]["noisy"].is_null(), "noisy samples");
    assert_matches(Source::Run, false, &summary);
    for c in &t.checkpoints {
        assert_matches(Source::Run, true, &serde_json::to_value(c).unwrap());
    }
    // numbers that may be non-finite (written as "inf"/"nan") are numbers of the schema
    let run = schema::of_source(Source::Run, false);
    assert!(run.check("selection/noisy/R").is_ok());
    assert!(run.check("train_loss").is_ok());
    assert!(run.check("selection/noisy/Q").is_err());
}

#[test]
fn compare_saturation_and_lemma_a6() {
    let cfg = Config {
        steps: 4,
        ..small()
    };
    let data = Dataset::generate(&cfg);
    let opts = tokensel::prelude::analysis::compare::Options {
        prec: 128,
        tol: 1e-8,
        predictor: true,
        predictor_steps: None,
        twin_method: tokensel::prelude::Method::Span,
        certify: None,
    };
    let r = tokensel::prelude::analysis::compare::compare(&cfg, &data, opts, &mut |_| {}).unwrap();
    assert_matches(Source::Compare, false, &serde_json::to_value(&r).unwrap());
    let grid = tokensel::prelude::analysis::saturation::default_grid(8);
    let r =
        tokensel::prelude::analysis::saturation::sweep(&data.train, 0, 128, 1e-8, &grid).unwrap();
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(
        v["thresholds"].as_object().unwrap().len(),
        tokensel::prelude::analysis::saturation::threshold_keys().len()
    );
    assert_matches(Source::Saturation, false, &v);
    let v = serde_json::to_value(LemmaA6 {
        max_rel_q_diff: 1e-15,
        max_kappa: 3.0,
        max_rel_step: 1e-3,
    })
    .unwrap();
    let lemma = schema::of_source(Source::LemmaA6, false);
    for key in v.as_object().unwrap().keys() {
        assert!(lemma.check(key).is_ok(), "{key}");
    }
    assert!(lemma.check("max_rel_q").is_err());
}

/// An (eta, rho) grid: points with stats and regimes, the label-noise boundaries.
#[test]
fn grid_summary() {
    let spec = Spec::from_toml(
        "seeds = \"0..2\"\nsteps = 20\n[config]\nd = 12\nn_train = 6\nn_test = 10\n\
         [axes]\neta = \"0.2:0.4:0.2\"\nrho = [0.1, 0.2]\n",
        Path::new("g"),
    )
    .unwrap();
    let summary = grid::run_in_memory(&spec).unwrap();
    let v = serde_json::to_value(&summary).unwrap();
    assert!(!v["label_noise"].as_array().unwrap().is_empty());
    assert_matches(Source::Grid, false, &v);
    let s = schema::of_source(Source::Grid, false);
    assert!(s.check("points/0/stats/test_accuracy/mean").is_ok());
    let e = s.check("points/0/stats/test_acuracy/mean").unwrap_err();
    assert!(e.contains("test_accuracy"), "lists the keys: {e}");
    assert!(s.check("points/0/regimes/benign").is_ok());
    assert!(s.check("points/0/regimes/benigne").is_err());
    assert!(s.check("points/x/seeds_ok").is_err());
}

/// Messages name the first step that does not exist and list what does.
#[test]
fn typos_are_named() {
    let s = schema::of_source(Source::Run, false);
    for ok in [
        "train_accuracy",
        "selection/noisy/W_opposite",
        "selection/clean/tie",
        "attention/clean/R",
        "config/d",
        "n_noisy",
    ] {
        assert!(s.check(ok).is_ok(), "{ok}");
    }
    let e = s.check("train_acuracy").unwrap_err();
    assert!(
        e.contains("no `train_acuracy`") && e.contains("train_accuracy"),
        "{e}"
    );
    let e = s.check("selection/noisy/W_oposite").unwrap_err();
    assert!(e.contains("at `selection/noisy`"), "{e}");
    assert!(s.check("trajectory_digest").unwrap_err().contains("text"));
    assert!(s.check("selection").unwrap_err().contains("object"));
    assert!(s.check("steps/0").is_err());
    let c = schema::of_source(Source::Compare, false);
    assert!(c.check("max_rel_err/grad_q").is_ok());
    assert!(c.check("max_rel_err/grad").unwrap_err().contains("grad_q"));
    let sat = schema::of_source(Source::Saturation, false);
    assert!(sat.check("thresholds/naive.rest/all_digits_lost").is_ok());
    assert!(sat.check("thresholds/naive.rst/all_digits_lost").is_err());
}

/// Every shipped claims file (`claims/*.toml`) passes every check made before the work
/// (each claim's quantity and its bound against the quantity's range included).
#[test]
fn paper_claims_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("claims");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let (file, configs) =
            ClaimsFile::parse(&text, &path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(file.claim.len(), configs.len());
        files += 1;
    }
    assert!(files >= 5, "{files} claims files");
}

/// The dotted paths of the numbers (optional ones, enclosures) a shape names, arrays
/// walked through (their indices dropped, as the record's visit drops them).
fn named(shape: &schema::Shape, path: &str, out: &mut std::collections::BTreeSet<String>) {
    use schema::Shape;
    match shape {
        Shape::Number | Shape::Names(_) => {
            out.insert(path.to_string());
        }
        Shape::Tuple(items) if items.iter().all(|s| *s == Shape::Number) => {
            out.insert(path.to_string());
        }
        Shape::Optional(s) | Shape::Array(s) => named(s, path, out),
        Shape::Object(fields) => {
            for (name, s) in fields {
                let p = match path {
                    "" => name.clone(),
                    p => format!("{p}.{name}"),
                };
                named(s, &p, out);
            }
        }
        other => panic!("`{path}`: {other:?} in a record's schema"),
    }
}

/// A claim's schema of a checkpoint comes from the record's visit, not a list of
/// fields: for the binary model, K = 3, the in-sequence prompt and `[direction]`, the
/// paths the schema names are exactly the leaves the visit reports of a real
/// checkpoint of that config (so a leaf added to the visit is nameable at once), and
/// the schema every claim on a run's checkpoint is checked against (every optional
/// part) names each of them and accepts it with its indices.
#[test]
fn checkpoint_schemas_name_exactly_the_visits_leaves() {
    use std::collections::BTreeSet;
    use tokensel::prelude::formats::record::{Leaves, RecordParts};
    let base = "d = 40\nn_train = 8\nn_test = 8\nmu_norm = 6.0\neta = 0.25\nsteps = 10\n";
    let configs = [
        ("binary", String::new()),
        (
            "k3",
            "[model]\nkind = \"multiclass\"\nclasses = 3\n[layout]\ntokens = 9\nweak_opposite = 2\n"
                .to_string(),
        ),
        (
            "prompt",
            "method = \"direct\"\n[model]\nprompt = \"in-sequence\"\n".to_string(),
        ),
        ("direction", "[direction]\npattern = \"theorem\"\n".to_string()),
    ];
    let all = schema::of_source(Source::Run, true);
    let mut every = BTreeSet::new();
    named(&all.shape, "", &mut every);
    for (name, extra) in configs {
        let cfg = Config::from_toml_str(&format!("{base}{extra}"), Path::new(name)).unwrap();
        let t = common::run_f64(&cfg);
        let c = t.last();
        let visited: BTreeSet<String> = Leaves::of(c, cfg.layout.tokens)
            .0
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        let s = schema::record::<f64, ()>("a checkpoint", &RecordParts::of(&cfg));
        let mut names = BTreeSet::new();
        named(&s.shape, "", &mut names);
        assert_eq!(names, visited, "{name}");
        assert!(
            visited.is_subset(&every),
            "{name}: {:?}",
            visited.difference(&every)
        );
        assert_matches(Source::Run, true, &serde_json::to_value(c).unwrap());
    }
    for ok in [
        "samples/3/outputs/2",
        "samples/0/prompt/attention",
        "classes/selection_score/1",
        "direction/on_pattern",
        "prompt/top/noisy",
    ] {
        assert!(all.check(ok).is_ok(), "{ok}: {:?}", all.check(ok));
    }
    // a certified checkpoint: the same record over intervals, and its proof's counts
    let cert = schema::certified(true);
    for ok in [
        "train_loss",
        "samples/0/f",
        "train_correct/lo",
        "direction/on_pattern/hi",
        "radius/bits_lost",
    ] {
        assert!(cert.check(ok).is_ok(), "{ok}: {:?}", cert.check(ok));
    }
    for bad in ["samples/0/prediction", "train_correct", "decisions"] {
        assert!(cert.check(bad).is_err(), "{bad}");
    }
}
