//! `warden plan …`: the task tree as a whole — import (JSON, TOML, YAML), export, show,
//! reconcile an agent-edited tree (`apply`), pick the next leaf, and sync a
//! get-shit-done `.planning/` directory.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use warden_app::plan::{ApplyRequest, PlanInput, read_plan_file};
use warden_app::view::NodeView;
use warden_app::{App, Result};
use warden_core::failure::Failure;
use warden_core::tree::{self, AgentStatus};

use crate::ctx::Global;
use crate::out;

const IMPORT_HELP: &str = r#"A plan is a list of tasks; parents group their children (a group is done when they
all are), and depends_on orders the work. Every field but id is optional:

  {"tasks": [
    {"id": "backend", "title": "Backend"},
    {"id": "api", "parent": "backend", "order": 1,
     "title": "REST API",
     "agent": "Build the REST API for orders; see docs/api.md",
     "postchecks": "cargo test -p api",
     "max_attempts": 3},
    {"id": "migrate", "parent": "backend", "order": 2,
     "work": "./scripts/migrate.sh", "prechecks": "pg_isready"},
    {"id": "ui", "title": "Web UI", "depends_on": ["api"],
     "work": {"agent": "Build the checkout pages"}, "workflow": "review",
     "body": "Longer instructions and context, copied into TASK.md."}
  ]}

Fields:
  id            1-64 of a-z 0-9 . _ - (starting with a letter or digit), unique
  title         one line (default: the id)
  parent        the group it belongs to
  order         sort key among siblings (default 0; ties by id)
  depends_on    tasks that must be done first
  agent         instructions for the configured agent (shorthand for work: {"agent": …})
  work          a shell command ("cargo build"), or {"shell": …}, {"process": [argv…]},
                {"agent": …}; none makes a group or a task a person does
  prechecks     checks before the work (same forms as work)
  postchecks    the guard after the work: it must pass for the task to move on
  max_attempts  failed attempts allowed before the task is stuck (default: [limits])
  workflow      review (agent work: a reviewer judges it) or direct (the guard decides;
                the default for shell and process work)
  body          free text for TASK.md
  passes, attempts   runner-owned; an import may set them (e.g. moving an old plan over)

TOML uses [[tasks]] tables, YAML a tasks: list, with the same fields.

Examples:
  warden plan import plan.json
  cat plan.json | warden plan import -"#;

