//! Agent sessions: starts a task's agent as a plain child process or in tmux on a private
//! socket, captures its output to the task's log, and reports every end of a session
//! through one path — running `warden task exited ID --session S --exit-code N` (DESIGN 2.2).
//!
//! Both modes end the same way: the process waiter (process mode) and tmux's `pane-died`
//! hook (tmux mode) run that command with `WARDEN_DIR` set, so the receiving side does not
//! care how the session was run. [`tmux_sweep`] is the safety net for a hook that never
//! fired; the receiver is idempotent, so a second report of the same session is harmless.

mod process;
#[cfg(test)]
mod tests;
mod tmux;

pub use process::*;
pub use tmux::*;

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rustix::process::{Pid, WaitId, WaitIdOptions};
use warden_core::model::TaskId;
use warden_store::config::{CREDENTIALS_VAR, SECRET_VARS};

use crate::check::{kill_group, tail};

/// The exit code reported for a session killed because it ran past its timeout (as
/// coreutils `timeout` does).
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// How often a session's log is measured against its `max_log_bytes`.
pub const LOG_CHECK: Duration = Duration::from_secs(1);

/// What ended a session's [`watch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Watched {
    /// It exited (its waiter closed the channel).
    Exited,
    /// Its time ran out.
    TimedOut,
    /// It wrote more than its `max_log_bytes` to its log since the watch began.
    LogFull,
}

/// How soon after a write to a session's log its length is measured again, while it
/// grows: what a session writes past its limit is what it writes in this time (at 1 GB/s,
/// 10 MB), and a session that writes without pause costs this watch 100 looks a second.
pub const LOG_GRAIN: Duration = Duration::from_millis(10);

/// Waits for a session's end (the `exited` channel closing), its `timeout`, or, with a
/// `max_log_bytes`, its log growing past that (the log is appended to by every session
/// of the task, so only this one's growth counts). The log is measured whenever it is
/// written to (inotify), at most every [`LOG_GRAIN`], and every [`LOG_CHECK`] besides:
/// measured once a second only, a session wrote a gigabyte past a 1 MiB limit, and a
/// burst that ended within the second was never measured at all. With the limit, the
/// end is seen at the next look (within [`LOG_CHECK`]); nothing waits on that. `ended`
/// (a pidfd of the session's process, for a tmux pane, whose end closes no channel)
/// ends the watch as the channel does: the watch of a pane that ended held its
/// inotify instance, and woke on the next session's writes, until its timeout.
pub(crate) fn watch(
    exited: &mpsc::Receiver<()>,
    timeout: Duration,
    log: &Path,
    max_log_bytes: Option<u64>,
    ended: Option<&rustix::fd::OwnedFd>,
) -> Watched {
    let len = || std::fs::metadata(log).map_or(0, |m| m.len());
    let start = std::time::Instant::now();
    let Some(max) = max_log_bytes else {
        if let Some(fd) = ended {
            // A pane without a limit: its end or its timeout.
            loop {
                let left = timeout.saturating_sub(start.elapsed());
                if left.is_zero() {
                    return Watched::TimedOut;
                }
                if readable(&[fd], left.min(LOG_CHECK))[0] {
                    return Watched::Exited;
                }
            }
        }
        return match exited.recv_timeout(timeout) {
            Err(RecvTimeoutError::Timeout) => Watched::TimedOut,
            _ => Watched::Exited,
        };
    };
    let base = len();
    // Without inotify (an exhausted watch limit), the log is measured every LOG_CHECK.
    let writes = log_writes(log);
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Watched::TimedOut;
        }
        match exited.try_recv() {
            Err(mpsc::TryRecvError::Empty) => {}
            _ => return Watched::Exited,
        }
        if len().saturating_sub(base) > max {
            return Watched::LogFull;
        }
        let wait = left.min(LOG_CHECK);
        match (&writes, ended) {
            (Some(w), end) => {
                let fds: Vec<&rustix::fd::OwnedFd> = std::iter::once(w).chain(end).collect();
                let ready = readable(&fds, wait);
                if ready.get(1) == Some(&true) {
                    return Watched::Exited;
                }
                if ready[0] {
                    take_writes(w);
                    std::thread::sleep(LOG_GRAIN);
                }
            }
            (None, Some(end)) => {
                if readable(&[end], wait)[0] {
                    return Watched::Exited;
                }
            }
            (None, None) => match exited.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return Watched::Exited,
            },
        }
    }
}

