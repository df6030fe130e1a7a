//! Reading and writing single files safely.
//!
//! Every input file tokensel reads goes through [`open_input`] / [`read_input`]: the
//! file is opened without blocking (a FIFO would otherwise wait forever for a writer),
//! the type of the opened descriptor is checked (only regular files are read: FIFOs,
//! devices, sockets and directories are refused before a byte is read), and its size is
//! bounded before anything is allocated for it.
//!
//! Every single output file is written by [`write_atomic`]: a uniquely named temporary
//! beside it, synced, then renamed over it, so concurrent writers never break each
//! other and a reader sees a complete old or new file. Sets of files are published by
//! `io::publish`.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Largest small input: config, claims and grid TOML, grid specs, cell files, data
/// manifests (64 MiB).
pub const SMALL_INPUT: u64 = 64 << 20;

/// Largest large input: trajectories, reports, state files, external trajectories
/// (8 GiB, the data limit `config::MAX_DATA_BYTES`).
pub const LARGE_INPUT: u64 = crate::config::MAX_DATA_BYTES;

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The name of a file type for messages, for everything but a regular file.
fn type_name(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Open the input `path` for reading: without blocking, then refused unless the opened
/// descriptor is a regular file (exit 2), or when it is larger than `limit` bytes
/// ([`Error::TooLarge`], exit 3). With `follow` false a symbolic link is refused too.
/// Returns the file and its length.
fn open_checked(path: &Path, limit: u64, follow: bool) -> Result<(File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = rustix::fs::OFlags::NONBLOCK;
    if !follow {
        flags |= rustix::fs::OFlags::NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(code) if !follow && code == rustix::io::Errno::LOOP.raw_os_error() => {
                Error::path(path, "is a symbolic link: give the file itself")
            }
            _ => io_error(path)(e),
        })?;
    checked(path, file, limit)
}

/// The opened input `file` (named `path` in messages), refused unless it is a regular
/// file of at most `limit` bytes; returns it and its length.
fn checked(path: &Path, file: File, limit: u64) -> Result<(File, u64)> {
    let meta = file.metadata().map_err(io_error(path))?;
    if !meta.is_file() {
        return Err(Error::path(
            path,
            format!(
                "is {}, not a regular file: not read",
                type_name(meta.file_type())
            ),
        ));
    }
    if meta.len() > limit {
        return Err(Error::TooLarge {
            field: path.display().to_string(),
            reason: format!(
                "the file holds {} bytes, more than the {} bytes an input of its kind may hold",
                meta.len(),
                limit
            ),
        });
    }
    Ok((file, meta.len()))
}

/// Open the input `path` (a regular file of at most `limit` bytes, see the module
/// documentation); returns the file and its length.
pub fn open_input(path: &Path, limit: u64) -> Result<(File, u64)> {
    open_checked(path, limit, true)
}

/// A directory opened once, to read the members of one published set through it
/// (`openat`): every member comes from the directory that was opened, even when a
/// writer swaps a new set in meanwhile (see `io::publish`).
#[derive(Debug)]
pub struct SetDir {
    fd: rustix::fd::OwnedFd,
    path: PathBuf,
}