#[derive(Subcommand, Debug)]
pub enum PlanCmd {
    /// Import a plan (JSON, TOML or YAML, by extension); nothing is imported if anything is wrong.
    #[command(after_help = IMPORT_HELP)]
    Import {
        /// The plan file (`-` for JSON on stdin).
        file: PathBuf,
    },
    /// Print the whole tree as JSON, in the import shape.
    #[command(
        after_help = "Its `as_of_event` lets `plan apply` refuse a file another writer made stale.\n\nExample:\n  warden plan export > tree.json     # edit it, then `warden plan apply tree.json …`"
    )]
    Export,
    /// Print the tree with statuses.
    #[command(after_help = "Examples:\n  warden plan show\n  warden --json plan show")]
    Show,
    /// Reconcile a tree an agent edited (the JSON of `plan export`) for a selected node.
    #[command(
        after_help = "Examples:\n  warden plan apply tree.json --selected api --status done --guard pass\n  warden plan apply tree.json --selected api --status decomposed\n  warden plan apply tree.json --selected api --status retry"
    )]
    Apply(ApplyArgs),
    /// Name the leftmost open leaf whose dependencies are done.
    #[command(
        after_help = "Examples:\n  warden plan next\n  warden --json plan next     # {\"next\": …, \"state\": …}"
    )]
    Next,
    /// Draw the plan: groups as boxes around their children, dependencies as arrows,
    /// every task coloured by its status.
    #[command(
        after_help = "Mermaid renders on GitHub (STATE.md embeds the same picture for plans of up to 200\ntasks); DOT is for Graphviz.\n\nExamples:\n  warden plan graph > plan.mmd\n  warden plan graph --format dot | dot -Tsvg > plan.svg"
    )]
    Graph {
        /// mermaid or dot.
        #[arg(long, default_value = "mermaid", value_name = "FORMAT")]
        format: String,
    },
    /// Read a get-shit-done .planning/ directory: its phases and plans become tasks.
    #[command(
        after_help = "Phases (phases/NN-name/, milestones/vX-phases/, quick/) become tasks in GSD's\nnumeric order; each plan (NN-MM-PLAN.md and GSD's other namings) becomes an agent\ntask under its phase, with the plan's text as its instructions, GSD's depends_on,\nwaves and phase order as dependencies, and its NN-MM-SUMMARY.md as the evidence\nthat counts as its handoff. Plans whose SUMMARY.md has content are done. Sync\nnever touches a task it did not make, never moves a done task back, and never\ndecides for a task someone is working on; what it left alone is listed.\n\nExamples:\n  warden plan sync\n  warden plan sync path/to/.planning\n  warden plan sync --watch      # again on every change, until Ctrl-C"
    )]
    Sync {
        /// The .planning directory (default: .planning at the project root).
        #[arg(id = "planning_dir", value_name = "DIR")]
        planning_dir: Option<PathBuf>,
        /// Sync again whenever something under the directory changes (JSON lines with --json).
        #[arg(long)]
        watch: bool,
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

impl PlanCmd {
    /// The command's name and what it asks of an agent session's scope: reading the
    /// plan is free; changing it is a person's (the MCP server's agent role has no plan
    /// tools either).
    pub fn agent_request(&self) -> (&'static str, warden_app::scope::Request) {
        use warden_app::scope::Request;
        match self {
            PlanCmd::Export => ("warden plan export", Request::Free),
            PlanCmd::Show => ("warden plan show", Request::Free),
            PlanCmd::Next => ("warden plan next", Request::Free),
            PlanCmd::Graph { .. } => ("warden plan graph", Request::Free),
            PlanCmd::Import { .. } => ("warden plan import", Request::Person),
            PlanCmd::Apply(_) => ("warden plan apply", Request::Person),
            PlanCmd::Sync { .. } => ("warden plan sync", Request::Person),
        }
    }
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
        PlanCmd::Graph { format } => {
            let f: warden_core::graph::Format = format.parse().map_err(Failure::usage)?;
            let graph = app.plan_graph(f)?;
            if g.json {
                out::json(&serde_json::json!({ "format": format, "graph": graph }));
            } else {
                out::print(&graph);
            }
            Ok(())
        }
        PlanCmd::Apply(a) => apply(g, &app, a),
        PlanCmd::Next => {
            let next = app.plan_next()?;
            if g.json {
                out::json(&next);
            } else {
                match &next.next {
                    Some(id) => out::line(&format!("next: {id}")),
                    None => {
                        // A stuck plan names what needs a person first.
                        let mut on: Vec<String> = next
                            .stuck_on
                            .iter()
                            .map(|s| out::waited_on(&s.task, s.status))
                            .collect();
                        if next.stuck_on_more > 0 {
                            on.push(format!("and {} more", next.stuck_on_more));
                        }
                        let on = if on.is_empty() {
                            String::new()
                        } else {
                            format!(" on {}", on.join(", "))
                        };
                        let mut text = format!(
                            "no open leaf is ready; the plan is {}{on}",
                            next.state.as_str()
                        );
                        // What a person can do about each.
                        for s in &next.stuck_on {
                            let way = match (&s.needed_by, s.status) {
                                (_, Some(warden_core::model::Status::Stuck)) => {
                                    format!("`warden task retry {}`", s.task)
                                }
                                (Some(by), _) => format!(
                                    "{} can never be done: {}",
                                    s.task,
                                    out::drop_dependency(by, &s.task)
                                ),
                                (None, _) => continue,
                            };
                            text.push_str(&format!("\n  → {way}"));
                        }
                        out::line(&text)
                    }
                }
            }
            Ok(())
        }
        PlanCmd::Sync {
            planning_dir,
            watch,
        } => {
            let dir = planning_dir.unwrap_or_else(|| app.ws().root.join(".planning"));
            if !watch {
                let s = app.plan_sync(Some(dir))?;
                print_synced(g, &s, false);
                return Ok(());
            }
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
                signal_hook::flag::register(sig, std::sync::Arc::clone(&stop)).map_err(|e| {
                    Failure::internal(format!("cannot install a signal handler: {e}"))
                })?;
            }
            app.plan_sync_watch(Some(dir), &stop, &mut |r| match r {
                Ok(s) => print_synced(g, &s, true),
                Err(f) => {
                    crate::out::failure(&f, g.json);
                }
            })
        }
    }
}

