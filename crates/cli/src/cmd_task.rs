//! `warden task …`: create, read and move single tasks. Every change goes through
//! [`App::write_task`], so each is one transaction with its events.

use clap::{Args, Subcommand};
use serde_json::json;
use warden_core::event::SpecChange;
use warden_core::exit::{ExitAction, ExitReport};
use warden_core::model::{Phase, Status, Task, TaskSpec, WorkSpec, WorkflowKind};
use warden_core::ops::{self, Initial, Outcome, TransitionInput};
use warden_core::retry::RetryRequest;
use warden_store::Batch;
use warden_store::files;

use crate::app::{self, App, Decision, Global, Written, id_or_env};
use crate::error::CliError;
use crate::out;
use warden_store::taskfile;

#[derive(Subcommand, Debug)]
pub enum TaskCmd {
    /// Create a task (status pending; TASK.md is created beside it).
    #[command(
        after_help = "Examples:\n  warden task create api --title \"REST API\" --agent \"Build the REST API\"\n  warden task create lint --work \"cargo clippy\" --postchecks \"cargo test\"\n  warden task create ui --parent app --depends-on api"
    )]
    Create(CreateArgs),
    /// List tasks (sorted by id).
    #[command(
        after_help = "Examples:\n  warden task list\n  warden task list --status stuck\n  warden --json task list"
    )]
    List {
        /// Only tasks in this status.
        #[arg(long)]
        status: Option<String>,
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
        /// Apply at most once: a repeated request with this key only prints the first result.
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
        /// The session that ended (stale and repeated reports change nothing).
        #[arg(long)]
        session: Option<String>,
    },
    /// Run a stuck task again, optionally with new work or checks.
    #[command(
        after_help = "Examples:\n  warden task retry api\n  warden task retry api --postchecks \"cargo test -p api\"\n  warden task retry api --work \"make fix\" --no-prechecks\n  warden task retry api --clear-worktree"
    )]
    Retry(RetryArgs),
    /// Cancel a task (terminal).
    Cancel {
        /// Task id (default: $WARDEN_TASK_ID).
        id: Option<String>,
        /// Why.
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
    Log {
        /// Task id (default: $WARDEN_TASK_ID).
        id: Option<String>,
    },
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
}

#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// Task id (default: $WARDEN_TASK_ID).
    id: Option<String>,
    /// The new status.
    #[arg(long)]
    status: String,
    /// Why (recorded in the history).
    #[arg(long)]
    reason: Option<String>,
    /// Apply at most once: a repeated request with this key only prints the first result.
    #[arg(long, value_name = "KEY")]
    request_id: Option<String>,
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

pub fn run(g: &Global, cmd: TaskCmd) -> Result<(), CliError> {
    let app = App::open(g)?;
    match cmd {
        TaskCmd::Create(a) => create(&app, a),
        TaskCmd::List { status } => list(&app, status),
        TaskCmd::Show { id } => show(&app, &id_or_env(id)?),
        TaskCmd::Update(a) => {
            let to: Status = a.status.parse().map_err(CliError::usage)?;
            update(
                &app,
                &id_or_env(a.id)?,
                to,
                a.reason,
                a.request_id.as_deref(),
            )
        }
        TaskCmd::Complete { id, request_id } => update(
            &app,
            &id_or_env(id)?,
            Status::AgentReview,
            None,
            request_id.as_deref(),
        ),
        TaskCmd::Exited {
            id,
            exit_code,
            session,
        } => exited(&app, &id_or_env(id)?, ExitReport { session, exit_code }),
        TaskCmd::Retry(a) => retry(&app, a),
        TaskCmd::Cancel { id, reason } => {
            update(&app, &id_or_env(id)?, Status::Cancelled, reason, None)
        }
        TaskCmd::Respawn { id } | TaskCmd::Spawn { id } => respawn(&app, &id_or_env(id)?),
        TaskCmd::Peek { id, lines } => peek(&app, &id_or_env(id)?, lines),
        TaskCmd::Log { id } => log(&app, &id_or_env(id)?),
    }
}

