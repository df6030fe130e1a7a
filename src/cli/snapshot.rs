//! `tokensel snapshot`: a run's trajectory as a snapshot a CI checks, as `insta` does.
//!
//! A snapshot directory DIR holds at most two sets (`io::publish`, kind `snapshot`):
//! `DIR/accepted/` (the reviewed snapshot) and `DIR/pending/` (a new run that differs
//! from it, or the first one), each `snapshot.toml` (the manifest: format, tokensel's
//! version, the declared tolerance, the digest, the steps, the config) and
//! `trajectory.json`. `check` runs a config and compares it with the accepted snapshot
//! by `diff`'s comparison (`analysis::diff`) under the accepted snapshot's declared
//! tolerance; a difference (or no accepted snapshot) is written as the pending one (exit
//! code 1). `accept` publishes the pending set as the accepted one and removes the pending.
//! Nothing in DIR but these two sets (and writers' temporaries) is accepted: anything
//! else is refused with exit 2 before any work, and never removed.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};

use super::{ConfigArgs, EXIT_FAILED, EXIT_OK, read_large, read_text};
use crate::analysis::diff::{ConfigChange, Report};
use crate::arith::Choice;
use crate::config::Config;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::io::publish::{OutputDir, SetKind};
use crate::io::trajectory::Trajectory;

/// Format tag of a snapshot manifest.
pub const FORMAT: &str = "tokensel-snapshot/1";
/// The manifest's file name in a snapshot set.
const MANIFEST: &str = "snapshot.toml";
/// The trajectory's file name in a snapshot set.
const TRAJECTORY: &str = "trajectory.json";
/// The declared tolerance of a new snapshot without `--rtol`: `diff`'s default.
const DEFAULT_RTOL: f64 = 1e-12;

#[derive(Args, Debug)]
pub(super) struct SnapshotArgs {
    #[command(subcommand)]
    command: SnapshotCommand,
}

#[derive(Subcommand, Debug)]
enum SnapshotCommand {
    /// Run the config and compare it with DIR's accepted snapshot: exit 0 when it agrees
    /// within the declared tolerance, 1 when it differs or there is no accepted snapshot
    /// yet (the run is then written as DIR's pending snapshot, to review and accept).
    Check(CheckArgs),
    /// Make DIR's pending snapshot the accepted one (exit 2 when there is none).
    Accept(DirArg),
    /// Say what DIR holds: the accepted and the pending snapshot.
    Status(DirArg),
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// The snapshot directory (created if missing).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    #[command(flatten)]
    config: ConfigArgs,
    /// The tolerance to declare (relative deviation, as `diff --rtol`); a snapshot's
    /// tolerance is the accepted one's: a different value here is a change to review
    /// (exit 1, written into the pending snapshot), never a looser check. Default: the
    /// accepted snapshot's, or 1e-12 for a first snapshot.
    #[arg(long, value_name = "X")]
    rtol: Option<f64>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct DirArg {
    /// The snapshot directory.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

pub(super) fn snapshot(args: &SnapshotArgs) -> Result<i32> {
    match &args.command {
        SnapshotCommand::Check(a) => check(a),
        SnapshotCommand::Accept(a) => accept(&a.dir),
        SnapshotCommand::Status(a) => status(&a.dir),
    }
}

/// A snapshot set's manifest (`snapshot.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    /// Always [`FORMAT`].
    format: String,
    /// The tokensel version that recorded it.
    tokensel_version: String,
    /// The declared tolerance: the relative deviation a check allows (`diff --rtol`).
    rtol: f64,
    /// The trajectory's digest (`Trajectory::digest`).
    digest: String,
    /// The run's steps.
    steps: u64,
    /// The trajectory's checkpoints.
    checkpoints: usize,
    /// The run's config.
    config: toml::Table,
}

impl Manifest {
    fn of(t: &Trajectory, rtol: f64) -> Manifest {
        Manifest {
            format: FORMAT.into(),
            tokensel_version: env!("CARGO_PKG_VERSION").into(),
            rtol,
            digest: t.digest(),
            steps: t.config.steps,
            checkpoints: t.checkpoints.len(),
            config: config_table(&t.config),
        }
    }
}

fn config_table(c: &Config) -> toml::Table {
    toml::from_str(&c.to_toml()).expect("a config serialises to a TOML table")
}

/// A snapshot set read back and checked.
struct Snapshot {
    manifest: Manifest,
    trajectory: Trajectory,
    /// The files as read, published as they are by `accept`.
    files: Vec<(String, Vec<u8>)>,
}

/// The two sets of DIR, checked before any work.
struct SnapshotDir {
    dir: PathBuf,
    accepted: OutputDir,
    pending: OutputDir,
}

impl SnapshotDir {
    /// Check DIR (absent, or a directory holding nothing but `accepted/`, `pending/` and
    /// writers' temporaries; never a link or a file) and its two sets.
    fn open(dir: &Path) -> Result<SnapshotDir> {
        match std::fs::symlink_metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(Error::Io {
                    path: dir.to_path_buf(),
                    source,
                });
            }
            Ok(m) if m.is_symlink() => {
                return Err(Error::path(
                    dir,
                    "is a symbolic link: give the snapshot directory itself",
                ));
            }
            Ok(m) if !m.is_dir() => {
                return Err(Error::path(
                    dir,
                    "is not a directory: a snapshot directory holds `accepted/` and `pending/`",
                ));
            }
            Ok(_) => {
                let entries = std::fs::read_dir(dir).map_err(|source| Error::Io {
                    path: dir.to_path_buf(),
                    source,
                })?;
                for e in entries {
                    let name = e
                        .map_err(|source| Error::Io {
                            path: dir.to_path_buf(),
                            source,
                        })?
                        .file_name()
                        .to_string_lossy()
                        .into_owned();
                    let ours = ["accepted", "pending"]
                        .iter()
                        .any(|s| name == *s || crate::io::files::is_temp_of(&name, s));
                    if !ours {
                        return Err(Error::path(
                            dir,
                            format!(
                                "holds `{name}`, which is not part of a snapshot: a snapshot \
                                 directory holds only `accepted/` and `pending/` \
                                 (docs/files.md); move it away or choose another directory"
                            ),
                        ));
                    }
                }
            }
        }
        Ok(SnapshotDir {
            dir: dir.to_path_buf(),
            accepted: OutputDir::prepare(&dir.join("accepted"), SetKind::Snapshot)?,
            pending: OutputDir::prepare(&dir.join("pending"), SetKind::Snapshot)?,
        })
    }

    fn path(&self, set: &str) -> String {
        self.dir.join(set).display().to_string()
    }
}

