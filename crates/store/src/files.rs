//! Safe reads and atomic writes of the files Warden shares with agents.
//!
//! Reads refuse symlinks, non-regular files, files over 1 MiB and invalid UTF-8, each
//! with its own message. Writes go to a temporary file in the same directory, are
//! fsynced, renamed over the target, and the directory is fsynced: never a torn file.
//! An update of a view whose changed bytes lie inside one 512-byte sector (a status
//! change of TASK.md's frontmatter) is one `pwrite` in place instead: a kill or a crash
//! leaves the old bytes or the new ones, as a rename does.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest TASK.md (or other agent-written file) Warden reads.
pub const MAX_FILE_BYTES: u64 = warden_core::artifact::MAX_TASK_FILE_BYTES as u64;

/// Why a file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file does not exist.
    #[error("{0} does not exist")]
    Missing(String),
    /// A symlink where a regular file (or directory) must be.
    #[error(
        "{0} is a symbolic link; Warden reads only regular files inside the workspace — replace the link with the file itself"
    )]
    Symlink(String),
    /// A directory, device, FIFO, ….
    #[error("{0} is not a regular file; replace it with a regular file")]
    NotRegular(String),
    /// Over [`MAX_FILE_BYTES`].
    #[error("{0} is {1} bytes, over the {limit} limit; shorten it", limit = limit(*.2))]
    TooLarge(String, u64, u64),
    /// Not UTF-8.
    #[error("{0} is not valid UTF-8 (first bad byte at offset {1}); save it as UTF-8")]
    NotUtf8(String, usize),
    /// Any other I/O error.
    #[error("{}", io_text(path, source))]
    Io {
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

impl From<FileError> for warden_core::failure::Failure {
    /// Content problems (a link, a device, too large, not UTF-8) are refusals (exit 1); a
    /// missing file is not found (3); I/O is 5.
    fn from(e: FileError) -> Self {
        use warden_core::failure::{ExitCode, Failure};
        match e {
            FileError::Io { .. } => Failure::internal(e.to_string()),
            FileError::Missing(_) => Failure::not_found(e.to_string()),
            _ => Failure::refusal(ExitCode::Refused, e.to_string()),
        }
    }
}

/// An I/O error's one line: what to fix for the errors a person can fix (a full disk,
/// a read-only file system, missing permissions), else the system's words.
fn io_text(path: &str, source: &std::io::Error) -> String {
    use rustix::io::Errno;
    match source.raw_os_error() {
        Some(c) if c == Errno::NOSPC.raw_os_error() || c == Errno::DQUOT.raw_os_error() => {
            format!(
                "the disk holding {path} is full; nothing was written there — free space and try again"
            )
        }
        Some(c) if c == Errno::ROFS.raw_os_error() => {
            format!(
                "{path} is on a read-only file system; nothing was written there — mount it writable"
            )
        }
        Some(c) if c == Errno::ACCESS.raw_os_error() || c == Errno::PERM.raw_os_error() => {
            format!(
                "{path}: {source}; nothing was written there — give the user running warden write access to it and its directory (and clear an immutable flag: chattr -i)"
            )
        }
        _ => format!("{path}: {source}"),
    }
}

fn io(path: &Path, source: std::io::Error) -> FileError {
    FileError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Opens `path` with `opts`, never through a link and never blocking on a FIFO planted
/// there (opened non-blocking; a FIFO without a reader or anything but a regular file
/// is an `InvalidInput` error saying `refusal`): a lock file or a session log that was
/// a FIFO held every command that opened it for ever, before any timeout applied.
pub fn open_file_only(
    opts: &mut std::fs::OpenOptions,
    path: &Path,
    refusal: &'static str,
) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let not_a_file = || std::io::Error::new(std::io::ErrorKind::InvalidInput, refusal);
    let f = opts
        .custom_flags(flags.bits() as i32)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(code) if code == rustix::io::Errno::NXIO.raw_os_error() => not_a_file(),
            _ => e,
        })?;
    if !f.metadata()?.is_file() {
        return Err(not_a_file());
    }
    Ok(f)
}

