//! Validation of a plan file before it reaches the store: every problem is reported at
//! once (duplicates, bad references, parent and dependency cycles, conflicting specs),
//! each with a one-line message that says what to fix.

use std::collections::HashMap;
use std::fmt;

use crate::model::{TaskId, same_bytes};
use crate::tree::PARALLEL_NODES;
use crate::tree::{IdIndex, IdMap, PlanNode};

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
    /// Dependencies that wait on each other through the tree: a task waits for the
    /// dependencies of its groups, and a group is done only when everything under it
    /// is, so `g` depending on a task under `g` (or a task on one of its own groups, or
    /// a longer loop through groups) can never be met. The steps start at the smallest
    /// id and close the loop.
    #[error(
        "dependencies can never be met: {}; remove one of these depends_on entries",
        Steps(.0)
    )]
    DependencyDeadlock(Vec<DeadlockStep>),
    /// Both `work` and `agent` are set.
    #[error("task {0} sets both work and agent; keep only one of them")]
    WorkAndAgent(TaskId),
    /// A new task's id cannot name a git branch (`warden/<id>`).
    #[error("task id {id} cannot name a git branch ({why}); choose another id")]
    NotABranch {
        /// The id.
        id: TaskId,
        /// What git refuses.
        why: &'static str,
    },
    /// `max_attempts` is 0, so the task could never be tried.
    #[error("task {0} has max_attempts 0; use 1 or more, or leave it out for the default")]
    ZeroMaxAttempts(TaskId),
}

/// One `depends_on` entry of a [`PlanError::DependencyDeadlock`], and how the task it
/// names leads to the next step's task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadlockStep {
    /// The task whose `depends_on` holds the entry.
    pub task: TaskId,
    /// The task it names.
    pub needs: TaskId,
    /// Where the next step's task stands from `needs`.
    pub link: DeadlockLink,
}

/// How a step's `needs` leads to the next step's `task`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeadlockLink {
    /// The next step starts at `needs` itself.
    Same,
    /// `needs` is under the next step's task (a group that waits for it).
    Inside(TaskId),
    /// `needs` is a group that holds the next step's task.
    Holds(TaskId),
}

/// Renders deadlock steps as `g needs d, which is inside g`.
struct Steps<'a>(&'a [DeadlockStep]);

impl fmt::Display for Steps<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, step) in self.0.iter().enumerate() {
            if k > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{} needs {}", step.task, step.needs)?;
            match &step.link {
                DeadlockLink::Same => {}
                DeadlockLink::Inside(t) => write!(f, ", which is inside {t}")?,
                DeadlockLink::Holds(t) => write!(f, ", which holds {t}")?,
            }
        }
        Ok(())
    }
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
    validate_resolved(nodes, existing).map(|_| ())
}

/// No node: a root's parent, in [`Resolved::parent`].
pub(crate) const NONE: u32 = u32::MAX;

/// What validation learned about a valid plan, for callers that go on to use it: each id
/// looked up once, here, and never again.
pub(crate) struct Resolved<'a> {
    /// Position of each id in the file.
    pub(crate) index: IdIndex<'a>,
    /// Position of each node's parent in the file, or [`NONE`].
    pub(crate) parent: Vec<u32>,
}

