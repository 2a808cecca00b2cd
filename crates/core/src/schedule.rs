//! The supervisor's contract in one place (DESIGN 6): [`next`] says what the supervisor
//! may do next for a task, given the stored task, which of its sessions are alive, the
//! clock and the limits; the `react_*` functions say what the result of doing it means,
//! as a [`Change`] to commit. The runner only performs actions and commits their
//! reactions; the deterministic simulator (`warden-sim`) drives these same functions.
//!
//! The rules, in the order [`next`] applies them:
//!
//! 1. **At most one live session per task.** A session whose end was not reported but
//!    which is gone is reported (exit unknown). A live session that no longer belongs
//!    (its task moved to another status entry, or to a status without sessions) is
//!    stopped: after `handoff_grace_s` when the agent or the runner moved the task on
//!    (the worker's hand-off), at once when a person did; TERM first, KILL
//!    `kill_after_s` later. Nothing else happens to the task while one is alive.
//! 2. **Terminal tasks** start nothing; a done task's worktree is removed once merged.
//! 3. **Groups** are never scheduled; their status is derived from their children.
//! 4. **Per status**: `pending` starts when its dependencies are done; `working` resets
//!    the worktree after a `--clear-worktree` retry, starts a granted heal session, and
//!    runs the pipeline (merge-fi, prechecks, the work as a session, and for `direct`
//!    tasks commit + postchecks + merge-ri inside the transition to done), waiting a
//!    backoff between attempts of shell and process work; a crashed `review` worker
//!    waits for `task respawn`; `agent-review` starts the reviewer (again below the
//!    crash threshold); `clarification` and `stuck` start a worker only on a respawn
//!    request; `reviewing` waits for a person.

use jiff::{SignedDuration, Timestamp};

use crate::event::{Actor, Disposition, EventKind};
use crate::exit::{ExitAction, ExitDecision, ExitReport};
use crate::model::{Limits, Phase, PhaseStatus, Role, Status, Task, WorkSpec, WorkflowKind};
use crate::ops::{self, Change, Ctx, GuardOutcome, Refusal, TransitionInput};

/// The exit code reported for a session whose end was not seen (its host is gone).
pub const UNKNOWN_EXIT: i32 = 128;

/// What the runner sees of one of a task's open sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Running (or being started).
    Alive,
    /// Gone without a report.
    Gone,
}

/// Everything [`next`] decides from, besides the limits.
#[derive(Clone, Copy)]
pub struct View<'a> {
    /// The stored task.
    pub task: &'a Task,
    /// The time now.
    pub now: Timestamp,
    /// Are the task's dependencies done (as derived for groups)?
    pub deps_done: bool,
    /// Does the task have no children?
    pub leaf: bool,
    /// Does its worktree exist?
    pub worktree: bool,
    /// What the runner sees of an open session, by id.
    pub live: &'a dyn Fn(&str) -> Liveness,
    /// Sessions of the task whose end is recorded but which the runner sees running (a
    /// report that named no session ended the wrong one): stopped before anything else
    /// starts, so a task never has two.
    pub ghosts: &'a [String],
}

impl std::fmt::Debug for View<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("task", &self.task.id())
            .field("now", &self.now)
            .field("deps_done", &self.deps_done)
            .field("leaf", &self.leaf)
            .field("worktree", &self.worktree)
            .finish()
    }
}

/// Why a session is stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The worker (or reviewer) moved the task on and kept running past its grace.
    HandOff {
        /// The status the task moved to.
        to: Status,
    },
    /// The session ran past `phase_timeout_s` and its host did not end it (the host is
    /// gone): the supervisor ends it instead.
    Timeout,
    /// Its end was recorded (a report that named no session was taken for it), but it
    /// still runs.
    Ghost,
    /// A person (or a runner decision) moved the task to a status this session does not
    /// belong to.
    Moved {
        /// The status the task moved to.
        to: Status,
        /// Who moved it.
        by: Actor,
    },
}

