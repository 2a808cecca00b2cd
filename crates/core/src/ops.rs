//! One function per operation: each validates its input against the rules, decides the
//! events, and folds them into the new task. The store commits `Change`s as they are.
//!
//! Operations never perform I/O: anything that must be run (the guard, a commit, a
//! merge) is run by the caller, which passes the results in.

use jiff::Timestamp;

use crate::artifact::{Artifacts, Evidence, Verdict};
use crate::event::{
    self, Actor, Disposition, Event, EventKind, EvidenceRef, GuardResult, REASON_CRASH_THRESHOLD,
    REASON_MAX_ATTEMPTS, SpecChange,
};
use crate::exit::{self, ExitAction, ExitDecision, ExitReport};
use crate::failure::{ExitCode, Failure};
use crate::model::{Limits, Phase, PhaseStatus, Role, Status, Task, TaskSpec, WorkSpec};
use crate::retry::{self, RetryError, RetryPlan, RetryRequest};
use crate::workflow::{Gate, Workflow};

/// The context every operation needs: the time, who asks, and the limits.
#[derive(Clone, Copy, Debug)]
pub struct Ctx<'a> {
    /// The time of the write (passed in; the core never reads a clock).
    pub now: Timestamp,
    /// Who asked.
    pub actor: Actor,
    /// Configured limits.
    pub limits: Limits,
    /// The TASK.md path as people should see it in messages.
    pub task_file: &'a str,
}

#[cfg(any(test, feature = "testing"))]
impl Ctx<'static> {
    /// The one fixed context of tests and benchmarks: 2023-11-14T22:13:20Z, default
    /// limits, `TASK.md` as the file shown.
    pub fn fixed(actor: Actor) -> Ctx<'static> {
        Ctx {
            now: Timestamp::from_second(1_700_000_000).unwrap_or(Timestamp::UNIX_EPOCH),
            actor,
            limits: Limits::default(),
            task_file: "TASK.md",
        }
    }
}

/// A decided write: the task before and after, and the events that lead from one to
/// the other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The task before (None for a creation).
    pub before: Option<Task>,
    /// The task after (None for a removal).
    pub after: Option<Task>,
    /// The events, in order; `seq` is assigned by the store.
    pub events: Vec<Event>,
    /// What the caller should report.
    pub outcome: Outcome,
}

/// What an operation's caller reports besides "ok".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The requested change happened.
    Applied,
    /// The guard failed: the attempt is stored; the CLI exits 1 with the tail.
    GuardFailed {
        /// The tail of the check's output.
        tail: String,
        /// Attempts reached the maximum and the task is now stuck.
        stuck: bool,
    },
    /// A session-exit report was processed.
    Exit(ExitDecision),
    /// The session-exit report wanted to advance, but the guard could not be started.
    ExitGuardError(String),
    /// A retry was accepted.
    Retry(RetryPlan),
}

/// The result of running the guard (postchecks), as the caller saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuardOutcome {
    /// The checks passed.
    Pass,
    /// The checks failed, with the tail of their output.
    Fail(String),
    /// Warden could not start the checks (missing command, spawn failure).
    Error(String),
}

/// What a transition needs the caller to run before [`transition`] (DESIGN 2.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Commit the worktree (the `commit` phase).
    pub commit: bool,
    /// Run the postchecks (the guard); false when the task has none.
    pub guard: bool,
    /// Merge the task branch into the base branch (`merge-ri`).
    pub merge_ri: bool,
}

/// The input of a transition besides the target status.
#[derive(Clone, Debug, Default)]
pub struct TransitionInput {
    /// The artifacts of TASK.md, parsed at the moment of the transition.
    pub artifacts: Artifacts,
    /// The guard result, when [`Needs::guard`] asked for it.
    pub guard: Option<GuardOutcome>,
    /// Results of phases the caller ran for this transition (commit, postchecks, merge-ri).
    pub phases: Vec<(Phase, PhaseStatus, Option<String>)>,
    /// A reason given by the requester.
    pub reason: Option<String>,
}