/// An inotify descriptor that becomes readable when `log` is written to.
fn log_writes(log: &Path) -> Option<rustix::fd::OwnedFd> {
    use rustix::fs::inotify;
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
    inotify::add_watch(&fd, log, inotify::WatchFlags::MODIFY).ok()?;
    Some(fd)
}

/// Waits up to `wait` for any of `fds` to become readable; which are.
fn readable(fds: &[&rustix::fd::OwnedFd], wait: Duration) -> Vec<bool> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut polled: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(*fd, PollFlags::IN))
        .collect();
    let limit = Timespec::try_from(wait).unwrap_or(Timespec {
        tv_sec: 1,
        tv_nsec: 0,
    });
    if poll(&mut polled, Some(&limit)).unwrap_or(0) == 0 {
        return vec![false; fds.len()];
    }
    polled.iter().map(|p| !p.revents().is_empty()).collect()
}

/// Takes what the inotify `fd` (see [`log_writes`]) reported: many writes are one event.
fn take_writes(fd: &rustix::fd::OwnedFd) {
    let mut buf = [0u8; 4096];
    while rustix::io::read(fd, &mut buf).is_ok_and(|n| n > 0) {}
}

/// The limit of a spec's log, as a person reads it.
fn log_limit(max: u64) -> String {
    match max % (1024 * 1024) {
        0 => format!("{} MiB", max / (1024 * 1024)),
        _ => format!("{max} bytes"),
    }
}

/// The log line of a session killed for its output.
pub(crate) fn log_full_note(spec: &SessionSpec) -> String {
    log_full_note_of(&spec.session_id, spec.max_log_bytes.unwrap_or(0))
}

/// … of session `session`, whose limit was `max` bytes.
pub(crate) fn log_full_note_of(session: &str, max: u64) -> String {
    format!(
        "--- session {session} wrote more than {} to this log; its process group was killed (limits.session_log_mib) ---",
        log_limit(max)
    )
}

/// The reason a session killed for its output is reported with.
pub(crate) fn log_full_reason(spec: &SessionSpec) -> String {
    log_full_reason_of(spec.max_log_bytes.unwrap_or(0))
}

/// … whose limit was `max` bytes.
pub(crate) fn log_full_reason_of(max: u64) -> String {
    format!(
        "killed: its output passed limits.session_log_mib, {}",
        log_limit(max)
    )
}

/// The log line of a session killed for running past its timeout.
pub(crate) fn timed_out_note(spec: &SessionSpec) -> String {
    format!(
        "--- session {} timed out after {}s; its process group was killed ---",
        spec.session_id,
        spec.timeout.as_secs_f64()
    )
}

/// The reason a session that ran out of time is reported with.
pub(crate) fn timed_out_reason(timeout: Duration) -> String {
    format!(
        "killed: it ran past limits.phase_timeout_s, {}s",
        timeout.as_secs_f64()
    )
}

