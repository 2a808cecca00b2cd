//! Validation of a plan file before it reaches the store: every problem is reported at
//! once (duplicates, bad references, parent and dependency cycles, conflicting specs),
//! each with a one-line message that says what to fix.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::model::TaskId;
use crate::tree::PlanNode;

/// One problem in a plan file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The same id appears more than once.
    #[error("task id {id} appears {count} times in the plan; give each task a unique id")]
    DuplicateId {
        /// The repeated id.
        id: TaskId,
        /// How many times it appears.
        count: usize,
    },
    /// A task names itself as its parent.
    #[error("task {0} names itself as its parent; remove the parent or name another task")]
    SelfParent(TaskId),
    /// The parent is neither in the file nor an existing task.
    #[error("task {id} has unknown parent {parent}; add a task {parent} or fix the parent")]
    UnknownParent {
        /// The task.
        id: TaskId,
        /// The missing parent.
        parent: TaskId,
    },
    /// A dependency is neither in the file nor an existing task.
    #[error(
        "task {id} depends on unknown task {dependency}; add a task {dependency} or remove it from depends_on"
    )]
    UnknownDependency {
        /// The task.
        id: TaskId,
        /// The missing dependency.
        dependency: TaskId,
    },
    /// Parents form a cycle (path starts and ends with the same id).
    #[error("parents form a cycle {}; change one of these parents", Path(.0))]
    ParentCycle(Vec<TaskId>),
    /// Dependencies form a cycle (path starts and ends with the same id).
    #[error("dependencies form a cycle {}; remove one of these depends_on entries", Path(.0))]
    DependencyCycle(Vec<TaskId>),
    /// Both `work` and `agent` are set.
    #[error("task {0} sets both work and agent; keep only one of them")]
    WorkAndAgent(TaskId),
    /// `max_attempts` is 0, so the task could never be tried.
    #[error("task {0} has max_attempts 0; use 1 or more, or leave it out for the default")]
    ZeroMaxAttempts(TaskId),
}

/// Renders a cycle as `a → b → a`.
struct Path<'a>(&'a [TaskId]);

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, id) in self.0.iter().enumerate() {
            if k > 0 {
                f.write_str(" → ")?;
            }
            write!(f, "{id}")?;
        }
        Ok(())
    }
}

