//! Project progress (seed 002, DESIGN 2.6): leaves are the countable plans, top-level
//! tasks are phases; from them come the percentage, the 20-cell bar, the progress status
//! of the project and of each phase, and each task's derived gate status.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::{Phase, PhaseStatus, Status, Task, TaskId};

/// `floor(complete / total * 100)`, 0 when `total` is 0, never above 100.
pub fn percentage(complete: usize, total: usize) -> u32 {
    if total == 0 {
        return 0;
    }
    // u128 cannot overflow for any usize count.
    let pct = (complete.min(total) as u128 * 100) / total as u128;
    pct as u32
}

/// The progress bar: `'#' * floor(pct / 5) + '░' * (20 - that)`; `pct` above 100 counts
/// as 100.
pub fn bar(pct: u32) -> String {
    let filled = (pct.min(100) / 5) as usize;
    format!("{}{}", "#".repeat(filled), "░".repeat(20 - filled))
}

/// The status of the project or of one phase, over its leaves (DESIGN 2.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ProgressStatus {
    /// No countable leaves.
    #[serde(rename = "Ready to plan")]
    ReadyToPlan,
    /// Leaves exist, none started.
    #[serde(rename = "Planning")]
    Planning,
    /// A leaf is being worked on (or some are done and others are not).
    #[serde(rename = "In progress")]
    InProgress,
    /// Nothing is being worked on; some leaves are under review.
    #[serde(rename = "Verifying")]
    Verifying,
    /// Every countable leaf passes.
    #[serde(rename = "Complete")]
    Complete,
}

impl ProgressStatus {
    /// Every value, in declaration order.
    pub const ALL: &'static [ProgressStatus] = &[
        ProgressStatus::ReadyToPlan,
        ProgressStatus::Planning,
        ProgressStatus::InProgress,
        ProgressStatus::Verifying,
        ProgressStatus::Complete,
    ];

    /// The name as STATE.md, JSON and error messages show it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProgressStatus::ReadyToPlan => "Ready to plan",
            ProgressStatus::Planning => "Planning",
            ProgressStatus::InProgress => "In progress",
            ProgressStatus::Verifying => "Verifying",
            ProgressStatus::Complete => "Complete",
        }
    }

    /// Parses a name as [`Self::as_str`] writes it.
    pub fn parse(s: &str) -> Option<ProgressStatus> {
        ProgressStatus::ALL
            .iter()
            .copied()
            .find(|v| v.as_str() == s)
    }
}

impl fmt::Display for ProgressStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A task's derived gate status (seed 002, "Gate Status Values").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GateStatus {
    /// The worker is running.
    #[serde(rename = "EXECUTING")]
    Executing,
    /// The postchecks (the guard) are running.
    #[serde(rename = "VERIFYING")]
    Verifying,
    /// An agent or a person is reviewing.
    #[serde(rename = "REVIEWING")]
    Reviewing,
    /// Accepted.
    #[serde(rename = "APPROVED")]
    Approved,
    /// Needs a person: attempts exhausted, reviews failed, or crashes.
    #[serde(rename = "FAILED")]
    Failed,
    /// Cannot proceed: waiting for a dependency or for a person's answer.
    #[serde(rename = "BLOCKED")]
    Blocked,
    /// Cancelled.
    #[serde(rename = "SKIPPED")]
    Skipped,
}

impl GateStatus {
    /// Every value, in declaration order.
    pub const ALL: &'static [GateStatus] = &[
        GateStatus::Executing,
        GateStatus::Verifying,
        GateStatus::Reviewing,
        GateStatus::Approved,
        GateStatus::Failed,
        GateStatus::Blocked,
        GateStatus::Skipped,
    ];

    /// The name as STATE.md, JSON and error messages show it.
    pub fn as_str(self) -> &'static str {
        match self {
            GateStatus::Executing => "EXECUTING",
            GateStatus::Verifying => "VERIFYING",
            GateStatus::Reviewing => "REVIEWING",
            GateStatus::Approved => "APPROVED",
            GateStatus::Failed => "FAILED",
            GateStatus::Blocked => "BLOCKED",
            GateStatus::Skipped => "SKIPPED",
        }
    }

    /// Parses a name as [`Self::as_str`] writes it.
    pub fn parse(s: &str) -> Option<GateStatus> {
        GateStatus::ALL.iter().copied().find(|v| v.as_str() == s)
    }
}

