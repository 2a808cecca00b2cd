//! Process mode: the session's program in its own process group, its output appended to
//! the task's log, a waiter that blocks on its exit and reports it, and a timer that
//! kills the group when the phase timeout passes.

#[allow(unused_imports)]
use super::*;

/// What the waiter, the timer and `kill` agree on, under one lock.
#[derive(Debug, Default)]
pub(crate) struct Life {
    /// The child has exited. It stays a zombie (its pid, hence its process group id,
    /// cannot be reused) until the waiter reaps it right after setting this, so whoever
    /// sees `false` under the lock may still signal the group safely.
    exited: bool,
    timed_out: bool,
    /// Killed for writing more than `max_log_bytes` to its log.
    log_full: bool,
    killed: bool,
    stopped: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Shared {
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

    /// A handle that can stop the session from another thread.
    pub fn stopper(&self) -> Stopper {
        Stopper {
            pid: self.pid,
            shared: Arc::clone(&self.shared),
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

/// Stops a process session from another thread: TERM first, KILL after.
#[derive(Clone, Debug)]
pub struct Stopper {
    pid: u32,
    shared: Arc<Shared>,
}

impl Stopper {
    /// SIGTERM to the session's process group (unless it has exited).
    pub fn terminate(&self) {
        let mut life = self.shared.lock();
        if !life.exited {
            life.stopped = true;
            crate::check::term_group(self.pid);
        }
    }

    /// SIGKILL to the session's process group (unless it has exited).
    pub fn kill(&self) {
        let mut life = self.shared.lock();
        if !life.exited {
            life.killed = true;
            kill_group(self.pid);
        }
    }
}

/// [`start_process_with`] without an exit file.
pub fn start_process(spec: &SessionSpec) -> Result<ProcessSession, SessionError> {
    start_process_with(spec, None)
}

/// Starts `spec.argv` (no shell) as a child in its own process group, in `spec.cwd`, with
/// stdin from /dev/null and stdout and stderr appended to `spec.log_path`. A waiter thread
/// blocks on the child's exit (no polling), kills the rest of its process group, and runs
/// the exit report; a timer kills the group at `spec.timeout` and the report says 124.
/// If this returns an error nothing was started and nothing is reported. The exit code is
/// written to `exit_file` (when given) before the report runs, so a report that fails
/// can be made again later with the real code.
pub fn start_process_with(
    spec: &SessionSpec,
    exit_file: Option<&Path>,
) -> Result<ProcessSession, SessionError> {
    check_ids(spec)?;
    let spec = absolutize(spec);
    let mut log = append_log(&spec.log_path)?;
    let log_err = |source| SessionError::Log {
        path: spec.log_path.clone(),
        source,
    };
    writeln!(log, "{}", header(&spec)).map_err(log_err)?;
    let stderr_log = log.try_clone().map_err(log_err)?;

    let stdin = match &spec.stdin {
        Some(path) => Stdio::from(File::open(path).map_err(|source| SessionError::Stdin {
            path: path.clone(),
            source,
        })?),
        None => Stdio::null(),
    };
    let mut cmd = Command::new(&spec.argv[0]);
    cmd.args(&spec.argv[1..])
        .current_dir(&spec.cwd)
        .stdin(stdin)
        .stdout(log)
        .stderr(stderr_log)
        .env_clear()
        .envs(spec.inherited_env());
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
    let (timeout, log, max_log) = (spec.timeout, spec.log_path.clone(), spec.max_log_bytes);
    std::thread::Builder::new()
        .name(format!("warden-timer-{}", spec.session_id))
        .spawn(move || {
            let why = watch(&exited_rx, timeout, &log, max_log, None);
            let mut life = timer_shared.lock();
            if !life.exited && why != Watched::Exited {
                life.timed_out = why == Watched::TimedOut;
                life.log_full = why == Watched::LogFull;
                kill_group(pid);
            }
        })
        .map_err(|source| SessionError::Spawn {
            program: "the session timer thread".into(),
            source,
        })?;

    let waiter_shared = Arc::clone(&shared);
    let session_id = spec.session_id.clone();
    let exit_file = exit_file.map(Path::to_path_buf);
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
            let (timed_out, log_full, killed, stopped) = {
                let mut life = waiter_shared.lock();
                life.exited = true;
                kill_group(pid);
                (life.timed_out, life.log_full, life.killed, life.stopped)
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
                note(&spec.log_path, &timed_out_note(&spec));
            } else if log_full {
                note(&spec.log_path, &log_full_note(&spec));
            } else if killed {
                note(&spec.log_path, &format!("--- session {sid} was killed ---"));
            } else if stopped {
                note(
                    &spec.log_path,
                    &format!("--- session {sid} was stopped ---"),
                );
            }
            if let Some(f) = &exit_file {
                // Whole or not at all: a supervisor reading it meanwhile must not see
                // an empty file and take the code for unrecorded.
                let _ = warden_store::files::write_atomic(f, format!("{code}\n").as_bytes());
            }
            note(
                &spec.log_path,
                &format!("--- session {sid} exited with code {code} ---"),
            );
            let why = if timed_out {
                Some(timed_out_reason(timeout))
            } else if log_full {
                Some(log_full_reason(&spec))
            } else {
                None
            };
            match report_exit_why(
                &spec.warden_exe,
                &spec.project_root,
                &spec.task_id,
                sid,
                code,
                why.as_deref(),
            ) {
                // Reported: the recorded code has served its purpose.
                Ok(()) => {
                    if let Some(f) = &exit_file {
                        let _ = std::fs::remove_file(f);
                    }
                }
                Err(e) => note(&spec.log_path, &format!("--- {e} ---")),
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
