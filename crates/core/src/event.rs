//! Events, the history of every task, and the fold that materialises tasks from them.
//!
//! Every operation in [`crate::ops`] decides a list of [`EventKind`]s and computes the new
//! task by folding them with [`apply`]; `warden check` folds the stored log the same way.
//! The fold is therefore the only place where an event's effect on a task is defined.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::memory::MemoryDelta;
use crate::model::{
    Phase, PhaseStatus, REPORTED_SESSIONS_KEPT, Role, RunnerState, SessionRecord, SessionStop,
    Status, Task, TaskId, TaskSpec, WorkSpec, WorkflowKind,
};

/// Who asked for a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Actor {
    /// A person at the CLI, dashboard or an orchestrator MCP client.
    Person,
    /// An agent (its session has `WARDEN_ROLE`, or the MCP agent role).
    Agent,
    /// Warden's own supervisor.
    Runner,
}

impl Actor {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Person => "person",
            Actor::Agent => "agent",
            Actor::Runner => "runner",
        }
    }
}

/// The reason string of a crash escalation; it keeps `crash_count` (DESIGN 2.2).
pub const REASON_CRASH_THRESHOLD: &str = "crash_threshold";
/// The reason string when failed attempts reach `max_attempts`.
pub const REASON_MAX_ATTEMPTS: &str = "max_attempts";

/// The evidence a gated transition saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceRef {
    /// The section, e.g. `Handoff` or `Review`.
    pub section: String,
    /// Lower-hex SHA-256 of the section content at the moment of the transition.
    pub digest: String,
    /// Which section of that name it was, from 1 (0: an evidence file, or an event
    /// written before this was recorded).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub nth: u32,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl EvidenceRef {
    /// Is `e` this evidence: the same section, content and place?
    pub fn is(&self, e: &crate::artifact::Evidence) -> bool {
        self.section.eq_ignore_ascii_case(&e.section)
            && self.digest == e.digest
            && (self.nth == 0 || self.nth == e.nth)
    }
}

/// The outcome of a guard (postchecks) run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuardResult {
    /// Postchecks passed.
    Pass,
    /// Postchecks failed: an attempt is charged.
    Fail,
    /// No postchecks.
    Skipped,
}

/// How a session-exit report was classified (DESIGN 2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Disposition {
    /// The end of the current session: the exit table applies.
    Current,
    /// A session started for an earlier status entry: recorded only.
    Stale,
    /// Already reported: nothing changes.
    Duplicate,
    /// One of Warden's sessions that never started: its runner stopped between recording
    /// it and starting it (nothing of it ran: no host, no pane, no exit code). Warden's
    /// side, not the agent's: it ends that session, charges no crash, and a new session
    /// is wanted for the same entry (its heal, if it was one). Only the supervisor says
    /// so, and only once per status entry (see [`crate::schedule::react_unstarted`]).
    Unstarted,
}

/// A change to one of a task's specs, as a retry or an edit requests it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpecChange {
    /// Leave it as it is.
    #[default]
    Keep,
    /// Replace it.
    Set(WorkSpec),
    /// Remove it (`--no-prechecks`, `new_postchecks: null`).
    Remove,
}

impl SpecChange {
    /// Applies the change to a current spec.
    pub fn apply(&self, current: &Option<WorkSpec>) -> Option<WorkSpec> {
        match self {
            SpecChange::Keep => current.clone(),
            SpecChange::Set(w) => Some(w.clone()),
            SpecChange::Remove => None,
        }
    }

    /// Would applying it change `current`?
    pub fn changes(&self, current: &Option<WorkSpec>) -> bool {
        self.apply(current) != *current
    }
}

