//! `warden task …`: create, read and move single tasks. Each command parses its
//! arguments into a request of the application layer (`warden_app::task`) and formats
//! the typed answer; nothing here decides anything.

use clap::{Args, Subcommand};
use serde_json::json;
use warden_app::edit::EditTask;
use warden_app::task::{Answer, CreateTask, RetryTask, Transition};
use warden_app::view::{Children, TaskView};
use warden_app::{App, Result};
use warden_core::event::SpecChange;
use warden_core::exit::ExitReport;
use warden_core::failure::Failure;
use warden_core::model::{Status, TaskId, WorkSpec, WorkflowKind};
use warden_store::files;

use crate::ctx::{Global, id_or_env};
use crate::out;
use warden_app::scope::Request;

#[derive(Subcommand, Debug)]
pub enum TaskCmd {
    /// Create a task (status pending; TASK.md is created beside it).
    #[command(
        after_help = "Examples:\n  warden task create api --title \"REST API\" --agent \"Build the REST API\"\n  warden task create lint --work \"cargo clippy\" --postchecks \"cargo test\"\n  warden task create ui --parent app --depends-on api"
    )]
    Create(CreateArgs),
    /// List tasks in tree order (parents before their children, siblings by order).
    #[command(
        after_help = "Examples:\n  warden task list\n  warden task list --status stuck\n  warden task list --needs-me     # reviews, questions, stuck tasks, dead sessions\n  warden --json task list"
    )]
    List {
        /// Only tasks in this status.
        #[arg(long, conflicts_with = "needs_me")]
        status: Option<String>,
        /// Only tasks that wait for a person: a review to approve, a question, a stuck
        /// task, a dead session.
        #[arg(long)]
        needs_me: bool,
    },
    /// Show one task.
    #[command(after_help = "Example:\n  warden --json task show api")]
    Show {
        /// Task id (default: $WARDEN_TASK_ID).
        id: Option<String>,
    },
    /// Move a task to a new status, checked against the workflow and its artifact gates.
    #[command(
        after_help = "Examples:\n  warden task update api --status working\n  warden task update api --status reviewing   # needs \"## Review\" with PASS\n  warden task update api --status done --request-id merge-42"
    )]
    Update(UpdateArgs),
    /// working → agent-review: needs a non-empty "## Handoff"; runs the postchecks.
    #[command(
        after_help = "Example (inside an agent session, the id comes from $WARDEN_TASK_ID):\n  warden task complete"
    )]
    Complete {
        /// Task id (default: $WARDEN_TASK_ID).
        id: Option<String>,
        /// Apply at most once: a repeated request with this key only prints the first result
        /// (printable, at most 200 characters).
        #[arg(long, value_name = "KEY")]
        request_id: Option<String>,
    },
    /// Report that a task's session ended (exit monitoring's single entry point).
    #[command(
        after_help = "Examples:\n  warden task exited api --exit-code 0 --session s-17\n  warden task exited      # from an agent harness hook, with $WARDEN_TASK_ID"
    )]
    Exited {
        /// Task id (default: $WARDEN_TASK_ID).
        id: Option<String>,
        /// The session's exit code.
        #[arg(long, allow_negative_numbers = true)]
        exit_code: Option<i32>,
        /// The session that ended (stale and repeated reports change nothing; printable,
        /// at most 200 characters).
        #[arg(long)]
        session: Option<String>,
        /// Why it ended, as the reporter knows it (e.g. a harness's session-end reason;
        /// kept whole up to 4000 characters, cut after).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Run a stuck task again, optionally with new work or checks.
    #[command(
        after_help = "Examples:\n  warden task retry api\n  warden task retry api --postchecks \"cargo test -p api\"\n  warden task retry api --work \"make fix\" --no-prechecks\n  warden task retry api --clear-worktree"
    )]
    Retry(RetryArgs),
    /// Change a task's place in the plan: title, dependencies, parent, order, attempts.
    #[command(
        after_help = "What is left out is kept. The tree's rules hold as on import: every task named exists,\nno cycle of parents or dependencies, no dependency that can never be met.\n\nA plan stuck on a cancelled task (`warden plan next` names it) moves on once the tasks\nthat wait for it drop it, or depend on another task instead.\n\nExamples:\n  warden task edit ui --drop-depends-on api-v1 --depends-on api-v2\n  warden task edit ui --title \"Checkout pages\" --max-attempts 5\n  warden task edit ui --parent web --order 2\n  warden task edit ui --no-parent"
    )]
    Edit(EditArgs),
    /// Approve a task in review: reviewing → done (its branch is merged into the base).
    #[command(
        after_help = "Read the review first (`warden task show ID`, or the ## Review section of its TASK.md).\n\nExample:\n  warden task approve api"
    )]
    Approve {
        /// Task id.
        id: String,
    },
    /// Reject a task in review: back to the worker, with your reason in its next prompt.
    #[command(
        after_help = "Example:\n  warden task reject api --reason \"The 404 path returns 500; add a test for it\""
    )]
    Reject {
        /// Task id.
        id: String,
        /// What the worker must change (shown to it in its next prompt).
        #[arg(long, value_name = "TEXT")]
        reason: String,
    },
    /// Cancel a task (terminal).
    #[command(
        after_help = "Its session is stopped and its work is never merged. A group's cancel cancels every