impl fmt::Display for GateStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The progress status over a set of leaves. Cancelled leaves are set aside: a set with
/// only cancelled leaves is `Ready to plan`, like an empty one.
///
/// DESIGN 2.6 leaves one case open: leaves started and stopped (some done or stuck, the
/// rest pending, none active). Seed 002 keeps the status "In progress" after a success
/// or a failure until the phase is complete, so that case is `In progress` too.
pub fn progress_status<'a>(leaves: impl IntoIterator<Item = &'a Task>) -> ProgressStatus {
    status_of(leaves.into_iter().map(|t| (t.status(), t.passes())))
}

/// [`progress_status`] over each leaf's `(status, passes)`: what STATE.md's stored
/// rendering keeps of a leaf.
pub fn status_of(leaves: impl IntoIterator<Item = (Status, bool)>) -> ProgressStatus {
    let counted: Vec<(Status, bool)> = leaves
        .into_iter()
        .filter(|(s, _)| *s != Status::Cancelled)
        .collect();
    let any = |f: &dyn Fn(Status) -> bool| counted.iter().any(|(s, _)| f(*s));
    if counted.is_empty() {
        ProgressStatus::ReadyToPlan
    } else if counted.iter().all(|(_, passes)| *passes) {
        ProgressStatus::Complete
    } else if any(&|s| matches!(s, Status::Working | Status::Clarification)) {
        ProgressStatus::InProgress
    } else if any(&|s| matches!(s, Status::AgentReview | Status::Reviewing)) {
        ProgressStatus::Verifying
    } else if counted
        .iter()
        .all(|(s, passes)| *s == Status::Pending && !passes)
    {
        ProgressStatus::Planning
    } else {
        ProgressStatus::InProgress
    }
}

/// The gate status of a task; `None` for a pending task that is ready to start.
/// `deps_done` says whether every task in `depends_on` is `done`.
pub fn gate_status(task: &Task, deps_done: bool) -> Option<GateStatus> {
    Some(match task.status() {
        Status::Working if task.phases().get(Phase::Postchecks) == PhaseStatus::Running => {
            GateStatus::Verifying
        }
        Status::Working => GateStatus::Executing,
        Status::Clarification => GateStatus::Blocked,
        Status::AgentReview | Status::Reviewing => GateStatus::Reviewing,
        Status::Done => GateStatus::Approved,
        Status::Stuck => GateStatus::Failed,
        Status::Cancelled => GateStatus::Skipped,
        Status::Pending if !deps_done => GateStatus::Blocked,
        Status::Pending => return None,
    })
}

/// Counts over a set of leaves: `complete` passing and `total` countable (cancelled
/// leaves count neither as open nor as passed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Leaves that pass.
    pub complete: usize,
    /// Leaves that are not cancelled.
    pub total: usize,
    /// The progress status.
    pub status: ProgressStatus,
}

impl Progress {
    /// Computes the counts and the status of a set of leaves.
    pub fn of<'a>(leaves: impl Iterator<Item = &'a Task> + Clone) -> Progress {
        Progress::of_pairs(leaves.map(|t| (t.status(), t.passes())))
    }

    /// [`Progress::of`] over each leaf's `(status, passes)`.
    pub fn of_pairs(leaves: impl Iterator<Item = (Status, bool)> + Clone) -> Progress {
        let (mut complete, mut total) = (0, 0);
        for (_, passes) in leaves.clone().filter(|(s, _)| *s != Status::Cancelled) {
            total += 1;
            if passes {
                complete += 1;
            }
        }
        Progress {
            complete,
            total,
            status: status_of(leaves),
        }
    }

    /// `floor(complete / total * 100)`.
    pub fn percentage(&self) -> u32 {
        percentage(self.complete, self.total)
    }

    /// The 20-cell bar for [`Progress::percentage`].
    pub fn bar(&self) -> String {
        bar(self.percentage())
    }
}

