//! Numbers from flags and files (issue 17, item 1): every seed tokensel accepts reads
//! back from every file it writes; every size that allocates is bounded before the
//! work, refused with exit 3 naming the size and the limit; sums and ranges that would
//! overflow are refused (exit 2), not wrapped; every check that can be made before the
//! work is made before it (claim quantities and steps, grid specs read back).

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::{stderr, tokensel};

const LIMIT: &str = "9223372036854775807";
const BIG: &str = "18446744073709551615";

/// Run in `dir`.
fn tokensel_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tokensel"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("binary runs")
}

/// `o` exited with `code`, without a panic, its stderr naming each of `needles`.
fn assert_exit(o: &Output, code: i32, needles: &[&str], what: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    for n in needles {
        assert!(err.contains(n), "{what}: message lacks `{n}`: {err}");
    }
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).expect("one JSON object")
}

/// `grid --seeds` in every form the README and the examples show (`0..4`, `0,3,7`,
/// `0..2`, a single seed), with `--set key=v1,v2` (clap read the seed list as many
/// values and panicked, exit 101, for every form).
#[test]
fn grid_seeds_in_every_documented_form() {
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join("small.toml");
    std::fs::write(&small, "d = 10\nn_train = 4\nn_test = 8\n").unwrap();
    for (k, (seeds, expect)) in [
        ("0..2", vec![0, 1]),
        ("0..4", vec![0, 1, 2, 3]),
        ("0,3,7", vec![0, 3, 7]),
        ("5", vec![5]),
    ]
    .into_iter()
    .enumerate()
    {
        let out = tmp.path().join(format!("g{k}"));
        let v = json(&tokensel(&[
            "grid",
            "--config",
            small.to_str().unwrap(),
            "--set",
            "mu_norm=5,10",
            "--seeds",
            seeds,
            "--steps",
            "3",
            "--out",
            out.to_str().unwrap(),
            "--quiet",
            "--json",
        ]));
        assert_eq!(v["seeds"], serde_json::json!(expect), "{seeds}");
        assert_eq!(v["runs_ok"], 2 * expect.len(), "{seeds}");
        assert_eq!(v["points"].as_array().unwrap().len(), 2);
    }
}

