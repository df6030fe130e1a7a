//! `tokensel grid`: sharded runs merge byte-identically (through GNU parallel where it
//! is installed: .ci/run installs it), an interrupted grid resumes, failing cells do not
//! stop the grid, bad input exits 2, and each cell's metrics agree with the trainer's own
//! trajectory (an independent code path: `Trainer::run` and `trajectory::Cumulative`).

use std::path::Path;
use std::process::Command;

use tokensel::prelude::Cumulative;
use tokensel::prelude::experiments::grid::{Spec, cell};

mod common;
use common::{run_f64, stderr, tokensel};

/// A small grid: 3 x 2 points, 2 seeds, 60 steps at a step size that fits the labels.
const GRID: &str = r#"
name = "small"
preset = "balanced"
seeds = "0..2"
steps = 60

[config]
n_train = 8
n_test = 40
step_size = 0.5
method = "span"

[axes]
d = "20:40:10"
mu_norm = [3.0, 8.0]
"#;

const OUTPUTS: [&str; 5] = [
    "grid.csv",
    "summary.csv",
    "summary.json",
    "heatmap.svg",
    "heatmap.png",
];

/// [`GRID`] narrowed to one point (d = 20, 5 steps), written into `dir` and run into
/// `dir/g` (which must succeed): the output directory and the grid file.
fn one_point_grid(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let out = dir.join("g");
    let text = GRID
        .replace("d = \"20:40:10\"", "d = \"20\"")
        .replace("steps = 60", "steps = 5");
    let grid = dir.join("grid.toml");
    std::fs::write(&grid, text).unwrap();
    let r = run_grid(&out, &grid, &[]);
    assert!(r.status.success(), "{}", stderr(&r));
    (out, grid)
}

fn run_grid(dir: &Path, grid: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "grid",
        "--grid",
        grid.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
        "--quiet",
    ];
    args.extend(extra);
    tokensel(&args)
}

