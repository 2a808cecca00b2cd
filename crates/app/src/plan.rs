//! The tree as a whole: import a plan (JSON, TOML, YAML), export it, show it, pick the
//! next leaf, reconcile an agent-edited tree (`plan apply`) and read a get-shit-done
//! `.planning/` directory (`plan sync`). Every write is one `Engine::write_batch`.

use std::path::{Path, PathBuf};

use serde::Serialize;
use warden_core::failure::Failure;
use warden_core::model::{Task, TaskId};
use warden_core::ops::{self, Initial};
use warden_core::plan_ops::{self, ScannedPhase, ScannedPlan};
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
    /// Phase directories read.
    pub phases: usize,
    /// Plans read.
    pub plans: usize,
    /// Plans with a SUMMARY.md.
    pub complete: usize,
    /// Tasks created or changed.
    pub changed: usize,
}

/// `plan apply`'s request: the edited tree, the node the agent worked on, what it
/// reports, and the guard's outcome.
#[derive(Clone, Debug)]
pub struct ApplyRequest {
    /// The edited tree.
    pub plan: PlanFile,
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
        "toml" => toml::from_str(&text).map_err(|e| bad("TOML", e.to_string())),
        "yaml" | "yml" => serde_saphyr::from_str(&text).map_err(|e| bad("YAML", e.to_string())),
        _ => serde_json::from_str(&text).map_err(|e| bad("JSON", e.to_string())),
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
        self.eng.write_batch(|prev| {
            let existing: Vec<TaskId> = prev.iter().map(|t| t.id().clone()).collect();
            let mut problems: Vec<String> = match tree::validate_plan(&plan.tasks, &existing) {
                Ok(()) => Vec::new(),
                Err(errs) => errs.iter().map(|e| e.to_string()).collect(),
            };
            for n in &plan.tasks {
                if existing.binary_search(&n.id).is_ok() {
                    problems.push(format!(
                        "task {} already exists; import adds new tasks (change existing ones with `warden plan apply`)",
                        n.id
                    ));
                }
            }
            let mut changes = Vec::new();
            if problems.is_empty() {
                for n in &plan.tasks {
                    let spec = n.to_spec(&self.eng.config.limits);
                    let initial = Initial {
                        passes: n.passes.unwrap_or(false),
                        attempts: n.attempts.unwrap_or(0),
                    };
                    match ops::create(spec, initial, &self.ctx(source)) {
                        Ok(c) => changes.push(c),
                        Err(e) => problems.push(e.to_string()),
                    }
                }
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
            Ok(Batch {
                changes,
                ..Default::default()
            })
        })?;
        Ok(Imported {
            imported: plan.tasks.iter().map(|n| n.id.clone()).collect(),
        })
    }

    /// `plan export`: every task in the import shape, depth-first.
    pub fn plan_export(&self) -> Result<PlanFile> {
        let tasks = self.tasks()?;
        Ok(PlanFile {
            tasks: tree::depth_first(&tasks)
                .into_iter()
                .map(PlanNode::from_task)
                .collect(),
        })
    }

    /// `plan show`: the roots with their children nested.
    pub fn plan_show(&self) -> Result<Vec<NodeView>> {
        let tasks = self.tasks()?;
        let idx = TreeIndex::new(&tasks);
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
        Ok(idx
            .depth_first()
            .into_iter()
            .filter(|t| t.spec.parent.as_ref().is_none_or(|p| idx.get(p).is_none()))
            .map(|t| node(&idx, t))
            .collect())
    }

    /// `plan next`: the leftmost open leaf whose dependencies are done.
    pub fn plan_next(&self) -> Result<Next> {
        Ok(tree::plan_next(&self.tasks()?))
    }

