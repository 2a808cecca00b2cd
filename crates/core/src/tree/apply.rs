//! `plan apply`: seed 000's reconcile of an agent-edited tree. Runner-owned fields are
//! restored from the store, the selected node gets the transition table, parents' passes
//! are derived bottom-up and children sorted; the runner's lifecycle decisions follow.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::model::{Limits, Status, Task, TaskId, TaskSpec, named_enum};
use crate::tree::{Forest, IdMap, PlanError, PlanNode, derive_in_place, validate_plan};

named_enum!(
    /// What the agent says about the selected node (seed 000).
    AgentStatus, "agent status" {
        /// The work is finished; the guard decides whether it passes.
        Done = "done",
        /// The attempt failed; try again.
        Retry = "retry",
        /// The node was split into new children.
        Decomposed = "decomposed",
    }
);

named_enum!(
    /// The result of the guard (the postchecks) for a `done` claim (seed 000).
    GuardOutcome, "guard outcome" {
        /// The checks passed.
        Pass = "pass",
        /// The checks failed.
        Fail = "fail",
        /// There were no checks to run.
        Skipped = "skipped",
    }
);

/// An agent's value of a runner-owned field that was ignored and replaced.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct TamperNote {
    /// The task.
    pub id: TaskId,
    /// `passes`, `attempts` or `status`.
    pub field: &'static str,
    /// What the agent wrote.
    pub agent_value: String,
    /// What the runner kept.
    pub true_value: String,
}

/// One node of the reconciled tree: the user-owned spec from the file plus the runner
/// fields the runner decided.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReconciledNode {
    /// User-owned fields, with defaults filled in.
    pub spec: TaskSpec,
    /// Lifecycle status after the runner's decisions.
    pub status: Status,
    /// Accepted (leaf) or derived (parent).
    pub passes: bool,
    /// Failed attempts, never above `max_attempts` through this function.
    pub attempts: u32,
    /// The node was added by this apply.
    pub new: bool,
}

/// The result of a successful apply: the whole new tree and what changed. Every id list
/// is sorted; `nodes` is in depth-first `(order, id)` order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TreeUpdate {
    /// The tree after the apply.
    pub nodes: Vec<ReconciledNode>,
    /// Nodes added (new children of the selected node).
    pub created: Vec<TaskId>,
    /// Nodes of the store that the file no longer has (none of them had passed).
    pub removed: Vec<TaskId>,
    /// Existing nodes whose user-owned fields changed.
    pub edited: Vec<TaskId>,
    /// Nodes whose `passes` the transition set to `true` (the selected node, at most).
    pub passes_set: Vec<TaskId>,
    /// Parents whose derived `passes` went from `false` to `true`.
    pub derived_passes_set: Vec<TaskId>,
    /// Nodes whose `attempts` went up by one.
    pub attempts_incremented: Vec<TaskId>,
    /// Agent values of runner-owned fields that were ignored, sorted by id then field.
    pub tamper_ignored: Vec<TamperNote>,
    /// The runner's lifecycle decisions `(id, from, to)`, by id; one task may take two
    /// steps (`pending → working`, then `working → done`), listed in the order taken.
    pub lifecycle: Vec<(TaskId, Status, Status)>,
}

/// The `--json` output of `plan apply` (DESIGN 2.3): ids, sorted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ApplySummary {
    /// See [`TreeUpdate::passes_set`].
    pub passes_set: Vec<TaskId>,
    /// See [`TreeUpdate::derived_passes_set`].
    pub derived_passes_set: Vec<TaskId>,
    /// See [`TreeUpdate::attempts_incremented`].
    pub attempts_incremented: Vec<TaskId>,
    /// The ids of tasks with at least one ignored runner-owned value.
    pub tamper_ignored: Vec<TaskId>,
}

impl TreeUpdate {
    /// The summary printed by `plan apply --json`.
    pub fn summary(&self) -> ApplySummary {
        let mut tamper: Vec<TaskId> = self.tamper_ignored.iter().map(|t| t.id.clone()).collect();
        tamper.dedup();
        ApplySummary {
            passes_set: self.passes_set.clone(),
            derived_passes_set: self.derived_passes_set.clone(),
            attempts_incremented: self.attempts_incremented.clone(),
            tamper_ignored: tamper,
        }
    }
}

