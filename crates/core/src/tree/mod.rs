//! The task tree: the flat plan file, its validation, seed 000's reconcile of an edited
//! tree (`plan apply`: runner-owned `passes`/`attempts` restored, transitions applied,
//! parents' passes derived, children sorted) and the choice of the next leaf (`plan next`).

mod apply;
mod next;
mod plan;
mod validate;

#[cfg(test)]
mod tests;

use std::collections::HashMap;

/// A fast, deterministic hasher for task ids (the multiply-rotate of rustc's FxHash):
/// tree reconcile hashes every id of a 100k-node tree several times, and SipHash's
/// protection against chosen keys buys nothing for ids a project chose itself.
#[derive(Clone, Copy, Default)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(b))
                .wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(i)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map keyed by task id, hashed with [`IdHasher`].
pub(crate) type IdMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;

pub use apply::{
    AgentStatus, ApplyError, ApplySummary, GuardOutcome, ReconciledNode, TamperNote, TreeUpdate,
    apply_state_updates,
};
pub use next::{Next, NextState, plan_next};
pub use plan::{PlanFile, PlanNode};
pub use validate::{PlanError, validate_plan};

use crate::model::{Status, Task, TaskId};

/// Parent/child structure over a slice of nodes, by index. Children and roots are sorted
/// by `(order, id)`. A node whose parent is not in the slice (or is itself) is a root;
/// nodes on a parent cycle are reachable from no root and so left out of every walk
/// (validation refuses such cycles before they reach the store).
#[derive(Debug)]
pub(crate) struct Forest {
    pub(crate) roots: Vec<usize>,
    pub(crate) children: Vec<Vec<usize>>,
}

impl Forest {
    /// Builds the forest from accessors; `index` maps each id to its position.
    pub(crate) fn build<'a>(
        n: usize,
        index: &IdMap<&'a TaskId, usize>,
        id: impl Fn(usize) -> &'a TaskId,
        parent: impl Fn(usize) -> Option<&'a TaskId>,
        order: impl Fn(usize) -> i64,
    ) -> Forest {
        let mut roots = Vec::new();
        let mut children = vec![Vec::new(); n];
        for i in 0..n {
            match parent(i).and_then(|p| index.get(p)) {
                Some(&p) if p != i => children[p].push(i),
                _ => roots.push(i),
            }
        }
        let key = |a: &usize, b: &usize| order(*a).cmp(&order(*b)).then_with(|| id(*a).cmp(id(*b)));
        roots.sort_by(key);
        for c in &mut children {
            if c.len() > 1 {
                c.sort_by(key);
            }
        }
        Forest { roots, children }
    }

    /// Indices in depth-first pre-order: each node before its children, siblings in order.
    pub(crate) fn preorder(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.children.len());
        let mut stack: Vec<usize> = self.roots.iter().rev().copied().collect();
        while let Some(i) = stack.pop() {
            out.push(i);
            stack.extend(self.children[i].iter().rev().copied());
        }
        out
    }

    /// Is the node a leaf (no children)?
    pub(crate) fn is_leaf(&self, i: usize) -> bool {
        self.children[i].is_empty()
    }
}

/// Recomputes every parent's `passes` bottom-up over `preorder` (children before
/// parents): a parent passes when it has at least one non-cancelled child and every
/// non-cancelled child passes. Cancelled children count neither as open nor as passed,
/// so a parent whose children are all cancelled does not pass. Leaves keep their value.
/// Returns the parents that went from `false` to `true`.
pub(crate) fn derive_in_place(
    forest: &Forest,
    preorder: &[usize],
    status: impl Fn(usize) -> Status,
    passes: &mut [bool],
) -> Vec<usize> {
    let mut became_true = Vec::new();
    for &i in preorder.iter().rev() {
        let kids = &forest.children[i];
        if kids.is_empty() {
            continue;
        }
        let mut counted = 0usize;
        let mut all = true;
        for &c in kids {
            if status(c) == Status::Cancelled {
                continue;
            }
            counted += 1;
            all &= passes[c];
        }
        let derived = counted > 0 && all;
        if derived && !passes[i] {
            became_true.push(i);
        }
        passes[i] = derived;
    }
    became_true
}

