//! One step of one task, on its own thread: the pipeline phases Warden runs itself,
//! worktree creation, session starts, heals and charged attempts. [`next_action`] says
//! which step a task needs from its stored state alone.

use std::time::Duration;

use warden_core::failure::Failure;
use warden_core::model::{Phase, PhaseStatus, Role, Status, Task, TaskId, WorkSpec, WorkflowKind};
use warden_core::ops::{self, TransitionInput};
use warden_core::tree::TreeIndex;
use warden_runner::git::{self, Repo};
use warden_runner::pipeline::{self, PhaseResult};
use warden_runner::session::{self, SessionSpec};
use warden_store::config;
use warden_store::{Decision, Engine, EngineError, Written};

use super::host::write_pid_file;
use super::{Mode, Options, tmux_socket};
use crate::App;

/// What the supervisor does next for a task, decided from its stored state alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `pending → working` and the pipeline.
    Start,
    /// Run the pipeline on from the first phase that has not succeeded.
    Resume,
    /// Start a session for the current status entry.
    Session(Role),
}

impl Action {
    pub(super) fn describe(&self) -> String {
        match self {
            Action::Start => "starting".into(),
            Action::Resume => "running phases".into(),
            Action::Session(r) => format!("starting the {r}"),
        }
    }
}

/// Has the current status entry had a session already?
fn had_session(t: &Task) -> bool {
    t.sessions().iter().any(|s| s.entry == t.entry())
}

/// The scheduling rules (DESIGN 2.2 and 2.4) as one function of the stored state.
pub fn next_action(
    t: &Task,
    idx: &TreeIndex<'_>,
    limits: &warden_core::model::Limits,
) -> Option<Action> {
    match t.status() {
        Status::Pending if idx.deps_done(t) => Some(Action::Start),
        Status::Pending => None,
        // A direct task without a session is always resumed: after a retry, a finished
        // work session, a charged failure, or a runner crash.
        Status::Working if t.spec.workflow == WorkflowKind::Direct => Some(Action::Resume),
        Status::Working => {
            if t.respawn_requested() {
                Some(Action::Session(Role::Worker))
            } else if had_session(t) {
                // A crashed worker waits for `task respawn`.
                None
            } else {
                Some(Action::Resume)
            }
        }
        Status::AgentReview => {
            let crashed_below =
                t.is_dead() && t.crash_count() > 0 && t.crash_count() < limits.crash_threshold;
            if t.respawn_requested() || !had_session(t) || crashed_below {
                Some(Action::Session(Role::Reviewer))
            } else {
                None
            }
        }
        Status::Clarification | Status::Stuck if t.respawn_requested() => {
            Some(Action::Session(Role::Worker))
        }
        _ => None,
    }
}

/// One step of one task, on its own thread.
pub(super) struct Step<'a> {
    pub(super) app: &'a App,
    pub(super) eng: &'a Engine,
    pub(super) repo: Option<&'a Repo>,
    pub(super) base: Option<&'a str>,
    pub(super) opts: &'a Options,
    pub(super) credentials: Option<&'a std::path::Path>,
}

