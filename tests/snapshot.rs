//! `tokensel snapshot` run as a user's CI runs it (issue 42): a first check records a
//! pending snapshot and fails, `accept` makes it the accepted one, a check of the same
//! config is bit-identical, a changed config fails naming the change and a quantity with
//! its step, and the reviewed change accepted passes again. Then the refusals (exit 2
//! before any work) and the declared tolerance, which a check cannot loosen.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

mod common;
use common::{stderr, tokensel, tokensel_within};

/// A run of a few hundred steps at small sizes (well under a second).
const CONFIG: &str = "steps = 300\nd = 200\nn_test = 100\nstep_size = 0.001\n";

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn check(dir: &Path, cfg: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "snapshot",
        "check",
        dir.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
    ];
    args.extend(extra);
    tokensel(&args)
}

fn accept(dir: &Path) -> Output {
    tokensel(&["snapshot", "accept", dir.to_str().unwrap()])
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// A temporary directory with the CI's config written into it.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("ci.toml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let snap = tmp.path().join("snap");
    (tmp, cfg, snap)
}

/// The workflow, step by step, with each step's exit code and what it prints.
#[test]
fn a_ci_records_reviews_and_accepts() {
    let (_tmp, cfg, snap) = setup();
    // 1. first check: nothing accepted, the run is written as pending, exit 1
    let o = check(&snap, &cfg, &["--quiet"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("no accepted snapshot yet"), "{out}");
    assert!(out.contains("accept: tokensel snapshot accept"), "{out}");
    assert!(snap.join("pending/trajectory.json").is_file());
    assert!(snap.join("pending/snapshot.toml").is_file());
    assert!(!snap.join("accepted").exists(), "a check never records");
    // 2. accept
    let o = accept(&snap);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("300 steps"), "{out}");
    assert!(out.contains("changed: first accepted snapshot"), "{out}");
    assert!(
        !snap.join("pending").exists(),
        "the accepted pending set is removed"
    );
    let digest = out
        .split("digest ")
        .nth(1)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(digest.len(), 64, "{out}");
    // 3. the same config again: bit-identical, exit 0, the digest printed
    let o = check(&snap, &cfg, &[]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("bit-identical"), "{out}");
    assert!(out.contains(&digest), "{out}");
    assert!(!snap.join("pending").exists());
    // 4. a changed step size: exit 1, the change with both values, a quantity and its step
    std::fs::write(&cfg, CONFIG.replace("0.001", "0.002")).unwrap();
    let o = check(&snap, &cfg, &[]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("DIFFERS"), "{out}");
    assert!(
        out.contains("configs differ in: step_size: 0.001 -> 0.002"),
        "{out}"
    );
    assert!(
        out.contains("first divergence: step 1 in `train_loss`"),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("train_loss "))
        .unwrap_or_else(|| panic!("no train_loss row: {out}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert!(cols[1].parse::<f64>().unwrap() > 1e-12, "{row}");
    assert!(cols[2].parse::<u64>().unwrap() <= 300, "{row}");
    assert!(
        out.contains(&format!(
            "tokensel diff {}/accepted/trajectory.json",
            snap.display()
        )),
        "{out}"
    );
    // the accepted snapshot is unchanged, the new run is pending
    let o = check(&snap, &cfg, &[]);
    assert_eq!(code(&o), 1, "still unreviewed: {}", stdout(&o));
    // 5. the reviewed change accepted, named in one line
    let o = accept(&snap);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("changed: config step_size: 0.001 -> 0.002;"),
        "{out}"
    );
    assert!(out.contains("quantities differ (largest `"), "{out}");
    // 6. and the check passes again
    let o = check(&snap, &cfg, &[]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("bit-identical"), "{}", stdout(&o));
    // a check that passes removes a stale pending snapshot of an earlier failed one
    std::fs::write(&cfg, CONFIG).unwrap();
    assert_eq!(code(&check(&snap, &cfg, &[])), 1);
    std::fs::write(&cfg, CONFIG.replace("0.001", "0.002")).unwrap();
    let o = check(&snap, &cfg, &[]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("removed the stale pending snapshot"));
    assert!(!snap.join("pending").exists());
    let o = tokensel(&["snapshot", "status", snap.to_str().unwrap()]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("pending: none"), "{}", stdout(&o));
}

/// `--rtol` on a check cannot loosen the declared tolerance: a different value is a
/// change to review (exit 1, written into the pending snapshot), and the accepted
/// snapshot keeps its tolerance until that change is accepted.
#[test]
fn the_declared_tolerance_is_changed_only_by_accepting() {
    let (_tmp, cfg, snap) = setup();
    assert_eq!(code(&check(&snap, &cfg, &[])), 1);
    assert_eq!(code(&accept(&snap)), 0);
    let manifest = || std::fs::read_to_string(snap.join("accepted/snapshot.toml")).unwrap();
    let before = manifest();
    let o = check(&snap, &cfg, &["--rtol", "1e-3"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("the declared tolerance changes: rtol 1e-12 (accepted) -> 1e-3"),
        "{out}"
    );
    assert_eq!(
        manifest(),
        before,
        "a check never changes the accepted snapshot"
    );
    // the loosened tolerance does not let a changed run pass either
    std::fs::write(&cfg, CONFIG.replace("0.001", "0.0010000001")).unwrap();
    let o = check(&snap, &cfg, &["--rtol", "1e-3"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    // the same --rtol as declared is no change
    std::fs::write(&cfg, CONFIG).unwrap();
    let o = check(&snap, &cfg, &["--rtol", "1e-12"]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    // accepted, the new tolerance is the snapshot's
    assert_eq!(code(&check(&snap, &cfg, &["--rtol", "1e-3"])), 1);
    let o = accept(&snap);
    assert!(
        stdout(&o).contains("changed: rtol 1e-12 -> 1e-3"),
        "{}",
        stdout(&o)
    );
    assert!(manifest().contains("rtol = 0.001"), "{}", manifest());
    assert_eq!(code(&check(&snap, &cfg, &[])), 0);
}

/// Bad input is refused with exit 2 before any work (a run of 10^9 steps would not end
/// within the limit), naming what is wrong, and nothing of the user's is removed.
#[test]
fn bad_snapshot_directories_are_refused_before_any_work() {
    let (tmp, cfg, snap) = setup();
    let long = tmp.path().join("long.toml");
    std::fs::write(&long, CONFIG.replace("300", "1000000000")).unwrap();
    let refused = |dir: &Path, why: &str| {
        let o = tokensel_within(
            &[
                "snapshot",
                "check",
                dir.to_str().unwrap(),
                "--config",
                long.to_str().unwrap(),
                "--quiet",
            ],
            Duration::from_secs(60),
        )
        .expect("refused before the run");
        assert_eq!(code(&o), 2, "{why}: {}{}", stdout(&o), stderr(&o));
        stderr(&o)
    };
    // DIR a file, a link
    let file = tmp.path().join("file");
    std::fs::write(&file, "mine").unwrap();
    assert!(refused(&file, "a file").contains("is not a directory"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    let link = tmp.path().join("link");
    std::fs::create_dir(&snap).unwrap();
    std::os::unix::fs::symlink(&snap, &link).unwrap();
    assert!(refused(&link, "a link").contains("symbolic link"));
    // a foreign file in DIR
    std::fs::write(snap.join("notes.txt"), "mine").unwrap();
    assert!(
        refused(&snap, "a foreign file").contains("`notes.txt`, which is not part of a snapshot")
    );
    assert_eq!(
        std::fs::read_to_string(snap.join("notes.txt")).unwrap(),
        "mine"
    );
    std::fs::remove_file(snap.join("notes.txt")).unwrap();
    // a real snapshot, then its manifest edited: another format, unreadable, a digest
    assert_eq!(code(&check(&snap, &cfg, &[])), 1);
    assert_eq!(code(&accept(&snap)), 0);
    let manifest = snap.join("accepted/snapshot.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    for (edited, says) in [
        (
            text.replace("tokensel-snapshot/1", "tokensel-snapshot/9"),
            "format `tokensel-snapshot/9` is not `tokensel-snapshot/1`",
        ),
        ("format = ".to_string(), "snapshot manifest"),
        (
            text.replace("digest = \"", "digest = \"0"),
            "its `digest` is not the one of",
        ),
        (
            text.replace("d = 200", "d = 300"),
            "its `config` is not the one",
        ),
        (format!("extra = 1\n{text}"), "unknown field `extra`"),
    ] {
        std::fs::write(&manifest, &edited).unwrap();
        let err = refused(&snap, says);
        assert!(err.contains(says), "{says}: {err}");
        assert_eq!(std::fs::read_to_string(&manifest).unwrap(), edited);
    }
    std::fs::write(&manifest, &text).unwrap();
    // a set of another kind where a snapshot's should be
    let o = tokensel(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        snap.join("pending").to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(refused(&snap, "a trajectory set").contains("pending"));
    assert!(snap.join("pending/trajectory.csv").is_file(), "not removed");
    // accept without a pending snapshot
    std::fs::remove_dir_all(snap.join("pending")).unwrap();
    let o = accept(&snap);
    assert_eq!(code(&o), 2, "{}", stdout(&o));
    assert!(
        stderr(&o).contains("holds no pending snapshot"),
        "{}",
        stderr(&o)
    );
    let o = accept(&tmp.path().join("absent"));
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("no such snapshot directory"),
        "{}",
        stderr(&o)
    );
    // a tolerance that is no tolerance
    let o = check(&snap, &cfg, &["--rtol", "0"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("--rtol"), "{}", stderr(&o));
}

/// `plot A B C --out FIG` overlays trajectories of one model: one legend entry per input
/// (its path ending, and the differing config key with its value), one line per input in
/// each of the eight panels (clean and noisy samples, four token groups), each input in
/// its own colour and dash pattern; a compare report or a K-class run among binary ones
/// is refused with exit 2 and the reason.
#[test]
fn plot_overlays_trajectories_with_one_legend_entry_each() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut inputs = Vec::new();
    for (name, eta) in [("a", "0.001"), ("b", "0.002"), ("c", "0.004")] {
        let config = CONFIG.replace("0.001", eta);
        inputs.push(common::run_out(d, name, &config));
    }
    let fig = d.join("overlay.svg");
    let mut args = vec!["plot"];
    args.extend(inputs.iter().map(|p| p.to_str().unwrap()));
    args.extend(["--out", fig.to_str().unwrap()]);
    let o = tokensel(&args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let svg = std::fs::read_to_string(&fig).unwrap();
    // a legend entry: its sample line at the legend column (x = 720 - 180 + 10)
    let entries: Vec<&str> = svg
        .lines()
        .filter(|l| l.starts_with(r#"<line x1="550" "#))
        .collect();
    assert_eq!(entries.len(), 3, "{svg}");
    for (k, name) in ["a", "b", "c"].iter().enumerate() {
        assert!(
            svg.contains(&format!(">{name}/trajectory.json</text>")),
            "{name}: {svg}"
        );
        // each entry in its own colour and dash pattern
        assert!(entries[k].contains(&format!(
            "stroke=\"{}\"",
            ["#1f77b4", "#d62728", "#2ca02c"][k]
        )));
        assert!(entries[k].contains(&format!(
            "stroke-dasharray=\"{}\"",
            ["none", "8 4", "2 3"][k]
        )));
    }
    for eta in ["0.001", "0.002", "0.004"] {
        assert!(svg.contains(&format!(">step_size = {eta}</text>")), "{eta}");
    }
    assert_eq!(
        svg.matches("<polyline").count(),
        8 * 3,
        "8 panels, 3 lines each"
    );
    // PNG too
    let png = d.join("overlay.png");
    let o = tokensel(&[
        "plot",
        inputs[0].to_str().unwrap(),
        inputs[1].to_str().unwrap(),
        "--out",
        png.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    // refusals: a K-class run among binary ones, a compare report, a 0-step run
    let k = common::run_out(
        d,
        "k3",
        &format!(
            "{CONFIG}[model]\nkind = \"multiclass\"\nclasses = 3\n[layout]\ntokens = 9\nweak_opposite = 2\n"
        ),
    );
    let report = d.join("report.json");
    let o = tokensel(&[
        "compare",
        "--config",
        d.join("a.toml").to_str().unwrap(),
        "--steps",
        "20",
        "--json",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(&report, &o.stdout).unwrap();
    let zero = common::run_out(d, "zero", &CONFIG.replace("steps = 300", "steps = 0"));
    for (other, says) in [
        (&k, "multiclass (K = 3)"),
        (&report, "a compare report"),
        (&zero, "holds only step 0"),
    ] {
        let out = d.join("refused.svg");
        let o = tokensel(&[
            "plot",
            inputs[0].to_str().unwrap(),
            other.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code(&o), 2, "{says}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{says}: {}", stderr(&o));
        assert!(!out.exists(), "{says}: nothing drawn");
    }
}