/// A file of the grid directory's merged set (`DIR/merged/`).
fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join("merged").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// One run without shards and three shards (GNU parallel, 3 jobs) merge to the same
/// bytes; deleting a cell file and re-running runs that cell only, with the same result.
#[test]
fn shards_merge_byte_identically_and_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let grid = tmp.path().join("grid.toml");
    std::fs::write(&grid, GRID).unwrap();
    let whole = tmp.path().join("whole");
    let o = run_grid(&whole, &grid, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("runs ok 12, failed 0, missing 0"), "{text}");

    let sharded = tmp.path().join("sharded");
    let bin = env!("CARGO_BIN_EXE_tokensel");
    let have_parallel = Command::new("parallel").arg("--version").output().is_ok();
    if std::env::var("TOKENSEL_REQUIRE_PARALLEL").is_ok() {
        assert!(
            have_parallel,
            "GNU parallel is required here (.ci/run installs it)"
        );
    }
    if have_parallel {
        let o = Command::new("parallel")
            .args(["--will-cite", "--halt", "now,fail=1", "-j", "3"])
            .arg(format!(
                "{bin} grid --grid {} --out {} --quiet --shard {{}}/3",
                grid.display(),
                sharded.display()
            ))
            .args([":::", "1", "2", "3"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    } else {
        eprintln!("GNU parallel not installed: shards run one after another");
        for k in ["1/3", "2/3", "3/3"] {
            let o = run_grid(&sharded, &grid, &["--shard", k]);
            assert!(o.status.success(), "{}", stderr(&o));
        }
    }
    assert!(!sharded.join("merged").exists(), "a shard does not merge");
    let o = tokensel(&["grid", "merge", sharded.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    for name in OUTPUTS {
        assert_eq!(read(&whole, name), read(&sharded, name), "{name}");
    }

    // the examples' recipes: GNU parallel, and the Slurm array script run as tasks 1..3
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    if have_parallel {
        let dir = tmp.path().join("recipe-parallel");
        let o = Command::new("bash")
            .arg(examples.join("grid_parallel.sh"))
            .args([dir.to_str().unwrap(), "3", "--grid", grid.to_str().unwrap()])
            .env("TOKENSEL", bin)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        for name in OUTPUTS {
            assert_eq!(read(&whole, name), read(&dir, name), "{name}");
        }
    }
    let dir = tmp.path().join("recipe-slurm");
    for task in ["1", "2", "3"] {
        let o = Command::new("bash")
            .arg(examples.join("grid_slurm.sh"))
            .args([dir.to_str().unwrap(), "3", "--grid", grid.to_str().unwrap()])
            .env("TOKENSEL", bin)
            .env("SLURM_ARRAY_TASK_ID", task)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let o = tokensel(&["grid", "merge", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    for name in OUTPUTS {
        assert_eq!(read(&whole, name), read(&dir, name), "{name}");
    }

    // resume: one cell file lost, one run again, the same bytes
    let cells: Vec<_> = std::fs::read_dir(sharded.join("cells"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(cells.len(), 12);
    std::fs::remove_file(&cells[0]).unwrap();
    let o = tokensel(&["grid", "merge", sharded.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "a partial merge exits 1");
    let o = run_grid(&sharded, &grid, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("ran 1 of 12 runs (11 already done)"),
        "{}",
        stderr(&o)
    );
    for name in OUTPUTS {
        assert_eq!(read(&whole, name), read(&sharded, name), "{name}");
    }
}

/// Each cell's final accuracies, loss, selection and Eq. (9) ratio are those of the
/// trainer's own trajectory of the same config (`Trainer::run`, `Cumulative`); the
/// labels-fitted step is the first step at which a trajectory recorded at every step
/// fits every label.
#[test]
fn cell_metrics_agree_with_the_trajectory() {
    let spec = Spec::from_toml(GRID, Path::new("small.toml")).unwrap();
    for c in spec.cells().unwrap().into_iter().step_by(5) {
        let mut cfg = c.config.clone();
        let m = cell::run(&cfg, None).unwrap();
        cfg.record.checkpoints_per_decade = 1000; // every step up to 60
        let t = run_f64(&cfg);
        let end = t.last();
        assert_eq!(m.train_accuracy, end.train_accuracy);
        assert_eq!(m.test_accuracy, end.test_accuracy);
        assert_eq!(m.train_loss, end.train_loss);
        assert_eq!(m.clean_selection, end.selection.clean);
        assert_eq!(m.noisy_selection, end.selection.noisy);
        let noisy = t.y.iter().zip(&t.y_true).filter(|(a, b)| a != b).count();
        let cum: Cumulative = end.cumulative;
        let want = cum.clean_to_noisy(t.y.len() - noisy, noisy);
        match (m.eq9_ratio, want) {
            // the same sums, added in another order: a few ulps per step
            (Some(a), Some(b)) => assert!((a - b).abs() <= 1e-12 * b, "{a} vs {b}"),
            (a, b) => assert_eq!(a, b),
        }
        let fitted = t
            .checkpoints
            .iter()
            .find(|c| c.train_accuracy == 1.0)
            .map(|c| c.step);
        assert_eq!(m.fit_step, fitted);
        let regime = match (
            m.train_accuracy == 1.0,
            m.test_accuracy < cell::HARMFUL_BELOW,
        ) {
            (false, _) => cell::Regime::NotOverfitting,
            (true, true) => cell::Regime::Harmful,
            (true, false) => cell::Regime::Benign,
        };
        assert_eq!(m.regime, regime);
    }
}

/// A cell that stops (non-finite values at a huge step size) or is refused (a test set
/// over the data size limit) is reported as failed, and the other cells still run and
/// merge.
#[test]
fn failing_cells_do_not_stop_the_grid() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    let o = tokensel(&[
        "grid",
        "--set",
        "d=30",
        "--set",
        "n_test=40,100000000",
        "--set",
        "step_size=0.5,1e308",
        "--steps",
        "30",
        "--out",
        dir.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("runs ok 1, failed 3, missing 0"), "{text}");
    assert!(
        text.contains("FAILED [30.0, 40.0, 1e308] seed 0: non-finite"),
        "{text}"
    );
    assert!(
        text.contains("FAILED [30.0, 100000000.0, 0.5] seed 0: refused"),
        "{text}"
    );
    let csv = String::from_utf8(read(&dir, "grid.csv")).unwrap();
    assert_eq!(csv.lines().filter(|l| l.contains(",failed,")).count(), 3);
}

/// `--seeds` replaces the grid's seeds: a range and a list each run every seed (the flag
/// once panicked in the argument parser on any valid list).
#[test]
fn seeds_flag_runs_every_seed() {
    let tmp = tempfile::tempdir().unwrap();
    for (k, seeds) in ["0..3", "4,9,11"].into_iter().enumerate() {
        let dir = tmp.path().join(format!("g{k}"));
        let o = tokensel(&[
            "grid",
            "--set",
            "d=20",
            "--seeds",
            seeds,
            "--steps",
            "5",
            "--out",
            dir.to_str().unwrap(),
            "--quiet",
            "--json",
        ]);
        assert!(o.status.success(), "{seeds}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["runs_ok"], 3, "{seeds}: {v}");
        let spec = Spec::read(&dir).unwrap();
        let want: Vec<u64> = if k == 0 {
            vec![0, 1, 2]
        } else {
            vec![4, 9, 11]
        };
        assert_eq!(spec.seeds, want);
    }
}

/// Bad grids exit 2 before any run.
#[test]
fn bad_grids_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("g");
    let o = out.to_str().unwrap();
    let grid = tmp.path().join("grid.toml");
    std::fs::write(&grid, GRID).unwrap();
    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, GRID.replace("[axes]", "colour = 1\n[axes]")).unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["grid", "--set", "dd=1,2", "--out", o],
        vec!["grid", "--set", "d=0,10", "--out", o],
        vec!["grid", "--set", "d=10.5", "--out", o],
        vec!["grid", "--set", "d=10:5:1", "--out", o],
        vec!["grid", "--set", "mode=1", "--out", o],
        vec![
            "grid", "--set", "eta=0.2", "--set", "eta=0.3", "--shard", "0/3", "--out", o,
        ],
        vec!["grid", "--set", "eta=0.2", "--shard", "4/3", "--out", o],
        vec!["grid", "--seeds", "3..1", "--out", o],
        vec![
            "grid",
            "--preset",
            "heatmap-v1",
            "--config",
            grid.to_str().unwrap(),
            "--out",
            o,
        ],
        vec!["grid", "--preset", "nope", "--out", o],
        vec!["grid", "--grid", bad.to_str().unwrap(), "--out", o],
        vec!["grid", "--set", "d=20,30"],
        vec!["grid", "merge", tmp.path().to_str().unwrap()],
    ];
    for args in cases {
        let r = tokensel(&args);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {}", stderr(&r));
        assert!(!out.join("cells").exists(), "{args:?} did work");
    }
    // a directory that holds another grid
    let r = tokensel(&[
        "grid", "--set", "d=20", "--steps", "5", "--out", o, "--quiet",
    ]);
    assert!(r.status.success(), "{}", stderr(&r));
    let r = tokensel(&[
        "grid", "--set", "d=30", "--steps", "5", "--out", o, "--quiet",
    ]);
    assert_eq!(r.status.code(), Some(2), "{}", stderr(&r));
}

/// The grid presets parse, and have the sizes the paper's figures have.
#[test]
fn grid_presets_have_the_papers_sizes() {
    use tokensel::prelude::experiments::grid::GridPreset;
    let size = |p: GridPreset| {
        let s = Spec::from_toml(p.toml(), Path::new(p.name())).unwrap();
        let shape: Vec<usize> = s.axes.iter().map(|a| a.values.len()).collect();
        (shape, s.seeds.len(), s)
    };
    let (shape, seeds, s) = size(GridPreset::HeatmapV1);
    assert_eq!((shape, seeds), (vec![20, 20], 1));
    assert_eq!(s.axes[0].values[19], 5000.0);
    assert_eq!(s.axes[1].values[19], 100.0);
    let (shape, _, s) = size(GridPreset::HeatmapFinal);
    assert_eq!(shape, vec![39, 39]);
    assert_eq!(s.axes[1].values[38], 100.0);
    assert_eq!(s.base.mode, tokensel::prelude::Mode::Joint);
    let (shape, seeds, s) = size(GridPreset::LabelNoiseMap);
    assert_eq!((shape, seeds), (vec![17, 5], 10));
    assert_eq!(s.axes[0].values[8], 0.7);
    assert_eq!(s.base.labels, tokensel::prelude::LabelRule::HalfSplit);
}

/// A grid whose seeds repeat (`"0,0,0,1"`, in the TOML or by `--seeds`) or whose name
/// holds a control character is refused with exit 2 before any cell runs (the seeds
/// ran, one cell several times; the name failed after every cell ran).
#[test]
fn repeated_seeds_and_control_characters_in_names_are_refused_before_the_cells() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("g");
    let o = out.to_str().unwrap();
    let small = GRID
        .replace("d = \"20:40:10\"", "d = \"20\"")
        .replace("steps = 60", "steps = 5");
    let cases = [
        small.replace("seeds = \"0..2\"", "seeds = \"0,0,0,1\""),
        small.replace("name = \"small\"", "name = \"sm\\u0007all\""),
        small.replace("name = \"small\"", "name = \"line\\nbreak\""),
    ];
    for (k, text) in cases.iter().enumerate() {
        let grid = tmp.path().join(format!("grid{k}.toml"));
        std::fs::write(&grid, text).unwrap();
        let r = run_grid(&out, &grid, &[]);
        assert_eq!(r.status.code(), Some(2), "{text}: {}", stderr(&r));
        assert!(!out.join("cells").exists(), "{text}: did work");
    }
    let r = tokensel(&["grid", "--set", "d=20", "--seeds", "1,1", "--out", o]);
    assert_eq!(r.status.code(), Some(2), "{}", stderr(&r));
    assert!(stderr(&r).contains("appears twice"), "{}", stderr(&r));
    assert!(!out.join("cells").exists());
}

/// A cell file edited by hand (a test accuracy of 7.0, a regime its accuracies do not
/// give) or moved to another point is refused by `grid merge` (exit 2, naming the file),
/// not merged with exit 0.
#[test]
fn edited_or_foreign_cells_are_not_merged() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, _) = one_point_grid(tmp.path());
    let merge = || tokensel(&["grid", "merge", out.to_str().unwrap()]);
    assert!(merge().status.success());
    let mut cells: Vec<_> = std::fs::read_dir(out.join("cells"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cells.sort();
    let cell = &cells[0];
    let original = std::fs::read_to_string(cell).unwrap();
    let v: serde_json::Value = serde_json::from_str(&original).unwrap();
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let edits: Vec<(&str, Edit)> = vec![
        (
            "test accuracy 7.0",
            Box::new(|v| v["outcome"]["ok"]["test_accuracy"] = 7.0.into()),
        ),
        (
            "train loss -1",
            Box::new(|v| v["outcome"]["ok"]["train_loss"] = (-1.0).into()),
        ),
        (
            "a foreign point",
            Box::new(|v| v["point"][0] = 1234.5.into()),
        ),
    ];
    for (what, edit) in edits {
        let mut e = v.clone();
        edit(&mut e);
        std::fs::write(cell, serde_json::to_string(&e).unwrap()).unwrap();
        let r = merge();
        assert_eq!(r.status.code(), Some(2), "{what}: {}", stderr(&r));
        assert!(
            stderr(&r).contains("grid cell file"),
            "{what}: {}",
            stderr(&r)
        );
    }
    std::fs::write(cell, original).unwrap();
    assert!(merge().status.success());
}

/// A later run removes the cell temporaries that writers which died on this host left in
/// `cells/` (a kill between writing and renaming), also while a dead writer is a zombie
/// (killed, not yet waited for by its parent: signals still reach it, and such
/// temporaries were kept forever), or when its process id now belongs to a process that
/// started at another time (a reused id), and `grid merge` removes them as well; the
/// temporaries of live writers are never touched.
#[test]
fn temporaries_of_dead_writers_are_removed_by_later_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, grid) = one_point_grid(tmp.path());
    let cells = out.join("cells");
    let cell = std::fs::read_dir(&cells)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with(".json"))
        .unwrap();
    let host: String = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let temp = |pid: u32| format!(".{cell}.tokensel-tmp-{pid}-0-1@{host}");
    let state = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| Some(s.rsplit_once(')')?.1.split_whitespace().next()?.to_string()))
    };
    // a writer that ended and was waited for
    let mut reaped = Command::new("true").spawn().unwrap();
    reaped.wait().unwrap();
    // a writer that ended and was not waited for yet
    let mut zombie = Command::new("true").spawn().unwrap();
    let t0 = std::time::Instant::now();
    while state(zombie.id()).as_deref() != Some("Z") {
        assert!(t0.elapsed().as_secs() < 20, "no zombie");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // live writers: a child that sleeps, and this test's own process
    let mut live = Command::new("sleep").arg("60").spawn().unwrap();
    let me = std::process::id();
    for pid in [reaped.id(), zombie.id(), live.id(), me] {
        std::fs::write(cells.join(temp(pid)), b"partial").unwrap();
    }
    // temporaries that record their writer's start time (clock ticks since boot): the
    // live processes' own start times are kept; another start time under a live id is
    // a writer that ended and whose id was reused (containers give every run the same
    // ids), removed
    let start = |pid: u32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let rest = stat.rsplit_once(')').unwrap().1;
        rest.split_whitespace().nth(19).unwrap().parse().unwrap()
    };
    let timed = |pid: u32, t: u64| format!(".{cell}.tokensel-tmp-{pid}-0-1-{t}@{host}");
    for pid in [live.id(), me] {
        std::fs::write(cells.join(timed(pid, start(pid))), b"partial").unwrap();
        std::fs::write(cells.join(timed(pid, start(pid) + 1)), b"partial").unwrap();
    }
    let r = run_grid(&out, &grid, &[]);
    assert!(r.status.success(), "{}", stderr(&r));
    for pid in [live.id(), me] {
        let at = |t: u64| cells.join(timed(pid, t)).exists();
        assert!(at(start(pid)), "a live writer's temporary is kept");
        assert!(
            !at(start(pid) + 1),
            "a reused id's earlier writer's temporary is removed"
        );
    }
    let left = |pid: u32| cells.join(temp(pid)).exists();
    assert!(
        !left(reaped.id()),
        "the reaped writer's temporary is removed"
    );
    assert!(
        !left(zombie.id()),
        "the zombie writer's temporary is removed"
    );
    assert!(left(live.id()), "a live writer's temporary is kept");
    assert!(left(me), "a live writer's temporary is kept");
    // `grid merge` removes them too
    std::fs::write(cells.join(temp(reaped.id())), b"partial").unwrap();
    let o = tokensel(&["grid", "merge", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !left(reaped.id()),
        "grid merge removes a dead writer's temporary"
    );
    assert!(left(live.id()), "a live writer's temporary is kept");
    zombie.wait().unwrap();
    live.kill().unwrap();
    live.wait().unwrap();
}
