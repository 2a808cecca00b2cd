//! What the supervisor keeps of the store between passes, so that a pass reads only what
//! can need it: every task's head (a few fields, in tree order, with groups' derived
//! statuses), the tasks that are not at rest in full, and the newest event seen. A wake
//! reads the tasks with events since then and nothing else; the tree order is rebuilt
//! only when the tree itself changes (a task created, removed, moved, reordered, or its
//! dependencies changed). With 100,000 tasks stored and nothing happening, a supervisor
//! reads nothing.

use std::collections::{BTreeMap, BTreeSet};

use warden_core::head::{ChildTally, TaskHead};
use warden_core::model::{Phase, Status, Task, TaskId};
use warden_store::{Store, StoreError};

/// Tasks read at a time when the board is built (so building it never holds them all).
const PAGE: usize = 1000;

/// No node.
const NONE: u32 = u32::MAX;

/// What is compared between two looks at a task to find its outcomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Seen {
    pub(super) status: Status,
    pub(super) crash_count: u32,
    pub(super) attempts: u32,
    pub(super) dead: bool,
    pub(super) healing: Option<Phase>,
}

impl Seen {
    pub(super) fn of(t: &Task) -> Seen {
        Seen {
            status: t.status(),
            crash_count: t.crash_count(),
            attempts: t.attempts(),
            dead: t.is_dead(),
            healing: t.healing(),
        }
    }

    /// A task at rest as its head shows it (at rest: no crash counted, nothing dead,
    /// no heal under way).
    fn of_head(h: &TaskHead) -> Seen {
        Seen {
            status: h.status,
            crash_count: 0,
            attempts: h.attempts,
            dead: false,
            healing: None,
        }
    }
}

/// One task on the board.
#[derive(Debug)]
struct Node {
    head: TaskHead,
    /// The parent's position in `nodes` (`NONE`: a root).
    parent: u32,
    /// Positions of the dependencies that exist.
    deps: Vec<u32>,
    /// Dependencies named that do not exist (never done).
    missing_deps: bool,
    leaf: bool,
    /// The status and `passes` every view shows (a group's derived).
    shown: (Status, bool),
}

/// A task whose stored state changed since the last look, with what it was.
#[derive(Debug)]
pub(super) struct Moved {
    /// The task now (`None`: removed).
    pub(super) task: Option<Task>,
    /// Its state at the last look (`None`: new).
    pub(super) before: Option<Seen>,
    /// Is it a leaf now?
    pub(super) leaf: bool,
}

/// What a wake read: the tasks that changed, and the groups whose last child was done.
#[derive(Debug, Default)]
pub(super) struct Changes {
    pub(super) moved: Vec<Moved>,
    pub(super) groups_done: Vec<TaskId>,
}

/// The supervisor's picture of the store.
#[derive(Debug, Default)]
pub(super) struct Board {
    /// The newest event read.
    seq: u64,
    /// Every task, sorted by id.
    nodes: Vec<Node>,
    /// Positions in depth-first `(order, id)` order.
    dfs: Vec<u32>,
    /// Each position's place in `dfs` (`NONE` off every walk).
    rank: Vec<u32>,
    /// The tasks not at rest that the supervisor may have to act on, in full.
    active: BTreeMap<TaskId, Task>,
    /// The tasks waiting for a person (not at rest, but with nothing for the supervisor
    /// to do until they change: [`Task::waits_for_change`]), as they were. A backlog of
    /// a thousand tasks under review costs a few bytes each, not each task in full.
    waiting: BTreeMap<TaskId, Seen>,
}

impl Board {
    /// Builds the board from every task, a page at a time. Calls `each` with every task
    /// read (the supervisor checks a task at rest for a session still running after its
    /// end was recorded).
    pub(super) fn build(
        store: &dyn Store,
        mut each: impl FnMut(&Task),
    ) -> Result<Board, StoreError> {
        // Read first: a change made while the pages are read is read again at the next
        // wake.
        let mut board = Board {
            seq: store.last_seq()?,
            ..Board::default()
        };
        let mut heads = Vec::new();
        let mut after: Option<TaskId> = None;
        loop {
            let page = store.page(after.as_ref(), PAGE)?;
            let Some(last) = page.last() else { break };
            after = Some(last.id().clone());
            for t in page {
                each(&t);
                let mut h = t.head();
                h.title = String::new();
                heads.push(h);
                if !t.at_rest() {
                    board.keep(t.id(), Some(&t));
                }
            }
        }
        board.rebuild(heads);
        Ok(board)
    }