unfinished task in it, and what is placed under it later.

Examples:
  warden task cancel docs --reason \"dropped from the release\"
  warden task cancel 02-api     # a group: every task in it"
    )]
    Cancel {
        /// Task id (default: $WARDEN_TASK_ID).
        id: Option<String>,
        /// Why (at most 4,000 characters).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Ask for a new session for a task whose session is dead.
    #[command(
        after_help = "The running supervisor starts it at once; otherwise the next `warden run` does.\n\nExample:\n  warden task respawn api"
    )]
    Respawn {
        /// Task id (default: $WARDEN_TASK_ID).
        id: Option<String>,
    },
    /// Ask for a session for a task now (the supervisor starts it); same rules as respawn.
    #[command(after_help = "Example:\n  warden task spawn api")]
    Spawn {
        /// Task id (default: $WARDEN_TASK_ID).
        id: Option<String>,
    },
    /// Show the last lines of a task's live session (tmux pane, else its output log).
    #[command(after_help = "Example:\n  warden task peek api --lines 40")]
    Peek {
        /// Task id (default: $WARDEN_TASK_ID).
        id: Option<String>,
        /// How many lines.
        #[arg(long, default_value_t = 20)]
        lines: usize,
    },
    /// Print the captured session output of a task.
    #[command(
        after_help = "Examples:\n  warden task log api\n  warden task log api -f     # follow until its session ends (Ctrl-C stops)"
    )]
    Log {
        /// Task id (default: $WARDEN_TASK_ID).
        id: Option<String>,
        /// Keep printing what the session writes, until no session of the task is live.
        #[arg(short, long)]
        follow: bool,
    },
}