/// Checks that no component of `path` below `base` is a symlink, so a link planted in
/// a task folder cannot make Warden read or write outside the workspace.
pub fn check_no_links(base: &Path, path: &Path) -> Result<(), FileError> {
    let rel = path.strip_prefix(base).unwrap_or(path);
    let mut cur = base.to_path_buf();
    for comp in rel.components() {
        cur.push(comp);
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(FileError::Symlink(cur.display().to_string()));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(&cur, e)),
        }
    }
    Ok(())
}

/// Opens a file under `base` that must be a regular file: no link in its folders, the file
/// itself opened without following a link (atomic, unlike a check before the open) and
/// without blocking (a FIFO must not hang the caller; it is refused), then judged by what
/// was opened. `write` opens it for reading and writing.
fn open_regular(
    base: &Path,
    path: &Path,
    write: bool,
) -> Result<(std::fs::File, std::fs::Metadata), FileError> {
    use rustix::fs::{Mode, OFlags};
    let shown = || path.display().to_string();
    if let Some(dir) = path.parent() {
        check_no_links(base, dir)?;
    }
    let access = if write { OFlags::RDWR } else { OFlags::RDONLY };
    let flags = access | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let f = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => std::fs::File::from(fd),
        Err(rustix::io::Errno::NOENT) => return Err(FileError::Missing(shown())),
        Err(rustix::io::Errno::LOOP) => return Err(FileError::Symlink(shown())),
        Err(e) => return Err(io(path, e.into())),
    };
    let meta = f.metadata().map_err(|e| io(path, e))?;
    if !meta.is_file() {
        return Err(FileError::NotRegular(shown()));
    }
    Ok((f, meta))
}

/// A size limit as a person reads it: `1 MiB`, `9.5 MiB`, `4096 bytes`.
fn limit(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    if bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    } else {
        format!("{bytes} bytes")
    }
}

/// Reads an agent-writable text file under `base` safely (see the module docs), of at
/// most [`MAX_FILE_BYTES`].
pub fn read_text(base: &Path, path: &Path) -> Result<String, FileError> {
    read_text_up_to(base, path, MAX_FILE_BYTES)
}

/// [`read_text`] with another size limit: for a file Warden itself writes that grows
/// with the project (STATE.md of 100,000 tasks is about 5 MB).
pub fn read_text_up_to(base: &Path, path: &Path, max: u64) -> Result<String, FileError> {
    // Every file begins with the empty prefix.
    Ok(read_text_after(base, path, max, "")?.unwrap_or_default())
}

/// [`read_text_up_to`] for a file that must begin with `prefix`: `Ok(None)` when it
/// does not, read no further than the prefix's length (a kept file that went stale is
/// refused without reading it all). The text returned is what follows the prefix.
pub fn read_text_after(
    base: &Path,
    path: &Path,
    max: u64,
    prefix: &str,
) -> Result<Option<String>, FileError> {
    let shown = path.display().to_string();
    let (mut f, meta) = open_regular(base, path, false)?;
    if meta.len() > max {
        return Err(FileError::TooLarge(shown, meta.len(), max));
    }
    let mut head = vec![0; prefix.len()];
    match f.read_exact(&mut head) {
        Ok(()) if head == prefix.as_bytes() => {}
        Ok(()) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(io(path, e)),
    }
    let mut bytes = Vec::with_capacity((meta.len() as usize).saturating_sub(prefix.len()));
    // A file that grew since it was measured is read no further than the limit.
    f.take((max + 1).saturating_sub(prefix.len() as u64))
        .read_to_end(&mut bytes)
        .map_err(|e| io(path, e))?;
    let read = (prefix.len() + bytes.len()) as u64;
    if read > max {
        return Err(FileError::TooLarge(shown, read, max));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| FileError::NotUtf8(shown, e.utf8_error().valid_up_to()))
}