/// What happened. Wire names are in [`EventKind::type_name`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// `task.created`: a new task with its initial runner fields (import may set them).
    TaskCreated {
        /// The user-owned fields.
        spec: TaskSpec,
        /// Initial status.
        status: Status,
        /// Initial `passes`.
        passes: bool,
        /// Initial `attempts`.
        attempts: u32,
    },
    /// `task.edited`: user-owned fields replaced (tree protocol, plan import).
    TaskEdited {
        /// The new user-owned fields.
        spec: TaskSpec,
    },
    /// `task.removed`: an agent pruned a node of its own plan.
    TaskRemoved,
    /// `status.changed`: a validated transition (or a runner decision, see `reason`).
    StatusChanged {
        /// Old status.
        from: Status,
        /// New status.
        to: Status,
        /// Why, when known.
        reason: Option<String>,
        /// The artifact the gate checked, if gated.
        evidence: Option<EvidenceRef>,
        /// A `## Review` already in the task file when the task entered agent-review:
        /// written before this round's reviewer began (by the worker, or left over), so
        /// it is judged here and the round's reviewer must write its own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prior_review: Option<EvidenceRef>,
    },
    /// `auto.advanced`: exit monitoring moved the task on evidence.
    AutoAdvanced {
        /// Old status.
        from: Status,
        /// New status.
        to: Status,
        /// Why.
        reason: String,
        /// The artifact that justified it.
        evidence: Option<EvidenceRef>,
        /// A `## Review` already in the task file when the task entered agent-review:
        /// written before this round's reviewer began (by the worker, or left over), so
        /// it is judged here and the round's reviewer must write its own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prior_review: Option<EvidenceRef>,
    },
    /// `agent.spawned`: Warden started a session for the current status entry.
    AgentSpawned {
        /// The session id.
        session: String,
        /// Worker or reviewer.
        role: Role,
        /// A heal session for this failed phase (its end is not a crash).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        heal: Option<Phase>,
        /// A reviewer's start: a `## Review` already in the task file, which the
        /// reviewer did not write (the worker wrote it after its hand-off): judged here.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prior_review: Option<EvidenceRef>,
    },
    /// `session.stopped`: Warden asked a session to stop (TERM to its process group, or
    /// tmux `kill-session`): the worker after its hand-off grace, or any session whose
    /// task a person moved on.
    SessionStopped {
        /// The session.
        session: String,
        /// Why.
        reason: String,
    },
    /// `session.failed`: a session could not be started (the program is missing, the
    /// worktree is gone). Not the agent's crash: the task is marked dead with the error.
    SessionFailed {
        /// The session.
        session: String,
        /// The operating system's error.
        error: String,
    },
    /// `agent.conversation`: the harness of a session Warden started named its own
    /// conversation (its session-start hook): a later session of the same role resumes it.
    AgentConversation {
        /// Warden's session.
        session: String,
        /// The harness's conversation id (Claude Code's session id, Codex's thread id).
        conversation: String,
    },
    /// `worktree.reset`: the worktree was reset to its base for a retry with
    /// `--clear-worktree`.
    WorktreeReset,
    /// `agent.crashed`: a session ended without the required artifact.
    AgentCrashed {
        /// The status it crashed in.
        status: Status,
        /// The new crash count.
        crash_count: u32,
        /// What was missing.
        reason: String,
    },
    /// `session.exited`: a session-end report, however it was classified.
    SessionExited {
        /// The reported session, if named.
        session: Option<String>,
        /// Its exit code, if known.
        exit_code: Option<i32>,
        /// Current, stale or duplicate.
        disposition: Disposition,
        /// The role of the session, when it is one Warden started.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<Role>,
        /// Warden had asked it to stop (`session.stopped`) before it ended.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stopped: bool,
        /// Why it ended, when the reporter says (a harness's session-end hook).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The task's status when a stale end was reported: where the task had moved
        /// (a worker's hand-off, its question, …). Absent in older events.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<Status>,
        /// A worker's end after its hand-off: the `## Review` in TASK.md as it ended,
        /// which the worker (not a reviewer) wrote and which never counts for the
        /// review (a reviewer started by `warden run` judges it at its start; one
        /// started by hand had nothing to). Absent in older events.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        judged: Option<EvidenceRef>,
    },
    /// `guard.ran`: postchecks ran at a gated transition.
    GuardRan {
        /// Pass, fail or skipped.
        result: GuardResult,
        /// The last part of the check's output.
        output_tail: String,
        /// The hand-off the check judged (a failed one is not handed off again: the
        /// attempt it cost is spent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evidence: Option<EvidenceRef>,
    },
    /// `tamper.ignored`: an agent wrote a runner-owned field; the true value was kept.
    TamperIgnored {
        /// The field.
        field: String,
        /// What the agent wrote (absent when it removed the field).
        agent_value: Option<String>,
        /// The value Warden kept.
        true_value: String,
    },
    /// `phase.changed`: a phase of the pipeline changed status.
    PhaseChanged {
        /// The phase.
        phase: Phase,
        /// Its new status.
        status: PhaseStatus,
        /// The last part of its output, when it failed.
        detail: Option<String>,
    },
    /// `auto.healed`: the one automatic heal of a phase was used.
    AutoHealed {
        /// The phase.
        phase: Phase,
    },
    /// `attempt.failed`: a phase the supervisor ran failed; an attempt is charged.
    AttemptFailed {
        /// The phase that failed.
        phase: Phase,
        /// Why.
        reason: String,
    },
    /// `retry.requested`: a person asked to run a stuck task again.
    RetryRequested {
        /// Work replacement.
        work: SpecChange,
        /// Prechecks change.
        prechecks: SpecChange,
        /// Postchecks change.
        postchecks: SpecChange,
        /// Reset the worktree and every phase.
        clear_worktree: bool,
        /// Where the pipeline resumes.
        resume_from_phase: Phase,
        /// Phases whose heal budget is reset.
        heal_reset: Vec<Phase>,
        /// The task gets `max_review_rounds` again: the rounds before count no more (a
        /// task stuck on failed reviews and retried was stuck again at its first FAIL,
        /// "round 3 of 2"). Absent in events written before it: those replay as they
        /// were stored.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        review_reset: bool,
    },
    /// `respawn.requested`: a person asked for a new session.
    RespawnRequested,
    /// `memory.merged`: a memory delta was merged.
    MemoryMerged {
        /// The delta as given (caps applied at merge).
        delta: MemoryDelta,
        /// The caps in force when it was merged (absent in events of earlier versions,
        /// which replay with the configured caps).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        caps: Option<crate::memory::MemoryCaps>,
    },
    /// `plan.applied`: tree reconcile set the runner-owned tree fields.
    PlanApplied {
        /// The node's `passes` after the apply.
        passes: bool,
        /// The node's `attempts` after the apply.
        attempts: u32,
    },
}