/// Why a request was refused. Nothing is written for a refusal.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The task is done or cancelled.
    #[error("task {id} is {status}, which is terminal; create a new task instead")]
    Terminal {
        /// The task.
        id: String,
        /// Its status.
        status: Status,
    },
    /// The transition is not in the workflow's map.
    #[error(
        "{from} → {to} is not allowed in the {workflow} workflow; from {from} the task can go to: {allowed}"
    )]
    Illegal {
        /// Current status.
        from: Status,
        /// Requested status.
        to: Status,
        /// The workflow's name.
        workflow: String,
        /// Legal targets, comma-separated.
        allowed: String,
    },
    /// `working → agent-review` without a `## Handoff`.
    #[error("{from} → {to} needs a non-empty \"## Handoff\" section in {file}")]
    NeedsHandoff {
        /// Current status.
        from: Status,
        /// Requested status.
        to: Status,
        /// TASK.md path.
        file: String,
    },
    /// `working → agent-review` with only a `## Handoff` already judged: an earlier
    /// round's, or one whose guard failed (its attempt is spent).
    #[error(
        "{from} → {to} needs a new \"## Handoff\" in {file}: the one there was handed off already, by an earlier round; append one saying what this round did"
    )]
    StaleHandoff {
        /// Current status.
        from: Status,
        /// Requested status.
        to: Status,
        /// TASK.md path.
        file: String,
    },
    /// A gated transition while TASK.md has a gated heading swallowed by an open code
    /// fence or HTML comment (see `Artifacts::hidden`).
    #[error("{from} → {to} cannot read {file}: {detail}, then run this again")]
    Swallowed {
        /// Old status.
        from: Status,
        /// New status.
        to: Status,
        /// TASK.md path.
        file: String,
        /// Which line, and what to close.
        detail: String,
    },
    /// A review transition with only a `## Review` an earlier round wrote.
    #[error(
        "{from} → {to} needs a new \"## Review\" in {file}: the one there was written before this review round began; the reviewer appends one with this round's verdict"
    )]
    StaleVerdict {
        /// Current status.
        from: Status,
        /// Requested status.
        to: Status,
        /// TASK.md path.
        file: String,
    },
    /// A review transition without the right verdict.
    #[error(
        "{from} → {to} needs a \"## Review\" section whose verdict line says {want} in {file} (found: {found})"
    )]
    NeedsVerdict {
        /// Current status.
        from: Status,
        /// Requested status.
        to: Status,
        /// PASS or FAIL.
        want: &'static str,
        /// What was found: PASS, FAIL or "no verdict".
        found: &'static str,
        /// TASK.md path.
        file: String,
    },
    /// A failed review routed to the wrong place for its round.
    #[error(
        "review round {round} of {max} failed, so the task goes to {expected}, not {to}; run `warden task update {id} --status {expected}`"
    )]
    WrongRound {
        /// The task.
        id: String,
        /// The review round.
        round: u32,
        /// The limit.
        max: u32,
        /// Where it must go.
        expected: Status,
        /// Where it was asked to go.
        to: Status,
    },
    /// The guard could not be started: Warden's fault, exit 5, no attempt charged.
    #[error(
        "the postchecks could not be started ({0}); no attempt was charged — fix the check command or the environment and try again"
    )]
    GuardError(String),
    /// The guard was needed but not run (a caller bug).
    #[error("the postchecks of task {0} were not run; this is a Warden bug, please report it")]
    GuardNotRun(String),
    /// A phase the transition needs failed (merge-ri conflict).
    #[error("{phase} failed: {detail}; the task stays {status}")]
    PhaseFailed {
        /// The phase.
        phase: Phase,
        /// What failed (conflicting paths).
        detail: String,
        /// Where the task stays.
        status: Status,
    },
    /// Retry refused.
    #[error("{0}")]
    Retry(#[from] RetryError),
    /// A session role that does not fit the task's status.
    #[error("task {id} is {status}; a {role} session cannot start now")]
    WrongRole {
        /// The task.
        id: String,
        /// Its status.
        status: Status,
        /// The role.
        role: Role,
    },
    /// Respawn asked while a session is alive, or in a status without sessions.
    #[error("task {id} {why}")]
    Respawn {
        /// The task.
        id: String,
        /// Why (`has a live session s1`, `is pending; start it with warden run`).
        why: String,
    },
    /// A phase failure reported for a task that is not working.
    #[error("task {id} is {status}; only a working task runs phases")]
    NotWorking {
        /// The task.
        id: String,
        /// Its status.
        status: Status,
    },
    /// `plan apply` would finish (or decompose) a task the store says may not be.
    #[error("plan apply cannot {what} task {id}: {why}")]
    ApplyDone {
        /// What the apply would do: "finish" or "decompose".
        what: &'static str,
        /// The selected task.
        id: String,
        /// Why, and what to do instead.
        why: String,
    },
    /// A task spec is invalid.
    #[error("{0}")]
    InvalidSpec(String),
    /// A memory delta is invalid.
    #[error("{0}")]
    InvalidMemory(String),
    /// The fold rejected the events (a bug in an operation).
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<Refusal> for Failure {
    /// Refusals by the rules exit 1; a guard Warden could not start is refused with exit
    /// 5 (Warden's fault, no attempt charged); a bug is an internal error.
    fn from(r: Refusal) -> Failure {
        let message = r.to_string();
        match r {
            Refusal::GuardError(_) => Failure::refusal(ExitCode::Internal, message),
            Refusal::GuardNotRun(_) | Refusal::Internal(_) => Failure::internal(message),
            _ => Failure::refused(message),
        }
    }
}

impl Change {
    /// Builds a change by folding `kinds` into `before` as one write.
    pub fn build(
        before: Option<&Task>,
        id: &crate::model::TaskId,
        kinds: Vec<EventKind>,
        ctx: &Ctx<'_>,
        outcome: Outcome,
    ) -> Result<Change, Refusal> {
        let version = before.map_or(1, |t| t.version() + 1);
        let events: Vec<Event> = kinds
            .into_iter()
            .map(|kind| Event {
                seq: 0,
                at: ctx.now,
                task: id.clone(),
                version,
                actor: ctx.actor,
                kind,
            })
            .collect();
        let mut after = before.cloned();
        for ev in &events {
            after = event::apply(after, ev).map_err(|e| Refusal::Internal(e.to_string()))?;
        }
        Ok(Change {
            before: before.cloned(),
            after,
            events,
            outcome,
        })
    }

    /// Puts `kinds` in front of this change's events (e.g. `tamper.ignored` found while
    /// reading TASK.md) and folds again, so both land in one write.
    pub fn prepend(self, kinds: Vec<EventKind>, ctx: &Ctx<'_>) -> Result<Change, Refusal> {
        if kinds.is_empty() {
            return Ok(self);
        }
        let id = match (&self.before, &self.after) {
            (Some(t), _) | (None, Some(t)) => t.id().clone(),
            (None, None) => return Ok(self),
        };
        let mut all = kinds;
        all.extend(self.events.into_iter().map(|e| e.kind));
        Change::build(self.before.as_ref(), &id, all, ctx, self.outcome)
    }

    /// The task after the change (panics only if the change removed it, which only
    /// `plan apply` does).
    pub fn task(&self) -> Option<&Task> {
        self.after.as_ref()
    }
}

/// Initial runner fields of a new task (a person's import may set them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Initial {
    /// `passes`.
    pub passes: bool,
    /// `attempts`.
    pub attempts: u32,
    /// Created cancelled: a person's import of a plan that dropped the task
    /// (`plan export` writes `"status": "cancelled"` for it).
    pub cancelled: bool,
}

