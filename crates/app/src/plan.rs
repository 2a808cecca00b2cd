//! The tree as a whole: import a plan (JSON, TOML, YAML), export it, show it, pick the
//! next leaf, reconcile an agent-edited tree (`plan apply`) and read a get-shit-done
//! `.planning/` directory (`plan sync`). Every write is one `Engine::write_batch`.

use std::path::{Path, PathBuf};

use serde::Serialize;
use warden_core::failure::Failure;
use warden_core::gsd;
use warden_core::model::Status;
use warden_core::model::{Task, TaskId};
use warden_core::ops::{self, Initial};
use warden_core::plan_ops::{self, SyncNote, SyncNoteKind};
use warden_core::tree::{self, AgentStatus, ApplySummary, Next, PlanFile, PlanNode, TreeIndex};
use warden_store::{Batch, files};

use crate::view::NodeView;
use crate::{App, Result};

/// The largest plan file read, in bytes.
pub const MAX_PLAN_BYTES: u64 = 64 * files::MAX_FILE_BYTES;

/// What `plan import` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Imported {
    /// The ids imported, in file order.
    pub imported: Vec<TaskId>,
}

/// What `plan sync` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Synced {
    /// The directory read.
    pub dir: String,
    /// It is outside the project: no evidence files, nothing written back.
    pub read_only: bool,
    /// Phase directories read (with archived milestones and the quick-task group).
    pub phases: usize,
    /// Phase directories without a plan: no task, not counted.
    pub phases_without_plans: Vec<String>,
    /// Plans read.
    pub plans: usize,
    /// Plans GSD's files count as done.
    pub complete: usize,
    /// Tasks created or changed.
    pub changed: usize,
    /// Tasks created.
    pub created: Vec<TaskId>,
    /// Tasks whose spec (or phase status) changed.
    pub updated: Vec<TaskId>,
    /// Plans finished outside Warden, moved to done now.
    pub finished_outside: Vec<TaskId>,
    /// The dependency edges made from GSD's order.
    pub edges: gsd::sync::Edges,
    /// Tasks left alone, and why.
    pub notes: Vec<SyncNote>,
    /// Everything the reader skipped, guessed or could not resolve.
    pub warnings: Vec<gsd::Warning>,
    /// Files of the `.planning/` directory this sync changed (its STATE.md, whose
    /// progress line follows the plans' done-ness), so a person knows what to commit.
    pub wrote: Vec<String>,
}

/// The edited tree of a `plan apply`: a file (read and parsed while the stored tasks are
/// read), or one already parsed (MCP).
#[derive(Clone, Debug)]
pub enum PlanInput {
    /// A plan file, in the format its extension names (see [`read_plan_file`]).
    File(PathBuf),
    /// A parsed tree.
    Tree(PlanFile),
}

/// `plan apply`'s request: the edited tree, the node the agent worked on, what it
/// reports, and the guard's outcome.
#[derive(Clone, Debug)]
pub struct ApplyRequest {
    /// The edited tree.
    pub plan: PlanInput,
    /// Where it came from, for messages.
    pub source: String,
    /// The node the agent worked on.
    pub selected: TaskId,
    /// done, retry or decomposed.
    pub status: AgentStatus,
    /// pass, fail or skipped (required with done).
    pub guard: Option<tree::GuardOutcome>,
}

/// Reads a plan file in the format its extension names (TOML, YAML; JSON otherwise, and
/// for `-`, which is standard input). Bounded: at most [`MAX_PLAN_BYTES`], never blocking
/// on a FIFO or a device.
pub fn read_plan_file(path: &Path) -> Result<PlanFile> {
    let shown = if path == Path::new("-") {
        "standard input".to_owned()
    } else {
        path.display().to_string()
    };
    let text = crate::input::read_text(path, MAX_PLAN_BYTES, "the plan")?;
    // Editors on Windows begin a UTF-8 file with a byte order mark; no parser takes it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let bad = |fmt: &str, e: String| {
        Failure::refused(format!(
            "{shown} is not a valid {fmt} plan: {}; see `warden plan import --help` for the shape",
            e.split_whitespace().collect::<Vec<_>>().join(" ")
        ))
    };
    match ext.as_str() {
        "toml" => toml::from_str(text).map_err(|e| bad("TOML", e.to_string())),
        "yaml" | "yml" => serde_saphyr::from_str(text).map_err(|e| bad("YAML", e.to_string())),
        _ => serde_json::from_str(text).map_err(|e| bad("JSON", e.to_string())),
    }
}

