//! `plan apply`: seed 000's reconcile of an agent-edited tree. Runner-owned fields are
//! restored from the store, the selected node gets the transition table, parents' passes
//! are derived bottom-up and children sorted; the runner's lifecycle decisions follow.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::model::{
    AgentPreset, Limits, Status, TaskId, TaskSpec, WorkSpec, WorkflowKind, named_enum, same_bytes,
};
use crate::tree::validate::{NONE, validate_resolved};
use crate::tree::{Forest, PARALLEL_NODES, PlanError, PlanNode, StoredTask, derive_in_place};

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

// `apply_state_updates` maps the file's nodes into the output with
// `into_iter().map().collect()`, which writes each output node over the file node it was
// made from only when it is no bigger: at 100k nodes a fresh output would cost 27 MB of
// page faults, and the writes would miss every cache.
const _: () = assert!(
    std::mem::size_of::<ReconciledNode>() <= std::mem::size_of::<PlanNode>()
        && std::mem::align_of::<ReconciledNode>() == std::mem::align_of::<PlanNode>()
);

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
    /// Nodes of the store whose `passes` or `attempts` after the apply differ from the
    /// stored ones (the selected node, parents whose derived `passes` changed), sorted:
    /// with `edited`, `tamper_ignored` and `lifecycle`, everything a stored node's events
    /// come from, so a caller reads no other stored node.
    pub runner_changed: Vec<TaskId>,
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
    /// See [`TreeUpdate::created`].
    pub created: Vec<TaskId>,
    /// See [`TreeUpdate::removed`].
    pub removed: Vec<TaskId>,
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
            created: self.created.clone(),
            removed: self.removed.clone(),
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
    /// A node whose session runs is missing from the file: removing it would leave the
    /// session working on a task nobody can see, stop or merge.
    #[error(
        "task {id} has a live session ({session}) and cannot be removed; cancel it first (warden task cancel {id}), or put it back in the plan"
    )]
    LiveRemoved {
        /// The task.
        id: TaskId,
        /// Its live session.
        session: String,
    },
    /// A node the file removes is a dependency of one it keeps (its dependencies are
    /// the store's, restored whatever the file says): the kept one would wait for ever.
    #[error(
        "task {id} depends on {dependency}, which the plan removes; put {dependency} back in the plan (a plan apply keeps {id}'s dependencies as stored)"
    )]
    DependencyRemoved {
        /// The kept task.
        id: TaskId,
        /// The removed task it depends on.
        dependency: TaskId,
    },
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
    /// `done` or `retry` on a group: a group's `passes` and status come from its tasks
    /// (seed 000's derived passes), so the table's change would be undone or mean
    /// nothing (attempts of a group are never spent).
    #[error(
        "selected task {id} is a group: its status and passes come from the tasks in it ({}); select one of them, or use --status decomposed to add tasks under it",
        Joined(.children)
    )]
    SelectedGroup {
        /// The selected task.
        id: TaskId,
        /// Its stored children (the first few).
        children: Vec<TaskId>,
    },
    /// A new or moved node under a cancelled task: nothing under a cancelled task ever
    /// starts, so it could never be done (as `task create`, `task edit` and `plan
    /// import` refuse).
    #[error(
        "task {id} cannot go under {parent}: {}, and nothing under a cancelled task runs; give it another parent",
        Which(.parent, .cancelled)
    )]
    UnderCancelled {
        /// The task placed.
        id: TaskId,
        /// Its parent in the file.
        parent: TaskId,
        /// The cancelled task at or above that parent.
        cancelled: TaskId,
    },
    /// A task moved under a leaf that is under way, waiting, stuck or done (not the
    /// selected task, whose decomposition is how a task under way gains children): the
    /// leaf would become a group whose status comes from its children while its own
    /// session ran on unseen and its branch was never merged (as `task create`, `task
    /// edit` and `plan import` refuse).
    #[error("{}", BusyLeaf(.id, .parent, *.status))]
    UnderBusyLeaf {
        /// The task placed.
        id: TaskId,
        /// The leaf it was placed under.
        parent: TaskId,
        /// That leaf's status.
        status: Status,
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

impl From<ApplyError> for crate::failure::Failure {
    /// A missing guard outcome is a usage error (exit 2); every other problem is a
    /// refusal (exit 1).
    fn from(e: ApplyError) -> Self {
        match e {
            ApplyError::MissingGuard => crate::failure::Failure::usage(e.to_string()),
            _ => crate::failure::Failure::refused(e.to_string()),
        }
    }
}

struct Joined<'a, T>(&'a [T]);

