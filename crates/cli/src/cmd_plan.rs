//! `warden plan …`: the task tree as a whole — import (JSON, TOML, YAML), export, show,
//! reconcile an agent-edited tree (`apply`), pick the next leaf, and sync a
//! get-shit-done `.planning/` directory.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use warden_core::model::{Task, TaskId};
use warden_core::ops::{self, Initial};
use warden_core::plan_ops::{self, ScannedPhase, ScannedPlan};
use warden_core::tree::{self, AgentStatus, PlanFile, PlanNode};
use warden_store::{Batch, StoreError, files};

use crate::app::{App, Global, task_id};
use crate::error::CliError;
use crate::out;

#[derive(Subcommand, Debug)]
pub enum PlanCmd {
    /// Import a plan (JSON, TOML or YAML, by extension); nothing is imported if anything is wrong.
    #[command(
        after_help = "Example plan.json:\n  {\"tasks\": [\n    {\"id\": \"api\", \"title\": \"REST API\", \"agent\": \"Build the API\"},\n    {\"id\": \"lint\", \"work\": \"cargo clippy\", \"depends_on\": [\"api\"]}\n  ]}\n\n  warden plan import plan.json"
    )]
    Import {
        /// The plan file (`-` for JSON on stdin).
        file: PathBuf,
    },
    /// Print the whole tree as JSON, in the import shape.
    Export,
    /// Print the tree with statuses.
    Show,
    /// Reconcile a tree an agent edited (the JSON of `plan export`) for a selected node.
    #[command(
        after_help = "Examples:\n  warden plan apply tree.json --selected api --status done --guard pass\n  warden plan apply tree.json --selected api --status decomposed\n  warden plan apply tree.json --selected api --status retry"
    )]
    Apply(ApplyArgs),
    /// Name the leftmost open leaf whose dependencies are done.
    Next,
    /// Read a .planning/ directory (phases/NN-name/NN-MM-PLAN.md, NN-MM-SUMMARY.md when done).
    #[command(after_help = "Examples:\n  warden plan sync\n  warden plan sync path/to/.planning")]
    Sync {
        /// The .planning directory (default: .planning at the project root).
        #[arg(id = "planning_dir", value_name = "DIR")]
        planning_dir: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
pub struct ApplyArgs {
    /// The edited tree (JSON, TOML or YAML).
    file: PathBuf,
    /// The node the agent worked on.
    #[arg(long)]
    selected: String,
    /// done, retry or decomposed.
    #[arg(long)]
    status: String,
    /// pass, fail or skipped (required with --status done).
    #[arg(long)]
    guard: Option<String>,
}

pub fn run(g: &Global, cmd: PlanCmd) -> Result<(), CliError> {
    let app = App::open(g)?;
    match cmd {
        PlanCmd::Import { file } => import(&app, &file),
        PlanCmd::Export => {
            let tasks = app.tasks()?;
            let plan = PlanFile {
                tasks: tree::depth_first(&tasks)
                    .into_iter()
                    .map(PlanNode::from_task)
                    .collect(),
            };
            out::json(&serde_json::to_value(&plan).map_err(|e| CliError::internal(e.to_string()))?);
            Ok(())
        }
        PlanCmd::Show => show(&app),
        PlanCmd::Apply(a) => apply(&app, a),
        PlanCmd::Next => {
            let tasks = app.tasks()?;
            let next = tree::plan_next(&tasks);
            if app.json {
                out::json(
                    &serde_json::to_value(&next).map_err(|e| CliError::internal(e.to_string()))?,
                );
            } else {
                match &next.next {
                    Some(id) => out::line(&format!("next: {id}")),
                    None => out::line(&format!(
                        "no open leaf is ready; the plan is {}",
                        serde_json::to_value(next.state)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    )),
                }
            }
            Ok(())
        }
        PlanCmd::Sync { planning_dir } => sync(&app, planning_dir),
    }
}

/// Reads a plan file in the format its extension names (JSON for `-` or no extension).
fn read_plan(path: &Path) -> Result<PlanFile, CliError> {
    let shown = path.display().to_string();
    let text = if path == Path::new("-") {
        let mut s = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(std::io::stdin(), files::MAX_FILE_BYTES * 64),
            &mut s,
        )
        .map_err(|e| CliError::usage(format!("cannot read the plan from stdin: {e}")))?;
        s
    } else {
        let meta = std::fs::metadata(path)
            .map_err(|e| CliError::usage(format!("cannot read {shown}: {e}; check the path")))?;
        if meta.len() > files::MAX_FILE_BYTES * 64 {
            return Err(CliError::refused(format!(
                "refused: {shown} is over 64 MiB; split the plan"
            )));
        }
        let bytes = std::fs::read(path)
            .map_err(|e| CliError::usage(format!("cannot read {shown}: {e}; check the path")))?;
        String::from_utf8(bytes).map_err(|_| {
            CliError::refused(format!(
                "refused: {shown} is not valid UTF-8; save it as UTF-8"
            ))
        })?
    };
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let bad = |fmt: &str, e: String| {
        CliError::refused(format!(
            "refused: {shown} is not a valid {fmt} plan: {}; see `warden plan import --help` for the shape",
            e.split_whitespace().collect::<Vec<_>>().join(" ")
        ))
    };
    match ext.as_str() {
        "toml" => toml::from_str(&text).map_err(|e| bad("TOML", e.to_string())),
        "yaml" | "yml" => serde_saphyr::from_str(&text).map_err(|e| bad("YAML", e.to_string())),
        _ => serde_json::from_str(&text).map_err(|e| bad("JSON", e.to_string())),
    }
}