impl Initial {
    /// A task that has not passed and has no failed attempt: every new task but a
    /// person's import of finished work.
    pub const NEW: Initial = Initial {
        passes: false,
        attempts: 0,
        cancelled: false,
    };
}

/// `task create` / import: a new task. A task imported with `passes: true` starts done,
/// one with `attempts` at `max_attempts` stuck, one with `status: cancelled` cancelled.
pub fn create(spec: TaskSpec, initial: Initial, ctx: &Ctx<'_>) -> Result<Change, Refusal> {
    // New ids must name a branch (`warden/<id>`); ids stored before this rule still load.
    if let Some(why) = spec.id.branch_problem() {
        // The words of `PlanError::NotABranch`: a plan import lists each problem once.
        return Err(Refusal::InvalidSpec(format!(
            "task id {} cannot name a git branch ({why}); choose another id",
            spec.id
        )));
    }
    validate_spec(&spec)?;
    // More failed attempts than allowed says the file is wrong, not how stuck it is.
    if initial.attempts > spec.max_attempts {
        return Err(Refusal::InvalidSpec(format!(
            "task {} has attempts: {} but max_attempts: {}; attempts is at most max_attempts (at max_attempts the task is stuck)",
            spec.id, initial.attempts, spec.max_attempts
        )));
    }
    let attempts = initial.attempts;
    // An import that moves an old plan over may say a task used up its attempts: it is
    // stuck, as `plan next` and the supervisor read it, and `task retry` runs it again.
    let status = if initial.cancelled {
        if initial.passes {
            return Err(Refusal::InvalidSpec(format!(
                "task {} has passes: true (done) and status: cancelled; keep one of them",
                spec.id
            )));
        }
        Status::Cancelled
    } else if initial.passes {
        Status::Done
    } else if attempts >= spec.max_attempts {
        Status::Stuck
    } else {
        Workflow::builtin(spec.workflow).initial()
    };
    let id = spec.id.clone();
    Change::build(
        None,
        &id,
        vec![EventKind::TaskCreated {
            spec,
            status,
            passes: initial.passes,
            attempts,
        }],
        ctx,
        Outcome::Applied,
    )
}

/// The longest body a task may have, in bytes: TASK.md (read up to
/// [`crate::artifact::MAX_TASK_FILE_BYTES`]) holds it, the frontmatter and the agents'
/// sections, so what Warden writes it can always read back.
pub const MAX_BODY_BYTES: usize = 512 * 1024;
/// The longest title, agent instructions and check command, in bytes.
pub const MAX_TITLE_BYTES: usize = 1024;
/// See [`MAX_TITLE_BYTES`].
pub const MAX_INSTRUCTIONS_BYTES: usize = 128 * 1024;
/// See [`MAX_TITLE_BYTES`].
pub const MAX_COMMAND_BYTES: usize = 32 * 1024;

/// The free texts of a spec with their limits, for [`validate_spec`].
fn spec_texts(spec: &TaskSpec) -> Vec<(&'static str, &str, usize)> {
    let mut out = vec![
        ("title", spec.title.as_str(), MAX_TITLE_BYTES),
        ("body", spec.body.as_str(), MAX_BODY_BYTES),
    ];
    for (name, w) in [
        ("work", &spec.spec.work),
        ("prechecks", &spec.spec.prechecks),
        ("postchecks", &spec.spec.postchecks),
    ] {
        match w {
            Some(WorkSpec::Agent(text)) => {
                out.push(("agent instructions", text, MAX_INSTRUCTIONS_BYTES))
            }
            Some(WorkSpec::Shell(cmd)) => out.push((name, cmd, MAX_COMMAND_BYTES)),
            Some(WorkSpec::Process(argv)) => {
                out.extend(argv.iter().map(|a| (name, a.as_str(), MAX_COMMAND_BYTES)))
            }
            None => {}
        }
    }
    out
}