/// Why an apply was refused. Nothing is changed by a refused apply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// `--status done` came without a guard outcome: a usage error (exit 2).
    #[error(
        "--status done needs --guard pass|fail|skipped; run the task's postchecks and pass their outcome"
    )]
    MissingGuard,
    /// The file itself is invalid; every problem is listed.
    #[error("the plan file is invalid: {}", Joined(.0))]
    Invalid(Vec<PlanError>),
    /// The selected id is not a task of the store.
    #[error("selected task {0} does not exist; pass the id of an existing task with --selected")]
    UnknownSelected(TaskId),
    /// The file dropped the selected node.
    #[error("the plan no longer contains the selected task {0}; keep it in the file")]
    SelectedRemoved(TaskId),
    /// The selected node is `done` or `cancelled`, which never change.
    #[error("selected task {id} is {status} and takes no more updates; select an open task")]
    SelectedClosed {
        /// The selected task.
        id: TaskId,
        /// Its terminal status.
        status: Status,
    },
    /// `decomposed` but the selected node got no new children.
    #[error(
        "--status decomposed needs new children under {0} in the plan; add them or use done/retry"
    )]
    DecomposedWithoutChildren(TaskId),
    /// `done` or `retry` with new children under the selected node.
    #[error("--status {status} cannot add children ({}) under {id}; use --status decomposed or remove them", Joined(.children))]
    UnexpectedChildren {
        /// The selected task.
        id: TaskId,
        /// The status given.
        status: AgentStatus,
        /// The new children.
        children: Vec<TaskId>,
    },
    /// A new node whose parent is not the selected node.
    #[error(
        "new task {id} is not a child of the selected task {selected}; only the selected task may gain new children"
    )]
    NewNodeOutside {
        /// The new node.
        id: TaskId,
        /// The selected task.
        selected: TaskId,
    },
    /// A node that has passed is missing from the file.
    #[error("task {0} has passed and cannot be removed; put it back in the plan")]
    PassedRemoved(TaskId),
    /// A node that has passed has a different parent.
    #[error("task {id} has passed and cannot move (parent {} → {}); restore its parent", Opt(.from), Opt(.to))]
    PassedMoved {
        /// The task.
        id: TaskId,
        /// The parent in the store.
        from: Option<TaskId>,
        /// The parent in the file.
        to: Option<TaskId>,
    },
    /// A node that has passed has different user-owned fields (or new children).
    #[error("task {id} has passed and cannot change ({}); restore it as it was", .fields.join(", "))]
    PassedChanged {
        /// The task.
        id: TaskId,
        /// The fields that differ.
        fields: Vec<&'static str>,
    },
}

struct Joined<'a, T>(&'a [T]);

impl<T: fmt::Display> fmt::Display for Joined<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, x) in self.0.iter().enumerate() {
            if k > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{x}")?;
        }
        Ok(())
    }
}

struct Opt<'a>(&'a Option<TaskId>);

impl fmt::Display for Opt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(id) => write!(f, "{id}"),
            None => f.write_str("none"),
        }
    }
}

/// Has the task been accepted? `done` counts even if `passes` were somehow unset.
fn has_passed(t: &Task) -> bool {
    t.passes() || t.status() == Status::Done
}

/// The user-owned fields (other than `parent`) in which two specs differ.
fn changed_fields(a: &TaskSpec, b: &TaskSpec) -> Vec<&'static str> {
    let mut f = Vec::new();
    if a.title != b.title {
        f.push("title");
    }
    if a.body != b.body {
        f.push("body");
    }
    if a.order != b.order {
        f.push("order");
    }
    if a.depends_on != b.depends_on {
        f.push("depends_on");
    }
    if a.workflow != b.workflow {
        f.push("workflow");
    }
    if a.spec.work != b.spec.work {
        f.push("work");
    }
    if a.spec.prechecks != b.spec.prechecks {
        f.push("prechecks");
    }
    if a.spec.postchecks != b.spec.postchecks {
        f.push("postchecks");
    }
    if a.max_attempts != b.max_attempts {
        f.push("max_attempts");
    }
    f
}

