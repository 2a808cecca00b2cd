//! Operations on one task: create, move (update, complete, cancel), exit reports, retry,
//! respawn, and the agent fence's tamper record. Each is one write through
//! `Engine::write_task` (or `write_batch` for a creation), deciding in the core and
//! running what a transition needs (commit, guard, merge-ri) through `warden-runner`.

use warden_core::event::{Actor, Disposition, EventKind, SpecChange};
use warden_core::exit::{ExitAction, ExitReport};
use warden_core::failure::{ExitCode, Failure};
use warden_core::model::{AgentPreset, Status, Task, TaskId, TaskSpec, WorkSpec, WorkflowKind};
use warden_core::ops::{self, Change, Initial, Outcome, TransitionInput};
use warden_core::retry::RetryRequest;
use warden_runner::pipeline;
use warden_store::engine::RequestKey;
use warden_store::taskfile::Doc;
use warden_store::{Batch, Decision, EngineError, Written};

use crate::view::{ExitView, RetryView, TaskResponse, TaskView};
use crate::{App, Result};

/// `task create`: a new task.
#[derive(Clone, Debug, Default)]
pub struct CreateTask {
    /// The id, as given (validated here).
    pub id: String,
    /// A one-line title (default: the id).
    pub title: Option<String>,
    /// Instructions and context.
    pub body: Option<String>,
    /// The parent (must exist).
    pub parent: Option<String>,
    /// Tasks that must be done first (must exist).
    pub depends_on: Vec<String>,
    /// The work.
    pub work: Option<WorkSpec>,
    /// Checks before the work.
    pub prechecks: Option<WorkSpec>,
    /// Checks after the work: the guard.
    pub postchecks: Option<WorkSpec>,
    /// Failed attempts allowed (default from configuration).
    pub max_attempts: Option<u32>,
    /// The workflow (default: `direct` for shell and process work, `review` otherwise).
    pub workflow: Option<WorkflowKind>,
    /// Sort key among siblings (default 0).
    pub order: Option<i64>,
    /// The agent preset of its sessions (default: the configured one).
    pub preset: Option<AgentPreset>,
}

/// A requested status change.
#[derive(Clone, Debug)]
pub struct Transition {
    /// The task.
    pub id: TaskId,
    /// The status asked for.
    pub to: Status,
    /// Why (recorded in the history).
    pub reason: Option<String>,
    /// Apply at most once: a repeated request with this key gets the first answer.
    pub request_id: Option<String>,
}

impl Transition {
    /// A transition with no reason and no request id.
    pub fn to(id: TaskId, to: Status) -> Transition {
        Transition {
            id,
            to,
            reason: None,
            request_id: None,
        }
    }
}

/// The longest request id or session id, in characters.
pub const MAX_REQUEST_ID_CHARS: usize = 200;

/// A request id is stored as a key (as text, which PostgreSQL refuses a NUL in) and shown
/// back in messages: printable, and at most [`MAX_REQUEST_ID_CHARS`] (exit 2 otherwise).
pub(crate) fn check_request_id(key: &str) -> Result<()> {
    check_key(
        "request id",
        key,
        "give a key that names this request, or leave it out",
    )
}

/// Whether `key` could be a request or session id: not empty, printable, and at most
/// [`MAX_REQUEST_ID_CHARS`] characters.
pub(crate) fn fit_key(key: &str) -> bool {
    check_key("id", key, "").is_ok()
}