/// A phase (a top-level task) and its leaves in tree order.
#[derive(Clone, Debug)]
pub struct PhaseView<'a> {
    /// The top-level task.
    pub phase: &'a Task,
    /// Its leaves, depth first in `(order, id)` order; a top-level leaf is its own only
    /// leaf.
    pub leaves: Vec<&'a Task>,
}

/// A read-only view of a set of tasks as a tree, in `(order, id)` order at every level.
/// A task whose parent is not in the set counts as top-level. Tasks on a parent cycle
/// (which the store never produces) are unreachable from any root and left out.
#[derive(Clone, Debug)]
pub struct TreeView<'a> {
    by_id: HashMap<&'a TaskId, &'a Task>,
    phases: Vec<PhaseView<'a>>,
}

impl<'a> TreeView<'a> {
    /// Builds the view; the input order does not matter.
    pub fn new(tasks: &'a [Task]) -> TreeView<'a> {
        // Hashed, not ordered: every lookup below is by id, and each list of children is
        // sorted, so the order the tasks are met in does not show (at 10,000 tasks the
        // ordered maps' string comparisons were half of a STATE.md render).
        let by_id: HashMap<&TaskId, &Task> = tasks.iter().map(|t| (t.id(), t)).collect();
        let mut children: HashMap<Option<&TaskId>, Vec<&Task>> = HashMap::new();
        for t in by_id.values() {
            let parent = t.spec.parent.as_ref().filter(|p| by_id.contains_key(p));
            children.entry(parent).or_default().push(t);
        }
        for list in children.values_mut() {
            list.sort_by(|a, b| (a.spec.order, a.id()).cmp(&(b.spec.order, b.id())));
        }
        let mut visited = HashSet::with_capacity(tasks.len());
        let roots = children.get(&None).cloned().unwrap_or_default();
        let phases = roots
            .into_iter()
            .map(|phase| {
                let mut leaves = Vec::new();
                collect_leaves(phase, &children, &mut visited, &mut leaves);
                PhaseView { phase, leaves }
            })
            .collect();
        TreeView { by_id, phases }
    }

    /// The phases, in order.
    pub fn phases(&self) -> &[PhaseView<'a>] {
        &self.phases
    }

    /// Every leaf, phase by phase, in tree order.
    pub fn leaves(&self) -> impl Iterator<Item = &'a Task> + Clone + '_ {
        self.phases.iter().flat_map(|p| p.leaves.iter().copied())
    }

    /// A task by id.
    pub fn get(&self, id: &TaskId) -> Option<&'a Task> {
        self.by_id.get(id).copied()
    }

    /// The dependencies of `task` with their status (`None` when the dependency does not
    /// exist), in the order the task lists them.
    pub fn dependencies<'t>(&self, task: &'t Task) -> Vec<(&'t TaskId, Option<Status>)> {
        task.spec
            .depends_on
            .iter()
            .map(|dep| (dep, self.by_id.get(dep).map(|t| t.status())))
            .collect()
    }

    /// The dependencies of `task` that are not `done`, with their status (`None` when the
    /// dependency does not exist), in the order the task lists them.
    pub fn open_dependencies<'t>(&self, task: &'t Task) -> Vec<(&'t TaskId, Option<Status>)> {
        let mut deps = self.dependencies(task);
        deps.retain(|(_, s)| *s != Some(Status::Done));
        deps
    }

    /// The gate status of `task`, with its dependencies looked up in this view.
    pub fn gate_status(&self, task: &Task) -> Option<GateStatus> {
        gate_status(task, self.open_dependencies(task).is_empty())
    }
}