    /// Replaces every head and recomputes the tree: positions, parents, dependencies,
    /// leaves, depth-first order and the statuses views show.
    fn rebuild(&mut self, mut heads: Vec<TaskHead>) {
        heads.sort_by(|a, b| a.id.cmp(&b.id));
        let pos = |heads: &[TaskHead], id: &TaskId| -> u32 {
            heads
                .binary_search_by(|h| h.id.cmp(id))
                .map_or(NONE, |i| i as u32)
        };
        let mut nodes: Vec<Node> = heads
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let deps: Vec<u32> = h
                    .depends_on
                    .iter()
                    .map(|d| pos(&heads, d))
                    .filter(|&d| d != NONE)
                    .collect();
                // A parent that is not stored (or the task itself) makes a root.
                let parent = match h.parent.as_ref().map(|p| pos(&heads, p)) {
                    Some(p) if p != NONE && p != i as u32 => p,
                    _ => NONE,
                };
                Node {
                    missing_deps: deps.len() != h.depends_on.len(),
                    deps,
                    parent,
                    leaf: true,
                    shown: (h.status, h.passes),
                    head: h.clone(),
                }
            })
            .collect();
        drop(heads);
        let n = nodes.len();
        let mut children: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut roots = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            match node.parent {
                NONE => roots.push(i as u32),
                p => children[p as usize].push(i as u32),
            }
        }
        let key = |nodes: &[Node], i: u32| (nodes[i as usize].head.order, i);
        roots.sort_by_key(|&i| key(&nodes, i));
        for c in &mut children {
            c.sort_by_key(|&i| key(&nodes, i));
        }
        for (i, c) in children.iter().enumerate() {
            nodes[i].leaf = c.is_empty();
        }
        // Depth first without recursion; nodes on a parent cycle (never stored) are
        // reachable from no root and left out, as in every view.
        let mut dfs = Vec::with_capacity(n);
        let mut stack: Vec<u32> = roots.into_iter().rev().collect();
        while let Some(i) = stack.pop() {
            dfs.push(i);
            stack.extend(children[i as usize].iter().rev());
        }
        let mut rank = vec![NONE; n];
        for (k, &i) in dfs.iter().enumerate() {
            rank[i as usize] = k as u32;
        }
        self.nodes = nodes;
        self.dfs = dfs;
        self.rank = rank;
        self.derive();
    }

    /// Recomputes what views show of every group, children first.
    fn derive(&mut self) {
        let mut tallies = vec![ChildTally::default(); self.nodes.len()];
        for node in &mut self.nodes {
            node.shown = (node.head.status, node.head.passes);
        }
        for &i in self.dfs.iter().rev() {
            let node = &mut self.nodes[i as usize];
            if !node.leaf {
                node.shown = tallies[i as usize].derived(node.head.status);
            }
            let (shown, parent) = (node.shown, node.parent);
            if parent != NONE {
                tallies[parent as usize].add(shown.0, shown.1, 1);
            }
        }
    }

    /// Keeps what the supervisor needs of task `id` as it now is (`None`: removed): in
    /// full if it may have to act on it, what it was if it waits for a person, nothing
    /// if it is at rest (its head says it all).
    fn keep(&mut self, id: &TaskId, task: Option<&Task>) {
        match task {
            Some(t) if !t.waits_for_change() => {
                self.waiting.remove(id);
                self.active.insert(id.clone(), t.clone());
            }
            Some(t) if !t.at_rest() => {
                self.active.remove(id);
                self.waiting.insert(id.clone(), Seen::of(t));
            }
            _ => {
                self.active.remove(id);
                self.waiting.remove(id);
            }
        }
    }

    fn position(&self, id: &TaskId) -> Option<usize> {
        self.nodes.binary_search_by(|n| n.head.id.cmp(id)).ok()
    }

    /// Reads what changed since the last look: the tasks with newer events, in full.
    /// Returns each with its state at the last look, and the groups now done.
    pub(super) fn update(&mut self, store: &dyn Store) -> Result<Changes, StoreError> {
        let (ids, seq) = store.changed_since(self.seq)?;
        self.seq = seq;
        if ids.is_empty() {
            return Ok(Changes::default());
        }
        let now: BTreeMap<TaskId, Task> = store
            .get_many(&ids)?
            .into_iter()
            .map(|t| (t.id().clone(), t))
            .collect();
        let groups_before: BTreeMap<TaskId, Status> = self
            .nodes
            .iter()
            .filter(|n| !n.leaf)
            .map(|n| (n.head.id.clone(), n.shown.0))
            .collect();
        let mut moved = Vec::new();
        let mut tree_changed = false;
        for id in &ids {
            let task = now.get(id).cloned();
            let at = self.position(id);
            let before = match (self.active.get(id), self.waiting.get(id), at) {
                (Some(t), _, _) => Some(Seen::of(t)),
                (None, Some(seen), _) => Some(seen.clone()),
                (None, None, Some(p)) => Some(Seen::of_head(&self.nodes[p].head)),
                (None, None, None) => None,
            };
            match (&task, at) {
                (Some(t), Some(p)) => {
                    let old = &self.nodes[p].head;
                    let mut h = t.head();
                    h.title = String::new();
                    tree_changed |= old.parent != h.parent
                        || old.order != h.order
                        || old.depends_on != h.depends_on;
                    self.nodes[p].head = h;
                }
                (Some(_), None) | (None, Some(_)) => tree_changed = true,
                (None, None) => {}
            }
            self.keep(id, task.as_ref());
            moved.push((id.clone(), task, before));
        }
        if tree_changed {
            let mut heads: Vec<TaskHead> = Vec::with_capacity(self.nodes.len() + ids.len());
            for n in std::mem::take(&mut self.nodes) {
                if ids.binary_search(&n.head.id).is_err() {
                    heads.push(n.head);
                }
            }
            for t in now.values() {
                let mut h = t.head();
                h.title = String::new();
                heads.push(h);
            }
            self.rebuild(heads);
        } else {
            self.derive();
        }
        let moved = moved
            .into_iter()
            .map(|(id, task, before)| Moved {
                leaf: self.is_leaf(&id),
                task,
                before,
            })
            .collect();
        let groups_done = self
            .nodes
            .iter()
            .filter(|n| !n.leaf && n.shown.0 == Status::Done)
            .filter(|n| {
                groups_before
                    .get(&n.head.id)
                    .is_some_and(|old| *old != Status::Done)
            })
            .map(|n| n.head.id.clone())
            .collect();
        Ok(Changes { moved, groups_done })
    }

    /// The tasks not at rest that the supervisor may have to act on, in full.
    pub(super) fn active(&self) -> &BTreeMap<TaskId, Task> {
        &self.active
    }

    /// Is the task a leaf (no children; an unknown task counts as one)?
    pub(super) fn is_leaf(&self, id: &TaskId) -> bool {
        self.position(id).is_none_or(|p| self.nodes[p].leaf)
    }

    /// The status every view shows (a group's derived), if the task exists.
    pub(super) fn shown(&self, id: &TaskId) -> Option<(Status, bool)> {
        self.position(id).map(|p| self.nodes[p].shown)
    }

    /// Are all of the task's dependencies done (a group when its children are), and all
    /// of its ancestors'? A group's `depends_on` holds back every leaf below it, as
    /// `plan next` reads it: a person who makes phase 2 depend on phase 1 means its
    /// tasks, which are what runs.
    pub(super) fn deps_done(&self, id: &TaskId) -> bool {
        self.position(id).is_some_and(|p| {
            self.up_from(p).all(|n| {
                !n.missing_deps
                    && n.deps
                        .iter()
                        .all(|&d| self.nodes[d as usize].shown.0 == Status::Done)
            })
        })
    }

    /// What holds a task back: the first dependency, its own or then its ancestors',
    /// that is not done, with the status every view shows (`None`: no such task), and
    /// the task that names it (the task itself or that ancestor). `None` when all are
    /// done, as [`Board::deps_done`] says.
    pub(super) fn unmet(&self, id: &TaskId) -> Option<(TaskId, Option<Status>, &TaskId)> {
        self.up_from(self.position(id)?).find_map(|n| {
            n.head.depends_on.iter().find_map(|d| {
                match self.position(d).map(|q| self.nodes[q].shown.0) {
                    Some(Status::Done) => None,
                    status => Some((d.clone(), status, &n.head.id)),
                }
            })
        })
    }

    /// The node at `p` and its ancestors', nearest first. Parents form no cycle on the
    /// board (`rebuild`); the bound only makes sure.
    fn up_from(&self, p: usize) -> impl Iterator<Item = &Node> + '_ {
        let mut at = Some(p);
        let mut steps = self.nodes.len() + 1;
        std::iter::from_fn(move || {
            steps = steps.checked_sub(1)?;
            let n = &self.nodes[at?];
            at = (n.parent != NONE).then_some(n.parent as usize);
            Some(n)
        })
    }

    /// The task's place in tree order (for sorting what is shown; an unknown task last).
    pub(super) fn rank_of(&self, id: &TaskId) -> u32 {
        self.position(id).map_or(NONE, |p| self.rank[p])
    }

    /// The pending leaves whose dependencies are done, in tree order, skipping those
    /// `skip` says to; at most `max`.
    pub(super) fn ready(&self, max: usize, skip: impl Fn(&TaskId) -> bool) -> Vec<TaskId> {
        let mut out = Vec::new();
        for &i in &self.dfs {
            if out.len() >= max {
                break;
            }
            let n = &self.nodes[i as usize];
            if n.leaf
                && n.head.status == Status::Pending
                && !n.head.active
                && !self.under_cancelled(i as usize)
                && self.deps_done(&n.head.id)
                && !skip(&n.head.id)
            {
                out.push(n.head.id.clone());
            }
        }
        out
    }

    /// Every leaf's id and stored status, in tree order (for the summary at the end of
    /// an idle run).
    pub(super) fn leaves(&self) -> impl Iterator<Item = (&TaskId, Status)> + '_ {
        self.dfs
            .iter()
            .filter(|&&i| self.nodes[i as usize].leaf)
            .map(|&i| {
                let n = &self.nodes[i as usize];
                let status = if self.under_cancelled(i as usize) {
                    Status::Cancelled
                } else {
                    n.head.status
                };
                (&n.head.id, status)
            })
    }

    /// Is an ancestor of the node at `p` cancelled (its own row: a group's cancel, or a
    /// task cancelled before tasks were created under it)? `plan next` counts such a
    /// task as cancelled, and nothing starts it.
    fn under_cancelled(&self, p: usize) -> bool {
        self.up_from(p)
            .skip(1)
            .any(|n| n.head.status == Status::Cancelled)
    }
}

