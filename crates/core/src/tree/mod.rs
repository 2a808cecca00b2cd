//! The task tree: the flat plan file, its validation, seed 000's reconcile of an edited
//! tree (`plan apply`: runner-owned `passes`/`attempts` restored, transitions applied,
//! parents' passes derived, children sorted) and the choice of the next leaf (`plan next`).

mod apply;
mod next;
mod plan;
mod stored;
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

/// Nodes from which [`match_all`] splits the comparisons over two threads: each stored
/// task is read at random, and two cores wait for memory in parallel.
pub(crate) const PARALLEL_NODES: usize = 16 * 1024;

pub use apply::{
    AgentStatus, ApplyError, ApplySummary, GuardOutcome, ReconciledNode, TamperNote, TreeUpdate,
    apply_state_updates,
};
pub use next::{MAX_STUCK_ON, Next, NextState, StuckOn, plan_next};
pub use plan::{PlanFile, PlanNode};
#[cfg(test)]
pub(crate) use stored::read_stored;
pub use stored::{Same, Stored, StoredRows, StoredTask};
pub use validate::{DeadlockLink, DeadlockStep, PlanError, deadlocks, validate_plan};

use crate::model::{Status, Task, TaskId};

/// Parent/child structure over a slice of nodes, by index. Children and roots are sorted
/// by `(order, id)`. A node whose parent is not in the slice (or is itself) is a root;
/// nodes on a parent cycle are reachable from no root and so left out of every walk
/// (validation refuses such cycles before they reach the store).
#[derive(Debug)]
pub(crate) struct Forest {
    pub(crate) roots: Vec<usize>,
    /// Every node's children, back to back: node `i`'s are `kids[start[i]..start[i + 1]]`
    /// (two arrays of `u32`, where a `Vec` per node cost 24 bytes each and an allocation
    /// per parent: 2 ms of a 100k-node reconcile).
    start: Vec<u32>,
    kids: Vec<u32>,
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
        let parents: Vec<u32> = (0..n)
            .map(|i| match parent(i).and_then(|p| index.get(p)) {
                Some(&p) if p != i => p as u32,
                _ => validate::NONE,
            })
            .collect();
        Forest::from_parents(&parents, id, order)
    }

    /// Builds the forest from resolved parent positions ([`validate::NONE`] for a root).
    pub(crate) fn from_parents<'a>(
        parents: &[u32],
        id: impl Fn(usize) -> &'a TaskId,
        order: impl Fn(usize) -> i64,
    ) -> Forest {
        let n = parents.len();
        let is_root = |i: usize, p: u32| p == validate::NONE || p as usize == i;
        let mut roots = Vec::new();
        // Count each node's children, then place them in index order (a counting sort).
        let mut start = vec![0u32; n + 1];
        for (i, &p) in parents.iter().enumerate() {
            if is_root(i, p) {
                roots.push(i);
            } else {
                start[p as usize + 1] += 1;
            }
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut at: Vec<u32> = start[..n].to_vec();
        let mut kids = vec![0u32; start[n] as usize];
        for (i, &p) in parents.iter().enumerate() {
            if !is_root(i, p) {
                kids[at[p as usize] as usize] = i as u32;
                at[p as usize] += 1;
            }
        }
        drop(at);
        let key = |a: usize, b: usize| order(a).cmp(&order(b)).then_with(|| id(a).cmp(id(b)));
        roots.sort_by(|&a, &b| key(a, b));
        for w in start.windows(2) {
            let run = &mut kids[w[0] as usize..w[1] as usize];
            if run.len() > 1 {
                run.sort_by(|&a, &b| key(a as usize, b as usize));
            }
        }
        Forest { roots, start, kids }
    }

    /// The children of node `i`, in `(order, id)` order.
    pub(crate) fn children(&self, i: usize) -> &[u32] {
        &self.kids[self.start[i] as usize..self.start[i + 1] as usize]
    }

    /// The number of nodes.
    pub(crate) fn len(&self) -> usize {
        self.start.len() - 1
    }

    /// Indices in depth-first pre-order: each node before its children, siblings in order.
    pub(crate) fn preorder(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.len());
        let mut stack: Vec<usize> = self.roots.iter().rev().copied().collect();
        while let Some(i) = stack.pop() {
            out.push(i);
            stack.extend(self.children(i).iter().rev().map(|&c| c as usize));
        }
        out
    }

    /// Is the node a leaf (no children)?
    pub(crate) fn is_leaf(&self, i: usize) -> bool {
        self.start[i] == self.start[i + 1]
    }
}