impl StopReason {
    /// The reason recorded in `session.stopped`.
    pub fn text(&self) -> String {
        match self {
            StopReason::HandOff { to } => {
                format!("still running after its hand-off grace (the task is {to})")
            }
            StopReason::Timeout => "ran past phase_timeout_s".into(),
            StopReason::Ghost => "still running after its end was recorded".into(),
            StopReason::Moved { to, by } => {
                format!("the task was moved to {to} by the {}", by.as_str())
            }
        }
    }
}

/// What the supervisor does next for a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing to do until something changes.
    Idle,
    /// Nothing to do before `until` (a grace period, a backoff).
    Wait {
        /// When to look again.
        until: Timestamp,
    },
    /// A session of the task runs; wait for its end.
    Busy,
    /// `pending → working`; then look again.
    Start,
    /// Run a phase the supervisor runs itself (merge-fi, prechecks).
    RunPhase(Phase),
    /// Start a session for the current status entry (`heal`: to fix that phase).
    StartSession {
        /// Worker or reviewer.
        role: Role,
        /// A heal session for this failed phase.
        heal: Option<Phase>,
    },
    /// The end of a `direct` task's pipeline: commit, postchecks and merge-ri inside the
    /// transition to done.
    Finish,
    /// Stop a session that no longer belongs: TERM, or KILL when `kill`.
    Stop {
        /// The session.
        session: String,
        /// Why.
        reason: StopReason,
        /// KILL (the TERM was sent `kill_after_s` ago).
        kill: bool,
    },
    /// A session recorded as running is gone: report its end (exit unknown).
    ReportGone {
        /// The session.
        session: String,
    },
    /// Reset the worktree to its base (a retry with `--clear-worktree`).
    ResetWorktree,
    /// Remove a done task's worktree (its work is merged).
    RemoveWorktree,
}

impl Action {
    /// Does the action need the task's lease (it changes the task or its files)?
    pub fn is_work(&self) -> bool {
        !matches!(self, Action::Idle | Action::Wait { .. } | Action::Busy)
    }

    /// What the action does, in words, for the run log.
    pub fn describe(&self) -> String {
        match self {
            Action::Idle => "nothing to do".into(),
            Action::Wait { until } => format!("waiting until {until}"),
            Action::Busy => "a session is running".into(),
            Action::Start => "starting".into(),
            Action::RunPhase(p) => format!("running {p}"),
            Action::StartSession { role, heal: None } => format!("starting the {role}"),
            Action::StartSession {
                role,
                heal: Some(p),
            } => format!("starting the {role} to fix the failed {p}"),
            Action::Finish => "committing, checking and merging".into(),
            Action::Stop {
                session,
                kill: false,
                ..
            } => format!("stopping session {session}"),
            Action::Stop {
                session,
                kill: true,
                ..
            } => format!("killing session {session}"),
            Action::ReportGone { session } => {
                format!("session {session} ended; recording its end")
            }
            Action::ResetWorktree => "resetting the worktree to its base".into(),
            Action::RemoveWorktree => "removing the merged worktree".into(),
        }
    }
}

/// Seconds as a signed duration.
fn secs(s: u64) -> SignedDuration {
    SignedDuration::from_secs(i64::try_from(s).unwrap_or(i64::MAX))
}

/// The wait before attempt `attempts + 1` of shell or process work: `retry_backoff_s`,
/// doubled for every attempt after the second, at most `retry_backoff_max_s`.
pub fn backoff(attempts: u32, limits: &Limits) -> SignedDuration {
    if attempts == 0 {
        return SignedDuration::ZERO;
    }
    let doubled = limits
        .retry_backoff_s
        .saturating_mul(1u64 << (attempts - 1).min(32));
    secs(doubled.min(limits.retry_backoff_max_s))
}

