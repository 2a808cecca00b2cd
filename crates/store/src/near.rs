//! The stored tree as a write that places one task sees it: `task create` and `task edit`
//! decide against [`Around`], which a [`Near`] answers with a few indexed reads around
//! the task (its parent chain, its dependencies, a group's children) and a [`Whole`]
//! answers from every stored task. A question [`Near`] cannot settle within its budget
//! of reads (a dependency search that fans out over a large plan, a possible deadlock,
//! a tree too deep) ends the near attempt with [`EngineError::WholeTree`], and the
//! write is decided again over the whole tree, where the refusal's exact wording comes
//! from the same checks `plan import` runs. So a store of 100,000 tasks takes a new
//! task in a few reads, and never a placement the whole-tree checks would refuse.

use std::collections::{HashMap, HashSet, VecDeque};

use warden_core::head::TaskHead;
use warden_core::model::{Task, TaskId};
use warden_core::tree::MAX_DEPTH;

use crate::engine::EngineError;
use crate::{Batch, Store};

/// How many tasks a [`Near`] reads before it gives the decision to the whole tree.
pub const NEAR_BUDGET: usize = 512;

/// The stored tree, as far as a write that places one task needs it.
pub trait Around {
    /// The stored head of `id`; `None` when there is no such task.
    fn head(&mut self, id: &TaskId) -> Result<Option<TaskHead>, EngineError>;
    /// The stored task `id` in full.
    fn task(&mut self, id: &TaskId) -> Result<Option<Task>, EngineError>;
    /// The ids of the stored tasks whose parent is `id`.
    fn child_ids(&mut self, id: &TaskId) -> Result<Vec<TaskId>, EngineError>;
    /// The heads of every stored task below `id`.
    fn descendants(&mut self, id: &TaskId) -> Result<Vec<TaskHead>, EngineError>;
    /// Is this the whole tree? Then a check that would otherwise hand over to it
    /// answers itself (`false`: [`Near`]).
    fn is_whole(&self) -> bool;
    /// Does `id` exist?
    fn exists(&mut self, id: &TaskId) -> Result<bool, EngineError> {
        Ok(self.head(id)?.is_some())
    }
}

/// [`Around`] from a few reads of the store's indexes, each answer kept; past
/// [`NEAR_BUDGET`] tasks read it answers [`EngineError::WholeTree`].
pub struct Near<'a> {
    store: &'a dyn Store,
    heads: HashMap<TaskId, Option<TaskHead>>,
    kids: HashMap<TaskId, Vec<TaskId>>,
    read: usize,
}

impl std::fmt::Debug for Near<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Near").field("read", &self.read).finish()
    }
}

impl<'a> Near<'a> {
    /// A view of `store` with nothing read yet.
    pub fn new(store: &'a dyn Store) -> Near<'a> {
        Near {
            store,
            heads: HashMap::new(),
            kids: HashMap::new(),
            read: 0,
        }
    }

    fn spend(&mut self, n: usize) -> Result<(), EngineError> {
        self.read += n.max(1);
        if self.read > NEAR_BUDGET {
            return Err(EngineError::WholeTree);
        }
        Ok(())
    }
}

impl Around for Near<'_> {
    fn head(&mut self, id: &TaskId) -> Result<Option<TaskHead>, EngineError> {
        if let Some(h) = self.heads.get(id) {
            return Ok(h.clone());
        }
        self.spend(1)?;
        let h = self
            .store
            .heads(std::slice::from_ref(id))?
            .into_iter()
            .next();
        self.heads.insert(id.clone(), h.clone());
        Ok(h)
    }

    fn task(&mut self, id: &TaskId) -> Result<Option<Task>, EngineError> {
        self.spend(1)?;
        Ok(self.store.get(id)?)
    }

    fn child_ids(&mut self, id: &TaskId) -> Result<Vec<TaskId>, EngineError> {
        if let Some(k) = self.kids.get(id) {
            return Ok(k.clone());
        }
        let k = self.store.child_ids(id)?;
        self.spend(k.len())?;
        self.kids.insert(id.clone(), k.clone());
        Ok(k)
    }