/// Checks the user-owned fields of a spec.
pub fn validate_spec(spec: &TaskSpec) -> Result<(), Refusal> {
    for (what, text, max) in spec_texts(spec) {
        // "the agent instructions are", "the prechecks contain", "the title is".
        let plural = what.ends_with('s');
        if text.contains('\0') {
            return Err(Refusal::InvalidSpec(format!(
                "task {}: the {what} {} a NUL character (\\u0000), which no prompt, store or agent command line can carry; remove it",
                spec.id,
                if plural { "contain" } else { "contains" }
            )));
        }
        if text.len() > max {
            return Err(Refusal::InvalidSpec(format!(
                "task {}: the {what} {} {} bytes, over the {} KiB limit; shorten it (TASK.md holds it and is read up to {} KiB, with room left for the agents' sections)",
                spec.id,
                if plural { "are" } else { "is" },
                text.len(),
                max / 1024,
                crate::artifact::MAX_TASK_FILE_BYTES / 1024
            )));
        }
    }
    // `sh -c ''` succeeds: an empty postcheck is a guard that always passes, an empty
    // work a task done by doing nothing.
    for (what, check) in [
        ("work", &spec.spec.work),
        ("prechecks", &spec.spec.prechecks),
        ("postchecks", &spec.spec.postchecks),
    ] {
        let problem = match check {
            Some(WorkSpec::Shell(c)) if c.trim().is_empty() => format!(
                "the {what} {} an empty shell command, which always succeeds; give a command, or leave {what} out",
                if what.ends_with('s') { "are" } else { "is" },
            ),
            // `# run the tests` is a comment to `sh`: it runs nothing and succeeds.
            Some(WorkSpec::Shell(c))
                if c.lines()
                    .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) =>
            {
                format!(
                    "the {what} {} only a comment ({:?}), which runs nothing and always succeeds; give a command, or leave {what} out",
                    if what.ends_with('s') { "are" } else { "is" },
                    c.trim().lines().next().unwrap_or_default(),
                )
            }
            Some(WorkSpec::Agent(a)) if a.trim().is_empty() => {
                "the agent instructions are empty; say what the agent should do".to_owned()
            }
            _ => continue,
        };
        return Err(Refusal::InvalidSpec(format!("task {}: {problem}", spec.id)));
    }
    if let Some(e) = &spec.evidence
        && !crate::model::is_inside_path(e)
    {
        return Err(Refusal::InvalidSpec(format!(
            "task {}: the evidence file {e:?} must be a relative path inside the project (no `..`, not absolute)",
            spec.id
        )));
    }
    if spec.max_attempts == 0 {
        // The words of `PlanError::ZeroMaxAttempts`.
        return Err(Refusal::InvalidSpec(format!(
            "task {} has max_attempts 0; use 1 or more, or leave it out for the default",
            spec.id
        )));
    }
    if spec.title.trim().is_empty() {
        return Err(Refusal::InvalidSpec(format!(
            "task {}: the title is empty; give a title or leave it out to use the id",
            spec.id
        )));
    }
    // A title is one line in every table, list and STATE.md row; a line break would
    // split the row and an escape would reach the person's terminal.
    if let Some(c) = spec.title.chars().find(|&c| crate::model::unprintable(c)) {
        return Err(Refusal::InvalidSpec(format!(
            "task {}: the title contains the control character {:?}; a title is one line of plain text: put the rest in the body",
            spec.id, c
        )));
    }
    if spec.parent.as_ref() == Some(&spec.id) {
        return Err(Refusal::InvalidSpec(format!(
            "task {} cannot be its own parent",
            spec.id
        )));
    }
    if spec.depends_on.contains(&spec.id) {
        return Err(Refusal::InvalidSpec(format!(
            "task {} cannot depend on itself",
            spec.id
        )));
    }
    if let Some(crate::model::WorkSpec::Process(argv)) = &spec.spec.work
        && argv.is_empty()
    {
        return Err(Refusal::InvalidSpec(format!(
            "task {}: a process work spec needs at least the program name",
            spec.id
        )));
    }
    Ok(())
}

/// `task edit` / tree protocol: replace the user-owned fields.
pub fn edit(task: &Task, spec: TaskSpec, ctx: &Ctx<'_>) -> Result<Change, Refusal> {
    validate_spec(&spec)?;
    if spec.id != task.spec.id {
        return Err(Refusal::InvalidSpec(format!(
            "task {} cannot be renamed to {}",
            task.spec.id, spec.id
        )));
    }
    Change::build(
        Some(task),
        task.id(),
        vec![EventKind::TaskEdited { spec }],
        ctx,
        Outcome::Applied,
    )
}

fn evidence_ref(e: &Evidence) -> EvidenceRef {
    EvidenceRef {
        section: e.section.clone(),
        digest: e.digest.clone(),
        nth: e.nth,
    }
}

/// The `## Review` a task entering agent-review finds already written: not the coming
/// round's (its reviewer has not started), so the move judges it with the hand-off. A
/// worker that writes its own "PASS" beside its hand-off does not pass the review.
fn prior_review(task: &Task, to: Status, artifacts: &Artifacts) -> Option<EvidenceRef> {
    if to != Status::AgentReview {
        return None;
    }
    task.fresh(artifacts).review.as_ref().map(evidence_ref)
}

fn verdict_name(v: Option<Verdict>) -> &'static str {
    match v {
        Some(Verdict::Pass) => "PASS",
        Some(Verdict::Fail) => "FAIL",
        None => {
            "no verdict; begin a line with PASS or FAIL, not after a negation such as \"not PASS\""
        }
    }
}