/// Everything needed to start one agent session and report its end. It is also what the
/// supervisor writes to `session.json` for the `warden session-run` host to read.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SessionSpec {
    /// The task the session works on (`^[a-z0-9][a-z0-9._-]{0,63}$`).
    pub task_id: String,
    /// The id Warden gave this session; same character rules as a task id.
    pub session_id: String,
    /// The program and its arguments; never passed through a shell.
    pub argv: Vec<String>,
    /// The working directory (the task's worktree).
    pub cwd: PathBuf,
    /// Extra environment (`WARDEN_DIR`, `WARDEN_TASK_ID`, `WARDEN_TASK_FILE`, `WARDEN_ROLE`).
    pub env: Vec<(String, String)>,
    /// Where output goes (`.warden/tasks/<id>/output.log`); appended to, never truncated.
    pub log_path: PathBuf,
    /// The `warden` binary: its directory is put first on the session's `PATH`, and it is
    /// run to report the session's end.
    pub warden_exe: PathBuf,
    /// The project root (the directory holding `.warden/`), passed as `WARDEN_DIR` to the
    /// exit report.
    pub project_root: PathBuf,
    /// How long the session may run before its process group is killed and exit code
    /// [`TIMEOUT_EXIT_CODE`] is reported.
    #[serde(rename = "timeout_s", with = "seconds")]
    pub timeout: Duration,
    /// Bytes of output the session may add to `log_path` before its process group is
    /// killed (`None`: no limit).
    #[serde(default)]
    pub max_log_bytes: Option<u64>,
    /// How long a stopped session gets between TERM and KILL.
    #[serde(
        rename = "kill_after_s",
        with = "seconds",
        default = "default_kill_after"
    )]
    pub kill_after: Duration,
    /// A file the program reads as its standard input (an agent's prompt); none means
    /// `/dev/null` in process mode and the pane's terminal in tmux mode.
    #[serde(default)]
    pub stdin: Option<PathBuf>,
    /// The program sees only the variables [`SessionSpec::pass_env`] names from Warden's
    /// environment (an agent session); otherwise all of them but the store's secrets.
    #[serde(default)]
    pub clean_env: bool,
    /// With `clean_env`: the variables passed on (names, or prefixes ending in `*`).
    /// The store's secrets never pass.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// A directory a tmux pane makes before its program runs: the evidence that the session
    /// started, so that one recorded but never started (its runner stopped in between)
    /// is not taken for the agent's crash. (A process session's host names itself in its
    /// pid file first thing, which says as much.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_file: Option<PathBuf>,
    /// A file whose presence says the session was asked to stop before its program
    /// started (a person's cancel between the runner's recording of the session and its
    /// start): the host, or the tmux pane, looks for it just before it starts the
    /// program, and then never starts it. A stop writes it before it signals, so one of
    /// the two always sees the other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_file: Option<PathBuf>,
}

impl SessionSpec {
    /// The variables of Warden's own environment the program sees (before `env` and
    /// `PATH`, which the spec sets itself).
    pub fn inherited_env(&self) -> Vec<(OsString, OsString)> {
        std::env::vars_os()
            .filter(|(k, _)| {
                let Some(k) = k.to_str() else {
                    return !self.clean_env;
                };
                !SECRET_VARS.contains(&k)
                    && (!self.clean_env
                        || self
                            .pass_env
                            .iter()
                            .any(|p| warden_store::config::env_matches(p, k)))
            })
            .collect()
    }
}

fn default_kill_after() -> Duration {
    Duration::from_secs(5)
}

/// A [`Duration`] as whole seconds on the wire.
mod seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

/// How sessions are run (`agent.session` in `warden.toml`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionMode {
    /// A plain child process in its own process group, watched by a waiter thread.
    Process,
    /// A detached tmux session on Warden's private socket; a person can attach to it.
    Tmux {
        /// The private tmux socket (`tmux -S`).
        socket: PathBuf,
    },
}

