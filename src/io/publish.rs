//! Output sets: the files one command writes into one directory (`run --out`,
//! `twin --out`, `data --out`, `sweep --out`, a grid's `merged/`), published atomically
//! as a set.
//!
//! A set is built in a temporary directory beside its target (a name unique to the
//! writer, `.NAME.tokensel-tmp-PID-COUNTER-NANOS@HOST`), every file synced, the marker
//! [`MARKER`] written last, then swapped in: Linux's `renameat2(RENAME_EXCHANGE)`
//! exchanges the two directories in one step (a plain rename where the target does not
//! exist yet), and the old set, now under the temporary name, is removed. A reader that
//! opens the target sees the complete old set or the complete new one, never a mix and
//! never a stale member (a file of the old set that the new one lacks is gone with it).
//! Concurrent writers never fail each other: each builds its own temporary, nobody
//! removes a live writer's temporaries, the last swap wins. Temporaries of writers that
//! died on this host are removed by the next writer.
//!
//! tokensel never destroys a user's files: a target directory is replaced only when it
//! is empty or holds a set of the same kind whose marker lists every file in it.
//! Anything else (no marker, a marker of another kind, a file the marker does not list,
//! a directory or symbolic link under a member's name, a symbolic link, a file where the
//! directory should be) is refused with exit 2 before
//! any work, naming what is there ([`OutputDir::prepare`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::io::files::{
    SMALL_INPUT, check_final_name, longest_temp_path, name_of, parent_of, read_input,
    remove_dead_temps, rename_with, sync_dir, temp_path, write_new,
};

/// The marker file of every output set.
pub const MARKER: &str = "tokensel-set.json";

/// Format tag of [`MARKER`].
pub const SET_FORMAT: &str = "tokensel-set/1";

/// What a set holds (its marker's `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SetKind {
    /// `trajectory.json` and `trajectory.csv` (`run --out`, `twin --out`).
    Trajectory,
    /// A data export (`data --out`): NPY arrays, `config.toml`, `manifest.json`.
    Data,
    /// `sweep.json`, `sweep.csv`, `sweep.svg` (`sweep --out`).
    Sweep,
    /// A grid's merged tables and heat maps (`DIR/merged/`).
    GridMerge,
    /// `certificate.json` and `certificate.txt` (`certify --out`).
    Certificate,
    /// `protocol.json`, `protocol.csv` and `attention.csv` (`protocol --out`).
    Protocol,
    /// `snapshot.toml` and `trajectory.json`: an accepted or a pending snapshot
    /// (`snapshot check`, `snapshot accept`).
    Snapshot,
}

impl SetKind {
    /// The name in the marker and in messages.
    pub fn name(self) -> &'static str {
        match self {
            SetKind::Trajectory => "trajectory",
            SetKind::Data => "data",
            SetKind::Sweep => "sweep",
            SetKind::GridMerge => "grid-merge",
            SetKind::Certificate => "certificate",
            SetKind::Protocol => "protocol",
            SetKind::Snapshot => "snapshot",
        }
    }
}

/// The marker: the set's kind and exactly the files it holds (besides the marker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Marker {
    /// Always [`SET_FORMAT`].
    pub format: String,
    /// What the set holds.
    pub kind: SetKind,
    /// The set's files, sorted.
    pub files: Vec<String>,
}

/// What a target path holds, as far as replacing it goes.
enum Target {
    /// Nothing yet.
    Absent,
    /// An empty directory, or a set of the kind asked for (nothing else in it).
    Replaceable,
}

/// At most this many names are listed in a refusal.
const SHOWN: usize = 8;

fn list(names: &[String]) -> String {
    let mut text = names
        .iter()
        .take(SHOWN)
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        text += &format!(" and {} more", names.len() - SHOWN);
    }
    text
}