/// `task a`, or `tasks a, b, c`, naming at most ten and counting the rest.
fn some_ids(ids: &[&str]) -> String {
    const SHOWN: usize = 10;
    let named = ids[..ids.len().min(SHOWN)].join(", ");
    match ids.len() {
        1 => format!("task {named}"),
        n if n <= SHOWN => format!("tasks {named}"),
        n => format!("tasks {named} and {} more", n - SHOWN),
    }
}

/// Reads a plan given as JSON (MCP), in the export shape.
pub fn plan_from_json(v: serde_json::Value, what: &str) -> Result<PlanFile> {
    serde_json::from_value(v).map_err(|e| {
        Failure::refused(format!(
            "{what} is not valid: {}; send {{\"tasks\": [{{\"id\": ..}}, ..]}} in the shape of `warden plan export`",
            e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
        ))
    })
}

impl App {
    /// `plan import`: new tasks, all or nothing; every problem is listed.
    pub fn plan_import(&self, plan: &PlanFile, source: &str) -> Result<Imported> {
        // `{}`, `[]` or a misspelt key import nothing: most likely not what was meant.
        if plan.tasks.is_empty() {
            return Err(Failure::refused(format!(
                "{source} has no tasks; a plan is {{\"tasks\": [{{\"id\": \"…\"}}, …]}} (see `warden plan import --help`)"
            )));
        }
        self.eng.write_batch(|prev| {
            let existing: Vec<TaskId> = prev.iter().map(|t| t.id().clone()).collect();
            let mut problems: Vec<String> = match tree::validate_plan(&plan.tasks, &existing) {
                Ok(()) => Vec::new(),
                Err(errs) => errs.iter().map(|e| e.to_string()).collect(),
            };
            // One problem for every task already there, its ids cut short: a plan
            // imported twice named each of its 5,000 tasks.
            let there: Vec<&str> = plan
                .tasks
                .iter()
                .filter(|n| existing.binary_search(&n.id).is_ok())
                .map(|n| n.id.as_str())
                .collect();
            if !there.is_empty() {
                problems.push(format!(
                    "{} already {}; import adds new tasks (change existing ones with `warden plan apply`)",
                    some_ids(&there),
                    if there.len() == 1 { "exists" } else { "exist" }
                ));
            }
            // The plan's own problems, looked up by text (100,000 of them at most).
            let named: std::collections::HashSet<String> = problems.iter().cloned().collect();
            // A group's passes are its tasks' (derived), whatever the file says: a group
            // `plan sync` made is exported with passes: true, and taken, that made the
            // group done before its tasks went under it, which refused them.
            let parents: std::collections::HashSet<&TaskId> =
                plan.tasks.iter().filter_map(|n| n.parent.as_ref()).collect();
            // Each task's own problems (an empty title, a status not taken) are listed
            // with the plan's: one round of fixes, not one per kind.
            let mut changes = Vec::new();
            for n in &plan.tasks {
                let spec = n.to_spec(&self.eng.config.limits);
                let cancelled = match n.status {
                    None => false,
                    Some(Status::Cancelled) => true,
                    Some(s) => {
                        problems.push(format!(
                            "task {}: status {s} is not imported; a task starts pending, done with passes: true, stuck with attempts at max_attempts (only status: cancelled is taken)",
                            n.id
                        ));
                        continue;
                    }
                };
                let initial = Initial {
                    passes: n.passes.unwrap_or(false) && !parents.contains(&n.id),
                    attempts: n.attempts.unwrap_or(0),
                    cancelled,
                };
                match ops::create(spec, initial, &self.ctx(source)) {
                    Ok(c) => changes.push(c),
                    // The plan's checks may have named it already (an id git cannot
                    // branch on, max_attempts 0): each problem is listed once.
                    Err(e) => {
                        let e = e.to_string();
                        if !named.contains(&e) {
                            problems.push(e);
                        }
                    }
                }
            }
            let batch = Batch {
                changes,
                ..Default::default()
            };
            if problems.is_empty()
                && let Some(why) = warden_store::engine::misplaced(prev, &batch)
            {
                problems.push(why);
            }
            if !problems.is_empty() {
                return Err(Failure::refused(format!(
                    "{source} was not imported ({} problem{}): {}",
                    problems.len(),
                    if problems.len() == 1 { "" } else { "s" },
                    problems.join("; ")
                ))
                .into());
            }
            Ok(batch)
        })?;
        Ok(Imported {
            imported: plan.tasks.iter().map(|n| n.id.clone()).collect(),
        })
    }