    fn descendants(&mut self, id: &TaskId) -> Result<Vec<TaskHead>, EngineError> {
        let d = self.store.descendants(id)?;
        self.spend(d.len())?;
        Ok(d)
    }

    fn is_whole(&self) -> bool {
        false
    }
}

/// [`Around`] over every stored task (in id order, as the store lists them).
#[derive(Debug)]
pub struct Whole<'a> {
    tasks: &'a [Task],
    parents: Option<HashMap<&'a TaskId, Vec<&'a TaskId>>>,
}

impl<'a> Whole<'a> {
    /// The tree of `tasks`, sorted by id.
    pub fn new(tasks: &'a [Task]) -> Whole<'a> {
        Whole {
            tasks,
            parents: None,
        }
    }

    fn find(&self, id: &TaskId) -> Option<&'a Task> {
        self.tasks
            .binary_search_by(|t| t.id().cmp(id))
            .ok()
            .map(|k| &self.tasks[k])
    }

    fn children_of(&mut self) -> &HashMap<&'a TaskId, Vec<&'a TaskId>> {
        let tasks = self.tasks;
        self.parents.get_or_insert_with(|| {
            let mut m: HashMap<&TaskId, Vec<&TaskId>> = HashMap::new();
            for t in tasks {
                if let Some(p) = &t.spec.parent {
                    m.entry(p).or_default().push(t.id());
                }
            }
            m
        })
    }
}

impl Around for Whole<'_> {
    fn head(&mut self, id: &TaskId) -> Result<Option<TaskHead>, EngineError> {
        Ok(self.find(id).map(Task::head))
    }

    fn task(&mut self, id: &TaskId) -> Result<Option<Task>, EngineError> {
        Ok(self.find(id).cloned())
    }

    fn child_ids(&mut self, id: &TaskId) -> Result<Vec<TaskId>, EngineError> {
        Ok(self
            .children_of()
            .get(id)
            .map(|k| k.iter().map(|&c| c.clone()).collect())
            .unwrap_or_default())
    }

    fn descendants(&mut self, id: &TaskId) -> Result<Vec<TaskHead>, EngineError> {
        let mut out = Vec::new();
        let mut todo = vec![id.clone()];
        while let Some(x) = todo.pop() {
            for c in self.child_ids(&x)? {
                if let Some(t) = self.find(&c) {
                    out.push(t.head());
                }
                if out.len() > self.tasks.len() {
                    break; // a stored cycle of parents: every task is below already
                }
                todo.push(c);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out.dedup_by(|a, b| a.id == b.id);
        Ok(out)
    }

    fn is_whole(&self) -> bool {
        true
    }
}

/// The batch's tasks as they will be: the ones it creates or changes (`Some`) and the
/// ones it removes (`None`).
pub(crate) fn batch_heads(batch: &Batch) -> HashMap<&TaskId, Option<&Task>> {
    batch
        .changes
        .iter()
        .filter_map(|ch| match (&ch.before, &ch.after) {
            (_, Some(a)) => Some((a.id(), Some(a))),
            (Some(b), None) => Some((b.id(), None)),
            (None, None) => None,
        })
        .collect()
}

/// Hands a batch that creates or moves tasks to the whole tree unless every task it
/// places ends within [`MAX_DEPTH`] levels, counted from stored parents near it.
pub fn settle_depth(tree: &mut dyn Around, batch: &Batch) -> Result<(), EngineError> {
    let batch_tasks = batch_heads(batch);
    for ch in &batch.changes {
        let (moved, t) = match (&ch.before, &ch.after) {
            (None, Some(a)) => (false, a),
            (Some(b), Some(a)) if b.spec.parent != a.spec.parent => (true, a),
            _ => continue,
        };
        // The level of its parent, walking up over the batch and then the store.
        let mut level = 1;
        let mut up = t.spec.parent.clone();
        while let Some(p) = up {
            level += 1;
            if level > MAX_DEPTH || p == *t.id() {
                return Err(EngineError::WholeTree);
            }
            up = match batch_tasks.get(&p) {
                Some(Some(b)) => b.spec.parent.clone(),
                Some(None) => None,
                None => tree.head(&p)?.and_then(|h| h.parent),
            };
        }
        // A moved task brings what lies below it along.
        if moved {
            let below = tree.descendants(t.id())?;
            let parent_of: HashMap<&TaskId, Option<&TaskId>> =
                below.iter().map(|h| (&h.id, h.parent.as_ref())).collect();
            for h in &below {
                let mut depth = 0;
                let mut at = Some(&h.id);
                while let Some(x) = at {
                    if x == t.id() {
                        break;
                    }
                    depth += 1;
                    if level + depth > MAX_DEPTH {
                        return Err(EngineError::WholeTree);
                    }
                    at = parent_of.get(x).copied().flatten();
                }
            }
        }
    }
    Ok(())
}

/// One end of the two a task's work has in the tree-deadlock check
/// ([`warden_core::tree::deadlocks`]): it starts, or it finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum End {
    Start,
    Finish,
}

