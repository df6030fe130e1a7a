//! Writing files safely: atomic writes (a synced temporary renamed into place), atomic
//! writes that several processes may do at once, and the check that an output directory
//! can receive files before any work starts.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// Write `bytes` to `path` atomically: a temporary file in the same directory, synced,
/// then renamed over `path`. A crash leaves either the old file or the new one.
/// A kill between the write and the rename leaves `.NAME.tmpPID` behind; the next
/// atomic write of `path` removes such leftovers first.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    remove_stale_temps(path);
    let tmp = write_temp(path, bytes)?;
    std::fs::rename(&tmp, path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Write `bytes` to `path` atomically where several processes may write the same file
/// at once (a grid's shards all write `grid.json`, possibly from several machines on a
/// shared file system): each writer uses its own temporary name (process id, a counter
/// and the time) and removes no other writer's temporaries, so concurrent writers never
/// break each other's rename; the last rename wins, and all of them are complete files.
pub fn write_atomic_shared(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let unique = format!(
        ".{name}.tmp{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let tmp = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(d) => d.join(unique),
        None => unique.into(),
    };
    let mut file = std::fs::File::create(&tmp).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Remove temporaries `.NAME.tmp*` that killed writers of `path` left beside it.
pub(crate) fn remove_stale_temps(path: &Path) {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let prefix = format!(".{name}.tmp");
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Write `bytes` to a synced temporary file beside `path` (`.NAME.tmpPID`) and return
/// its path.
pub(crate) fn write_temp(path: &Path, bytes: &[u8]) -> Result<std::path::PathBuf> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir
        .map(|d| d.join(format!(".{name}.tmp{}", std::process::id())))
        .unwrap_or_else(|| format!(".{name}.tmp{}", std::process::id()).into());
    let mut file = std::fs::File::create(&tmp).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    Ok(tmp)
}

/// Check, before any work, that `dir` can receive output files: create it if missing,
/// then create and remove a probe file in it.
pub fn check_output_dir(dir: &Path) -> Result<()> {
    let io = |source| Error::Io {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let probe = dir.join(format!(".tokensel-probe{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(io)?;
    std::fs::remove_file(&probe).map_err(io)
}