/// [`validate_plan`], returning the id index and the resolved parents of a valid plan.
pub(crate) fn validate_resolved<'a>(
    nodes: &'a [PlanNode],
    existing: &[TaskId],
) -> Result<Resolved<'a>, Vec<PlanError>> {
    // Each node is read once, here: at 100k nodes every pass over them reads 27 MB for a
    // few fields. What the later steps need of them is gathered into small arrays, and
    // the checks of a node alone are made on the way.
    let n = nodes.len();
    let mut ids: Vec<&str> = Vec::with_capacity(n);
    let mut parent_names: Vec<Option<&TaskId>> = Vec::with_capacity(n);
    let mut dep_start: Vec<u32> = Vec::with_capacity(n + 1);
    let mut dep_names: Vec<&TaskId> = Vec::new();
    let mut work_and_agent = Vec::new();
    let mut zero = Vec::new();
    let mut not_a_branch = Vec::new();
    for node in nodes {
        ids.push(node.id.as_str());
        parent_names.push(node.parent.as_ref());
        dep_start.push(dep_names.len() as u32);
        dep_names.extend(&node.depends_on);
        if node.work.is_some() && node.agent.is_some() {
            work_and_agent.push(PlanError::WorkAndAgent(node.id.clone()));
        }
        if node.max_attempts == Some(0) {
            zero.push(PlanError::ZeroMaxAttempts(node.id.clone()));
        }
        if let Some(why) = node.id.branch_problem() {
            not_a_branch.push((&node.id, why));
        }
    }
    dep_start.push(dep_names.len() as u32);

    // The index (the first in file order stands for a repeated id) and the repeats; each
    // kind of problem is sorted by id at the end, so the report does not depend on the
    // file's order.
    let (index, repeat_at) = IdIndex::build(ids);
    let mut repeats: HashMap<&TaskId, usize> = HashMap::new();
    for &i in &repeat_at {
        *repeats.entry(&nodes[i as usize].id).or_insert(1) += 1;
    }
    // Existing tasks are indexed only if a reference misses the file.
    let existing_set = std::cell::OnceCell::new();
    let in_existing = |id: &TaskId| {
        existing_set
            .get_or_init(|| existing.iter().map(|id| (id, ())).collect::<IdMap<_, _>>())
            .contains_key(id)
    };
    // Ids stored before the branch rule keep working; new ones must follow it.
    for (id, why) in not_a_branch {
        if !in_existing(id) {
            zero.push(PlanError::NotABranch {
                id: id.clone(),
                why,
            });
        }
    }

    let mut duplicates: Vec<PlanError> = repeats
        .iter()
        .map(|(id, count)| PlanError::DuplicateId {
            id: (*id).clone(),
            count: *count,
        })
        .collect();
    let mut parents = Vec::new();
    let mut deps = Vec::new();
    // Every reference looked up in two batches: parents (an empty name for none, which
    // no id is) and dependencies, in CSR form.
    let parent_of = if repeat_at.is_empty() {
        resolve_parents(&parent_names, &index)
    } else {
        index.get_many_split(
            &parent_names,
            |p| p.map_or("", |p| p.as_str()),
            PARALLEL_NODES,
        )
    };
    let dep_of = index.get_many_split(&dep_names, |d| d.as_str(), PARALLEL_NODES);
    // Edges among the file's nodes: parents as one array, dependencies in CSR form.
    let mut parent = vec![NONE; n];
    let mut dep_to: Vec<u32> = Vec::with_capacity(dep_of.len());
    for i in 0..n {
        match parent_names[i] {
            Some(p) if same_bytes(p.as_str().as_bytes(), index.name(i).as_bytes()) => {
                parents.push(PlanError::SelfParent(nodes[i].id.clone()));
            }
            Some(p) => match parent_of[i] {
                NONE if in_existing(p) => {}
                NONE => parents.push(PlanError::UnknownParent {
                    id: nodes[i].id.clone(),
                    parent: p.clone(),
                }),
                j => parent[i] = j,
            },
            None => {}
        }
        let (a, b) = (dep_start[i] as usize, dep_start[i + 1] as usize);
        dep_start[i] = dep_to.len() as u32;
        for (&d, &j) in dep_names[a..b].iter().zip(&dep_of[a..b]) {
            match j {
                NONE if in_existing(d) => {}
                NONE => deps.push(PlanError::UnknownDependency {
                    id: nodes[i].id.clone(),
                    dependency: d.clone(),
                }),
                j => dep_to.push(j),
            }
        }
    }
    dep_start[n] = dep_to.len() as u32;
    duplicates.sort_by(|a, b| error_id(a).cmp(error_id(b)));
    parents.sort_by(|a, b| error_id(a).cmp(error_id(b)));
    deps.sort_by(|a, b| error_id(a).cmp(error_id(b)));
    work_and_agent.sort_by(|a, b| error_id(a).cmp(error_id(b)));
    zero.sort_by(|a, b| error_id(a).cmp(error_id(b)));

    let mut errors = duplicates;
    errors.extend(parents);
    errors.extend(deps);

    // Graph checks over the file's nodes only: existing tasks cannot point back into it.
    // Of a repeated id only the first occurrence is a member (the one edges lead to).
    // A linear test first; only a plan that has a cycle pays for the deterministic walk
    // that names it.
    let mut member = vec![true; n];
    for &i in &repeat_at {
        member[i as usize] = false;
    }
    let parent_of = |i: usize| -> &[u32] {
        match parent[i] {
            NONE => &[],
            _ => std::slice::from_ref(&parent[i]),
        }
    };
    let deps_of =
        |i: usize| -> &[u32] { &dep_to[dep_start[i] as usize..dep_start[i + 1] as usize] };
    let members = || (0..n).filter(|&i| member[i]).collect::<Vec<usize>>();
    let parent_acyclic = parents_acyclic(&parent, &member);
    // Most plans have no dependency between their own nodes at all.
    let dep_acyclic = dep_to.is_empty() || acyclic(n, &members(), deps_of);
    if !parent_acyclic || !dep_acyclic {
        let graph_nodes: Vec<usize> = {
            let mut v = members();
            v.sort_by(|&a, &b| nodes[a].id.cmp(&nodes[b].id));
            v
        };
        if !parent_acyclic {
            for cycle in find_cycles(n, &graph_nodes, parent_of) {
                errors.push(PlanError::ParentCycle(path_ids(nodes, &cycle)));
            }
        }
        if !dep_acyclic {
            for cycle in find_cycles(n, &graph_nodes, deps_of) {
                errors.push(PlanError::DependencyCycle(path_ids(nodes, &cycle)));
            }
        }
    } else if !dep_to.is_empty() {
        let ids: Vec<&TaskId> = nodes.iter().map(|node| &node.id).collect();
        errors.extend(
            tree_deadlocks(&ids, &member, &parent, &dep_start, &dep_to)
                .into_iter()
                .map(PlanError::DependencyDeadlock),
        );
    }
    errors.extend(work_and_agent);
    errors.extend(zero);
    if errors.is_empty() {
        Ok(Resolved { index, parent })
    } else {
        Err(errors)
    }
}