impl EventKind {
    /// The dotted wire name (`status.changed`, …).
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::TaskCreated { .. } => "task.created",
            EventKind::TaskEdited { .. } => "task.edited",
            EventKind::TaskRemoved => "task.removed",
            EventKind::StatusChanged { .. } => "status.changed",
            EventKind::AutoAdvanced { .. } => "auto.advanced",
            EventKind::AgentSpawned { .. } => "agent.spawned",
            EventKind::SessionStopped { .. } => "session.stopped",
            EventKind::SessionFailed { .. } => "session.failed",
            EventKind::AgentConversation { .. } => "agent.conversation",
            EventKind::WorktreeReset => "worktree.reset",
            EventKind::AgentCrashed { .. } => "agent.crashed",
            EventKind::SessionExited { .. } => "session.exited",
            EventKind::GuardRan { .. } => "guard.ran",
            EventKind::TamperIgnored { .. } => "tamper.ignored",
            EventKind::PhaseChanged { .. } => "phase.changed",
            EventKind::AutoHealed { .. } => "auto.healed",
            EventKind::AttemptFailed { .. } => "attempt.failed",
            EventKind::RetryRequested { .. } => "retry.requested",
            EventKind::RespawnRequested => "respawn.requested",
            EventKind::MemoryMerged { .. } => "memory.merged",
            EventKind::PlanApplied { .. } => "plan.applied",
        }
    }

    /// `(from, to)` for events that move the status.
    pub fn transition(&self) -> Option<(Status, Status)> {
        match self {
            EventKind::StatusChanged { from, to, .. }
            | EventKind::AutoAdvanced { from, to, .. } => Some((*from, *to)),
            _ => None,
        }
    }

    /// A one-line reason, for history output.
    pub fn reason(&self) -> Option<String> {
        match self {
            EventKind::StatusChanged { reason, .. } => reason.clone(),
            EventKind::AutoAdvanced { reason, .. }
            | EventKind::AgentCrashed { reason, .. }
            | EventKind::AttemptFailed { reason, .. } => Some(reason.clone()),
            EventKind::TamperIgnored {
                field,
                agent_value,
                true_value,
            } => Some(format!(
                "{field}: agent wrote {}, kept {true_value}",
                agent_value.as_deref().unwrap_or("nothing")
            )),
            EventKind::GuardRan { result, .. } => Some(
                match result {
                    GuardResult::Pass => "pass",
                    GuardResult::Fail => "fail",
                    GuardResult::Skipped => "skipped",
                }
                .to_owned(),
            ),
            EventKind::PhaseChanged { phase, status, .. } => Some(format!("{phase} {status}")),
            EventKind::AgentSpawned {
                session,
                role,
                heal: None,
                ..
            } => Some(format!("{role} {session}")),
            EventKind::AgentSpawned {
                session,
                role,
                heal: Some(p),
                ..
            } => Some(format!("{role} {session}, to heal the failed {p}")),
            EventKind::SessionStopped { session, reason } => {
                Some(format!("session {session}: {reason}"))
            }
            EventKind::SessionFailed { session, error } => {
                Some(format!("session {session} could not start: {error}"))
            }
            EventKind::SessionExited {
                session,
                exit_code,
                disposition,
                role,
                stopped,
                reason,
                after,
                ..
            } => {
                let who = match role {
                    Some(r) => format!("{r} {}", session.as_deref().unwrap_or("(unnamed)")),
                    None => match session {
                        Some(s) => format!("session {s}"),
                        None => "the session".to_owned(),
                    },
                };
                let code = match (exit_code, reason) {
                    (Some(c), Some(r)) => format!(" (exit {c}, {r})"),
                    (Some(c), None) => format!(" (exit {c})"),
                    (None, Some(r)) => format!(" ({r})"),
                    (None, None) => String::new(),
                };
                Some(match (disposition, role) {
                    (Disposition::Stale | Disposition::Current, _) if *stopped => {
                        format!("{who} stopped as asked{code}")
                    }
                    (Disposition::Current, _) => format!("{who} exited{code}"),
                    (Disposition::Stale, Some(Role::Worker)) => match after {
                        Some(Status::Clarification) => {
                            format!("{who} exited after asking a question{code}")
                        }
                        Some(Status::Stuck) => {
                            format!("{who} exited after the task became stuck{code}")
                        }
                        _ => format!("{who} exited after its hand-off{code}"),
                    },
                    (Disposition::Stale, Some(Role::Reviewer)) => {
                        format!("{who} exited after its verdict{code}")
                    }
                    (Disposition::Stale, None) => {
                        format!("{who} exited after the task moved on{code}")
                    }
                    (Disposition::Duplicate, _) => {
                        format!("{who}: its end was reported again{code}")
                    }
                    (Disposition::Unstarted, _) => {
                        format!("{who} never started: its runner stopped before starting it")
                    }
                })
            }
            EventKind::AgentConversation {
                session,
                conversation,
            } => Some(format!("session {session} is conversation {conversation}")),
            EventKind::RetryRequested {
                resume_from_phase, ..
            } => Some(format!("resume from {resume_from_phase}")),
            _ => None,
        }
    }
}