impl TaskCmd {
    /// The command's name and what it asks of an agent session's scope.
    pub fn agent_request(&self) -> (&'static str, Request) {
        let change = |id: &Option<String>| Request::Change { id: id.clone() };
        match self {
            TaskCmd::List { .. } => ("warden task list", Request::Free),
            TaskCmd::Show { .. } => ("warden task show", Request::Free),
            TaskCmd::Peek { .. } => ("warden task peek", Request::Free),
            TaskCmd::Log { .. } => ("warden task log", Request::Free),
            TaskCmd::Update(a) => (
                "warden task update",
                Request::Transition {
                    id: a.id.clone(),
                    to: a.status.clone(),
                },
            ),
            TaskCmd::Complete { id, .. } => (
                "warden task complete",
                Request::Transition {
                    id: id.clone(),
                    to: "agent-review".into(),
                },
            ),
            TaskCmd::Exited { id, .. } => ("warden task exited", change(id)),
            TaskCmd::Create(_) => ("warden task create", Request::Person),
            TaskCmd::Retry(_) => ("warden task retry", Request::Person),
            TaskCmd::Edit(_) => ("warden task edit", Request::Person),
            TaskCmd::Approve { .. } => ("warden task approve", Request::Person),
            TaskCmd::Reject { .. } => ("warden task reject", Request::Person),
            TaskCmd::Cancel { .. } => ("warden task cancel", Request::Person),
            TaskCmd::Respawn { .. } => ("warden task respawn", Request::Person),
            TaskCmd::Spawn { .. } => ("warden task spawn", Request::Person),
        }
    }
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// The id: 1-64 of a-z 0-9 . _ - (starting with a letter or digit).
    id: String,
    /// A one-line title (default: the id).
    #[arg(long)]
    title: Option<String>,
    /// The parent task.
    #[arg(long)]
    parent: Option<String>,
    /// A task that must be done first (repeatable).
    #[arg(long = "depends-on", value_name = "ID")]
    depends_on: Vec<String>,
    /// Shell work, run by `sh -c`.
    #[arg(long, conflicts_with = "agent", value_name = "CMD")]
    work: Option<String>,
    /// Agent work: instructions for the configured agent.
    #[arg(long, value_name = "TEXT")]
    agent: Option<String>,
    /// Shell checks run before the work.
    #[arg(long, value_name = "CMD")]
    prechecks: Option<String>,
    /// Shell checks run after the work: the guard.
    #[arg(long, value_name = "CMD")]
    postchecks: Option<String>,
    /// Failed attempts before the task is stuck (default from config).
    #[arg(long)]
    max_attempts: Option<u32>,
    /// review (artifact-gated, default for agent work) or direct (guard only).
    #[arg(long)]
    workflow: Option<String>,
    /// Sort key among siblings.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    order: i64,
    /// Read the body (instructions, context) from this file.
    #[arg(long, value_name = "FILE")]
    body_file: Option<std::path::PathBuf>,
    /// The agent that works on it: claude, codex, aider or custom (default: [agent]
    /// preset in warden.toml).
    #[arg(long, value_name = "PRESET")]
    preset: Option<String>,
}

#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// Task id (default: $WARDEN_TASK_ID).
    id: Option<String>,
    /// The new status.
    #[arg(long)]
    status: String,
    /// Why (recorded in the history; at most 4,000 characters).
    #[arg(long)]
    reason: Option<String>,
    /// Apply at most once: a repeated request with this key only prints the first result
    /// (printable, at most 200 characters).
    #[arg(long, value_name = "KEY")]
    request_id: Option<String>,
}

#[derive(Args, Debug)]
pub struct EditArgs {
    /// Task id.
    id: String,
    /// A new one-line title.
    #[arg(long)]
    title: Option<String>,
    /// Add a task that must be done first (repeatable).
    #[arg(long = "depends-on", value_name = "ID")]
    depends_on: Vec<String>,
    /// Remove a dependency (repeatable).
    #[arg(long = "drop-depends-on", value_name = "ID")]
    drop_depends_on: Vec<String>,
    /// Move it under this task.
    #[arg(long, conflicts_with = "no_parent", value_name = "ID")]
    parent: Option<String>,
    /// Make it a root task.
    #[arg(long)]
    no_parent: bool,
    /// A new sort key among its siblings.
    #[arg(long, allow_negative_numbers = true)]
    order: Option<i64>,
    /// Failed attempts allowed before it is stuck.
    #[arg(long)]
    max_attempts: Option<u32>,
}

#[derive(Args, Debug)]
pub struct RetryArgs {
    /// Task id (default: $WARDEN_TASK_ID).
    id: Option<String>,
    /// New shell work.
    #[arg(long, conflicts_with = "agent", value_name = "CMD")]
    work: Option<String>,
    /// New agent instructions.
    #[arg(long, value_name = "TEXT")]
    agent: Option<String>,
    /// New prechecks.
    #[arg(long, conflicts_with = "no_prechecks", value_name = "CMD")]
    prechecks: Option<String>,
    /// Remove the prechecks.
    #[arg(long)]
    no_prechecks: bool,
    /// New postchecks.
    #[arg(long, conflicts_with = "no_postchecks", value_name = "CMD")]
    postchecks: Option<String>,
    /// Remove the postchecks.
    #[arg(long)]
    no_postchecks: bool,
    /// Reset the worktree to its base and run every phase again.
    #[arg(long)]
    clear_worktree: bool,
}