impl SetDir {
    /// Open the directory `path` (a symbolic link to a directory is followed).
    pub fn open(path: &Path) -> Result<SetDir> {
        use rustix::fs::{CWD, Mode, OFlags, openat};
        let fd = openat(
            CWD,
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_error(path)(e.into()))?;
        Ok(SetDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The path of the member `name` (for messages).
    pub fn member(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Open the member `name` as an input ([`open_input`]'s checks; a symbolic link is
    /// refused, a set holds none). A member that is gone is an I/O error of kind
    /// `NotFound` naming it (the set was removed while it was read).
    pub fn open_input(&self, name: &str, limit: u64) -> Result<(File, u64)> {
        use rustix::fs::{Mode, OFlags, openat};
        let path = self.member(name);
        let fd = openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP => Error::path(&path, "is a symbolic link: not read"),
            e => io_error(&path)(e.into()),
        })?;
        checked(&path, File::from(fd), limit)
    }

    /// The bytes of the member `name` ([`SetDir::open_input`], then [`read_input`]'s
    /// size checks).
    pub fn read(&self, name: &str, limit: u64) -> Result<Vec<u8>> {
        let (file, len) = self.open_input(name, limit)?;
        read_all(&self.member(name), file, len, limit)
    }

    /// The text of the member `name` (invalid UTF-8 is an I/O error naming it).
    pub fn read_text(&self, name: &str, limit: u64) -> Result<String> {
        String::from_utf8(self.read(name, limit)?).map_err(|_| {
            io_error(&self.member(name))(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            ))
        })
    }
}

/// Read `file` (of `len` bytes when opened) to the end, refusing more than `limit`
/// bytes (a file that grows while it is read).
fn read_all(path: &Path, file: File, len: u64, limit: u64) -> Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(len.min(limit) as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(io_error(path))?;
    if bytes.len() as u64 > limit {
        return Err(Error::TooLarge {
            field: path.display().to_string(),
            reason: format!("the file grew past {limit} bytes while it was read"),
        });
    }
    Ok(bytes)
}

/// The bytes of the input `path`: a regular file of at most `limit` bytes (a FIFO,
/// device or directory is refused before reading, exit 2; a larger file is refused,
/// exit 3).
pub fn read_input(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let (file, len) = open_input(path, limit)?;
    read_all(path, file, len, limit)
}

/// [`read_input`] that refuses a symbolic link too (state files: a link is never
/// followed, so it is never replaced by what it points to).
pub fn read_input_no_symlink(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let (file, len) = open_checked(path, limit, false)?;
    read_all(path, file, len, limit)
}

/// The text of the input `path` ([`read_input`]; invalid UTF-8 is an I/O error naming
/// the file).
pub fn read_text(path: &Path, limit: u64) -> Result<String> {
    String::from_utf8(read_input(path, limit)?).map_err(|_| {
        io_error(path)(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })
}

impl crate::config::Config {
    /// Read a TOML overlay file (see [`Config::from_toml_str`](crate::config::Config::from_toml_str)):
    /// a regular file of at most [`SMALL_INPUT`] bytes ([`read_text`]).
    pub fn from_file(path: &Path) -> Result<crate::config::Config> {
        crate::config::Config::from_toml_str(&read_text(path, SMALL_INPUT)?, path)
    }
}

/// This host's name, as it appears in temporary names (characters other than ASCII
/// letters, digits, `-` and `.` replaced by `_`).
fn host() -> String {
    let uname = rustix::system::uname();
    uname
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
        .collect()
}

/// The marker between a target's name and the writer's identity in a temporary's name.
const TEMP_TAG: &str = ".tokensel-tmp-";

/// The directory a target lives in (`.` for a bare name).
pub(crate) fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The file name of `path`, or an error naming it.
pub(crate) fn name_of(path: &Path) -> Result<String> {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| Error::path(path, "has no file name"))
}

/// A fresh temporary path beside `target`, unique to this writer:
/// `.NAME.tokensel-tmp-PID-COUNTER-NANOS-START@HOST` (START: the writer's start time in
/// clock ticks since boot, left out where /proc cannot give it).
pub(crate) fn temp_path(target: &Path) -> Result<PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    temp_with(target, COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The longest temporary name a writer of `target` will use (the counter at its
/// largest): probed before any work, so a name too long for the file system
/// (`NAME_MAX`) is refused then, not when the result is written.
pub(crate) fn longest_temp_path(target: &Path) -> Result<PathBuf> {
    temp_with(target, u64::MAX)
}

/// The temporary beside `target` with the counter `counter`.
fn temp_with(target: &Path, counter: u64) -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // the writer's start time, where /proc gives it: a later process with the same id
    // is told apart from it (`writer_gone`)
    let start = own_start().map_or(String::new(), |t| format!("-{t}"));
    let name = format!(
        ".{}{TEMP_TAG}{}-{counter}-{nanos}{start}@{}",
        name_of(target)?,
        std::process::id(),
        host()
    );
    Ok(parent_of(target).join(name))
}

/// Refuse an output path whose final component is `.` or `..` (or that has none, `/`
/// or the empty path): the output replaces its final name by a rename, which `DIR/.`
/// and `DIR/..` cannot be (exit 2, before any work). tokensel does not normalise such
/// a path: give the directory by its own name. With `file` (a single output file) a
/// trailing `/` is refused too.
pub(crate) fn check_final_name(path: &Path, file: bool) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    if file && bytes.ends_with(b"/") {
        return Err(Error::path(
            path,
            "ends in `/`: an output file is named by its file name",
        ));
    }
    let end = bytes.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    let last = bytes[..end].rsplit(|&b| b == b'/').next().unwrap_or(b"");
    if last.is_empty() || last == b"." || last == b".." {
        return Err(Error::path(
            path,
            "has no final name of its own (it ends in `.` or `..`, or is `/`): an output is renamed into place under its final name, give it by that name",
        ));
    }
    Ok(())
}

/// `path` made absolute: its longest existing ancestor with symbolic links resolved,
/// the rest appended lexically (`..` removes the previous component). Two outputs that
/// would be the same file or one inside the other compare equal or as prefix.
pub(crate) fn resolved(path: &Path) -> PathBuf {
    use std::path::Component;
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let comps: Vec<Component> = abs.components().collect();
    for k in (1..=comps.len()).rev() {
        let prefix: PathBuf = comps[..k].iter().collect();
        if let Ok(mut out) = prefix.canonicalize() {
            for c in &comps[k..] {
                match c {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::CurDir => {}
                    c => out.push(c),
                }
            }
            return out;
        }
    }
    abs
}

/// Whether the entry `name` beside `target` is a temporary of a writer of `target`.
pub(crate) fn is_temp_of(name: &str, target_name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|n| n.strip_prefix(target_name))
        .is_some_and(|n| n.starts_with(TEMP_TAG))
}

