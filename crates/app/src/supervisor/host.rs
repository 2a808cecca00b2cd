//! `warden session-run`: the small process that hosts one process session, waits for it
//! and reports its end; it outlives the supervisor, so a kill -9 of `warden run` never
//! loses a session's end. Its files beside TASK.md (`sessions/<id>.json`, `.pid`,
//! `.exit`) let any supervisor — the one that started it, or a restarted one — tell a
//! live session from a gone one, stop it, and report a gone one with its real exit code.
//!
//! Stopping a session means SIGTERM to its host: the host passes TERM to the session's
//! process group, and KILL `kill_after` later if it is still there; then it reports the
//! end as usual. So a person's `task cancel` stops the agent even with no supervisor.

use std::path::{Path, PathBuf};
use std::time::Duration;

use warden_core::model::TaskId;
use warden_runner::session::{self, SessionSpec};
use warden_store::Workspace;

/// How long a recorded session may take to write its pid file before it is taken for
/// one that never started.
const START_GRACE: Duration = Duration::from_secs(10);

/// The files of one session.
#[derive(Clone, Debug)]
pub struct SessionFiles {
    /// The spec the host reads.
    pub spec: PathBuf,
    /// `<host pid> <supervisor pid> <session process group>`.
    pub pid: PathBuf,
    /// The exit code, written by the host before it reports.
    pub exit: PathBuf,
    /// A directory a tmux pane makes before its program runs (see
    /// `SessionSpec::started_file`).
    pub started: PathBuf,
    /// The stop marker (`SessionSpec::stop_file`): a stop writes it before it signals.
    pub stop: PathBuf,
}

impl SessionFiles {
    /// The files of session `sid` of task `id`.
    pub fn of(ws: &Workspace, id: &TaskId, sid: &str) -> SessionFiles {
        let dir = ws.task_dir(id).join("sessions");
        SessionFiles {
            spec: dir.join(format!("{sid}.json")),
            pid: dir.join(format!("{sid}.pid")),
            exit: dir.join(format!("{sid}.exit")),
            started: dir.join(format!("{sid}.started")),
            stop: dir.join(format!("{sid}.stop")),
        }
    }

    /// The files of the session whose spec is `spec_file`.
    fn beside(spec_file: &Path) -> SessionFiles {
        SessionFiles {
            spec: spec_file.to_path_buf(),
            pid: spec_file.with_extension("pid"),
            exit: spec_file.with_extension("exit"),
            started: spec_file.with_extension("started"),
            stop: spec_file.with_extension("stop"),
        }
    }

    /// Removes them (the session's end is recorded).
    pub fn remove(&self) {
        for f in [&self.spec, &self.pid, &self.exit, &self.stop] {
            let _ = std::fs::remove_file(f);
        }
        // A directory the pane made, or anything else planted under its name.
        if std::fs::remove_dir(&self.started).is_err() {
            let _ = std::fs::remove_file(&self.started);
        }
    }

    /// Did the session leave any sign that it started: a host that named itself (or
    /// was named by the runner that spawned it), a tmux pane that began, or an exit
    /// code? A session with none never started: its runner stopped between recording
    /// it and starting it.
    pub fn started(&self) -> bool {
        self.pid.exists() || self.started.exists() || self.exit.exists()
    }
}

/// What the pid file says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pids {
    /// The `warden session-run` host.
    pub host: u32,
    /// The supervisor that started it (0 when unknown).
    pub supervisor: u32,
    /// The session's process group (0 until it started).
    pub group: u32,
}

pub(super) fn write_pids(path: &Path, p: Pids) {
    let text = format!("{} {} {}\n", p.host, p.supervisor, p.group);
    let _ = warden_store::files::write_atomic(path, text.as_bytes());
}

/// Reads a pid file.
pub fn read_pids(path: &Path) -> Option<Pids> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut it = text.split_whitespace().map(|w| w.parse::<u32>().ok());
    Some(Pids {
        host: it.next()??,
        supervisor: it.next()??,
        group: it.next().flatten().unwrap_or(0),
    })
}

/// Is this process alive? A zombie is not: it has exited, and only waits for its parent
/// to collect its status (a `warden run` killed with kill -9 stays one until then, and
/// its leases must be taken over at once, not when they lapse).
pub(super) fn alive(pid: u32) -> bool {
    pid != 0
        && rustix::process::Pid::from_raw(pid as i32)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
        && !warden_runner::check::zombie(pid)
}