/// Why a session could not be started, inspected or reported.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The command to run is empty.
    #[error("the session command is empty; set agent.command in .warden/warden.toml")]
    EmptyCommand,
    /// A task or session id has characters that are unsafe in a tmux name or a shell word.
    #[error(
        "invalid {what} {id:?}: use 1-64 characters from a-z, 0-9, '.', '_' and '-', starting with a letter or digit"
    )]
    BadId {
        /// "task id" or "session id".
        what: &'static str,
        /// The offending id.
        id: String,
    },
    /// A path that must be embedded in a tmux hook is not UTF-8.
    #[error(
        "path {0:?} is not valid UTF-8; move the project to a UTF-8 path or use agent.session = \"process\""
    )]
    NonUtf8Path(PathBuf),
    /// The session log could not be created or written.
    #[error("cannot write the session log {path}: {source}; check that the directory is writable")]
    Log {
        /// The log file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The agent program could not be started.
    #[error(
        "cannot start {program:?}: {source}; check agent.command in .warden/warden.toml and PATH"
    )]
    Spawn {
        /// The program (argv[0]).
        program: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file given as the program's standard input cannot be opened.
    #[error("cannot open {path} as the session's input: {source}")]
    Stdin {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// tmux is not installed.
    #[error(
        "tmux is not installed or not on PATH; install tmux or set agent.session = \"process\""
    )]
    TmuxMissing,
    /// A tmux command failed.
    #[error(
        "tmux {action} failed: {message}; if the server on {socket} is wedged, run `tmux -S {socket} kill-server`"
    )]
    Tmux {
        /// What was being done ("new-session", "list-panes", ...).
        action: &'static str,
        /// tmux's error message (last line of its stderr).
        message: String,
        /// The socket, shown so the person can reach the server.
        socket: String,
    },
    /// A live tmux session already runs for this task.
    #[error(
        "tmux session {name} is still running; stop it first (warden task cancel, or tmux -S {socket} kill-session -t {name})"
    )]
    TmuxSessionAlive {
        /// The tmux session name.
        name: String,
        /// The socket.
        socket: String,
    },
    /// The exit report (`warden task exited …`) could not be run or failed.
    #[error(
        "exit report for task {task_id} session {session_id} failed: {message}; run `warden task exited {task_id} --session {session_id} --exit-code {code}` by hand"
    )]
    Report {
        /// The task.
        task_id: String,
        /// The session.
        session_id: String,
        /// The exit code that was being reported.
        code: i32,
        /// What went wrong (spawn error, or exit status and stderr tail).
        message: String,
    },
}

pub(crate) fn check_ids(spec: &SessionSpec) -> Result<(), SessionError> {
    // The task-id rule is the core's; session ids follow the same rule because both end up
    // in a tmux session name, a tmux option and a shell command.
    for (what, id) in [("task id", &spec.task_id), ("session id", &spec.session_id)] {
        if TaskId::new(id).is_err() {
            return Err(SessionError::BadId {
                what,
                id: id.clone(),
            });
        }
    }
    if spec.argv.is_empty() {
        return Err(SessionError::EmptyCommand);
    }
    Ok(())
}

/// Makes every path in the spec absolute, so that neither the exit report (run from the
/// project root) nor tmux (whose server has its own working directory) misreads them.
pub(crate) fn absolutize(spec: &SessionSpec) -> SessionSpec {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    SessionSpec {
        cwd: abs(&spec.cwd),
        log_path: abs(&spec.log_path),
        warden_exe: abs(&spec.warden_exe),
        project_root: abs(&spec.project_root),
        stdin: spec.stdin.as_deref().map(abs),
        started_file: spec.started_file.as_deref().map(abs),
        stop_file: spec.stop_file.as_deref().map(abs),
        ..spec.clone()
    }
}

/// `PATH` for the session: the directory of `warden_exe` first, then the `PATH` from the
/// spec's env, or else Warden's own.
pub(crate) fn session_path(spec: &SessionSpec) -> OsString {
    let base = spec
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| OsString::from(v))
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    match spec
        .warden_exe
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        Some(dir) => {
            let mut p = dir.as_os_str().to_owned();
            if !base.is_empty() {
                p.push(":");
                p.push(base);
            }
            p
        }
        None => base,
    }
}