fn create(app: &App, a: CreateArgs) -> Result<(), CliError> {
    let id = app::task_id(&a.id)?;
    let workflow = match a.workflow.as_deref() {
        Some(w) => w.parse::<WorkflowKind>().map_err(CliError::usage)?,
        None if a.work.is_some() => WorkflowKind::Direct,
        None => WorkflowKind::Review,
    };
    let mut spec = TaskSpec::new(
        id.clone(),
        workflow,
        a.max_attempts.unwrap_or(app.config.limits.max_attempts),
    );
    if let Some(t) = a.title {
        spec.title = t;
    }
    spec.order = a.order;
    if let Some(p) = &a.parent {
        let p = app::task_id(p)?;
        if app.store.get(&p)?.is_none() {
            return Err(CliError::not_found(format!(
                "parent {p} does not exist; create it first or leave out --parent"
            )));
        }
        spec.parent = Some(p);
    }
    for d in &a.depends_on {
        let d = app::task_id(d)?;
        if app.store.get(&d)?.is_none() {
            return Err(CliError::not_found(format!(
                "dependency {d} does not exist; create it first"
            )));
        }
        if !spec.depends_on.contains(&d) {
            spec.depends_on.push(d);
        }
    }
    spec.spec.work = match (a.work, a.agent) {
        (Some(w), _) => Some(WorkSpec::Shell(w)),
        (None, Some(t)) => Some(WorkSpec::Agent(t)),
        (None, None) => None,
    };
    spec.spec.prechecks = a.prechecks.map(WorkSpec::Shell);
    spec.spec.postchecks = a.postchecks.map(WorkSpec::Shell);
    if let Some(f) = &a.body_file {
        let text = std::fs::read(f).map_err(|e| {
            CliError::usage(format!("cannot read --body-file {}: {e}", f.display()))
        })?;
        if text.len() as u64 > files::MAX_FILE_BYTES {
            return Err(CliError::refused(format!(
                "refused: --body-file {} is over 1 MiB; shorten it",
                f.display()
            )));
        }
        spec.body = String::from_utf8(text).map_err(|_| {
            CliError::refused(format!(
                "refused: --body-file {} is not valid UTF-8; save it as UTF-8",
                f.display()
            ))
        })?;
    }
    if spec.spec.work.is_none() && workflow == WorkflowKind::Direct {
        return Err(CliError::usage(
            "a direct task needs --work CMD (the guard decides it); use --workflow review for agent work",
        ));
    }
    if app.store.get(&id)?.is_some() {
        return Err(CliError::refused(format!(
            "refused: task {id} already exists; pick another id or update it"
        )));
    }
    let shown = app.task_file_shown(&id);
    let change = ops::create(
        spec,
        Initial {
            passes: false,
            attempts: 0,
        },
        &app.ctx(&shown),
    )?;
    let task = change.after.clone().expect("create makes a task");
    app.commit_batch(Batch {
        changes: vec![change],
        ..Default::default()
    })?;
    if app.json {
        out::json(&out::task_json(&task, &app.tasks()?));
    } else {
        out::line(&format!(
            "created {} ({}, {} workflow); TASK.md: {}",
            task.id(),
            out::status(task.status()),
            task.spec.workflow,
            shown
        ));
    }
    Ok(())
}

fn list(app: &App, status: Option<String>) -> Result<(), CliError> {
    let filter = match status {
        Some(s) => Some(s.parse::<Status>().map_err(CliError::usage)?),
        None => None,
    };
    let all = app.tasks()?;
    let shown: Vec<&Task> = all
        .iter()
        .filter(|t| filter.is_none_or(|s| t.status() == s))
        .collect();
    let idx = warden_core::tree::TreeIndex::new(&all);
    if app.json {
        let v: Vec<serde_json::Value> = shown
            .iter()
            .map(|t| warden_store::engine::task_json_indexed(t, &idx))
            .collect();
        out::json(&json!(v));
        return Ok(());
    }
    if shown.is_empty() {
        out::line("no tasks");
        return Ok(());
    }
    let w = shown
        .iter()
        .map(|t| t.id().as_str().len())
        .max()
        .unwrap_or(2)
        .max(2);
    let mut s = format!(
        "{:w$}  {:13}  {:9}  {:8}  TITLE\n",
        "ID", "STATUS", "GATE", "ATTEMPTS"
    );
    for t in shown {
        let deps_done = t
            .spec
            .depends_on
            .iter()
            .all(|d| idx.get(d).is_some_and(|x| x.status() == Status::Done));
        let gate = warden_core::progress::gate_status(t, deps_done)
            .map(|g| g.as_str())
            .unwrap_or("-");
        let st = out::status(t.status());
        let pad = 13usize.saturating_sub(t.status().as_str().len());
        s.push_str(&format!(
            "{:w$}  {st}{}  {:9}  {:8}  {}{}\n",
            t.id().as_str(),
            " ".repeat(pad),
            gate,
            format!("{}/{}", t.attempts(), t.spec.max_attempts),
            t.spec.title,
            if t.is_dead() { " ✗" } else { "" },
        ));
    }
    out::print(&s);
    Ok(())
}