    /// `plan apply`: seed 000's reconcile of an edited tree (DESIGN 2.3).
    pub fn plan_apply(&self, req: &ApplyRequest) -> Result<ApplySummary> {
        if req.status == AgentStatus::Done && req.guard.is_none() {
            return Err(tree::ApplyError::MissingGuard.into());
        }
        let mut summary = None;
        self.eng.write_batch(|prev| {
            let update = tree::apply_state_updates(
                prev,
                req.plan.tasks.clone(),
                &req.selected,
                req.status,
                req.guard,
                &self.eng.config.limits,
            )
            .map_err(Failure::from)?;
            // Reaching done goes through merge-ri on every path: the work of a task the
            // apply finishes reaches the base branch (idempotent when decided again).
            let mut merged = std::collections::BTreeMap::new();
            for (id, _, to) in &update.lifecycle {
                if *to == warden_core::model::Status::Done
                    && let Some(t) = prev.iter().find(|t| t.id() == id)
                {
                    let r = warden_runner::pipeline::merge_ri(&self.eng, t);
                    merged.insert(id.clone(), (r.status, r.detail));
                }
            }
            let changes = plan_ops::plan_applied(
                prev,
                &update,
                &req.selected,
                &merged,
                &self.ctx(&req.source),
            )?;
            summary = Some(update.summary());
            Ok(Batch {
                changes,
                ..Default::default()
            })
        })?;
        summary.ok_or_else(|| Failure::internal("plan apply decided nothing; this is a Warden bug"))
    }

    /// `plan sync`: reads a `.planning/` directory (default: `.planning` at the project
    /// root) and creates or updates its phases and plans.
    pub fn plan_sync(&self, dir: Option<PathBuf>) -> Result<Synced> {
        let dir = dir.unwrap_or_else(|| self.ws().root.join(".planning"));
        let scanned = scan_planning(&dir)?;
        let shown = dir.display().to_string();
        let changes = self.eng.write_batch(|prev| {
            let changes = plan_ops::planning_sync(
                prev,
                &scanned,
                &self.eng.config.limits,
                &self.ctx(&shown),
            )?;
            Ok(Batch {
                changes,
                ..Default::default()
            })
        })?;
        let plans = scanned.iter().map(|p| p.plans.len()).sum();
        let complete = scanned
            .iter()
            .flat_map(|p| &p.plans)
            .filter(|p| p.done)
            .count();
        Ok(Synced {
            phases: scanned.len(),
            plans,
            complete,
            changed: changes.len(),
        })
    }
}

/// Scans `.planning/phases/NN-name/NN-MM-PLAN.md` (get-shit-done's layout).
fn scan_planning(dir: &Path) -> Result<Vec<ScannedPhase>> {
    let phases_dir = dir.join("phases");
    let entries = std::fs::read_dir(&phases_dir).map_err(|e| {
        Failure::usage(format!(
            "cannot read {}: {e}; plan sync expects .planning/phases/NN-name/NN-MM-PLAN.md",
            phases_dir.display()
        ))
    })?;
    let mut phase_dirs: Vec<(String, PathBuf)> = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let numbered = name
            .split('-')
            .next()
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if is_dir && numbered {
            phase_dirs.push((name, e.path()));
        }
    }
    phase_dirs.sort();
    let mut out = Vec::new();
    for (name, path) in phase_dirs {
        let id = TaskId::new(&name.to_lowercase()).map_err(|e| {
            Failure::refused(format!("phase directory {name:?} cannot be a task id: {e}"))
        })?;
        let mut plans: Vec<(String, PathBuf)> = std::fs::read_dir(&path)
            .map_err(|e| Failure::internal(format!("cannot read {}: {e}", path.display())))?
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.strip_suffix("-PLAN.md")
                    .map(|stem| (stem.to_owned(), e.path()))
            })
            .collect();
        plans.sort();
        let mut scanned = Vec::new();
        for (stem, plan_path) in plans {
            let pid = TaskId::new(&stem.to_lowercase())
                .map_err(|e| Failure::refused(format!("plan {stem:?} cannot be a task id: {e}")))?;
            let title = files::read_text(dir, &plan_path)
                .ok()
                .and_then(|t| {
                    t.lines()
                        .find_map(|l| l.strip_prefix("# ").map(|s| s.trim().to_owned()))
                })
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| stem.clone());
            let done = path.join(format!("{stem}-SUMMARY.md")).is_file();
            scanned.push(ScannedPlan {
                id: pid,
                title,
                done,
            });
        }
        out.push(ScannedPhase {
            id,
            title: name,
            plans: scanned,
        });
    }
    Ok(out)
}