/// "p is cancelled", or "c, which holds p, is cancelled".
struct Which<'a>(&'a TaskId, &'a TaskId);

impl fmt::Display for Which<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Which(parent, cancelled) = *self;
        if parent == cancelled {
            write!(f, "{parent} is cancelled")
        } else {
            write!(f, "{cancelled}, which holds {parent}, is cancelled")
        }
    }
}

/// Why a task cannot go under a leaf in `status`: the one wording of `plan apply` and
/// of the placements `task create`, `task edit` and `plan import` refuse.
struct BusyLeaf<'a>(&'a TaskId, &'a TaskId, Status);

impl fmt::Display for BusyLeaf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let BusyLeaf(id, p, status) = *self;
        match status {
            Status::Done => write!(
                f,
                "task {id} cannot go under {p}: {p} is done, and a finished task takes no new work; give {id} another parent"
            ),
            Status::Stuck => write!(
                f,
                "task {id} cannot go under {p}: {p} is stuck, and a child would make it a group with its work never merged; give {id} another parent, or retry {p} (`warden task retry {p}`)"
            ),
            _ => write!(
                f,
                "task {id} cannot go under {p}: {p} is {status}, and a task under way cannot become a group (its session would run on unseen); give {id} another parent, or add it once {p} is done"
            ),
        }
    }
}

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
fn has_passed(t: &impl StoredTask) -> bool {
    t.passes() || t.status() == Status::Done
}

/// The fields an agent may edit in which two specs differ, other than `parent`. (Every
/// other user-owned field of a stored node is restored from the store.)
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
    f
}