    /// `plan export`: every task in the import shape, depth-first.
    pub fn plan_export(&self) -> Result<PlanFile> {
        // Read before the tasks: a change between the two reads makes a later apply
        // refuse a removal it could have allowed, never the other way round.
        let as_of = self.eng.store.last_seq()?;
        let tasks = self.tasks()?;
        let idx = tree::TreeIndex::new(&tasks);
        Ok(PlanFile {
            as_of_event: Some(as_of),
            tasks: idx
                .depth_first()
                .into_iter()
                .map(|t| PlanNode {
                    // A group's, as every view shows it: its tasks'.
                    passes: Some(idx.passes(t)),
                    ..PlanNode::from_task(t)
                })
                .collect(),
        })
    }

    /// `plan graph`: the tree and its dependencies as a Mermaid or DOT picture.
    pub fn plan_graph(&self, format: warden_core::graph::Format) -> Result<String> {
        let tasks = self.tree_tasks()?;
        let idx = warden_core::tree::TreeIndex::new(&tasks);
        Ok(warden_core::graph::render(&idx, format))
    }

    /// `plan show`: the roots with their children nested.
    pub fn plan_show(&self) -> Result<Vec<NodeView>> {
        Ok(show(&self.tree_tasks()?))
    }

    /// `plan next`: the leftmost open leaf whose dependencies are done.
    pub fn plan_next(&self) -> Result<Next> {
        Ok(tree::plan_next(&self.tree_tasks()?))
    }

    /// Every task as the tree's views read it: a task at rest from its head (id, parent,
    /// order, status, passes, attempts, max_attempts, title, dependencies: all that
    /// `plan next`, `plan show` and `plan graph` read of it), an active one in full (the
    /// graph marks a dead session). Decoding every task made `plan next` take 40 ms at
    /// 10,000 tasks; an orchestrator asks it after every task.
    fn tree_tasks(&self) -> Result<Vec<Task>> {
        Ok(self.eng.tasks_at_rest_from_heads()?)
    }