/// Is the session hosted in process mode alive: its host runs, or it is being started
/// right now (its spec was written moments ago and its host has not named itself yet)?
pub fn process_alive(files: &SessionFiles) -> bool {
    match read_pids(&files.pid) {
        // A session whose host was killed runs on in its own group: still alive, and
        // still the supervisor's to stop.
        Some(p) => alive(p.host) || group_alive(files),
        None => std::fs::metadata(&files.spec)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().unwrap_or_default() < START_GRACE),
    }
}

/// Is the session's own process group still running (not just its host)?
pub fn group_alive(files: &SessionFiles) -> bool {
    read_pids(&files.pid).is_some_and(|p| {
        p.group != 0
            && rustix::process::Pid::from_raw(p.group as i32)
                .is_some_and(|g| rustix::process::test_kill_process_group(g).is_ok())
    })
}

/// The exit code the host recorded for a session, if it got that far.
pub fn recorded_exit(files: &SessionFiles) -> Option<i32> {
    std::fs::read_to_string(&files.exit)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Asks a process session to stop (SIGTERM to its host, which passes it on and kills
/// the group after its grace), or kills its group at once.
pub fn stop_process(files: &SessionFiles, kill: bool) {
    let Some(p) = read_pids(&files.pid) else {
        return;
    };
    if kill {
        if p.group != 0 {
            warden_runner::check::kill_group(p.group);
        }
    } else if alive(p.host)
        && let Some(pid) = rustix::process::Pid::from_raw(p.host as i32)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    } else if p.group != 0 {
        // No host to pass it on: TERM the session's group directly.
        warden_runner::check::term_group(p.group);
    }
}

/// What the host exits with when the session's program could not be started (as a
/// shell says "command not found").
pub const START_FAILED_EXIT: i32 = 127;

/// What `warden session-run` exits with when its session was stopped before it
/// started the program (as a TERM would end it).
pub const STOPPED_BEFORE_START_EXIT: i32 = 143;

/// Records `session.failed` for a session whose program could not be started.
fn record_start_failed(
    spec: &SessionSpec,
    error: &str,
) -> Result<(), warden_core::failure::Failure> {
    use warden_core::event::Actor;
    use warden_store::Decision;
    let ws = crate::find_workspace(Some(&spec.project_root))?;
    let app = crate::App::open(ws, Actor::Runner)?;
    let id = crate::task_id(&spec.task_id)?;
    let shown = app.task_file_shown(&id);
    app.eng
        .write_task(&id, None, |t, _| {
            Ok(Decision::retryable(
                warden_core::schedule::react_start_failed(
                    t,
                    &spec.session_id,
                    error,
                    &app.eng.ctx(&shown),
                )?,
            ))
        })
        .map(drop)
        .map_err(warden_core::failure::Failure::from)
}

/// `warden session-run SPEC.json`: runs one process session to its end and reports it.
/// Returns the session's exit code. SIGTERM or SIGINT stop the session: TERM to its
/// group, KILL `kill_after` later.
pub fn session_run(spec_file: &Path) -> Result<i32, String> {
    let text = std::fs::read(spec_file).map_err(|e| format!("{}: {e}", spec_file.display()))?;
    let spec: SessionSpec =
        serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", spec_file.display()))?;
    let files = SessionFiles::beside(spec_file);
    // The host names itself at once, so a supervisor never takes a session whose
    // starter died right after starting it for one that never started.
    let mut pids = Pids {
        host: std::process::id(),
        supervisor: std::os::unix::process::parent_id(),
        group: 0,
    };
    write_pids(&files.pid, pids);
    let signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .map_err(|e| format!("cannot watch for signals: {e}"))?;
    // Stopped before it started (a person's cancel right after the runner recorded the
    // session): the stop found no host to signal, or signalled this one before it
    // watched for signals. No program; no sign of a start, so the session is reported
    // as one that never started. A stop from now on is a signal this host acts on.
    if spec.stop_file.as_ref().is_some_and(|f| f.exists()) {
        session::note(
            &spec.log_path,
            &format!(
                "--- session {} was stopped before it started ---",
                spec.session_id
            ),
        );
        files.remove();
        return Ok(STOPPED_BEFORE_START_EXIT);
    }
    let s = match session::start_process_with(&spec, Some(&files.exit)) {
        Ok(s) => s,
        Err(e) => {
            // The program could not be started (exec failed): Warden's side, not the
            // agent's crash. Said in the log and recorded as `session.failed` before this
            // host exits, so no supervisor ever takes the session for one that ended.
            let error = e.to_string();
            session::note(
                &spec.log_path,
                &format!(
                    "--- session {} could not start: {error} ---",
                    spec.session_id
                ),
            );
            let recorded = record_start_failed(&spec, &error);
            files.remove();
            return match recorded {
                Ok(()) => Ok(START_FAILED_EXIT),
                Err(f) => Err(format!("{error}; and it could not be recorded: {f}")),
            };
        }
    };
    pids.group = s.pid;
    write_pids(&files.pid, pids);
    let stopper = s.stopper();
    let kill_after = spec.kill_after;
    let handle = signals.handle();
    std::thread::spawn(move || {
        let mut signals = signals;
        if signals.forever().next().is_some() {
            stopper.terminate();
            std::thread::sleep(kill_after);
            stopper.kill();
        }
    });
    let code = s.join().unwrap_or(warden_core::schedule::UNKNOWN_EXIT);
    handle.close();
    // The end is reported (the waiter removes the exit file once it is): nothing of the
    // session is left to see.
    if !files.exit.exists() {
        files.remove();
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host whose session was stopped before it started (the stop marker is there:
    /// a person's cancel between the runner's recording of the session and this start,
    /// which found no host to signal) never starts the program, says so in the log and
    /// leaves no sign of a start. Without the marker the program runs.
    #[test]
    fn a_host_stopped_before_it_started_never_runs_its_program() {
        let dir = std::env::temp_dir().join(format!("warden-host-stop-{}", std::process::id()));
        let sessions = dir.join("sessions");
        std::fs::create_dir_all(&sessions).unwrap();
        let ran = dir.join("ran");
        let spec = |sid: &str| SessionSpec {
            task_id: "t1".into(),
            session_id: sid.into(),
            argv: vec![
                "sh".into(),
                "-c".into(),
                format!("touch '{}'", ran.display()),
            ],
            cwd: dir.clone(),
            env: Vec::new(),
            log_path: dir.join("output.log"),
            warden_exe: "warden".into(),
            project_root: dir.clone(),
            timeout: Duration::from_secs(20),
            kill_after: Duration::from_secs(5),
            max_log_bytes: None,
            stdin: None,
            clean_env: false,
            pass_env: Vec::new(),
            started_file: None,
            stop_file: Some(sessions.join(format!("{sid}.stop"))),
        };
        let write = |sid: &str| {
            let f = sessions.join(format!("{sid}.json"));
            std::fs::write(&f, serde_json::to_vec(&spec(sid)).unwrap()).unwrap();
            f
        };
        let first = write("s1");
        std::fs::write(sessions.join("s1.stop"), "").unwrap();
        assert_eq!(session_run(&first), Ok(STOPPED_BEFORE_START_EXIT));
        assert!(!ran.exists(), "the program never ran");
        let files = SessionFiles::beside(&first);
        assert!(!files.pid.exists() && !files.stop.exists() && !first.exists());
        let log = std::fs::read_to_string(dir.join("output.log")).unwrap();
        assert!(
            log.contains("session s1 was stopped before it started"),
            "{log}"
        );
        assert_eq!(session_run(&write("s2")), Ok(0));
        assert!(ran.exists(), "without the marker it runs");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A stop leaves the marker before it signals, with no host to signal yet too (its
    /// sessions folder may not exist yet), and follows no link planted under its name.
    #[test]
    fn a_stop_leaves_its_marker_first() {
        let root = std::env::temp_dir().join(format!("warden-stop-mark-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let ws = Workspace::init(&root, None).unwrap();
        let id = TaskId::new("t1").unwrap();
        crate::supervisor::stop_session(&ws, &id, "s1", false);
        let files = SessionFiles::of(&ws, &id, "s1");
        assert!(files.stop.is_file(), "{}", files.stop.display());
        let precious = root.join("precious.txt");
        std::fs::write(&precious, "keep me").unwrap();
        let s2 = SessionFiles::of(&ws, &id, "s2");
        std::os::unix::fs::symlink(&precious, &s2.stop).unwrap();
        crate::supervisor::stop_session(&ws, &id, "s2", false);
        assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