/// Reconciles an agent-edited tree with the store (seed 000, DESIGN 2.3).
///
/// `prev` is every task of the store, in full ([`crate::model::Task`]) or as
/// [`crate::tree::StoredRows`] read it against `next` (the same result); `next` is the
/// whole edited plan file. Steps:
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
pub fn apply_state_updates<S: StoredTask>(
    prev: &[S],
    mut next: Vec<PlanNode>,
    selected: &TaskId,
    status: AgentStatus,
    guard: Option<GuardOutcome>,
    limits: &Limits,
) -> Result<TreeUpdate, ApplyError> {
    if status == AgentStatus::Done && guard.is_none() {
        return Err(ApplyError::MissingGuard);
    }
    // Every id of the file is hashed once, by validation; from here on nodes are
    // positions, and the file's nodes are moved into the result only at the end.
    let resolved = validate_resolved(&next, &[]).map_err(ApplyError::Invalid)?;
    let n = next.len();

    // Match the store's tasks to the file's nodes: one lookup per stored task, on two
    // threads for a big tree.
    let next_of = resolved
        .index
        .get_many_split(prev, |t| t.id().as_str(), PARALLEL_NODES);
    let mut prev_of = vec![NONE; n];
    for (pi, &j) in next_of.iter().enumerate() {
        if j != NONE {
            prev_of[j as usize] = pi as u32;
        }
    }
    // The selected node through the index; a scan of the stored tasks only to tell an
    // unknown id from a removed one.
    let sel = resolved.index.get(selected.as_str());
    let sel_prev = match sel.map(|j| prev_of[j as usize]) {
        Some(pi) if pi != NONE => Some(pi as usize),
        _ => prev.iter().position(|t| t.id() == selected),
    };
    let Some(sel_prev) = sel_prev else {
        return Err(ApplyError::UnknownSelected(selected.clone()));
    };
    let Some(sel) = sel else {
        return Err(ApplyError::SelectedRemoved(selected.clone()));
    };
    let sel = sel as usize;
    let sel_task = &prev[sel_prev];
    if sel_task.status().is_terminal() {
        return Err(ApplyError::SelectedClosed {
            id: selected.clone(),
            status: sel_task.status(),
        });
    }
    let forest = Forest::from_parents(&resolved.parent, |i| &next[i].id, |i| next[i].order);
    drop(resolved);
    let pre = forest.preorder();

    // Step 1: the user-owned spec comes from the file, the person-owned fields of a
    // stored node and its runner fields from the store. Runner state stays indexed by
    // file position for steps 2 to 4.
    //
    // The file's nodes are put in depth-first order in place (a file `plan export` wrote
    // already is), then mapped into the output by `into_iter().map().collect()`, which
    // reuses the file's allocation: at 100k nodes a fresh output would cost thousands
    // of page faults.
    let mut pos = vec![0u32; n];
    for (k, &i) in pre.iter().enumerate() {
        pos[i] = k as u32;
    }
    permute(&mut next, &pre);
    // The comparisons with the stored tasks (over both cores for a big tree) read the
    // file's nodes at random: done first, so the pass that moves the nodes into the
    // output reads only memory in order.
    let (matches, found) = match_all(&next, &pos, &next_of, prev);
    let MatchOut {
        notes: mut tamper,
        mut edited,
        settled,
        mut untitled,
    } = found;
    let mut state: Vec<(Status, bool, u32)> = vec![(Status::Pending, false, 0); n];
    // Each node's `max_attempts` as the output will have it, by file position.
    let mut max_of = vec![0u32; n];
    let mut created = Vec::new();
    let mut new_children = Vec::new();
    let mut stray: Option<TaskId> = None;
    // A kept node's runner state from its match; a new node is read here (the kept ones
    // were read by the comparisons), so that the pass that moves the nodes into the
    // output below only moves fields, which the compiler does field by field instead of
    // through a copy of each whole node on the stack (whose reads stalled on the copy's
    // stores: 40 % of a reconcile at 1k).
    for (i, &pi) in prev_of.iter().enumerate() {
        if pi != NONE {
            let m = matched(&matches, pi);
            state[i] = m.state;
            max_of[i] = m.max_attempts;
            continue;
        }
        let k = pos[i] as usize;
        let node = &next[k];
        // New nodes: only children of the selected node (checked below).
        if node.parent.as_ref() == Some(selected) {
            new_children.push(node.id.clone());
        } else if stray.as_ref().is_none_or(|s| &node.id < s) {
            stray = Some(node.id.clone());
        }
        created.push(node.id.clone());
        max_of[i] = node.max_attempts.unwrap_or(limits.max_attempts);
        let claims = (node.passes, node.attempts, node.status);
        note_tamper(&mut tamper, &node.id, claims, state[i]);
        if node.title.is_none() {
            untitled.push(k);
        }
    }
    // New nodes: only children of the selected node, and only when it decomposed.
    if let Some(id) = stray {
        return Err(ApplyError::NewNodeOutside {
            id,
            selected: selected.clone(),
        });
    }
    new_children.sort();
    // Done and retry on a group (a node with children in the store, kept under it by the
    // file) would change what its children decide.
    if matches!(status, AgentStatus::Done | AgentStatus::Retry) {
        let stored_children: Vec<TaskId> = forest
            .children(sel)
            .iter()
            .filter(|&&c| match prev_of[c as usize] {
                NONE => false,
                pi => prev[pi as usize]
                    .spec()
                    .is_none_or(|s| s.parent.as_ref() == Some(selected)),
            })
            .take(5)
            .map(|&c| next[pos[c as usize] as usize].id.clone())
            .collect();
        if !stored_children.is_empty() {
            return Err(ApplyError::SelectedGroup {
                id: selected.clone(),
                children: stored_children,
            });
        }
    }
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

    // The file's nodes into the output. Nothing here can fail or panic (a panic would
    // need the node kept in memory to drop it), so each field goes straight from the
    // file's node to the output's; the runner fields and `new` are filled in at the end.
    let mut nodes: Vec<ReconciledNode> = next
        .into_iter()
        .map(|node| ReconciledNode {
            spec: node.into_spec_untitled(limits),
            status: Status::Pending,
            passes: false,
            attempts: 0,
            new: false,
        })
        .collect();
    for k in untitled {
        let spec = &mut nodes[k].spec;
        spec.title = spec.id.as_str().to_owned();
    }
    let at = |i: usize| &nodes[pos[i] as usize];

    // Passed nodes are settled: they may not be removed, moved or changed. The matched
    // ones were found by the comparisons (which read every matched task anyway); only
    // the removed tasks are read here.
    let passed = settled
        .into_iter()
        .chain((0..prev.len()).filter(|&pi| next_of[pi] == NONE && has_passed(&prev[pi])));
    let mut refusal: Option<(&TaskId, ApplyError)> = None;
    for (pi, t) in passed.map(|pi| (pi, &prev[pi])) {
        if refusal.as_ref().is_some_and(|(id, _)| *id < t.id()) {
            continue;
        }
        let err = match (next_of[pi], t.spec()) {
            (NONE, _) => Some(ApplyError::PassedRemoved(t.id().clone())),
            (j, Some(spec)) if at(j as usize).spec.parent != spec.parent => {
                Some(ApplyError::PassedMoved {
                    id: t.id().clone(),
                    from: spec.parent.clone(),
                    to: at(j as usize).spec.parent.clone(),
                })
            }
            (j, spec) => {
                // A task stored with the spec its node gives changed nothing.
                let mut fields =
                    spec.map_or(Vec::new(), |s| changed_fields(s, &at(j as usize).spec));
                if pi == sel_prev && !new_children.is_empty() {
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
    // Nothing new or moved under a cancelled task: parents come before children in
    // `pre`, so each node knows the nearest cancelled task above it.
    let mut cancelled_above: Vec<u32> = vec![NONE; n];
    for &i in &pre {
        let here = if state[i].0 == Status::Cancelled {
            i as u32
        } else {
            cancelled_above[i]
        };
        for &c in forest.children(i) {
            cancelled_above[c as usize] = here;
        }
    }
    let placed_under_cancelled = (0..n)
        .filter(|&i| cancelled_above[i] != NONE && !state[i].0.is_terminal())
        .filter(|&i| match prev_of[i] {
            NONE => true,
            pi => prev[pi as usize]
                .spec()
                .is_some_and(|s| s.parent != at(i).spec.parent),
        })
        .min_by(|&a, &b| at(a).spec.id.cmp(&at(b).spec.id));
    if let Some(i) = placed_under_cancelled {
        let node = &at(i).spec;
        return Err(ApplyError::UnderCancelled {
            id: node.id.clone(),
            parent: node.parent.clone().unwrap_or_else(|| node.id.clone()),
            cancelled: at(cancelled_above[i] as usize).spec.id.clone(),
        });
    }
    // Nothing moved under a leaf that is not pending but the selected task (which may
    // decompose): only a file that moves a task pays for the look at every parent.
    let moved: Vec<usize> = (0..n)
        .filter(|&i| match prev_of[i] {
            NONE => false,
            pi => prev[pi as usize]
                .spec()
                .is_some_and(|s| s.parent != at(i).spec.parent),
        })
        .collect();
    if !moved.is_empty() {
        let mut parent_of = vec![NONE; n];
        for i in 0..n {
            for &c in forest.children(i) {
                parent_of[c as usize] = i as u32;
            }
        }
        // The stored parents (a row left undecoded is unchanged: the file's parent).
        let stored_parents: std::collections::HashSet<&TaskId> = prev
            .iter()
            .zip(&next_of)
            .filter_map(|(t, &j)| match t.spec() {
                Some(s) => s.parent.as_ref(),
                None if j != NONE => at(j as usize).spec.parent.as_ref(),
                None => None,
            })
            .collect();
        let busy = moved
            .iter()
            .filter(|&&i| parent_of[i] != NONE)
            .map(|&i| (i, parent_of[i] as usize))
            .filter(|&(_, p)| {
                p != sel
                    && prev_of[p] != NONE
                    && !matches!(state[p].0, Status::Pending | Status::Cancelled)
                    && !stored_parents.contains(&at(p).spec.id)
            })
            .min_by(|a, b| at(a.0).spec.id.cmp(&at(b.0).spec.id));
        if let Some((i, p)) = busy {
            return Err(ApplyError::UnderBusyLeaf {
                id: at(i).spec.id.clone(),
                parent: at(p).spec.id.clone(),
                status: state[p].0,
            });
        }
    }
    let mut removed: Vec<TaskId> = prev
        .iter()
        .zip(&next_of)
        .filter(|(_, j)| **j == NONE)
        .map(|(t, _)| t.id().clone())
        .collect();
    // A removed task whose session runs would leave that session working on a task
    // nobody can see, stop or merge (and its runner holding a lease on nothing).
    if let Some((t, session)) = prev
        .iter()
        .zip(&next_of)
        .filter(|(_, j)| **j == NONE)
        .find_map(|(t, _)| t.live_session().map(|s| (t, s)))
    {
        return Err(ApplyError::LiveRemoved {
            id: t.id().clone(),
            session: session.to_owned(),
        });
    }

    // The stored runner fields, to list the nodes whose fields the apply changes.
    let stored: Vec<(bool, u32)> = state.iter().map(|s| (s.1, s.2)).collect();

    // Step 2: seed 000's transition table on the selected node.
    let mut passes_set = Vec::new();
    let mut attempts_incremented = Vec::new();
    let max_attempts = |i: usize| max_of[i];
    {
        let sel_max = max_attempts(sel);
        let (_, passes, attempts) = &mut state[sel];
        // The seed's table; "if < max" is the saturation that defines stuck.
        match (status, guard) {
            (AgentStatus::Done, Some(GuardOutcome::Pass)) if !*passes => {
                *passes = true;
                passes_set.push(selected.clone());
            }
            (AgentStatus::Done, Some(GuardOutcome::Fail)) | (AgentStatus::Retry, _)
                if *attempts < sel_max =>
            {
                *attempts += 1;
                attempts_incremented.push(selected.clone());
            }
            _ => {}
        }
    }

    // Step 3: the runner's lifecycle decisions, exempt from the transition map.
    let mut lifecycle = Vec::new();
    let mut step = |i: usize, st: &mut Status, to: Status| {
        lifecycle.push((at(i).spec.id.clone(), *st, to));
        *st = to;
    };
    if forest.is_leaf(sel) {
        let (st, passes, _) = &mut state[sel];
        if *st == Status::Pending {
            step(sel, st, Status::Working);
        }
        if *passes && !st.is_terminal() {
            step(sel, st, Status::Done);
        }
    }
    for (i, (st, passes, attempts)) in state.iter_mut().enumerate() {
        let saturated = !*passes && *attempts >= max_attempts(i);
        if saturated
            && forest.is_leaf(i)
            && !matches!(st, Status::Stuck | Status::Done | Status::Cancelled)
        {
            step(i, st, Status::Stuck);
        }
    }

    // Step 4: parents' passes, bottom-up.
    let mut passes: Vec<bool> = state.iter().map(|s| s.1).collect();
    let became = derive_in_place(&forest, &pre, |i| state[i].0, &mut passes);
    let mut derived_passes_set: Vec<TaskId> =
        became.iter().map(|&i| at(i).spec.id.clone()).collect();

    // The decided runner fields into the (depth-first) output, and a stored node's
    // person-owned fields restored from the store.
    let mut runner_changed = Vec::new();
    for (node, &i) in nodes.iter_mut().zip(&pre) {
        let pi = prev_of[i];
        node.new = pi == NONE;
        if pi != NONE {
            let (m, spec) = (matched(&matches, pi), &mut node.spec);
            // Only a node with something to copy back reads its stored task again (the
            // comparisons read every one already, at random).
            if m.copy_back
                && let Some(truth) = prev[pi as usize].spec()
            {
                // Not in the flat plan shape, so not editable through it: kept.
                spec.evidence.clone_from(&truth.evidence);
                spec.origin.clone_from(&truth.origin);
                if m.deps_differ {
                    spec.depends_on = truth.depends_on.clone();
                }
                if m.spec_differ {
                    spec.spec = truth.spec.clone();
                }
            }
            spec.max_attempts = m.max_attempts;
            spec.workflow = m.workflow;
            // A person's choice, like the workflow: restored (and noted).
            spec.preset = m.preset;
        }
        let (status, _, attempts) = state[i];
        node.status = status;
        node.passes = passes[i];
        node.attempts = attempts;
        if !node.new && (passes[i], attempts) != stored[i] {
            runner_changed.push(node.spec.id.clone());
        }
    }
    runner_changed.sort();
    // A group's passes are its tasks' (step 4), as every view shows them, `plan export`
    // too: a file stating that value claims nothing of its own.
    if tamper.iter().any(|n| n.field == "passes") {
        let groups: std::collections::HashMap<&TaskId, bool> = nodes
            .iter()
            .zip(&pre)
            .filter(|&(_, &i)| !forest.is_leaf(i))
            .map(|(n, &i)| (&n.spec.id, passes[i]))
            .collect();
        tamper.retain(|n| {
            n.field != "passes"
                || groups
                    .get(&n.id)
                    .is_none_or(|p| p.to_string() != n.agent_value)
        });
    }

    removed.sort();
    // What the file removes must not be waited for by what it keeps (a kept task's
    // dependencies are the store's, whatever the file says).
    if !removed.is_empty()
        && let Some((id, dependency)) = nodes
            .iter()
            .flat_map(|n| n.spec.depends_on.iter().map(move |d| (&n.spec.id, d)))
            .filter(|(_, d)| removed.binary_search(d).is_ok())
            .min()
    {
        return Err(ApplyError::DependencyRemoved {
            id: id.clone(),
            dependency: dependency.clone(),
        });
    }
    created.sort();
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
        runner_changed,
        tamper_ignored: tamper,
        lifecycle,
    })
}

/// The match of the stored task at `pi`, which the file kept.
fn matched(matches: &[Option<Matched>], pi: u32) -> Matched {
    matches[pi as usize].expect("every stored task the file kept was compared")
}

/// Reorders `v` in place so that `v[k]` becomes the old `v[order[k]]`: each cycle of the
/// permutation is followed with swaps, so nothing is allocated but a bitmap. `order` must
/// be a permutation of `0..v.len()`.
fn permute<T>(v: &mut [T], order: &[usize]) {
    if order.iter().enumerate().all(|(k, &i)| k == i) {
        return;
    }
    let mut done = vec![false; v.len()];
    for k in 0..v.len() {
        let mut cur = k;
        while !done[cur] {
            done[cur] = true;
            let src = order[cur];
            if src == k {
                break;
            }
            v.swap(cur, src);
            cur = src;
        }
    }
}

/// What step 1 takes from a file node's stored task, decided before the file's nodes
/// are moved into the output (see [`match_all`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Matched {
    /// The stored status, passes and attempts.
    pub(super) state: (Status, bool, u32),
    pub(super) max_attempts: u32,
    pub(super) workflow: WorkflowKind,
    pub(super) preset: Option<AgentPreset>,
    /// The stored dependencies differ from the file's (and are copied back).
    pub(super) deps_differ: bool,
    /// The stored specs differ from what the file's node would give (and are copied back).
    pub(super) spec_differ: bool,
    /// Something is copied back from the stored task: differing dependencies or specs,
    /// or its evidence or origin (which the flat plan shape does not carry).
    pub(super) copy_back: bool,
}

/// What the comparisons found besides each stored task's [`Matched`]: everything step 1
/// learns of a kept node, so no later pass reads the kept nodes (at 100k nodes each such
/// pass reads 27 MB). Each list is in no particular order (the caller sorts).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct MatchOut {
    /// Values of person- and runner-owned fields the file stated differently.
    pub(super) notes: Vec<TamperNote>,
    /// Kept nodes whose parent, title, body or order changed.
    pub(super) edited: Vec<TaskId>,
    /// The stored positions of kept tasks that have passed.
    pub(super) settled: Vec<usize>,
    /// The output positions of kept nodes without a title.
    pub(super) untitled: Vec<usize>,
}

