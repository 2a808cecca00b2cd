//! The typed results every front end formats: a task as `task show --json` prints it,
//! the answer to a write, an event as `history --json` prints it, a node of the tree.
//! Plain data with `Serialize`; the CLI prints them as text or JSON, MCP returns them as
//! tool results, the dashboards render them.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use warden_core::event::{Actor, Event, EventKind};
use warden_core::failure::Failure;
use warden_core::model::{Phase, Phases, Specs, Status, Task, TaskId, WorkflowKind};
use warden_core::progress::{self, GateStatus};
use warden_core::retry::RetryPlan;
use warden_core::tree::TreeIndex;

/// What the views of a list carry of each group's children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Children {
    /// Their ids in `(order, id)` order, as `task show` gives them (`--json`, MCP).
    Listed,
    /// None read, `children` left empty: for a table that shows no children. (At
    /// 100,000 tasks, `task list --status working` showed 300 groups of 100: reading
    /// their 30,000 ids was half of the command.)
    Omitted,
}

/// One task with everything DESIGN 4 promises for `task show --json`, plus the session
/// and failure details.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskView {
    /// The id.
    pub id: TaskId,
    /// The title.
    pub title: String,
    /// Instructions and context.
    pub body: String,
    /// The parent, if any.
    pub parent: Option<TaskId>,
    /// Sort key among siblings.
    pub order: i64,
    /// Children ids, in `(order, id)` order.
    pub children: Vec<TaskId>,
    /// Tasks that must be done first.
    pub depends_on: Vec<TaskId>,
    /// `review` or `direct`.
    pub workflow: WorkflowKind,
    /// Lifecycle status.
    pub status: Status,
    /// Accepted (leaf) or every child passes (group).
    pub passes: bool,
    /// Failed attempts.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Sessions that ended without their artifact since the last transition.
    pub crash_count: u32,
    /// Entries into agent-review.
    pub review_round: u32,
    /// The derived gate status (seed 002).
    pub gate: Option<GateStatus>,
    /// What holds a `BLOCKED` leaf back: the first dependency not done, its own and then
    /// its groups'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_by: Option<BlockedBy>,
    /// Every phase's status, in pipeline order.
    pub phases: Phases,
    /// Where the pipeline resumes after a retry.
    pub resume_from_phase: Option<Phase>,
    /// Phases whose one automatic heal was used.
    pub auto_heal: Vec<Phase>,
    /// Work, prechecks and postchecks.
    pub spec: Specs,
    /// The file whose content counts as the Handoff (a GSD plan's SUMMARY.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    /// What made the task when a tool did (`plan sync`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<warden_core::model::Origin>,
    /// The agent preset of its sessions when the task names its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<warden_core::model::AgentPreset>,
    /// The git branch.
    pub branch: String,
    /// The session believed alive.
    pub session: Option<String>,
    /// The last session ended without advancing the task.
    pub dead: bool,
    /// A new session is wanted (a person asked, or the last one never started).
    pub respawn_requested: bool,
    /// Why the task last failed or got stuck.
    pub last_failure: Option<String>,
    /// A person's reason for sending the work back, while the worker has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// Incremented by every write.
    pub version: u64,
    /// Creation time.
    pub created_at: Timestamp,
    /// Time of the last change.
    pub updated_at: Timestamp,
}

/// The dependency that holds a blocked task back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedBy {
    /// The dependency (the task's own, or one of its groups').
    pub task: TaskId,
    /// Its status as views show it (a group's derived); null when no such task exists.
    pub status: Option<Status>,
}

/// What a view of a task needs from the tasks around it: its children, its status and
/// `passes` as every view shows them (a group's derived), and whether its dependencies
/// are done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Around {
    /// Children ids, in `(order, id)` order (empty for a leaf, and when not listed).
    pub children: Vec<TaskId>,
    /// Is it a group (its children may be left unlisted)?
    pub group: bool,
    /// The status views show.
    pub status: Status,
    /// The `passes` views show.
    pub passes: bool,
    /// The first dependency not done (the task's own, then its ancestors'; a group is
    /// done when its children are) and its status; `None` when every one is done.
    pub unmet: Option<(TaskId, Option<Status>)>,
}

impl TaskView {
    /// The view of `t`, with children and dependency states from `idx`.
    pub fn of(t: &Task, idx: &TreeIndex<'_>) -> TaskView {
        TaskView::with(
            t,
            Around {
                children: idx
                    .children(t.id())
                    .iter()
                    .map(|c| c.id().clone())
                    .collect(),
                group: !idx.children(t.id()).is_empty(),
                status: idx.status(t),
                passes: idx.passes(t),
                unmet: idx.unmet(t).map(|(d, s)| (d.clone(), s)),
            },
        )
    }

