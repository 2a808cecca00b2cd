//! Performing one action of the scheduler (`warden_core::schedule`) for one task, on its
//! own thread: the I/O the action needs (a phase, a session start, a stop, a git reset),
//! then the action's reaction — decided by the core from the fresh task under its lock —
//! committed through the engine's write path. Nothing here decides what a result means.

use std::path::Path;
use std::time::Duration;

use warden_core::event::EventKind;
use warden_core::exit::ExitReport;
use warden_core::failure::Failure;
use warden_core::model::{Phase, PhaseStatus, Role, Status, Task, TaskId};
use warden_core::ops::{self, TransitionInput};
use warden_core::schedule::{self, Action, StopReason};
use warden_runner::git::{self, Repo};
use warden_runner::pipeline;
use warden_runner::session::{self, SessionSpec};
use warden_store::config;
use warden_store::{Decision, Engine, EngineError, Written, taskfile::Doc};

use super::host::{self, SessionFiles};
use super::{Mode, Options, tmux_socket};
use crate::{App, agent};

/// One step of one task, on its own thread.
pub(super) struct Step<'a> {
    pub(super) app: &'a App,
    pub(super) repo: Option<&'a Repo>,
    pub(super) base: Option<&'a str>,
    pub(super) opts: &'a Options,
    pub(super) credentials: Option<&'a Path>,
}

/// What a step did, for the run log.
pub(super) type Done = Option<String>;

