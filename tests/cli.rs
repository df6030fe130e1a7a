//! The command line: JSON output, determinism, bad input (the README's commands:
//! tests/readme.rs).

use std::process::Output;

mod common;
use common::{stderr, tokensel};

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "failed: {}", stderr(o));
    serde_json::from_slice(&o.stdout).expect("stdout is one JSON object")
}

#[test]
fn json_summary_has_the_documented_keys_and_is_byte_identical() {
    let args = ["run", "--json", "--steps", "300", "--seed", "3", "--quiet"];
    let a = tokensel(&args);
    let b = tokensel(&args);
    assert_eq!(a.stdout, b.stdout, "same seed, same bytes");
    let v = json(&a);
    for key in [
        "train_accuracy",
        "test_accuracy",
        "train_loss",
        "steps",
        "seed",
        "selection",
        "trajectory_digest",
    ] {
        assert!(v.get(key).is_some(), "missing key {key}");
    }
    assert_eq!(v["steps"], 300);
    assert_eq!(v["seed"], 3);
    for set in ["clean", "noisy"] {
        let sel = &v["selection"][set];
        let total: f64 = ["R", "W_same", "W_opposite", "I"]
            .iter()
            .map(|g| sel[g].as_f64().expect("a number per group"))
            .sum();
        assert!(
            (total - 1.0).abs() < 1e-12,
            "{set} selection fractions sum to {total}"
        );
    }
    let c = json(&tokensel(&[
        "run", "--json", "--steps", "300", "--seed", "4", "--quiet",
    ]));
    assert_ne!(v["trajectory_digest"], c["trajectory_digest"]);
}

/// At step 0 (p = 0) every score ties: the tie is reported as such, for clean and noisy
/// samples alike, and no sample counts as selecting R (issue 17, item 2); the trajectory
/// records each sample's `selection` as `tie`, and the CSV has the tie columns.
#[test]
fn step_zero_reports_ties_not_r() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t0");
    let v = json(&tokensel(&[
        "run",
        "--json",
        "--quiet",
        "--steps",
        "0",
        "--out",
        dir.to_str().unwrap(),
    ]));
    for set in ["clean", "noisy"] {
        let sel = &v["selection"][set];
        assert_eq!(sel["tie"], 1.0, "{set}: {sel}");
        assert_eq!(sel["undecided"], 0.0, "{set}: {sel}");
        for g in ["R", "W_same", "W_opposite", "I"] {
            assert_eq!(sel[g], 0.0, "{set} {g}: {sel}");
        }
    }
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("trajectory.json")).unwrap())
            .unwrap();
    assert_eq!(t["format"], "tokensel-trajectory/2");
    let samples = t["checkpoints"][0]["samples"].as_array().unwrap();
    assert!(
        samples.iter().all(|s| s["selection"] == "tie"),
        "{samples:?}"
    );
    let csv = std::fs::read_to_string(dir.join("trajectory.csv")).unwrap();
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    for col in ["selection_clean_tie", "selection_noisy_tie"] {
        let k = head.iter().position(|h| *h == col).expect(col);
        assert_eq!(row[k], "1", "{col}");
    }
    let k = head.iter().position(|h| *h == "selection_clean_R").unwrap();
    assert_eq!(row[k], "0");
}