/// [`read_text`] of a file written by another tool (a get-shit-done plan) that may not be
/// UTF-8 throughout: each invalid sequence is replaced by U+FFFD, and the offset of the
/// first one is returned beside the text (`None` when it was valid).
pub fn read_text_lossy(base: &Path, path: &Path) -> Result<(String, Option<usize>), FileError> {
    let shown = path.display().to_string();
    let (f, meta) = open_regular(base, path, false)?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(FileError::TooLarge(shown, meta.len(), MAX_FILE_BYTES));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // A file that grew since it was measured is read no further than the limit.
    f.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io(path, e))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FileError::TooLarge(
            shown,
            bytes.len() as u64,
            MAX_FILE_BYTES,
        ));
    }
    Ok(match String::from_utf8(bytes) {
        Ok(text) => (text, None),
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            (String::from_utf8_lossy(e.as_bytes()).into_owned(), Some(at))
        }
    })
}

/// Writes a cache file that readers may find missing (they redo its work): the old file
/// is removed first and the new one renamed to a free name. Renaming over a file makes
/// ext4 write the new one out at once (`auto_da_alloc`): for a 4.8 MB file on this
/// machine that took 5.3-6.9 ms against 1.1-3.8 ms this way. The file is `parts` one
/// after another (a key and a text written without joining them first).
pub fn write_cache(path: &Path, parts: &[&[u8]]) -> Result<(), FileError> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(path, e)),
    }
    write_replace(path, parts, false, 0o666)
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The temporary name used while writing `path`.
fn temp_name(path: &Path) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

/// Removes temporary files that a killed writer left beside `path` (`.NAME.PID.N.tmp`
/// whose process is gone). They are never read; this only keeps directories tidy.
pub fn remove_stale_temps(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!(".{}.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = n.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".tmp")) else {
            continue;
        };
        let pid = rest.split('.').next().and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && pid != std::process::id()
            && !Path::new("/proc").join(pid.to_string()).exists()
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Writes `bytes` to `path` atomically: temp file, fsync, rename, fsync of the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    write_replace(path, &[bytes], true, 0o666)
}

/// [`write_atomic`] for a file only its owner may read (mode 0600 from the start).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    write_replace(path, &[bytes], true, 0o600)
}

/// [`write_atomic`] of a file that may be there already, keeping its permission bits
/// (a person's settings file kept at 0600 stays so); a new one is made as
/// [`write_atomic`] makes it.
pub fn write_atomic_keeping_mode(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    use std::os::unix::fs::PermissionsExt;
    // The permission bits only: a set-id bit is not carried to a new file.
    let kept = std::fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o777);
    write_replace(path, &[bytes], true, kept.unwrap_or(0o666))?;
    // The mode asked for at creation is cut by the umask: set it whole.
    if let Some(mode) = kept {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| io(path, e))?;
    }
    Ok(())
}

/// Writes a *view* (a file Warden regenerates from the store: TASK.md's frontmatter
/// mirror, STATE.md) atomically by rename, without fsync: a reader never sees a torn
/// file, a kill -9 loses nothing (the page cache survives it), and after a power loss
/// the next write regenerates the view from the store, which is fsynced.
pub fn write_view(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    write_replace(path, &[bytes], false, 0o666)
}

fn write_replace(path: &Path, parts: &[&[u8]], durable: bool, mode: u32) -> Result<(), FileError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = temp_name(path);
    // An error writing the temporary file is said of the file it replaces: that is the
    // one a person knows (and the temporary one is gone).
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .map_err(|e| io(path, e))?;
        for bytes in parts {
            f.write_all(bytes).map_err(|e| io(path, e))?;
        }
        if durable {
            f.sync_all().map_err(|e| io(path, e))?;
        }
        drop(f);
        std::fs::rename(&tmp, path).map_err(|e| {
            // A directory where the file goes is the person's to move, not a storage
            // failure.
            if e.kind() == std::io::ErrorKind::IsADirectory {
                FileError::NotRegular(path.display().to_string())
            } else {
                io(path, e)
            }
        })?;
        if durable { sync_dir(dir) } else { Ok(()) }
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Removes `path`; a file already gone is not an error.
pub fn remove_if_present(path: &Path) -> Result<(), FileError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(path, e)),
        _ => Ok(()),
    }
}

/// fsyncs a directory so a rename in it is durable.
pub fn sync_dir(dir: &Path) -> Result<(), FileError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, e))
}