impl MatchOut {
    fn extend(&mut self, other: MatchOut) {
        self.notes.extend(other.notes);
        self.edited.extend(other.edited);
        self.settled.extend(other.settled);
        self.untitled.extend(other.untitled);
    }
}

/// Compares every stored task that the file kept with its node: `None` for a task the
/// file dropped, by stored position, and what else the comparisons found. The stored
/// tasks are read in their order (each one's strings lie near it), the file's nodes
/// (already in output order, at `pos` of their file position) at random.
pub(super) fn match_all<S: StoredTask>(
    next: &[PlanNode],
    pos: &[u32],
    next_of: &[u32],
    prev: &[S],
) -> (Vec<Option<Matched>>, MatchOut) {
    let n = prev.len();
    let mut out = vec![None; n];
    let found = if n < PARALLEL_NODES {
        match_range(next, pos, next_of, prev, 0, &mut out)
    } else {
        let half = n / 2;
        let (first, second) = out.split_at_mut(half);
        std::thread::scope(|scope| {
            let later = scope.spawn(|| match_range(next, pos, next_of, prev, half, second));
            let mut found = match_range(next, pos, next_of, prev, 0, first);
            match later.join() {
                Ok(more) => found.extend(more),
                Err(panic) => std::panic::resume_unwind(panic),
            }
            found
        })
    };
    (out, found)
}