    /// `plan apply`: seed 000's reconcile of an edited tree (DESIGN 2.3). A plan file is
    /// read and parsed on a thread of its own while the stored tasks are read (at 100,000
    /// nodes each takes about a third of the whole), and its nodes are moved into the
    /// reconcile, not copied; a conflict that makes the apply decide again parses it again.
    pub fn plan_apply(&self, req: ApplyRequest) -> Result<ApplySummary> {
        if req.status == AgentStatus::Done && req.guard.is_none() {
            return Err(tree::ApplyError::MissingGuard.into());
        }
        let ApplyRequest {
            plan,
            source,
            selected,
            status,
            guard,
        } = req;
        std::thread::scope(|scope| {
            let mut parsing = match &plan {
                PlanInput::File(path) => Some(scope.spawn(move || read_plan_file(path))),
                PlanInput::Tree(_) => None,
            };
            let mut nodes = || -> Result<(Vec<PlanNode>, Option<u64>)> {
                let file = match (parsing.take(), &plan) {
                    (Some(h), _) => match h.join() {
                        Ok(parsed) => parsed?,
                        Err(panic) => std::panic::resume_unwind(panic),
                    },
                    (None, PlanInput::File(path)) => read_plan_file(path)?,
                    (None, PlanInput::Tree(t)) => t.clone(),
                };
                Ok((file.tasks, file.as_of_event))
            };
            let mut summary = None;
            let limits = &self.eng.config.limits;
            // Every stored task is read, but only those whose stored spec differs from
            // their node's (or that the file lacks) are decoded in full; the rest are
            // read for their runner fields (`tree::StoredRows`). At 100,000 tasks
            // decoding them all took most of the apply.
            fn row(r: &warden_store::TaskColumns) -> (&str, &str) {
                (r.id.as_str(), r.body.as_str())
            }
            self.eng.write_batch_rows(|rows| {
                // The rows' runner fields and id index while the file is parsed.
                let read = tree::StoredRows::new(&rows, row);
                let (nodes, as_of) = nodes()?;
                let prev = read
                    .against(&nodes, limits, warden_store::decode_task)
                    .map_err(warden_store::EngineError::from)?;
                let update =
                    tree::apply_state_updates(&prev, nodes, &selected, status, guard, limits)
                        .map_err(Failure::from)?;
                if let Some(as_of) = as_of
                    && !(update.removed.is_empty() && update.edited.is_empty())
                {
                    // A real export is never ahead of its store: a number past the
                    // newest event (edited, or another store's) would excuse everything.
                    let newest = self.eng.store.last_seq()?;
                    if as_of > newest {
                        return Err(Failure::refused(format!(
                            "the plan file's as_of_event {as_of} is past this store's newest event ({newest}): it was not exported from this store as it is; export the plan again (warden plan export) and redo the edit"
                        ))
                        .into());
                    }
                    let (changed, _) = self.eng.store.changed_since(as_of)?;
                    if let Some(id) = update
                        .removed
                        .iter()
                        .find(|id| changed.binary_search(id).is_ok())
                    {
                        return Err(Failure::conflict(format!(
                            "the plan file removes task {id}, which changed after the file was exported (event {as_of}); export the plan again (warden plan export) and redo the edit"
                        ))
                        .into());
                    }
                    // Two writers never lose an update: a file exported before another
                    // writer edited a task, that states the task otherwise (its old
                    // title, say), would put the old back without a word.
                    for id in update
                        .edited
                        .iter()
                        .filter(|id| changed.binary_search(id).is_ok())
                    {
                        let edited_since = self.eng.store.events(Some(id))?.iter().any(|e| {
                            e.seq > as_of
                                && matches!(e.kind, warden_core::event::EventKind::TaskEdited { .. })
                        });
                        if edited_since {
                            return Err(Failure::conflict(format!(
                                "the plan file changes task {id}, which was edited after the file was exported (event {as_of}); export the plan again (warden plan export) and redo the edit"
                            ))
                            .into());
                        }
                    }
                }
                // The stored tasks the changes are made from, in full and by id.
                let reads = plan_ops::plan_applied_reads(&update, &selected);
                let mut before = Vec::with_capacity(reads.len());
                for (s, r) in prev.iter().zip(&rows) {
                    if reads.binary_search(&tree::StoredTask::id(s)).is_ok() {
                        before.push(match s {
                            tree::Stored::Task(t) => (**t).clone(),
                            tree::Stored::Same(_) => warden_store::decode_task(&r.id, &r.body)
                                .map_err(warden_store::EngineError::from)?,
                        });
                    }
                }
                before.sort_by(|a, b| a.id().cmp(b.id()));
                // Refused before merge-ri could put the work on the base branch.
                if let Ok(at) = before.binary_search_by(|t| t.id().cmp(&selected)) {
                    plan_ops::may_finish(&before[at], &update).map_err(Failure::from)?;
                    if status == warden_core::tree::AgentStatus::Decomposed {
                        plan_ops::may_decompose(&before[at]).map_err(Failure::from)?;
                    }
                }
                // Reaching done goes through merge-ri on every path: the work of a task the
                // apply finishes reaches the base branch (idempotent when decided again).
                let mut merged = std::collections::BTreeMap::new();
                for (id, _, to) in &update.lifecycle {
                    if *to == warden_core::model::Status::Done
                        && let Ok(at) = before.binary_search_by(|t| t.id().cmp(id))
                    {
                        let r = warden_runner::pipeline::merge_ri(&self.eng, &before[at]);
                        merged.insert(id.clone(), (r.status, r.detail));
                    }
                }
                let changes = plan_ops::plan_applied(
                    &before,
                    &update,
                    &selected,
                    &merged,
                    &self.ctx(&source),
                )?;
                let batch = Batch {
                    changes,
                    ..Default::default()
                };
                // The tree after the apply is the file's: its parents, under the changes.
                let tree = update
                    .nodes
                    .iter()
                    .map(|n| (&n.spec.id, n.spec.parent.as_ref()));
                warden_store::check_depth(tree, &batch)?;
                summary = Some(update.summary());
                // A million allocations at 100,000 tasks, freed while the batch commits.
                drop_later((rows, prev, update));
                Ok(batch)
            })?;
            summary.ok_or_else(|| {
                Failure::internal("plan apply decided nothing; this is a Warden bug")
            })
        })
    }