/// Replaces the view at `path` with `update(current)`, but only if nobody changed it
/// since it was read: the file is re-read just before the rename and the update is
/// recomputed when it differs, so an agent's concurrent body edit is never lost. Like
/// [`write_view`], it renames without fsync (see there). `read` is the file's text as
/// the caller just read it, if it has (the first read is then skipped). Returns the text
/// written.
pub fn update_text(
    base: &Path,
    path: &Path,
    mut read: Option<String>,
    mut update: impl FnMut(&str) -> String,
) -> Result<String, FileError> {
    for _ in 0..16 {
        let current = match read.take() {
            Some(text) => text,
            None => read_text(base, path)?,
        };
        let new = update(&current);
        if new == current {
            return Ok(new);
        }
        if let Some((at, patch)) = sector_patch(&current, &new) {
            match patch_in_place(base, path, &current, at, patch)? {
                Patched::Done => return Ok(new),
                Patched::Changed => continue,
                Patched::Linked => {}
            }
        }
        let tmp = temp_name(path);
        {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| io(&tmp, e))?;
            if crate::failpoint::armed("mid-taskmd-write") {
                // Half the new text, then a crash: the rename never happens.
                let half = new.len() / 2;
                f.write_all(&new.as_bytes()[..half])
                    .map_err(|e| io(&tmp, e))?;
                crate::failpoint::hit("mid-taskmd-write");
            }
            f.write_all(new.as_bytes()).map_err(|e| io(&tmp, e))?;
        }
        // The window between this check and the rename is a few microseconds; an edit
        // that lands in it is caught by the agent's editor seeing a changed file.
        let again = read_text(base, path);
        if again.as_deref().ok() != Some(current.as_str()) {
            let _ = std::fs::remove_file(&tmp);
            continue;
        }
        std::fs::rename(&tmp, path).map_err(|e| io(path, e))?;
        remove_stale_temps(path);
        return Ok(new);
    }
    Err(io(
        path,
        std::io::Error::other("the file kept changing while Warden tried to update it; try again"),
    ))
}

/// The size of the unit a disk writes whole: an overwrite inside one such unit leaves,
/// after a crash or power loss, either the old bytes or the new ones.
const SECTOR: usize = 512;

/// When `new` differs from `current` only inside one [`SECTOR`] (same length; a status
/// change of TASK.md's frontmatter, whose status line is padded to one width for this),
/// the offset and bytes to overwrite in place.
fn sector_patch<'a>(current: &str, new: &'a str) -> Option<(usize, &'a [u8])> {
    let (a, b) = (current.as_bytes(), new.as_bytes());
    if a.len() != b.len() {
        return None;
    }
    let first = a.iter().zip(b).position(|(x, y)| x != y)?;
    let last = a.len()
        - a.iter()
            .rev()
            .zip(b.iter().rev())
            .position(|(x, y)| x != y)?;
    (first / SECTOR == (last - 1) / SECTOR).then(|| (first, &b[first..last]))
}

/// What [`patch_in_place`] did.
enum Patched {
    /// The bytes are written.
    Done,
    /// The file no longer holds the text read: read it again.
    Changed,
    /// The file has other names: replace it instead.
    Linked,
}

/// Overwrites `patch` at `at` in `path` if the file still holds `current` (read back
/// through the handle that writes, so the check and the write see one file). One `pwrite`
/// inside one sector of one page: a kill leaves the old text or the new one, as a crash
/// of the disk does, and no temporary file, rename or write-out of a new file's blocks
/// is paid (the rename was most of what a status change spent on TASK.md). An agent's
/// write that lands after the check is kept, except for these few bytes.
fn patch_in_place(
    base: &Path,
    path: &Path,
    current: &str,
    at: usize,
    patch: &[u8],
) -> Result<Patched, FileError> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let (f, meta) = open_regular(base, path, true)?;
    // A file with another name (a hard link an agent made to a file outside the
    // workspace) is replaced, which breaks the link, never written through.
    if meta.nlink() != 1 {
        return Ok(Patched::Linked);
    }
    if meta.len() != current.len() as u64 {
        return Ok(Patched::Changed);
    }
    let mut now = Vec::with_capacity(current.len() + 1);
    (&f).take(current.len() as u64 + 1)
        .read_to_end(&mut now)
        .map_err(|e| io(path, e))?;
    if now != current.as_bytes() {
        return Ok(Patched::Changed);
    }
    // The crash matrix's crash in the middle of a TASK.md write: here, before the one
    // write that changes the file.
    crate::failpoint::hit("mid-taskmd-write");
    f.write_all_at(patch, at as u64).map_err(|e| io(path, e))?;
    Ok(Patched::Done)
}