/// When the next attempt of the task may start, if it must wait (DESIGN 2.4: attempts of
/// shell and process work wait a backoff, so a flaky check gets time).
pub fn retry_at(t: &Task, limits: &Limits) -> Option<Timestamp> {
    if t.work_is_agent() || t.attempts() == 0 || t.status() != Status::Working {
        return None;
    }
    let at = t.last_failure_at()?;
    at.checked_add(backoff(t.attempts(), limits)).ok()
}

/// Does a session of `role` belong to the task as it is now (its current entry and a
/// status that calls for that role)?
fn belongs(t: &Task, rec: &crate::model::SessionRecord) -> bool {
    rec.entry == t.entry() && ops::role_for(t.status()) == Some(rec.role)
}

/// The supervisor's next action for one task (see the module documentation).
pub fn next(v: &View<'_>, limits: &Limits) -> Action {
    let t = v.task;
    // 1. Sessions: report the gone, stop the ones that no longer belong, wait for the rest.
    let mut busy = false;
    let mut wake: Option<Timestamp> = None;
    for ghost in v.ghosts {
        if let Some(rec) = t.sessions().iter().rev().find(|r| &r.id == ghost) {
            return stop_or_kill(rec, StopReason::Ghost, v.now, limits);
        }
    }
    for rec in t.open_sessions() {
        if (v.live)(&rec.id) == Liveness::Gone {
            return Action::ReportGone {
                session: rec.id.clone(),
            };
        }
        if belongs(t, rec) {
            // The host's own timer ends a session at phase_timeout_s; past it (and the
            // kill's grace, twice) the host is gone and the supervisor ends it.
            let overdue = rec.started_at.and_then(|at| {
                at.checked_add(secs(
                    limits
                        .phase_timeout_s
                        .saturating_add(limits.kill_after_s.saturating_mul(2)),
                ))
                .ok()
            });
            match overdue {
                Some(due) if v.now >= due => {
                    return stop_or_kill(rec, StopReason::Timeout, v.now, limits);
                }
                Some(due) => {
                    busy = true;
                    wake = Some(wake.map_or(due, |w: Timestamp| w.min(due)));
                }
                None => busy = true,
            }
            continue;
        }
        // A hand-off: the session's own agent (or the runner, on its evidence) moved the
        // task on from the entry the session was started for.
        let handoff = rec.entry + 1 == t.entry() && t.entered_by() != Actor::Person;
        let reason = if handoff {
            StopReason::HandOff { to: t.status() }
        } else {
            StopReason::Moved {
                to: t.status(),
                by: t.entered_by(),
            }
        };
        let grace = if handoff {
            secs(limits.handoff_grace_s)
        } else {
            SignedDuration::ZERO
        };
        let stop_from = t.entered_at().checked_add(grace).unwrap_or(t.entered_at());
        if v.now < stop_from {
            return Action::Wait { until: stop_from };
        }
        return stop_or_kill(rec, reason, v.now, limits);
    }
    if busy {
        // A session runs; look again when its timeout is due, if it has one.
        return match wake {
            Some(until) => Action::Wait { until },
            None => Action::Busy,
        };
    }
    // 2. Terminal tasks.
    match t.status() {
        Status::Done => {
            let merged = matches!(
                t.phases().get(Phase::MergeRi),
                PhaseStatus::Success | PhaseStatus::Skipped
            );
            return if v.worktree && merged {
                Action::RemoveWorktree
            } else {
                Action::Idle
            };
        }
        Status::Cancelled => return Action::Idle,
        _ => {}
    }
    // 3. Groups are not scheduled.
    if !v.leaf {
        return Action::Idle;
    }
    // 4. Per status.
    match t.status() {
        Status::Pending if v.deps_done => Action::Start,
        Status::Pending => Action::Idle,
        Status::Working => working(v, limits),
        Status::AgentReview => {
            let crashed_below =
                t.is_dead() && t.crash_count() > 0 && t.crash_count() < limits.crash_threshold;
            if t.respawn_requested() || !t.had_session() || crashed_below {
                Action::StartSession {
                    role: Role::Reviewer,
                    heal: None,
                }
            } else {
                Action::Idle
            }
        }
        Status::Clarification | Status::Stuck if t.respawn_requested() && t.work_is_agent() => {
            Action::StartSession {
                role: Role::Worker,
                heal: None,
            }
        }
        _ => Action::Idle,
    }
}