impl Step<'_> {
    fn eng(&self) -> &Engine {
        &self.app.eng
    }

    /// One write of the task, deciding from its fresh state under its lock.
    fn write(
        &self,
        id: &TaskId,
        decide: impl FnMut(&Task, &Doc) -> Result<Decision, EngineError>,
    ) -> Result<Option<Task>, EngineError> {
        match self.eng().write_task(id, None, decide)? {
            Written::Done(c) => Ok(c.after.clone()),
            Written::Replayed(_) => Ok(None),
        }
    }

    /// Performs `action` for task `id`.
    pub(super) fn perform(&mut self, id: &TaskId, action: &Action) -> Result<Done, EngineError> {
        let shown = self.eng().task_file_shown(id);
        let ctx = |eng: &Engine| eng.ctx(&shown);
        match action {
            Action::Idle | Action::Wait { .. } | Action::Busy => Ok(None),
            Action::Start => {
                self.write(id, |t, _| {
                    Ok(Decision::retryable(schedule::react_start(
                        t,
                        &ctx(self.eng()),
                    )?))
                })?;
                Ok(Some("started".into()))
            }
            Action::RunPhase(phase) => {
                let t = self.eng().get(id)?;
                self.ensure_worktree(&t)?;
                let r = match phase {
                    Phase::MergeFi => pipeline::merge_fi(self.eng(), &t),
                    Phase::Prechecks => pipeline::prechecks(self.eng(), &t),
                    other => {
                        return Err(Failure::internal(format!(
                            "the supervisor does not run {other} as a phase of its own"
                        ))
                        .into());
                    }
                };
                // Stopped by a person's cancel: no verdict on the task, nothing to
                // record. The cancel commits as soon as the check is gone: wait for it
                // (a little), so the next pass does not start the check again first.
                if r.detail
                    .as_deref()
                    .is_some_and(warden_runner::check::stopped_by_cancel)
                {
                    self.await_cancel(id)?;
                    return Ok(Some(format!(
                        "{} stopped: a person is cancelling the task",
                        r.phase
                    )));
                }
                self.write(id, |t, _| {
                    Ok(Decision::retryable(schedule::react_phase(
                        t,
                        r.phase,
                        r.status,
                        r.detail.clone(),
                        &ctx(self.eng()),
                    )?))
                })?;
                Ok(Some(format!("{} {}", r.phase, r.status)))
            }
            Action::StartSession { role, heal } => {
                let t = self.eng().get(id)?;
                self.ensure_worktree(&t)?;
                self.spawn(&t, *role, *heal)
            }
            Action::Finish => {
                let t = self.eng().get(id)?;
                self.ensure_worktree(&t)?;
                self.finish(id)
            }
            Action::Stop {
                session,
                reason,
                kill,
            } => {
                self.stop(id, session, reason, *kill)?;
                Ok(Some(format!(
                    "{} session {session}: {}",
                    if *kill { "killed" } else { "stopped" },
                    reason.text()
                )))
            }
            Action::ReportGone { session } => {
                let files = SessionFiles::of(&self.eng().ws, id, session);
                // A process session's host recorded its code; a tmux pane keeps its own
                // (and why Warden ended it) until it is removed.
                let socket = tmux_socket(&self.eng().ws);
                let name = session::tmux_session_name(session);
                let listed = if socket.exists() {
                    session::tmux_list(&socket)
                } else {
                    Ok(Vec::new())
                };
                // The pass saw no live pane for it. If this look finds the pane running
                // (or dead with its status not yet collected, which the pass counts as
                // running: its hook or the sweep reports it with its code), or tmux does
                // not answer and no host recorded a code, the session is not known to be
                // gone: a listing that failed for a moment must not end a session with an
                // unknown code. The next pass looks again.
                let recorded = host::recorded_exit(&files);
                let pane = match listed {
                    Ok(panes)
                        if panes
                            .iter()
                            .any(|p| p.name == name && (!p.dead || p.dead_status.is_none())) =>
                    {
                        return Ok(None);
                    }
                    Ok(panes) => panes.into_iter().find(|p| p.name == name),
                    Err(_) if recorded.is_none() => return Ok(None),
                    Err(_) => None,
                };
                // Nothing of it ever ran (its runner stopped between recording it and
                // starting it): not the agent's crash, and a new session is wanted.
                if recorded.is_none() && pane.is_none() && !files.started() {
                    let mut never = false;
                    self.write(id, |t, _| {
                        let ctx = ctx(self.eng());
                        let change = schedule::react_unstarted(t, session, &ctx);
                        never = change.is_some();
                        Ok(Decision::retryable(match change {
                            Some(change) => change?,
                            None => ops::record(t, vec![], &ctx)?,
                        }))
                    })?;
                    if never {
                        files.remove();
                        return Ok(Some(format!(
                            "session {session} never started (its runner stopped first); another starts"
                        )));
                    }
                }
                // A pane (or the whole tmux server) killed from outside leaves its
                // program running: it is stopped before the session is reported gone,
                // or a respawn would put a second agent beside it.
                let mut remains = Vec::new();
                if pane.is_none() && self.opts.mode == super::Mode::Tmux {
                    let grace = Duration::from_secs(self.eng().config.limits.kill_after_s);
                    let root = self.eng().ws.root.display().to_string();
                    remains = warden_runner::check::stop_session_remains(
                        session,
                        Path::new(&root),
                        grace,
                    );
                }
                let known = recorded.or(pane.as_ref().and_then(|p| p.dead_status));
                let code = known.unwrap_or(schedule::UNKNOWN_EXIT);
                // Seen to end with its exit status (a tmux pane kept dead, a host's exit
                // file) is a normal end the run recorded before its reporter did; only an
                // end nothing saw is "unseen" (every tmux session's end read so).
                let how = if known.is_some() {
                    "ended"
                } else {
                    "ended unseen"
                };
                // Nothing wrote its end in the log (a pane's hook, a host): the log
                // stopped mid-output, and `task log` gave no hint why.
                if recorded.is_none() && pane.is_none() {
                    let gone = match self.opts.mode {
                        super::Mode::Tmux => {
                            "its tmux pane was gone (killed, or the tmux server was)"
                        }
                        super::Mode::Process => "its host process was gone",
                    };
                    session::note(
                        &self.eng().ws.output_log(id),
                        &format!(
                            "--- session {session} ended unseen: {gone}; exit code unknown (recorded as {code}) ---"
                        ),
                    );
                }
                let report = ExitReport {
                    role: None,
                    session: Some(session.clone()),
                    exit_code: Some(code),
                    reason: pane.and_then(|p| p.why),
                };
                self.app.exited(id, &report)?;
                files.remove();
                Ok(Some(if remains.is_empty() {
                    format!("session {session} {how} (exit {code})")
                } else {
                    format!(
                        "session {session} {how} (exit {code}); its pane was gone but its program ran on (process group {}): stopped",
                        warden_runner::check::group_list(&remains)
                    )
                }))
            }
            Action::ResetWorktree => {
                if let Some(repo) = self.repo {
                    let wt = self.eng().ws.worktree(id);
                    let branch = self.eng().get(id)?.branch();
                    if wt.is_dir()
                        && let Some(base) = pipeline::task_base(repo, &branch)
                    {
                        git::reset_worktree(&wt, &base).map_err(|e| {
                            Failure::internal(format!("{id}: cannot reset the worktree: {e}"))
                        })?;
                    }
                }
                self.write(id, |t, _| {
                    Ok(Decision::retryable(schedule::react_reset(
                        t,
                        &ctx(self.eng()),
                    )?))
                })?;
                Ok(Some("worktree reset to its base".into()))
            }
            Action::RemoveWorktree => {
                if let Some(repo) = self.repo {
                    git::remove_worktree(repo, &self.eng().ws.worktree(id)).map_err(|e| {
                        Failure::internal(format!("{id}: cannot remove the worktree: {e}"))
                    })?;
                }
                Ok(Some("merged worktree removed".into()))
            }
        }
    }

    /// Creates the task's worktree (on `warden/<id>` from the base branch) and links
    /// TASK.md into it. Outside git, work runs in the project directory.
    fn ensure_worktree(&self, t: &Task) -> Result<(), EngineError> {
        let (Some(repo), Some(base)) = (self.repo, self.base) else {
            return Ok(());
        };
        let wt = self.eng().ws.worktree(t.id());
        let other = |e: git::GitError| -> EngineError {
            Failure::internal(format!("{}: cannot prepare the worktree: {e}", t.id())).into()
        };
        repo.ensure_worktree(&wt, &t.branch(), base)
            .map_err(other)?;
        // Beside the project's own `.warden/` inside the worktree, which `warden init`
        // keeps out of git (a link at the worktree's top would be committed when the
        // project is a subdirectory of its repository).
        let dir = self.eng().ws.worktree_project(t.id());
        git::link_task_file(&dir, &self.eng().ws.task_file(t.id())).map_err(other)?;
        Ok(())
    }

    /// The end of a `direct` task's pipeline: commit, postchecks and merge-ri inside the
    /// transition to done (their failures decided by `schedule::react_finish`). A
    /// conflict re-decides unless the guard ran (commit and merge-ri are idempotent).
    fn finish(&mut self, id: &TaskId) -> Result<Done, EngineError> {
        let shown = self.eng().task_file_shown(id);
        let after = match self.write(id, |t, doc| {
            let ctx = self.eng().ctx(&shown);
            let (needs, _) = ops::check_transition(t, Status::Done, &doc.artifacts, &ctx)?;
            let mut input = TransitionInput {
                artifacts: doc.artifacts.clone(),
                reason: Some("guard".into()),
                ..Default::default()
            };
            let guard_ran = pipeline::prepare_transition(self.eng(), t, needs, &mut input);
            Ok(Decision {
                change: schedule::react_finish(t, &input, &ctx)?,
                retryable: !guard_ran,
                memory: None,
            })
        }) {
            // The postchecks stopped by a person's cancel: no verdict, nothing to record,
            // and no failure to report or retry (it was "could not be started … trying
            // again in 1 s"). As with prechecks, the cancel commits once they are gone.
            Err(EngineError::Refused(ops::Refusal::GuardError(e)))
                if warden_runner::check::stopped_by_cancel(&e) =>
            {
                self.await_cancel(id)?;
                return Ok(Some(
                    "postchecks stopped: a person is cancelling the task".into(),
                ));
            }
            r => r?,
        };
        Ok(after.map(|t| format!("now {}", t.status())))
    }

    /// Waits (a little) for a person's cancel that stopped a check to commit, so the next
    /// pass does not start the check again first.
    fn await_cancel(&self, id: &TaskId) -> Result<(), EngineError> {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        // Read before the status: a commit in between is seen by the wait.
        let mut seen = self.eng().store.data_version()?;
        while self.eng().get(id)?.status() == Status::Working {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            seen = self.eng().store.wait_for_change(seen, left)?;
        }
        Ok(())
    }

    /// Stops a session that no longer belongs: TERM (recorded as `session.stopped`),
    /// or KILL.
    fn stop(
        &self,
        id: &TaskId,
        session: &str,
        reason: &StopReason,
        kill: bool,
    ) -> Result<(), EngineError> {
        stop_session(&self.eng().ws, id, session, kill);
        let recorded = |t: &Task| {
            t.sessions()
                .iter()
                .any(|r| r.id == session && r.stop.is_some())
        };
        if !kill && !recorded(&self.eng().get(id)?) {
            let shown = self.eng().task_file_shown(id);
            self.write(id, |t, _| {
                Ok(Decision::retryable(schedule::react_stop(
                    t,
                    session,
                    reason,
                    &self.eng().ctx(&shown),
                )?))
            })?;
        }
        Ok(())
    }

    /// Starts a session for the task's current status entry: records it first (so its
    /// end is never unknown), then starts it; a start that fails is `session.failed`,
    /// not the agent's crash. The reviewer's start commits the work the worker wrote
    /// after its hand-off first.
    fn spawn(&mut self, t: &Task, role: Role, heal: Option<Phase>) -> Result<Done, EngineError> {
        let eng = self.eng();
        let id = t.id();
        let shown = eng.task_file_shown(id);
        let session_id = format!("{}-{}-{}", id, role, t.sessions().len() + 1);
        let cwd = pipeline::task_cwd(eng, t);
        let late_commit = if role == Role::Reviewer {
            let c = pipeline::commit(eng, t);
            (c.status != PhaseStatus::Skipped).then_some((c.status, c.detail))
        } else {
            None
        };
        let mut env: Vec<(String, String)> = pipeline::task_env(eng, t)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        env.push(("WARDEN_ROLE".into(), role.as_str().into()));
        env.push(("WARDEN_SESSION".into(), session_id.clone()));
        if let Some(file) = self.credentials {
            env.push((config::CREDENTIALS_VAR.into(), file.display().to_string()));
        }
        let (argv, launch) = match (heal, schedule::work_argv(t)) {
            // A shell or process work phase runs as it is, never through a template.
            (None | Some(Phase::Work), Some(argv)) => (argv, None),
            _ => {
                let preset = agent::preset_of(&eng.config.agent, t);
                let task_file = eng.ws.task_file(id).display().to_string();
                let notes: Vec<String> = heal
                    .map(|p| heal_note(eng, t, p))
                    .into_iter()
                    .chain(agent::instructions_note(preset, role, &task_file))
                    .collect();
                let extra = (!notes.is_empty()).then(|| notes.join("\n\n"));
                let prompt = eng.prompt(t, extra.as_deref())?;
                let prompt_file = eng.ws.task_dir(id).join(format!("prompt-{role}.md"));
                warden_store::files::write_atomic(&prompt_file, prompt.as_bytes())?;
                let launch = agent::launch(
                    eng,
                    &agent::SessionInput {
                        task: t,
                        role,
                        prompt: &prompt,
                        prompt_file: &prompt_file,
                        cwd: &cwd,
                        warden_exe: &self.opts.warden_exe,
                    },
                )?;
                (launch.argv.clone(), Some(launch))
            }
        };
        let spec = SessionSpec {
            task_id: id.to_string(),
            session_id: session_id.clone(),
            argv,
            cwd,
            env,
            log_path: eng.ws.output_log(id),
            warden_exe: self.opts.warden_exe.clone(),
            project_root: eng.ws.root.clone(),
            timeout: Duration::from_secs(eng.config.limits.phase_timeout_s),
            kill_after: Duration::from_secs(eng.config.limits.kill_after_s),
            max_log_bytes: match eng.config.limits.session_log_mib {
                0 => None,
                mib => Some(mib.saturating_mul(1024 * 1024)),
            },
            stdin: launch.as_ref().and_then(|l| l.stdin.clone()),
            clean_env: launch.is_some(),
            pass_env: launch
                .as_ref()
                .map(|l| l.pass_env.clone())
                .unwrap_or_default(),
            // A pane says it started (a process session's host names itself instead).
            started_file: (self.opts.mode == Mode::Tmux)
                .then(|| SessionFiles::of(&eng.ws, id, &session_id).started),
            stop_file: Some(SessionFiles::of(&eng.ws, id, &session_id).stop),
        };
        let recorded = self.write(id, |t, doc| {
            // At most one live session per task: never start one beside another.
            if let Some(open) = t.open_sessions().next() {
                return Err(Failure::conflict(format!(
                    "session {} of {} is still running; a new one starts after it ends",
                    open.id,
                    t.id()
                ))
                .into());
            }
            Ok(Decision::retryable(schedule::react_spawn_over(
                t,
                &session_id,
                role,
                heal,
                late_commit.clone(),
                Some(&doc.artifacts),
                &eng.ctx(&shown),
            )?))
        })?;
        if recorded.is_none() {
            return Ok(None);
        }
        // Where a runner that stops dead leaves a session recorded but never started.
        warden_store::failpoint::hit("session-recorded");
        if let Some(l) = &launch {
            let what = match &l.resumes {
                Some(c) => format!("{} session, resuming conversation {c}", l.preset),
                None => format!("{} session", l.preset),
            };
            session::note(&spec.log_path, &format!("--- {session_id}: {what} ---"));
            if let Some(n) = &l.note {
                session::note(&spec.log_path, &format!("--- {session_id}: {n} ---"));
            }
        }
        // The program is looked up as exec would before anything starts, so a missing
        // one is a start that failed (Warden's side), not the agent's crash; in process
        // mode the session host reports any other exec error the same way.
        let started =
            agent::resolve_program(&spec.argv[0], &agent::session_path(&self.opts.warden_exe))
                .map_err(|e| format!("cannot start {:?}: {e}", spec.argv[0]))
                .and_then(|_| match self.opts.mode {
                    Mode::Process => self.start_hosted(&spec),
                    Mode::Tmux => self.start_pane(&spec),
                });
        if let Err(e) = started {
            warden_runner::session::note(
                &spec.log_path,
                &format!("--- session {session_id} could not start: {e} ---"),
            );
            let mut agent_work = true;
            self.write(id, |t, _| {
                agent_work = t.work_is_agent();
                Ok(Decision::retryable(schedule::react_start_failed(
                    t,
                    &session_id,
                    &e,
                    &eng.ctx(&shown),
                )?))
            })?;
            let next = if agent_work {
                format!("fix it and run `warden task respawn {id}`")
            } else {
                "fix it: the work is tried again after the backoff while attempts remain".into()
            };
            return Err(Failure::internal(format!(
                "{id}: the {role} session could not start: {e}; {next}"
            ))
            .into());
        }
        Ok(Some(match heal {
            Some(p) => format!("{role} session {session_id} started to fix the failed {p}"),
            None => format!("{role} session {session_id} started"),
        }))
    }

    /// tmux mode: the session runs in a pane of Warden's private tmux server, which
    /// first creates the session's `started` file (in the folder made here).
    fn start_pane(&self, spec: &SessionSpec) -> Result<(), String> {
        if let Some(dir) = spec.started_file.as_deref().and_then(Path::parent) {
            warden_store::files::create_dir(&self.eng().ws.dir, dir).map_err(|e| e.to_string())?;
        }
        session::start_tmux(&tmux_socket(&self.eng().ws), spec)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Process mode: the session runs under `warden session-run`, a small process of its
    /// own in its own process group that waits for the session and reports its end.
    fn start_hosted(&self, spec: &SessionSpec) -> Result<(), String> {
        let task = TaskId::new(&spec.task_id).map_err(|e| e.to_string())?;
        let files = SessionFiles::of(&self.eng().ws, &task, &spec.session_id);
        if let Some(dir) = files.spec.parent() {
            warden_store::files::create_dir(&self.eng().ws.dir, dir).map_err(|e| e.to_string())?;
        }
        let json = serde_json::to_vec_pretty(spec).map_err(|e| e.to_string())?;
        warden_store::files::write_atomic(&files.spec, &json).map_err(|e| e.to_string())?;
        let host = session::start_host(
            &self.opts.warden_exe,
            &files.spec,
            &self.eng().ws.root,
            self.credentials,
        )?;
        host::write_pids(
            &files.pid,
            host::Pids {
                host,
                supervisor: std::process::id(),
                group: 0,
            },
        );
        Ok(())
    }
}