/// A seed above 2^63 - 1 is refused wherever it enters, with exit 2 naming the limit
/// (it ran, and then `diff` panicked on the trajectory, and `config`/`data` wrote a
/// TOML that tokensel could not read back).
#[test]
fn seeds_above_the_toml_range_are_refused_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    let range = format!("0..{BIG}");
    for args in [
        vec!["run", "--seed", BIG, "--steps", "3"],
        vec!["config", "--seed", BIG],
        vec!["data", "--seed", BIG, "--out", &p("data")],
        vec!["twin", "--seed", BIG, "--steps", "1"],
        vec!["compare", "--seed", BIG, "--steps", "1"],
        vec!["saturation", "--seed", BIG],
        vec!["cost", "--seed", BIG],
        vec!["sweep", "--seeds", BIG],
        vec!["sweep", "--seeds", &range],
        vec!["grid", "--seeds", BIG, "--out", &p("g")],
        vec!["grid", "--seeds", &format!("0,{BIG}"), "--out", &p("g")],
    ] {
        let o = tokensel(&args);
        assert_exit(&o, 2, &[LIMIT], &format!("{args:?}"));
    }
    // in files: a grid TOML, a claims file, a trajectory, a grid spec
    std::fs::write(p("g.toml"), format!("seeds = \"{BIG}\"\n")).unwrap();
    let o = tokensel(&["grid", "--grid", &p("g.toml"), "--out", &p("g")]);
    assert_exit(&o, 2, &[LIMIT], "grid TOML");
    std::fs::write(
        p("c.toml"),
        format!(
            "[[claim]]\nname = \"x\"\nsource = \"run\"\nquantity = \"steps\"\nop = \">=\"\nbound = 0\nseeds = \"{BIG}\"\n"
        ),
    )
    .unwrap();
    let o = tokensel(&["check", &p("c.toml")]);
    assert_exit(&o, 2, &[LIMIT, "claim 1"], "claims");
    let o = tokensel(&["run", "--quiet", "--steps", "3", "--out", &p("t")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(p("t/trajectory.json")).unwrap();
    let edited = text.replacen("\"seed\": 0", &format!("\"seed\": {BIG}"), 1);
    assert_ne!(text, edited);
    std::fs::write(p("big.json"), edited).unwrap();
    let o = tokensel(&["diff", &p("big.json"), &p("big.json")]);
    assert_exit(&o, 2, &[LIMIT], "diff of a trajectory with a huge seed");
    let o = tokensel(&["plot", &p("big.json"), "--out", &p("x.svg")]);
    assert_exit(&o, 2, &[LIMIT], "plot of a trajectory with a huge seed");
}

/// The largest seed, 2^63 - 1, runs and every file written with it reads back: the
/// trajectory (`diff`), the printed config (`config` then `run --config`), the data
/// export's config.toml, a grid spec and its cells (`grid merge`).
#[test]
fn the_largest_seed_reads_back_from_every_file() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    std::fs::write(p("small.toml"), "d = 10\nn_train = 4\nn_test = 8\n").unwrap();
    let small = p("small.toml");
    let o = tokensel(&[
        "run",
        "--quiet",
        "--config",
        &small,
        "--seed",
        LIMIT,
        "--steps",
        "3",
        "--out",
        &p("a"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&tokensel(&[
        "diff",
        "--json",
        &p("a/trajectory.json"),
        &p("a/trajectory.json"),
    ]));
    assert_eq!(v["bit_identical"], true);
    let o = tokensel(&["config", "--config", &small, "--seed", LIMIT]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(p("printed.toml"), &o.stdout).unwrap();
    let v = json(&tokensel(&[
        "run",
        "--quiet",
        "--json",
        "--steps",
        "2",
        "--config",
        &p("printed.toml"),
    ]));
    assert_eq!(v["seed"].as_u64(), Some(i64::MAX as u64));
    let o = tokensel(&[
        "data",
        "--config",
        &small,
        "--seed",
        LIMIT,
        "--out",
        &p("data"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tokensel(&["config", "--config", &p("data/config.toml")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("seed = {LIMIT}")));
    let o = tokensel(&[
        "grid",
        "--config",
        &small,
        "--seeds",
        LIMIT,
        "--set",
        "mu_norm=5",
        "--steps",
        "2",
        "--out",
        &p("g"),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&tokensel(&["grid", "merge", &p("g"), "--json"]));
    assert_eq!(v["runs_ok"], 1);
}

/// `grid merge` checks `grid.json` as `grid` checks a grid it builds: no seeds (it
/// panicked, exit 101), an empty axis, a repeated or `seed` axis, five axes, a
/// non-finite value are bad input (exit 2); too many seeds or runs are refused (exit 3).
#[test]
fn grid_merge_checks_the_spec_it_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    let o = tokensel(&[
        "grid",
        "--set",
        "d=10,20",
        "--steps",
        "2",
        "--out",
        dir.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("grid.json")).unwrap()).unwrap();
    let axis =
        |key: &str, values: serde_json::Value| serde_json::json!({"key": key, "values": values});
    let edits: Vec<(&str, serde_json::Value, i32, &str)> = vec![
        ("/seeds", serde_json::json!([]), 2, "at least one seed"),
        (
            "/axes",
            serde_json::json!([axis("d", serde_json::json!([]))]),
            2,
            "`axes.d`",
        ),
        (
            "/axes",
            serde_json::json!([
                axis("d", serde_json::json!([10.0])),
                axis("d", serde_json::json!([20.0]))
            ]),
            2,
            "twice",
        ),
        (
            "/axes",
            serde_json::json!([axis("seed", serde_json::json!([1.0]))]),
            2,
            "seed",
        ),
        (
            "/axes",
            serde_json::json!(
                (0..5)
                    .map(|k| axis(&format!("k{k}"), serde_json::json!([1.0])))
                    .collect::<Vec<_>>()
            ),
            2,
            "at most 4 axes",
        ),
        (
            "/seeds",
            serde_json::json!((0..2000).collect::<Vec<u64>>()),
            3,
            "2000 seeds",
        ),
        (
            "/axes",
            serde_json::json!([
                axis(
                    "d",
                    serde_json::json!((0..400).map(|k| 10 + k).collect::<Vec<_>>())
                ),
                axis(
                    "mu_norm",
                    serde_json::json!((0..400).map(|k| 1 + k).collect::<Vec<_>>())
                )
            ]),
            3,
            "160000 runs",
        ),
    ];
    for (pointer, value, code, needle) in edits {
        let mut v = spec.clone();
        *v.pointer_mut(pointer).unwrap() = value;
        std::fs::write(dir.join("grid.json"), v.to_string()).unwrap();
        let o = tokensel(&["grid", "merge", dir.to_str().unwrap()]);
        assert_exit(&o, code, &[needle], &format!("grid.json {pointer}"));
    }
}

/// Every size that allocates is checked before the work (exit 3, the size and the
/// limit named, within seconds): repetitions, seed ranges in grid and claims files,
/// grid axes, sweep runs, saturation points, and the checkpoint store (d = 2,
/// n_train = 2,000,000, 300 steps, 1000 checkpoints per decade: 8 GB after 47 s before).
#[test]
fn sizes_are_refused_before_the_work() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    std::fs::write(
        p("store.toml"),
        "d = 2\nn_train = 2000000\nn_test = 10\nsteps = 300\n[record]\ncheckpoints_per_decade = 1000\n",
    )
    .unwrap();
    std::fs::write(p("g.toml"), "seeds = \"0..10000000000\"\n").unwrap();
    let claim = |extra: &str| {
        format!(
            "[[claim]]\nname = \"x\"\nsource = \"run\"\nquantity = \"steps\"\nop = \">=\"\nbound = 0\n{extra}\n"
        )
    };
    std::fs::write(p("c-seeds.toml"), claim("seeds = \"0..10000000000\"")).unwrap();
    std::fs::write(
        p("c-store.toml"),
        claim("config = { d = 2, n_train = 2000000, n_test = 10, steps = 300, record = { checkpoints_per_decade = 1000 } }"),
    )
    .unwrap();
    // (20 + 1000) samples x 8 tokens x 10^18 x 8 bytes = 6.08e13 GiB
    std::fs::write(p("huge-d.toml"), "d = 1000000000000000000\n").unwrap();
    let huge_d = p("huge-d.toml");
    let etas: Vec<String> = (0..101).map(|k| format!("0.{k:03}")).collect();
    let etas = etas.join(",");
    let (g, o_dir, c_seeds, store, c_store) = (
        p("g.toml"),
        p("o"),
        p("c-seeds.toml"),
        p("store.toml"),
        p("c-store.toml"),
    );
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["cost", "--reps", BIG], vec!["reps", BIG, "100000"]),
        (
            vec!["cost", "--reps", "100000000000"],
            vec!["100000000000", "100000"],
        ),
        (
            vec!["cost", "--twin-reps", "100000000000"],
            vec!["twin-reps"],
        ),
        (
            vec!["grid", "--grid", &g, "--out", &o_dir],
            vec!["10000000000 seeds", "1000"],
        ),
        (
            vec!["check", &c_seeds],
            vec!["10000000000 seeds", "claim 1"],
        ),
        (
            vec!["run", "--config", &store],
            vec!["301 checkpoints x 2000000", "8 GiB"],
        ),
        // the size in the message is the size, not a saturated 2^64 bytes
        (
            vec!["run", "--config", &huge_d],
            vec!["needs 6.080e13 GiB", "limit of 8 GiB"],
        ),
        (
            vec!["twin", "--config", &store, "--prec", "64"],
            vec!["301 checkpoints"],
        ),
        (
            vec!["sweep", "--config", &store, "--etas", "0.1", "--seeds", "0"],
            vec!["301 checkpoints"],
        ),
        (vec!["check", &c_store], vec!["301 checkpoints", "claim 1"]),
        (
            vec!["sweep", "--etas", &etas, "--seeds", "0..1000"],
            vec!["101000 runs", "100000"],
        ),
        (
            vec!["saturation", "--points", "100000000"],
            vec!["100000000", "10000"],
        ),
        (
            vec!["grid", "--set", "eta=0:0.5:1e-300", "--out", &o_dir],
            vec!["5.0e299", "100000"],
        ),
        (
            vec!["grid", "--set", "d=1:1000000:1", "--out", &o_dir],
            vec!["1000000 values"],
        ),
    ];
    for (args, needles) in cases {
        let t0 = Instant::now();
        let o = tokensel(&args);
        assert_exit(&o, 3, &needles, &format!("{args:?}"));
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{args:?} worked before refusing"
        );
    }
    for args in [
        vec!["cost", "--reps", "0"],
        vec!["cost", "--twin-reps", "0"],
        vec!["saturation", "--points", "1"],
    ] {
        let o = tokensel(&args);
        assert_exit(&o, 2, &[], &format!("{args:?}"));
    }
}

/// `cost --classes`: a K outside 2..=100, a K no data can have (more classes than d),
/// a config that already names the K-class model, a K that is not a number, or a K,
/// precision or ball precision named twice is refused
/// with exit 2 and a message naming it, before any timing (the default `cost` takes
/// minutes).
#[test]
fn cost_classes_are_checked_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    std::fs::write(p("small.toml"), "d = 5\n").unwrap();
    std::fs::write(
        p("k3.toml"),
        "[model]\nkind = \"multiclass\"\nclasses = 3\n\n[layout]\ntokens = 9\nrelevant = 1\nweak_same = 1\nweak_opposite = 2\nirrelevant = 5\n",
    )
    .unwrap();
    let (small, k3) = (p("small.toml"), p("k3.toml"));
    for (args, needles) in [
        (
            vec!["cost", "--classes", "1"],
            vec!["classes", "2..=100, got 1"],
        ),
        (vec!["cost", "--classes", "4,101"], vec!["got 101"]),
        (vec!["cost", "--classes", "x"], vec!["--classes"]),
        (
            vec!["cost", "--config", &small, "--classes", "2,10"],
            vec!["d >= 10"],
        ),
        (
            vec!["cost", "--config", &k3, "--classes", "4"],
            vec!["already names the multi-class model"],
        ),
        // a value named twice would time and print its row twice
        (
            vec!["cost", "--classes", "3,4,3"],
            vec!["classes", "names 3 twice"],
        ),
        (
            vec!["cost", "--precs", "53,53"],
            vec!["precs", "names 53 twice"],
        ),
        (
            vec!["cost", "--ball", "128,128"],
            vec!["ball", "names 128 twice"],
        ),
    ] {
        let t0 = Instant::now();
        let o = tokensel(&args);
        assert_exit(&o, 2, &needles, &format!("{args:?}"));
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{args:?} worked before refusing"
        );
    }
}