pub fn run(g: &Global, cmd: TaskCmd) -> Result<()> {
    let app = g.open()?;
    match cmd {
        TaskCmd::Create(a) => create(g, &app, a),
        TaskCmd::List { status, needs_me } => list(g, &app, status, needs_me),
        TaskCmd::Show { id } => show(g, &app, &id_or_env(id)?),
        TaskCmd::Update(a) => {
            let req = Transition {
                id: id_or_env(a.id)?,
                to: warden_app::status(&a.status)?,
                reason: a.reason,
                request_id: a.request_id,
            };
            report(g, &app, app.transition(&req)?)
        }
        TaskCmd::Complete { id, request_id } => {
            let req = Transition {
                request_id,
                ..Transition::to(id_or_env(id)?, Status::AgentReview)
            };
            report(g, &app, app.transition(&req)?)
        }
        TaskCmd::Exited {
            id,
            exit_code,
            session,
            reason,
        } => {
            let id = id_or_env(id)?;
            // Inside an agent session, the report is of that session's role (for its own
            // task): a worker's end after its hand-off is only recorded.
            let role = warden_app::scope::AgentSession::from_env()
                .filter(|s| s.task.as_ref() == Some(&id))
                .map(|s| s.role);
            exited(
                g,
                &app,
                &id,
                ExitReport {
                    role,
                    session,
                    exit_code,
                    reason,
                },
            )
        }
        TaskCmd::Retry(a) => retry(g, &app, a),
        TaskCmd::Edit(a) => edit(g, &app, a),
        TaskCmd::Approve { id } => {
            let id = warden_app::task_id(&id)?;
            report(g, &app, app.approve(&id)?)
        }
        TaskCmd::Reject { id, reason } => {
            let id = warden_app::task_id(&id)?;
            report(g, &app, app.reject(&id, &reason)?)
        }
        TaskCmd::Cancel { id, reason } => {
            let req = Transition {
                reason,
                ..Transition::to(id_or_env(id)?, Status::Cancelled)
            };
            report(g, &app, app.transition(&req)?)
        }
        TaskCmd::Respawn { id } | TaskCmd::Spawn { id } => {
            let id = id_or_env(id)?;
            let answer = app.respawn(&id)?;
            if g.json {
                out::json(&app.response(&answer)?);
            } else {
                out::line(&format!(
                    "{id}: respawn requested; the running supervisor (or the next `warden run`) starts a new session"
                ));
            }
            Ok(())
        }
        TaskCmd::Peek { id, lines } => {
            let p = app.peek(&id_or_env(id)?, lines)?;
            if g.json {
                out::json(&p);
            } else {
                out::print(&String::from_utf8_lossy(&out::for_terminal(
                    p.output.as_bytes(),
                )));
                if !p.output.ends_with('\n') {
                    out::line("");
                }
            }
            Ok(())
        }
        TaskCmd::Log { id, follow: true } => {
            let id = id_or_env(id)?;
            follow_log(g, &app, &id)
        }
        TaskCmd::Log { id, follow: false } => {
            let id = id_or_env(id)?;
            let log = app.output_log(&id)?;
            if g.json {
                out::json(&log);
            } else {
                if log.omitted_bytes > 0 {
                    out::line(&format!(
                        "--- the first {} bytes of the log are not shown; the whole log is {} ---",
                        log.omitted_bytes, log.file
                    ));
                }
                out::print(&String::from_utf8_lossy(&out::for_terminal(
                    log.output.as_bytes(),
                )));
            }
            Ok(())
        }
    }
}