/// TERM for a session not yet stopped, KILL once `kill_after_s` has passed since.
fn stop_or_kill(
    rec: &crate::model::SessionRecord,
    reason: StopReason,
    now: Timestamp,
    limits: &Limits,
) -> Action {
    match &rec.stop {
        None => Action::Stop {
            session: rec.id.clone(),
            reason,
            kill: false,
        },
        Some(stop) => {
            let kill_at = stop
                .at
                .checked_add(secs(limits.kill_after_s))
                .unwrap_or(stop.at);
            if now >= kill_at {
                Action::Stop {
                    session: rec.id.clone(),
                    reason,
                    kill: true,
                }
            } else {
                Action::Wait { until: kill_at }
            }
        }
    }
}

/// The rules of a `working` task.
fn working(v: &View<'_>, limits: &Limits) -> Action {
    let t = v.task;
    if t.clear_worktree_pending() {
        return Action::ResetWorktree;
    }
    if let Some(p) = t.healing() {
        return Action::StartSession {
            role: Role::Worker,
            heal: Some(p),
        };
    }
    let done = |p: Phase| {
        matches!(
            t.phases().get(p),
            PhaseStatus::Success | PhaseStatus::Skipped
        )
    };
    if t.spec.workflow == WorkflowKind::Review {
        if t.respawn_requested() {
            return Action::StartSession {
                role: Role::Worker,
                heal: None,
            };
        }
        if t.had_session() {
            // A crashed worker waits for a person's `task respawn`.
            return Action::Idle;
        }
        return match [Phase::MergeFi, Phase::Prechecks]
            .into_iter()
            .find(|p| !done(*p))
        {
            Some(p) => Action::RunPhase(p),
            None => Action::StartSession {
                role: Role::Worker,
                heal: None,
            },
        };
    }
    // Direct agent work whose session died (or could not start) waits for a person's
    // respawn, as a review worker does.
    if t.is_dead() && t.work_is_agent() && !t.respawn_requested() {
        return Action::Idle;
    }
    if let Some(at) = retry_at(t, limits)
        && v.now < at
    {
        return Action::Wait { until: at };
    }
    match Phase::ALL.iter().copied().find(|p| !done(*p)) {
        Some(p @ (Phase::MergeFi | Phase::Prechecks)) => Action::RunPhase(p),
        Some(Phase::Work) => Action::StartSession {
            role: Role::Worker,
            heal: None,
        },
        Some(Phase::Commit | Phase::Postchecks | Phase::MergeRi) | None => Action::Finish,
    }
}

// ---------------------------------------------------------------------------------------
// Reactions: what the result of an action means
// ---------------------------------------------------------------------------------------

/// Can a failed phase get its one automatic heal (DESIGN 2.4)? Prechecks of agent work,
/// and prechecks, work or postchecks of a `direct` task whose work is an agent; never
/// merge-fi, commit or merge-ri, and never twice.
pub fn heal_allowed(t: &Task, phase: Phase) -> bool {
    if !t.work_is_agent() || t.auto_heal().contains(&phase) {
        return false;
    }
    match t.spec.workflow {
        WorkflowKind::Review => phase == Phase::Prechecks,
        WorkflowKind::Direct => matches!(phase, Phase::Prechecks | Phase::Work | Phase::Postchecks),
    }
}

/// `Start`: `pending → working`, the runner's own decision.
pub fn react_start(t: &Task, ctx: &Ctx<'_>) -> Result<Change, Refusal> {
    let input = TransitionInput {
        reason: Some("scheduled".into()),
        ..Default::default()
    };
    ops::transition(t, Status::Working, &input, ctx)
}