/// Creates a directory (and parents) under `base`, refusing symlinked components.
pub fn create_dir(base: &Path, dir: &Path) -> Result<(), FileError> {
    check_no_links(base, dir)?;
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "warden-files-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn refuses_links_large_and_non_utf8() {
        let d = tmp();
        let f = d.join("TASK.md");
        std::fs::write(&f, "ok").unwrap();
        assert_eq!(read_text(&d, &f).unwrap(), "ok");
        std::os::unix::fs::symlink("/etc/passwd", d.join("link.md")).unwrap();
        assert!(matches!(
            read_text(&d, &d.join("link.md")),
            Err(FileError::Symlink(_))
        ));
        std::fs::create_dir(d.join("real")).unwrap();
        std::fs::write(d.join("real/TASK.md"), "x").unwrap();
        std::os::unix::fs::symlink(d.join("real"), d.join("linked-dir")).unwrap();
        assert!(matches!(
            read_text(&d, &d.join("linked-dir/TASK.md")),
            Err(FileError::Symlink(_))
        ));
        std::fs::write(&f, vec![b'a'; MAX_FILE_BYTES as usize + 1]).unwrap();
        let e = read_text(&d, &f).unwrap_err();
        assert!(matches!(e, FileError::TooLarge(..)));
        assert!(e.to_string().contains("over the 1 MiB limit"), "{e}");
        // A file Warden writes that grows with the project is read with its own limit.
        let big = MAX_FILE_BYTES * 5 / 2;
        assert_eq!(
            read_text_up_to(&d, &f, big).unwrap().len() as u64,
            MAX_FILE_BYTES + 1
        );
        let e = read_text_up_to(&d, &f, MAX_FILE_BYTES / 2).unwrap_err();
        assert!(e.to_string().contains("over the 524288 bytes limit"), "{e}");
        std::fs::write(&f, b"ab\xffcd").unwrap();
        match read_text(&d, &f) {
            Err(FileError::NotUtf8(_, 2)) => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read_text(&d, &d.join("real")),
            Err(FileError::NotRegular(_))
        ));
        assert!(matches!(
            read_text(&d, &d.join("nope")),
            Err(FileError::Missing(_))
        ));
        // A FIFO is refused at once: the read must not wait for a writer.
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.join("fifo.md"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(matches!(
            read_text(&d, &d.join("fifo.md")),
            Err(FileError::NotRegular(_))
        ));
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn atomic_write_and_update() {
        let d = tmp();
        let f = d.join("TASK.md");
        write_atomic(&f, b"one").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "one");
        let out = update_text(&d, &f, None, |s| format!("{s}+two")).unwrap();
        assert_eq!(out, "one+two");
        let leftovers: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".tmp")
            })
            .collect();
        assert!(leftovers.is_empty());
        std::fs::remove_dir_all(d).unwrap();
    }

    /// A change of a few bytes inside one sector is written in place (the same file, no
    /// rename); a change of length, or one that spans sectors, replaces the file; a file
    /// an agent changed since it was read is read again, and its change is kept.
    #[test]
    fn a_kept_file_is_read_past_its_prefix_only_when_it_has_it() {
        let d = tmp();
        let f = d.join("kept");
        write_cache(&f, &[b"key 7\n", b"the text"]).unwrap();
        assert_eq!(
            read_text_after(&d, &f, 1 << 20, "key 7\n").unwrap(),
            Some("the text".to_owned())
        );
        assert_eq!(read_text_after(&d, &f, 1 << 20, "key 8\n").unwrap(), None);
        assert_eq!(
            read_text_after(&d, &f, 1 << 20, "key 7\nthe text, and more").unwrap(),
            None,
            "a file shorter than the prefix"
        );
        assert!(matches!(
            read_text_after(&d, &f, 8, "key 7\n"),
            Err(FileError::TooLarge(..))
        ));
        // Written again: a new file in its place (never written through).
        use std::os::unix::fs::MetadataExt;
        let before = std::fs::metadata(&f).unwrap().ino();
        std::fs::hard_link(&f, d.join("other name")).unwrap();
        write_cache(&f, &[b"key 8\nnew"]).unwrap();
        assert_ne!(std::fs::metadata(&f).unwrap().ino(), before);
        assert_eq!(
            std::fs::read_to_string(d.join("other name")).unwrap(),
            "key 7\nthe text",
            "the other name keeps the old file"
        );
        assert_eq!(
            read_text_after(&d, &f, 1 << 20, "key 8\n").unwrap(),
            Some("new".to_owned())
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_change_inside_one_sector_is_written_in_place() {
        use std::os::unix::fs::MetadataExt;
        let d = tmp();
        let f = d.join("TASK.md");
        let body = "b".repeat(2000);
        let text = |status: &str| format!("---\nstatus: {status:<13}\n---\n{body}");
        write_atomic(&f, text("working").as_bytes()).unwrap();
        let ino = || std::fs::metadata(&f).unwrap().ino();
        let before = ino();
        let set = |to: &str| {
            let to = format!("status: {to:<13}");
            move |s: &str| {
                let (head, rest) = s.split_at(4);
                let line_end = rest.find('\n').unwrap();
                format!("{head}{to}{}", &rest[line_end..])
            }
        };
        let out = update_text(&d, &f, None, set("clarification")).unwrap();
        assert_eq!(out, text("clarification"));
        assert_eq!(std::fs::read_to_string(&f).unwrap(), text("clarification"));
        assert_eq!(ino(), before, "a status change is written in place");

        // The caller's text is stale: an agent appended to the file since. The in-place
        // write is not made over it; the update is made again on what the file holds.
        let stale = text("clarification");
        let mut agent = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
        agent.write_all(b"\n## Handoff\nmine\n").unwrap();
        drop(agent);
        let out = update_text(&d, &f, Some(stale), set("working")).unwrap();
        assert_eq!(out, format!("{}\n## Handoff\nmine\n", text("working")));
        assert_eq!(std::fs::read_to_string(&f).unwrap(), out);

        // A file with another name (a hard link to a file outside the workspace) is
        // replaced, never written through.
        let outside = d.join("outside.md");
        std::fs::hard_link(&f, &outside).unwrap();
        let out = update_text(&d, &f, None, set("clarification")).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), out);
        assert!(out.contains("status: clarification"));
        assert!(
            std::fs::read_to_string(&outside)
                .unwrap()
                .contains("status: working      \n"),
            "written through a hard link"
        );
        assert_eq!(std::fs::metadata(&f).unwrap().nlink(), 1);

        // A change of length replaces the file.
        let before = ino();
        update_text(&d, &f, None, |s| format!("{s}more")).unwrap();
        assert_ne!(ino(), before);
        // So does a same-length change across two sectors.
        let before = ino();
        let out = update_text(&d, &f, None, |s| {
            let mut b = s.as_bytes().to_vec();
            b[10] = b'X';
            b[1500] = b'Y';
            String::from_utf8(b).unwrap()
        })
        .unwrap();
        assert_ne!(ino(), before);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), out);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_sector_patch_is_the_changed_bytes_of_one_sector() {
        assert_eq!(
            sector_patch("status: working", "status: stuck  "),
            Some((8, &b"stuck  "[..]))
        );
        assert_eq!(sector_patch("abc", "abc"), None);
        assert_eq!(sector_patch("abc", "abcd"), None);
        let (a, mut b) = ("x".repeat(1024), "x".repeat(1024).into_bytes());
        b[511] = b'y';
        assert_eq!(
            sector_patch(&a, std::str::from_utf8(&b).unwrap()),
            Some((511, &b"y"[..]))
        );
        b[512] = b'y';
        assert_eq!(sector_patch(&a, std::str::from_utf8(&b).unwrap()), None);
    }
}