fn create(g: &Global, app: &App, a: CreateArgs) -> Result<()> {
    let workflow = a
        .workflow
        .as_deref()
        .map(|w| w.parse::<WorkflowKind>().map_err(Failure::usage))
        .transpose()?;
    let body = match &a.body_file {
        Some(f) => Some(warden_app::input::read_text(
            f,
            files::MAX_FILE_BYTES,
            "--body-file",
        )?),
        None => None,
    };
    let req = CreateTask {
        id: a.id,
        title: a.title,
        body,
        parent: a.parent,
        depends_on: a.depends_on,
        work: match (a.work, a.agent) {
            (Some(w), _) => Some(WorkSpec::Shell(w)),
            (None, Some(t)) => Some(WorkSpec::Agent(t)),
            (None, None) => None,
        },
        prechecks: a.prechecks.map(WorkSpec::Shell),
        postchecks: a.postchecks.map(WorkSpec::Shell),
        max_attempts: a.max_attempts,
        workflow,
        order: Some(a.order),
        preset: a
            .preset
            .as_deref()
            .map(|p| p.parse().map_err(Failure::usage))
            .transpose()?,
    };
    let task = app.create(req)?;
    if g.json {
        out::json(&task);
    } else {
        out::line(&format!(
            "created {} ({}, {} workflow); TASK.md: {}",
            task.id,
            out::status(task.status),
            task.workflow,
            app.task_file_shown(&task.id)
        ));
    }
    Ok(())
}

fn list(g: &Global, app: &App, status: Option<String>, needs_me: bool) -> Result<()> {
    let filter = status.as_deref().map(warden_app::status).transpose()?;
    // The table shows no children: only `--json` reads them.
    let children = if g.json {
        Children::Listed
    } else {
        Children::Omitted
    };
    let shown: Vec<TaskView> = if needs_me {
        app.list_needs_you(children)?
    } else {
        app.list(filter, children)?
    };
    let whole_tree = filter.is_none() && !needs_me;
    if g.json {
        out::json(&shown);
        return Ok(());
    }
    if shown.is_empty() {
        out::line(if needs_me {
            "nothing waits for you"
        } else {
            "no tasks"
        });
        return Ok(());
    }
    // The whole tree is indented by depth (parents come before their children).
    let mut depth: std::collections::HashMap<&TaskId, usize> = Default::default();
    for t in &shown {
        let d = match (&t.parent, whole_tree) {
            (Some(p), true) => depth.get(p).map_or(0, |d| d + 1),
            _ => 0,
        };
        depth.insert(&t.id, d);
    }
    let label = |t: &TaskView| format!("{}{}", "  ".repeat(depth[&t.id]), t.id);
    let w = shown
        .iter()
        .map(|t| label(t).len())
        .max()
        .unwrap_or(2)
        .max(2);
    let mut s = format!(
        "{:w$}  {:13}  {:9}  {:8}  TITLE\n",
        "ID", "STATUS", "GATE", "ATTEMPTS"
    );
    for t in &shown {
        let gate = t.gate.map(|g| g.as_str()).unwrap_or("-");
        let st = out::status(t.status);
        let pad = 13usize.saturating_sub(t.status.as_str().len());
        s.push_str(&format!(
            "{:w$}  {st}{}  {:9}  {:8}  {}{}\n",
            label(t),
            " ".repeat(pad),
            gate,
            format!("{}/{}", t.attempts, t.max_attempts),
            t.title,
            if t.dead { " ✗" } else { "" },
        ));
    }
    out::print(&s);
    Ok(())
}