/// Group sizes whose sum wraps usize (R = W_same = 2^63 - 1, W_opposite = 0, I = 10:
/// 2^64 + 8 = 8 = tokens modulo 2^64) are refused (they ran with exit 0 in release
/// builds, every token counted relevant); an integer axis value of 2^63 is refused (it
/// became 2^63 - 1); integer axis values a double does not hold are refused; a range
/// stepped by `1e-1` steps by 0.1 (it stepped by whole numbers and refused eta = 1).
#[test]
fn overflowing_numbers_are_refused_not_wrapped() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    std::fs::write(
        p("wrap.toml"),
        format!(
            "[layout]\ntokens = 8\nrelevant = {LIMIT}\nweak_same = {LIMIT}\nweak_opposite = 0\nirrelevant = 10\n"
        ),
    )
    .unwrap();
    let o = tokensel(&[
        "run",
        "--quiet",
        "--steps",
        "2",
        "--config",
        &p("wrap.toml"),
    ]);
    assert_exit(
        &o,
        2,
        &["`layout`", "18446744073709551624"],
        "wrapping layout",
    );
    let o = tokensel(&["grid", "--set", "d=9223372036854775808", "--out", &p("o")]);
    assert_exit(&o, 2, &["`d`", "non-negative integer"], "d = 2^63");
    std::fs::write(p("g.toml"), "[axes]\nd = [9007199254740993]\n").unwrap();
    let o = tokensel(&["grid", "--grid", &p("g.toml"), "--out", &p("o")]);
    assert_exit(&o, 2, &["2^53"], "an integer a double does not hold");
    std::fs::write(p("small.toml"), "d = 10\nn_train = 4\nn_test = 8\n").unwrap();
    let v = json(&tokensel(&[
        "grid",
        "--config",
        &p("small.toml"),
        "--set",
        "eta=0:0.5:1e-1",
        "--steps",
        "2",
        "--out",
        &p("e"),
        "--quiet",
        "--json",
    ]));
    let points: Vec<f64> = v["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["point"][0].as_f64().unwrap())
        .collect();
    assert_eq!(points, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]);
}

