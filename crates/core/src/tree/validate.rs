//! Validation of a plan file before it reaches the store: every problem is reported at
//! once (duplicates, bad references, parent and dependency cycles, conflicting specs),
//! each with a one-line message that says what to fix.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::model::TaskId;
use crate::tree::{IdMap, PlanNode};

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
    // One pass builds the index (the first in file order stands for a repeated id) and
    // counts repeats; each kind of problem is sorted by id at the end, so the report
    // does not depend on the file's order.
    let mut index: IdMap<&TaskId, usize> =
        IdMap::with_capacity_and_hasher(nodes.len(), Default::default());
    let mut repeats: HashMap<&TaskId, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if index.insert(&n.id, i).is_some() {
            *repeats.entry(&n.id).or_insert(1) += 1;
        }
    }
    for (id, _) in repeats.iter() {
        // Keep the first occurrence, not the last insert.
        if let Some(first) = nodes.iter().position(|n| &n.id == *id) {
            index.insert(id, first);
        }
    }
    let existing: HashSet<&TaskId> = existing.iter().collect();
    let known = |id: &TaskId| index.contains_key(id) || existing.contains(id);

    let mut duplicates: Vec<PlanError> = repeats
        .iter()
        .map(|(id, count)| PlanError::DuplicateId {
            id: (*id).clone(),
            count: *count,
        })
        .collect();
    let mut parents = Vec::new();
    let mut deps = Vec::new();
    let mut work_and_agent = Vec::new();
    let mut zero = Vec::new();
    for n in nodes {
        match &n.parent {
            Some(p) if p == &n.id => parents.push(PlanError::SelfParent(n.id.clone())),
            Some(p) if !known(p) => parents.push(PlanError::UnknownParent {
                id: n.id.clone(),
                parent: p.clone(),
            }),
            _ => {}
        }
        for d in &n.depends_on {
            if !known(d) {
                deps.push(PlanError::UnknownDependency {
                    id: n.id.clone(),
                    dependency: d.clone(),
                });
            }
        }
        if n.work.is_some() && n.agent.is_some() {
            work_and_agent.push(PlanError::WorkAndAgent(n.id.clone()));
        }
        if n.max_attempts == Some(0) {
            zero.push(PlanError::ZeroMaxAttempts(n.id.clone()));
        }
    }
    duplicates.sort_by(|a, b| error_id(a).cmp(error_id(b)));
    parents.sort_by(|a, b| error_id(a).cmp(error_id(b)));
    deps.sort_by(|a, b| error_id(a).cmp(error_id(b)));
    work_and_agent.sort_by(|a, b| error_id(a).cmp(error_id(b)));
    zero.sort_by(|a, b| error_id(a).cmp(error_id(b)));

    let mut errors = duplicates;
    errors.extend(parents);
    errors.extend(deps);

    // Graph checks over the file's nodes only: existing tasks cannot point back into it.
    // A linear test first (peel every node that reaches no cycle); only a plan that has
    // a cycle pays for the deterministic walk that names it.
    let parent_edges = |i: usize| -> Vec<usize> {
        match nodes[i].parent.as_ref().and_then(|p| index.get(p)) {
            Some(&p) if nodes[p].id != nodes[i].id => vec![p],
            _ => Vec::new(),
        }
    };
    let dep_edges = |i: usize| -> Vec<usize> {
        nodes[i]
            .depends_on
            .iter()
            .filter_map(|d| index.get(d).copied())
            .collect()
    };
    let members: Vec<usize> = {
        let mut v: Vec<usize> = index.values().copied().collect();
        v.sort_unstable();
        v
    };
    let parent_acyclic = acyclic(nodes.len(), &members, |i, out| {
        if let Some(&p) = nodes[i].parent.as_ref().and_then(|p| index.get(p))
            && nodes[p].id != nodes[i].id
        {
            out.push(p);
        }
    });
    let dep_acyclic = acyclic(nodes.len(), &members, |i, out| {
        out.extend(
            nodes[i]
                .depends_on
                .iter()
                .filter_map(|d| index.get(d).copied()),
        );
    });
    if !parent_acyclic || !dep_acyclic {
        let graph_nodes: Vec<usize> = {
            let mut v = members.clone();
            v.sort_by(|&a, &b| nodes[a].id.cmp(&nodes[b].id));
            v
        };
        if !parent_acyclic {
            for cycle in find_cycles(nodes.len(), &graph_nodes, parent_edges) {
                errors.push(PlanError::ParentCycle(path_ids(nodes, &cycle)));
            }
        }
        if !dep_acyclic {
            for cycle in find_cycles(nodes.len(), &graph_nodes, dep_edges) {
                errors.push(PlanError::DependencyCycle(path_ids(nodes, &cycle)));
            }
        }
    }
    errors.extend(work_and_agent);
    errors.extend(zero);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The task an error is about (for sorting a kind's errors by id).
fn error_id(e: &PlanError) -> &TaskId {
    match e {
        PlanError::DuplicateId { id, .. }
        | PlanError::UnknownParent { id, .. }
        | PlanError::UnknownDependency { id, .. } => id,
        PlanError::SelfParent(id)
        | PlanError::WorkAndAgent(id)
        | PlanError::ZeroMaxAttempts(id) => id,
        PlanError::ParentCycle(p) | PlanError::DependencyCycle(p) => &p[0],
    }
}

/// Is the graph over `members` free of cycles? Kahn's peeling on flat (CSR) arrays:
/// linear, one allocation per array, no per-node vectors.
fn acyclic(n: usize, members: &[usize], edges: impl Fn(usize, &mut Vec<usize>)) -> bool {
    let mut start = vec![0u32; n + 1];
    let mut targets: Vec<usize> = Vec::with_capacity(members.len());
    let mut is_member = vec![false; n];
    for &i in members {
        is_member[i] = true;
    }
    // Out-edges in CSR form, indexed by node.
    let mut out_of: Vec<(u32, u32)> = vec![(0, 0); n];
    let mut buf = Vec::new();
    for &i in members {
        buf.clear();
        edges(i, &mut buf);
        let from = targets.len() as u32;
        targets.extend(buf.iter().copied().filter(|j| is_member[*j]));
        out_of[i] = (from, targets.len() as u32);
    }
    // In-degree counts give the reverse CSR.
    for &j in &targets {
        start[j + 1] += 1;
    }
    for k in 0..n {
        start[k + 1] += start[k];
    }
    let mut fill = start.clone();
    let mut reverse = vec![0usize; targets.len()];
    for &i in members {
        let (a, b) = out_of[i];
        for &j in &targets[a as usize..b as usize] {
            reverse[fill[j] as usize] = i;
            fill[j] += 1;
        }
    }
    let mut out_degree: Vec<u32> = vec![0; n];
    let mut queue = Vec::new();
    for &i in members {
        let (a, b) = out_of[i];
        out_degree[i] = b - a;
        if a == b {
            queue.push(i);
        }
    }
    let mut removed = 0usize;
    while let Some(i) = queue.pop() {
        removed += 1;
        for &p in &reverse[start[i] as usize..start[i + 1] as usize] {
            out_degree[p] -= 1;
            if out_degree[p] == 0 {
                queue.push(p);
            }
        }
    }
    removed == members.len()
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