/// Recomputes every parent's `passes` bottom-up over `preorder` (children before
/// parents): a parent passes when it has at least one non-cancelled child and every
/// non-cancelled child passes. Cancelled children count neither as open nor as passed,
/// so a parent whose children are all cancelled does not pass, nor does a parent that is
/// cancelled itself. Leaves keep their value.
/// Returns the parents that went from `false` to `true`.
pub(crate) fn derive_in_place(
    forest: &Forest,
    preorder: &[usize],
    status: impl Fn(usize) -> Status,
    passes: &mut [bool],
) -> Vec<usize> {
    let mut became_true = Vec::new();
    for &i in preorder.iter().rev() {
        let kids = forest.children(i);
        if kids.is_empty() {
            continue;
        }
        let mut counted = 0usize;
        let mut all = true;
        for c in kids.iter().map(|&c| c as usize) {
            if status(c) == Status::Cancelled {
                continue;
            }
            counted += 1;
            all &= passes[c];
        }
        // A group a person cancelled does not pass (`head::ChildTally::derived`).
        let derived = counted > 0 && all && status(i) != Status::Cancelled;
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
    /// Every task's status and `passes` as people see them: a leaf's own, a group's
    /// derived from its children (see [`derive_groups`]).
    derived: Vec<(Status, bool)>,
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
        let derived = derive_groups(&forest, tasks);
        TreeIndex {
            tasks,
            by_id,
            forest,
            derived,
        }
    }

    /// The status of a task as every view shows it: a leaf's own; a group's derived
    /// from its children (done when every non-cancelled child is done, stuck when one is
    /// stuck, working once one has started, pending before; cancelled when all are).
    pub fn status(&self, t: &Task) -> Status {
        self.by_id
            .get(t.id())
            .map_or(t.status(), |&i| self.derived[i].0)
    }

    /// `passes` as every view shows it: a leaf's own; a group passes when it has a
    /// non-cancelled child and every non-cancelled child passes (seed 000).
    pub fn passes(&self, t: &Task) -> bool {
        self.by_id
            .get(t.id())
            .map_or(t.passes(), |&i| self.derived[i].1)
    }

    /// The task with this id.
    pub fn get(&self, id: &TaskId) -> Option<&'a Task> {
        self.by_id.get(id).map(|&i| &self.tasks[i])
    }

    /// The children of `id` in `(order, id)` order (empty for a leaf or an unknown id).
    pub fn children(&self, id: &TaskId) -> Vec<&'a Task> {
        match self.by_id.get(id) {
            Some(&i) => self
                .forest
                .children(i)
                .iter()
                .map(|&c| &self.tasks[c as usize])
                .collect(),
            None => Vec::new(),
        }
    }

    /// Are all of a task's dependencies done (a group when its children are), and all of
    /// its ancestors'? A group's `depends_on` holds back every leaf below it (as the
    /// supervisor schedules and `plan next` reads). An unknown dependency is not done.
    pub fn deps_done(&self, t: &Task) -> bool {
        self.unmet(t).is_none()
    }

    /// What holds `t` back: the first dependency, its own and then its ancestors', that
    /// is not done, with the status views show (a group's derived; `None` for a task
    /// that does not exist). `None` when every one is done.
    pub fn unmet<'t>(&'t self, t: &'t Task) -> Option<(&'t TaskId, Option<Status>)> {
        let mut at = t;
        // At most one step per task: a stored tree has no parent cycle.
        for _ in 0..=self.tasks.len() {
            for d in &at.spec.depends_on {
                match self.by_id.get(d).map(|&i| self.derived[i].0) {
                    Some(Status::Done) => {}
                    status => return Some((d, status)),
                }
            }
            match at.spec.parent.as_ref().and_then(|p| self.get(p)) {
                Some(parent) if parent.id() != at.id() => at = parent,
                _ => return None,
            }
        }
        None
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

/// The status and `passes` of every task as views show them, children before parents:
/// a leaf keeps its own; a group's come from its children (see [`TreeIndex::status`]).
fn derive_groups(forest: &Forest, tasks: &[Task]) -> Vec<(Status, bool)> {
    let mut out: Vec<(Status, bool)> = tasks.iter().map(|t| (t.status(), t.passes())).collect();
    for &i in forest.preorder().iter().rev() {
        let kids = forest.children(i);
        if kids.is_empty() {
            continue;
        }
        // The one rule every view derives a group with (see `head::ChildTally`).
        let mut tally = crate::head::ChildTally::default();
        for c in kids.iter().map(|&c| c as usize) {
            let (status, passes) = out[c];
            tally.add(status, passes, 1);
        }
        out[i] = tally.derived(tasks[i].status());
    }
    out
}

/// The deepest a task may sit in the tree: a root is at level 1. Far beyond any real
/// plan (get-shit-done's are 3 levels), and it keeps every walk of the tree — the CLI,
/// STATE.md, the MCP server's JSON — bounded however the tree was written: `plan show
/// --json` nests two JSON levels per tree level, and 50 of them stay within the 128 that
/// strict parsers (serde_json's default) accept.
pub const MAX_DEPTH: usize = 50;

/// The task deeper than [`MAX_DEPTH`] with the smallest id, and its level (capped at
/// `MAX_DEPTH + 1`), for a tree given as `(id, parent)` pairs. Iterative and linear:
/// each level is computed once, and no walk goes further up than the limit. A parent
/// cycle counts as too deep (validation names it first).
pub fn too_deep<'a>(parents: &HashMap<&'a TaskId, Option<&'a TaskId>>) -> Option<(TaskId, usize)> {
    const CAP: usize = MAX_DEPTH + 1;
    let mut level: HashMap<&TaskId, usize> = HashMap::with_capacity(parents.len());
    let mut path: Vec<&TaskId> = Vec::new();
    let mut worst: Option<(&TaskId, usize)> = None;
    for &start in parents.keys() {
        if level.contains_key(start) {
            continue;
        }
        path.clear();
        let mut cur = Some(start);
        // Walk up to a task whose level is known, a root, or the limit; then assign the
        // levels on the way back down.
        // A walk cut off at the limit knows only that `start` is past it: the tasks above
        // it on the path may sit higher than their place on the path says (their levels
        // come from their own walks).
        let mut cut = false;
        let base = loop {
            match cur {
                None => break 0,
                Some(_) if path.len() >= CAP => {
                    cut = true;
                    break CAP;
                }
                Some(id) => {
                    if let Some(&l) = level.get(id) {
                        break l;
                    }
                    path.push(id);
                    // An unknown parent is a root's (validation reports the reference).
                    cur = parents.get(id).copied().flatten();
                }
            }
        };
        if cut {
            path.truncate(1);
        }
        for (k, id) in path.iter().rev().enumerate() {
            let l = (base + k + 1).min(CAP);
            level.insert(id, l);
            if l > MAX_DEPTH && worst.is_none_or(|(w, _)| *id < w) {
                worst = Some((id, l));
            }
        }
    }
    // Name the task where the tree first crosses the limit (its parent is exactly at
    // it), the smallest such id; a cycle has none, so then the smallest id past it.
    let boundary = level
        .iter()
        .filter(|&(id, &l)| {
            l > MAX_DEPTH
                && parents
                    .get(id)
                    .copied()
                    .flatten()
                    .and_then(|p| level.get(p))
                    == Some(&MAX_DEPTH)
        })
        .map(|(id, _)| *id)
        .min();
    match boundary {
        Some(id) => Some((id.clone(), MAX_DEPTH + 1)),
        None => worst.map(|(id, l)| (id.clone(), l)),
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

/// An exact id → position index for a 100k-node plan, laid out for the cache. A plain
/// hash table of that size lives in main memory, so every probe is a cache miss; here
/// the table is split by the hash's top bits into partitions of about 512 ids each, ids
/// are inserted partition by partition, and lookups come in batches ([`IdIndex::get_many_split`])
/// sorted the same way, so each partition's table is probed while it sits in the cache.
/// A slot holds the id's full hash, its length and first 16 bytes, so a probe follows no
/// pointer for ids of up to 16 bytes; longer ids are compared in full.
pub(crate) struct IdIndex<'a> {
    /// The ids, by position.
    ids: Vec<&'a str>,
    /// Every partition's table, back to back.
    slots: Vec<Slot>,
    /// Where each partition's table starts in `slots` (one more entry than partitions).
    start: Vec<u32>,
    /// Log2 of the number of partitions.
    bits: u32,
}

impl std::fmt::Debug for IdIndex<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdIndex")
            .field("ids", &self.ids.len())
            .field("partitions", &(1usize << self.bits))
            .finish()
    }
}