/// A typo in the last claim's quantity or step is found when the file is read: exit 2
/// naming the claim and the field, before the first claim runs (no `[1/2]` progress
/// line; it used to run every claim before it first).
#[test]
fn claim_typos_are_found_before_the_first_claim_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let small = "config = { d = 10, n_train = 4, n_test = 8, steps = 3000 }\n";
    let first = format!(
        "[[claim]]\nname = \"first\"\n{small}source = \"run\"\nquantity = \"steps\"\nop = \"==\"\nbound = 3000\n\n"
    );
    let cases = [
        (
            "source = \"run\"\nquantity = \"train_acuracy\"",
            "`quantity`",
            "train_accuracy",
        ),
        (
            "source = \"run\"\nquantity = \"trajectory_digest\"",
            "`quantity`",
            "text",
        ),
        (
            "source = \"run\"\nquantity = \"selection/noisy/W_oposite\"",
            "`quantity`",
            "W_opposite",
        ),
        (
            "source = \"run\"\nstep = 1234\nquantity = \"train_accuracy\"",
            "`step`",
            "not a recorded checkpoint",
        ),
        (
            "source = \"run\"\nbaseline_step = 1234\nquantity = \"train_accuracy\"",
            "`baseline_step`",
            "not a recorded checkpoint",
        ),
        (
            "source = \"run\"\nstep = 1000\nquantity = \"attention/clean/RR\"",
            "`quantity`",
            "a run's checkpoint",
        ),
        (
            "source = \"compare\"\nquantity = \"max_rel_err/grad\"",
            "`quantity`",
            "grad_q",
        ),
        (
            "source = \"saturation\"\nquantity = \"thresholds/naive.rst/over_tol\"",
            "`quantity`",
            "naive.rest",
        ),
        (
            "source = \"lemma_a6\"\nquantity = \"max_rel_q\"",
            "`quantity`",
            "max_rel_q_diff",
        ),
        (
            "source = \"grid\"\naxes = { mu_norm = [3.0, 8.0] }\nquantity = \"points/0/stats/test_acuracy/mean\"",
            "`quantity`",
            "test_accuracy",
        ),
    ];
    for (k, (body, field, needle)) in cases.iter().enumerate() {
        let path = tmp.path().join(format!("c{k}.toml"));
        std::fs::write(
            &path,
            format!("{first}[[claim]]\nname = \"second\"\n{small}{body}\nop = \">=\"\nbound = 0\n"),
        )
        .unwrap();
        let o = tokensel_in(tmp.path(), &["check", path.to_str().unwrap()]);
        assert_exit(&o, 2, &["claim 2", field, needle], body);
        assert!(!stderr(&o).contains("[1/2]"), "{body}: the first claim ran");
    }
}

/// Every preset the help text offers is a preset (`config --preset sweep`, offered by
/// the help text, exited 2).
#[test]
fn the_help_offers_only_presets() {
    let o = tokensel(&["config", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout).replace('\n', " ");
    let offered = help
        .split_once("Embedded preset:")
        .expect("the help describes --preset")
        .1
        .split_once('(')
        .unwrap()
        .0
        .replace(" or ", ", ");
    let names: Vec<&str> = offered
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(
        names.len(),
        tokensel::prelude::Preset::ALL.len(),
        "{names:?}"
    );
    for name in names {
        let o = tokensel(&["config", "--preset", name]);
        assert!(o.status.success(), "`{name}`: {}", stderr(&o));
    }
    let o = tokensel(&["config", "--preset", "sweep"]);
    assert_exit(
        &o,
        2,
        &["label-noise-sweep"],
        "an unknown preset lists the known ones",
    );
}