/// `method = "auto"` is the default: the config keeps `auto`, the trajectory records the
/// method that ran (span on the default sizes at 300 steps, direct where d is small),
/// and `--method direct|span|auto` chooses on the command line (issue 17, item 6).
#[test]
fn auto_method_is_recorded_resolved() {
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join("small.toml");
    std::fs::write(&small, "d = 25\n").unwrap();
    for (extra, config, ran) in [
        (vec![], "auto", "span"),
        (vec!["--method", "direct"], "direct", "direct"),
        (vec!["--method", "auto"], "auto", "span"),
        (vec!["--config", small.to_str().unwrap()], "auto", "direct"),
    ] {
        let dir = tmp.path().join(format!("{config}-{ran}"));
        let mut args = vec![
            "run",
            "--quiet",
            "--steps",
            "300",
            "--out",
            dir.to_str().unwrap(),
        ];
        args.extend(&extra);
        let o = tokensel(&args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        let text = std::fs::read_to_string(dir.join("trajectory.json")).unwrap();
        let t: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(t["config"]["method"], config, "{extra:?}");
        assert_eq!(t["trainer"]["method"], ran, "{extra:?}");
    }
    let o = tokensel(&["run", "--method", "fastest"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("auto, direct, span"), "{}", stderr(&o));
}

#[test]
fn out_dir_gets_json_and_csv_trajectories() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("traj");
    let o = tokensel(&[
        "run",
        "--steps",
        "100",
        "--quiet",
        "--out",
        dir.to_str().unwrap(),
        "--json",
    ]);
    let summary = json(&o);
    let text = std::fs::read_to_string(dir.join("trajectory.json")).unwrap();
    let t = tokensel::prelude::Trajectory::from_json(&text, &dir).unwrap();
    assert_eq!(t.digest(), summary["trajectory_digest"].as_str().unwrap());
    let csv = std::fs::read_to_string(dir.join("trajectory.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), t.checkpoints.len() + 1);
    let width = rows[0].split(',').count();
    assert!(rows.iter().all(|r| r.split(',').count() == width));
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["tokensel-set.json", "trajectory.csv", "trajectory.json"],
        "the set and its marker, no temporary files"
    );
}

fn bad_config(body: &str) -> Output {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bad.toml");
    std::fs::write(&path, body).unwrap();
    tokensel(&["run", "--quiet", "--config", path.to_str().unwrap()])
}

/// Bad input: exit code 2, a message naming the field, no panic.
#[test]
fn bad_configs_are_refused_with_the_field_named() {
    let cases = [
        ("d = 0", "`d`"),
        ("eta = 1.0", "`eta`"),
        ("eta = -0.1", "`eta`"),
        ("sigma = nan", "`sigma`"),
        ("step_size = inf", "`step_size`"),
        ("mu_norm = 0.0", "`mu_norm`"),
        ("n_train = 0", "`n_train`"),
        ("[layout]\nirrelevant = 4", "`layout`"),
        (
            "[layout]\ntokens = 0\nrelevant = 0\nweak_same = 0\nweak_opposite = 0\nirrelevant = 0",
            "`layout.tokens`",
        ),
        ("colour = 3", "colour"),
        ("[init]\nq = \"zero\"", "q"),
        ("d = \"big\"", "d"),
        ("d = -5", "d"),
        ("mode = \"q\"", "mode"),
        ("mode = \"W\"", "`init.p`"),
        ("seed = ", "line 1"),
        ("n_test = 0", "`n_test`"),
        ("sigma = -1.0", "`sigma`"),
        ("steps = 2000000000", "`steps`"),
        (
            "[record]\ncheckpoints_per_decade = 0",
            "`record.checkpoints_per_decade`",
        ),
        ("[init]\np_scale = -1.0", "`init.p_scale`"),
        ("d = 1", "`d`"),
        ("signals = \"diagonal\"", "signals"),
        ("flips = \"sometimes\"", "flips"),
        ("[layout]\ntokens = \"8\"", "tokens"),
        ("eta = nan", "`eta`"),
        ("rho = inf", "`rho`"),
        ("[layout", "line 1"),
        ("d = 1e3", "d"),
        ("seed = -1", "seed"),
        ("mu_norm = -5.0", "`mu_norm`"),
        ("formulation = \"fast\"", "formulation"),
        ("[init]\nw = \"random\"", "w"),
        ("rho = 1e300", "`rho`"),
        ("rho = -0.5", "`rho`"),
        ("mu_norm = 1e155", "`mu_norm`"),
        (
            "[record]\ncheckpoints_per_decade = 1000000000",
            "`record.checkpoints_per_decade`",
        ),
        ("method = \"span\"\nformulation = \"naive\"", "`method`"),
    ];
    for (body, needle) in cases {
        let o = bad_config(body);
        let err = stderr(&o);
        assert_eq!(
            o.status.code(),
            Some(2),
            "`{body}` → exit {:?}: {err}",
            o.status.code()
        );
        assert!(
            err.contains(needle),
            "`{body}`: message does not name {needle}: {err}"
        );
        assert!(!err.contains("panicked"), "`{body}` panicked: {err}");
        assert!(o.stdout.is_empty(), "`{body}` printed output");
    }
}

#[test]
fn bad_flags_and_files_exit_2() {
    for args in [
        vec!["run", "--steps", "many"],
        vec!["run", "--frobnicate"],
        vec!["run", "--preset", "nope"],
        vec!["run", "--config", "/nonexistent/config.toml"],
        vec!["fly"],
        vec!["compare", "--prec", "10"],
        vec!["compare", "--tol", "0"],
        vec!["compare", "--tol", "nan"],
        vec!["compare", "--predictor-steps", "x"],
        vec!["saturation", "--sample", "99"],
        vec!["saturation", "--points", "1"],
        vec!["run", "--seed", "-3"],
        vec!["sweep", "--seeds", "a"],
        vec!["sweep", "--etas", "0.2,x"],
        vec!["run", "--config"],
        vec!["twin", "--prec", "2000000"],
        vec!["compare", "--prec", "2"],
    ] {
        let o = tokensel(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn sweep_writes_csv_json_and_svg() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("tiny.toml");
    std::fs::write(
        &cfg,
        "d = 30\nn_train = 10\nn_test = 40\nmu_norm = 5.0\nsteps = 40\n",
    )
    .unwrap();
    let dir = tmp.path().join("sweep");
    let o = tokensel(&[
        "sweep",
        "--quiet",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--etas",
        "0.1,0.3",
        "--seeds",
        "0,1",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let v = json(&o);
    assert_eq!(v["runs"].as_array().unwrap().len(), 4);
    assert_eq!(v["points"].as_array().unwrap().len(), 2);
    assert_eq!(
        v["config"]["layout"]["relevant"], 2,
        "sweep defaults to the sweep preset"
    );
    let csv = std::fs::read_to_string(dir.join("sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5);
    let svg = std::fs::read_to_string(dir.join("sweep.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("polyline"));
    let bad = tokensel(&["sweep", "--etas", "1.5", "--quiet"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("`eta`"));
}

/// Non-finite guard: a step so large that q overflows stops the run with exit code 1
/// and a message naming the step, the quantity and the sample; nothing on stdout.
#[test]
fn non_finite_values_stop_the_run_with_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("huge.toml");
    std::fs::write(
        &cfg,
        "d = 20\nn_train = 4\nn_test = 4\nstep_size = 1.7e308\nsteps = 10\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = tokensel(&[
        "run",
        "--quiet",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("non-finite output at step 1, training sample 0"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    assert!(
        !out.join("trajectory.json").exists(),
        "no trajectory written for a failed run"
    );
}

/// A twin whose MPFR state would not fit in memory is refused before allocation, with
/// the size stated.
#[test]
fn oversized_twin_runs_are_refused_up_front() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("wide.toml");
    std::fs::write(&cfg, "d = 2000000\nn_train = 20\nn_test = 1\n").unwrap();
    // the span state holds (nT + 1) x d basis numbers: ~175 GB at 4096 bits
    for cmd in ["twin", "compare"] {
        let o = tokensel(&[
            cmd,
            "--quiet",
            "--prec",
            "4096",
            "--method",
            "span",
            "--config",
            cfg.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(3), "{cmd}: {}", stderr(&o));
        assert!(stderr(&o).contains("GiB"), "{}", stderr(&o));
    }
    // an oversized data set: refused (exit 3) with the size stated
    let o = bad_config("d = 100000000\nn_test = 100000");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("GiB"), "{}", stderr(&o));
}

/// The exit-code contract (README): bad input of every kind exits 2, quickly, without
/// a panic and before any training: a directory, garbage or NUL bytes where a file is
/// read, a trajectory without checkpoints, an unbounded sweep grid, an output path that
/// cannot be written, a state file in a missing directory or belonging to another run.
#[test]
fn bad_input_of_every_kind_exits_2_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |name: &str| tmp.path().join(name).to_str().unwrap().to_string();
    std::fs::create_dir(p("d.toml")).unwrap();
    std::fs::write(p("garbage"), "\u{1}\u{2}not toml or json {{{").unwrap();
    std::fs::write(p("nul"), [0u8, 0, 0, 159, 146, 150]).unwrap();
    // a trajectory with no checkpoints
    let t = tokensel(&["run", "--quiet", "--steps", "3", "--out", &p("t")]);
    assert!(t.status.success(), "{}", stderr(&t));
    let text = std::fs::read_to_string(p("t/trajectory.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut empty = v.clone();
    empty["checkpoints"] = serde_json::json!([]);
    std::fs::write(p("empty.json"), empty.to_string()).unwrap();
    std::fs::write(p("existing-state.json"), "{}").unwrap();
    let traj = p("t/trajectory.json");
    let cases: Vec<Vec<String>> = vec![
        vec!["check".into(), p("d.toml")],
        vec!["check".into(), p("garbage")],
        vec!["check".into(), p("nul")],
        vec!["run".into(), "--config".into(), p("d.toml")],
        vec!["run".into(), "--config".into(), p("garbage")],
        vec!["run".into(), "--config".into(), p("nul")],
        vec!["diff".into(), p("garbage"), traj.clone()],
        vec!["diff".into(), traj.clone(), p("nul")],
        vec!["diff".into(), p("d.toml"), traj.clone()],
        vec!["plot".into(), p("nul"), "--out".into(), p("x.svg")],
        vec!["plot".into(), p("empty.json"), "--out".into(), p("x.svg")],
        vec![
            "run".into(),
            "--steps".into(),
            "20000".into(),
            "--out".into(),
            "/sys/kernel/x".into(),
        ],
        vec!["run".into(), "--out".into(), p("garbage")],
        vec![
            "twin".into(),
            "--steps".into(),
            "4".into(),
            "--state".into(),
            p("existing-state.json"),
        ],
        vec![
            "twin".into(),
            "--steps".into(),
            "4".into(),
            "--state".into(),
            p("d.toml"),
        ],
    ];
    for args in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let t0 = std::time::Instant::now();
        let o = tokensel(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "{args:?} worked before refusing"
        );
    }
}

/// `run --out` publishes trajectory.json and trajectory.csv as one set (more in
/// tests/files.rs): a directory holding a file tokensel did not write is refused and
/// left as it is; an empty directory receives the set, and the CSV beside the JSON has
/// one row per checkpoint of that JSON. A twin run whose step count is not a multiple of
/// --save-every still saves its final state.
#[test]
fn outputs_are_published_as_a_complete_set() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("trajectory.csv"), "from another run\n").unwrap();
    let o = tokensel(&["run", "--quiet", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("trajectory.csv"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(out.join("trajectory.csv")).unwrap(),
        "from another run\n"
    );
    std::fs::remove_file(out.join("trajectory.csv")).unwrap();
    let o = tokensel(&[
        "run",
        "--quiet",
        "--steps",
        "40",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trajectory.json")).unwrap())
            .unwrap();
    let rows = std::fs::read_to_string(out.join("trajectory.csv"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(rows, v["checkpoints"].as_array().unwrap().len() + 1);
    let state = tmp.path().join("s.json");
    let cfg = tmp.path().join("small.toml");
    std::fs::write(&cfg, "d = 20\nn_train = 4\nn_test = 4\n").unwrap();
    // the final state is saved although 7 is not a multiple of --save-every 5; a state in
    // a directory that does not exist yet: the directory is created, the state saved
    let nested = tmp.path().join("nodir").join("s.json");
    for (path, steps) in [(&state, "7"), (&nested, "4")] {
        let o = tokensel(&[
            "twin",
            "--quiet",
            "--prec",
            "64",
            "--steps",
            steps,
            "--save-every",
            "5",
            "--state",
            path.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let saved: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(saved["step"].to_string(), steps);
    }
}

/// When score gaps pass MPFR's own exponent range the compare report says the judge is
/// out of range instead of reporting agreement on underflowed zeros.
#[test]
fn compare_flags_a_judge_out_of_range() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("wild.toml");
    std::fs::write(
        &cfg,
        "d = 20\nn_train = 4\nn_test = 4\nstep_size = 1e305\nsteps = 3\n",
    )
    .unwrap();
    let v = json(&tokensel(&[
        "compare",
        "--quiet",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
    ]));
    assert_eq!(v["judge_out_of_range"], 1);
    let ok = json(&tokensel(&[
        "compare", "--quiet", "--json", "--steps", "3", "--prec", "128",
    ]));
    assert!(ok["judge_out_of_range"].is_null());
    assert_eq!(ok["prec_bits"], 128);
    assert_eq!(ok["predictor"]["steps"], 3, "the prefix: min(1000, steps)");
    for key in [
        "max_rel_err",
        "first_exceed",
        "saturation",
        "error_ulps",
        "predictor",
    ] {
        assert!(ok.get(key).is_some(), "missing {key}");
    }
}

/// `diff`: identical files are bit-identical (exit 0); f64 vs the 128-bit twin agree to
/// 1e-12 but not bit for bit (exit 0); two seeds diverge at step 0 (exit 1); a corrupted
/// file is bad input (exit 2). `plot` draws both kinds of input as SVG.
#[test]
fn diff_and_plot_saved_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    std::fs::write(
        p("small.toml"),
        "d = 60\nn_train = 8\nn_test = 40\nmu_norm = 5.0\n",
    )
    .unwrap();
    let cfg = p("small.toml");
    for (cmd, dir, seed) in [("run", "a", "0"), ("twin", "b", "0"), ("run", "c", "1")] {
        let o = tokensel(
            &[
                cmd,
                "--quiet",
                "--config",
                &cfg,
                "--steps",
                "20",
                "--prec",
                "128",
                "--seed",
                seed,
                "--out",
                &p(dir),
            ]
            .iter()
            .copied()
            .filter(|a| cmd == "twin" || (*a != "--prec" && *a != "128"))
            .collect::<Vec<_>>(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let traj = |d: &str| format!("{}/trajectory.json", p(d));
    let same = json(&tokensel(&["diff", "--json", &traj("a"), &traj("a")]));
    assert_eq!(same["bit_identical"], true);
    let twin = tokensel(&["diff", "--json", &traj("a"), &traj("b")]);
    let v = json(&twin);
    assert_eq!(v["bit_identical"], false);
    assert!(v["first_divergence"].is_null(), "{v}");
    let seeds = tokensel(&["diff", "--json", &traj("a"), &traj("c")]);
    assert_eq!(seeds.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&seeds.stdout).unwrap();
    assert_eq!(v["first_divergence"], 0);
    std::fs::write(p("bad.json"), "{\"format\": ").unwrap();
    assert_eq!(
        tokensel(&["diff", &traj("a"), &p("bad.json")])
            .status
            .code(),
        Some(2)
    );

    let o = tokensel(&["plot", &traj("a"), "--out", &p("att.svg")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let svg = std::fs::read_to_string(p("att.svg")).unwrap();
    assert_eq!(
        svg.matches("<polyline").count(),
        8,
        "4 groups x clean/noisy"
    );
    let report = tokensel(&[
        "compare", "--quiet", "--json", "--config", &cfg, "--steps", "5", "--prec", "128",
    ]);
    std::fs::write(p("report.json"), &report.stdout).unwrap();
    assert!(
        tokensel(&["plot", &p("report.json"), "--out", &p("err.svg")])
            .status
            .success()
    );
    assert!(
        std::fs::read_to_string(p("err.svg"))
            .unwrap()
            .contains("relative error")
    );
    let o = tokensel(&["plot", &traj("a"), "--out", &p("x.png")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let png = std::fs::read(p("x.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png.len() > 5000, "a real picture, not an empty canvas");
    assert_eq!(
        tokensel(&["plot", &traj("a"), "--out", &p("x.jpg")])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        tokensel(&["plot", &p("bad.json"), "--out", &p("y.svg")])
            .status
            .code(),
        Some(2)
    );
}

/// `diff` compares everything two trajectories hold: changing any one recorded number
/// (top-level, attention and selection per group, cumulative sums, every per-sample
/// field), a label, or a config key makes it exit 1 and name what differs; so does a
/// different checkpoint set (unless `--common-only`) and an empty intersection.
#[test]
fn diff_sees_a_change_in_every_field() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    let o = tokensel(&["run", "--quiet", "--steps", "30", "--out", &p("a")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let a = p("a/trajectory.json");
    let base: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    let fields = [
        ("/checkpoints/2/train_loss", "train_loss"),
        ("/checkpoints/2/test_accuracy", "test_accuracy"),
        ("/checkpoints/2/q_norm", "q_norm"),
        ("/checkpoints/2/grad_norm", "grad_norm"),
        ("/checkpoints/2/attention/clean/R", "attention.clean.R"),
        ("/checkpoints/2/attention/noisy/I", "attention.noisy.I"),
        (
            "/checkpoints/2/selection/clean/W_same",
            "selection.clean.W_same",
        ),
        ("/checkpoints/2/cumulative/noisy", "cumulative.noisy"),
        (
            "/checkpoints/2/cumulative/class_pos",
            "cumulative.class_pos",
        ),
        ("/checkpoints/2/samples/3/f", "samples.f"),
        ("/checkpoints/2/samples/3/gap", "samples.gap"),
        ("/checkpoints/2/samples/3/rest", "samples.rest"),
        (
            "/checkpoints/2/samples/3/selection_score",
            "samples.selection_score",
        ),
        (
            "/checkpoints/2/samples/3/mass/W_opposite",
            "samples.mass.W_opposite",
        ),
        ("/checkpoints/2/samples/3/top", "samples.top"),
        ("/y/5", "labels"),
        ("/config/rho", "rho"),
        ("/config/init/p_scale", "init.p_scale"),
    ];
    for (pointer, name) in fields {
        let mut v = base.clone();
        let x = v.pointer_mut(pointer).unwrap();
        *x = match x {
            serde_json::Value::Number(n) if n.is_u64() && pointer.ends_with("top") => {
                serde_json::json!((n.as_u64().unwrap() + 1) % 8)
            }
            serde_json::Value::Number(n) if pointer.starts_with("/y/") => {
                serde_json::json!(-n.as_i64().unwrap())
            }
            serde_json::Value::Number(n) => serde_json::json!(n.as_f64().unwrap() * 0.5 + 0.25),
            other => panic!("{pointer}: {other}"),
        };
        std::fs::write(p("b.json"), v.to_string()).unwrap();
        let o = tokensel(&["diff", "--json", &a, &p("b.json")]);
        assert_eq!(o.status.code(), Some(1), "{pointer}: {}", stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let named = r["first_quantity"] == name
            || (name == "labels" && r["labels_differ"] == true)
            || r["config_differences"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k == name);
        assert!(named, "{pointer}: {r}");
    }
    // a non-finite value against a finite one (and NaN against a number) is an infinite
    // deviation, never one that `max` drops: the verdict differs and the table says inf
    for (pointer, word, name) in [
        ("/checkpoints/3/samples/0/gap", "inf", "samples.gap"),
        ("/checkpoints/5/samples/1/f", "nan", "samples.f"),
        ("/checkpoints/4/samples/2/mass/R", "nan", "samples.mass.R"),
        ("/checkpoints/2/train_loss", "nan", "train_loss"),
    ] {
        let mut v = base.clone();
        *v.pointer_mut(pointer).unwrap() = serde_json::json!(word);
        std::fs::write(p("nf.json"), v.to_string()).unwrap();
        let o = tokensel(&["diff", "--json", &a, &p("nf.json")]);
        assert_eq!(o.status.code(), Some(1), "{pointer}: {}", stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(r["first_quantity"], name, "{pointer}: {r}");
        assert_eq!(r["max_rel_dev"][name], "inf", "{pointer}: {r}");
    }
    // another checkpoint set: a divergence, unless --common-only
    let o = tokensel(&["run", "--quiet", "--steps", "30", "--out", &p("c")]);
    assert!(o.status.success());
    let mut v = base.clone();
    v["checkpoints"].as_array_mut().unwrap().pop();
    std::fs::write(p("fewer.json"), v.to_string()).unwrap();
    let o = tokensel(&["diff", "--json", &a, &p("fewer.json")]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let o = tokensel(&["diff", "--json", "--common-only", &a, &p("fewer.json")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // runs of different lengths: the config (steps) and the checkpoint sets differ
    let o = tokensel(&["run", "--quiet", "--steps", "12", "--out", &p("d")]);
    assert!(o.status.success());
    let o = tokensel(&["diff", &a, &p("d/trajectory.json")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("steps"));
}

/// A diverging f64 run (step size 1e308) stops where it always did: the top token's
/// exp(z_top - z_top) is set to 1 exactly in the point arithmetics even where z_top is
/// infinite (computing it gave NaN and stopped the run a step early, "non-finite output
/// at step 1"), so the softmax shift of the ball arithmetic changes no f64 bit.
#[test]
fn a_diverging_run_stops_where_it_always_did() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("div.toml");
    std::fs::write(
        &cfg,
        "d = 10\nn_test = 5\nsteps = 50\nstep_size = 1e308\nmode = \"joint\"\nmethod = \"direct\"\n",
    )
    .unwrap();
    let o = common::tokensel(&["run", "--config", cfg.to_str().unwrap(), "--quiet"]);
    assert_eq!(o.status.code(), Some(3));
    let err = common::stderr(&o);
    assert!(err.contains("non-finite q at step 2"), "{err}");
}

/// The trajectory.json of a 5-step run of a small config, written under `dir`.
fn small_trajectory(dir: &std::path::Path) -> std::path::PathBuf {
    common::run_out(dir, "a", "d = 20\nn_train = 4\nn_test = 10\nsteps = 5\n")
}

/// `diff` does not ignore the `trainer` block: the same numbers under another trainer
/// (its method edited) are listed as "trainers differ in: method" and not
/// "bit-identical" (they were reported bit-identical with nothing said).
#[test]
fn diff_reports_trainer_differences() {
    let tmp = tempfile::tempdir().unwrap();
    let a = small_trajectory(tmp.path());
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    v["trainer"]["method"] = "span".into();
    let b = tmp.path().join("b.json");
    std::fs::write(&b, serde_json::to_string(&v).unwrap()).unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let o = tokensel(&["diff", "--json", a, b]);
    let r: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", stderr(&o)));
    assert_eq!(
        r["trainer_differences"],
        serde_json::json!(["method"]),
        "{r}"
    );
    assert_eq!(r["bit_identical"], false, "{r}");
    let o = tokensel(&["diff", a, b]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(r#"trainers differ in: method: "direct" -> "span""#),
        "{text}"
    );
    assert_eq!(
        r["trainer_changes"],
        serde_json::json!([{"key": "method", "a": "direct", "b": "span"}]),
        "{r}"
    );
    assert!(!text.contains("bit-identical"), "{text}");
    let same = tokensel(&["diff", "--json", a, a]);
    let r: serde_json::Value = serde_json::from_slice(&same.stdout).unwrap();
    assert_eq!(r["bit_identical"], true);
}

/// A trajectory whose recorded shares leave [0, 1] (an attention share of -3.0, a
/// sample's mass of 2, an accuracy of 7) is refused by its reader (`plot`, `diff`: exit 2)
/// instead of drawn (`plot` drew -3.0).
#[test]
fn trajectory_readers_check_the_shares_range() {
    let tmp = tempfile::tempdir().unwrap();
    let a = small_trajectory(tmp.path());
    let fig = tmp.path().join("f.svg");
    let plot = |p: &std::path::Path| {
        tokensel(&["plot", "--out", fig.to_str().unwrap(), p.to_str().unwrap()])
    };
    let o = plot(&a);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let edits: Vec<(&str, Edit)> = vec![
        (
            "attention",
            Box::new(|v| v["checkpoints"][1]["attention"]["clean"]["R"] = (-3.0).into()),
        ),
        (
            "mass",
            Box::new(|v| v["checkpoints"][0]["samples"][0]["mass"]["I"] = 2.0.into()),
        ),
        (
            "train_accuracy",
            Box::new(|v| v["checkpoints"][0]["train_accuracy"] = 7.0.into()),
        ),
    ];
    for (what, edit) in edits {
        let mut e = v.clone();
        edit(&mut e);
        let b = tmp.path().join("b.json");
        std::fs::write(&b, serde_json::to_string(&e).unwrap()).unwrap();
        let o = plot(&b);
        assert_eq!(o.status.code(), Some(2), "{what}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("outside [0, 1]"),
            "{what}: {}",
            stderr(&o)
        );
        let o = tokensel(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{what}: {}", stderr(&o));
    }
}

/// A truth-twin precision of 53 bits is refused (exit 2) with a message that points to
/// the f64 predictor by a command line the CLI accepts (it once named a `--predictor`
/// flag without its command, which `compare` does not have): the command the message
/// names, run as it is given, trains.
#[test]
fn the_53_bit_refusal_names_a_command_line_the_cli_accepts() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("small.toml");
    std::fs::write(&cfg, "d = 20\nn_train = 4\nn_test = 4\nmu_norm = 5.0\n").unwrap();
    let cfg = cfg.to_str().unwrap();
    for cmd in ["twin", "compare"] {
        let o = tokensel(&[cmd, "--prec", "53", "--steps", "2", "--config", cfg]);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
        let err = stderr(&o);
        let named = err
            .split('`')
            .find(|part| part.starts_with("tokensel "))
            .unwrap_or_else(|| panic!("{cmd}: no `tokensel ...` command named: {err}"));
        let mut args: Vec<&str> = named.split_whitespace().skip(1).collect();
        assert!(args.iter().any(|a| a.starts_with("--")), "{named}");
        args.extend(["--steps", "2", "--quiet", "--config", cfg]);
        let o = tokensel(&args);
        assert_eq!(o.status.code(), Some(0), "{named}: {}", stderr(&o));
    }
}

/// examples/numpy_multiclass_step.py (the NumPy peer of the K-class step, docs/benchmarks.md, "Cost";
/// where the CI's NumPy venv is there: TOKENSEL_PYTHON): `--help` answers with its usage,
/// bad arguments are refused argparse style (exit 2, naming the flag, no traceback),
/// and a tiny timing (one BLAS thread, `--threads 1` as the README measures) prints one
/// line per K and method in the documented form.
#[test]
fn numpy_multiclass_step_peer_answers_and_checks_its_arguments() {
    let Ok(python) = std::env::var("TOKENSEL_PYTHON") else {
        eprintln!("TOKENSEL_PYTHON not set: examples/numpy_multiclass_step.py not run");
        return;
    };
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/numpy_multiclass_step.py");
    let run = |args: &[&str]| {
        std::process::Command::new(&python)
            .arg(&script)
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&["--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let help = String::from_utf8_lossy(&o.stdout).to_string();
    for flag in ["--classes", "--method", "--steps", "--reps", "--threads"] {
        assert!(help.contains(flag), "{help}");
    }
    for (args, says) in [
        (
            &["--classes", "1"][..],
            "--classes: K must lie in 2..100, got 1",
        ),
        (&["--classes", "2,x"][..], "--classes"),
        (&["--steps", "0"][..], "--steps must lie in 1..100000"),
        (&["--method", "both2"][..], "--method"),
    ] {
        let o = run(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(says) && !err.contains("Traceback"),
            "{args:?}: {err}"
        );
    }
    let o = run(&[
        "--classes",
        "3",
        "--steps",
        "2",
        "--reps",
        "1",
        "--threads",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    for (line, m) in lines.iter().zip(["direct", "span"]) {
        let head = format!("numpy_multiclass_step_us K=3 T=9 {m} ");
        let us: f64 = line.strip_prefix(&head).expect(line).parse().unwrap();
        assert!(us > 0.0, "{line}");
    }
}

/// Errors about a command-line argument or a claim's field are not called "invalid
/// config" (issue 40): an argument's say "invalid argument" and name it, a claim
/// field's name the claim and the field; the exit code stays 2.
#[test]
fn argument_and_claim_errors_are_not_config_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t = small_trajectory(dir);
    let t = t.to_str().unwrap();
    let state = dir.join("state.json");
    let claims = dir.join("claims.toml");
    std::fs::write(
        &claims,
        "[[claim]]\nname = \"late\"\nconfig = { d = 20, n_train = 4, n_test = 4, steps = 3 }\n\
         source = \"run\"\nquantity = \"train_accuracy\"\nop = \">=\"\nbound = 0.0\nstep = 9\n",
    )
    .unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let small_cfg = "d = 20\nn_train = 4\nn_test = 4\nmu_norm = 5.0\nsteps = 2\n";
    let small = &write("small.toml", small_cfg);
    let no_w_opposite = &write(
        "no_w.toml",
        &format!("{small_cfg}[layout]\nweak_opposite = 0\nirrelevant = 6\n"),
    );
    // a pattern file's errors name the file (it is read, not a flag's value)
    let short = &write("short.json", "[0, 0, 0]");
    let past_t = &write("past_t.json", "[0, 0, 0, 99]");
    let existing = &write("existing.json", "{}");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["plot", t, "--out", "x.txt"],
            "invalid argument `--out`",
        ),
        (
            // two are overlaid; nine are more than a figure draws
            vec!["plot", t, t, t, t, t, t, t, t, t, "--out", "x.svg"],
            "invalid argument `MORE`: 9 trajectories given; a figure overlays at most 8",
        ),
        (
            vec!["twin", "--steps", "2", "--save-every", "0", "--quiet"],
            "invalid argument `--save-every`",
        ),
        (
            vec!["twin", "--steps", "2", "--resume", "--quiet"],
            "invalid argument `--resume`",
        ),
        (
            vec!["saturation", "--points", "1"],
            "invalid argument `--points`",
        ),
        (
            vec!["saturation", "--sample", "1000"],
            "invalid argument `--sample`",
        ),
        (
            vec![
                "twin",
                "--steps",
                "2",
                "--prec",
                "10",
                "--quiet",
                "--state",
                state.to_str().unwrap(),
            ],
            "invalid argument `prec`",
        ),
        (vec!["diff", "--rtol=-1", t, t], "invalid argument `rtol`"),
        (vec!["run", "--preset", "nope"], "invalid argument `preset`"),
        (
            vec!["check", claims.to_str().unwrap()],
            "claim 1 (`late`): `step`: 9 is past the run's 3 steps",
        ),
        (
            vec!["twin", "--steps", "2", "--quiet", "--state", existing],
            "invalid argument `--state`: ",
        ),
        (vec!["cost", "--reps", "0"], "invalid argument `--reps`"),
        (
            vec!["cost", "--twin-reps", "0"],
            "invalid argument `--twin-reps`",
        ),
        (
            vec!["cost", "--precs", "64,64"],
            "invalid argument `--precs`",
        ),
        (vec!["cost", "--ball", "64,64"], "invalid argument `--ball`"),
        (
            vec!["cost", "--classes", "1"],
            "invalid argument `--classes`",
        ),
        (
            vec!["cost", "--classes", "3,3"],
            "invalid argument `--classes`",
        ),
        (
            vec!["svm", "--config", no_w_opposite, "--pattern", "theorem"],
            "invalid argument `--pattern`: the theorem pattern needs a W_opposite token",
        ),
        (
            vec!["svm", "--config", small, "--pattern", short],
            "the pattern file has 3 entries, the training set 4 samples",
        ),
        (
            vec!["svm", "--config", small, "--pattern", past_t],
            "entry 3 is 99, not a token index below T = 8",
        ),
    ];
    for (args, words) in cases {
        let o = tokensel(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {err}");
        assert!(!err.contains("invalid config"), "{args:?}: {err}");
    }
    for file in [short, past_t] {
        let o = tokensel(&["svm", "--config", small, "--pattern", file]);
        assert!(stderr(&o).contains(&format!("`{file}`")), "{}", stderr(&o));
    }
}

/// A grid's own fields (`seeds`, `name`, `[axes]`) are not config keys (issue 40): a
/// grid TOML's errors name the file and the field (`axes.KEY`), `--set`'s name the flag
/// and the key; exit 2, before any cell runs.
#[test]
fn grid_errors_name_the_grid_field_or_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let base = "[config]\nd = 20\nn_train = 4\nn_test = 4\nsteps = 2\n";
    let grid = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, format!("{text}\n{base}")).unwrap();
        path.to_str().unwrap().to_string()
    };
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    let not_key = grid("not_key.toml", "seeds = \"0\"\n[axes]\nnope = [1, 2]");
    let twice = grid("twice.toml", "seeds = \"0\"\n[axes]\neta = \"0.1,0.1\"");
    let listed_twice = grid("listed.toml", "seeds = \"0\"\n[axes]\nn_train = [4, 4]");
    let fractional = grid("frac.toml", "seeds = \"0\"\n[axes]\nd = [20.5]");
    let bad_name = grid("name.toml", "name = \"a\\u0007b\"\nseeds = \"0\"");
    let cases: Vec<(Vec<&str>, Vec<String>)> = vec![
        (
            vec!["grid", "--grid", &not_key, "--out", out],
            vec![
                format!("`{not_key}`"),
                "`axes.nope`: not a config key".into(),
            ],
        ),
        (
            vec!["grid", "--grid", &twice, "--out", out],
            vec![
                format!("`{twice}`"),
                "`axes.eta`: the value 0.1 appears twice".into(),
            ],
        ),
        (
            vec!["grid", "--grid", &listed_twice, "--out", out],
            vec![
                format!("`{listed_twice}`"),
                "`axes.n_train`: the value 4 appears twice".into(),
            ],
        ),
        (
            vec!["grid", "--grid", &fractional, "--out", out],
            vec![
                format!("`{fractional}`"),
                "`axes.d`: takes a non-negative integer".into(),
            ],
        ),
        (
            vec!["grid", "--grid", &bad_name, "--out", out],
            vec![format!("`{bad_name}`"), "`name`: ".into()],
        ),
        (
            vec!["grid", "--set", "nope=1,2", "--out", out],
            vec!["invalid argument `--set`: `nope`: not a config key".into()],
        ),
        (
            vec!["grid", "--set", "d=10,10", "--out", out],
            vec!["invalid argument `--set`: `d`: the value 10 appears twice".into()],
        ),
        (
            vec!["grid", "--set", "d=1:2", "--out", out],
            vec!["invalid argument `--set`: `d`: ".into()],
        ),
    ];
    for (args, words) in cases {
        let o = tokensel(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        for w in &words {
            assert!(err.contains(w.as_str()), "{args:?}: {err}");
        }
        assert!(!err.contains("invalid config"), "{args:?}: {err}");
        assert!(!std::path::Path::new(out).exists(), "{args:?}: work began");
    }
}

/// `svm`, `saturation` and `cost` take `--quiet` as the other computing commands do
/// (issue 40: they rejected it, exit 2); `cost --quiet` prints no "timing" lines.
#[test]
fn svm_saturation_and_cost_take_quiet() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("s.toml");
    std::fs::write(
        &cfg,
        "d = 20\nn_train = 4\nn_test = 4\nmu_norm = 5.0\nsteps = 2\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let o = tokensel(&["svm", "--quiet", "--config", cfg, "--pattern", "theorem"]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    let o = tokensel(&["saturation", "--quiet", "--config", cfg, "--points", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tokensel(&[
        "cost",
        "--quiet",
        "--config",
        cfg,
        "--precs",
        "64",
        "--reps",
        "1",
        "--twin-reps",
        "1",
        "--method",
        "direct",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("timing"), "{}", stderr(&o));
}

/// A data set over the memory limit is refused (exit 3) naming the largest of the
/// sizes that make it: an oversize `n_test` was "refused: `d`" (issue 40).
#[test]
fn the_data_limit_names_the_largest_size() {
    for (text, key) in [
        ("d = 20\nn_train = 4\nn_test = 1000000000\n", "`n_test`"),
        ("d = 20\nn_train = 1000000000\nn_test = 4\n", "`n_train`"),
        ("d = 1000000000\nn_train = 4\nn_test = 4\n", "`d`"),
    ] {
        let o = bad_config(text);
        assert_eq!(o.status.code(), Some(3), "{text}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("refused: {key}")),
            "{text}: {}",
            stderr(&o)
        );
    }
}

/// `plot` refuses, with exit 2 and the reason, what it cannot draw (issue 40): a
/// trajectory that holds only step 0 (it drew an empty chart: the step axis is
/// logarithmic), alone or under `--direction`, and a judge report (it failed with the
/// trajectory reader's message, never saying that judge reports are not plottable).
#[test]
fn plot_says_why_it_draws_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cfg = dir.join("s.toml");
    std::fs::write(
        &cfg,
        "d = 20\nn_train = 4\nn_test = 4\nmu_norm = 5.0\nsteps = 0\n",
    )
    .unwrap();
    let out = dir.join("t0");
    let o = tokensel(&[
        "run",
        "--quiet",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t0 = out.join("trajectory.json");
    let fig = dir.join("f.png");
    let o = tokensel(&["plot", t0.to_str().unwrap(), "--out", fig.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("only step 0"), "{}", stderr(&o));
    assert!(!fig.exists(), "no empty chart is written");
    // the same for a certificate of 0 steps (it drew empty polylines, exit 0)
    let cout = dir.join("c0");
    let o = tokensel(&[
        "certify",
        "--quiet",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        cout.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c0 = cout.join("certificate.json");
    let o = tokensel(&["plot", c0.to_str().unwrap(), "--out", fig.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the certificate holds only step 0"),
        "{}",
        stderr(&o)
    );
    assert!(!fig.exists(), "no empty chart is written");
    // the same under --direction
    let dcfg = dir.join("d.toml");
    std::fs::write(
        &dcfg,
        "d = 60\nn_train = 6\nn_test = 20\nmu_norm = 6.0\nsteps = 0\n[direction]\npattern = \"theorem\"\n",
    )
    .unwrap();
    let dout = dir.join("d0");
    let o = tokensel(&[
        "run",
        "--quiet",
        "--config",
        dcfg.to_str().unwrap(),
        "--out",
        dout.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let d0 = dout.join("trajectory.json");
    let o = tokensel(&[
        "plot",
        d0.to_str().unwrap(),
        "--direction",
        "--out",
        fig.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("only step 0"), "{}", stderr(&o));
    // a judge report (of the run's own step 0, in the format `judge` reads)
    let data = dir.join("data");
    let o = tokensel(&[
        "data",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        data.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let p0: ndarray::Array1<f64> = ndarray_npy::read_npy(data.join("p0.npy")).unwrap();
    let ext = dir.join("ext.json");
    let external = serde_json::json!({
        "format": "tokensel-external/2",
        "dtype": "float64",
        "config": {"d": 20, "steps": 0},
        "steps": [0],
        "p": [p0.to_vec()],
    });
    std::fs::write(&ext, external.to_string()).unwrap();
    let o = tokensel(&[
        "judge",
        "--quiet",
        "--json",
        "--no-enclosure",
        ext.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    let report = dir.join("judge.json");
    std::fs::write(&report, &o.stdout).unwrap();
    let o = tokensel(&[
        "plot",
        report.to_str().unwrap(),
        "--out",
        fig.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("judge reports are not plottable"),
        "{}",
        stderr(&o)
    );
}

/// `plot` refuses an `--out` that is one of its inputs, however it is spelled (it
/// replaced the input with the figure), and leaves the input as it was.
#[test]
fn plot_refuses_to_write_over_its_input() {
    let tmp = tempfile::tempdir().unwrap();
    let a = small_trajectory(tmp.path());
    // a trajectory under a figure's name, as the adversary's test had it
    let fig = tmp.path().join("traj.svg");
    std::fs::copy(&a, &fig).unwrap();
    let before = std::fs::read(&fig).unwrap();
    let dotted = format!("{}/./traj.svg", tmp.path().display());
    for args in [
        vec![
            "plot",
            fig.to_str().unwrap(),
            "--out",
            fig.to_str().unwrap(),
        ],
        vec![
            "plot",
            a.to_str().unwrap(),
            fig.to_str().unwrap(),
            "--out",
            &dotted,
        ],
    ] {
        let o = tokensel(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("writing it would replace that input"),
            "{}",
            stderr(&o)
        );
        assert_eq!(std::fs::read(&fig).unwrap(), before, "{args:?}");
    }
}