    /// `plan sync`: reads a get-shit-done `.planning/` directory (default: `.planning` at
    /// the project root) and creates or updates the tasks of its phases and plans (see
    /// `warden_core::gsd::sync` for what they hold and `plan_ops::planning_sync` for the
    /// rules). Plans finished outside Warden whose tasks have a branch reach `done`
    /// through `merge-ri`, one write each; a merge that fails leaves the task where it
    /// was, with a note.
    pub fn plan_sync(&self, dir: Option<PathBuf>) -> Result<Synced> {
        let dir = dir.unwrap_or_else(|| self.ws().root.join(".planning"));
        let shown = dir.display().to_string();
        let place = self.place(&dir)?;
        let tree = crate::gsd_read::read_planning(&dir)?;
        let state_md = dir.join("STATE.md");
        // Read only as a regular file: a FIFO put there held the sync for ever.
        let read_state = || {
            std::fs::symlink_metadata(&state_md)
                .is_ok_and(|m| m.is_file())
                .then(|| std::fs::read(&state_md).ok())
                .flatten()
        };
        let state_before = read_state();
        let mut wanted = gsd::sync::plan(&tree, &place, self.eng.config.limits.max_attempts);
        let mut warnings = tree.warnings.clone();
        warnings.append(&mut wanted.warnings);
        // A worktree whose `.git` file its work deleted still has a branch (merge-ri
        // repairs it first).
        let has_branch = |id: &TaskId| self.ws().worktree(id).is_dir();
        let decide =
            |prev: &[Task]| plan_ops::planning_sync(prev, &wanted, &has_branch, &self.ctx(&shown));
        let mut decision = None;
        let mut committed = self.eng.write_batch(|prev| {
            let d = decide(prev)?;
            let changes = d.changes.clone();
            decision = Some(d);
            Ok(Batch {
                changes,
                ..Default::default()
            })
        })?;
        let decision = decision.unwrap_or_default();
        let onto_cancelled = decision.order_edges_onto_cancelled;
        let mut notes = decision.notes;
        let mut finished = Vec::new();
        for f in &decision.finish {
            match self.finish_outside(f, &shown) {
                Ok(()) => finished.push(f.task.clone()),
                Err(e) => notes.push(SyncNote {
                    kind: SyncNoteKind::SummaryWhileActive,
                    task: f.task.clone(),
                    message: format!("{}: not moved to done: {}", f.task, e.message),
                }),
            }
        }
        if !finished.is_empty() {
            // Their phases may be done now.
            committed.extend(self.eng.write_batch(|prev| {
                Ok(Batch {
                    changes: decide(prev)?.changes,
                    ..Default::default()
                })
            })?);
        }
        let mut created = Vec::new();
        let mut changed = Vec::new();
        for ch in &committed {
            let Some(t) = &ch.after else { continue };
            let id = t.id().clone();
            if ch.before.is_none() {
                created.push(id);
            } else if t.status() == Status::Done
                && ch
                    .before
                    .as_ref()
                    .is_some_and(|b| b.status() != Status::Done)
                && ch
                    .after
                    .as_ref()
                    .and_then(|t| t.spec.parent.as_ref())
                    .is_some()
            {
                finished.push(id);
            } else {
                changed.push(id);
            }
        }
        finished.sort();
        finished.dedup();
        changed.retain(|c| !finished.contains(c));
        changed.sort();
        changed.dedup();
        // A plan the roadmap ticks without a summary "will run" — unless its task is
        // done in Warden, which runs nothing more (a note says the SUMMARY is missing).
        if warnings
            .iter()
            .any(|w| w.kind == gsd::WarningKind::RoadmapSaysDone)
        {
            let done: std::collections::HashSet<String> = self
                .tasks()?
                .iter()
                .filter(|t| t.status() == Status::Done)
                .filter_map(|t| t.spec.origin.as_ref())
                .filter(|o| o.tool == gsd::sync::TOOL && o.root == place.root)
                .map(|o| o.path.clone())
                .collect();
            warnings.retain(|w| {
                !(w.kind == gsd::WarningKind::RoadmapSaysDone && done.contains(&w.path))
            });
        }
        let plans: Vec<&gsd::Plan> = tree.plans().collect();
        let mut wrote = Vec::new();
        if state_before.is_some() && read_state() != state_before {
            wrote.push(state_md.display().to_string());
        }
        Ok(Synced {
            dir: shown,
            read_only: place.inside.is_none(),
            phases: tree.phases.len(),
            phases_without_plans: wanted.empty_phases.clone(),
            plans: plans.len(),
            complete: plans.iter().filter(|p| p.done).count(),
            changed: created.len() + changed.len() + finished.len(),
            created,
            updated: changed,
            finished_outside: finished,
            edges: gsd::sync::Edges {
                onto_cancelled,
                ..wanted.edges
            },
            notes,
            warnings,
            wrote,
        })
    }