/// One entry of the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the store's log (0 until the store assigns it).
    pub seq: u64,
    /// When it was written.
    pub at: Timestamp,
    /// The task it belongs to.
    pub task: TaskId,
    /// The task version this event's write produced.
    pub version: u64,
    /// Who asked.
    pub actor: Actor,
    /// What happened.
    pub kind: EventKind,
}

/// Why an event could not be folded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// An event for a task that does not exist at that point of the log.
    #[error(
        "event {seq} ({kind}) refers to task {task}, which does not exist there; the log is damaged"
    )]
    NoTask {
        /// The event's sequence number.
        seq: u64,
        /// Its type.
        kind: &'static str,
        /// Its task.
        task: TaskId,
    },
    /// `task.created` for a task that already exists.
    #[error("event {seq} creates task {task} a second time; the log is damaged")]
    Exists {
        /// The event's sequence number.
        seq: u64,
        /// Its task.
        task: TaskId,
    },
}

/// Folds one event into a task: the single definition of every event's effect.
pub fn apply(task: Option<Task>, ev: &Event) -> Result<Option<Task>, ReplayError> {
    let no_task = || ReplayError::NoTask {
        seq: ev.seq,
        kind: ev.kind.type_name(),
        task: ev.task.clone(),
    };
    if let EventKind::TaskCreated {
        spec,
        status,
        passes,
        attempts,
    } = &ev.kind
    {
        if task.is_some() {
            return Err(ReplayError::Exists {
                seq: ev.seq,
                task: ev.task.clone(),
            });
        }
        let mut runner = RunnerState::new(*status, *passes, *attempts, ev.at);
        runner.version = ev.version;
        return Ok(Some(Task {
            spec: spec.clone(),
            runner,
        }));
    }
    let mut t = task.ok_or_else(no_task)?;
    let r = &mut t.runner;
    match &ev.kind {
        EventKind::TaskCreated { .. } => {}
        EventKind::TaskRemoved => return Ok(None),
        EventKind::TaskEdited { spec } => t.spec = spec.clone(),
        EventKind::StatusChanged {
            from,
            to,
            reason,
            evidence,
            prior_review,
        } => {
            if *from == Status::Reviewing && *to == Status::Working {
                // A person sent the work back: the worker reads why.
                r.feedback = reason.clone();
            }
            judge(r, evidence.as_ref());
            judge(r, prior_review.as_ref());
            enter_status(r, *to, reason.as_deref(), ev);
        }
        EventKind::AutoAdvanced {
            to,
            reason,
            evidence,
            prior_review,
            ..
        } => {
            judge(r, evidence.as_ref());
            judge(r, prior_review.as_ref());
            enter_status(r, *to, Some(reason), ev)
        }
        EventKind::AgentSpawned {
            session,
            role,
            heal,
            prior_review,
        } => {
            judge(r, prior_review.as_ref());
            r.sessions.push(SessionRecord {
                id: session.clone(),
                role: *role,
                entry: r.entry,
                started_at: Some(ev.at),
                ended: false,
                unstarted: false,
                stop: None,
                heal: *heal,
                conversation: None,
            });
            r.live_session = Some(session.clone());
            r.dead = false;
            r.respawn_requested = false;
            if heal.is_some() {
                r.healing = None;
            }
        }
        EventKind::SessionStopped { session, reason } => {
            if let Some(rec) = named(&mut r.sessions, Some(session)) {
                rec.stop = Some(SessionStop {
                    at: ev.at,
                    reason: reason.clone(),
                });
            }
        }
        EventKind::SessionFailed { session, error } => {
            if let Some(rec) = named(&mut r.sessions, Some(session)) {
                rec.ended = true;
            }
            if r.live_session.as_deref() == Some(session.as_str()) {
                r.live_session = None;
            }
            r.dead = !r.status.is_terminal();
            r.last_failure = Some(format!("the session could not start: {error}"));
        }
        EventKind::AgentConversation {
            session,
            conversation,
        } => {
            if let Some(rec) = named(&mut r.sessions, Some(session)) {
                rec.conversation = Some(conversation.clone());
            }
        }
        EventKind::WorktreeReset => r.clear_worktree = false,
        EventKind::AgentCrashed {
            crash_count,
            reason,
            ..
        } => {
            r.crash_count = *crash_count;
            r.last_failure = Some(reason.clone());
        }
        EventKind::SessionExited {
            session,
            disposition,
            judged,
            ..
        } => match disposition {
            Disposition::Duplicate => {}
            Disposition::Stale => {
                if let Some(rec) = named(&mut r.sessions, session.as_deref()) {
                    rec.ended = true;
                }
                judge(r, judged.as_ref());
            }
            Disposition::Unstarted => {
                if let Some(rec) = named(&mut r.sessions, session.as_deref()) {
                    rec.ended = true;
                    rec.unstarted = true;
                    // The session the runner meant to start is wanted still.
                    if rec.entry == r.entry && !r.status.is_terminal() {
                        match rec.heal {
                            Some(p) => r.healing = Some(p),
                            None => r.respawn_requested = true,
                        }
                    }
                }
                if r.live_session.as_ref() == session.as_ref() {
                    r.live_session = None;
                }
            }
            Disposition::Current => {
                // A report naming one of our sessions ends that one; a report of a session
                // Warden did not start (an agent harness's own hook) ends the current
                // entry's sessions, so the waiter's later report of ours is a duplicate.
                let entry = r.entry;
                let named = r.sessions.iter().any(|x| Some(&x.id) == session.as_ref());
                if let Some(s) = session
                    && !named
                    && !r.reported.contains(s)
                {
                    r.reported.push(s.clone());
                    if r.reported.len() > REPORTED_SESSIONS_KEPT {
                        r.reported.remove(0);
                    }
                }
                for rec in r.sessions.iter_mut() {
                    if (named && Some(&rec.id) == session.as_ref())
                        || (!named && rec.entry == entry)
                    {
                        rec.ended = true;
                    }
                }
                // A heal session's end is not a dead session: the phase runs again.
                let heal = r
                    .sessions
                    .iter()
                    .rev()
                    .find(|x| Some(&x.id) == session.as_ref())
                    .is_some_and(|x| x.heal.is_some_and(|p| p != Phase::Work));
                // Nor is the end of a direct task's work session: it is the work's result
                // (exit monitoring records it with this event), and the next phase or the
                // work's heal follows without a person.
                let work_result =
                    t.spec.workflow == WorkflowKind::Direct && r.status == Status::Working;
                r.live_session = None;
                r.dead =
                    !heal && !work_result && !r.status.is_terminal() && r.status != Status::Pending;
            }
        },
        EventKind::GuardRan {
            result,
            output_tail,
            evidence,
        } => match result {
            GuardResult::Pass => r.passes = true,
            GuardResult::Fail => {
                // Not judged for good: a `task complete` may hand it off again on code
                // fixed since (a new attempt); only the session's end does not.
                r.refused = evidence.clone();
                charge_attempt(r, t.spec.max_attempts);
                r.passes = false;
                r.last_failure = Some(format!("postchecks failed: {}", last_line(output_tail)));
                r.last_failure_at = Some(ev.at);
            }
            GuardResult::Skipped => {}
        },
        EventKind::TamperIgnored { .. } | EventKind::MemoryMerged { .. } => {}
        EventKind::PhaseChanged { phase, status, .. } => {
            r.phases.set(*phase, *status);
            // The resume point is used up once its phase runs (or is decided without
            // running), whatever the outcome.
            if *status != PhaseStatus::Pending && r.resume_from_phase == Some(*phase) {
                r.resume_from_phase = None;
            }
        }
        EventKind::AutoHealed { phase } => {
            if !r.auto_heal.contains(phase) {
                r.auto_heal.push(*phase);
                r.auto_heal.sort();
            }
            r.healing = Some(*phase);
        }
        EventKind::AttemptFailed { phase, reason } => {
            charge_attempt(r, t.spec.max_attempts);
            r.passes = false;
            r.last_failure = Some(format!("{phase} failed: {}", last_line(reason)));
            r.last_failure_at = Some(ev.at);
        }
        EventKind::RetryRequested {
            work,
            prechecks,
            postchecks,
            clear_worktree,
            resume_from_phase,
            heal_reset,
            review_reset,
        } => {
            t.spec.spec.work = work.apply(&t.spec.spec.work);
            if *review_reset {
                r.review_base = r.review_round;
            }
            t.spec.spec.prechecks = prechecks.apply(&t.spec.spec.prechecks);
            t.spec.spec.postchecks = postchecks.apply(&t.spec.spec.postchecks);
            r.attempts = 0;
            r.crash_count = 0;
            for p in Phase::ALL {
                if p.index() >= resume_from_phase.index() || *clear_worktree {
                    r.phases.set(*p, PhaseStatus::Pending);
                }
            }
            r.auto_heal.retain(|p| !heal_reset.contains(p));
            r.resume_from_phase = Some(*resume_from_phase);
            r.last_failure = None;
            r.last_failure_at = None;
            r.clear_worktree = *clear_worktree;
            r.healing = None;
            r.passes = false;
        }
        EventKind::RespawnRequested => {
            r.respawn_requested = true;
            r.passes = false;
        }
        EventKind::PlanApplied { passes, attempts } => {
            r.passes = *passes;
            r.attempts = *attempts;
        }
    }
    t.runner.version = ev.version;
    t.runner.updated_at = ev.at;
    Ok(Some(t))
}