/// A table slot, or a pending insert or lookup (then `pos` is the query's number).
#[derive(Clone, Copy)]
struct Slot {
    /// 0 marks an empty slot (a real hash is never 0).
    hash: u64,
    pos: u32,
    len: u32,
    head: [u8; 16],
}

const EMPTY: Slot = Slot {
    hash: 0,
    pos: 0,
    len: 0,
    head: [0; 16],
};

impl Slot {
    fn of(s: &str, pos: u32) -> Slot {
        Slot::with_hash(s, pos, id_hash(s))
    }

    fn with_hash(s: &str, pos: u32, hash: u64) -> Slot {
        let mut head = [0u8; 16];
        let n = s.len().min(16);
        head[..n].copy_from_slice(&s.as_bytes()[..n]);
        Slot {
            hash,
            pos,
            len: s.len() as u32,
            head,
        }
    }

    /// Same hash, length and head: the same id if it is at most 16 bytes long.
    fn same_key(&self, other: &Slot) -> bool {
        self.hash == other.hash && self.len == other.len && self.head == other.head
    }
}

/// The hash of an id in an [`IdIndex`]: never 0.
fn id_hash(s: &str) -> u64 {
    use std::hash::Hasher;
    let mut h = IdHasher::default();
    h.write(s.as_bytes());
    // A final mix spreads the multiply's high bits into the low bits, which pick the
    // slot (the high bits pick the partition).
    let x = h.finish();
    (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) | 1
}

