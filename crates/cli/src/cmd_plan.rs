//! `warden plan …`: the task tree as a whole — import (JSON, TOML, YAML), export, show,
//! reconcile an agent-edited tree (`apply`), pick the next leaf, and sync a
//! get-shit-done `.planning/` directory.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use warden_app::plan::{ApplyRequest, read_plan_file};
use warden_app::view::NodeView;
use warden_app::{App, Result};
use warden_core::failure::Failure;
use warden_core::tree::{self, AgentStatus};

use crate::ctx::Global;
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

pub fn run(g: &Global, cmd: PlanCmd) -> Result<()> {
    let app = g.open()?;
    match cmd {
        PlanCmd::Import { file } => {
            let plan = read_plan_file(&file)?;
            let shown = file.display().to_string();
            let done = app.plan_import(&plan, &shown)?;
            if g.json {
                out::json(&done);
            } else {
                out::line(&format!(
                    "imported {} task(s) from {shown}",
                    done.imported.len()
                ));
            }
            Ok(())
        }
        PlanCmd::Export => {
            out::json(&app.plan_export()?);
            Ok(())
        }
        PlanCmd::Show => show(g, &app),
        PlanCmd::Apply(a) => apply(g, &app, a),
        PlanCmd::Next => {
            let next = app.plan_next()?;
            if g.json {
                out::json(&next);
            } else {
                match &next.next {
                    Some(id) => out::line(&format!("next: {id}")),
                    None => out::line(&format!(
                        "no open leaf is ready; the plan is {}",
                        next.state.as_str()
                    )),
                }
            }
            Ok(())
        }
        PlanCmd::Sync { planning_dir } => {
            let dir = planning_dir.unwrap_or_else(|| app.ws().root.join(".planning"));
            let shown = dir.display().to_string();
            let s = app.plan_sync(Some(dir))?;
            if g.json {
                out::json(&s);
            } else {
                out::line(&format!(
                    "synced {} phase(s), {} plan(s) ({} complete) from {shown}; {} task(s) changed",
                    s.phases, s.plans, s.complete, s.changed
                ));
            }
            Ok(())
        }
    }
}

fn show(g: &Global, app: &App) -> Result<()> {
    let roots = app.plan_show()?;
    if g.json {
        out::json(&roots);
        return Ok(());
    }
    if roots.is_empty() {
        out::line("no tasks; import a plan with `warden plan import FILE`");
        return Ok(());
    }
    let mut s = String::new();
    fn walk(n: &NodeView, depth: usize, s: &mut String) {
        let mark = if n.passes { "✓" } else { " " };
        let deps = if n.depends_on.is_empty() {
            String::new()
        } else {
            let d: Vec<&str> = n.depends_on.iter().map(|d| d.as_str()).collect();
            format!("  (after {})", d.join(", "))
        };
        s.push_str(&format!(
            "{}{mark} {} [{}] {} — attempts {}/{}{deps}\n",
            "  ".repeat(depth),
            n.id,
            out::status(n.status),
            n.title,
            n.attempts,
            n.max_attempts,
        ));
        for c in &n.children {
            walk(c, depth + 1, s);
        }
    }
    for r in &roots {
        walk(r, 0, &mut s);
    }
    out::print(&s);
    Ok(())
}

fn apply(g: &Global, app: &App, a: ApplyArgs) -> Result<()> {
    let selected = warden_app::task_id(&a.selected)?;
    let status: AgentStatus = a.status.parse().map_err(Failure::usage)?;
    let guard = a
        .guard
        .as_deref()
        .map(|g| g.parse::<tree::GuardOutcome>().map_err(Failure::usage))
        .transpose()?;
    if status == AgentStatus::Done && guard.is_none() {
        return Err(Failure::usage(
            "--status done needs --guard pass|fail|skipped (the guard's outcome decides)",
        ));
    }
    let req = ApplyRequest {
        plan: read_plan_file(&a.file)?,
        source: a.file.display().to_string(),
        selected: selected.clone(),
        status,
        guard,
    };
    let summary = app.plan_apply(&req)?;
    if g.json {
        out::json(&summary);
        return Ok(());
    }
    let list = |v: &[warden_core::model::TaskId]| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.iter().map(|x| x.as_str()).collect::<Vec<_>>().join(", ")
        }
    };
    out::line(&format!(
        "applied {} for {selected}\n  passes set:           {}\n  derived passes set:   {}\n  attempts incremented: {}\n  tamper ignored:       {}",
        a.status,
        list(&summary.passes_set),
        list(&summary.derived_passes_set),
        list(&summary.attempts_incremented),
        list(&summary.tamper_ignored),
    ));
    Ok(())
}