/// Ids of tasks named by directories in `dir` (worktrees), for the done tasks whose
/// worktree is still there.
pub(super) fn dir_ids(dir: &std::path::Path) -> BTreeSet<TaskId> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter_map(|e| TaskId::new(&e.file_name().to_string_lossy()).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_core::event::Actor;
    use warden_core::ops::{self, Change, Ctx, Outcome, TransitionInput};
    use warden_store::Batch;
    use warden_store::sqlite::SqliteStore;

    /// A task under review whose reviewer crashed once: it waits for a person, and what
    /// it was (its crash count) is not in its head.
    fn reviewed_after_a_crash() -> Task {
        serde_json::from_value(serde_json::json!({
            "spec": {"id": "r", "title": "r", "workflow": "review", "max_attempts": 3},
            "runner": {
                "status": "reviewing", "crash_count": 1, "version": 1,
                "created_at": "2026-11-28T00:00:00Z", "updated_at": "2026-11-28T00:00:00Z",
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_task_waiting_for_a_person_is_compared_with_what_it_was_not_with_its_head() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("warden.db"), 5000).unwrap();
        let t = reviewed_after_a_crash();
        assert!(t.waits_for_change() && !t.at_rest());
        store
            .commit(Batch {
                changes: vec![Change {
                    before: None,
                    after: Some(t.clone()),
                    events: Vec::new(),
                    outcome: Outcome::Applied,
                }],
                ..Default::default()
            })
            .unwrap();
        let mut board = Board::build(&store, |_| {}).unwrap();
        assert!(
            board.active().is_empty(),
            "kept as what it was, not in full"
        );
        // A person cancels it: the wake reads it, with what it was before.
        let ctx = Ctx {
            now: "2026-11-28T00:01:00Z".parse().unwrap(),
            actor: Actor::Person,
            limits: Default::default(),
            task_file: "TASK.md",
        };
        let cancel =
            ops::transition(&t, Status::Cancelled, &TransitionInput::default(), &ctx).unwrap();
        store
            .commit(Batch {
                changes: vec![cancel],
                ..Default::default()
            })
            .unwrap();
        let changes = board.update(&store).unwrap();
        assert_eq!(changes.moved.len(), 1);
        assert_eq!(changes.moved[0].before, Some(Seen::of(&t)));
        assert_eq!(changes.moved[0].before.as_ref().unwrap().crash_count, 1);
    }
}