/// The one-line usage error (exit 2) for an id that is empty, too long, or holds a
/// control character; `what` names it, `when_empty` says what to do about an empty one.
fn check_key(what: &str, key: &str, when_empty: &str) -> Result<()> {
    let chars = key.chars().count();
    if chars == 0 {
        return Err(Failure::usage(format!("the {what} is empty; {when_empty}")));
    }
    if chars > MAX_REQUEST_ID_CHARS {
        return Err(Failure::usage(format!(
            "the {what} is {chars} characters; keep it to {MAX_REQUEST_ID_CHARS}"
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(Failure::usage(format!(
            "the {what} holds a control character; use printable characters only"
        )));
    }
    Ok(())
}

/// `task retry`: run a stuck task again, optionally with new specs.
#[derive(Clone, Debug, Default)]
pub struct RetryTask {
    /// New work (replaces the current one).
    pub work: Option<WorkSpec>,
    /// New prechecks, removal, or keep.
    pub prechecks: SpecChange,
    /// New postchecks, removal, or keep.
    pub postchecks: SpecChange,
    /// Reset the worktree and run every phase again.
    pub clear_worktree: bool,
}

/// What a write did.
#[derive(Debug)]
pub enum Applied {
    /// Committed now.
    Now(Box<Change>),
    /// The same `--request-id` was applied before: its stored answer.
    Replayed(Box<TaskResponse>),
}

/// The answer to a write of one task.
#[derive(Debug)]
pub struct Answer {
    /// What was written.
    pub applied: Applied,
    /// A stored outcome that is a failure: a failed guard (its attempt is stored).
    pub failure: Option<Failure>,
    /// A group's cancel: the tasks inside it it cancelled first.
    pub cancelled_inside: Vec<TaskId>,
    /// A group's cancel: the status its tasks gave it before (what every view showed;
    /// its own row's stored status is not shown anywhere).
    pub group_was: Option<Status>,
}

impl Answer {
    /// The failure of a stored outcome as an error, for callers that stop on it.
    pub fn into_result(self) -> Result<Answer> {
        match self.failure {
            Some(f) => Err(f),
            None => Ok(self),
        }
    }

    /// One line saying what happened, as the CLI prints it and the dashboard shows it:
    /// `api: working → agent-review`, the phases a retry runs again, ignored tampering.
    pub fn summary(&self) -> String {
        let change = match &self.applied {
            Applied::Replayed(_) => {
                return "already applied (same --request-id); nothing changed".into();
            }
            Applied::Now(c) => c,
        };
        let (Some(b), Some(a)) = (&change.before, &change.after) else {
            return String::new();
        };
        let before = self.group_was.unwrap_or(b.status());
        let mut line = if before != a.status() {
            format!("{}: {} → {}", a.id(), before, a.status())
        } else {
            format!("{}: {}", a.id(), a.status())
        };
        if let Outcome::Retry(plan) = &change.outcome {
            let names = |ps: &[warden_core::model::Phase]| {
                if ps.is_empty() {
                    "none".to_owned()
                } else {
                    ps.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
                }
            };
            line.push_str(&format!(
                "\n  runs again: {}\n  kept:       {}",
                names(&plan.rerun),
                names(&plan.kept)
            ));
        }
        if !self.cancelled_inside.is_empty() {
            line.push_str(&format!(
                "\n  cancelled inside it: {}",
                self.cancelled_inside
                    .iter()
                    .map(TaskId::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let tampers = change
            .events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::TamperIgnored { .. }))
            .count();
        if tampers > 0 {
            line.push_str(&format!(
                "\n  note: {tampers} runner-owned field(s) edited in TASK.md were ignored and restored"
            ));
        }
        line
    }

    /// The task after the write, when it was applied now.
    pub fn task(&self) -> Option<&Task> {
        match &self.applied {
            Applied::Now(c) => c.after.as_ref(),
            Applied::Replayed(_) => None,
        }
    }
}

/// The failure a stored outcome means: a failed guard charged an attempt (exit 1 with the
/// check's output tail), possibly making the task stuck.
fn outcome_failure(change: &Change) -> Option<Failure> {
    let (Outcome::GuardFailed { tail, stuck }, Some(t)) = (&change.outcome, &change.after) else {
        return None;
    };
    let message = if *stuck {
        // A stuck task's hand-off runs its postchecks again (stuck → agent-review).
        let was_stuck = change
            .before
            .as_ref()
            .is_some_and(|b| b.status() == Status::Stuck);
        format!(
            "the postchecks of {} failed and its {} attempts are used up; the task {} stuck (a person can `warden task retry {}`)",
            t.id(),
            t.spec.max_attempts,
            if was_stuck { "stays" } else { "is now" },
            t.id()
        )
    } else {
        // What ran the guard: a direct task's move to done, a review task's hand-off.
        let again = match t.spec.workflow {
            warden_core::model::WorkflowKind::Direct => {
                format!("`warden task update {} --status done`", t.id())
            }
            warden_core::model::WorkflowKind::Review => {
                format!("`warden task complete {}`", t.id())
            }
        };
        format!(
            "the postchecks of {} failed (attempt {} of {}); fix the problem and run {again} again",
            t.id(),
            t.attempts(),
            t.spec.max_attempts
        )
    };
    Some(Failure::refused(message).with_detail(tail.clone()))
}

/// How an exit report was taken, in words.
fn exit_view(change: &Change) -> Option<ExitView> {
    let Outcome::Exit(d) = &change.outcome else {
        return None;
    };
    let disposition = match d.disposition {
        Disposition::Current => "current",
        Disposition::Stale => "stale",
        Disposition::Duplicate => "duplicate",
        Disposition::Unstarted => "unstarted",
    };
    let action = match &d.action {
        ExitAction::Advance { to, spawn, .. } => match spawn {
            Some(r) => format!("advanced to {to}, {r} to start"),
            None => format!("advanced to {to}"),
        },
        ExitAction::Crash {
            crash_count,
            escalate: true,
            ..
        } => format!("crash {crash_count}: threshold reached, moved to stuck"),
        ExitAction::Crash {
            crash_count,
            respawn: Some(r),
            ..
        } => format!("crash {crash_count}: {r} to be restarted"),
        ExitAction::Crash { crash_count, .. } => {
            format!("crash {crash_count}: session marked dead (respawn with `warden task respawn`)")
        }
        ExitAction::WorkEnded { success: true } => "work phase succeeded".into(),
        ExitAction::WorkEnded { success: false } => "work phase failed".into(),
        ExitAction::MarkDead => "no advance; session marked dead".into(),
        ExitAction::HealEnded { phase } => format!("heal session ended; {phase} runs again"),
        ExitAction::Nothing => "nothing to change".into(),
    };
    Some(ExitView {
        disposition: disposition.into(),
        action,
    })
}

/// The default workflow of new work: `direct` for shell and process work (the guard
/// decides), `review` for agent work or none (DESIGN 2.1). The one rule for every front
/// end and for plan files.
pub fn default_workflow(work: Option<&WorkSpec>) -> WorkflowKind {
    match work {
        Some(WorkSpec::Shell(_) | WorkSpec::Process(_)) => WorkflowKind::Direct,
        _ => WorkflowKind::Review,
    }
}

/// An action on one task that a group cannot take (see [`App::refuse_group`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnGroup {
    Retry,
    Approve,
    Reject,
    Respawn,
}

impl App {
    /// `task create`: a new pending task with its TASK.md.
    pub fn create(&self, req: CreateTask) -> Result<TaskView> {
        let id = TaskId::new_task(&req.id)?;
        let workflow = req
            .workflow
            .unwrap_or_else(|| default_workflow(req.work.as_ref()));
        if req.work.is_none() && workflow == WorkflowKind::Direct {
            return Err(Failure::usage(
                "a direct task needs work (--work CMD): the guard decides it; use the review workflow for agent work",
            ));
        }
        let mut spec = TaskSpec::new(
            id.clone(),
            workflow,
            req.max_attempts
                .unwrap_or(self.eng.config.limits.max_attempts),
        );
        if let Some(t) = req.title {
            spec.title = t;
        }
        spec.body = req.body.unwrap_or_default();
        spec.order = req.order.unwrap_or(0);
        spec.spec.work = req.work;
        spec.spec.prechecks = req.prechecks;
        spec.spec.postchecks = req.postchecks;
        spec.preset = req.preset;
        let parent = req.parent.as_deref().map(crate::task_id).transpose()?;
        let mut deps: Vec<TaskId> = Vec::new();
        for d in &req.depends_on {
            let d = crate::task_id(d)?;
            if !deps.contains(&d) {
                deps.push(d);
            }
        }
        spec.parent = parent;
        spec.depends_on = deps;
        let shown = self.task_file_shown(&id);
        // Decided near the new task (its parent chain and dependencies), so a store of
        // 100,000 tasks takes it in a few reads (see `warden_store::near`).
        let changes = self.eng.write_around(|tree| {
            if let Some(p) = &spec.parent
                && !tree.exists(p)?
            {
                return Err(Failure::not_found(format!(
                    "parent {p} does not exist; create it first or leave out the parent"
                ))
                .into());
            }
            for d in &spec.depends_on {
                if !tree.exists(d)? {
                    return Err(Failure::not_found(format!(
                        "dependency {d} does not exist; create it first"
                    ))
                    .into());
                }
            }
            if tree.exists(&id)? {
                return Err(Failure::refused(format!(
                    "task {id} already exists; pick another id or update it"
                ))
                .into());
            }
            let change = ops::create(spec.clone(), Initial::NEW, &self.ctx(&shown))?;
            let batch = Batch {
                changes: vec![change],
                ..Default::default()
            };
            warden_store::engine::check_not_misplaced(tree, &batch)?;
            Ok(batch)
        })?;
        let task = changes
            .into_iter()
            .find_map(|c| c.after)
            .ok_or_else(|| Failure::internal("create made no task; this is a Warden bug"))?;
        // One task made by a person: its TASK.md at once, for them to add context to.
        self.eng.mirror_new(task.id());
        self.view(&task)
    }

    /// `task update --status`, `task complete`, `task cancel`: a validated transition,
    /// running what it needs (commit, guard, merge-ri) first.
    pub fn transition(&self, req: &Transition) -> Result<Answer> {
        self.transition_seen(req, None)
    }

    /// [`App::transition`] of the task as a person saw it: with `seen` (the version a
    /// page or screen showed), refused as a conflict when the task changed since.
    pub fn transition_seen(&self, req: &Transition, seen: Option<u64>) -> Result<Answer> {
        if let Some(k) = &req.request_id {
            check_request_id(k)?;
        }
        if let Some(r) = &req.reason {
            crate::person::check_reason(r)?;
        }
        let children = self.eng.store.child_ids(&req.id)?;
        if !children.is_empty() {
            // A group's own row: looked at before anything inside it is touched.
            crate::person::unchanged_since(&self.get(&req.id)?, seen, verb_of(req.to))?;
            return self.transition_group(req, &children);
        }
        self.transition_leaf(req, seen).map_err(|mut f| {
            // A section asked for in a TASK.md that is not there: said, or the person
            // looks for a section in a file that does not exist.
            if f.refused
                && f.message.contains("needs a non-empty")
                && !self.ws().task_file(&req.id).exists()
            {
                f.message.push_str(
                    "; that file does not exist (it was deleted): write it with the section (the task's next change writes its frontmatter again)",
                );
            }
            f
        })
    }

    /// A status change asked of a group. Its status comes from its tasks (DESIGN 6), so
    /// only a cancel is taken: every task inside it that is not done or cancelled is
    /// cancelled first (each as a person's cancel of that task, stopping its session),
    /// then the group's own row, which `plan next` and the supervisor read as cancelling
    /// what is created under it later too.
    fn transition_group(&self, req: &Transition, children: &[TaskId]) -> Result<Answer> {
        let id = &req.id;
        if req.to != Status::Cancelled {
            return Err(Failure::refused(format!(
                "{id} is a group: its status comes from the tasks in it ({}); move those, or cancel the group to cancel all of them",
                first_of(children)
            )));
        }
        // A group whose tasks are all done is done: there is nothing left to stop, and a
        // cancel would turn finished work into a cancelled group in every view.
        let was = self.groups()?.derived.get(id).map(|d| d.0);
        if was == Some(Status::Done) {
            return Err(Failure::refused(format!(
                "{id} is done: every task in it is done, so there is nothing to cancel"
            )));
        }
        let mut cancelled = Vec::new();
        self.cancel_inside(id, req, &mut cancelled)?;
        let mut answer = self.transition_leaf(req, None)?;
        // A task placed under the group after the sweep and before its own row was
        // cancelled (the row is what refuses new ones): cancelled too.
        self.cancel_inside(id, req, &mut cancelled)?;
        answer.cancelled_inside = cancelled;
        answer.group_was = was;
        Ok(answer)
    }

    /// Cancels every leaf below the group `id` that is not done or cancelled, as a
    /// person's cancel of each, adding their ids to `cancelled`.
    fn cancel_inside(
        &self,
        id: &TaskId,
        req: &Transition,
        cancelled: &mut Vec<TaskId>,
    ) -> Result<()> {
        let below = self.eng.store.descendants(id)?;
        let ids: Vec<TaskId> = below.iter().map(|h| h.id.clone()).collect();
        let groups = self.eng.store.groups_among(&ids)?;
        for h in below
            .iter()
            .filter(|h| groups.binary_search(&h.id).is_err())
            .filter(|h| !matches!(h.status, Status::Done | Status::Cancelled))
        {
            self.transition_leaf(
                &Transition {
                    id: h.id.clone(),
                    to: Status::Cancelled,
                    reason: req.reason.clone(),
                    request_id: None,
                },
                None,
            )?
            .into_result()?;
            cancelled.push(h.id.clone());
        }
        Ok(())
    }

    /// A status change of one task, as [`App::transition`] decided it is to be taken.
    fn transition_leaf(&self, req: &Transition, seen: Option<u64>) -> Result<Answer> {
        // A stale request is refused before anything is done for it: its cancel stopped
        // the task's running check, and then the 409 said nothing was written. (Looked
        // at again under the task's lock below.)
        if seen.is_some() {
            crate::person::unchanged_since(&self.get(&req.id)?, seen, verb_of(req.to))?;
        }
        if req.to == Status::Cancelled && self.eng.actor == warden_core::event::Actor::Person {
            // A person's cancel does not wait behind the task's lock for a check that
            // may run for an hour (the guard of a `task complete`, a direct task's
            // postchecks): the check is stopped, its holder records it as failed and
            // lets go, and the cancel follows.
            let note = self.eng.ws.check_note(&req.id);
            let grace = std::time::Duration::from_secs(self.eng.config.limits.kill_after_s);
            warden_runner::check::stop_noted_check(&note, grace);
        }
        let shown = self.task_file_shown(&req.id);
        // The reason is part of the request: a replay under the key with another reason
        // was "already applied", the new reason dropped without a word.
        let fingerprint = match &req.reason {
            Some(r) => format!("task update {} --status {} --reason {r:?}", req.id, req.to),
            None => format!("task update {} --status {}", req.id, req.to),
        };
        let respond = |ch: &Change| self.response_json(ch);
        let key = req.request_id.as_deref().map(|k| RequestKey {
            key: k,
            fingerprint: fingerprint.clone(),
            respond: &respond,
        });
        let written = self.eng.write_task(&req.id, key.as_ref(), |t, doc| {
            crate::person::unchanged_since(t, seen, verb_of(req.to))?;
            self.decide_transition(t, doc, req.to, req.reason.clone(), &shown)
        })?;
        let answer = self.answer(written)?;
        if let Some(t) = answer.task() {
            self.stop_stale_sessions(t)?;
        }
        Ok(answer)
    }

    /// A person's change of status stops, at once, every session of the task that no
    /// longer belongs (DESIGN 6) — with no supervisor running too: TERM to the session's
    /// host (which kills it `kill_after_s` later) or tmux pane, recorded as
    /// `session.stopped`. An agent's own move (its hand-off) is left to the supervisor,
    /// which gives it `handoff_grace_s` first.
    pub(crate) fn stop_stale_sessions(&self, t: &Task) -> Result<()> {
        if self.eng.actor != warden_core::event::Actor::Person {
            return Ok(());
        }
        let stale: Vec<String> = t
            .open_sessions()
            .filter(|r| {
                r.stop.is_none()
                    && !(r.entry == t.entry() && ops::role_for(t.status()) == Some(r.role))
            })
            .map(|r| r.id.clone())
            .collect();
        let shown = self.task_file_shown(t.id());
        for sid in stale {
            crate::supervisor::stop_session(self.ws(), t.id(), &sid, false);
            let reason = warden_core::schedule::StopReason::Moved {
                to: t.status(),
                by: warden_core::event::Actor::Person,
            };
            self.eng.write_task(t.id(), None, |t, _| {
                Ok(Decision::retryable(warden_core::schedule::react_stop(
                    t,
                    &sid,
                    &reason,
                    &self.ctx(&shown),
                )?))
            })?;
        }
        Ok(())
    }

    /// The decision of a transition inside a write: checks the map and the gate, runs
    /// what the transition needs (commit, the guard, merge-ri) and decides. The one
    /// transition path of every front end and of the supervisor.
    pub(crate) fn decide_transition(
        &self,
        t: &Task,
        doc: &Doc,
        to: Status,
        reason: Option<String>,
        shown: &str,
    ) -> std::result::Result<Decision, EngineError> {
        let ctx = self.ctx(shown);
        // A person's approve merged the work, and its record never landed: another
        // decision would leave the base branch holding work the task says was sent back
        // or stopped.
        if t.status() == Status::Reviewing
            && to != Status::Done
            && let Some(base) = pipeline::merged_unrecorded(&self.eng, t)
        {
            let id = t.id();
            return Err(Failure::refused(format!(
                "task {id}'s work is already in {base}: an approve merged it, and its record did not land (the store refused the write, or the process was stopped); run `warden task approve {id}` to record it"
            ))
            .into());
        }
        let (needs, _) = match ops::check_transition(t, to, &doc.artifacts, &ctx) {
            Ok(checked) => checked,
            // A gate found no evidence in a TASK.md it could not read: the file's problem
            // is what to fix, not the section it seemed to lack.
            Err(r) => {
                return Err(match (&r, &doc.unreadable) {
                    (
                        ops::Refusal::NeedsHandoff { .. } | ops::Refusal::NeedsVerdict { .. },
                        Some(problem),
                    ) => Failure::refusal(ExitCode::Refused, problem.clone()).into(),
                    _ => r.into(),
                });
            }
        };
        let mut input = TransitionInput {
            artifacts: doc.artifacts.clone(),
            reason,
            ..Default::default()
        };
        let ran = pipeline::prepare_transition(&self.eng, t, needs, &mut input);
        Ok(Decision {
            change: ops::transition(t, to, &input, &ctx)?,
            retryable: !ran,
            memory: None,
        })
    }

    /// A session's end ends what it started: a process it left running in a group of
    /// its own (`setsid`, a daemon; `nohup` stays in the session's group, which its host
    /// or pane stops) still carries `WARDEN_SESSION` and would go on editing the worktree
    /// beside the next session. Stopped before the end is recorded (TERM, then KILL
    /// after `kill_after_s`), for a session Warden started, unless an agent reports it.
    fn stop_remains(&self, id: &TaskId, session: Option<&str>) {
        let Some(session) = session else { return };
        if self.eng.actor == Actor::Agent
            || !self
                .eng
                .get(id)
                .is_ok_and(|t| t.sessions().iter().any(|r| r.id == session))
        {
            return;
        }
        let grace = std::time::Duration::from_secs(self.eng.config.limits.kill_after_s);
        // One report of an end at a time: the pane's hook and the supervisor's sweep
        // both report a tmux session's end, and each found (and noted) the same groups.
        // The second finds them gone. The lock is the log's own (advisory, so the
        // pane's output pipe appends on).
        let log = self.ws().output_log(id);
        let _one_at_a_time = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&log)
            .ok()
            .filter(|f| f.lock().is_ok());
        let root = self.ws().root.display().to_string();
        // This host's supervisors of the project are never a session's remains.
        let supervisors = crate::status::local_supervisor_pids(self.ws());
        let groups = warden_runner::check::stop_session_remains_but(
            session,
            std::path::Path::new(&root),
            &supervisors,
            grace,
        );
        if !groups.is_empty() {
            warden_runner::session::note(
                &self.ws().output_log(id),
                &format!(
                    "--- session {session} ended and left processes running (process group {}): stopped ---",
                    warden_runner::check::group_list(&groups)
                ),
            );
        }
    }

    /// `task exited`: exit monitoring's single entry point (DESIGN 2.2). Running the
    /// guard when the report advances the task; a guard that cannot start is an error
    /// (exit 5) after the report is recorded.
    ///
    /// A session id is held to a request id's rules (exit 2); the reason is kept, cut to
    /// [`crate::person::MAX_REASON_CHARS`] characters with any NUL replaced, so that no
    /// report of an end is refused for what its reporter said about it.
    pub fn exited(&self, id: &TaskId, report: &ExitReport) -> Result<Answer> {
        if let Some(s) = &report.session {
            check_key(
                "session id",
                s,
                "name the session that ended, or leave --session out",
            )?;
        }
        let report = &ExitReport {
            reason: report.reason.as_deref().map(crate::person::bounded_reason),
            ..report.clone()
        };
        self.stop_remains(id, report.session.as_deref());
        let shown = self.task_file_shown(id);
        let written = self.eng.write_task(id, None, |t, doc| {
            let ctx = self.ctx(&shown);
            // The end is recorded even when TASK.md cannot be read; the session then ended
            // without evidence, and its report says why none was seen.
            let report = &ExitReport {
                reason: match (&report.reason, &doc.unreadable) {
                    (r, None) => r.clone(),
                    (None, Some(p)) => Some(format!("no evidence read: {p}")),
                    (Some(r), Some(p)) => Some(format!("{r}; no evidence read: {p}")),
                }
                .map(|r| crate::person::bounded_reason(&r)),
                ..report.clone()
            };
            let decision =
                warden_core::exit::decide(t, &doc.artifacts, report, &self.eng.config.limits);
            let mut input = TransitionInput {
                artifacts: doc.artifacts.clone(),
                ..Default::default()
            };
            let mut ran = false;
            if let ExitAction::Advance { to, guard, .. } = &decision.action
                && *guard
            {
                let (needs, _) = ops::check_transition(t, *to, &doc.artifacts, &ctx)?;
                ran = pipeline::prepare_transition(&self.eng, t, needs, &mut input);
            }
            Ok(Decision {
                change: ops::exited(t, report, &input, &ctx)?,
                retryable: !ran,
                memory: None,
            })
        })?;
        let answer = self.answer(written)?;
        if let Applied::Now(c) = &answer.applied
            && let Outcome::ExitGuardError(e) = &c.outcome
        {
            return Err(Failure::internal(format!(
                "the session's exit was recorded, but the postchecks could not be started ({e}); fix them and run `warden task respawn`"
            )));
        }
        Ok(answer)
    }

    /// An action on one task (retry, approve, reject, respawn) asked of a group, whose
    /// status comes from its tasks (DESIGN 6): refused, naming the tasks inside it the
    /// action fits now and the command for each. Before, the refusal spoke of the
    /// group's own stored status ("g is pending") while every view showed its derived
    /// one (stuck, reviewing).
    pub(crate) fn refuse_group(&self, id: &TaskId, action: OnGroup) -> Result<()> {
        if self.eng.store.child_ids(id)?.is_empty() {
            return Ok(());
        }
        let below = self.eng.store.descendants(id)?;
        let parents: std::collections::HashSet<&TaskId> =
            below.iter().filter_map(|h| h.parent.as_ref()).collect();
        let (verb, command) = match action {
            OnGroup::Retry => ("retried", "warden task retry"),
            OnGroup::Approve => ("approved", "warden task approve"),
            OnGroup::Reject => ("rejected", "warden task reject"),
            OnGroup::Respawn => ("respawned", "warden task respawn"),
        };
        let shown = self.task_file_shown(id);
        let mut fit: Vec<&TaskId> = below
            .iter()
            .filter(|h| !parents.contains(&h.id))
            .filter(|h| match action {
                OnGroup::Retry => h.status == Status::Stuck,
                OnGroup::Approve | OnGroup::Reject => h.status == Status::Reviewing,
                OnGroup::Respawn => {
                    ops::role_for(h.status).is_some()
                        && self
                            .eng
                            .get(&h.id)
                            .is_ok_and(|t| ops::request_respawn(&t, &self.ctx(&shown)).is_ok())
                }
            })
            .map(|h| &h.id)
            .collect();
        fit.sort();
        let reason = if action == OnGroup::Reject {
            " --reason \"...\""
        } else {
            ""
        };
        let what = match fit.as_slice() {
            [] => format!("none of its tasks can be {verb} now (see `warden task list`)"),
            fit => {
                let mut cmds: Vec<String> = fit
                    .iter()
                    .take(5)
                    .map(|t| format!("`{command} {t}{reason}`"))
                    .collect();
                if fit.len() > 5 {
                    cmds.push(format!("and {} more", fit.len() - 5));
                }
                format!("act on its tasks: {}", cmds.join(", "))
            }
        };
        Err(Failure::refused(format!(
            "{id} is a group: its status comes from the tasks in it, and only a task can be {verb}; {what}"
        )))
    }

    /// `task retry`: a person's decision to run a stuck task again (DESIGN 2.4).
    pub fn retry(&self, id: &TaskId, req: &RetryTask) -> Result<Answer> {
        self.retry_seen(id, req, None)
    }

    /// [`App::retry`] of the task as a person saw it (see [`App::transition_seen`]).
    pub fn retry_seen(&self, id: &TaskId, req: &RetryTask, seen: Option<u64>) -> Result<Answer> {
        self.refuse_group(id, OnGroup::Retry)?;
        let shown = self.task_file_shown(id);
        let core = RetryRequest {
            work: req.work.clone(),
            prechecks: req.prechecks.clone(),
            postchecks: req.postchecks.clone(),
            clear_worktree: req.clear_worktree,
        };
        let written = self.eng.write_task(id, None, |t, _doc| {
            crate::person::unchanged_since(t, seen, "retried")?;
            Ok(Decision::retryable(ops::retry(
                t,
                &core,
                &self.ctx(&shown),
            )?))
        })?;
        let answer = self.answer(written)?;
        if let Some(t) = answer.task() {
            self.stop_stale_sessions(t)?;
        }
        Ok(answer)
    }

    /// `task respawn` / `task spawn`: ask for a new session for a task whose session is
    /// dead; the running supervisor (or the next `warden run`) starts it.
    pub fn respawn(&self, id: &TaskId) -> Result<Answer> {
        self.respawn_seen(id, None)
    }

    /// [`App::respawn`] of the task as a person saw it (see [`App::transition_seen`]).
    pub fn respawn_seen(&self, id: &TaskId, seen: Option<u64>) -> Result<Answer> {
        self.refuse_group(id, OnGroup::Respawn)?;
        let shown = self.task_file_shown(id);
        let written = self.eng.write_task(id, None, |t, _doc| {
            crate::person::unchanged_since(t, seen, "respawned")?;
            Ok(Decision::retryable(ops::request_respawn(
                t,
                &self.ctx(&shown),
            )?))
        })?;
        self.answer(written)
    }

    /// Records that an agent asked for something it may not have, on its own task: one
    /// `tamper.ignored` event.
    pub fn record_tamper(
        &self,
        own: &TaskId,
        field: String,
        agent_value: String,
        true_value: String,
    ) -> Result<()> {
        // The same refusal again, with nothing between: an agent retrying in a loop adds
        // one record, not one per try (and moves its task's version once).
        let last = self.eng.store.events(Some(own))?.pop();
        if let Some(EventKind::TamperIgnored {
            field: f,
            agent_value: Some(a),
            ..
        }) = last.as_ref().map(|e| &e.kind)
            && *f == field
            && *a == agent_value
        {
            return Ok(());
        }
        let shown = self.task_file_shown(own);
        self.eng.write_task(own, None, |t, _doc| {
            Ok(Decision::retryable(ops::record(
                t,
                vec![EventKind::TamperIgnored {
                    field: field.clone(),
                    agent_value: Some(agent_value.clone()),
                    true_value: true_value.clone(),
                }],
                &self.ctx(&shown),
            )?))
        })?;
        Ok(())
    }

    /// The answer of a write: what was applied and the failure a stored outcome means.
    fn answer(&self, written: Written) -> Result<Answer> {
        Ok(match written {
            Written::Done(change) => Answer {
                failure: outcome_failure(&change),
                applied: Applied::Now(change),
                cancelled_inside: Vec::new(),
                group_was: None,
            },
            Written::Replayed(text) => {
                let response: TaskResponse = serde_json::from_str(&text).map_err(|e| {
                    Failure::internal(format!(
                        "the stored answer of this --request-id does not decode ({e}); use a new request id"
                    ))
                })?;
                Answer {
                    failure: response.error.clone(),
                    cancelled_inside: response.cancelled_inside.clone(),
                    group_was: None,
                    applied: Applied::Replayed(Box::new(response)),
                }
            }
        })
    }

    /// The full response of a write (`--json`, MCP): the task after it and what the
    /// write meant.
    pub fn response(&self, answer: &Answer) -> Result<TaskResponse> {
        match &answer.applied {
            Applied::Replayed(r) => Ok((**r).clone()),
            Applied::Now(change) => Ok(TaskResponse {
                cancelled_inside: answer.cancelled_inside.clone(),
                ..self.response_of(change)?
            }),
        }
    }

    fn response_of(&self, change: &Change) -> Result<TaskResponse> {
        let t = change
            .after
            .as_ref()
            .ok_or_else(|| Failure::internal("the write removed the task"))?;
        Ok(TaskResponse {
            task: self.view(t)?,
            error: outcome_failure(change),
            retry: match &change.outcome {
                Outcome::Retry(plan) => Some(RetryView::from(plan)),
                _ => None,
            },
            exit: exit_view(change),
            cancelled_inside: Vec::new(),
        })
    }

    /// The response stored with a `--request-id`.
    fn response_json(&self, change: &Change) -> std::result::Result<String, EngineError> {
        let r = self.response_of(change).map_err(EngineError::from)?;
        serde_json::to_string(&r).map_err(|e| Failure::internal(e.to_string()).into())
    }
}

/// The past participle a stale-version refusal ends with ("… before it is cancelled").
fn verb_of(to: Status) -> &'static str {
    match to {
        Status::Cancelled => "cancelled",
        Status::Done => "approved",
        _ => "moved",
    }
}

/// The first five of a group's tasks, for a message: "a, b, c, d, e, …".
pub(crate) fn first_of(children: &[TaskId]) -> String {
    let shown: Vec<&str> = children.iter().take(5).map(TaskId::as_str).collect();
    let more = if children.len() > 5 { ", …" } else { "" };
    format!("{}{more}", shown.join(", "))
}
