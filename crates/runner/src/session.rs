//! Agent sessions: starts a task's agent as a plain child process or in tmux on a private
//! socket, captures its output to the task's log, and reports every end of a session
//! through one path — running `warden task exited ID --session S --exit-code N` (DESIGN 2.2).
//!
//! Both modes end the same way: the process waiter (process mode) and tmux's `pane-died`
//! hook (tmux mode) run that command with `WARDEN_DIR` set, so the receiving side does not
//! care how the session was run. [`tmux_sweep`] is the safety net for a hook that never
//! fired; the receiver is idempotent, so a second report of the same session is harmless.

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

// ---------------------------------------------------------------------------------------
// Shared by both modes
// ---------------------------------------------------------------------------------------

fn check_ids(spec: &SessionSpec) -> Result<(), SessionError> {
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
fn absolutize(spec: &SessionSpec) -> SessionSpec {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    SessionSpec {
        cwd: abs(&spec.cwd),
        log_path: abs(&spec.log_path),
        warden_exe: abs(&spec.warden_exe),
        project_root: abs(&spec.project_root),
        ..spec.clone()
    }
}

/// `PATH` for the session: the directory of `warden_exe` first, then the `PATH` from the
/// spec's env, or else Warden's own.
fn session_path(spec: &SessionSpec) -> OsString {
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

fn append_log(path: &Path) -> Result<File, SessionError> {
    let err = |source| SessionError::Log {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(err)
}

/// Appends one line to a log, ignoring failure: it is only ever a note next to the
/// session's own output, and the exit report matters more than the note.
fn note(path: &Path, line: &str) {
    if let Ok(mut f) = OpenOptions::new().append(true).open(path) {
        let _ = writeln!(f, "{line}");
    }
}

fn header(spec: &SessionSpec) -> String {
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
    let fail = |message: String| SessionError::Report {
        task_id: task_id.to_owned(),
        session_id: session_id.to_owned(),
        code,
        message,
    };
    let out = Command::new(warden_exe)
        .args(["task", "exited", task_id, "--session", session_id])
        .arg("--exit-code")
        .arg(code.to_string())
        .env("WARDEN_DIR", project_root)
        .current_dir(project_root)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| fail(format!("cannot run {}: {e}", warden_exe.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(fail(format!(
        "{} ({})",
        tail(stderr.trim(), 500),
        exit_code_of(out.status)
    )))
}

/// The shell convention: the exit code, or 128 + the signal that killed the process.
fn exit_code_of(status: std::process::ExitStatus) -> i32 {
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
    let Ok(mut f) = File::open(log_path) else {
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

// ---------------------------------------------------------------------------------------
// Process mode
// ---------------------------------------------------------------------------------------

/// What the waiter, the timer and `kill` agree on, under one lock.
#[derive(Debug, Default)]
struct Life {
    /// The child has exited. It stays a zombie (its pid, hence its process group id,
    /// cannot be reused) until the waiter reaps it right after setting this, so whoever
    /// sees `false` under the lock may still signal the group safely.
    exited: bool,
    timed_out: bool,
    killed: bool,
}

#[derive(Debug, Default)]
struct Shared {
    life: Mutex<Life>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Life> {
        // A panic while holding the lock leaves plain flags behind; they are still usable.
        self.life.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A session running as a child process. Dropping it does not stop the session; the
/// waiter still reports its end.
#[derive(Debug)]
pub struct ProcessSession {
    /// The child's pid, also its process group id.
    pub pid: u32,
    /// The session id from the spec.
    pub session_id: String,
    /// The waiter thread: finishes after the exit report ran, returning the reported code.
    pub waiter: JoinHandle<i32>,
    shared: Arc<Shared>,
}

impl ProcessSession {
    /// Whether the session's process is still running.
    pub fn is_alive(&self) -> bool {
        let life = self.shared.lock();
        // Once exited the pid may be reaped and reused, so only ask the kernel before.
        !life.exited
            && Pid::from_raw(self.pid as i32)
                .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
    }

    /// Kills the session's whole process group with SIGKILL. The waiter still reports the
    /// end (exit code 137).
    pub fn kill(&self) {
        let mut life = self.shared.lock();
        if !life.exited {
            life.killed = true;
            kill_group(self.pid);
        }
    }

    /// Whether the session has ended and its exit report has run.
    pub fn is_finished(&self) -> bool {
        self.waiter.is_finished()
    }

    /// Waits until the session has ended and its exit report has run; returns the
    /// reported exit code (`None` if the waiter panicked).
    pub fn join(self) -> Option<i32> {
        self.waiter.join().ok()
    }
}

/// Starts `spec.argv` (no shell) as a child in its own process group, in `spec.cwd`, with
/// stdin from /dev/null and stdout and stderr appended to `spec.log_path`. A waiter thread
/// blocks on the child's exit (no polling), kills the rest of its process group, and runs
/// the exit report; a timer kills the group at `spec.timeout` and the report says 124.
/// If this returns an error nothing was started and nothing is reported.
pub fn start_process(spec: &SessionSpec) -> Result<ProcessSession, SessionError> {
    check_ids(spec)?;
    let spec = absolutize(spec);
    let mut log = append_log(&spec.log_path)?;
    let log_err = |source| SessionError::Log {
        path: spec.log_path.clone(),
        source,
    };
    writeln!(log, "{}", header(&spec)).map_err(log_err)?;
    let stderr_log = log.try_clone().map_err(log_err)?;

    let mut cmd = Command::new(&spec.argv[0]);
    cmd.args(&spec.argv[1..])
        .current_dir(&spec.cwd)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr_log);
    for k in SECRET_VARS {
        cmd.env_remove(k);
    }
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env("PATH", session_path(&spec))
        .process_group(0);
    let mut child = cmd.spawn().map_err(|source| SessionError::Spawn {
        program: spec.argv[0].clone(),
        source,
    })?;
    // Our copies of the log handles go with `cmd`; only the child holds the log now.
    drop(cmd);
    let pid = child.id();
    let shared = Arc::new(Shared::default());

    // The timer sleeps on a channel the waiter closes when the child exits, so neither
    // thread polls.
    let (exited_tx, exited_rx) = mpsc::channel::<()>();
    let timer_shared = Arc::clone(&shared);
    let timeout = spec.timeout;
    std::thread::Builder::new()
        .name(format!("warden-timer-{}", spec.session_id))
        .spawn(move || {
            if let Err(RecvTimeoutError::Timeout) = exited_rx.recv_timeout(timeout) {
                let mut life = timer_shared.lock();
                if !life.exited {
                    life.timed_out = true;
                    kill_group(pid);
                }
            }
        })
        .map_err(|source| SessionError::Spawn {
            program: "the session timer thread".into(),
            source,
        })?;

    let waiter_shared = Arc::clone(&shared);
    let session_id = spec.session_id.clone();
    let waiter = std::thread::Builder::new()
        .name(format!("warden-session-{}", spec.session_id))
        .spawn(move || {
            // Wait without reaping, so the group id stays ours while we mark the exit and
            // kill whatever the session left running in its group.
            if let Some(p) = Pid::from_raw(pid as i32) {
                while let Err(e) = rustix::process::waitid(
                    WaitId::Pid(p),
                    WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
                ) {
                    if e != rustix::io::Errno::INTR {
                        break;
                    }
                }
            }
            let (timed_out, killed) = {
                let mut life = waiter_shared.lock();
                life.exited = true;
                kill_group(pid);
                (life.timed_out, life.killed)
            };
            let status = child.wait();
            drop(exited_tx);
            let code = match status {
                _ if timed_out => TIMEOUT_EXIT_CODE,
                Ok(st) => exit_code_of(st),
                Err(_) => 128,
            };
            let sid = &spec.session_id;
            if timed_out {
                note(
                    &spec.log_path,
                    &format!(
                        "--- session {sid} timed out after {}s; its process group was killed ---",
                        timeout.as_secs_f64()
                    ),
                );
            } else if killed {
                note(&spec.log_path, &format!("--- session {sid} was killed ---"));
            }
            note(
                &spec.log_path,
                &format!("--- session {sid} exited with code {code} ---"),
            );
            if let Err(e) = report_exit(
                &spec.warden_exe,
                &spec.project_root,
                &spec.task_id,
                sid,
                code,
            ) {
                note(&spec.log_path, &format!("--- {e} ---"));
            }
            code
        })
        .map_err(|source| SessionError::Spawn {
            program: "the session waiter thread".into(),
            source,
        })?;
    Ok(ProcessSession {
        pid,
        session_id,
        waiter,
        shared,
    })
}

// ---------------------------------------------------------------------------------------
// Tmux mode
// ---------------------------------------------------------------------------------------

/// One pane on Warden's tmux server (one per session).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TmuxPane {
    /// The tmux session name (`warden-<task id>`, see [`tmux_session_name`]).
    pub name: String,
    /// The task, as recorded when the session was started.
    pub task_id: Option<String>,
    /// The Warden session id, as recorded when the session was started.
    pub session_id: Option<String>,
    /// The pane's process has exited (the pane stays because of `remain-on-exit`).
    pub dead: bool,
    /// For a dead pane: the exit code, 128 + signal, or 124 if it was expired. `None` while
    /// the pane runs, and also for a dead pane whose exit status tmux has not collected
    /// yet (see [`tmux_sweep`]).
    pub dead_status: Option<i32>,
    /// The pane's process id (also its process group id), while it runs.
    pub pid: Option<u32>,
}

/// The tmux session name for a task: `warden-<task id>`, with `.` written as `+` because
/// tmux does not allow `.` in session names (task ids never contain `+`).
pub fn tmux_session_name(task_id: &str) -> String {
    format!("warden-{}", task_id.replace('.', "+"))
}

/// A target for a session's (only) window and pane; `=` asks for an exact name match,
/// where tmux would otherwise accept a prefix.
fn target(name: &str) -> String {
    format!("={name}:")
}

fn tmux_command(program: &OsStr, socket: &Path) -> Command {
    let mut c = Command::new(program);
    // `-f /dev/null`: Warden's server never reads the person's ~/.tmux.conf.
    c.arg("-f").arg("/dev/null").arg("-S").arg(socket);
    // The server's global environment, which every pane inherits, is this client's:
    // keep the store's secrets out of it.
    c.env_remove("TMUX").stdin(Stdio::null());
    for k in SECRET_VARS {
        c.env_remove(k);
    }
    c
}

/// Runs one tmux command line (possibly several commands joined by `;`), returning stdout;
/// `path` replaces the client's `PATH`.
fn run_tmux_with(
    program: &OsStr,
    socket: &Path,
    action: &'static str,
    args: &[OsString],
    path: Option<&OsStr>,
) -> Result<String, SessionError> {
    let mut cmd = tmux_command(program, socket);
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    let out = cmd.args(args).output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => SessionError::TmuxMissing,
        _ => SessionError::Tmux {
            action,
            message: e.to_string(),
            socket: socket.display().to_string(),
        },
    })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(SessionError::Tmux {
        action,
        message: stderr.trim().lines().last().unwrap_or("").to_owned(),
        socket: socket.display().to_string(),
    })
}

fn run_tmux(socket: &Path, action: &'static str, args: &[&str]) -> Result<String, SessionError> {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    run_tmux_with(OsStr::new("tmux"), socket, action, &args, None)
}

/// tmux found no server, or reached one that was exiting because its last session went
/// ("server exited unexpectedly", or "no current target" from a server with no sessions).
fn no_server(e: &SessionError) -> bool {
    matches!(e, SessionError::Tmux { message, .. }
        if message.contains("no server running")
            || message.contains("error connecting")
            || message.contains("server exited unexpectedly")
            || message.contains("no current target"))
}

/// Protects an argument from tmux's command-line splitting, which treats any argument
/// ending in `;` as a command separator: `x;` is passed as `x\;`, which tmux turns back
/// into `x;`.
fn tmux_arg(s: impl AsRef<OsStr>) -> OsString {
    let b = s.as_ref().as_bytes();
    if b.last() == Some(&b';') {
        let mut v = b[..b.len() - 1].to_vec();
        v.extend_from_slice(b"\\;");
        OsString::from_vec(v)
    } else {
        s.as_ref().to_owned()
    }
}

/// Quotes a word for `sh`: single quotes, with `'` written as `'\''`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Escapes text for a tmux format (`run-shell` and `pipe-pane` expand formats): `#`
/// starts every format sequence, so doubling it leaves the text literal.
fn format_escape(s: &str) -> String {
    s.replace('#', "##")
}

/// Quotes a string for tmux's command parser with double quotes, inside which `\`, `"`
/// and `$` (environment variables) are special.
fn tmux_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if matches!(c, '\\' | '"' | '$') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn utf8(p: &Path) -> Result<&str, SessionError> {
    p.to_str()
        .ok_or_else(|| SessionError::NonUtf8Path(p.to_path_buf()))
}

/// A shell word that survives tmux's format expansion and then `sh`.
fn shell_word(s: &str) -> String {
    format_escape(&sh_quote(s))
}

/// The `pane-died` hook: a tmux command that runs the exit report in the background with
/// the pane's exit code (124 if it was expired, 128 + signal if it was killed).
fn pane_died_hook(spec: &SessionSpec) -> Result<String, SessionError> {
    let log = shell_word(utf8(&spec.log_path)?);
    let script = format!(
        "c=#{{?@warden_timed_out,{TIMEOUT_EXIT_CODE},#{{pane_dead_status}}}}; \
         [ -n \"$c\" ] || c=$((128 + #{{?pane_dead_signal,#{{pane_dead_signal}},0}})); \
         s={sid}; \
         printf '%s\\n' \"--- session $s exited with code $c ---\" >> {log}; \
         WARDEN_DIR={root} {creds}{exe} task exited {task} --session \"$s\" --exit-code \"$c\" \
         > /dev/null 2>> {log} || printf '%s\\n' \"--- exit report failed with code $? ---\" >> {log}",
        sid = shell_word(&spec.session_id),
        root = shell_word(utf8(&spec.project_root)?),
        exe = shell_word(utf8(&spec.warden_exe)?),
        task = shell_word(&spec.task_id),
        creds = match spec.env.iter().rev().find(|(k, _)| k == CREDENTIALS_VAR) {
            Some((k, v)) => format!("{k}={} ", shell_word(v)),
            None => String::new(),
        },
    );
    Ok(format!("run-shell -b {}", tmux_quote(&script)))
}

/// Starts `spec.argv` in a detached tmux session named [`tmux_session_name`] on the private
/// `socket`, with `spec.cwd`, `spec.env` and `PATH` (the directory of `warden_exe` first).
/// The session keeps its dead pane (`remain-on-exit`), pipes its output to `spec.log_path`,
/// and reports its end from the `pane-died` hook. A dead session of the same name is
/// removed first; a live one is an error. The timeout is enforced by a detached thread
/// that calls [`tmux_expire`]. Returns the tmux session name.
pub fn start_tmux(socket: &Path, spec: &SessionSpec) -> Result<String, SessionError> {
    check_ids(spec)?;
    let spec = absolutize(spec);
    let socket = std::path::absolute(socket).unwrap_or_else(|_| socket.to_path_buf());
    let name = tmux_session_name(&spec.task_id);
    let sock_str = || socket.display().to_string();
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).map_err(|e| SessionError::Tmux {
            action: "socket directory",
            message: e.to_string(),
            socket: sock_str(),
        })?;
    }
    if let Some(old) = tmux_list(&socket)?.into_iter().find(|p| p.name == name) {
        if !old.dead {
            return Err(SessionError::TmuxSessionAlive {
                name,
                socket: sock_str(),
            });
        }
        tmux_remove(&socket, &name)?;
    }
    let hook = pane_died_hook(&spec)?;
    let pipe = format!("cat >> {}", shell_word(utf8(&spec.log_path)?));
    let mut log = append_log(&spec.log_path)?;
    writeln!(log, "{}", header(&spec)).map_err(|source| SessionError::Log {
        path: spec.log_path.clone(),
        source,
    })?;
    drop(log);

    // One tmux invocation, commands joined by `;`: the server runs them back to back
    // before it handles the child's exit or reads its output, so even an instant exit
    // finds remain-on-exit, the hook and the output pipe in place.
    let t = target(&name);
    let mut args: Vec<OsString> = ["new-session", "-d", "-s", &name, "-x", "200", "-y", "50"]
        .iter()
        .map(OsString::from)
        .collect();
    args.push("-c".into());
    args.push(tmux_arg(&spec.cwd));
    let mut env_arg = |k: &str, v: &OsStr| {
        let mut kv = OsString::from(k);
        kv.push("=");
        kv.push(v);
        args.push("-e".into());
        args.push(tmux_arg(kv));
    };
    for (k, v) in &spec.env {
        if k != "PATH" {
            env_arg(k, OsStr::new(v));
        }
    }
    env_arg("PATH", &session_path(&spec));
    args.push("--".into());
    if spec.argv.len() == 1 {
        // tmux runs a single-word command through `sh -c`; pass the program as `$0` of
        // a fixed script instead, so it is never parsed by a shell.
        args.extend(["sh", "-c", "exec \"$0\""].map(OsString::from));
    }
    args.extend(spec.argv.iter().map(tmux_arg));
    for cmd in [
        vec!["set-option", "-t", &t, "remain-on-exit", "on"],
        vec!["set-option", "-t", &t, "@warden_task", &spec.task_id],
        vec!["set-option", "-t", &t, "@warden_session", &spec.session_id],
        vec!["set-hook", "-t", &t, "pane-died", &hook],
        vec!["pipe-pane", "-o", "-t", &t, &pipe],
    ] {
        args.push(";".into());
        args.extend(cmd.into_iter().map(tmux_arg));
    }
    // tmux gives a new pane the PATH of the client that created it, whatever `-e` says.
    let path = session_path(&spec);
    let mut tries = 0;
    loop {
        match run_tmux_with(
            OsStr::new("tmux"),
            &socket,
            "new-session",
            &args,
            Some(&path),
        ) {
            // A server exiting as its last session went runs no command; the next try
            // starts a fresh one.
            Err(e) if no_server(&e) && tries < 3 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            other => break other.map(drop)?,
        };
    }

    // Durations this long mean "no timeout"; no thread is needed for them.
    if spec.timeout < Duration::from_secs(100 * 365 * 24 * 3600) {
        let (socket, name2, timeout) = (socket.clone(), name.clone(), spec.timeout);
        let _ = std::thread::Builder::new()
            .name(format!("warden-tmux-timer-{}", spec.session_id))
            .spawn(move || {
                std::thread::sleep(timeout);
                let current = tmux_list(&socket).ok().and_then(|ps| {
                    ps.into_iter().find(|p| {
                        p.name == name2
                            && !p.dead
                            && p.session_id.as_deref() == Some(&spec.session_id)
                    })
                });
                if current.is_some() && tmux_expire(&socket, &name2).is_ok() {
                    note(
                        &spec.log_path,
                        &format!(
                            "--- session {} timed out after {}s; its process group was killed ---",
                            spec.session_id,
                            timeout.as_secs_f64()
                        ),
                    );
                }
            });
    }
    Ok(name)
}

const LIST_FORMAT: &str = "#{session_name}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}\t#{@warden_timed_out}\t#{@warden_task}\t#{@warden_session}\t#{@warden_swept}\t#{pane_pid}";

/// A listed pane and whether [`tmux_sweep`] already reported it.
fn list_panes(socket: &Path) -> Result<Vec<(TmuxPane, bool)>, SessionError> {
    let out = match run_tmux(
        socket,
        "list-panes",
        &["list-panes", "-a", "-F", LIST_FORMAT],
    ) {
        Ok(out) => out,
        Err(e) if no_server(&e) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Ok(out
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let [
                name,
                dead,
                status,
                signal,
                timed_out,
                task,
                session,
                swept,
                pid,
            ] = f[..]
            else {
                return None;
            };
            let dead = dead == "1";
            let collected = !status.is_empty() || !signal.is_empty();
            let dead_status = (dead && collected).then(|| {
                if !timed_out.is_empty() {
                    TIMEOUT_EXIT_CODE
                } else if let Ok(c) = status.parse() {
                    c
                } else {
                    128 + signal.parse::<i32>().unwrap_or(0)
                }
            });
            let pane = TmuxPane {
                name: name.to_owned(),
                task_id: some(task),
                session_id: some(session),
                dead,
                dead_status,
                pid: if dead { None } else { pid.parse().ok() },
            };
            Some((pane, !swept.is_empty()))
        })
        .collect())
}

/// Every pane on the server, sorted by session name. No server running means no panes.
pub fn tmux_list(socket: &Path) -> Result<Vec<TmuxPane>, SessionError> {
    let mut panes: Vec<TmuxPane> = list_panes(socket)?.into_iter().map(|(p, _)| p).collect();
    panes.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(panes)
}

/// The last `lines` lines of a session's screen and scrollback (works on a dead pane too),
/// without trailing blank lines.
pub fn tmux_capture(socket: &Path, name: &str, lines: usize) -> Result<String, SessionError> {
    let start = format!("-{lines}");
    let out = run_tmux(
        socket,
        "capture-pane",
        &[
            "capture-pane",
            "-p",
            "-J",
            "-t",
            &target(name),
            "-S",
            &start,
        ],
    )?;
    Ok(out.trim_end().to_owned())
}

/// Kills a live session's processes (its pane's process group) with SIGKILL. The pane
/// stays, dead, so the hook reports the end (137) and [`tmux_capture`] still works; a
/// session that is already dead or gone is left alone.
pub fn tmux_kill(socket: &Path, name: &str) -> Result<(), SessionError> {
    if let Some(pid) = tmux_list(socket)?
        .into_iter()
        .find(|p| p.name == name)
        .and_then(|p| p.pid)
    {
        // tmux starts each pane as a session leader, so its pid is its process group; the
        // pane itself is killed too in case it has not reached setsid yet.
        kill_group(pid);
        if let Some(p) = Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
    Ok(())
}

/// Ends a live session for running past its timeout: marks it so its exit is reported as
/// 124, then kills it like [`tmux_kill`].
pub fn tmux_expire(socket: &Path, name: &str) -> Result<(), SessionError> {
    run_tmux(
        socket,
        "set-option",
        &["set-option", "-t", &target(name), "@warden_timed_out", "1"],
    )?;
    tmux_kill(socket, name)
}

/// Removes a session from the server (`kill-session`), dead or alive. No exit is reported
/// for it: use it for dead sessions, or after [`tmux_kill`] has been reported. A session
/// that does not exist is not an error.
pub fn tmux_remove(socket: &Path, name: &str) -> Result<(), SessionError> {
    match run_tmux(
        socket,
        "kill-session",
        &["kill-session", "-t", &target(name)],
    ) {
        Err(e) if no_server(&e) => Ok(()),
        Err(SessionError::Tmux { message, .. })
            if message.contains("can't find") || message.contains("no such") =>
        {
            Ok(())
        }
        other => other.map(|_| ()),
    }
}

/// The safety net for `pane-died` hooks; the supervisor calls it every ~250 ms in tmux mode.
///
/// tmux 3.3a sometimes sees a pane's terminal close but misses the SIGCHLD of its process:
/// the pane shows as dead with no exit status, and the hook does not fire until some other
/// child of the server exits. When any dead pane lacks its status, the sweep makes the
/// server run `true`; that child's exit makes tmux collect every pending status, and the
/// hooks fire as usual.
///
/// Then it calls `report` for every dead pane with a status that the sweep has not reported
/// yet, sorted by name, and marks the pane when `report` returns true (false retries on the
/// next sweep). This covers hooks that never ran (a failed report, a tmux restart). The
/// receiving side is idempotent, so also reporting a pane whose hook did fire is harmless;
/// [`report_exit`] is the usual `report`. Returns how many panes were reported.
pub fn tmux_sweep(
    socket: &Path,
    mut report: impl FnMut(&TmuxPane) -> bool,
) -> Result<usize, SessionError> {
    let mut panes = list_panes(socket)?;
    if panes.iter().any(|(p, _)| p.dead && p.dead_status.is_none()) {
        run_tmux(socket, "run-shell", &["run-shell", "true"])?;
        panes = list_panes(socket)?;
    }
    panes.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    let mut reported = 0;
    for (pane, swept) in panes {
        if pane.dead_status.is_none() || swept || !report(&pane) {
            continue;
        }
        run_tmux(
            socket,
            "set-option",
            &[
                "set-option",
                "-t",
                &target(&pane.name),
                "@warden_swept",
                "1",
            ],
        )?;
        reported += 1;
    }
    Ok(reported)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmux_arg_escapes_only_a_trailing_semicolon() {
        fn check(input: &str, expected: &str) {
            assert_eq!(tmux_arg(input), OsString::from(expected), "{input:?}");
        }
        check("plain", "plain");
        check("a;b", "a;b");
        check("a;", r"a\;");
        check(";", r"\;");
        check(r"a\;", r"a\\;");
        check("", "");
    }

    #[test]
    fn quoting() {
        fn check(f: fn(&str) -> String, input: &str, expected: &str) {
            assert_eq!(f(input), expected, "{input:?}");
        }
        check(sh_quote, "a b", "'a b'");
        check(sh_quote, "it's", r"'it'\''s'");
        check(sh_quote, "", "''");
        check(format_escape, "#{x}#", "##{x}##");
        check(tmux_quote, r#"a "$b" \c"#, r#""a \"\$b\" \\c""#);
        check(tmux_session_name, "a.b-c_d", "warden-a+b-c_d");
    }

    #[test]
    fn ids_are_checked() {
        fn check(task: &str, session: &str, ok: bool) {
            let spec = SessionSpec {
                task_id: task.into(),
                session_id: session.into(),
                argv: vec!["true".into()],
                cwd: ".".into(),
                env: vec![],
                log_path: "log".into(),
                warden_exe: "warden".into(),
                project_root: ".".into(),
                timeout: Duration::from_secs(1),
            };
            assert_eq!(check_ids(&spec).is_ok(), ok, "{task:?} {session:?}");
        }
        check("t1", "s1", true);
        check("a.b_c-d", "0.x", true);
        check("T1", "s1", false);
        check("t1", "s'1", false);
        check("t1", "", false);
        check("../x", "s1", false);
        check("t1", "s 1", false);
    }

    #[test]
    fn missing_tmux_says_what_to_do() {
        let e = run_tmux_with(
            OsStr::new("/nonexistent/tmux"),
            Path::new("/tmp/none.sock"),
            "list-panes",
            &[],
            None,
        )
        .unwrap_err();
        assert!(matches!(e, SessionError::TmuxMissing), "{e:?}");
        assert!(e.to_string().contains("agent.session = \"process\""));
    }

    #[test]
    fn peek_log_reads_the_tail() {
        let dir = std::env::temp_dir().join(format!("warden-peek-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        let mut text = String::new();
        for i in 0..5000 {
            text.push_str(&format!("line {i}\r\n"));
        }
        std::fs::write(&path, &text).unwrap();
        fn check(path: &Path, n: usize, expected: &str) {
            assert_eq!(peek_log(path, n), expected, "{n}");
        }
        check(&path, 0, "");
        check(&path, 1, "line 4999");
        check(&path, 3, "line 4997\nline 4998\nline 4999");
        assert_eq!(peek_log(&path, 2000).lines().count(), 2000);
        assert!(peek_log(&path, 2000).starts_with("line 3000\n"));
        check(&dir.join("missing"), 5, "");
        std::fs::write(&path, "a\nb").unwrap();
        check(&path, 5, "a\nb");
        check(&path, 1, "b");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