/// The position of each node's parent in the file ([`NONE`] when it has none or names a
/// task outside the file), for a file without repeated ids. In a file written depth
/// first, as `plan export` writes it, a node's parent is mostly the node before it or
/// that node's parent: those are recognised by name, and only the rest are looked up.
fn resolve_parents(parents: &[Option<&TaskId>], index: &IdIndex<'_>) -> Vec<u32> {
    // A sibling of the node before: its parent is that node's, known once the lookups
    // are done.
    const SAME: u32 = NONE - 1;
    let mut out = vec![NONE; parents.len()];
    let mut rest: Vec<usize> = Vec::new();
    let mut siblings = false;
    for (i, &parent) in parents.iter().enumerate() {
        let Some(p) = parent else { continue };
        if i > 0 {
            if same_bytes(p.as_str().as_bytes(), index.name(i - 1).as_bytes()) {
                out[i] = (i - 1) as u32;
                continue;
            }
            if parents[i - 1] == Some(p) {
                out[i] = SAME;
                siblings = true;
                continue;
            }
        }
        rest.push(i);
    }
    let names: Vec<&str> = rest
        .iter()
        .map(|&i| parents[i].map_or("", |p| p.as_str()))
        .collect();
    let found = index.get_many_split(&names, |s| s, PARALLEL_NODES);
    for (i, j) in rest.into_iter().zip(found) {
        out[i] = j;
    }
    if siblings {
        for i in 1..out.len() {
            if out[i] == SAME {
                out[i] = out[i - 1];
            }
        }
    }
    out
}

/// The task an error is about (for sorting a kind's errors by id).
fn error_id(e: &PlanError) -> &TaskId {
    match e {
        PlanError::DuplicateId { id, .. }
        | PlanError::UnknownParent { id, .. }
        | PlanError::UnknownDependency { id, .. } => id,
        PlanError::SelfParent(id)
        | PlanError::WorkAndAgent(id)
        | PlanError::ZeroMaxAttempts(id)
        | PlanError::NotABranch { id, .. } => id,
        PlanError::ParentCycle(p) | PlanError::DependencyCycle(p) => &p[0],
        PlanError::DependencyDeadlock(steps) => &steps[0].task,
    }
}