fn import(app: &App, file: &Path) -> Result<(), CliError> {
    let plan = read_plan(file)?;
    let existing = app.tasks()?;
    let existing_ids: Vec<TaskId> = existing.iter().map(|t| t.id().clone()).collect();
    let mut problems: Vec<String> = match tree::validate_plan(&plan.tasks, &existing_ids) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(|e| e.to_string()).collect(),
    };
    for n in &plan.tasks {
        if existing_ids.contains(&n.id) {
            problems.push(format!(
                "task {} already exists; import adds new tasks (change existing ones with `warden plan apply`)",
                n.id
            ));
        }
    }
    let shown = file.display().to_string();
    let mut changes = Vec::new();
    if problems.is_empty() {
        for n in &plan.tasks {
            let spec = n.to_spec(&app.config.limits);
            let initial = Initial {
                passes: n.passes.unwrap_or(false),
                attempts: n.attempts.unwrap_or(0),
            };
            match ops::create(spec, initial, &app.ctx(&shown)) {
                Ok(c) => changes.push(c),
                Err(e) => problems.push(e.to_string().trim_start_matches("refused: ").to_owned()),
            }
        }
    }
    if !problems.is_empty() {
        return Err(CliError::refused(format!(
            "refused: {shown} was not imported ({} problem{}): {}",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" },
            problems.join("; ")
        )));
    }
    let n = changes.len();
    app.commit_batch(Batch {
        changes,
        ..Default::default()
    })?;
    if app.json {
        let ids: Vec<&str> = plan.tasks.iter().map(|n| n.id.as_str()).collect();
        out::json(&json!({"imported": ids}));
    } else {
        out::line(&format!("imported {n} task(s) from {shown}"));
    }
    Ok(())
}

fn show(app: &App) -> Result<(), CliError> {
    let tasks = app.tasks()?;
    let idx = tree::TreeIndex::new(&tasks);
    fn node_json(idx: &tree::TreeIndex<'_>, t: &Task) -> Value {
        let children: Vec<Value> = idx
            .children(t.id())
            .into_iter()
            .map(|c| node_json(idx, c))
            .collect();
        json!({
            "id": t.id(),
            "title": t.spec.title,
            "status": t.status().as_str(),
            "passes": t.passes(),
            "attempts": t.attempts(),
            "max_attempts": t.spec.max_attempts,
            "depends_on": t.spec.depends_on,
            "children": children,
        })
    }
    let roots: Vec<&Task> = tree::depth_first(&tasks)
        .into_iter()
        .filter(|t| t.spec.parent.is_none() || idx.get(t.spec.parent.as_ref().unwrap()).is_none())
        .collect();
    if app.json {
        let v: Vec<Value> = roots.iter().map(|t| node_json(&idx, t)).collect();
        out::json(&json!(v));
        return Ok(());
    }
    if tasks.is_empty() {
        out::line("no tasks; import a plan with `warden plan import FILE`");
        return Ok(());
    }
    let mut s = String::new();
    fn walk(idx: &tree::TreeIndex<'_>, t: &Task, depth: usize, s: &mut String) {
        let mark = if t.passes() { "✓" } else { " " };
        let deps = if t.spec.depends_on.is_empty() {
            String::new()
        } else {
            let d: Vec<&str> = t.spec.depends_on.iter().map(|d| d.as_str()).collect();
            format!("  (after {})", d.join(", "))
        };
        s.push_str(&format!(
            "{}{mark} {} [{}] {} — attempts {}/{}{deps}\n",
            "  ".repeat(depth),
            t.id(),
            out::status(t.status()),
            t.spec.title,
            t.attempts(),
            t.spec.max_attempts,
        ));
        for c in idx.children(t.id()) {
            walk(idx, c, depth + 1, s);
        }
    }
    for r in roots {
        walk(&idx, r, 0, &mut s);
    }
    out::print(&s);
    Ok(())
}

