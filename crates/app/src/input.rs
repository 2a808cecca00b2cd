//! Reading files a person names on the command line (`--body-file`, a plan file, a
//! memory delta): bounded in size, regular files only, never blocking on a FIFO or a
//! device, UTF-8. `-` means standard input, read up to the same bound.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use warden_core::failure::Failure;

use crate::Result;

/// Reads `path` (or standard input for `-`) as UTF-8 text of at most `limit` bytes.
/// `what` names the input in messages ("the plan", "--body-file").
pub fn read_text(path: &Path, limit: u64, what: &str) -> Result<String> {
    let mut bytes = Vec::new();
    let shown = if path == Path::new("-") {
        let read = std::io::stdin()
            .lock()
            .take(limit + 1)
            .read_to_end(&mut bytes);
        read.map_err(|e| Failure::usage(format!("cannot read {what} from standard input: {e}")))?;
        "standard input".to_owned()
    } else {
        let shown = path.display().to_string();
        // O_NONBLOCK: opening a FIFO with no writer must not wait for one; the file type
        // is then checked on the open file, so nothing can swap it in between.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(path)
            .map_err(|e| {
                Failure::usage(format!("cannot read {what} {shown}: {e}; check the path"))
            })?;
        let meta = f
            .metadata()
            .map_err(|e| Failure::usage(format!("cannot read {what} {shown}: {e}")))?;
        let ft = meta.file_type();
        if !ft.is_file() {
            let kind = if ft.is_dir() {
                "a directory"
            } else if ft.is_fifo() {
                "a FIFO"
            } else if ft.is_char_device() || ft.is_block_device() {
                "a device"
            } else if ft.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            };
            return Err(Failure::refused(format!(
                "{what} {shown} is {kind}; give a regular file (or - for standard input)"
            )));
        }
        if meta.len() > limit {
            return Err(too_large(what, &shown, meta.len(), limit));
        }
        f.take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Failure::usage(format!("cannot read {what} {shown}: {e}")))?;
        shown
    };
    if bytes.len() as u64 > limit {
        return Err(too_large(what, &shown, bytes.len() as u64, limit));
    }
    String::from_utf8(bytes).map_err(|e| {
        Failure::refused(format!(
            "{what} {shown} is not valid UTF-8 (first bad byte at offset {}); save it as UTF-8",
            e.utf8_error().valid_up_to()
        ))
    })
}

fn too_large(what: &str, shown: &str, len: u64, limit: u64) -> Failure {
    Failure::refused(format!(
        "{what} {shown} is over the {} limit ({}{} bytes); shorten it",
        human(limit),
        if len > limit { "at least " } else { "" },
        len
    ))
}

/// `1 MiB`, `64 MiB`, or bytes.
pub fn human(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounded_and_never_block() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("ok.json");
        std::fs::write(&ok, "{}").unwrap();
        assert_eq!(read_text(&ok, 10, "the plan").unwrap(), "{}");
        let big = dir.path().join("big");
        std::fs::write(&big, "x".repeat(11)).unwrap();
        let e = read_text(&big, 10, "the plan").unwrap_err();
        assert_eq!(e.code, crate::ExitCode::Refused, "{e}");
        assert!(e.message.contains("over the 10 bytes limit"), "{e}");
        let bad = dir.path().join("bad");
        std::fs::write(&bad, b"\xff").unwrap();
        assert!(
            read_text(&bad, 10, "x")
                .unwrap_err()
                .message
                .contains("UTF-8")
        );
        // A device that never ends, and a FIFO without a writer: refused at once.
        let e = read_text(Path::new("/dev/zero"), 10, "--body-file").unwrap_err();
        assert!(e.message.contains("a device"), "{e}");
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let e = read_text(&fifo, 10, "--body-file").unwrap_err();
        assert!(e.message.contains("a FIFO"), "{e}");
        let e = read_text(&dir.path().join("missing"), 10, "the plan").unwrap_err();
        assert_eq!(e.code, crate::ExitCode::Usage);
        assert_eq!(human(1 << 20), "1 MiB");
    }
}