/// Inspect `target` for a set of `kind`: absent, replaceable, or an error that says
/// why it must not be replaced.
fn inspect(target: &Path, kind: SetKind) -> Result<Target> {
    let io = |source| Error::Io {
        path: target.to_path_buf(),
        source,
    };
    let meta = match std::fs::symlink_metadata(target) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Target::Absent),
        Err(e) => return Err(io(e)),
        Ok(m) => m,
    };
    if meta.is_symlink() {
        return Err(Error::path(
            target,
            "is a symbolic link: an output directory is replaced as a whole, give the directory itself",
        ));
    }
    if !meta.is_dir() {
        return Err(Error::path(
            target,
            "exists and is not a directory: not replaced",
        ));
    }
    let mut names: Vec<String> = std::fs::read_dir(target)
        .map_err(io)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()
        .map_err(io)?;
    names.sort();
    if names.is_empty() {
        return Ok(Target::Replaceable);
    }
    let refuse = |why: String| {
        Err(Error::path(
            target,
            format!(
                "{why}: not replaced (tokensel replaces only an empty directory or a {} set it wrote); remove it or choose another directory",
                kind.name()
            ),
        ))
    };
    if !names.iter().any(|n| n == MARKER) {
        return refuse(format!(
            "holds {} and no tokensel marker `{MARKER}`",
            list(&names)
        ));
    }
    let marker = read_marker(&target.join(MARKER));
    let Some(marker) = marker else {
        return refuse(format!("its `{MARKER}` is not a tokensel marker"));
    };
    if marker.kind != kind {
        return refuse(format!("holds a tokensel {} set", marker.kind.name()));
    }
    let foreign: Vec<String> = names
        .into_iter()
        .filter(|n| n != MARKER && !marker.files.contains(n))
        .collect();
    if !foreign.is_empty() {
        return refuse(format!(
            "holds {} besides the set its marker lists",
            list(&foreign)
        ));
    }
    // a listed name is replaced as a whole with the set: it must still be the regular
    // file the set wrote (a directory or link put there under a member's name is the
    // user's, and replacing the set would delete it with everything in it)
    let mut not_files = Vec::new();
    for name in marker.files.iter().filter(|n| n.as_str() != MARKER) {
        match std::fs::symlink_metadata(target.join(name)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
            Ok(m) if m.is_file() => {}
            Ok(_) => not_files.push(name.clone()),
        }
    }
    if !not_files.is_empty() {
        return refuse(format!(
            "holds {} under the name of a set member but not as the regular file the set wrote",
            list(&not_files)
        ));
    }
    Ok(Target::Replaceable)
}

/// The marker at `path`, `None` when it is not one.
fn read_marker(path: &Path) -> Option<Marker> {
    let bytes = read_input(path, SMALL_INPUT).ok()?;
    let m: Marker = serde_json::from_slice(&bytes).ok()?;
    (m.format == SET_FORMAT).then_some(m)
}

/// An output directory checked before any work, ready to receive its set.
#[derive(Debug, Clone)]
pub struct OutputDir {
    path: PathBuf,
    kind: SetKind,
}

impl OutputDir {
    /// Check `path` before any work: absent (its parent is created if missing), an
    /// empty directory, or a set of `kind` with nothing else in it; its final component
    /// must be a name (not `.` or `..`); and its parent must accept a new directory
    /// under the longest temporary name the writer will use (a probe is created and
    /// removed). Anything else is refused (exit 2), naming what is there.
    pub fn prepare(path: &Path, kind: SetKind) -> Result<OutputDir> {
        check_final_name(path, false)?;
        inspect(path, kind)?;
        let parent = parent_of(path);
        std::fs::create_dir_all(parent).map_err(|source| Error::Io {
            path: parent.to_path_buf(),
            source,
        })?;
        let probe = longest_temp_path(path)?;
        std::fs::create_dir(&probe)
            .and_then(|()| std::fs::remove_dir(&probe))
            .map_err(|source| Error::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        Ok(OutputDir {
            path: path.to_path_buf(),
            kind,
        })
    }

    /// The target directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Publish `files` (name, bytes) as the directory's new set: built and synced in a
    /// temporary directory beside it, the marker last, then swapped in as a whole (see
    /// the module documentation). The target is inspected again just before the swap; a
    /// target that changed into something tokensel must not replace is refused then.
    pub fn publish(&self, files: &[(String, Vec<u8>)]) -> Result<()> {
        remove_dead_temps(&self.path);
        let tmp = temp_path(&self.path)?;
        let built = self.build(&tmp, files).and_then(|()| self.swap(&tmp));
        if built.is_err() && std::fs::symlink_metadata(&tmp).is_ok() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        built
    }

    /// Remove the set at the target, if it is one of this kind and `still` holds for it
    /// (called on the set moved aside). It is first renamed to a temporary name of its
    /// own (atomically: a reader sees the set or nothing), then checked again; a set
    /// that is no longer one of this kind, or for which `still` is false (another writer
    /// published a new one in between), is renamed back, or kept as `NAME.previous-PID`
    /// if the name was taken meanwhile, and `Ok(false)` says it was not removed.
    /// Nothing else is ever removed.
    pub fn remove(&self, still: impl Fn(&Path) -> bool) -> Result<bool> {
        if matches!(inspect(&self.path, self.kind)?, Target::Absent) {
            return Ok(false);
        }
        let aside = temp_path(&self.path)?;
        match std::fs::rename(&self.path, &aside) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(source) => {
                return Err(Error::Io {
                    path: self.path.clone(),
                    source,
                });
            }
        }
        if inspect(&aside, self.kind).is_ok() && still(&aside) {
            std::fs::remove_dir_all(&aside).map_err(|source| Error::Io {
                path: aside.clone(),
                source,
            })?;
            sync_dir(parent_of(&self.path))?;
            return Ok(true);
        }
        if std::fs::rename(&aside, &self.path).is_err() {
            let keep = parent_of(&self.path).join(format!(
                "{}.previous-{}",
                name_of(&self.path)?,
                std::process::id()
            ));
            let _ = std::fs::rename(&aside, keep);
        }
        Ok(false)
    }