    /// Where a `.planning/` directory is, as its tasks record it: relative to the project
    /// root when inside it (its real path, links resolved), else absolute and read only.
    fn place(&self, dir: &Path) -> Result<gsd::sync::Place> {
        let real = std::fs::canonicalize(dir).map_err(|e| {
            Failure::usage(format!(
                "cannot read {}: {e}; plan sync reads a get-shit-done .planning/ directory (phases/NN-name/NN-MM-PLAN.md)",
                dir.display()
            ))
        })?;
        let root =
            std::fs::canonicalize(&self.ws().root).unwrap_or_else(|_| self.ws().root.clone());
        let inside = real
            .strip_prefix(&root)
            .ok()
            .and_then(|r| r.to_str())
            .filter(|r| warden_core::model::is_inside_path(r))
            .map(str::to_owned);
        Ok(gsd::sync::Place {
            root: inside.clone().unwrap_or_else(|| real.display().to_string()),
            inside,
        })
    }

    /// Moves one plan finished outside Warden to `done` through `merge-ri`.
    fn finish_outside(&self, f: &plan_ops::FinishOutside, shown: &str) -> Result<()> {
        self.eng.write_task(&f.task, None, |t, _doc| {
            let m = warden_runner::pipeline::merge_ri(&self.eng, t);
            let change = plan_ops::finish_outside(t, f, (m.status, m.detail), &self.ctx(shown))?;
            Ok(warden_store::Decision {
                change,
                retryable: m.status != warden_core::model::PhaseStatus::Success,
                memory: None,
            })
        })?;
        Ok(())
    }
}

/// How often `plan sync --watch` syncs when no change is seen (a safety net for file
/// systems that send no events).
pub const WATCH_FALLBACK: std::time::Duration = std::time::Duration::from_secs(5);

/// Changes arriving within this window after the first are taken together.
const WATCH_SETTLE: std::time::Duration = std::time::Duration::from_millis(200);

impl App {
    /// `plan sync --watch`: syncs, then syncs again whenever something changes under the
    /// `.planning/` directory (file-system events; every [`WATCH_FALLBACK`] without
    /// one), until `stop` is set. A plan a person adds while `warden run` goes on becomes
    /// a task at once, and the supervisor (which wakes on every commit) schedules it. A
    /// failed sync is reported to `on_sync` and the loop goes on.
    pub fn plan_sync_watch(
        &self,
        dir: Option<PathBuf>,
        stop: &std::sync::atomic::AtomicBool,
        on_sync: &mut dyn FnMut(Result<Synced>),
    ) -> Result<()> {
        use notify::Watcher;
        use std::sync::atomic::Ordering;
        let dir = dir.unwrap_or_else(|| self.ws().root.join(".planning"));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            // Reads (access events) change nothing; every other event may.
            if ev.is_ok_and(|e| !e.kind.is_access()) {
                let _ = tx.send(());
            }
        })
        .map_err(|e| Failure::internal(format!("cannot watch {}: {e}", dir.display())))?;
        watcher
            .watch(&dir, notify::RecursiveMode::Recursive)
            .map_err(|e| {
                Failure::usage(format!(
                    "cannot watch {}: {e}; plan sync reads a get-shit-done .planning/ directory",
                    dir.display()
                ))
            })?;
        on_sync(self.plan_sync(Some(dir.clone())));
        let mut last = std::time::Instant::now();
        while !stop.load(Ordering::SeqCst) {
            match rx.recv_timeout(std::time::Duration::from_millis(250)) {
                Ok(()) => {}
                // Nothing seen: sync now and then anyway.
                Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                    if last.elapsed() >= WATCH_FALLBACK => {}
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Failure::internal(format!(
                        "the watch of {} stopped",
                        dir.display()
                    )));
                }
            }
            // Let a burst of writes (an editor's save, a plan with its summary) settle.
            std::thread::sleep(WATCH_SETTLE);
            while rx.try_recv().is_ok() {}
            on_sync(self.plan_sync(Some(dir.clone())));
            last = std::time::Instant::now();
        }
        Ok(())
    }
}