/// `RunPhase`: the phase's result. A failure gets the phase's heal when it has one
/// (the agent is started again with the failure), else an attempt is charged and the
/// next pass runs the attempt again from the failed phase (or the task is stuck).
pub fn react_phase(
    t: &Task,
    phase: Phase,
    status: PhaseStatus,
    detail: Option<String>,
    ctx: &Ctx<'_>,
) -> Result<Change, Refusal> {
    if status != PhaseStatus::Failed {
        return ops::phase(t, phase, status, detail, ctx);
    }
    let detail = detail.unwrap_or_else(|| format!("{phase} failed"));
    if heal_allowed(t, phase) {
        return ops::record(
            t,
            vec![
                EventKind::PhaseChanged {
                    phase,
                    status: PhaseStatus::Pending,
                    detail: Some(detail),
                },
                EventKind::AutoHealed { phase },
            ],
            ctx,
        );
    }
    ops::attempt_failed(t, phase, &detail, ctx)
}

/// `StartSession`, before the session starts: the session is recorded for the current
/// entry (so its end is never unknown). A commit of work written after a hand-off (the
/// reviewer's start commits it first) lands in the same write.
pub fn react_spawn(
    t: &Task,
    session: &str,
    role: Role,
    heal: Option<Phase>,
    late_commit: Option<(PhaseStatus, Option<String>)>,
    ctx: &Ctx<'_>,
) -> Result<Change, Refusal> {
    react_spawn_over(t, session, role, heal, late_commit, None, ctx)
}

/// [`react_spawn`] with the task file as the session starts (see [`ops::spawned_over`]).
pub fn react_spawn_over(
    t: &Task,
    session: &str,
    role: Role,
    heal: Option<Phase>,
    late_commit: Option<(PhaseStatus, Option<String>)>,
    artifacts: Option<&crate::artifact::Artifacts>,
    ctx: &Ctx<'_>,
) -> Result<Change, Refusal> {
    let mut kinds = Vec::new();
    if let Some((status, detail)) = late_commit {
        kinds.push(EventKind::PhaseChanged {
            phase: Phase::Commit,
            status,
            detail,
        });
    }
    let work_session = role == Role::Worker && heal.is_none_or(|p| p == Phase::Work);
    if work_session
        && t.status() == Status::Working
        && (t.spec.workflow == WorkflowKind::Direct
            || t.phases().get(Phase::Work) == PhaseStatus::Pending)
    {
        kinds.push(EventKind::PhaseChanged {
            phase: Phase::Work,
            status: PhaseStatus::Running,
            detail: None,
        });
    }
    ops::spawned_over(t, session, role, heal, artifacts, ctx)?.prepend(kinds, ctx)
}

/// `StartSession`, when the session could not start: `session.failed` (the task is
/// marked dead with the error; not the agent's crash).
///
/// The work of a shell or process task that could not start is a failed attempt of its
/// `work` phase as well: the supervisor tries again after the backoff while attempts
/// remain, then the task is stuck; it never loops (a person cannot respawn shell work).
pub fn react_start_failed(
    t: &Task,
    session: &str,
    error: &str,
    ctx: &Ctx<'_>,
) -> Result<Change, Refusal> {
    let failed = EventKind::SessionFailed {
        session: session.to_owned(),
        error: error.to_owned(),
    };
    if t.spec.workflow == WorkflowKind::Direct
        && !t.work_is_agent()
        && t.status() == Status::Working
        && t.phases().get(Phase::Work) == PhaseStatus::Running
    {
        return ops::attempt_failed(
            t,
            Phase::Work,
            &format!("the work could not start: {error}"),
            ctx,
        )?
        .prepend(vec![failed], ctx);
    }
    ops::record(t, vec![failed], ctx)
}