/// Dependencies that wait on each other through the tree, in a plan whose parents and
/// dependencies are each acyclic. A leaf starts when its own and every ancestor's
/// dependencies are done, and a group is done when everything under it is; so each
/// node is two events, its start S and its finish F, ordered by these edges ("cannot
/// happen before"): S(i) → F(d) for each dependency d, S(i) → S(parent), F(i) → S(i),
/// and F(group) → F(child). A cycle among them is a set of `depends_on` entries that
/// can never all be met.
///
/// Every such cycle passes through a dependency that names a group or is held by one
/// (otherwise it would be a plain dependency cycle, reported already), so a plan whose
/// dependencies are all between leaves pays one pass over its edges and no more.
fn tree_deadlocks(
    ids: &[&TaskId],
    member: &[bool],
    parent: &[u32],
    dep_start: &[u32],
    dep_to: &[u32],
) -> Vec<Vec<DeadlockStep>> {
    let n = ids.len();
    let deps_of = |i: usize| &dep_to[dep_start[i] as usize..dep_start[i + 1] as usize];
    let mut children = vec![0u32; n + 1];
    for i in 0..n {
        if member[i] && parent[i] != NONE {
            children[parent[i] as usize + 1] += 1;
        }
    }
    let touches_group = (0..n).any(|i| {
        member[i]
            && !deps_of(i).is_empty()
            && (children[i + 1] > 0 || deps_of(i).iter().any(|&d| children[d as usize + 1] > 0))
    });
    if !touches_group {
        return Vec::new();
    }
    for k in 0..n {
        children[k + 1] += children[k];
    }
    let mut child = vec![0u32; children[n] as usize];
    let mut fill = children.clone();
    for i in 0..n {
        if member[i] && parent[i] != NONE {
            let p = parent[i] as usize;
            child[fill[p] as usize] = i as u32;
            fill[p] += 1;
        }
    }
    // The event graph in CSR form: S(i) is vertex 2i, F(i) is 2i + 1.
    let graph = |child: &[u32]| {
        let mut start = Vec::with_capacity(2 * n + 1);
        let mut edges: Vec<u32> = Vec::with_capacity(4 * n + dep_to.len());
        for i in 0..n {
            start.push(edges.len() as u32);
            if member[i] {
                edges.extend(deps_of(i).iter().map(|&d| 2 * d + 1));
                if parent[i] != NONE {
                    edges.push(2 * parent[i]);
                }
            }
            start.push(edges.len() as u32);
            if member[i] {
                edges.push(2 * i as u32);
                let kids = &child[children[i] as usize..children[i + 1] as usize];
                edges.extend(kids.iter().map(|&c| 2 * c + 1));
            }
        }
        start.push(edges.len() as u32);
        (start, edges)
    };
    let mut events: Vec<usize> = (0..2 * n).filter(|&v| member[v / 2]).collect();
    {
        let (start, edges) = graph(&child);
        if acyclic(2 * n, &events, |v| {
            &edges[start[v] as usize..start[v + 1] as usize]
        }) {
            return Vec::new();
        }
    }
    // A plan that has one pays for a walk that does not depend on the file's order.
    events.sort_by(|&a, &b| ids[a / 2].cmp(ids[b / 2]).then(a.cmp(&b)));
    for i in 0..n {
        child[children[i] as usize..children[i + 1] as usize]
            .sort_by(|&a, &b| ids[a as usize].cmp(ids[b as usize]));
    }
    let (start, edges) = graph(&child);
    let out = |v: usize| &edges[start[v] as usize..start[v + 1] as usize];
    // Bounded, for a stored tree whose parents were never checked here.
    let is_ancestor = |a: usize, mut of: usize| {
        for _ in 0..n {
            match parent[of] {
                NONE => return false,
                p if p as usize == a => return true,
                p => of = p as usize,
            }
        }
        false
    };
    let mut errors = Vec::new();
    for cycle in find_cycles(2 * n, &events, out) {
        // The dependency edges are the ones from a start to a finish.
        let mut steps: Vec<(usize, usize)> = cycle
            .windows(2)
            .filter(|w| w[0] % 2 == 0 && w[1] % 2 == 1)
            .map(|w| (w[0] / 2, w[1] / 2))
            .collect();
        let Some(first) = (0..steps.len()).min_by(|&a, &b| ids[steps[a].0].cmp(ids[steps[b].0]))
        else {
            continue;
        };
        steps.rotate_left(first);
        let report = (0..steps.len())
            .map(|k| {
                let (task, needs) = steps[k];
                let next = steps[(k + 1) % steps.len()].0;
                let link = if next == needs {
                    DeadlockLink::Same
                } else if is_ancestor(next, needs) {
                    DeadlockLink::Inside(ids[next].clone())
                } else {
                    DeadlockLink::Holds(ids[next].clone())
                };
                DeadlockStep {
                    task: ids[task].clone(),
                    needs: ids[needs].clone(),
                    link,
                }
            })
            .collect();
        errors.push(report);
    }
    errors
}