/// Hands a batch to the whole tree when its new dependencies or its new place might
/// close a wait that never ends. The whole-tree check orders each task's start and
/// finish: a start waits for each dependency's finish and for its parent's start, a
/// finish for its own start and for each child's finish. A cycle the batch makes runs
/// through one of the orderings it adds, so it is enough to search from the far end of
/// each new ordering for its near end, over the stored orderings and the batch's (the
/// ones it removes kept: a search that finds too much only costs the whole-tree check).
pub fn settle_deadlock(tree: &mut dyn Around, batch: &Batch) -> Result<(), EngineError> {
    let batch_tasks = batch_heads(batch);
    // The new orderings: (waits, for).
    let mut new: Vec<((TaskId, End), (TaskId, End))> = Vec::new();
    for ch in &batch.changes {
        let Some(a) = &ch.after else { continue };
        let old_deps: &[TaskId] = ch.before.as_ref().map_or(&[], |b| &b.spec.depends_on);
        for d in a.spec.depends_on.iter().filter(|d| !old_deps.contains(d)) {
            new.push(((a.id().clone(), End::Start), (d.clone(), End::Finish)));
        }
        let old_parent = ch.before.as_ref().map(|b| &b.spec.parent);
        if old_parent != Some(&a.spec.parent)
            && let Some(p) = &a.spec.parent
        {
            new.push(((a.id().clone(), End::Start), (p.clone(), End::Start)));
            new.push(((p.clone(), End::Finish), (a.id().clone(), End::Finish)));
        }
    }
    if new.is_empty() {
        return Ok(());
    }
    // The batch's children of each task, beside the stored ones.
    let mut batch_kids: HashMap<&TaskId, Vec<&TaskId>> = HashMap::new();
    for t in batch_tasks.values().flatten() {
        if let Some(p) = &t.spec.parent {
            batch_kids.entry(p).or_default().push(t.id());
        }
    }
    for (near_end, far_end) in &new {
        let mut seen: HashSet<(TaskId, End)> = HashSet::new();
        let mut todo: VecDeque<(TaskId, End)> = VecDeque::from([far_end.clone()]);
        while let Some(v) = todo.pop_front() {
            if v == *near_end {
                return Err(EngineError::WholeTree);
            }
            if !seen.insert(v.clone()) {
                continue;
            }
            let (id, end) = v;
            let stored = match batch_tasks.get(&id) {
                Some(_) => None,
                None => tree.head(&id)?,
            };
            match end {
                End::Start => {
                    let mut deps: Vec<TaskId> = Vec::new();
                    let mut parents: Vec<TaskId> = Vec::new();
                    if let Some(t) = batch_tasks.get(&id).copied().flatten() {
                        deps.extend(t.spec.depends_on.iter().cloned());
                        parents.extend(t.spec.parent.iter().cloned());
                        // What it waited for before the batch, too.
                        if let Some(h) = tree.head(&id)? {
                            deps.extend(h.depends_on);
                            parents.extend(h.parent);
                        }
                    } else if let Some(h) = stored {
                        deps = h.depends_on;
                        parents.extend(h.parent);
                    }
                    todo.extend(deps.into_iter().map(|d| (d, End::Finish)));
                    todo.extend(parents.into_iter().map(|p| (p, End::Start)));
                }
                End::Finish => {
                    todo.push_back((id.clone(), End::Start));
                    let mut kids = if batch_tasks.get(&id) == Some(&None) {
                        Vec::new()
                    } else {
                        tree.child_ids(&id)?
                    };
                    if let Some(k) = batch_kids.get(&id) {
                        kids.extend(k.iter().map(|&c| c.clone()));
                    }
                    todo.extend(kids.into_iter().map(|c| (c, End::Finish)));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{check_deadlock, check_depth, misplaced, misplaced_in};
    use crate::sqlite::SqliteStore;
    use proptest::prelude::*;
    use warden_core::event::Actor;
    use warden_core::model::{TaskSpec, WorkflowKind};
    use warden_core::ops::{self, Ctx, Initial};

    fn id(i: usize) -> TaskId {
        TaskId::new(&format!("t{i}")).unwrap()
    }

    fn temp_store() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("warden.db"), 5000).unwrap();
        (dir, s)
    }

    /// A stored task: its parent, its dependencies, and how it was made (0 pending, 1
    /// done, 2 cancelled, 3 stuck).
    #[derive(Clone, Debug)]
    struct Made {
        parent: Option<usize>,
        deps: Vec<usize>,
        kind: u8,
    }

    fn store_of(made: &[Made]) -> (tempfile::TempDir, SqliteStore) {
        let (dir, s) = temp_store();
        let ctx = Ctx::fixed(Actor::Person);
        let changes = made
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let mut spec = TaskSpec::new(id(i), WorkflowKind::Review, 2);
                spec.parent = m.parent.map(id);
                spec.depends_on = m.deps.iter().map(|&d| id(d)).collect();
                let initial = Initial {
                    passes: m.kind == 1,
                    attempts: if m.kind == 3 { 2 } else { 0 },
                    cancelled: m.kind == 2,
                };
                ops::create(spec, initial, &ctx).unwrap()
            })
            .collect();
        s.commit(Batch {
            changes,
            ..Default::default()
        })
        .unwrap();
        (dir, s)
    }

    /// What the near checks make of a batch: `Ok(None)` taken, `Ok(Some(why))` refused as
    /// misplaced, `Err(())` handed to the whole tree.
    fn near_verdict(store: &dyn Store, batch: &Batch) -> Result<Option<String>, ()> {
        let mut tree = Near::new(store);
        let go = |tree: &mut Near<'_>| -> Result<Option<String>, EngineError> {
            if let Some(why) = misplaced_in(tree, batch)? {
                return Ok(Some(why));
            }
            settle_depth(tree, batch)?;
            settle_deadlock(tree, batch)?;
            Ok(None)
        };
        match go(&mut tree) {
            Ok(v) => Ok(v),
            Err(EngineError::WholeTree) => Err(()),
            Err(e) => panic!("{e}"),
        }
    }

    /// The whole tree's checks: `None` taken, else the refusal.
    fn whole_verdict(all: &[Task], batch: &Batch) -> Option<String> {
        if let Some(why) = misplaced(all, batch) {
            return Some(why);
        }
        if let Err(e) = check_depth(all.iter().map(|t| (t.id(), t.spec.parent.as_ref())), batch) {
            return Some(e.to_string());
        }
        check_deadlock(
            all.iter()
                .map(|t| (t.id(), t.spec.parent.as_ref(), &t.spec.depends_on[..])),
            batch,
        )
        .err()
        .map(|e| e.to_string())
    }

    /// A new task `t{n}` under `parent`, after `deps`.
    fn create_batch(n: usize, parent: Option<usize>, deps: &[usize]) -> Batch {
        let mut spec = TaskSpec::new(id(n), WorkflowKind::Review, 2);
        spec.parent = parent.map(id);
        spec.depends_on = deps.iter().map(|&d| id(d)).collect();
        Batch {
            changes: vec![ops::create(spec, Initial::NEW, &Ctx::fixed(Actor::Person)).unwrap()],
            ..Default::default()
        }
    }

    /// Task `t{i}` moved under `parent` (when given) with `deps` added.
    fn edit_batch(all: &[Task], i: usize, parent: Option<Option<usize>>, deps: &[usize]) -> Batch {
        let task = &all[all.binary_search_by(|t| t.id().cmp(&id(i))).unwrap()];
        let mut spec = task.spec.clone();
        if let Some(p) = parent {
            spec.parent = p.map(id);
        }
        for d in deps.iter().map(|&d| id(d)) {
            if !spec.depends_on.contains(&d) {
                spec.depends_on.push(d);
            }
        }
        Batch {
            changes: vec![ops::edit(task, spec, &Ctx::fixed(Actor::Person)).unwrap()],
            ..Default::default()
        }
    }

    fn forest() -> impl Strategy<Value = Vec<Made>> {
        (2usize..14).prop_flat_map(|n| {
            proptest::collection::vec(
                (
                    any::<prop::sample::Index>(),
                    any::<bool>(),
                    proptest::collection::vec(any::<prop::sample::Index>(), 0..3),
                    0u8..6,
                ),
                n,
            )
            .prop_map(|rows| {
                rows.into_iter()
                    .enumerate()
                    .map(|(i, (p, root, deps, kind))| Made {
                        // Parents come before their children: no cycle of parents.
                        parent: (i > 0 && !root).then(|| p.index(i)),
                        deps: if i == 0 {
                            Vec::new()
                        } else {
                            let mut d: Vec<usize> = deps.iter().map(|x| x.index(i)).collect();
                            d.sort_unstable();
                            d.dedup();
                            d
                        },
                        // Mostly pending, so that most placements are allowed.
                        kind: kind.saturating_sub(2),
                    })
                    .collect()
            })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// What the near checks take, the whole tree takes; what they refuse, it refuses
        /// in the same words. (Whatever they cannot settle goes to the whole tree.)
        #[test]
        fn near_never_takes_what_the_whole_tree_refuses(
            made in forest(),
            edit in any::<bool>(),
            at in any::<prop::sample::Index>(),
            parent in proptest::option::of(any::<prop::sample::Index>()),
            deps in proptest::collection::vec(any::<prop::sample::Index>(), 0..3),
        ) {
            let n = made.len();
            let (_dir, store) = store_of(&made);
            let all = store.list().unwrap();
            // A stored tree that already waits on itself is not one Warden keeps.
            let stored: Vec<(&TaskId, Option<&TaskId>, &[TaskId])> = all
                .iter()
                .map(|t| (t.id(), t.spec.parent.as_ref(), &t.spec.depends_on[..]))
                .collect();
            prop_assume!(warden_core::tree::deadlocks(&stored).is_empty());
            let deps: Vec<usize> = deps.iter().map(|d| d.index(n)).collect();
            let batch = if edit {
                let i = at.index(n);
                let parent = parent.map(|p| Some(p.index(n))).filter(|p| *p != Some(i));
                // Moving a task under its own descendant is refused before these checks.
                if let Some(Some(p)) = parent {
                    let mut up = Some(p);
                    while let Some(x) = up {
                        prop_assume!(x != i);
                        up = made[x].parent;
                    }
                }
                let deps: Vec<usize> = deps.into_iter().filter(|&d| d != i).collect();
                edit_batch(&all, i, parent, &deps)
            } else {
                create_batch(n, parent.map(|p| p.index(n)), &deps)
            };
            let whole = whole_verdict(&all, &batch);
            match near_verdict(&store, &batch) {
                Ok(None) => prop_assert_eq!(whole, None),
                Ok(Some(why)) => prop_assert_eq!(whole, Some(why)),
                Err(()) => {}
            }
        }
    }

    /// The near checks settle the usual placements themselves: a task under a group of
    /// a plain plan, after a leaf in another group.
    #[test]
    fn a_plain_placement_is_settled_near_the_task() {
        // t0, t1 groups; t2..t5 leaves, two in each; t4 after t2.
        let made = [
            Made {
                parent: None,
                deps: vec![],
                kind: 0,
            },
            Made {
                parent: None,
                deps: vec![],
                kind: 0,
            },
            Made {
                parent: Some(0),
                deps: vec![],
                kind: 0,
            },
            Made {
                parent: Some(0),
                deps: vec![],
                kind: 0,
            },
            Made {
                parent: Some(1),
                deps: vec![2],
                kind: 0,
            },
            Made {
                parent: Some(1),
                deps: vec![],
                kind: 0,
            },
        ];
        let (_dir, store) = store_of(&made);
        assert_eq!(
            near_verdict(&store, &create_batch(6, Some(1), &[3])),
            Ok(None)
        );
        assert_eq!(
            near_verdict(&store, &create_batch(6, None, &[0, 4])),
            Ok(None)
        );
        let all = store.list().unwrap();
        assert_eq!(
            near_verdict(&store, &edit_batch(&all, 5, Some(Some(0)), &[])),
            Ok(None)
        );
    }

    /// A placement that closes a wait goes to the whole tree, which refuses it: a task
    /// under the group it depends on, and a group made to wait for a task inside it.
    #[test]
    fn a_possible_deadlock_goes_to_the_whole_tree() {
        let made = [
            Made {
                parent: None,
                deps: vec![],
                kind: 0,
            },
            Made {
                parent: Some(0),
                deps: vec![],
                kind: 0,
            },
            Made {
                parent: Some(0),
                deps: vec![],
                kind: 0,
            },
        ];
        let (_dir, store) = store_of(&made);
        let all = store.list().unwrap();
        for batch in [
            create_batch(3, Some(0), &[0]),
            edit_batch(&all, 0, None, &[1]),
            edit_batch(&all, 2, None, &[0]),
        ] {
            assert_eq!(near_verdict(&store, &batch), Err(()), "{batch:?}");
            let why = whole_verdict(&all, &batch).expect("the whole tree refuses it");
            assert!(why.contains("never"), "{why}");
        }
    }

    /// A chain at the depth limit: a task placed under its end goes to the whole tree,
    /// which refuses it; one level higher is settled near it.
    #[test]
    fn a_placement_past_the_depth_limit_goes_to_the_whole_tree() {
        // A chain of MAX_DEPTH tasks, then a root with one child.
        let mut made: Vec<Made> = (0..MAX_DEPTH)
            .map(|i| Made {
                parent: i.checked_sub(1),
                deps: vec![],
                kind: 0,
            })
            .collect();
        let (root, n) = (MAX_DEPTH, MAX_DEPTH + 2);
        made.push(Made {
            parent: None,
            deps: vec![],
            kind: 0,
        });
        made.push(Made {
            parent: Some(root),
            deps: vec![],
            kind: 0,
        });
        let (_dir, store) = store_of(&made);
        let all = store.list().unwrap();
        // Created under the chain's end; the root (with its child) moved under the task
        // one above it.
        for deep in [
            create_batch(n, Some(MAX_DEPTH - 1), &[]),
            edit_batch(&all, root, Some(Some(MAX_DEPTH - 2)), &[]),
        ] {
            assert_eq!(near_verdict(&store, &deep), Err(()), "{deep:?}");
            assert!(whole_verdict(&all, &deep).is_some_and(|w| w.contains("levels deep")));
        }
        for fits in [
            create_batch(n, Some(MAX_DEPTH - 2), &[]),
            edit_batch(&all, root, Some(Some(MAX_DEPTH - 3)), &[]),
        ] {
            assert_eq!(near_verdict(&store, &fits), Ok(None), "{fits:?}");
            assert_eq!(whole_verdict(&all, &fits), None);
        }
    }

    /// More reads than the budget hand the decision to the whole tree.
    #[test]
    fn a_search_past_the_budget_goes_to_the_whole_tree() {
        // A group of NEAR_BUDGET + 10 leaves; a new task depends on the group and sits
        // under a task the group's finish waits for through its children.
        let n = NEAR_BUDGET + 10;
        let mut made = vec![Made {
            parent: None,
            deps: vec![],
            kind: 0,
        }];
        made.extend((0..n).map(|_| Made {
            parent: Some(0),
            deps: vec![],
            kind: 0,
        }));
        made.push(Made {
            parent: None,
            deps: vec![],
            kind: 0,
        });
        let (_dir, store) = store_of(&made);
        assert_eq!(
            near_verdict(&store, &create_batch(n + 2, Some(n + 1), &[0])),
            Err(())
        );
        assert_eq!(
            near_verdict(&store, &create_batch(n + 2, Some(n + 1), &[5])),
            Ok(None)
        );
    }
}