/// `Finish` of a `direct` task, after the runner ran what the transition to done needs
/// (commit, the guard, merge-ri) into `input`. A failed guard of agent work gets its
/// heal first; a failed commit or merge is a failed attempt of that phase.
pub fn react_finish(t: &Task, input: &TransitionInput, ctx: &Ctx<'_>) -> Result<Change, Refusal> {
    if let Some(GuardOutcome::Fail(tail)) = &input.guard
        && heal_allowed(t, Phase::Postchecks)
    {
        let mut kinds: Vec<EventKind> = input
            .phases
            .iter()
            .filter(|(p, _, _)| *p == Phase::Commit || *p == Phase::Work)
            .map(|(p, s, d)| EventKind::PhaseChanged {
                phase: *p,
                status: *s,
                detail: d.clone(),
            })
            .collect();
        kinds.push(EventKind::PhaseChanged {
            phase: Phase::Postchecks,
            status: PhaseStatus::Pending,
            detail: Some(tail.clone()),
        });
        kinds.push(EventKind::AutoHealed {
            phase: Phase::Postchecks,
        });
        return ops::record(t, kinds, ctx);
    }
    match ops::transition(t, Status::Done, input, ctx) {
        Err(Refusal::PhaseFailed { phase, detail, .. }) => {
            react_phase(t, phase, PhaseStatus::Failed, Some(detail), ctx)
        }
        r => r,
    }
}

/// `Stop`: the TERM is recorded as `session.stopped` (the KILL adds nothing).
pub fn react_stop(
    t: &Task,
    session: &str,
    reason: &StopReason,
    ctx: &Ctx<'_>,
) -> Result<Change, Refusal> {
    ops::record(
        t,
        vec![EventKind::SessionStopped {
            session: session.to_owned(),
            reason: reason.text(),
        }],
        ctx,
    )
}

/// `ReportGone`: the report of a session whose end was not seen.
pub fn gone_report(session: &str) -> ExitReport {
    ExitReport {
        role: None,
        session: Some(session.to_owned()),
        exit_code: Some(UNKNOWN_EXIT),
        reason: None,
    }
}

/// `ReportGone` of a session that never started: nothing of it ran (no host, no pane,
/// no exit code; the runner stopped between recording it and starting it). Recorded as
/// [`Disposition::Unstarted`]: the session ends, no crash is charged, and a new session
/// is wanted for the same entry. `None` when that does not apply and the session is
/// reported gone as usual ([`gone_report`]): it is not an open session of the current
/// entry, or the entry already had one that never started (a second is not a runner's
/// bad luck, and is charged as the agent's crash, so nothing can loop on it).
pub fn react_unstarted(t: &Task, session: &str, ctx: &Ctx<'_>) -> Option<Result<Change, Refusal>> {
    let rec = t.sessions().iter().rev().find(|r| r.id == session)?;
    let entry = t.entry();
    if rec.ended
        || rec.entry != entry
        || t.sessions().iter().any(|r| r.entry == entry && r.unstarted)
    {
        return None;
    }
    let kinds = vec![EventKind::SessionExited {
        session: Some(session.to_owned()),
        exit_code: None,
        disposition: Disposition::Unstarted,
        role: Some(rec.role),
        stopped: rec.stop.is_some(),
        reason: None,
        after: None,
        judged: None,
    }];
    let outcome = ops::Outcome::Exit(ExitDecision {
        disposition: Disposition::Unstarted,
        action: ExitAction::Nothing,
    });
    Some(Change::build(Some(t), t.id(), kinds, ctx, outcome))
}

/// `ResetWorktree`: done (or nothing to reset outside git).
pub fn react_reset(t: &Task, ctx: &Ctx<'_>) -> Result<Change, Refusal> {
    ops::record(t, vec![EventKind::WorktreeReset], ctx)
}

/// The command line of a shell or process work phase (agent work has none: the
/// configured agent runs).
pub fn work_argv(t: &Task) -> Option<Vec<String>> {
    match &t.spec.spec.work {
        Some(WorkSpec::Shell(line)) => Some(vec!["sh".to_owned(), "-c".to_owned(), line.clone()]),
        Some(WorkSpec::Process(argv)) => Some(argv.clone()),
        _ => None,
    }
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