/// A sync's report: one JSON document (a line under `--watch`), or a summary line, what
/// was left alone and every warning of the reader.
fn print_synced(g: &Global, s: &warden_app::plan::Synced, watching: bool) {
    if g.json {
        if watching {
            out::line(&serde_json::to_string(s).unwrap_or_default());
        } else {
            out::json(s);
        }
        return;
    }
    let mut text = format!(
        "synced {} phase(s), {} plan(s) ({} complete) from {}; {} task(s) changed\n",
        s.phases, s.plans, s.complete, s.dir, s.changed
    );
    let list = |v: &[warden_core::model::TaskId]| {
        v.iter().map(|x| x.as_str()).collect::<Vec<_>>().join(", ")
    };
    if !s.created.is_empty() {
        text.push_str(&format!("  created: {} task(s)\n", s.created.len()));
    }
    if !s.updated.is_empty() {
        text.push_str(&format!("  updated: {}\n", list(&s.updated)));
    }
    if !s.finished_outside.is_empty() {
        text.push_str(&format!(
            "  finished outside Warden, now done: {}\n",
            list(&s.finished_outside)
        ));
    }
    let e = &s.edges;
    text.push_str(&format!(
        "  order: {} declared, {} wave, {} one-by-one and {} phase-order dependencies\n",
        e.declared, e.wave, e.sequence, e.phase
    ));
    if e.onto_cancelled > 0 {
        text.push_str(&format!(
            "  not kept: {} order dependencies onto cancelled plans\n",
            e.onto_cancelled
        ));
    }
    if !s.phases_without_plans.is_empty() {
        text.push_str(&format!(
            "  phases without plans (no task until they have one): {}\n",
            s.phases_without_plans.join(", ")
        ));
    }
    for w in &s.wrote {
        text.push_str(&format!(
            "  wrote: {w} (its progress line, from the plans' SUMMARY.md files)\n"
        ));
    }
    if s.read_only {
        text.push_str(
            "  read only: the directory is outside the project, nothing is written back\n",
        );
    }
    for n in &s.notes {
        text.push_str(&format!("note: {}\n", n.message));
    }
    out::print(&text);
    // Warnings are about the files, for the person who keeps them: on stderr.
    for w in &s.warnings {
        warden_store::say!("warning: {}: {}", w.path, w.message);
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
        plan: PlanInput::File(a.file.clone()),
        source: a.file.display().to_string(),
        selected: selected.clone(),
        status,
        guard,
    };
    let summary = app.plan_apply(req)?;
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
        "applied {} for {selected}\n  passes set:           {}\n  derived passes set:   {}\n  attempts incremented: {}\n  tamper ignored:       {}\n  created:              {}\n  removed:              {}",
        a.status,
        list(&summary.passes_set),
        list(&summary.derived_passes_set),
        list(&summary.attempts_incremented),
        list(&summary.tamper_ignored),
        list(&summary.created),
        list(&summary.removed),
    ));
    Ok(())
}