fn show(g: &Global, app: &App, id: &TaskId) -> Result<()> {
    let t = app.task(id)?;
    if g.json {
        out::json(&t);
        return Ok(());
    }
    let mut s = format!("{} — {}\n", t.id, t.title);
    s.push_str(&format!(
        "  status     {}{}\n",
        out::status(t.status),
        if t.dead { "  ✗ session dead" } else { "" }
    ));
    if let Some(gate) = t.gate {
        let by = match &t.blocked_by {
            Some(b) => format!(" by {}", out::waited_on(&b.task, b.status)),
            None => String::new(),
        };
        s.push_str(&format!("  gate       {}{by}\n", gate.as_str()));
    }
    s.push_str(&format!("  workflow   {}\n", t.workflow));
    s.push_str(&format!(
        "  passes     {}   attempts {}/{}   crashes {}   review round {}\n",
        t.passes, t.attempts, t.max_attempts, t.crash_count, t.review_round
    ));
    if let Some(p) = &t.parent {
        s.push_str(&format!("  parent     {p}\n"));
    }
    let ids = |v: &[TaskId]| v.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ");
    if !t.children.is_empty() {
        s.push_str(&format!("  children   {}\n", ids(&t.children)));
    }
    if !t.depends_on.is_empty() {
        s.push_str(&format!("  depends on {}\n", ids(&t.depends_on)));
    }
    let spec_line = |name: &str, w: &Option<WorkSpec>| match w {
        Some(WorkSpec::Shell(c)) => format!("  {name:10} sh -c {c:?}\n"),
        Some(WorkSpec::Process(a)) => format!("  {name:10} {a:?}\n"),
        Some(WorkSpec::Agent(a)) => {
            format!("  {name:10} agent: {}\n", a.lines().next().unwrap_or(""))
        }
        None => String::new(),
    };
    s.push_str(&spec_line("work", &t.spec.work));
    s.push_str(&spec_line("prechecks", &t.spec.prechecks));
    s.push_str(&spec_line("postchecks", &t.spec.postchecks));
    let phases: Vec<String> = t.phases.iter().map(|(p, st)| format!("{p}={st}")).collect();
    s.push_str(&format!("  phases     {}\n", phases.join(" ")));
    if let Some(p) = t.resume_from_phase {
        s.push_str(&format!("  resume     from {p}\n"));
    }
    if let Some(f) = &t.last_failure {
        s.push_str(&format!("  failure    {}\n", out::one_line(f)));
    }
    s.push_str(&format!(
        "  version    {}   updated {}\n  TASK.md    {}\n",
        t.version,
        t.updated_at,
        app.task_file_shown(&t.id)
    ));
    out::print(&s);
    Ok(())
}

/// Prints the answer of a write: the JSON response, or one line for a person; a stored
/// failure (a failed guard) is then the command's failure (exit 1, its attempt stored).
fn report(g: &Global, app: &App, answer: Answer) -> Result<()> {
    if g.json {
        out::json(&app.response(&answer)?);
    } else if answer.failure.is_none() {
        out::line(&summary_coloured(&answer));
    }
    answer.into_result().map(|_| ())
}

/// The summary line, with the statuses coloured on a terminal.
fn summary_coloured(answer: &Answer) -> String {
    let line = answer.summary();
    match answer.task() {
        Some(t) if out::color() => line.replacen(
            &format!("→ {}", t.status()),
            &format!("→ {}", out::status(t.status())),
            1,
        ),
        _ => line,
    }
}

fn exited(g: &Global, app: &App, id: &TaskId, report: ExitReport) -> Result<()> {
    let answer = app.exited(id, &report)?;
    let response = app.response(&answer)?;
    if g.json {
        out::json(&response);
    } else if response
        .exit
        .as_ref()
        .is_some_and(|e| e.disposition == "duplicate")
    {
        out::line(&format!(
            "{}: that session's end was reported already; nothing recorded; status {}",
            response.task.id,
            out::status(response.task.status)
        ));
    } else if let Some(exit) = &response.exit {
        out::line(&format!(
            "{}: session end recorded ({}); {}; status {}",
            response.task.id,
            exit.disposition,
            exit.action,
            out::status(response.task.status)
        ));
    }
    Ok(())
}

fn retry(g: &Global, app: &App, a: RetryArgs) -> Result<()> {
    let id = id_or_env(a.id)?;
    let req = RetryTask {
        work: match (a.work, a.agent) {
            (Some(w), _) => Some(WorkSpec::Shell(w)),
            (None, Some(t)) => Some(WorkSpec::Agent(t)),
            (None, None) => None,
        },
        prechecks: match (a.prechecks, a.no_prechecks) {
            (Some(c), _) => SpecChange::Set(WorkSpec::Shell(c)),
            (None, true) => SpecChange::Remove,
            (None, false) => SpecChange::Keep,
        },
        postchecks: match (a.postchecks, a.no_postchecks) {
            (Some(c), _) => SpecChange::Set(WorkSpec::Shell(c)),
            (None, true) => SpecChange::Remove,
            (None, false) => SpecChange::Keep,
        },
        clear_worktree: a.clear_worktree,
    };
    report(g, app, app.retry(&id, &req)?)
}

