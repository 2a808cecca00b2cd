//! `task edit`: a person's change of a task's place in the plan — its title, its
//! dependencies, its parent and order, how many attempts it may use. It is the way out
//! of a plan stuck on a dependency that can never be done (a cancelled task stays
//! cancelled): drop that dependency, or name another. One `task.edited` event, under the
//! same whole-tree rules as an import (every named task exists, no cycle of parents or
//! dependencies, no dependency that can never be met, the depth limit).

use warden_core::failure::Failure;
use warden_core::model::{Status, TaskId, TaskSpec};
use warden_core::ops;
use warden_core::tree::PlanError;
use warden_store::near::Around;
use warden_store::{Batch, EngineError};

use crate::view::TaskView;
use crate::{App, Result};

/// What `task edit` changes; what is left out is kept.
#[derive(Clone, Debug, Default)]
pub struct EditTask {
    /// A new one-line title.
    pub title: Option<String>,
    /// Tasks to add to `depends_on` (each must exist).
    pub depends_on: Vec<String>,
    /// Tasks to remove from `depends_on` (each must be one of them).
    pub drop_depends_on: Vec<String>,
    /// A new parent: `Some(None)` makes the task a root.
    pub parent: Option<Option<String>>,
    /// A new sort key among its siblings.
    pub order: Option<i64>,
    /// A new number of failed attempts allowed before the task is stuck.
    pub max_attempts: Option<u32>,
}

impl EditTask {
    /// Does it ask for any change at all?
    pub fn is_empty(&self) -> bool {
        self.title.is_none()
            && self.depends_on.is_empty()
            && self.drop_depends_on.is_empty()
            && self.parent.is_none()
            && self.order.is_none()
            && self.max_attempts.is_none()
    }
}

/// What `task edit` did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Edited {
    /// The task as it is now.
    pub task: TaskView,
    /// The fields that changed, in plan order, empty when the edit asked for what the
    /// task already had.
    pub changed: Vec<FieldChange>,
    /// For a task `plan sync` keeps: the file it comes from, whose next sync sets the
    /// task's title, dependencies, parent and order from that file again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub synced_from: Option<String>,
}

/// One field `task edit` changed, with its value before and after (as `plan export`
/// writes it).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FieldChange {
    /// `title`, `depends_on`, `parent`, `order` or `max_attempts`.
    pub field: &'static str,
    /// Its value before.
    pub was: serde_json::Value,
    /// Its value now.
    pub now: serde_json::Value,
}

impl App {
    /// `task edit`: replaces the fields `req` names, checked against the whole tree.
    /// Nothing is written when nothing changes.
    pub fn edit(&self, id: &TaskId, req: &EditTask) -> Result<Edited> {
        if req.is_empty() {
            return Err(Failure::usage(
                "nothing to edit; give --title, --depends-on, --drop-depends-on, --parent, --no-parent, --order or --max-attempts",
            ));
        }
        let add = ids(&req.depends_on)?;
        let drop = ids(&req.drop_depends_on)?;
        if let Some(d) = add.iter().find(|d| drop.contains(d)) {
            return Err(Failure::usage(format!(
                "{d} is both added and dropped; name it in one of --depends-on and --drop-depends-on"
            )));
        }
        let parent = match &req.parent {
            Some(Some(p)) => Some(Some(crate::task_id(p)?)),
            Some(None) => Some(None),
            None => None,
        };
        let shown = self.task_file_shown(id);
        let mut changed = Vec::new();
        // Decided near the task (its parents, its dependencies' chains), so a store of
        // 100,000 tasks is edited in a few reads (see `warden_store::near`).
        let changes = self.eng.write_around(|tree| {
            let Some(task) = tree.task(id)? else {
                return Err(Failure::not_found(format!(
                    "task {id} does not exist; `warden task list` shows the tasks"
                ))
                .into());
            };
            let task = &task;
            let mut spec = task.spec.clone();
            if let Some(t) = &req.title {
                spec.title = t.clone();
            }
            for d in &drop {
                let Some(k) = spec.depends_on.iter().position(|x| x == d) else {
                    return Err(Failure::refused(format!(
                        "{id} does not depend on {d}; its dependencies: {}",
                        listed(&task.spec.depends_on)
                    ))
                    .into());
                };
                spec.depends_on.remove(k);
            }
            for d in &add {
                if !tree.exists(d)? {
                    return Err(Failure::not_found(format!(
                        "dependency {d} does not exist; create it first"
                    ))
                    .into());
                }
                if !spec.depends_on.contains(d) {
                    spec.depends_on.push(d.clone());
                }
            }
            if let Some(p) = &parent {
                if let Some(p) = p {
                    if !tree.exists(p)? {
                        return Err(Failure::not_found(format!(
                            "parent {p} does not exist; create it first or leave out the parent"
                        ))
                        .into());
                    }
                    if let Some(path) = parent_cycle(tree, id, p)? {
                        return Err(
                            Failure::refused(PlanError::ParentCycle(path).to_string()).into()
                        );
                    }
                }
                spec.parent = p.clone();
            }
            if let Some(o) = req.order {
                spec.order = o;
            }
            if let Some(m) = req.max_attempts {
                // A task still under way must keep an attempt to make: the one at
                // `attempts == max_attempts` is stuck (`plan next` and the supervisor
                // read it so), and only `task retry` starts a stuck task again.
                let used = task.attempts();
                let under_way = !matches!(
                    task.status(),
                    Status::Done | Status::Cancelled | Status::Stuck
                );
                if under_way && m > 0 && m != task.spec.max_attempts && m <= used {
                    return Err(Failure::refused(format!(
                        "{id} has used {used} attempt(s); give --max-attempts {} or more",
                        used + 1
                    ))
                    .into());
                }
                // A stuck task shows its attempts against its limit ("2/1" told nothing
                // true); a retry starts the count again, and the limit may fall then.
                if task.status() == Status::Stuck
                    && m > 0
                    && m != task.spec.max_attempts
                    && m < used
                {
                    return Err(Failure::refused(format!(
                        "{id} has used {used} attempt(s); give --max-attempts {used} or more, or lower it after `warden task retry {id}` (a retry starts the count again)"
                    ))
                    .into());
                }
                spec.max_attempts = m;
            }
            if let Some(path) = dependency_cycle(tree, &spec)? {
                return Err(Failure::refused(PlanError::DependencyCycle(path).to_string()).into());
            }
            changed = what_changed(&task.spec, &spec);
            if changed.is_empty() {
                return Ok(Batch::default());
            }
            let batch = Batch {
                changes: vec![ops::edit(task, spec, &self.ctx(&shown))?],
                ..Default::default()
            };
            warden_store::engine::check_not_misplaced(tree, &batch)?;
            Ok(batch)
        })?;
        let task = match changes.into_iter().find_map(|c| c.after) {
            Some(t) => t,
            None => self.get(id)?,
        };
        let synced_from = task
            .spec
            .origin
            .as_ref()
            .filter(|o| o.tool == warden_core::gsd::sync::TOOL)
            .map(|o| format!("{}/{}", o.root, o.path));
        Ok(Edited {
            task: self.view(&task)?,
            changed,
            synced_from,
        })
    }
}