/// Checks the map and the artifact gate of `task → to`, and says what the caller must
/// run before calling [`transition`]. Nothing is written.
pub fn check_transition(
    task: &Task,
    to: Status,
    artifacts: &Artifacts,
    ctx: &Ctx<'_>,
) -> Result<(Needs, Option<EvidenceRef>), Refusal> {
    let from = task.status();
    if from.is_terminal() {
        return Err(Refusal::Terminal {
            id: task.id().to_string(),
            status: from,
        });
    }
    let wf = Workflow::builtin(task.spec.workflow);
    if !wf.allows(from, to) {
        let allowed: Vec<&str> = wf.targets(from).iter().map(|s| s.as_str()).collect();
        return Err(Refusal::Illegal {
            from,
            to,
            workflow: task.spec.workflow.to_string(),
            allowed: if allowed.is_empty() {
                "nothing".into()
            } else {
                allowed.join(", ")
            },
        });
    }
    let has_postchecks = task.spec.spec.postchecks.is_some();
    // Only evidence this round wrote counts (DESIGN 6).
    let given = artifacts;
    let fresh = task.fresh(artifacts);
    let artifacts = &fresh;
    let round = task.review_round();
    let max = ctx.limits.max_review_rounds;
    let file = || ctx.task_file.to_owned();
    let verdict_needed = |want: Verdict| -> Result<Option<EvidenceRef>, Refusal> {
        if artifacts.verdict == Some(want) {
            Ok(artifacts.review.as_ref().map(evidence_ref))
        } else if given.verdict.is_some() && artifacts.verdict.is_none() {
            Err(Refusal::StaleVerdict {
                from,
                to,
                file: file(),
            })
        } else {
            Err(Refusal::NeedsVerdict {
                from,
                to,
                want: verdict_name(Some(want)),
                found: verdict_name(artifacts.verdict),
                file: file(),
            })
        }
    };
    if let (Some(_), Some(detail)) = (wf.gate(from, to), &given.hidden)
        && wf.gate(from, to) != Some(Gate::Guard)
    {
        return Err(Refusal::Swallowed {
            from,
            to,
            file: file(),
            detail: detail.clone(),
        });
    }
    let mut needs = Needs {
        merge_ri: to == Status::Done,
        ..Needs::default()
    };
    let evidence = match wf.gate(from, to) {
        None => None,
        Some(Gate::HandoffThenGuard) => {
            let Some(h) = &artifacts.handoff else {
                if given.handoff.is_some() {
                    return Err(Refusal::StaleHandoff {
                        from,
                        to,
                        file: file(),
                    });
                }
                return Err(Refusal::NeedsHandoff {
                    from,
                    to,
                    // A task with an evidence file passes the gate with either.
                    file: match &task.spec.evidence {
                        Some(e) => format!("{} or content in its evidence file {e}", file()),
                        None => file(),
                    },
                });
            };
            needs.commit = true;
            needs.guard = has_postchecks;
            Some(evidence_ref(h))
        }
        Some(Gate::Guard) => {
            needs.commit = true;
            needs.guard = has_postchecks;
            None
        }
        Some(Gate::ReviewPass) => verdict_needed(Verdict::Pass)?,
        Some(Gate::ReviewFailBelowLimit) => {
            let ev = verdict_needed(Verdict::Fail)?;
            if round >= max {
                return Err(Refusal::WrongRound {
                    id: task.id().to_string(),
                    round,
                    max,
                    expected: Status::Stuck,
                    to,
                });
            }
            ev
        }
        Some(Gate::ReviewFailAtLimit) => {
            let ev = verdict_needed(Verdict::Fail)?;
            if round < max {
                return Err(Refusal::WrongRound {
                    id: task.id().to_string(),
                    round,
                    max,
                    expected: Status::Working,
                    to,
                });
            }
            ev
        }
    };
    Ok((needs, evidence))
}

/// A validated transition (`task update --status`, `task complete`, `task cancel`, the
/// supervisor's own moves). A failed guard is an outcome, not a refusal: the charged
/// attempt is stored, and at `max_attempts` the task becomes stuck.
pub fn transition(
    task: &Task,
    to: Status,
    input: &TransitionInput,
    ctx: &Ctx<'_>,
) -> Result<Change, Refusal> {
    let (needs, evidence) = check_transition(task, to, &input.artifacts, ctx)?;
    let mut kinds = phase_kinds(task, input)?;
    if needs.guard {
        match &input.guard {
            None => return Err(Refusal::GuardNotRun(task.id().to_string())),
            Some(GuardOutcome::Error(e)) => return Err(Refusal::GuardError(e.clone())),
            Some(GuardOutcome::Fail(tail)) => {
                return guard_failed(task, kinds, tail, false, evidence, ctx);
            }
            Some(GuardOutcome::Pass) => kinds.push(EventKind::GuardRan {
                result: GuardResult::Pass,
                output_tail: String::new(),
                evidence: None,
            }),
        }
    } else if matches!(
        Workflow::builtin(task.spec.workflow).gate(task.status(), to),
        Some(Gate::HandoffThenGuard | Gate::Guard)
    ) {
        kinds.push(EventKind::GuardRan {
            result: GuardResult::Skipped,
            output_tail: String::new(),
            evidence: None,
        });
    }
    // A failed final review is why a task is stuck: say so when the requester did not.
    let reason = input.reason.clone().or_else(|| {
        (Workflow::builtin(task.spec.workflow).gate(task.status(), to)
            == Some(Gate::ReviewFailAtLimit))
        .then(|| {
            format!(
                "review verdict FAIL in round {} of {}",
                task.review_round(),
                ctx.limits.max_review_rounds
            )
        })
    });
    kinds.push(EventKind::StatusChanged {
        from: task.status(),
        to,
        reason,
        evidence,
        prior_review: prior_review(task, to, &input.artifacts),
    });
    Change::build(Some(task), task.id(), kinds, ctx, Outcome::Applied)
}