pub(crate) fn append_log(path: &Path) -> Result<File, SessionError> {
    let err = |source| SessionError::Log {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    open_log(OpenOptions::new().create(true).append(true), path).map_err(err)
}

/// Opens a session log with `opts` (see [`warden_store::files::open_file_only`]: the
/// session host and `task peek` hung on a FIFO put there).
fn open_log(opts: &mut OpenOptions, path: &Path) -> std::io::Result<File> {
    warden_store::files::open_file_only(
        opts,
        path,
        "not a regular file (a FIFO, socket or device was put where the session log goes); remove it",
    )
}

/// Appends one line to a log, ignoring failure: it is only ever a note next to the
/// session's own output, and the exit report matters more than the note. The note
/// starts a line of its own: output whose last line has no newline (`printf done`)
/// ran into "--- session … exited" before.
pub fn note(path: &Path, line: &str) {
    if let Ok(mut f) = open_log(
        OpenOptions::new().create(true).read(true).append(true),
        path,
    ) {
        let len = f.metadata().map_or(0, |m| m.len());
        let mut tail = Vec::new();
        let read = f.seek(SeekFrom::Start(len.saturating_sub(256))).is_ok()
            && Read::by_ref(&mut f)
                .take(256)
                .read_to_end(&mut tail)
                .is_ok();
        let sep = if read && !ends_a_line(&tail) {
            "\n"
        } else {
            ""
        };
        let _ = writeln!(f, "{sep}{line}");
    }
}

/// The start of the end marker a tmux pane prints after its program's output (an OSC
/// sequence, ended by BEL; see `PANE_SCRIPT`).
pub(crate) const END_MARKER_OSC: &str = "\x1b]6973;";

/// Does a log whose last bytes are `tail` end a line (or is it empty)? A pane's end
/// marker at the end is not output: the byte before it decides.
fn ends_a_line(tail: &[u8]) -> bool {
    let osc = END_MARKER_OSC.as_bytes();
    let mut t = tail;
    if t.last() == Some(&0x07)
        && let Some(at) = t.windows(osc.len()).rposition(|w| w == osc)
    {
        t = &t[..at];
    }
    t.last().is_none_or(|&b| b == b'\n')
}

/// A log as a person reads it: the panes' end markers taken out (a terminal ignores
/// them; a file, a pager or JSON shows them as `^[]6973;…^G`).
pub fn without_end_markers(text: &str) -> std::borrow::Cow<'_, str> {
    match without_end_markers_in(text.as_bytes()) {
        std::borrow::Cow::Borrowed(_) => text.into(),
        // What is taken out starts at ESC and ends at BEL, so the rest stays UTF-8.
        std::borrow::Cow::Owned(b) => String::from_utf8_lossy(&b).into_owned().into(),
    }
}

/// [`without_end_markers`] on bytes (`task log -f` passes the log's bytes on as read).
pub fn without_end_markers_in(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let osc = END_MARKER_OSC.as_bytes();
    let find = |b: &[u8]| b.windows(osc.len()).position(|w| w == osc);
    if find(bytes).is_none() {
        return bytes.into();
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some(at) = find(rest) {
        out.extend_from_slice(&rest[..at]);
        let after = &rest[at..];
        match after.iter().position(|&b| b == 0x07) {
            Some(end) => rest = &after[end + 1..],
            // Cut short (the log's tail was read mid-marker): kept as it is.
            None => {
                out.extend_from_slice(after);
                rest = &[];
            }
        }
    }
    out.extend_from_slice(rest);
    out.into()
}

pub(crate) fn header(spec: &SessionSpec) -> String {
    let role = spec
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "WARDEN_ROLE")
        .map(|(_, v)| v.as_str())
        .unwrap_or("agent");
    format!(
        "--- session {} ({role}, task {}) started ---",
        spec.session_id, spec.task_id
    )
}

/// Runs `<warden_exe> task exited <task_id> --session <session_id> --exit-code <code>` with
/// `WARDEN_DIR=<project_root>` and waits for it: the one way a session's end is reported.
/// [`tmux_sweep`] callers use it too.
pub fn report_exit(
    warden_exe: &Path,
    project_root: &Path,
    task_id: &str,
    session_id: &str,
    code: i32,
) -> Result<(), SessionError> {
    report_exit_why(warden_exe, project_root, task_id, session_id, code, None)
}