/// Checks a plan: ids unique; parents and dependencies name a task of the file or one of
/// `existing`; no task is its own parent; no parent cycle; no dependency cycle; not both
/// `work` and `agent`; `max_attempts` ≥ 1. Reports every problem, in a deterministic
/// order (by kind, then by id), whatever the order of `nodes`.
pub fn validate_plan(nodes: &[PlanNode], existing: &[TaskId]) -> Result<(), Vec<PlanError>> {
    // Sorting once by id makes every report independent of the file's order.
    let mut sorted: Vec<usize> = (0..nodes.len()).collect();
    sorted.sort_by(|&a, &b| nodes[a].id.cmp(&nodes[b].id));

    let mut errors = Vec::new();
    let mut index: HashMap<&TaskId, usize> = HashMap::with_capacity(nodes.len());
    let mut k = 0;
    while k < sorted.len() {
        let id = &nodes[sorted[k]].id;
        let mut j = k + 1;
        while j < sorted.len() && &nodes[sorted[j]].id == id {
            j += 1;
        }
        if j - k > 1 {
            errors.push(PlanError::DuplicateId {
                id: id.clone(),
                count: j - k,
            });
        }
        // The first in file order stands for the id in the graph checks below.
        let first = sorted[k..j].iter().copied().min().unwrap_or(sorted[k]);
        index.insert(id, first);
        k = j;
    }
    let existing: HashSet<&TaskId> = existing.iter().collect();
    let known = |id: &TaskId| index.contains_key(id) || existing.contains(id);

    for &i in &sorted {
        let n = &nodes[i];
        match &n.parent {
            Some(p) if p == &n.id => errors.push(PlanError::SelfParent(n.id.clone())),
            Some(p) if !known(p) => errors.push(PlanError::UnknownParent {
                id: n.id.clone(),
                parent: p.clone(),
            }),
            _ => {}
        }
    }
    for &i in &sorted {
        let n = &nodes[i];
        for d in &n.depends_on {
            if !known(d) {
                errors.push(PlanError::UnknownDependency {
                    id: n.id.clone(),
                    dependency: d.clone(),
                });
            }
        }
    }

    // Graph checks over the file's nodes only: existing tasks cannot point back into it.
    let graph_nodes: Vec<usize> = {
        let mut v: Vec<usize> = index.values().copied().collect();
        v.sort_by(|&a, &b| nodes[a].id.cmp(&nodes[b].id));
        v
    };
    let parent_edges = |i: usize| -> Vec<usize> {
        match nodes[i].parent.as_ref().and_then(|p| index.get(p)) {
            Some(&p) if nodes[p].id != nodes[i].id => vec![p],
            _ => Vec::new(),
        }
    };
    for cycle in find_cycles(nodes.len(), &graph_nodes, parent_edges) {
        errors.push(PlanError::ParentCycle(path_ids(nodes, &cycle)));
    }
    let dep_edges = |i: usize| -> Vec<usize> {
        nodes[i]
            .depends_on
            .iter()
            .filter_map(|d| index.get(d).copied())
            .collect()
    };
    for cycle in find_cycles(nodes.len(), &graph_nodes, dep_edges) {
        errors.push(PlanError::DependencyCycle(path_ids(nodes, &cycle)));
    }

    for &i in &sorted {
        let n = &nodes[i];
        if n.work.is_some() && n.agent.is_some() {
            errors.push(PlanError::WorkAndAgent(n.id.clone()));
        }
    }
    for &i in &sorted {
        let n = &nodes[i];
        if n.max_attempts == Some(0) {
            errors.push(PlanError::ZeroMaxAttempts(n.id.clone()));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn path_ids(nodes: &[PlanNode], cycle: &[usize]) -> Vec<TaskId> {
    cycle.iter().map(|&i| nodes[i].id.clone()).collect()
}

/// Finds cycles in a directed graph over `members` in O(V + E), one per walk: first
/// peel away nodes with no out-edge to a remaining node (they are on no cycle), so every
/// remaining node has an out-edge that stays among the remaining; then, from each
/// unvisited remaining node (in `members` order), follow the first such edge until the
/// walk meets itself (a new cycle, reported as `a → … → a`) or an earlier walk (a cycle
/// already reported). Distinct cycles that share nodes are reported once.
fn find_cycles(
    n: usize,
    members: &[usize],
    edges: impl Fn(usize) -> Vec<usize>,
) -> Vec<Vec<usize>> {
    let out: Vec<Vec<usize>> = {
        let mut out = vec![Vec::new(); n];
        for &i in members {
            out[i] = edges(i);
        }
        out
    };
    let mut reverse: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut out_degree = vec![0usize; n];
    for &i in members {
        out_degree[i] = out[i].len();
        for &j in &out[i] {
            reverse[j].push(i);
        }
    }
    let mut removed = vec![false; n];
    let mut queue: Vec<usize> = members
        .iter()
        .copied()
        .filter(|&i| out_degree[i] == 0)
        .collect();
    while let Some(i) = queue.pop() {
        if removed[i] {
            continue;
        }
        removed[i] = true;
        for &p in &reverse[i] {
            out_degree[p] -= 1;
            if out_degree[p] == 0 && !removed[p] {
                queue.push(p);
            }
        }
    }

    // 0: unvisited, 1: on the current walk, 2: visited by an earlier walk.
    let mut mark = vec![0u8; n];
    let mut cycles = Vec::new();
    for &start in members {
        if removed[start] || mark[start] != 0 {
            continue;
        }
        let mut walk = Vec::new();
        let mut at = start;
        loop {
            if mark[at] == 2 {
                break;
            }
            if mark[at] == 1 {
                let from = walk.iter().position(|&w| w == at).unwrap_or(0);
                let mut cycle = walk[from..].to_vec();
                cycle.push(at);
                cycles.push(cycle);
                break;
            }
            mark[at] = 1;
            walk.push(at);
            // Every remaining node keeps an out-edge to a remaining node.
            match out[at].iter().copied().find(|&j| !removed[j]) {
                Some(j) => at = j,
                None => break,
            }
        }
        for w in walk {
            mark[w] = 2;
        }
    }
    cycles
}