/// `phase.changed` events for the phases the caller ran; a failed merge refuses.
fn phase_kinds(task: &Task, input: &TransitionInput) -> Result<Vec<EventKind>, Refusal> {
    let mut kinds = Vec::new();
    for (phase, status, detail) in &input.phases {
        if *phase == Phase::MergeRi && *status == PhaseStatus::Failed {
            return Err(Refusal::PhaseFailed {
                phase: *phase,
                detail: detail.clone().unwrap_or_else(|| "merge failed".into()),
                status: task.status(),
            });
        }
        if *phase == Phase::Commit && *status == PhaseStatus::Failed {
            return Err(Refusal::PhaseFailed {
                phase: *phase,
                detail: detail.clone().unwrap_or_else(|| "commit failed".into()),
                status: task.status(),
            });
        }
        kinds.push(EventKind::PhaseChanged {
            phase: *phase,
            status: *status,
            detail: detail.clone(),
        });
    }
    Ok(kinds)
}

/// A failed guard: the attempt is charged; at the maximum the task becomes stuck.
fn guard_failed(
    task: &Task,
    mut kinds: Vec<EventKind>,
    tail: &str,
    auto: bool,
    evidence: Option<EvidenceRef>,
    ctx: &Ctx<'_>,
) -> Result<Change, Refusal> {
    kinds.push(EventKind::GuardRan {
        result: GuardResult::Fail,
        output_tail: tail.to_owned(),
        evidence,
    });
    let stuck = task.attempts() + 1 >= task.spec.max_attempts;
    if stuck && task.status() != Status::Stuck {
        kinds.push(stuck_kind(task.status(), REASON_MAX_ATTEMPTS, auto));
    }
    Change::build(
        Some(task),
        task.id(),
        kinds,
        ctx,
        Outcome::GuardFailed {
            tail: tail.to_owned(),
            stuck,
        },
    )
}

fn stuck_kind(from: Status, reason: &str, auto: bool) -> EventKind {
    if auto {
        EventKind::AutoAdvanced {
            from,
            to: Status::Stuck,
            reason: reason.to_owned(),
            evidence: None,
            prior_review: None,
        }
    } else {
        EventKind::StatusChanged {
            from,
            to: Status::Stuck,
            reason: Some(reason.to_owned()),
            evidence: None,
            prior_review: None,
        }
    }
}

/// `task exited`: the single entry point of exit monitoring (DESIGN 2.2). `guard` is the
/// postchecks result when the decision (see [`exit::decide`]) asked for it.
pub fn exited(
    task: &Task,
    report: &ExitReport,
    input: &TransitionInput,
    ctx: &Ctx<'_>,
) -> Result<Change, Refusal> {
    let decision = exit::decide(task, &input.artifacts, report, &ctx.limits);
    let outcome = Outcome::Exit(decision.clone());
    if decision.disposition == Disposition::Duplicate {
        // One event per real end: a second report of it changes nothing and records
        // nothing (the answer still says how it was taken).
        return Change::build(Some(task), task.id(), vec![], ctx, outcome);
    }
    let record = exit::reported_record(task, report);
    let mut kinds = vec![EventKind::SessionExited {
        session: report.session.clone(),
        exit_code: report.exit_code,
        disposition: decision.disposition,
        reason: report.reason.clone(),
        role: record.map(|r| r.role),
        stopped: record.is_some_and(|r| r.stop.is_some()),
        after: (decision.disposition == Disposition::Stale).then(|| task.status()),
        judged: (decision.disposition == Disposition::Stale
            && record.map(|r| r.role).or(report.role) == Some(Role::Worker)
            && task.status() == Status::AgentReview)
            .then(|| {
                task.fresh(&input.artifacts)
                    .review
                    .as_ref()
                    .map(evidence_ref)
            })
            .flatten(),
    }];
    if decision.disposition != Disposition::Current {
        return Change::build(Some(task), task.id(), kinds, ctx, outcome);
    }
    match &decision.action {
        ExitAction::Nothing | ExitAction::MarkDead => {}
        ExitAction::HealEnded { .. } => {
            // Not a crash, and not dead: the phase it healed runs again.
        }
        ExitAction::Crash {
            crash_count,
            escalate,
            reason,
            ..
        } => {
            kinds.push(EventKind::AgentCrashed {
                status: task.status(),
                crash_count: *crash_count,
                reason: reason.clone(),
            });
            if *escalate {
                kinds.push(stuck_kind(task.status(), REASON_CRASH_THRESHOLD, true));
            }
        }
        ExitAction::WorkEnded { success: true } => kinds.push(EventKind::PhaseChanged {
            phase: Phase::Work,
            status: PhaseStatus::Success,
            detail: None,
        }),
        ExitAction::WorkEnded { success: false } => {
            // The work of a direct task failed. Agent work gets its one automatic heal
            // (the agent is started again); otherwise the attempt is charged here, once,
            // and the supervisor runs the work again while attempts remain.
            let mut why = format!(
                "the work session ended with {}",
                report
                    .exit_code
                    .map(|c| format!("exit code {c}"))
                    .unwrap_or_else(|| "an unknown status".into())
            );
            // Why it ended, when the reporter says (Warden's host: a timeout, a flood).
            if let Some(r) = report.reason.as_deref().filter(|r| !r.is_empty()) {
                why = format!("{why} ({r})");
            }
            if task.work_is_agent() && !task.auto_heal().contains(&Phase::Work) {
                kinds.push(EventKind::PhaseChanged {
                    phase: Phase::Work,
                    status: PhaseStatus::Pending,
                    detail: Some(why),
                });
                kinds.push(EventKind::AutoHealed { phase: Phase::Work });
            } else {
                kinds.push(EventKind::PhaseChanged {
                    phase: Phase::Work,
                    status: PhaseStatus::Failed,
                    detail: Some(why.clone()),
                });
                kinds.push(EventKind::AttemptFailed {
                    phase: Phase::Work,
                    reason: why,
                });
                if task.attempts() + 1 >= task.spec.max_attempts {
                    kinds.push(stuck_kind(task.status(), REASON_MAX_ATTEMPTS, true));
                }
            }
        }
        ExitAction::Advance {
            to, reason, guard, ..
        } => {
            let evidence = match to {
                Status::AgentReview => input.artifacts.handoff.as_ref(),
                _ => input.artifacts.review.as_ref(),
            }
            .map(evidence_ref);
            kinds.extend(phase_kinds(task, input)?);
            if *guard {
                if task.spec.spec.postchecks.is_none() {
                    kinds.push(EventKind::GuardRan {
                        result: GuardResult::Skipped,
                        output_tail: String::new(),
                        evidence: None,
                    });
                } else {
                    match &input.guard {
                        None => return Err(Refusal::GuardNotRun(task.id().to_string())),
                        Some(GuardOutcome::Error(e)) => {
                            return Change::build(
                                Some(task),
                                task.id(),
                                kinds,
                                ctx,
                                Outcome::ExitGuardError(e.clone()),
                            );
                        }
                        Some(GuardOutcome::Fail(tail)) => {
                            let ch = guard_failed(task, kinds, tail, true, evidence.clone(), ctx)?;
                            return Ok(Change { outcome, ..ch });
                        }
                        Some(GuardOutcome::Pass) => kinds.push(EventKind::GuardRan {
                            result: GuardResult::Pass,
                            output_tail: String::new(),
                            evidence: None,
                        }),
                    }
                }
            }
            kinds.push(EventKind::AutoAdvanced {
                from: task.status(),
                to: *to,
                reason: reason.clone(),
                evidence,
                prior_review: prior_review(task, *to, &input.artifacts),
            });
        }
    }
    Change::build(Some(task), task.id(), kinds, ctx, outcome)
}