/// Read the snapshot set at `set` (`None`: absent or empty) and check it: both files,
/// a manifest of this format whose digest, steps, checkpoints and config are the
/// trajectory's.
fn read_set(set: &Path) -> Result<Option<Snapshot>> {
    let manifest_path = set.join(MANIFEST);
    if std::fs::symlink_metadata(set).is_err()
        || std::fs::read_dir(set).is_ok_and(|mut d| d.next().is_none())
    {
        return Ok(None);
    }
    let text = read_text(&manifest_path)?;
    let bad = |message: String| Error::Parse {
        what: "snapshot manifest",
        path: manifest_path.clone(),
        message,
    };
    let head: toml::Table = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    match head.get("format").and_then(toml::Value::as_str) {
        Some(FORMAT) => {}
        other => {
            return Err(bad(format!(
                "format {} is not `{FORMAT}`",
                other.map_or("absent".to_string(), |f| format!("`{f}`"))
            )));
        }
    }
    let manifest: Manifest = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    crate::analysis::check_tol("rtol", manifest.rtol).map_err(|e| bad(e.to_string()))?;
    let traj_path = set.join(TRAJECTORY);
    let traj_text = read_large(&traj_path)?;
    let trajectory = Trajectory::from_json(&traj_text, &traj_path)?;
    let expected = Manifest::of(&trajectory, manifest.rtol);
    for (field, differs) in [
        ("digest", expected.digest != manifest.digest),
        ("steps", expected.steps != manifest.steps),
        ("checkpoints", expected.checkpoints != manifest.checkpoints),
        ("config", expected.config != manifest.config),
    ] {
        if differs {
            return Err(bad(format!(
                "its `{field}` is not the one of `{}` beside it: the set was edited; \
                 record it again with `tokensel snapshot check`",
                traj_path.display()
            )));
        }
    }
    Ok(Some(Snapshot {
        files: vec![
            (MANIFEST.into(), text.into_bytes()),
            (TRAJECTORY.into(), traj_text.into_bytes()),
        ],
        manifest,
        trajectory,
    }))
}

/// The files of a new snapshot of `t` declaring `rtol`.
fn files_of(t: &Trajectory, rtol: f64) -> Vec<(String, Vec<u8>)> {
    let manifest = toml::to_string(&Manifest::of(t, rtol)).expect("manifest serialises");
    vec![
        (MANIFEST.into(), manifest.into_bytes()),
        (TRAJECTORY.into(), t.to_json().into_bytes()),
    ]
}