/// Recomputes the parents' `passes` of reconciled nodes (see [`apply_state_updates`]) and
/// returns the ids of parents that became `true`, sorted.
pub fn derive_passes(nodes: &mut [ReconciledNode]) -> Vec<TaskId> {
    let index: IdMap<&TaskId, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (&n.spec.id, i))
        .collect();
    let forest = Forest::build(
        nodes.len(),
        &index,
        |i| &nodes[i].spec.id,
        |i| nodes[i].spec.parent.as_ref(),
        |i| nodes[i].spec.order,
    );
    let pre = forest.preorder();
    let mut passes: Vec<bool> = nodes.iter().map(|n| n.passes).collect();
    let changed = derive_in_place(&forest, &pre, |i| nodes[i].status, &mut passes);
    let mut ids: Vec<TaskId> = changed.iter().map(|&i| nodes[i].spec.id.clone()).collect();
    drop(index);
    for (n, p) in nodes.iter_mut().zip(passes) {
        n.passes = p;
    }
    ids.sort();
    ids
}

/// An index over a task forest: children in `(order, id)` order and lookups by id, built
/// once in O(n log n) so callers listing many tasks do not rescan the slice.
#[derive(Debug)]
pub struct TreeIndex<'a> {
    tasks: &'a [Task],
    by_id: IdMap<&'a TaskId, usize>,
    forest: Forest,
}

impl<'a> TreeIndex<'a> {
    /// Indexes `tasks` (any order).
    pub fn new(tasks: &'a [Task]) -> TreeIndex<'a> {
        let by_id: IdMap<&TaskId, usize> =
            tasks.iter().enumerate().map(|(i, t)| (t.id(), i)).collect();
        let forest = Forest::build(
            tasks.len(),
            &by_id,
            |i| tasks[i].id(),
            |i| tasks[i].spec.parent.as_ref(),
            |i| tasks[i].spec.order,
        );
        TreeIndex {
            tasks,
            by_id,
            forest,
        }
    }

    /// The task with this id.
    pub fn get(&self, id: &TaskId) -> Option<&'a Task> {
        self.by_id.get(id).map(|&i| &self.tasks[i])
    }

    /// The children of `id` in `(order, id)` order (empty for a leaf or an unknown id).
    pub fn children(&self, id: &TaskId) -> Vec<&'a Task> {
        match self.by_id.get(id) {
            Some(&i) => self.forest.children[i]
                .iter()
                .map(|&c| &self.tasks[c])
                .collect(),
            None => Vec::new(),
        }
    }

    /// Does the task have no children?
    pub fn is_leaf(&self, id: &TaskId) -> bool {
        self.by_id.get(id).is_none_or(|&i| self.forest.is_leaf(i))
    }

    /// Every task, depth-first in `(order, id)` order, roots sorted the same way.
    pub fn depth_first(&self) -> Vec<&'a Task> {
        self.forest
            .preorder()
            .into_iter()
            .map(|i| &self.tasks[i])
            .collect()
    }

    pub(crate) fn forest(&self) -> &Forest {
        &self.forest
    }

    pub(crate) fn position(&self, id: &TaskId) -> Option<usize> {
        self.by_id.get(id).copied()
    }
}

/// Every task depth-first in `(order, id)` order over the forest, roots sorted the same way.
pub fn depth_first(tasks: &[Task]) -> Vec<&Task> {
    TreeIndex::new(tasks).depth_first()
}

/// The ids of the children of `id`, in `(order, id)` order. For many lookups build a
/// [`TreeIndex`] once instead.
pub fn children(tasks: &[Task], id: &TaskId) -> Vec<TaskId> {
    let mut kids: Vec<&Task> = tasks
        .iter()
        .filter(|t| t.spec.parent.as_ref() == Some(id) && t.id() != id)
        .collect();
    kids.sort_by(|a, b| {
        a.spec
            .order
            .cmp(&b.spec.order)
            .then_with(|| a.id().cmp(b.id()))
    });
    kids.into_iter().map(|t| t.id().clone()).collect()
}