/// Whether any entry name is a tokensel temporary (of any target).
pub(crate) fn is_temp(name: &str) -> bool {
    name.starts_with('.') && name.contains(TEMP_TAG)
}

/// The writer (process id, its start time if the name records it, host) a temporary's
/// name records.
fn writer_of(name: &str) -> Option<(u32, Option<u64>, &str)> {
    let (_, rest) = name.split_once(TEMP_TAG)?;
    let (ids, host) = rest.rsplit_once('@')?;
    let mut fields = ids.split('-');
    let pid = fields.next()?.parse().ok()?;
    let start = fields.nth(2).and_then(|f| f.parse().ok());
    Some((pid, start, host))
}

/// Whether the writer `pid` of this host, started at `start` (clock ticks since boot,
/// where its temporary's name records it), has ended: the process is gone
/// ([`is_dead`]), or the process now holding that id started at another time (the id
/// was reused: by a later run in a container, where every run may get the same id, or
/// by this very process). Start times count ticks since boot, so a change of the
/// system clock cannot make a live writer look gone.
fn writer_gone(pid: u32, start: Option<u64>) -> bool {
    is_dead(pid) || start.is_some_and(|s| start_ticks(pid).is_some_and(|now| now != s))
}

/// When process `pid` started, in clock ticks since boot (`/proc/PID/stat`, field 22);
/// `None` where that cannot be read.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `PID (COMMAND) STATE ...`: the command may itself hold `)`; field 22 is the 20th
    // after it
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// This process's start time ([`start_ticks`]), read once.
fn own_start() -> Option<u64> {
    static START: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *START.get_or_init(|| start_ticks(std::process::id()))
}

/// Whether process `pid` of this host has ended: it no longer exists, or it has exited
/// and only waits for its parent to collect its status (a zombie: a writer killed by a
/// parent that has not waited for it yet, which signals still reach).
fn is_dead(pid: u32) -> bool {
    let Some(id) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    match rustix::process::test_kill_process(id) {
        Err(rustix::io::Errno::SRCH) => true,
        Ok(()) | Err(rustix::io::Errno::PERM) => is_zombie(pid),
        Err(_) => false,
    }
}

/// Whether process `pid` has exited but not been reaped (state `Z` or `X` in
/// `/proc/PID/stat`); `false` where that cannot be read (a live process, or no `/proc`).
fn is_zombie(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `PID (COMMAND) STATE ...`: the command may itself hold `)`, the state follows the last
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state == "Z" || state == "X")
}

/// Remove the temporaries beside `target` left by writers that died on this host (a
/// kill between writing and renaming). Temporaries of live writers, and of other hosts
/// (a shared file system), are never touched.
pub fn remove_dead_temps(target: &Path) {
    if let Ok(name) = name_of(target) {
        remove_dead(parent_of(target), &|n| is_temp_of(n, &name));
    }
}

/// [`remove_dead_temps`] for every target in `dir` (a directory of cell files).
pub fn remove_dead_temps_in(dir: &Path) {
    remove_dead(dir, &is_temp);
}

/// Remove the entries of `dir` that `select` names and whose writer died on this host.
fn remove_dead(dir: &Path, select: &dyn Fn(&str) -> bool) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let me = host();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !select(&name) {
            continue;
        }
        match writer_of(&name) {
            Some((pid, start, h)) if h == me && writer_gone(pid, start) => {
                let path = entry.path();
                let _ = match std::fs::symlink_metadata(&path) {
                    Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
                    _ => std::fs::remove_file(&path),
                };
            }
            _ => {}
        }
    }
}