/// `steps N, checkpoints C, rtol X, digest D` of a manifest.
fn describe(m: &Manifest) -> String {
    format!(
        "{} steps, {} checkpoints, rtol {:e}, digest {}",
        m.steps, m.checkpoints, m.rtol, m.digest
    )
}

/// The largest relative deviation of a diff report (quantity, value, step), if any.
fn largest(r: &Report) -> Option<(&str, f64, Option<u64>)> {
    r.max_rel_dev
        .iter()
        .filter(|(_, v)| **v != 0.0)
        .max_by(|x, y| x.1.total_cmp(y.1).then_with(|| y.0.cmp(x.0)))
        .map(|(k, v)| (k.as_str(), *v, r.max_rel_dev_step.get(k).copied().flatten()))
}

/// `Q` X at step S.
fn show_largest(r: &Report) -> String {
    match largest(r) {
        Some((q, v, Some(s))) => format!("`{q}` {v:.3e} at step {s}"),
        Some((q, v, None)) => format!("`{q}` {v:.3e}"),
        None => "none".into(),
    }
}

fn check(args: &CheckArgs) -> Result<i32> {
    if let Some(rtol) = args.rtol {
        crate::analysis::check_tol("--rtol", rtol)?;
    }
    let sd = SnapshotDir::open(&args.dir)?;
    let accepted = read_set(sd.accepted.path())?;
    // a pending set that is not a valid snapshot is refused too (it is replaced below);
    // the one there now is the only one a passing check may remove as stale
    let seen = read_set(sd.pending.path())?.map(|p| (p.manifest.digest, p.manifest.rtol));
    let cfg = args.config.load()?;
    crate::train::check_memory(&cfg, Choice::F64.kind(), Choice::F64.prec(), cfg.method)?;
    crate::train::record::check_size(&cfg)?;
    let declared = accepted.as_ref().map(|a| a.manifest.rtol);
    let rtol = args.rtol.or(declared).unwrap_or(DEFAULT_RTOL);
    let data = Dataset::generate(&cfg);
    let new = Choice::F64.with(super::run::Train {
        cfg: &cfg,
        data: &data,
        quiet: args.quiet,
    })?;
    let digest = new.digest();
    let name = args.dir.display();
    let review_accept = |review: String| {
        println!("  review: {review}");
        println!("  accept: tokensel snapshot accept {name}");
    };
    let Some(acc) = accepted else {
        let files = files_of(&new, rtol);
        sd.pending.publish(&files).map_err(not_published)?;
        println!(
            "snapshot {name}: no accepted snapshot yet: new snapshot written to {} ({})",
            sd.path("pending"),
            describe(&Manifest::of(&new, rtol))
        );
        review_accept(format!(
            "tokensel plot {}/trajectory.json --out pending.svg",
            sd.path("pending")
        ));
        return Ok(EXIT_FAILED);
    };
    let declared = acc.manifest.rtol;
    let tolerance_changes = rtol != declared;
    // the fast path: the same JSON is the same trajectory, bit for bit
    let same_json = acc.manifest.digest == digest && acc.trajectory.to_json() == new.to_json();
    let report =
        (!same_json).then(|| crate::analysis::diff::diff(&acc.trajectory, &new, declared, false));
    let agrees = report.as_ref().is_none_or(|r| !r.diverged);
    if agrees && !tolerance_changes {
        match &report {
            None => println!(
                "snapshot {name}: bit-identical to the accepted snapshot ({} steps, {} \
                 checkpoints, digest {digest})",
                new.config.steps,
                new.checkpoints.len()
            ),
            Some(r) => println!(
                "snapshot {name}: within the declared tolerance of the accepted snapshot, \
                 not bit-identical (rtol {declared:e}; largest relative deviation {}; \
                 digest {digest}, accepted {})",
                show_largest(r),
                acc.manifest.digest
            ),
        }
        // the pending snapshot of an earlier check that differed is stale now; one
        // written while this check ran (a concurrent check's) is not this check's to
        // remove: only the set seen before the run, if it is still there
        let stale = |set: &Path| {
            read_set(set).is_ok_and(|s| {
                s.is_some_and(|s| seen.as_ref() == Some(&(s.manifest.digest, s.manifest.rtol)))
            })
        };
        if seen.is_some() && sd.pending.remove(stale)? {
            println!(
                "  removed the stale pending snapshot {} (an earlier check's)",
                sd.path("pending")
            );
        }
        return Ok(EXIT_OK);
    }
    let files = files_of(&new, rtol);
    sd.pending.publish(&files).map_err(not_published)?;
    println!("snapshot {name}: DIFFERS from the accepted snapshot (declared rtol {declared:e})");
    if tolerance_changes {
        println!(
            "  the declared tolerance changes: rtol {declared:e} (accepted) -> {rtol:e} \
             (--rtol): a check never changes it; the pending snapshot declares it, accept \
             it to make it the snapshot's"
        );
    }
    match &report {
        Some(r) if r.diverged => print!("{r}"),
        Some(_) => println!("  the trajectory agrees within the declared tolerance"),
        None => println!("  the trajectory is bit-identical"),
    }
    println!(
        "pending snapshot written to {} ({})",
        sd.path("pending"),
        describe(&Manifest::of(&new, rtol))
    );
    review_accept(format!(
        "tokensel diff {}/trajectory.json {}/trajectory.json",
        sd.path("accepted"),
        sd.path("pending")
    ));
    Ok(EXIT_FAILED)
}