/// Ids per partition, about: a partition's table (32-byte slots, two thirds full at
/// most) then fits in the L1 cache.
const PART_IDS: usize = 512;

/// Ids up to which the index is one table, filled and probed directly: its 48 bytes
/// per id stay in the L2 cache, so partitioning (a hashing pass and a copy of every key
/// before the real work) only costs.
const DIRECT_IDS: usize = 16 * 1024;

/// `f(from, part)` over `items`, over two threads from `min` items (`from` is where
/// `part` starts); the results in order.
pub(crate) fn split_map<'t, T: Sync, U: Send>(
    items: &'t [T],
    min: usize,
    f: impl Fn(usize, &'t [T]) -> Vec<U> + Sync,
) -> Vec<U> {
    let (mut out, more) = split(items, min, f);
    out.extend(more.into_iter().flatten());
    out
}

/// `f(from, part)` for the first half of `items` and, on another thread, the second,
/// from `min` items (`from` is where `part` starts); below that, `f` of them all and
/// `None`.
pub(crate) fn split<'t, T: Sync, U: Send>(
    items: &'t [T],
    min: usize,
    f: impl Fn(usize, &'t [T]) -> U + Sync,
) -> (U, Option<U>) {
    if items.len() < min {
        return (f(0, items), None);
    }
    let half = items.len() / 2;
    let (a, b) = items.split_at(half);
    std::thread::scope(|s| {
        let later = s.spawn(|| f(half, b));
        let first = f(0, a);
        match later.join() {
            Ok(second) => (first, Some(second)),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

impl<'a> IdIndex<'a> {
    /// Indexes `ids` by position. Returns the index (which keeps the first position of a
    /// repeated id) and the positions that repeat an earlier id, ascending.
    pub(crate) fn build(ids: Vec<&'a str>) -> (IdIndex<'a>, Vec<u32>) {
        let parts = if ids.len() <= DIRECT_IDS {
            1
        } else {
            (ids.len() / PART_IDS).next_power_of_two()
        };
        let two = ids.len() >= PARALLEL_NODES;
        IdIndex::build_in(ids, parts, two)
    }

    /// [`IdIndex::build`] with `parts` partitions (a power of two; 1 is one table,
    /// filled and probed directly), filled on two threads if `two` (and `parts` > 1).
    pub(crate) fn build_in(ids: Vec<&'a str>, parts: usize, two: bool) -> (IdIndex<'a>, Vec<u32>) {
        let n = ids.len();
        let bits = parts.trailing_zeros();
        if bits == 0 {
            // One table: no partition pass, each id hashed and inserted in place.
            let cap = n + n / 2 + 1;
            let mut index = IdIndex {
                ids,
                slots: vec![EMPTY; cap],
                start: vec![0, cap as u32],
                bits,
            };
            let mut repeats = Vec::new();
            for pos in 0..n {
                let name = index.ids[pos];
                let key = Slot::of(name, pos as u32);
                match index.find(&key, name) {
                    Ok(_) => repeats.push(pos as u32),
                    Err(empty) => index.slots[empty] = key,
                }
            }
            return (index, repeats);
        }
        // Each id hashed once (on two threads for a big plan); then each half of the
        // partitions is filled by its own thread: its keys gathered from the hashes in
        // position order, then inserted into its tables.
        let two = two && parts >= 2;
        let mut hashes = vec![0u64; n];
        let hash_into = |out: &mut [u64], names: &[&str]| {
            for (h, name) in out.iter_mut().zip(names) {
                *h = id_hash(name);
            }
        };
        if two {
            let (a, b) = hashes.split_at_mut(n / 2);
            let (x, y) = ids.split_at(n / 2);
            std::thread::scope(|scope| {
                scope.spawn(|| hash_into(b, y));
                hash_into(a, x);
            });
        } else {
            hash_into(&mut hashes, &ids);
        }
        let counts = partition_counts(&hashes, bits);
        // Where each partition's keys start in `order`, and its table in the slots (at
        // most two thirds full, so linear probes stay short).
        let first = prefix_sums(&counts);
        let start = prefix_sums(&counts.iter().map(|&c| c + c / 2 + 1).collect::<Vec<_>>());
        let mut slots = vec![EMPTY; start[parts] as usize];
        let mut order = vec![EMPTY; n];
        let fill = |from: usize, to: usize, order: &mut [Slot], slots: &mut [Slot]| {
            gather(&ids, &hashes, bits, from..to, &first, order);
            // Positions ascend within a partition, so the first of a repeated id goes in
            // first.
            let base = start[from] as usize;
            let mut repeats = Vec::new();
            for key in order.iter() {
                match find_in(slots, base, &start, bits, &ids, key, ids[key.pos as usize]) {
                    Ok(_) => repeats.push(key.pos),
                    Err(empty) => slots[empty] = *key,
                }
            }
            repeats
        };
        let mut repeats = if two {
            let half = parts / 2;
            let (o1, o2) = order.split_at_mut(first[half] as usize);
            let (s1, s2) = slots.split_at_mut(start[half] as usize);
            std::thread::scope(|scope| {
                let later = scope.spawn(|| fill(half, parts, o2, s2));
                let mut repeats = fill(0, half, o1, s1);
                match later.join() {
                    Ok(more) => repeats.extend(more),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
                repeats
            })
        } else {
            fill(0, parts, &mut order, &mut slots)
        };
        repeats.sort_unstable();
        let index = IdIndex {
            ids,
            slots,
            start,
            bits,
        };
        (index, repeats)
    }

    /// Probes for `key`, the key of `name`: the position holding it, or the empty slot
    /// where the probe stopped (where an insert goes).
    fn find(&self, key: &Slot, name: &str) -> Result<u32, usize> {
        find_in(&self.slots, 0, &self.start, self.bits, &self.ids, key, name)
    }

    /// The id at position `i`.
    pub(crate) fn name(&self, i: usize) -> &'a str {
        self.ids[i]
    }

    /// The position of `s`.
    pub(crate) fn get(&self, s: &str) -> Option<u32> {
        self.find(&Slot::of(s, 0), s).ok()
    }

    /// The position of each query ([`validate::NONE`] when absent), probed partition by
    /// partition, on this thread.
    #[cfg(test)]
    pub(crate) fn get_many(&self, queries: &[&str]) -> Vec<u32> {
        self.probe_all(queries, &mut Vec::new())
    }

    /// The position of the name of each of `items` ([`validate::NONE`] when absent),
    /// probed partition by partition. From `min` items the work is split over two
    /// threads: collecting and hashing the names reads each item and each name, wherever
    /// they lie in memory, and two cores wait for memory in parallel.
    pub(crate) fn get_many_split<T: Sync>(
        &self,
        items: &[T],
        name: impl Fn(&T) -> &str + Sync,
        min: usize,
    ) -> Vec<u32> {
        split_map(items, min, |_, part| {
            let queries: Vec<&str> = part.iter().map(&name).collect();
            self.probe_all(&queries, &mut Vec::new())
        })
    }

    fn probe_all(&self, queries: &[&str], order: &mut Vec<Slot>) -> Vec<u32> {
        if self.bits == 0 {
            // One table, small enough to stay in the cache: probed in query order.
            return queries
                .iter()
                .map(|q| self.find(&Slot::of(q, 0), q).unwrap_or(validate::NONE))
                .collect();
        }
        by_partition(queries, self.bits, order);
        let mut out = vec![validate::NONE; queries.len()];
        let mut warm = usize::MAX;
        for key in order.iter() {
            // Read a partition's table front to back before its first probe: sequential
            // reads stream in, random probes would each wait for memory.
            let p = partition_of(key.hash, self.bits);
            if p != warm {
                let (lo, hi) = (self.start[p] as usize, self.start[p + 1] as usize);
                std::hint::black_box(self.slots[lo..hi].iter().fold(0, |a, s| a ^ s.hash));
                warm = p;
            }
            let q = key.pos as usize;
            if let Ok(pos) = self.find(key, queries[q]) {
                out[q] = pos;
            }
        }
        out
    }
}

/// [`IdIndex::find`] in `slots`, the index's slots from `base` on (the partitions one
/// thread fills): the position holding `key`, or the empty slot where the probe stopped,
/// counted from `base`.
fn find_in(
    slots: &[Slot],
    base: usize,
    start: &[u32],
    bits: u32,
    ids: &[&str],
    key: &Slot,
    name: &str,
) -> Result<u32, usize> {
    let p = partition_of(key.hash, bits);
    let (lo, hi) = (start[p] as usize - base, start[p + 1] as usize - base);
    let cap = hi - lo;
    // The hash's low 32 bits scaled to the table (the top bits chose the partition).
    let mut k = (((key.hash & 0xffff_ffff) * cap as u64) >> 32) as usize;
    loop {
        let slot = &slots[lo + k];
        if slot.hash == 0 {
            return Err(lo + k);
        }
        if slot.same_key(key) && (name.len() <= 16 || ids[slot.pos as usize] == name) {
            return Ok(slot.pos);
        }
        k += 1;
        if k == cap {
            k = 0;
        }
    }
}

fn partition_of(hash: u64, bits: u32) -> usize {
    if bits == 0 {
        0
    } else {
        (hash >> (64 - bits)) as usize
    }
}

/// The keys of `names` (numbered by position) into `order`, grouped by partition (a
/// counting sort, stable); returns each partition's count. Two passes over the names, so
/// no intermediate array of keys is allocated.
fn by_partition(names: &[&str], bits: u32, order: &mut Vec<Slot>) -> Vec<u32> {
    let hashes: Vec<u64> = names.iter().map(|s| id_hash(s)).collect();
    let counts = partition_counts(&hashes, bits);
    let first = prefix_sums(&counts);
    order.clear();
    order.resize(names.len(), EMPTY);
    gather(names, &hashes, bits, 0..counts.len(), &first, order);
    counts
}

/// How many of `hashes` fall in each of the `1 << bits` partitions.
fn partition_counts(hashes: &[u64], bits: u32) -> Vec<u32> {
    let mut counts = vec![0u32; 1 << bits];
    for &h in hashes {
        counts[partition_of(h, bits)] += 1;
    }
    counts
}

/// Where each partition's run starts, and the total after the last.
fn prefix_sums(counts: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(counts.len() + 1);
    let mut sum = 0u32;
    for &c in counts {
        out.push(sum);
        sum += c;
    }
    out.push(sum);
    out
}

/// The keys of the names whose partitions are in `parts` into `order` (which holds just
/// those partitions' runs, the first starting at `first[parts.start]`), each run in
/// position order (a stable counting sort).
fn gather(
    names: &[&str],
    hashes: &[u64],
    bits: u32,
    parts: std::ops::Range<usize>,
    first: &[u32],
    order: &mut [Slot],
) {
    let base = first[parts.start];
    let mut at: Vec<u32> = first[parts.clone()].iter().map(|f| f - base).collect();
    for (i, (s, &hash)) in names.iter().zip(hashes).enumerate() {
        let p = partition_of(hash, bits);
        if parts.contains(&p) {
            order[at[p - parts.start] as usize] = Slot::with_hash(s, i as u32, hash);
            at[p - parts.start] += 1;
        }
    }
}