/// Stops one session wherever it runs: its host (process mode) or its tmux pane.
pub fn stop_session(ws: &warden_store::Workspace, id: &TaskId, session: &str, kill: bool) {
    let files = SessionFiles::of(ws, id, session);
    // The marker first, then the signal: a host (or pane) that has not started its
    // program yet looks for the marker just before it would, so a stop between the
    // runner's recording of the session and its start is never lost. `create_new`
    // follows no link planted under its name.
    if let Some(dir) = files.stop.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&files.stop);
    if files.pid.exists() {
        host::stop_process(&files, kill);
        return;
    }
    let socket = tmux_socket(ws);
    if socket.exists() {
        let name = session::tmux_session_name(session);
        let _ = if kill {
            session::tmux_kill(&socket, &name)
        } else {
            session::tmux_terminate(&socket, &name)
        };
    }
}

/// The instructions a heal session adds to the prompt: the failed phase's output tail.
fn heal_note(eng: &Engine, t: &Task, phase: Phase) -> String {
    let detail = eng
        .store
        .events(Some(t.id()))
        .ok()
        .and_then(|events| {
            events.into_iter().rev().find_map(|e| match e.kind {
                EventKind::PhaseChanged {
                    phase: p,
                    detail: Some(d),
                    ..
                } if p == phase => Some(d),
                _ => None,
            })
        })
        .unwrap_or_default();
    format!(
        "The {phase} phase failed. Fix the cause, then stop: Warden runs {phase} again. Its output ended with:\n{}",
        warden_runner::check::tail(&detail, warden_runner::check::TAIL_CHARS)
    )
}