fn not_published(e: Error) -> Error {
    Error::NotPublished {
        source: Box::new(e),
    }
}

/// What changed from the accepted snapshot `old` to `new`, in one line.
fn changes(old: &Snapshot, new: &Snapshot) -> String {
    let r = crate::analysis::diff::diff(&old.trajectory, &new.trajectory, old.manifest.rtol, false);
    let mut parts = Vec::new();
    if old.manifest.rtol != new.manifest.rtol {
        parts.push(format!(
            "rtol {:e} -> {:e}",
            old.manifest.rtol, new.manifest.rtol
        ));
    }
    if !r.config_changes.is_empty() {
        let c: Vec<String> = r
            .config_changes
            .iter()
            .map(ConfigChange::describe)
            .collect();
        parts.push(format!("config {}", c.join(", ")));
    }
    let differ = r.max_rel_dev.values().filter(|v| **v != 0.0).count();
    if differ > 0 {
        parts.push(format!(
            "{differ} quantit{} differ{} (largest {})",
            if differ == 1 { "y" } else { "ies" },
            if differ == 1 { "s" } else { "" },
            show_largest(&r)
        ));
    } else if !(r.only_in_a.is_empty() && r.only_in_b.is_empty()) {
        parts.push("checkpoint sets differ".into());
    }
    if parts.is_empty() {
        "nothing (bit-identical, same tolerance)".into()
    } else {
        parts.join("; ")
    }
}

fn accept(dir: &Path) -> Result<i32> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Err(Error::path(
            dir,
            "no such snapshot directory: `tokensel snapshot check DIR` records a pending \
             snapshot first",
        ));
    }
    let sd = SnapshotDir::open(dir)?;
    let Some(pending) = read_set(sd.pending.path())? else {
        return Err(Error::path(
            dir,
            "holds no pending snapshot: nothing to accept (`tokensel snapshot check DIR \
             ...` writes one when a run differs from the accepted snapshot)",
        ));
    };
    let old = read_set(sd.accepted.path())?;
    sd.accepted.publish(&pending.files).map_err(not_published)?;
    let digest = pending.manifest.digest.clone();
    // the pending set is removed only if it is still the one accepted
    sd.pending.remove(|set| {
        read_set(set).is_ok_and(|s| s.is_some_and(|s| s.manifest.digest == digest))
    })?;
    println!(
        "accepted {}: {}",
        sd.path("accepted"),
        describe(&pending.manifest)
    );
    match &old {
        None => println!("  changed: first accepted snapshot"),
        Some(old) => println!("  changed: {}", changes(old, &pending)),
    }
    Ok(EXIT_OK)
}

fn status(dir: &Path) -> Result<i32> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Err(Error::path(dir, "no such snapshot directory"));
    }
    let sd = SnapshotDir::open(dir)?;
    let accepted = read_set(sd.accepted.path())?;
    let pending = read_set(sd.pending.path())?;
    for (set, s) in [("accepted", &accepted), ("pending", &pending)] {
        match s {
            None => println!("{set}: none"),
            Some(s) => println!(
                "{set}: {} (tokensel {})",
                describe(&s.manifest),
                s.manifest.tokensel_version
            ),
        }
    }
    if let (Some(a), Some(p)) = (&accepted, &pending) {
        println!("  pending vs accepted: {}", changes(a, p));
    }
    Ok(EXIT_OK)
}