fn collect_leaves<'a>(
    task: &'a Task,
    children: &HashMap<Option<&'a TaskId>, Vec<&'a Task>>,
    visited: &mut HashSet<&'a TaskId>,
    out: &mut Vec<&'a Task>,
) {
    if !visited.insert(task.id()) {
        return;
    }
    match children.get(&Some(task.id())) {
        Some(kids) if !kids.is_empty() => {
            for k in kids {
                collect_leaves(k, children, visited, out);
            }
        }
        _ => out.push(task),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{RunnerState, TaskSpec, WorkflowKind};
    use jiff::Timestamp;

    /// A task for tests: `status`, passing when done.
    pub(crate) fn task(id: &str, parent: Option<&str>, status: Status) -> Task {
        let mut spec = TaskSpec::new(TaskId::new(id).unwrap(), WorkflowKind::Review, 3);
        spec.parent = parent.map(|p| TaskId::new(p).unwrap());
        Task {
            spec,
            runner: RunnerState::new(status, status == Status::Done, 0, Timestamp::UNIX_EPOCH),
        }
    }

    fn leaves(statuses: &[Status]) -> Vec<Task> {
        statuses
            .iter()
            .enumerate()
            .map(|(i, s)| task(&format!("t{i}"), None, *s))
            .collect()
    }

    fn check_bar(complete: usize, total: usize, pct: u32, expected: &str) {
        assert_eq!(percentage(complete, total), pct, "{complete}/{total}");
        assert_eq!(bar(pct), expected, "{complete}/{total}");
    }

    #[test]
    fn names_round_trip() {
        for v in ProgressStatus::ALL {
            assert_eq!(ProgressStatus::parse(v.as_str()), Some(*v));
            assert_eq!(v.to_string(), v.as_str());
            assert_eq!(
                serde_json::to_string(v).unwrap(),
                format!("{:?}", v.as_str())
            );
            assert_eq!(
                serde_json::from_str::<ProgressStatus>(&format!("{:?}", v.as_str())).unwrap(),
                *v
            );
        }
        for v in GateStatus::ALL {
            assert_eq!(GateStatus::parse(v.as_str()), Some(*v));
            assert_eq!(v.to_string(), v.as_str());
            assert_eq!(
                serde_json::to_string(v).unwrap(),
                format!("{:?}", v.as_str())
            );
            assert_eq!(
                serde_json::from_str::<GateStatus>(&format!("{:?}", v.as_str())).unwrap(),
                *v
            );
        }
    }

    #[test]
    fn progress_bar() {
        check_bar(0, 3, 0, "░░░░░░░░░░░░░░░░░░░░");
        check_bar(1, 3, 33, "######░░░░░░░░░░░░░░");
        check_bar(2, 3, 66, "#############░░░░░░░");
        check_bar(3, 3, 100, "####################");
        check_bar(0, 0, 0, "░░░░░░░░░░░░░░░░░░░░");
        check_bar(1, 20, 5, "#░░░░░░░░░░░░░░░░░░░");
        check_bar(19, 20, 95, "###################░");
        check_bar(199, 200, 99, "###################░");
        check_bar(5, 3, 100, "####################");
        assert_eq!(bar(250), "####################");
    }

    fn check_status(statuses: &[Status], expected: ProgressStatus) {
        let tasks = leaves(statuses);
        assert_eq!(progress_status(&tasks), expected, "{statuses:?}");
        assert_eq!(expected.to_string(), expected.as_str());
    }

    #[test]
    fn progress_statuses() {
        use Status::*;
        check_status(&[], ProgressStatus::ReadyToPlan);
        check_status(&[Cancelled], ProgressStatus::ReadyToPlan);
        check_status(&[Pending, Pending], ProgressStatus::Planning);
        check_status(&[Pending, Cancelled], ProgressStatus::Planning);
        check_status(&[Working, Pending], ProgressStatus::InProgress);
        check_status(&[Clarification, AgentReview], ProgressStatus::InProgress);
        check_status(&[Working, Reviewing], ProgressStatus::InProgress);
        check_status(&[AgentReview, Pending], ProgressStatus::Verifying);
        check_status(&[Reviewing, Done], ProgressStatus::Verifying);
        check_status(&[Done, Pending], ProgressStatus::InProgress);
        check_status(&[Stuck, Pending], ProgressStatus::InProgress);
        check_status(&[Stuck, Done], ProgressStatus::InProgress);
        check_status(&[Done], ProgressStatus::Complete);
        check_status(&[Done, Cancelled, Done], ProgressStatus::Complete);
        assert_eq!(ProgressStatus::ReadyToPlan.to_string(), "Ready to plan");
    }

    fn check_gate(
        status: Status,
        deps_done: bool,
        postchecks_running: bool,
        expected: Option<&str>,
    ) {
        let mut t = task("t", None, status);
        if postchecks_running {
            t.runner.phases.set(Phase::Postchecks, PhaseStatus::Running);
        }
        let got = gate_status(&t, deps_done).map(GateStatus::as_str);
        assert_eq!(got, expected, "{status} deps_done={deps_done}");
    }

    #[test]
    fn gate_statuses() {
        use Status::*;
        check_gate(Working, true, false, Some("EXECUTING"));
        check_gate(Working, true, true, Some("VERIFYING"));
        check_gate(Clarification, true, false, Some("BLOCKED"));
        check_gate(AgentReview, true, false, Some("REVIEWING"));
        check_gate(Reviewing, true, false, Some("REVIEWING"));
        check_gate(Done, true, false, Some("APPROVED"));
        check_gate(Stuck, true, false, Some("FAILED"));
        check_gate(Cancelled, true, false, Some("SKIPPED"));
        check_gate(Pending, false, false, Some("BLOCKED"));
        check_gate(Pending, true, false, None);
        // Dependencies matter only while pending.
        check_gate(Working, false, false, Some("EXECUTING"));
    }

    #[test]
    fn tree_view_orders_phases_and_leaves() {
        let mut tasks = vec![
            task("b", None, Status::Pending),
            task("a", None, Status::Pending),
            task("a.2", Some("a"), Status::Pending),
            task("a.1", Some("a"), Status::Pending),
            task("a.1.x", Some("a.1"), Status::Done),
            task("orphan", Some("gone"), Status::Pending),
        ];
        tasks[0].spec.order = -1;
        let view = TreeView::new(&tasks);
        let phases: Vec<(&str, Vec<&str>)> = view
            .phases()
            .iter()
            .map(|p| {
                (
                    p.phase.id().as_str(),
                    p.leaves.iter().map(|l| l.id().as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            phases,
            [
                ("b", vec!["b"]),
                ("a", vec!["a.1.x", "a.2"]),
                ("orphan", vec!["orphan"])
            ]
        );
        let p = Progress::of(view.phases()[1].leaves.iter().copied());
        assert_eq!((p.complete, p.total, p.percentage()), (1, 2, 50));
    }

    #[test]
    fn open_dependencies_name_status_and_missing() {
        let mut tasks = vec![
            task("a", None, Status::Done),
            task("b", None, Status::Stuck),
            task("c", None, Status::Pending),
        ];
        tasks[2].spec.depends_on = ["a", "b", "zz"].map(|d| TaskId::new(d).unwrap()).to_vec();
        let view = TreeView::new(&tasks);
        let open: Vec<(&str, Option<Status>)> = view
            .open_dependencies(&tasks[2])
            .into_iter()
            .map(|(id, s)| (id.as_str(), s))
            .collect();
        assert_eq!(open, [("b", Some(Status::Stuck)), ("zz", None)]);
        assert_eq!(view.gate_status(&tasks[2]), Some(GateStatus::Blocked));
        assert_eq!(view.gate_status(&tasks[1]), Some(GateStatus::Failed));
    }
}
