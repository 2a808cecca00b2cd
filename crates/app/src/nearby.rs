//! Views of a few tasks without reading every task: groups' statuses derived from the
//! store's tally, children and dependencies read by index, tree order from each task's
//! ancestors. What `task show`, `task list --status`, `--needs-me` and `warden status`
//! cost grows with what they show, not with the store.

use std::collections::{BTreeMap, BTreeSet};

use warden_core::head::{self, TaskHead};
use warden_core::model::{Status, Task, TaskId};

use crate::view::{Around, Children, TaskView};
use crate::{App, Result};

/// Every group of the store (a task with children), with its derived status, read from
/// the tally and the groups' own heads. `Default` is no group at all: what a view needs
/// of the groups when neither its task nor any dependency of it is one.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    /// Each group's head.
    pub(crate) heads: BTreeMap<TaskId, TaskHead>,
    /// Each group's status and `passes` as views show them.
    pub(crate) derived: BTreeMap<TaskId, (Status, bool)>,
}

impl Groups {
    /// Is this task a group?
    pub(crate) fn has(&self, id: &TaskId) -> bool {
        self.heads.contains_key(id)
    }

    /// The dependencies that hold `t` back: its own and every ancestor's (each ancestor
    /// is a group, so its head is here).
    pub(crate) fn held_by<'a>(&'a self, t: &'a Task) -> impl Iterator<Item = &'a TaskId> + 'a {
        let mut up = t.spec.parent.as_ref();
        let mut steps = self.heads.len();
        let ancestors = std::iter::from_fn(move || {
            let h = self.heads.get(up?)?;
            // Parents form no cycle in a stored tree; the bound only makes sure.
            steps = steps.checked_sub(1)?;
            up = h.parent.as_ref().filter(|p| **p != h.id);
            Some(h.depends_on.iter())
        });
        t.spec.depends_on.iter().chain(ancestors.flatten())
    }
}

impl App {
    /// The groups and their derived statuses.
    pub(crate) fn groups(&self) -> Result<Groups> {
        let tally = self.eng.store.tally()?;
        let parents: BTreeSet<TaskId> = tally.iter().filter_map(|r| r.parent.clone()).collect();
        let parents: Vec<TaskId> = parents.into_iter().collect();
        // A parent the tally names that is no task is no group (its children are roots).
        let heads: BTreeMap<TaskId, TaskHead> = self
            .eng
            .store
            .heads(&parents)?
            .into_iter()
            .map(|h| (h.id.clone(), h))
            .collect();
        let groups: Vec<(TaskId, Option<TaskId>, Status, bool)> = heads
            .values()
            .map(|h| (h.id.clone(), h.parent.clone(), h.status, h.passes))
            .collect();
        let rows: Vec<(TaskId, Status, bool, u64)> = tally
            .iter()
            .filter_map(|r| r.parent.clone().map(|p| (p, r.status, r.passes, r.n)))
            .collect();
        let derived = head::derive_groups(&groups, &rows);
        Ok(Groups { heads, derived })
    }

    /// The views of `tasks` (in their order), each with its children (when `listing`
    /// them), its status as views show it and whether its dependencies are done, read for
    /// these tasks only.
    pub(crate) fn views_of(
        &self,
        tasks: &[Task],
        groups: &Groups,
        listing: Children,
    ) -> Result<Vec<TaskView>> {
        let deps: BTreeSet<TaskId> = tasks
            .iter()
            .flat_map(|t| groups.held_by(t))
            .filter(|d| !groups.has(d))
            .cloned()
            .collect();
        let deps: Vec<TaskId> = deps.into_iter().collect();
        let dep_status: BTreeMap<TaskId, Status> = self
            .eng
            .store
            .heads(&deps)?
            .into_iter()
            .map(|h| (h.id, h.status))
            .collect();
        let shown = |id: &TaskId| -> Option<Status> {
            match groups.derived.get(id) {
                Some(d) => Some(d.0),
                None => dep_status.get(id).copied(),
            }
        };
        let mut out = Vec::with_capacity(tasks.len());
        for t in tasks {
            let children = if listing == Children::Listed && groups.has(t.id()) {
                self.eng.store.child_ids(t.id())?
            } else {
                Vec::new()
            };
            let (status, passes) = groups
                .derived
                .get(t.id())
                .copied()
                .unwrap_or((t.status(), t.passes()));
            let unmet = groups
                .held_by(t)
                .find(|d| shown(d) != Some(Status::Done))
                .map(|d| (d.clone(), shown(d)));
            out.push(TaskView::with(
                t,
                Around {
                    children,
                    group: groups.has(t.id()),
                    status,
                    passes,
                    unmet,
                },
            ));
        }
        Ok(out)
    }

    /// `tasks` in tree order (depth first, siblings and roots by `(order, id)`), reading
    /// only their ancestors, one level at a time. A task whose parent is not stored is a
    /// root, as in every view.
    pub(crate) fn in_tree_order(&self, mut tasks: Vec<Task>) -> Result<Vec<Task>> {
        // id → (order, parent) of the tasks and every ancestor read.
        let mut known: BTreeMap<TaskId, (i64, Option<TaskId>)> = tasks
            .iter()
            .map(|t| (t.id().clone(), (t.spec.order, t.spec.parent.clone())))
            .collect();
        let mut asked: BTreeSet<TaskId> = BTreeSet::new();
        loop {
            let missing: Vec<TaskId> = known
                .values()
                .filter_map(|(_, p)| p.clone())
                .filter(|p| !known.contains_key(p) && !asked.contains(p))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            if missing.is_empty() {
                break;
            }
            for h in self.eng.store.heads(&missing)? {
                known.insert(h.id, (h.order, h.parent));
            }
            asked.extend(missing);
        }
        let path = |id: &TaskId| -> Vec<(i64, TaskId)> {
            let mut out = Vec::new();
            let mut seen = BTreeSet::new();
            let mut at = Some(id.clone());
            while let Some(id) = at {
                let Some((order, parent)) = known.get(&id) else {
                    break;
                };
                if !seen.insert(id.clone()) {
                    break;
                }
                out.push((*order, id.clone()));
                at = parent.clone().filter(|p| p != &id);
            }
            out.reverse();
            out
        };
        tasks.sort_by_cached_key(|t| path(t.id()));
        Ok(tasks)
    }
}