/// Reconciles an agent-edited tree with the store (seed 000, DESIGN 2.3).
///
/// `prev` is every task of the store; `next` is the whole edited plan file. Steps:
/// 1. restore `passes`, `attempts` and `status` of existing nodes from `prev` (each
///    differing agent value becomes a [`TamperNote`]); new nodes get `passes = false`,
///    `attempts = 0`, `pending`;
/// 2. apply the table to the selected node: Done/Pass → `passes = true`; Done/Fail and
///    Retry → `attempts + 1` if below `max_attempts`; Done/Skipped and Decomposed →
///    unchanged;
/// 3. the runner's lifecycle decisions, for leaves: the selected `pending` leaf becomes
///    `working`; the selected leaf that passes becomes `done`; any leaf whose attempts
///    reached `max_attempts` without passing becomes `stuck`;
/// 4. derive parents' passes bottom-up (see [`crate::tree::derive_passes`]);
/// 5. order nodes depth-first by `(order, id)`.
///
/// Refusals change nothing: see [`ApplyError`]. Removing a node that has not passed is
/// allowed. The output depends only on the sets of tasks and nodes, not their order.
pub fn apply_state_updates(
    prev: &[Task],
    next: Vec<PlanNode>,
    selected: &TaskId,
    status: AgentStatus,
    guard: Option<GuardOutcome>,
    limits: &Limits,
) -> Result<TreeUpdate, ApplyError> {
    if status == AgentStatus::Done && guard.is_none() {
        return Err(ApplyError::MissingGuard);
    }
    validate_plan(&next, &[]).map_err(ApplyError::Invalid)?;
    let prev_by_id: IdMap<&TaskId, usize> =
        prev.iter().enumerate().map(|(i, t)| (t.id(), i)).collect();
    let Some(&sel_prev) = prev_by_id.get(selected) else {
        return Err(ApplyError::UnknownSelected(selected.clone()));
    };

    // Step 1: the user-owned spec comes from the file, runner fields from the store.
    let mut nodes = Vec::with_capacity(next.len());
    let mut tamper = Vec::new();
    let mut created = Vec::new();
    let mut edited = Vec::new();
    for node in next {
        let claims = (node.passes, node.attempts, node.status);
        let explicit = PersonFields {
            depends_on: !node.depends_on.is_empty(),
            work: node.work.is_some() || node.agent.is_some(),
            prechecks: node.prechecks.is_some(),
            postchecks: node.postchecks.is_some(),
            max_attempts: node.max_attempts.is_some(),
            workflow: node.workflow.is_some(),
        };
        let mut spec = node.into_spec(limits);
        let (status, passes, attempts, new) = match prev_by_id.get(&spec.id) {
            Some(&i) => {
                let t = &prev[i];
                restore_person_fields(&mut tamper, &mut spec, &t.spec, explicit);
                if spec != t.spec {
                    edited.push(spec.id.clone());
                }
                (t.status(), t.passes(), t.attempts(), false)
            }
            None => {
                created.push(spec.id.clone());
                (Status::Pending, false, 0, true)
            }
        };
        note_tamper(&mut tamper, &spec.id, claims, (status, passes, attempts));
        nodes.push(ReconciledNode {
            spec,
            status,
            passes,
            attempts,
            new,
        });
    }
    let by_id: IdMap<&TaskId, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (&n.spec.id, i))
        .collect();

    let Some(&sel) = by_id.get(selected) else {
        return Err(ApplyError::SelectedRemoved(selected.clone()));
    };
    let sel_task = &prev[sel_prev];
    if sel_task.status().is_terminal() {
        return Err(ApplyError::SelectedClosed {
            id: selected.clone(),
            status: sel_task.status(),
        });
    }

    // New nodes: only children of the selected node, and only when it decomposed.
    let mut new_children = Vec::new();
    let mut stray: Option<&TaskId> = None;
    for n in nodes.iter().filter(|n| n.new) {
        if n.spec.parent.as_ref() == Some(selected) {
            new_children.push(n.spec.id.clone());
        } else if stray.is_none_or(|s| &n.spec.id < s) {
            stray = Some(&n.spec.id);
        }
    }
    if let Some(id) = stray {
        return Err(ApplyError::NewNodeOutside {
            id: id.clone(),
            selected: selected.clone(),
        });
    }
    new_children.sort();
    match status {
        AgentStatus::Decomposed if new_children.is_empty() => {
            return Err(ApplyError::DecomposedWithoutChildren(selected.clone()));
        }
        AgentStatus::Done | AgentStatus::Retry if !new_children.is_empty() => {
            return Err(ApplyError::UnexpectedChildren {
                id: selected.clone(),
                status,
                children: new_children,
            });
        }
        _ => {}
    }

    // Passed nodes are settled: they may not be removed, moved or changed.
    let mut refusal: Option<(&TaskId, ApplyError)> = None;
    for t in prev.iter().filter(|t| has_passed(t)) {
        if refusal.as_ref().is_some_and(|(id, _)| *id < t.id()) {
            continue;
        }
        let err = match by_id.get(t.id()) {
            None => Some(ApplyError::PassedRemoved(t.id().clone())),
            Some(&j) if nodes[j].spec.parent != t.spec.parent => Some(ApplyError::PassedMoved {
                id: t.id().clone(),
                from: t.spec.parent.clone(),
                to: nodes[j].spec.parent.clone(),
            }),
            Some(&j) => {
                let mut fields = changed_fields(&t.spec, &nodes[j].spec);
                if t.id() == selected && !new_children.is_empty() {
                    fields.push("children");
                }
                (!fields.is_empty()).then(|| ApplyError::PassedChanged {
                    id: t.id().clone(),
                    fields,
                })
            }
        };
        if let Some(err) = err {
            refusal = Some((t.id(), err));
        }
    }
    if let Some((_, err)) = refusal {
        return Err(err);
    }
    let mut removed: Vec<TaskId> = prev
        .iter()
        .filter(|t| !by_id.contains_key(t.id()))
        .map(|t| t.id().clone())
        .collect();

    let forest = Forest::build(
        nodes.len(),
        &by_id,
        |i| &nodes[i].spec.id,
        |i| nodes[i].spec.parent.as_ref(),
        |i| nodes[i].spec.order,
    );
    drop(by_id);

    // Step 2: seed 000's transition table on the selected node.
    let mut passes_set = Vec::new();
    let mut attempts_incremented = Vec::new();
    {
        let n = &mut nodes[sel];
        // The seed's table; "if < max" is the saturation that defines stuck.
        match (status, guard) {
            (AgentStatus::Done, Some(GuardOutcome::Pass)) if !n.passes => {
                n.passes = true;
                passes_set.push(n.spec.id.clone());
            }
            (AgentStatus::Done, Some(GuardOutcome::Fail)) | (AgentStatus::Retry, _)
                if n.attempts < n.spec.max_attempts =>
            {
                n.attempts += 1;
                attempts_incremented.push(n.spec.id.clone());
            }
            _ => {}
        }
    }

    // Step 3: the runner's lifecycle decisions, exempt from the transition map.
    let mut lifecycle = Vec::new();
    let mut step = |n: &mut ReconciledNode, to: Status| {
        lifecycle.push((n.spec.id.clone(), n.status, to));
        n.status = to;
    };
    if forest.is_leaf(sel) {
        let n = &mut nodes[sel];
        if n.status == Status::Pending {
            step(n, Status::Working);
        }
        if n.passes && !n.status.is_terminal() {
            step(n, Status::Done);
        }
    }
    for (i, n) in nodes.iter_mut().enumerate() {
        let saturated = !n.passes && n.attempts >= n.spec.max_attempts;
        if saturated
            && forest.is_leaf(i)
            && !matches!(n.status, Status::Stuck | Status::Done | Status::Cancelled)
        {
            step(n, Status::Stuck);
        }
    }

    // Step 4: parents' passes, bottom-up.
    let pre = forest.preorder();
    let mut passes: Vec<bool> = nodes.iter().map(|n| n.passes).collect();
    let became = derive_in_place(&forest, &pre, |i| nodes[i].status, &mut passes);
    let mut derived_passes_set: Vec<TaskId> =
        became.iter().map(|&i| nodes[i].spec.id.clone()).collect();
    for (n, p) in nodes.iter_mut().zip(passes) {
        n.passes = p;
    }

    // Step 5: depth-first (order, id) output.
    let mut slots: Vec<Option<ReconciledNode>> = nodes.into_iter().map(Some).collect();
    let nodes: Vec<ReconciledNode> = pre.iter().filter_map(|&i| slots[i].take()).collect();

    created.sort();
    removed.sort();
    edited.sort();
    derived_passes_set.sort();
    tamper.sort();
    lifecycle.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(TreeUpdate {
        nodes,
        created,
        removed,
        edited,
        passes_set,
        derived_passes_set,
        attempts_incremented,
        tamper_ignored: tamper,
        lifecycle,
    })
}