/// The latest record of session `id`, when it is one Warden started.
fn named<'a>(sessions: &'a mut [SessionRecord], id: Option<&str>) -> Option<&'a mut SessionRecord> {
    let id = id?;
    sessions.iter_mut().rev().find(|x| x.id == id)
}

/// The effects of entering a status (DESIGN 2.1/2.2, 6): a new entry, no live session,
/// `review_round` counts entries into agent-review, `passes` describes the current
/// attempt's evidence (true on `done`, kept into review after a passing guard, cleared
/// by every other status), and every successful transition resets `crash_count` except a
/// crash escalation.
/// Remembers evidence a transition or a guard judged (see `RunnerState::judged`).
fn judge(r: &mut RunnerState, e: Option<&EvidenceRef>) {
    let Some(e) = e else { return };
    if !r.judged.contains(e) {
        r.judged.push(e.clone());
        if r.judged.len() > crate::model::JUDGED_KEPT {
            r.judged.remove(0);
        }
    }
}

fn enter_status(r: &mut RunnerState, to: Status, reason: Option<&str>, ev: &Event) {
    r.status = to;
    r.refused = None;
    r.entry += 1;
    r.entered_at = Some(ev.at);
    r.entered_by = ev.actor;
    r.live_session = None;
    r.dead = false;
    r.respawn_requested = false;
    if to == Status::AgentReview {
        r.review_round += 1;
    }
    match to {
        Status::Done => r.passes = true,
        Status::AgentReview | Status::Reviewing => {}
        _ => r.passes = false,
    }
    if to != Status::Working {
        r.healing = None;
    }
    if to != Status::Working {
        // A person's feedback is for the worker of the entry it sent the work back to.
        r.feedback = None;
    }
    let crash_escalation = to == Status::Stuck && reason == Some(REASON_CRASH_THRESHOLD);
    if !crash_escalation {
        r.crash_count = 0;
    }
    if to == Status::Stuck {
        if r.last_failure.is_none() {
            r.last_failure = reason.map(str::to_owned);
        }
    } else {
        r.last_failure = None;
    }
}

/// `attempts += 1` only while below the maximum (seed 000, "Attempt Saturation").
fn charge_attempt(r: &mut RunnerState, max: u32) {
    if r.attempts < max {
        r.attempts += 1;
    }
}

fn last_line(s: &str) -> String {
    let line = s.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    line.chars().take(200).collect()
}

/// Folds a whole log (in `seq` order) into the tasks it describes, sorted by id.
pub fn replay<'a>(
    events: impl IntoIterator<Item = &'a Event>,
) -> Result<std::collections::BTreeMap<TaskId, Task>, ReplayError> {
    let mut tasks = std::collections::BTreeMap::new();
    for ev in events {
        let cur = tasks.remove(&ev.task);
        if let Some(t) = apply(cur, ev)? {
            tasks.insert(ev.task.clone(), t);
        }
    }
    Ok(tasks)
}