/// `task retry`: a person's decision to run a stuck task again (DESIGN 2.4).
pub fn retry(task: &Task, req: &RetryRequest, ctx: &Ctx<'_>) -> Result<Change, Refusal> {
    let plan = retry::plan(task, req)?;
    let kinds = vec![
        EventKind::RetryRequested {
            work: req
                .work
                .clone()
                .map(SpecChange::Set)
                .unwrap_or(SpecChange::Keep),
            prechecks: req.prechecks.clone(),
            postchecks: req.postchecks.clone(),
            clear_worktree: req.clear_worktree,
            resume_from_phase: plan.resume_from_phase,
            heal_reset: plan.heal_reset.clone(),
            review_reset: true,
        },
        EventKind::StatusChanged {
            from: Status::Stuck,
            to: Status::Working,
            reason: Some("retry".to_owned()),
            evidence: None,
            prior_review: None,
        },
    ];
    let change = Change::build(Some(task), task.id(), kinds, ctx, Outcome::Retry(plan))?;
    // New work or checks are held to what `task create` takes.
    if let Some(after) = &change.after
        && (req.work.is_some()
            || matches!(req.prechecks, SpecChange::Set(_))
            || matches!(req.postchecks, SpecChange::Set(_)))
    {
        validate_spec(&after.spec)?;
    }
    Ok(change)
}

/// The supervisor started a session for the task's current status entry (`heal`: to fix
/// that failed phase).
pub fn spawned(
    task: &Task,
    session: &str,
    role: Role,
    heal: Option<Phase>,
    ctx: &Ctx<'_>,
) -> Result<Change, Refusal> {
    spawned_over(task, session, role, heal, None, ctx)
}

/// [`spawned`] with the task file as it is when the session starts: a reviewer's start
/// judges a `## Review` already there (a worker that wrote one after its hand-off, in
/// its grace, does not pass its own review).
pub fn spawned_over(
    task: &Task,
    session: &str,
    role: Role,
    heal: Option<Phase>,
    artifacts: Option<&Artifacts>,
    ctx: &Ctx<'_>,
) -> Result<Change, Refusal> {
    ensure_active(task)?;
    let fits = match role {
        Role::Worker => matches!(
            task.status(),
            Status::Working | Status::Clarification | Status::Stuck
        ),
        Role::Reviewer => task.status() == Status::AgentReview,
    };
    if !fits {
        return Err(Refusal::WrongRole {
            id: task.id().to_string(),
            status: task.status(),
            role,
        });
    }
    Change::build(
        Some(task),
        task.id(),
        vec![EventKind::AgentSpawned {
            session: session.to_owned(),
            role,
            heal,
            prior_review: artifacts
                .filter(|_| role == Role::Reviewer)
                .and_then(|a| task.fresh(a).review.as_ref().map(evidence_ref)),
        }],
        ctx,
        Outcome::Applied,
    )
}