/// Which person-owned fields the edited file states explicitly.
#[derive(Clone, Copy)]
struct PersonFields {
    depends_on: bool,
    work: bool,
    prechecks: bool,
    postchecks: bool,
    max_attempts: bool,
    workflow: bool,
}

/// Agents may edit only `title`, `body`, `order` and `parent` of an existing node through
/// the tree protocol (DESIGN 2, the field table): dependencies, specs, `max_attempts` and
/// the workflow are a person's. Restore them, noting each value the file stated.
fn restore_person_fields(
    out: &mut Vec<TamperNote>,
    spec: &mut TaskSpec,
    truth: &TaskSpec,
    explicit: PersonFields,
) {
    // Compare first and format only a difference: this runs for every node of the tree.
    let mut note = |field: &'static str, agent: String, true_value: String| {
        out.push(TamperNote {
            id: spec.id.clone(),
            field,
            agent_value: agent,
            true_value,
        });
    };
    let ids = |v: &[TaskId]| v.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(",");
    let spec_str = |w: &Option<crate::model::WorkSpec>| format!("{w:?}");
    if explicit.depends_on && spec.depends_on != truth.depends_on {
        note("depends_on", ids(&spec.depends_on), ids(&truth.depends_on));
    }
    if explicit.work && spec.spec.work != truth.spec.work {
        note(
            "work",
            spec_str(&spec.spec.work),
            spec_str(&truth.spec.work),
        );
    }
    if explicit.prechecks && spec.spec.prechecks != truth.spec.prechecks {
        let (a, t) = (
            spec_str(&spec.spec.prechecks),
            spec_str(&truth.spec.prechecks),
        );
        note("prechecks", a, t);
    }
    if explicit.postchecks && spec.spec.postchecks != truth.spec.postchecks {
        let (a, t) = (
            spec_str(&spec.spec.postchecks),
            spec_str(&truth.spec.postchecks),
        );
        note("postchecks", a, t);
    }
    if explicit.max_attempts && spec.max_attempts != truth.max_attempts {
        let (a, t) = (
            spec.max_attempts.to_string(),
            truth.max_attempts.to_string(),
        );
        note("max_attempts", a, t);
    }
    if explicit.workflow && spec.workflow != truth.workflow {
        let (a, t) = (spec.workflow.to_string(), truth.workflow.to_string());
        note("workflow", a, t);
    }
    if spec.depends_on != truth.depends_on {
        spec.depends_on = truth.depends_on.clone();
    }
    if spec.spec != truth.spec {
        spec.spec = truth.spec.clone();
    }
    spec.max_attempts = truth.max_attempts;
    spec.workflow = truth.workflow;
}

/// Records each agent value of a runner-owned field that differs from the runner's.
fn note_tamper(
    out: &mut Vec<TamperNote>,
    id: &TaskId,
    (c_passes, c_attempts, c_status): (Option<bool>, Option<u32>, Option<Status>),
    (status, passes, attempts): (Status, bool, u32),
) {
    let mut note = |field, agent_value: String, true_value: String| {
        out.push(TamperNote {
            id: id.clone(),
            field,
            agent_value,
            true_value,
        });
    };
    if let Some(v) = c_passes.filter(|v| *v != passes) {
        note("passes", v.to_string(), passes.to_string());
    }
    if let Some(v) = c_attempts.filter(|v| *v != attempts) {
        note("attempts", v.to_string(), attempts.to_string());
    }
    if let Some(v) = c_status.filter(|v| *v != status) {
        note("status", v.to_string(), status.to_string());
    }
}
