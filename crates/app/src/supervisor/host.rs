//! `warden session-run`: the small process that hosts one process session, waits for it
//! and reports its end; it outlives the supervisor, so a kill -9 of `warden run` never
//! loses a session's end. Its pid file beside TASK.md lets a restarted supervisor tell a
//! live session from a dead one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use warden_runner::session::{self, SessionSpec};

/// `warden session-run SPEC.json`: runs one process session to its end and reports it.
/// Returns the session's exit code.
pub fn session_run(spec_file: &Path) -> Result<i32, String> {
    let text = std::fs::read(spec_file).map_err(|e| format!("{}: {e}", spec_file.display()))?;
    let spec: SessionSpec =
        serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", spec_file.display()))?;
    // The wrapper names itself at once, so a sweep never takes a session whose
    // supervisor died right after starting it for one that never started.
    if let Some(dir) = spec_file.parent() {
        write_pid_file_of(
            dir,
            &spec.session_id,
            std::process::id(),
            std::os::unix::process::parent_id(),
        );
    }
    let s = session::start_process(&spec).map_err(|e| e.to_string())?;
    Ok(s.join().unwrap_or(128))
}

/// The exit code reported for a session whose end was not seen (its wrapper is gone).
pub const UNKNOWN_EXIT: i32 = 128;

/// How long a recorded session may take to write its pid file before a sweep takes it
/// for one that never started.
const START_GRACE: Duration = Duration::from_secs(10);

/// Is this session being started right now: its spec was written moments ago, and its
/// wrapper has not written its pid file yet?
pub(super) fn starting(dir: &Path, session: &str) -> bool {
    let file = dir.join("session.json");
    let fresh = std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().unwrap_or_default() < START_GRACE);
    fresh
        && std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<SessionSpec>(&b).ok())
            .is_some_and(|w| w.session_id == session)
}

/// `session.pid` beside TASK.md: `<session> <pid> <supervisor pid>`.
fn pid_file(dir: &Path) -> PathBuf {
    dir.join("session.pid")
}

pub(super) fn write_pid_file(dir: &Path, session: &str, pid: u32) {
    write_pid_file_of(dir, session, pid, std::process::id());
}

fn write_pid_file_of(dir: &Path, session: &str, pid: u32, supervisor: u32) {
    let text = format!("{session} {pid} {supervisor}\n");
    let _ = warden_store::files::write_atomic(&pid_file(dir), text.as_bytes());
}

pub(super) fn read_pid_file(dir: &Path) -> Option<(String, u32, u32)> {
    let text = std::fs::read_to_string(pid_file(dir)).ok()?;
    let mut it = text.split_whitespace();
    Some((
        it.next()?.to_owned(),
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    ))
}

pub(super) fn alive(pid: u32) -> bool {
    rustix::process::Pid::from_raw(pid as i32)
        .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
}

/// Is the process hosting a session (its `warden session-run`) still running?
pub(super) fn pid_file_alive(dir: &Path, session: &str) -> bool {
    matches!(read_pid_file(dir), Some((s, pid, _)) if s == session && alive(pid))
}