fn ensure_active(task: &Task) -> Result<(), Refusal> {
    if task.status().is_terminal() {
        return Err(Refusal::Terminal {
            id: task.id().to_string(),
            status: task.status(),
        });
    }
    Ok(())
}

/// The role whose session a status calls for, if any.
pub fn role_for(status: Status) -> Option<Role> {
    match status {
        Status::Working | Status::Clarification | Status::Stuck => Some(Role::Worker),
        Status::AgentReview => Some(Role::Reviewer),
        _ => None,
    }
}

/// `task respawn`: ask for a new session for a task whose session is dead.
pub fn request_respawn(task: &Task, ctx: &Ctx<'_>) -> Result<Change, Refusal> {
    let id = task.id().to_string();
    if let Some(s) = task.live_session() {
        return Err(Refusal::Respawn {
            id,
            why: format!(
                "has a live session {s}; wait for it to end or report it with `warden task exited`"
            ),
        });
    }
    if !task.work_is_agent() {
        return Err(Refusal::Respawn {
            id,
            why: "has no agent work, so there is no session to respawn; run it again with `warden task retry` when it is stuck".into(),
        });
    }
    if task.status() == Status::Pending {
        // `task spawn` said "no agent session to respawn" of a task that simply has not
        // started: say when it will.
        return Err(Refusal::Respawn {
            id,
            why: "is pending: `warden run` starts its first session as soon as it is ready, with no dependency left unfinished (a spawn or respawn asks for another session of a task that is working, in clarification, stuck or in agent-review)".into(),
        });
    }
    if role_for(task.status()).is_none() {
        return Err(Refusal::Respawn {
            id,
            why: format!(
                "is {}, which has no agent session to respawn",
                task.status()
            ),
        });
    }
    // One request stands until a session starts: a second adds nothing but an event
    // (five clicks on the console's button made five).
    if task.respawn_requested() {
        return Err(Refusal::Respawn {
            id,
            why: "has a respawn requested already; the running supervisor (or the next `warden run`) starts its session".into(),
        });
    }
    Change::build(
        Some(task),
        task.id(),
        vec![EventKind::RespawnRequested],
        ctx,
        Outcome::Applied,
    )
}

/// A phase the supervisor runs changed status.
pub fn phase(
    task: &Task,
    phase: Phase,
    status: PhaseStatus,
    detail: Option<String>,
    ctx: &Ctx<'_>,
) -> Result<Change, Refusal> {
    ensure_active(task)?;
    Change::build(
        Some(task),
        task.id(),
        vec![EventKind::PhaseChanged {
            phase,
            status,
            detail,
        }],
        ctx,
        Outcome::Applied,
    )
}

/// A phase the supervisor ran failed and the task has no heal left: an attempt is
/// charged; at `max_attempts` the task becomes stuck.
pub fn attempt_failed(
    task: &Task,
    phase: Phase,
    reason: &str,
    ctx: &Ctx<'_>,
) -> Result<Change, Refusal> {
    ensure_active(task)?;
    if task.status() != Status::Working {
        return Err(Refusal::NotWorking {
            id: task.id().to_string(),
            status: task.status(),
        });
    }
    let mut kinds = vec![
        EventKind::PhaseChanged {
            phase,
            status: PhaseStatus::Failed,
            detail: Some(reason.to_owned()),
        },
        EventKind::AttemptFailed {
            phase,
            reason: reason.to_owned(),
        },
    ];
    let stuck = task.attempts() + 1 >= task.spec.max_attempts;
    if stuck && task.status() != Status::Stuck {
        kinds.push(stuck_kind(task.status(), REASON_MAX_ATTEMPTS, true));
    }
    Change::build(
        Some(task),
        task.id(),
        kinds,
        ctx,
        Outcome::GuardFailed {
            tail: reason.to_owned(),
            stuck,
        },
    )
}

/// Uses the one automatic heal of a phase, if it is still available.
pub fn auto_heal(task: &Task, phase: Phase, ctx: &Ctx<'_>) -> Result<Option<Change>, Refusal> {
    ensure_active(task)?;
    if task.auto_heal().contains(&phase) {
        return Ok(None);
    }
    Change::build(
        Some(task),
        task.id(),
        vec![EventKind::AutoHealed { phase }],
        ctx,
        Outcome::Applied,
    )
    .map(Some)
}

/// Records events that change no runner field (tamper notes, memory merges).
pub fn record(task: &Task, kinds: Vec<EventKind>, ctx: &Ctx<'_>) -> Result<Change, Refusal> {
    Change::build(Some(task), task.id(), kinds, ctx, Outcome::Applied)
}

/// The harness of Warden's session `session` named its conversation: recorded once, so
/// the next session of that role resumes it. `None` (nothing to write) when the session
/// is not one of Warden's or already has this conversation.
pub fn conversation(
    task: &Task,
    session: &str,
    conversation: &str,
    ctx: &Ctx<'_>,
) -> Result<Option<Change>, Refusal> {
    let known = task.sessions().iter().find(|s| s.id == session);
    match known {
        Some(s) if s.conversation.as_deref() != Some(conversation) => record(
            task,
            vec![EventKind::AgentConversation {
                session: session.to_owned(),
                conversation: conversation.to_owned(),
            }],
            ctx,
        )
        .map(Some),
        _ => Ok(None),
    }
}

#[cfg(test)]
#[path = "ops_tests.rs"]
mod tests;