    /// The view of `t`, given what surrounds it.
    pub fn with(t: &Task, around: Around) -> TaskView {
        let leaf = !around.group;
        let gate = if leaf {
            progress::gate_status(t, around.unmet.is_none())
        } else {
            group_gate(around.status)
        };
        let blocked_by = match (gate, around.unmet) {
            (Some(GateStatus::Blocked), Some((task, status))) => Some(BlockedBy { task, status }),
            _ => None,
        };
        TaskView {
            id: t.id().clone(),
            title: t.spec.title.clone(),
            body: t.spec.body.clone(),
            parent: t.spec.parent.clone(),
            order: t.spec.order,
            children: around.children,
            depends_on: t.spec.depends_on.clone(),
            workflow: t.spec.workflow,
            status: around.status,
            passes: around.passes,
            attempts: t.attempts(),
            max_attempts: t.spec.max_attempts,
            crash_count: t.crash_count(),
            review_round: t.review_round(),
            gate,
            blocked_by,
            phases: *t.phases(),
            resume_from_phase: t.resume_from_phase(),
            auto_heal: t.auto_heal().to_vec(),
            spec: t.spec.spec.clone(),
            evidence: t.spec.evidence.clone(),
            origin: t.spec.origin.as_deref().cloned(),
            preset: t.spec.preset,
            branch: t.branch(),
            session: t.live_session().map(str::to_owned),
            dead: t.is_dead(),
            respawn_requested: t.respawn_requested(),
            last_failure: t.last_failure().map(str::to_owned),
            feedback: t.feedback().map(str::to_owned),
            version: t.version(),
            created_at: t.created_at(),
            updated_at: t.updated_at(),
        }
    }
}

/// A group's gate, from its derived status.
fn group_gate(status: Status) -> Option<GateStatus> {
    match status {
        Status::Done => Some(GateStatus::Approved),
        Status::Stuck => Some(GateStatus::Failed),
        Status::Cancelled => Some(GateStatus::Skipped),
        Status::Pending => None,
        _ => Some(GateStatus::Executing),
    }
}

/// Which phases a retry runs again and which it keeps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryView {
    /// Phases that run again, in order.
    pub runs_again: Vec<Phase>,
    /// Earlier phases kept as they are.
    pub kept: Vec<Phase>,
}

impl From<&RetryPlan> for RetryView {
    fn from(p: &RetryPlan) -> Self {
        RetryView {
            runs_again: p.rerun.clone(),
            kept: p.kept.clone(),
        }
    }
}

/// How a session-end report was taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitView {
    /// `current`, `stale`, `duplicate`, or `unstarted` (a session the supervisor found
    /// never started).
    pub disposition: String,
    /// What followed, in words.
    pub action: String,
}

/// The answer to a write, as `--json` prints it and `--request-id` replays it: the task
/// after the write, and what the write meant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResponse {
    /// The task after the write.
    #[serde(flatten)]
    pub task: TaskView,
    /// A stored outcome that is a failure (a failed guard: the attempt is stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
    /// For a retry: the phases that run again and those kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryView>,
    /// For an exit report: how it was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitView>,
    /// For a group's cancel: the tasks inside it it cancelled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cancelled_inside: Vec<TaskId>,
}

/// One event as `history --json` prints it (DESIGN 4: `seq, at, task, type, from, to,
/// reason, actor`, plus the version and the event's own data).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventView {
    /// Position in the log.
    pub seq: u64,
    /// When.
    pub at: Timestamp,
    /// The task.
    pub task: TaskId,
    /// The wire name (`status.changed`, …).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Old status, for events that move it.
    pub from: Option<Status>,
    /// New status, for events that move it.
    pub to: Option<Status>,
    /// Why, in one line.
    pub reason: Option<String>,
    /// Who.
    pub actor: Actor,
    /// The task version the event's write produced.
    pub version: u64,
    /// The event itself.
    pub data: EventKind,
}

impl From<&Event> for EventView {
    fn from(e: &Event) -> Self {
        let (from, to) = e.kind.transition().unzip();
        EventView {
            seq: e.seq,
            at: e.at,
            task: e.task.clone(),
            kind: e.kind.type_name(),
            from,
            to,
            reason: e.kind.reason(),
            actor: e.actor,
            version: e.version,
            data: e.kind.clone(),
        }
    }
}

/// A node of `plan show`: the task with its children nested.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeView {
    /// The id.
    pub id: TaskId,
    /// The title.
    pub title: String,
    /// Status.
    pub status: Status,
    /// Passes.
    pub passes: bool,
    /// Attempts.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Dependencies.
    pub depends_on: Vec<TaskId>,
    /// Children, nested.
    pub children: Vec<NodeView>,
}