/// The command that drops `deps` from the `depends_on` of `task`: what `warden status`,
/// `plan next` and the run's idle line tell a person to run.
pub fn drop_command(task: &TaskId, deps: &[&TaskId]) -> String {
    let mut cmd = format!("warden task edit {task}");
    for d in deps {
        cmd.push_str(&format!(" --drop-depends-on {d}"));
    }
    cmd
}

fn ids(given: &[String]) -> Result<Vec<TaskId>> {
    given.iter().map(|s| crate::task_id(s)).collect()
}

/// `a, b`, or `none`.
fn listed(ids: &[TaskId]) -> String {
    if ids.is_empty() {
        return "none".to_owned();
    }
    ids.iter()
        .map(TaskId::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The fields of `old` that `new` changes, by their plan names.
fn what_changed(old: &TaskSpec, new: &TaskSpec) -> Vec<FieldChange> {
    use serde_json::json;
    let mut out = Vec::new();
    let mut note = |field, was: serde_json::Value, now: serde_json::Value| {
        if was != now {
            out.push(FieldChange { field, was, now });
        }
    };
    note("title", json!(old.title), json!(new.title));
    note("parent", json!(old.parent), json!(new.parent));
    note("order", json!(old.order), json!(new.order));
    note("depends_on", json!(old.depends_on), json!(new.depends_on));
    note(
        "max_attempts",
        json!(old.max_attempts),
        json!(new.max_attempts),
    );
    out
}

/// Moving `id` under `parent` closes a cycle when `parent` is `id` or lies below it: the
/// path `id → parent → … → id` of the parents it would form (bounded by the tree's
/// depth limit, which every stored tree keeps).
fn parent_cycle(
    tree: &mut dyn Around,
    id: &TaskId,
    parent: &TaskId,
) -> Result<Option<Vec<TaskId>>, EngineError> {
    let mut path = vec![id.clone()];
    let mut at = Some(parent.clone());
    for _ in 0..=warden_core::tree::MAX_DEPTH + 1 {
        let Some(p) = at.take() else {
            return Ok(None);
        };
        path.push(p.clone());
        if p == *id {
            return Ok(Some(path));
        }
        at = tree.head(&p)?.and_then(|h| h.parent);
    }
    Ok(None)
}

/// A cycle of dependencies through the edited task: `spec.id → d → … → spec.id`, found
/// by a search from its dependencies over the stored ones (iterative; each task once).
fn dependency_cycle(
    tree: &mut dyn Around,
    spec: &TaskSpec,
) -> Result<Option<Vec<TaskId>>, EngineError> {
    // Each task reached, with the task it was reached from.
    let mut from: std::collections::HashMap<TaskId, TaskId> = Default::default();
    let mut stack: Vec<TaskId> = Vec::new();
    // Itself among its dependencies is refused with its own message by the spec's check.
    for d in spec.depends_on.iter().filter(|d| **d != spec.id) {
        if from.insert(d.clone(), spec.id.clone()).is_none() {
            stack.push(d.clone());
        }
    }
    while let Some(x) = stack.pop() {
        if x == spec.id {
            let mut path = vec![spec.id.clone()];
            let mut at = &from[&x];
            while *at != spec.id {
                path.push(at.clone());
                at = &from[at];
            }
            path.push(spec.id.clone());
            let n = path.len();
            path[1..n - 1].reverse();
            return Ok(Some(path));
        }
        let deps = tree.head(&x)?.map(|h| h.depends_on).unwrap_or_default();
        for d in deps {
            if !from.contains_key(&d) {
                from.insert(d.clone(), x.clone());
                stack.push(d);
            }
        }
    }
    Ok(None)
}