    /// Write the set into the new directory `tmp`.
    fn build(&self, tmp: &Path, files: &[(String, Vec<u8>)]) -> Result<()> {
        std::fs::create_dir(tmp).map_err(|source| Error::Io {
            path: tmp.to_path_buf(),
            source,
        })?;
        let mut names = Vec::with_capacity(files.len());
        for (name, bytes) in files {
            assert!(
                !name.contains('/') && name != MARKER && !names.contains(name),
                "set member `{name}`: a plain, unique file name"
            );
            write_new(&tmp.join(name), bytes)?;
            names.push(name.clone());
        }
        names.sort();
        let marker = Marker {
            format: SET_FORMAT.into(),
            kind: self.kind,
            files: names,
        };
        let text = serde_json::to_string_pretty(&marker).expect("marker serialises") + "\n";
        write_new(&tmp.join(MARKER), text.as_bytes())?;
        sync_dir(tmp)
    }

    /// Swap the built directory `tmp` in; remove the old set.
    fn swap(&self, tmp: &Path) -> Result<()> {
        let target = &self.path;
        let io = |source| Error::Io {
            path: target.to_path_buf(),
            source,
        };
        // Each round either publishes or sees the target change (created or removed by
        // another writer between the look and the rename) and looks again.
        for _ in 0..1000 {
            let now = match inspect(target, self.kind) {
                Ok(now) => now,
                Err(e) => return Err(self.keep_new(tmp, e)),
            };
            match now {
                Target::Absent => match std::fs::rename(tmp, target) {
                    Ok(()) => return sync_dir(parent_of(target)),
                    Err(e) if is_exists(&e) => continue,
                    Err(e) => return Err(io(e)),
                },
                Target::Replaceable => match exchange(tmp, target) {
                    Ok(()) => {
                        sync_dir(parent_of(target))?;
                        return self.remove_old(tmp);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(io(e)),
                },
            }
        }
        Err(io(std::io::Error::other(
            "the directory kept changing under concurrent writers",
        )))
    }

    /// Keep the built set `tmp` under a visible name, `NAME.new-PID`, when the target
    /// turned into something tokensel must not replace while it ran; the error says where.
    fn keep_new(&self, tmp: &Path, refusal: Error) -> Error {
        let Ok(name) = name_of(&self.path) else {
            return refusal;
        };
        let keep = parent_of(&self.path).join(format!("{name}.new-{}", std::process::id()));
        let why = match &refusal {
            Error::Path { reason, .. } => reason.clone(),
            other => other.to_string(),
        };
        match std::fs::rename(tmp, &keep) {
            Ok(()) => Error::path(
                &self.path,
                format!(
                    "changed while tokensel ran ({why}); the new set is kept as `{}`",
                    keep.display()
                ),
            ),
            Err(_) => refusal,
        }
    }

    /// Remove the previous set, now at `old` after the exchange. Should what was
    /// exchanged out not be a set of this kind after all (the target was changed between
    /// the last look and the exchange), it is kept, renamed to `NAME.previous-PID`, and
    /// the error says where.
    fn remove_old(&self, old: &Path) -> Result<()> {
        match inspect(old, self.kind) {
            Ok(_) => std::fs::remove_dir_all(old).map_err(|source| Error::Io {
                path: old.to_path_buf(),
                source,
            }),
            Err(_) => {
                let keep = parent_of(&self.path).join(format!(
                    "{}.previous-{}",
                    name_of(&self.path)?,
                    std::process::id()
                ));
                let _ = std::fs::rename(old, &keep);
                Err(Error::path(
                    &self.path,
                    format!(
                        "changed while tokensel ran: the new set is published, what was there is kept as `{}`",
                        keep.display()
                    ),
                ))
            }
        }
    }
}

/// Whether a rename failed because its target exists (a non-empty directory).
fn is_exists(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::AlreadyExists
        || e.kind() == std::io::ErrorKind::DirectoryNotEmpty
}

/// Exchange the directories `a` and `b` atomically (Linux `renameat2` with
/// `RENAME_EXCHANGE`); where the file system does not support it, move `b` aside and
/// `a` into its place (a reader may then find no `b` for a moment, never a mix).
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    if let Some(exchanged) = rename_with(a, b, rustix::fs::RenameFlags::EXCHANGE) {
        return exchanged;
    }
    let aside = temp_path(b).map_err(|e| std::io::Error::other(e.to_string()))?;
    std::fs::rename(b, &aside)?;
    if let Err(e) = std::fs::rename(a, b) {
        let _ = std::fs::rename(&aside, b);
        return Err(e);
    }
    std::fs::rename(&aside, a)
}
