//! Write-back into a get-shit-done `.planning/` directory, for the tasks `plan sync`
//! made from it, so a person can switch between GSD's commands and Warden without
//! losing their place. After every commit that finishes a plan's task, its SUMMARY.md is
//! written when nobody wrote one (the agent's own copy in the task's worktree when it
//! wrote one there, else one made from the task's `## Handoff`: see
//! `warden_core::gsd::writeback`), and `.planning/STATE.md`'s progress is brought up to
//! date when a plan's done-ness changed.
//!
//! Like the other views (TASK.md's mirror, STATE.md), a failure here is a warning, never
//! a lost commit. Only trees inside the project are written to (a task's origin root is
//! relative), never through a symlink, and a SUMMARY.md that has content is never
//! replaced.

use warden_core::artifact;
use warden_core::gsd::sync::TOOL;
use warden_core::gsd::writeback;
use warden_core::model::{Status, Task, is_inside_path};
use warden_core::ops::Change;

use crate::engine::Engine;
use crate::files::{self, FileError};
use crate::taskfile;

/// The `.planning/` root a GSD task was made from, when Warden may write there.
fn writable_root(t: &Task) -> Option<&str> {
    let o = t.spec.origin.as_ref()?;
    (o.tool == TOOL && is_inside_path(&o.root)).then_some(o.root.as_str())
}

/// Is the task a plan (its origin a PLAN.md), not a phase?
fn is_plan(t: &Task) -> bool {
    t.spec
        .origin
        .as_ref()
        .is_some_and(|o| o.path.ends_with(".md"))
}

/// Writes back what `changes` call for (see the module docs).
pub(crate) fn write_back(eng: &Engine, changes: &[Change]) {
    let mut roots: Vec<String> = Vec::new();
    for ch in changes {
        let Some(t) = &ch.after else { continue };
        let Some(root) = writable_root(t) else {
            continue;
        };
        if !is_plan(t) {
            continue;
        }
        let was_done = ch.before.as_ref().map(|b| b.status() == Status::Done);
        let is_done = t.status() == Status::Done;
        // A cancelled plan leaves the counts too (it counts neither as open nor done).
        let was_cancelled = ch.before.as_ref().map(|b| b.status() == Status::Cancelled);
        let is_cancelled = t.status() == Status::Cancelled;
        if was_done == Some(is_done) && was_cancelled == Some(is_cancelled) {
            continue;
        }
        if is_done
            && was_done == Some(false)
            && let Err(e) = ensure_summary(eng, t)
        {
            crate::say!(
                "warning: the SUMMARY.md of {} was not written back: {e}",
                t.id()
            );
        }
        if !roots.iter().any(|r| r == root) {
            roots.push(root.to_owned());
        }
    }
    if roots.is_empty() {
        return;
    }
    let tasks = match eng.tasks() {
        Ok(t) => t,
        Err(e) => {
            crate::say!("warning: .planning/STATE.md not updated: {e}");
            return;
        }
    };
    for root in roots {
        if let Err(e) = update_progress(eng, &tasks, &root) {
            crate::say!("warning: {root}/STATE.md not updated: {e}");
        }
    }
}

/// Writes the plan's SUMMARY.md into the project when it has none with content.
fn ensure_summary(eng: &Engine, t: &Task) -> Result<(), FileError> {
    let (Some(rel), Some(origin)) = (&t.spec.evidence, &t.spec.origin) else {
        return Ok(());
    };
    if !is_inside_path(rel) {
        return Ok(());
    }
    let root = &eng.ws.root;
    let target = root.join(rel);
    match files::read_text(root, &target) {
        Ok(text) if artifact::file_evidence(rel, &text).is_some() => return Ok(()),
        Ok(_) | Err(FileError::Missing(_)) => {}
        Err(e) => return Err(e),
    }
    // The agent's own SUMMARY.md, left in its worktree (a .planning/ git does not track).
    let wt = eng.ws.worktree_project(t.id());
    let from_worktree = match files::read_text(&wt, &wt.join(rel)) {
        Ok(text) if artifact::file_evidence(rel, &text).is_some() => Some(text),
        _ => None,
    };
    let text = match from_worktree {
        Some(text) => text,
        None => {
            let doc = taskfile::read(&eng.ws, t)?;
            let handoff = doc.text.as_deref().and_then(|text| {
                let parsed = artifact::parse(text);
                parsed
                    .section(artifact::HANDOFF)
                    .map(|s| parsed.content(s).to_owned())
            });
            writeback::summary(&writeback::SummaryFacts {
                task: t,
                plan_file: &origin.path,
                handoff: handoff.as_deref(),
                completed: t.updated_at(),
            })
        }
    };
    if let Some(dir) = target.parent() {
        files::create_dir(root, dir)?;
    }
    files::write_atomic(&target, text.as_bytes())
}

/// Brings `<root>/STATE.md`'s progress up to date, when the file exists.
fn update_progress(eng: &Engine, tasks: &[Task], root: &str) -> Result<(), FileError> {
    let path = eng.ws.root.join(root).join("STATE.md");
    let text = match files::read_text(&eng.ws.root, &path) {
        Ok(t) => t,
        Err(FileError::Missing(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let progress = writeback::progress(tasks, root);
    if writeback::update_state_md(&text, &progress).is_none() {
        return Ok(());
    }
    files::update_text(&eng.ws.root, &path, Some(text), |cur| {
        writeback::update_state_md(cur, &progress).unwrap_or_else(|| cur.to_owned())
    })
    .map(drop)
}