fn show(app: &App, id: &warden_core::model::TaskId) -> Result<(), CliError> {
    let t = app.get(id)?;
    let all = app.tasks()?;
    let v = out::task_json(&t, &all);
    if app.json {
        out::json(&v);
        return Ok(());
    }
    let mut s = format!("{} — {}\n", t.id(), t.spec.title);
    s.push_str(&format!(
        "  status     {}{}\n",
        out::status(t.status()),
        if t.is_dead() {
            "  ✗ session dead"
        } else {
            ""
        }
    ));
    if let Some(g) = v["gate"].as_str() {
        s.push_str(&format!("  gate       {g}\n"));
    }
    s.push_str(&format!("  workflow   {}\n", t.spec.workflow));
    s.push_str(&format!(
        "  passes     {}   attempts {}/{}   crashes {}   review round {}\n",
        t.passes(),
        t.attempts(),
        t.spec.max_attempts,
        t.crash_count(),
        t.review_round()
    ));
    if let Some(p) = &t.spec.parent {
        s.push_str(&format!("  parent     {p}\n"));
    }
    let children = v["children"].as_array().cloned().unwrap_or_default();
    if !children.is_empty() {
        let c: Vec<&str> = children.iter().filter_map(|c| c.as_str()).collect();
        s.push_str(&format!("  children   {}\n", c.join(", ")));
    }
    if !t.spec.depends_on.is_empty() {
        let d: Vec<&str> = t.spec.depends_on.iter().map(|d| d.as_str()).collect();
        s.push_str(&format!("  depends on {}\n", d.join(", ")));
    }
    let spec_line = |name: &str, w: &Option<WorkSpec>| match w {
        Some(WorkSpec::Shell(c)) => format!("  {name:10} sh -c {c:?}\n"),
        Some(WorkSpec::Process(a)) => format!("  {name:10} {a:?}\n"),
        Some(WorkSpec::Agent(a)) => format!("  {name:10} agent: {}\n", first_line(a)),
        None => String::new(),
    };
    s.push_str(&spec_line("work", &t.spec.spec.work));
    s.push_str(&spec_line("prechecks", &t.spec.spec.prechecks));
    s.push_str(&spec_line("postchecks", &t.spec.spec.postchecks));
    let phases: Vec<String> = t
        .phases()
        .iter()
        .map(|(p, st)| format!("{p}={st}"))
        .collect();
    s.push_str(&format!("  phases     {}\n", phases.join(" ")));
    if let Some(p) = t.resume_from_phase() {
        s.push_str(&format!("  resume     from {p}\n"));
    }
    if let Some(f) = t.last_failure() {
        s.push_str(&format!("  failure    {f}\n"));
    }
    s.push_str(&format!(
        "  version    {}   updated {}\n  TASK.md    {}\n",
        t.version(),
        t.updated_at(),
        app.task_file_shown(t.id())
    ));
    out::print(&s);
    Ok(())
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// Runs what a transition needs (commit, guard, merge-ri); see `warden_runner::pipeline`.
fn prepare(app: &App, t: &Task, needs: ops::Needs, input: &mut TransitionInput) -> bool {
    warden_runner::pipeline::prepare_transition(&app.engine, t, needs, input)
}

fn update(
    app: &App,
    id: &warden_core::model::TaskId,
    to: Status,
    reason: Option<String>,
    request: Option<&str>,
) -> Result<(), CliError> {
    let shown = app.task_file_shown(id);
    let written = app.write_task(id, request, |t, doc: &taskfile::Doc| {
        let ctx = app.ctx(&shown);
        let (needs, _) = ops::check_transition(t, to, &doc.artifacts, &ctx)?;
        let mut input = TransitionInput {
            artifacts: doc.artifacts.clone(),
            reason: reason.clone(),
            ..Default::default()
        };
        let ran = prepare(app, t, needs, &mut input);
        Ok(Decision {
            change: ops::transition(t, to, &input, &ctx)?,
            retryable: !ran,
            memory: None,
        })
    })?;
    report_write(app, written)
}

/// Prints the result of a write; a failed guard is exit 1 after its attempt is stored.
fn report_write(app: &App, written: Written) -> Result<(), CliError> {
    let (change, response) = match written {
        Written::Replayed(resp) => {
            // The same request again: the same answer, including a failed guard's.
            let v: serde_json::Value = serde_json::from_str(&resp).unwrap_or_default();
            if app.json {
                out::line(&resp);
            } else if v["error"].is_null() {
                out::line("already applied (same --request-id); nothing changed");
            }
            if let Some(msg) = v["error"]["message"].as_str() {
                let mut e = CliError::new(v["error"]["code"].as_i64().unwrap_or(1) as i32, msg);
                if let Some(d) = v["error"]["detail"].as_str() {
                    e = e.with_detail(d);
                }
                return Err(e);
            }
            return Ok(());
        }
        Written::Done(c, r) => (c, r),
    };
    let failed = matches!(change.outcome, Outcome::GuardFailed { .. });
    let response = if response.is_null() && (app.json || failed) {
        app.engine.response_for(&change)?
    } else {
        response
    };
    let after = change.after.as_ref();
    if let Some(err) = response.get("error").filter(|e| !e.is_null()) {
        if app.json {
            out::json(&response);
        }
        let msg = err["message"].as_str().unwrap_or("refused");
        let mut e = CliError::new(err["code"].as_i64().unwrap_or(1) as i32, msg);
        if let Some(d) = err["detail"].as_str() {
            e = e.with_detail(d);
        }
        return Err(e);
    }
    if app.json {
        out::json(&response);
        return Ok(());
    }
    if let (Some(b), Some(a)) = (&change.before, after) {
        let mut line = if b.status() != a.status() {
            format!(
                "{}: {} → {}",
                a.id(),
                out::status(b.status()),
                out::status(a.status())
            )
        } else {
            format!("{}: {}", a.id(), out::status(a.status()))
        };
        if let Outcome::Retry(plan) = &change.outcome {
            let names = |ps: &[Phase]| {
                if ps.is_empty() {
                    "none".to_owned()
                } else {
                    ps.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
                }
            };
            line.push_str(&format!(
                "\n  runs again: {}\n  kept:       {}",
                names(&plan.rerun),
                names(&plan.kept)
            ));
        }
        let tampers = change
            .events
            .iter()
            .filter(|e| e.kind.type_name() == "tamper.ignored")
            .count();
        if tampers > 0 {
            line.push_str(&format!(
                "\n  note: {tampers} runner-owned field(s) edited in TASK.md were ignored and restored"
            ));
        }
        out::line(&line);
    }
    Ok(())
}

fn exited(app: &App, id: &warden_core::model::TaskId, report: ExitReport) -> Result<(), CliError> {
    let shown = app.task_file_shown(id);
    let written = app.write_task(id, None, |t, doc: &taskfile::Doc| {
        let ctx = app.ctx(&shown);
        let decision = warden_core::exit::decide(t, &doc.artifacts, &report, &app.config.limits);
        let mut input = TransitionInput {
            artifacts: doc.artifacts.clone(),
            ..Default::default()
        };
        let mut ran = false;
        if let ExitAction::Advance { to, guard, .. } = &decision.action
            && *guard
        {
            let (needs, _) = ops::check_transition(t, *to, &doc.artifacts, &ctx)?;
            ran = prepare(app, t, needs, &mut input);
        }
        Ok(Decision {
            change: ops::exited(t, &report, &input, &ctx)?,
            retryable: !ran,
            memory: None,
        })
    })?;
    let (change, response) = match written {
        Written::Done(c, r) if r.is_null() && app.json => {
            let r = app.engine.response_for(&c)?;
            (c, r)
        }
        Written::Done(c, r) => (c, r),
        Written::Replayed(_) => return Ok(()),
    };
    let Outcome::Exit(decision) = &change.outcome else {
        if let Outcome::ExitGuardError(e) = &change.outcome {
            return Err(CliError::internal(format!(
                "the session's exit was recorded, but the postchecks could not be started ({e}); fix them and run `warden task respawn`"
            )));
        }
        return Ok(());
    };
    if app.json {
        let mut v = response;
        v["exit"] = json!({
            "disposition": format!("{:?}", decision.disposition).to_lowercase(),
            "action": describe_action(&decision.action),
        });
        out::json(&v);
    } else {
        let t = change.after.as_ref().expect("exit keeps the task");
        out::line(&format!(
            "{}: session end recorded ({}); {}; status {}",
            t.id(),
            format!("{:?}", decision.disposition).to_lowercase(),
            describe_action(&decision.action),
            out::status(t.status())
        ));
    }
    Ok(())
}

fn describe_action(a: &ExitAction) -> String {
    match a {
        ExitAction::Advance { to, spawn, .. } => match spawn {
            Some(r) => format!("advanced to {to}, {r} to start"),
            None => format!("advanced to {to}"),
        },
        ExitAction::Crash {
            crash_count,
            escalate: true,
            ..
        } => format!("crash {crash_count}: threshold reached, moved to stuck"),
        ExitAction::Crash {
            crash_count,
            respawn: Some(r),
            ..
        } => format!("crash {crash_count}: {r} to be restarted"),
        ExitAction::Crash { crash_count, .. } => {
            format!("crash {crash_count}: session marked dead (respawn with `warden task respawn`)")
        }
        ExitAction::WorkEnded { success: true } => "work phase succeeded".into(),
        ExitAction::WorkEnded { success: false } => "work phase failed".into(),
        ExitAction::MarkDead => "no advance; session marked dead".into(),
        ExitAction::Nothing => "nothing to change".into(),
    }
}

fn retry(app: &App, a: RetryArgs) -> Result<(), CliError> {
    let id = id_or_env(a.id)?;
    let req = RetryRequest {
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
    let shown = app.task_file_shown(&id);
    let written = app.write_task(&id, None, |t, _doc| {
        Ok(Decision::retryable(ops::retry(t, &req, &app.ctx(&shown))?))
    })?;
    report_write(app, written)
}

fn respawn(app: &App, id: &warden_core::model::TaskId) -> Result<(), CliError> {
    let shown = app.task_file_shown(id);
    let written = app.write_task(id, None, |t, _doc| {
        Ok(Decision::retryable(ops::request_respawn(
            t,
            &app.ctx(&shown),
        )?))
    })?;
    if let Written::Done(c, _) = &written {
        if app.json {
            out::json(&app.engine.response_for(c)?);
        } else if let Some(t) = &c.after {
            out::line(&format!(
                "{}: respawn requested; the running supervisor (or the next `warden run`) starts a new session",
                t.id()
            ));
        }
    }
    Ok(())
}

fn log(app: &App, id: &warden_core::model::TaskId) -> Result<(), CliError> {
    app.get(id)?;
    let path = app.ws.output_log(id);
    match files::read_text(&app.ws.dir, &path) {
        Ok(text) => {
            if app.json {
                out::json(&json!({"id": id, "log": text}));
            } else {
                out::print(&text);
            }
            Ok(())
        }
        Err(files::FileError::Missing(_)) => Err(CliError::not_found(format!(
            "no output captured for {id} yet; output appears once `warden run` starts its session"
        ))),
        Err(files::FileError::TooLarge(..)) => {
            // Logs may exceed the TASK.md limit: print the last megabyte.
            let bytes = std::fs::read(&path).map_err(|e| CliError::internal(e.to_string()))?;
            let start = bytes.len().saturating_sub(files::MAX_FILE_BYTES as usize);
            out::print(&String::from_utf8_lossy(&bytes[start..]));
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

fn peek(app: &App, id: &warden_core::model::TaskId, lines: usize) -> Result<(), CliError> {
    let t = app.get(id)?;
    let socket = app.ws.dir.join("tmux.sock");
    let name = warden_runner::session::tmux_session_name(id.as_str());
    let from_tmux = if socket.exists() {
        warden_runner::session::tmux_capture(&socket, &name, lines).ok()
    } else {
        None
    };
    let text = match from_tmux {
        Some(t) => t,
        None => {
            let log = app.ws.output_log(id);
            if !log.exists() {
                return Err(CliError::not_found(format!(
                    "no output for {id} yet; sessions write it once `warden run` starts them"
                )));
            }
            warden_runner::session::peek_log(&log, lines)
        }
    };
    if app.json {
        out::json(&json!({"id": id, "session": t.live_session(), "output": text}));
    } else {
        out::print(&text);
        if !text.ends_with('\n') {
            out::line("");
        }
    }
    Ok(())
}