fn edit(g: &Global, app: &App, a: EditArgs) -> Result<()> {
    let id = warden_app::task_id(&a.id)?;
    let req = EditTask {
        title: a.title,
        depends_on: a.depends_on,
        drop_depends_on: a.drop_depends_on,
        parent: match (a.parent, a.no_parent) {
            (Some(p), _) => Some(Some(p)),
            (None, true) => Some(None),
            (None, false) => None,
        },
        order: a.order,
        max_attempts: a.max_attempts,
    };
    let edited = app.edit(&id, &req)?;
    if g.json {
        out::json(&edited);
        return Ok(());
    }
    if edited.changed.is_empty() {
        out::line(&format!(
            "{id}: unchanged (it already had what you asked for)"
        ));
        return Ok(());
    }
    let mut s = format!("{id}: edited\n");
    for c in &edited.changed {
        s.push_str(&format!(
            "  {:12} {}  (was {})\n",
            c.field.replace('_', " "),
            shown_value(c.field, &c.now),
            shown_value(c.field, &c.was)
        ));
    }
    if let Some(file) = &edited.synced_from {
        s.push_str(&format!(
            "note: {id} comes from {file}; the next `warden plan sync` sets its plan fields from that file again, so change them there\n"
        ));
    }
    out::print(&s);
    Ok(())
}

/// A plan field's value as a person reads it: `a, b`, `none`, a quoted title, a number.
fn shown_value(field: &str, v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) if field != "title" => s.clone(),
        serde_json::Value::Null => "none".to_owned(),
        serde_json::Value::Array(a) if a.is_empty() => "none".to_owned(),
        serde_json::Value::Array(a) => a
            .iter()
            .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// `task log -f`: prints the output log, then what is appended to it, until the task has
/// no live session and the log stopped growing (or the log is replaced by a new session's,
/// which is then followed from its start).
fn follow_log(g: &Global, app: &App, id: &TaskId) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom, Write};
    app.get(id)?;
    let path = app.ws().output_log(id);
    let mut pos: u64 = 0;
    let mut ino = None;
    let mut quiet_since = std::time::Instant::now();
    let mut out = std::io::stdout().lock();
    loop {
        let mut grew = false;
        if let Ok(mut f) = std::fs::File::open(&path) {
            let meta = f.metadata().ok();
            let this = meta.as_ref().map(std::os::unix::fs::MetadataExt::ino);
            let len = meta.as_ref().map_or(0, |m| m.len());
            if this != ino || len < pos {
                // A new session's log (or a truncated one): from its start.
                ino = this;
                pos = 0;
            }
            if len > pos && f.seek(SeekFrom::Start(pos)).is_ok() {
                let mut buf = Vec::new();
                let _ = Read::by_ref(&mut f).take(len - pos).read_to_end(&mut buf);
                pos += buf.len() as u64;
                grew = !buf.is_empty();
                // The pane's end marker is printed in one write: read in one piece.
                let buf = warden_runner::session::without_end_markers_in(&buf);
                if g.json {
                    let line = json!({"id": id, "output": String::from_utf8_lossy(&buf)});
                    let _ = writeln!(out, "{line}");
                } else {
                    let _ = out.write_all(&crate::out::for_terminal(&buf));
                }
                let _ = out.flush();
            }
        }
        if grew {
            quiet_since = std::time::Instant::now();
        } else if quiet_since.elapsed() >= std::time::Duration::from_millis(300) {
            let t = app.get(id)?;
            let live = t.live_session().is_some() && !t.is_dead();
            if !live && t.running_phase().is_none() {
                return Ok(());
            }
            quiet_since = std::time::Instant::now();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