/// [`report_exit`] with the reason Warden ended the session, when it did (`--reason`).
pub fn report_exit_why(
    warden_exe: &Path,
    project_root: &Path,
    task_id: &str,
    session_id: &str,
    code: i32,
    reason: Option<&str>,
) -> Result<(), SessionError> {
    let fail = |message: String| SessionError::Report {
        task_id: task_id.to_owned(),
        session_id: session_id.to_owned(),
        code,
        message,
    };
    // A conflict (exit 4: the task's lock held by a long guard, a busy store) is safe to
    // retry; the report is worth waiting for, since the task waits on it.
    let mut pause = Duration::from_millis(100);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let out = Command::new(warden_exe)
            .args(["task", "exited", task_id, "--session", session_id])
            .arg("--exit-code")
            .arg(code.to_string())
            .args(reason.map(|r| ["--reason", r]).into_iter().flatten())
            .env("WARDEN_DIR", project_root)
            .env(ACTOR_VAR, "runner")
            .env_remove("WARDEN_ROLE")
            .current_dir(project_root)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| fail(format!("cannot run {}: {e}", warden_exe.display())))?;
        if out.status.success() {
            return Ok(());
        }
        if out.status.code() == Some(4) && attempt <= REPORT_RETRIES {
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(2));
            continue;
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(fail(format!(
            "{} ({})",
            tail(stderr.trim(), 500),
            exit_code_of(out.status)
        )));
    }
}

/// Starts `warden session-run SPEC` — the host of one process session — in a process
/// group of its own, detached from the caller, without the store's secrets (Warden's
/// own calls from it read `credentials` instead). Returns the host's pid; the host is
/// reaped by a thread of the caller's so it never lingers as a zombie.
pub fn start_host(
    warden_exe: &Path,
    spec_file: &Path,
    project_root: &Path,
    credentials: Option<&Path>,
) -> Result<u32, String> {
    let mut cmd = Command::new(warden_exe);
    for k in SECRET_VARS {
        cmd.env_remove(k);
    }
    if let Some(creds) = credentials {
        cmd.env(CREDENTIALS_VAR, creds);
    }
    cmd.arg("session-run")
        .arg(spec_file)
        .env("WARDEN_DIR", project_root)
        .env_remove("WARDEN_ROLE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", warden_exe.display()))?;
    let pid = child.id();
    std::thread::spawn(move || child.wait());
    Ok(pid)
}

/// How many times an exit report is tried again after a conflict (about a minute).
const REPORT_RETRIES: u32 = 40;

/// The variable that makes Warden's own calls from a session host or a hook record the
/// runner as their actor (they report for Warden, not for a person or the agent).
pub const ACTOR_VAR: &str = "WARDEN_ACTOR";

/// The shell convention: the exit code, or 128 + the signal that killed the process.
pub(crate) fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(128)
}

/// The last `lines` lines of a log file, reading only its tail (at most 4 MiB), with
/// carriage returns from a terminal stripped. A missing or unreadable log reads as empty.
pub fn peek_log(log_path: &Path, lines: usize) -> String {
    const CHUNK: u64 = 8192;
    const MAX: u64 = 4 << 20;
    if lines == 0 {
        return String::new();
    }
    let Ok(mut f) = open_log(OpenOptions::new().read(true), log_path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut start = len;
    let mut buf: Vec<u8> = Vec::new();
    // One newline more than the lines wanted proves the first kept line is complete.
    while start > 0 && len - start < MAX && buf.iter().filter(|&&b| b == b'\n').count() <= lines {
        let n = CHUNK.min(start);
        start -= n;
        let mut chunk = vec![0; n as usize];
        if f.seek(SeekFrom::Start(start)).is_err() || f.read_exact(&mut chunk).is_err() {
            return String::new();
        }
        chunk.extend_from_slice(&buf);
        buf = chunk;
    }
    let text = String::from_utf8_lossy(&buf);
    let text = without_end_markers(&text);
    let mut all: Vec<&str> = text.lines().collect();
    if start > 0 && !all.is_empty() {
        all.remove(0); // cut in the middle of a line
    }
    let from = all.len().saturating_sub(lines);
    all[from..]
        .iter()
        .map(|l| l.trim_end_matches('\r'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The last `max` bytes of a file as text (invalid UTF-8 replaced); empty when it cannot
/// be read.
pub fn peek_bytes(path: &Path, max: u64) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(max);
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(start)).is_err() || f.take(max).read_to_end(&mut buf).is_err() {
        return String::new();
    }
    String::from_utf8_lossy(&buf).into_owned()
}