impl Step<'_> {
    fn shown(&self, id: &TaskId) -> String {
        self.eng.task_file_shown(id)
    }

    fn write(
        &self,
        id: &TaskId,
        decide: impl FnMut(&Task, &warden_store::taskfile::Doc) -> Result<Decision, EngineError>,
    ) -> Result<Option<Task>, EngineError> {
        match self.eng.write_task(id, None, decide)? {
            Written::Done(c) => Ok(c.after.clone()),
            Written::Replayed(_) => Ok(None),
        }
    }

    fn record_phase(&self, id: &TaskId, r: &PhaseResult) -> Result<Task, EngineError> {
        let shown = self.shown(id);
        let t = self.write(id, |t, _| {
            Ok(Decision::retryable(ops::phase(
                t,
                r.phase,
                r.status,
                r.detail.clone(),
                &self.eng.ctx(&shown),
            )?))
        })?;
        t.ok_or_else(|| EngineError::NotFound(id.clone()))
    }

    pub(super) fn perform(&mut self, id: &TaskId, action: Action) -> Result<(), EngineError> {
        let shown = self.shown(id);
        if action == Action::Start {
            self.write(id, |t, doc| {
                let input = TransitionInput {
                    artifacts: doc.artifacts.clone(),
                    reason: Some("scheduled".into()),
                    ..Default::default()
                };
                Ok(Decision::retryable(ops::transition(
                    t,
                    Status::Working,
                    &input,
                    &self.eng.ctx(&shown),
                )?))
            })?;
        }
        let t = self.eng.get(id)?;
        if t.status().is_terminal() {
            return Ok(());
        }
        self.ensure_worktree(&t)?;
        match action {
            Action::Session(role) => self.spawn(&t, role, None, None),
            Action::Start | Action::Resume => self.pipeline(id),
        }
    }

    /// Creates the task's worktree (on `warden/<id>` from the base branch) and links
    /// TASK.md into it. Outside git, work runs in the project directory.
    fn ensure_worktree(&self, t: &Task) -> Result<(), EngineError> {
        let (Some(repo), Some(base)) = (self.repo, self.base) else {
            return Ok(());
        };
        let wt = self.eng.ws.worktree(t.id());
        let other = |e: git::GitError| -> EngineError {
            Failure::internal(format!("{}: cannot prepare the worktree: {e}", t.id())).into()
        };
        repo.ensure_worktree(&wt, &t.branch(), base)
            .map_err(other)?;
        git::link_task_file(&wt, &self.eng.ws.task_file(t.id())).map_err(other)?;
        Ok(())
    }

    /// Runs the phases Warden runs itself, from the first that has not succeeded, and
    /// starts the agent session when the work is an agent.
    fn pipeline(&mut self, id: &TaskId) -> Result<(), EngineError> {
        loop {
            let t = self.eng.get(id)?;
            if t.status() != Status::Working {
                return Ok(());
            }
            let done = |p: Phase| {
                matches!(
                    t.phases().get(p),
                    PhaseStatus::Success | PhaseStatus::Skipped
                )
            };
            let next = if t.spec.workflow == WorkflowKind::Review {
                // The worker is the rest of a review task's pipeline: it commits and runs
                // the postchecks through `task complete`; merge-ri comes with `done`.
                [Phase::MergeFi, Phase::Prechecks]
                    .into_iter()
                    .find(|p| !done(*p))
                    .or(Some(Phase::Work))
            } else {
                Phase::ALL.iter().copied().find(|p| !done(*p))
            };
            let Some(phase) = next else {
                return self.finish(&t);
            };
            let result = match phase {
                Phase::MergeFi => pipeline::merge_fi(self.eng, &t),
                Phase::Prechecks => pipeline::prechecks(self.eng, &t),
                // The work is a session — the agent, or the shell or process command — whose
                // end arrives through `task exited`; the next pass continues from there.
                Phase::Work => {
                    let argv = match &t.spec.spec.work {
                        Some(WorkSpec::Shell(line)) => {
                            Some(vec!["sh".to_owned(), "-c".to_owned(), line.clone()])
                        }
                        Some(WorkSpec::Process(argv)) => Some(argv.clone()),
                        _ => None,
                    };
                    return self.spawn(&t, Role::Worker, None, argv);
                }
                // Commit, postchecks and merge-ri run inside the transition to done.
                Phase::Commit | Phase::Postchecks | Phase::MergeRi => return self.finish(&t),
            };
            if result.status == PhaseStatus::Failed {
                return self.failed(&t, result);
            }
            self.record_phase(id, &result)?;
        }
    }

    /// A phase failed: one automatic heal for agent work, else an attempt is charged and
    /// the next pass runs again from the failed phase (or the task is stuck).
    fn failed(&mut self, t: &Task, r: PhaseResult) -> Result<(), EngineError> {
        let shown = self.shown(t.id());
        let detail = r.detail.clone().unwrap_or_default();
        if t.work_is_agent() && !t.auto_heal().contains(&r.phase) {
            let healed = self.write(t.id(), |t, _| {
                let ctx = self.eng.ctx(&shown);
                let Some(heal) = ops::auto_heal(t, r.phase, &ctx)? else {
                    return Err(Failure::refused("heal already used").into());
                };
                let kinds: Vec<_> = heal.events.into_iter().map(|e| e.kind).collect();
                let mut all = vec![warden_core::event::EventKind::PhaseChanged {
                    phase: r.phase,
                    status: PhaseStatus::Pending,
                    detail: r.detail.clone(),
                }];
                all.extend(kinds);
                Ok(Decision::retryable(ops::record(t, all, &ctx)?))
            })?;
            if let Some(t) = healed {
                let note = format!(
                    "The {} phase failed. Fix the cause, then finish the task as usual. Its output ended with:\n{}",
                    r.phase,
                    warden_runner::check::tail(&detail, warden_runner::check::TAIL_CHARS)
                );
                return self.spawn(&t, Role::Worker, Some(&note), None);
            }
            return Ok(());
        }
        self.write(t.id(), |t, _| {
            Ok(Decision::retryable(ops::attempt_failed(
                t,
                r.phase,
                &detail,
                &self.eng.ctx(&shown),
            )?))
        })?;
        Ok(())
    }

    /// The end of a `direct` task's pipeline: commit, postchecks and merge-ri inside the
    /// transition to done. A review task's worker finishes with `task complete` instead.
    fn finish(&mut self, t: &Task) -> Result<(), EngineError> {
        if t.spec.workflow != WorkflowKind::Direct {
            return Ok(());
        }
        let shown = self.shown(t.id());
        let mut outcome = None;
        self.write(t.id(), |t, doc| {
            let d = self
                .app
                .decide_transition(t, doc, Status::Done, Some("guard".into()), &shown);
            if let Err(EngineError::Refused(ops::Refusal::PhaseFailed { phase, detail, .. })) = &d {
                outcome = Some((*phase, detail.clone()));
            }
            d
        })
        .or_else(|e| match &outcome {
            // A failed commit or merge is a failed attempt of that phase.
            Some((phase, detail)) => {
                let t = self.eng.get(t.id())?;
                self.failed(
                    &t,
                    PhaseResult {
                        phase: *phase,
                        status: PhaseStatus::Failed,
                        detail: Some(detail.clone()),
                    },
                )
                .map(|_| None)
            }
            None => Err(e),
        })?;
        Ok(())
    }

    /// Starts an agent session for the task's current status entry and records it.
    fn spawn(
        &mut self,
        t: &Task,
        role: Role,
        extra: Option<&str>,
        command: Option<Vec<String>>,
    ) -> Result<(), EngineError> {
        let shown = self.shown(t.id());
        let session_id = format!("{}-{}-{}", t.id(), role, t.sessions().len() + 1);
        let dir = self.eng.ws.task_dir(t.id());
        let cwd = pipeline::task_cwd(self.eng, t);
        let argv: Vec<String> = match command {
            // A shell or process work phase runs as it is, never through a template.
            Some(argv) => argv,
            None => {
                let prompt = self.eng.prompt(t, extra)?;
                let prompt_file = dir.join(format!("prompt-{role}.md"));
                warden_store::files::write_atomic(&prompt_file, prompt.as_bytes())?;
                self.eng
                    .config
                    .agent
                    .command
                    .iter()
                    .map(|a| {
                        a.replace("{prompt_file}", &prompt_file.display().to_string())
                            .replace("{task_id}", t.id().as_str())
                            .replace("{worktree}", &cwd.display().to_string())
                            .replace("{role}", role.as_str())
                            .replace("{prompt}", &prompt)
                    })
                    .collect()
            }
        };
        let mut env: Vec<(String, String)> = pipeline::task_env(self.eng, t)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        env.push(("WARDEN_ROLE".into(), role.as_str().into()));
        env.push(("WARDEN_SESSION".into(), session_id.clone()));
        if let Some(file) = self.credentials {
            env.push((config::CREDENTIALS_VAR.into(), file.display().to_string()));
        }
        let spec = SessionSpec {
            task_id: t.id().to_string(),
            session_id: session_id.clone(),
            argv,
            cwd,
            env,
            log_path: self.eng.ws.output_log(t.id()),
            warden_exe: self.opts.warden_exe.clone(),
            project_root: self.eng.ws.root.clone(),
            timeout: Duration::from_secs(self.eng.config.limits.phase_timeout_s),
        };
        // Record the session before it can end, so its report is never "unknown".
        let recorded = self.write(t.id(), |t, _| {
            let ctx = self.eng.ctx(&shown);
            let mut kinds = Vec::new();
            if t.spec.workflow == WorkflowKind::Direct
                || t.phases().get(Phase::Work) == PhaseStatus::Pending
            {
                kinds.push(warden_core::event::EventKind::PhaseChanged {
                    phase: Phase::Work,
                    status: PhaseStatus::Running,
                    detail: None,
                });
            }
            let ch = ops::spawned(t, &session_id, role, &ctx)?;
            Ok(Decision::retryable(ch.prepend(kinds, &ctx)?))
        })?;
        if recorded.is_none() {
            return Ok(());
        }
        let started = match self.opts.mode {
            Mode::Process => self.start_wrapped(&dir, &spec),
            Mode::Tmux => session::start_tmux(&tmux_socket(&self.eng.ws), &spec)
                .map(|_| ())
                .map_err(|e| e.to_string()),
        };
        if let Err(e) = started {
            // The session never started: report its end at once (a crash by the table).
            let report = warden_core::exit::ExitReport {
                session: Some(session_id.clone()),
                exit_code: Some(127),
            };
            self.app.exited(t.id(), &report)?;
            return Err(Failure::internal(format!(
                "{}: the {role} session could not start: {e}",
                t.id()
            ))
            .into());
        }
        Ok(())
    }

    /// Process mode: the session runs under `warden session-run`, a small process of its
    /// own that waits for the session and reports its end. It outlives this supervisor,
    /// so a session's end is reported even if the supervisor is killed; its pid file
    /// lets a restarted supervisor see the session is still alive.
    fn start_wrapped(&self, dir: &std::path::Path, spec: &SessionSpec) -> Result<(), String> {
        let file = dir.join("session.json");
        let json = serde_json::to_vec_pretty(spec).map_err(|e| e.to_string())?;
        warden_store::files::write_atomic(&file, &json).map_err(|e| e.to_string())?;
        let mut cmd = std::process::Command::new(&self.opts.warden_exe);
        for k in config::SECRET_VARS {
            cmd.env_remove(k);
        }
        if let Some(creds) = self.credentials {
            cmd.env(config::CREDENTIALS_VAR, creds);
        }
        cmd.arg("session-run")
            .arg(&file)
            .env("WARDEN_DIR", &self.eng.ws.root)
            .env_remove("WARDEN_ROLE")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.opts.warden_exe.display()))?;
        write_pid_file(dir, &spec.session_id, child.id());
        // Reap the wrapper when it ends, so it never lingers as a zombie.
        std::thread::spawn(move || child.wait());
        Ok(())
    }
}