/// The dependencies of a whole tree that can never be met, as
/// [`PlanError::DependencyDeadlock`] reports them: each task's id, parent and
/// `depends_on`; a reference to no task of `tasks` is ignored. For the store, which
/// lays a batch of new or changed tasks over the stored ones (a file's validation sees
/// only the file). A tree where no task has a dependency pays one pass over it.
pub fn deadlocks(tasks: &[(&TaskId, Option<&TaskId>, &[TaskId])]) -> Vec<Vec<DeadlockStep>> {
    if tasks.iter().all(|(_, _, d)| d.is_empty()) {
        return Vec::new();
    }
    let n = tasks.len();
    let ids: Vec<&TaskId> = tasks.iter().map(|t| t.0).collect();
    let mut at: IdMap<&TaskId, u32> = IdMap::default();
    at.reserve(n);
    for (i, id) in ids.iter().enumerate() {
        at.entry(*id).or_insert(i as u32);
    }
    let member: Vec<bool> = (0..n).map(|i| at[ids[i]] == i as u32).collect();
    let parent: Vec<u32> = tasks
        .iter()
        .map(|t| t.1.and_then(|p| at.get(p).copied()).unwrap_or(NONE))
        .collect();
    let mut dep_start = Vec::with_capacity(n + 1);
    let mut dep_to = Vec::new();
    for t in tasks {
        dep_start.push(dep_to.len() as u32);
        dep_to.extend(t.2.iter().filter_map(|d| at.get(d).copied()));
    }
    dep_start.push(dep_to.len() as u32);
    tree_deadlocks(&ids, &member, &parent, &dep_start, &dep_to)
}

/// Do the parents (one edge per node at most) reach a root from every member? Each walk
/// up the parents marks what it visits; meeting its own mark is a cycle, meeting an
/// earlier walk's is not. Linear, one array.
fn parents_acyclic(parent: &[u32], member: &[bool]) -> bool {
    let mut walk = vec![0u32; parent.len()];
    for start in 0..parent.len() {
        if !member[start] || walk[start] != 0 {
            continue;
        }
        let mark = start as u32 + 1;
        let mut at = start;
        loop {
            match walk[at] {
                0 => walk[at] = mark,
                m if m == mark => return false,
                _ => break,
            }
            match parent[at] {
                NONE => break,
                p => at = p as usize,
            }
        }
    }
    true
}

/// Is the graph over `members` free of cycles? Kahn's peeling on flat (CSR) arrays:
/// linear, one allocation per array, no per-node vectors. Edges to non-members are
/// ignored.
fn acyclic<'e>(n: usize, members: &[usize], edges: impl Fn(usize) -> &'e [u32]) -> bool {
    let all = members.len() == n;
    let mut is_member = vec![all; n];
    if !all {
        for &i in members {
            is_member[i] = true;
        }
    }
    // In-degree counts give the reverse CSR.
    let mut start = vec![0u32; n + 1];
    let mut out_degree: Vec<u32> = vec![0; n];
    for &i in members {
        for &j in edges(i) {
            if is_member[j as usize] {
                start[j as usize + 1] += 1;
                out_degree[i] += 1;
            }
        }
    }
    for k in 0..n {
        start[k + 1] += start[k];
    }
    let mut fill = start.clone();
    let mut reverse = vec![0u32; start[n] as usize];
    for &i in members {
        for &j in edges(i) {
            if is_member[j as usize] {
                reverse[fill[j as usize] as usize] = i as u32;
                fill[j as usize] += 1;
            }
        }
    }
    let mut queue: Vec<usize> = members
        .iter()
        .copied()
        .filter(|&i| out_degree[i] == 0)
        .collect();
    let mut removed = 0usize;
    while let Some(i) = queue.pop() {
        removed += 1;
        for &p in &reverse[start[i] as usize..start[i + 1] as usize] {
            out_degree[p as usize] -= 1;
            if out_degree[p as usize] == 0 {
                queue.push(p as usize);
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
fn find_cycles<'e>(
    n: usize,
    members: &[usize],
    edges: impl Fn(usize) -> &'e [u32],
) -> Vec<Vec<usize>> {
    let is_member = {
        let mut v = vec![false; n];
        for &i in members {
            v[i] = true;
        }
        v
    };
    let out: Vec<Vec<usize>> = {
        let mut out = vec![Vec::new(); n];
        for &i in members {
            out[i] = edges(i)
                .iter()
                .map(|&j| j as usize)
                .filter(|&j| is_member[j])
                .collect();
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