fn apply(app: &App, a: ApplyArgs) -> Result<(), CliError> {
    let selected = task_id(&a.selected)?;
    let status: AgentStatus = a.status.parse().map_err(CliError::usage)?;
    let guard = match &a.guard {
        Some(g) => Some(g.parse::<tree::GuardOutcome>().map_err(CliError::usage)?),
        None => None,
    };
    if status == AgentStatus::Done && guard.is_none() {
        return Err(CliError::usage(
            "--status done needs --guard pass|fail|skipped (the guard's outcome decides)",
        ));
    }
    let plan = read_plan(&a.file)?;
    let shown = a.file.display().to_string();
    for _ in 0..20 {
        let prev = app.tasks()?;
        let update = tree::apply_state_updates(
            &prev,
            plan.tasks.clone(),
            &selected,
            status,
            guard,
            &app.config.limits,
        )
        .map_err(|e| {
            let code = if matches!(e, tree::ApplyError::MissingGuard) {
                2
            } else {
                1
            };
            let msg = e.to_string();
            CliError::new(
                code,
                if code == 1 && !msg.starts_with("refused") {
                    format!("refused: {msg}")
                } else {
                    msg
                },
            )
        })?;
        let changes = plan_ops::plan_applied(&prev, &update, &selected, &app.ctx(&shown))?;
        match app.commit_batch(Batch {
            changes,
            ..Default::default()
        }) {
            Ok(()) => {}
            Err(e) if e.exit_code() == 4 => continue,
            Err(e) => return Err(e.into()),
        }
        let tamper_ids: Vec<&TaskId> = {
            let mut v: Vec<&TaskId> = update.tamper_ignored.iter().map(|t| &t.id).collect();
            v.sort();
            v.dedup();
            v
        };
        let summary = json!({
            "passes_set": update.passes_set,
            "derived_passes_set": update.derived_passes_set,
            "attempts_incremented": update.attempts_incremented,
            "tamper_ignored": tamper_ids,
        });
        if app.json {
            out::json(&summary);
        } else {
            let list = |k: &str| {
                let v: Vec<String> = summary[k]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                if v.is_empty() {
                    "none".into()
                } else {
                    v.join(", ")
                }
            };
            out::line(&format!(
                "applied {} for {selected}\n  passes set:           {}\n  derived passes set:   {}\n  attempts incremented: {}\n  tamper ignored:       {}",
                a.status,
                list("passes_set"),
                list("derived_passes_set"),
                list("attempts_incremented"),
                list("tamper_ignored"),
            ));
        }
        return Ok(());
    }
    Err(StoreError::Conflict {
        task: selected.to_string(),
        expected: 0,
        found: 0,
    }
    .into())
}

/// Scans `.planning/phases/NN-name/NN-MM-PLAN.md` (get-shit-done's layout).
fn scan_planning(dir: &Path) -> Result<Vec<ScannedPhase>, CliError> {
    let phases_dir = dir.join("phases");
    let entries = std::fs::read_dir(&phases_dir).map_err(|e| {
        CliError::usage(format!(
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
            CliError::refused(format!(
                "refused: phase directory {name:?} cannot be a task id: {e}"
            ))
        })?;
        let mut plans: Vec<(String, PathBuf)> = std::fs::read_dir(&path)
            .map_err(|e| CliError::internal(format!("cannot read {}: {e}", path.display())))?
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
            let pid = TaskId::new(&stem.to_lowercase()).map_err(|e| {
                CliError::refused(format!("refused: plan {stem:?} cannot be a task id: {e}"))
            })?;
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

fn sync(app: &App, dir: Option<PathBuf>) -> Result<(), CliError> {
    let dir = dir.unwrap_or_else(|| app.ws.root.join(".planning"));
    let scanned = scan_planning(&dir)?;
    let shown = dir.display().to_string();
    for _ in 0..20 {
        let tasks = app.tasks()?;
        let changes =
            plan_ops::planning_sync(&tasks, &scanned, &app.config.limits, &app.ctx(&shown))?;
        let n = changes.len();
        match app.commit_batch(Batch {
            changes,
            ..Default::default()
        }) {
            Ok(()) => {}
            Err(e) if e.exit_code() == 4 => continue,
            Err(e) => return Err(e.into()),
        }
        let plans: usize = scanned.iter().map(|p| p.plans.len()).sum();
        let done: usize = scanned
            .iter()
            .flat_map(|p| &p.plans)
            .filter(|p| p.done)
            .count();
        if app.json {
            out::json(
                &json!({"phases": scanned.len(), "plans": plans, "complete": done, "changed": n}),
            );
        } else {
            out::line(&format!(
                "synced {} phase(s), {plans} plan(s) ({done} complete) from {shown}; {n} task(s) changed",
                scanned.len()
            ));
        }
        return Ok(());
    }
    Err(CliError::new(
        4,
        "conflict: the tasks kept changing during plan sync; run it again",
    ))
}