/// [`match_all`] for the stored positions `from..from + out.len()`.
pub(super) fn match_range<S: StoredTask>(
    next: &[PlanNode],
    pos: &[u32],
    next_of: &[u32],
    prev: &[S],
    from: usize,
    out: &mut [Option<Matched>],
) -> MatchOut {
    let mut found = MatchOut::default();
    let notes = &mut found.notes;
    for (pi, slot) in (from..).zip(out.iter_mut()) {
        let j = next_of[pi];
        if j == NONE {
            continue;
        }
        let k = pos[j as usize] as usize;
        let (node, t) = (&next[k], &prev[pi]);
        let state = (t.status(), t.passes(), t.attempts());
        // Step 1's runner fields are the stored ones: each the file stated differently
        // is noted.
        note_tamper(
            notes,
            &node.id,
            (node.passes, node.attempts, node.status),
            state,
        );
        if has_passed(t) {
            found.settled.push(pi);
        }
        if node.title.is_none() {
            found.untitled.push(k);
        }
        let Some(truth) = t.spec() else {
            // Stored with exactly the spec this node gives (see `StoredRows`): nothing
            // differs, nothing is copied back, and the node is not edited.
            let (max_attempts, workflow, preset) = t.person_fields();
            *slot = Some(Matched {
                state,
                max_attempts,
                workflow,
                preset,
                deps_differ: false,
                spec_differ: false,
                copy_back: false,
            });
            continue;
        };
        // Each field is compared once, for both the spec `PlanNode::into_spec` would
        // build and the notes of what the file stated differently.
        let deps_same = node.depends_on == truth.depends_on;
        // `work` wins over `agent` (as in `PlanNode::into_spec`); a node that states no
        // work gets none (a difference), but states nothing to note.
        let (work_same, work_stated) = match (&node.work, &node.agent, &truth.spec.work) {
            (Some(w), _, t) => (Some(w) == t.as_ref(), true),
            (None, Some(a), Some(WorkSpec::Agent(t))) => (a == t, true),
            (None, Some(_), _) => (false, true),
            (None, None, t) => (t.is_none(), false),
        };
        let pre_same = node.prechecks == truth.spec.prechecks;
        let post_same = node.postchecks == truth.spec.postchecks;
        let max_differs = node.max_attempts.filter(|m| *m != truth.max_attempts);
        let workflow_differs = node.workflow.filter(|w| *w != truth.workflow);
        let preset_differs = node.preset.filter(|p| Some(*p) != truth.preset);
        if !(deps_same || node.depends_on.is_empty())
            || (work_stated && !work_same)
            || (node.prechecks.is_some() && !pre_same)
            || (node.postchecks.is_some() && !post_same)
            || max_differs.is_some()
            || workflow_differs.is_some()
            || preset_differs.is_some()
        {
            // Agents may edit only `title`, `body`, `order` and `parent` of an existing
            // node through the tree protocol (DESIGN 2, the field table): dependencies,
            // specs, `max_attempts` and the workflow are a person's, restored from the
            // store. Each value the file states that differs is noted.
            let mut note = |field: &'static str, agent_value: String, true_value: String| {
                notes.push(TamperNote {
                    id: node.id.clone(),
                    field,
                    agent_value,
                    true_value,
                });
            };
            // As a plan file states them: a shell command as its text, the other
            // forms as their JSON, nothing as "(none)".
            let ids = |v: &[TaskId]| match v {
                [] => "(none)".to_owned(),
                v => v.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(","),
            };
            let spec_str = |w: &Option<WorkSpec>| match w {
                None => "(none)".to_owned(),
                Some(WorkSpec::Shell(s)) => s.clone(),
                Some(other) => serde_json::to_string(other).unwrap_or_default(),
            };
            if !(deps_same || node.depends_on.is_empty()) {
                note("depends_on", ids(&node.depends_on), ids(&truth.depends_on));
            }
            if work_stated && !work_same {
                note(
                    "work",
                    spec_str(&node.work_spec()),
                    spec_str(&truth.spec.work),
                );
            }
            if node.prechecks.is_some() && !pre_same {
                let (a, t) = (spec_str(&node.prechecks), spec_str(&truth.spec.prechecks));
                note("prechecks", a, t);
            }
            if node.postchecks.is_some() && !post_same {
                let (a, t) = (spec_str(&node.postchecks), spec_str(&truth.spec.postchecks));
                note("postchecks", a, t);
            }
            if let Some(m) = max_differs {
                note(
                    "max_attempts",
                    m.to_string(),
                    truth.max_attempts.to_string(),
                );
            }
            if let Some(w) = workflow_differs {
                note("workflow", w.to_string(), truth.workflow.to_string());
            }
            if let Some(p) = preset_differs {
                let stored = truth
                    .preset
                    .map_or("(default)".to_owned(), |t| t.to_string());
                note("preset", p.to_string(), stored);
            }
        }
        let spec_same = work_same && pre_same && post_same;
        // Cheapest first: most nodes keep their order and parent.
        let edited = node.order != truth.order
            || node.parent != truth.parent
            || !same_bytes(node.spec_title().as_bytes(), truth.title.as_bytes())
            || !same_bytes(node.spec_body().as_bytes(), truth.body.as_bytes());
        // The same answers as comparing the spec `into_spec` builds (checked in tests).
        debug_assert!({
            let spec = node.to_spec(&Limits::default());
            spec_same == (spec.spec == truth.spec)
                && edited
                    == (spec.parent != truth.parent || !changed_fields(&spec, truth).is_empty())
        });
        if edited {
            found.edited.push(node.id.clone());
        }
        *slot = Some(Matched {
            state,
            max_attempts: truth.max_attempts,
            workflow: truth.workflow,
            preset: truth.preset,
            deps_differ: !deps_same,
            spec_differ: !spec_same,
            copy_back: !deps_same
                || !spec_same
                || truth.evidence.is_some()
                || truth.origin.is_some(),
        });
    }
    found
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