/// Sync a directory (its entries: a rename into it survives a crash).
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

/// Create `path` (it must not exist), write `bytes` and sync.
pub(crate) fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_error(path))?;
    file.write_all(bytes).map_err(io_error(path))?;
    file.sync_all().map_err(io_error(path))
}

/// Write `bytes` to `path` atomically: a temporary unique to this writer beside it
/// (`.NAME.tokensel-tmp-PID-COUNTER-NANOS@HOST`), synced, renamed over `path`. A crash leaves the old file or the
/// new one (and the temporary: [`remove_dead_temps`] removes it later); concurrent
/// writers never remove each other's temporaries, so none of them fails and the last
/// rename wins.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_path(path)?;
    if let Err(e) = write_new(&tmp, bytes) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_error(path)(e));
    }
    sync_dir(parent_of(path))
}

/// Create `path` atomically with `bytes` unless it exists: a temporary unique to this
/// writer, synced, then renamed into place only if nothing is there (Linux
/// `renameat2(RENAME_NOREPLACE)`, a hard link where that is not supported). Returns
/// `false`, leaving `path` as it is, when it already exists: of concurrent creators
/// exactly one wins and the others see its complete file.
pub fn create_atomic(path: &Path, bytes: &[u8]) -> Result<bool> {
    let tmp = temp_path(path)?;
    if let Err(e) = write_new(&tmp, bytes) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let placed = place_new(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match placed {
        Ok(()) => sync_dir(parent_of(path)).map(|()| true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_error(path)(e)),
    }
}

/// Put the file `tmp` at `path` unless something is there (`AlreadyExists`).
fn place_new(tmp: &Path, path: &Path) -> std::io::Result<()> {
    if let Some(renamed) = rename_with(tmp, path, rustix::fs::RenameFlags::NOREPLACE) {
        return renamed;
    }
    std::fs::hard_link(tmp, path)
}

/// Rename `a` to `b` with Linux `renameat2` and `flags`; `None` where the kernel or
/// the file system does not support them (the caller falls back).
pub(crate) fn rename_with(
    a: &Path,
    b: &Path,
    flags: rustix::fs::RenameFlags,
) -> Option<std::io::Result<()>> {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{CWD, renameat_with};
        match renameat_with(CWD, a, CWD, b, flags) {
            Ok(()) => return Some(Ok(())),
            Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {}
            Err(e) => return Some(Err(e.into())),
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (a, b, flags);
    None
}

/// Check, before any work, that the single output file `path` can be written: it is
/// absent or a regular file (never a directory, FIFO or link, which a rename would
/// replace), its final name is its own (see `check_final_name`), and its directory
/// (created if missing) accepts the longest temporary the writer will use (a name too
/// long for the file system is refused here). Temporaries of dead writers of `path` are
/// removed.
pub fn check_output_file(path: &Path) -> Result<()> {
    check_final_name(path, true)?;
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.is_file() => {
            return Err(Error::path(
                path,
                format!(
                    "is {}: an output file replaces only a regular file",
                    type_name(m.file_type())
                ),
            ));
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(path)(e)),
    }
    let dir = parent_of(path);
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let probe = longest_temp_path(path)?;
    write_new(&probe, b"")?;
    std::fs::remove_file(&probe).map_err(io_error(dir))?;
    remove_dead_temps(path);
    Ok(())
}

/// Refuse an output file that is one of the command's inputs (the same file: device
/// and inode, whatever the spelling of either path), which writing it would replace.
pub fn check_not_an_input(out: &Path, inputs: &[&Path]) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(o) = std::fs::metadata(out) else {
        return Ok(()); // not there yet: no input is it
    };
    for input in inputs {
        if let Ok(i) = std::fs::metadata(input)
            && (i.dev(), i.ino()) == (o.dev(), o.ino())
        {
            return Err(Error::argument(
                "--out",
                format!(
                    "`{}` is the input `{}`: writing it would replace that input",
                    out.display(),
                    input.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Check, before any work, that `dir` can receive files: create it if missing, then
/// create and remove a probe (a temporary of this writer) in it.
pub fn check_output_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let probe = temp_path(&dir.join("probe"))?;
    write_new(&probe, b"")?;
    std::fs::remove_file(&probe).map_err(io_error(dir))
}