/// Drops `value` on a thread of its own, so that freeing a large structure does not
/// delay the caller: a short-lived `warden` exits without waiting for it. Dropped here
/// when no thread can be started.
fn drop_later<T: Send + 'static>(value: T) {
    let _ = std::thread::Builder::new()
        .name("drop".into())
        .spawn(move || drop(value));
}

/// The roots of `tasks` with their children nested (`plan show`).
fn show(tasks: &[Task]) -> Vec<NodeView> {
    let idx = TreeIndex::new(tasks);
    fn node(idx: &TreeIndex<'_>, t: &Task) -> NodeView {
        NodeView {
            id: t.id().clone(),
            title: t.spec.title.clone(),
            status: idx.status(t),
            passes: idx.passes(t),
            attempts: t.attempts(),
            max_attempts: t.spec.max_attempts,
            depends_on: t.spec.depends_on.clone(),
            children: idx
                .children(t.id())
                .into_iter()
                .map(|c| node(idx, c))
                .collect(),
        }
    }
    idx.depth_first()
        .into_iter()
        .filter(|t| t.spec.parent.as_ref().is_none_or(|p| idx.get(p).is_none()))
        .map(|t| node(&idx, t))
        .collect()
}

#[cfg(test)]
mod tests {
    use warden_core::event::Actor;
    use warden_core::graph::{Format, render};

    use super::*;
    use crate::task::Transition;

    /// `plan next`, `plan show` and `plan graph` read the tasks' heads; each must answer
    /// exactly as from the tasks read in full.
    fn as_from_full_tasks(app: &App, stage: &str) {
        let full = app.tasks().unwrap();
        assert_eq!(app.plan_next().unwrap(), tree::plan_next(&full), "{stage}");
        assert_eq!(app.plan_show().unwrap(), show(&full), "{stage}");
        for f in [Format::Mermaid, Format::Dot] {
            assert_eq!(
                app.plan_graph(f).unwrap(),
                render(&TreeIndex::new(&full), f),
                "{stage}"
            );
        }
    }

    #[test]
    fn the_tree_views_read_from_heads_answer_as_from_whole_tasks() {
        let dir = tempfile::tempdir().unwrap();
        crate::init(dir.path(), None).unwrap();
        let app = App::find(Some(dir.path()), Actor::Person).unwrap();
        // Every field the views read differs somewhere: done and passing, a dependency
        // between siblings and on a group, attempts used up, titles, orders.
        let plan: PlanFile = serde_json::from_value(serde_json::json!({"tasks": [
            {"id": "g1", "title": "first group", "order": 1},
            {"id": "a", "parent": "g1", "passes": true, "order": 2},
            {"id": "b", "parent": "g1", "depends_on": ["a"], "title": "after a", "order": 1},
            {"id": "c", "parent": "g1", "attempts": 3, "max_attempts": 3},
            {"id": "g2", "depends_on": ["g1"], "order": 0},
            {"id": "d", "parent": "g2", "work": "true"},
            {"id": "e", "parent": "g2", "attempts": 1},
            {"id": "f", "depends_on": ["d"], "order": 5}
        ]}))
        .unwrap();
        app.plan_import(&plan, "plan.json").unwrap();
        as_from_full_tasks(&app, "imported");
        // c (order 0) comes before b, but has used its attempts: with them forgotten it
        // would be the next leaf.
        let id = |s: &str| TaskId::new(s).unwrap();
        assert_eq!(app.plan_next().unwrap().next, Some(id("b")));
        for (task, to) in [
            ("b", Status::Working),
            ("c", Status::Cancelled),
            ("e", Status::Cancelled),
            ("b", Status::Cancelled),
        ] {
            app.transition(&Transition::to(id(task), to)).unwrap();
            as_from_full_tasks(&app, &format!("{task} {to}"));
        }
        // g1 is settled (a done, the rest cancelled), so g2's leaf d is next.
        assert_eq!(app.plan_next().unwrap().next, Some(id("d")));
    }
}
