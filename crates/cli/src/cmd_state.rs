//! Read-side commands over the whole project: `prompt`, `history`, `state`, `check`.

use clap::{Args, Subcommand};
use serde_json::json;
use warden_core::event::Event;
use warden_core::history;
use warden_core::prompt;
use warden_core::state_md;
use warden_store::files;

use crate::app::{App, Global, id_or_env};
use crate::error::CliError;
use crate::out;

#[derive(Args, Debug)]
pub struct PromptArgs {
    /// Task id (default: $WARDEN_TASK_ID).
    id: Option<String>,
}

#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// Only this task's events.
    id: Option<String>,
}

#[derive(Args, Debug)]
pub struct StateArgs {
    /// Write .warden/STATE.md (and keep it updated after every change from now on).
    #[arg(long)]
    write: bool,
    #[command(subcommand)]
    cmd: Option<StateCmd>,
}

#[derive(Subcommand, Debug)]
pub enum StateCmd {
    /// Report every difference between .warden/STATE.md and the derived state; exit 1 if any.
    Verify,
}

pub fn prompt(g: &Global, a: PromptArgs) -> Result<(), CliError> {
    let app = App::open(g)?;
    let id = id_or_env(a.id)?;
    let t = app.get(&id)?;
    let text = render_prompt(&app, &t)?;
    if app.json {
        let kind = prompt::prompt_kind(&t).map(|k| k.as_str());
        out::json(&json!({"id": id, "kind": kind, "prompt": text}));
    } else {
        out::print(&text);
        if !text.ends_with('\n') {
            out::line("");
        }
    }
    Ok(())
}

/// The prompt for a task's current status (see [`warden_store::Engine::prompt`]).
pub fn render_prompt(app: &App, t: &warden_core::model::Task) -> Result<String, CliError> {
    Ok(app.engine.prompt(t, None)?)
}

fn event_json(e: &Event) -> serde_json::Value {
    let (from, to) = e.kind.transition().unzip();
    json!({
        "seq": e.seq,
        "at": e.at.to_string(),
        "task": e.task,
        "type": e.kind.type_name(),
        "from": from.map(|s| s.as_str()),
        "to": to.map(|s| s.as_str()),
        "reason": e.kind.reason(),
        "actor": e.actor.as_str(),
        "version": e.version,
        "data": e.kind,
    })
}

pub fn history(g: &Global, a: HistoryArgs) -> Result<(), CliError> {
    let app = App::open(g)?;
    let id = match a.id {
        Some(s) => {
            let id = crate::app::task_id(&s)?;
            if app.store.get(&id)?.is_none() && app.store.events(Some(&id))?.is_empty() {
                return Err(CliError::not_found(format!(
                    "no task {id}; list tasks with `warden task list`"
                )));
            }
            Some(id)
        }
        None => None,
    };
    let events = app.store.events(id.as_ref())?;
    let mut s = String::new();
    for e in &events {
        if app.json {
            s.push_str(&serde_json::to_string(&event_json(e)).unwrap_or_default());
            s.push('\n');
        } else {
            let what = match e.kind.transition() {
                Some((f, t)) => format!("{} {f} → {t}", e.kind.type_name()),
                None => e.kind.type_name().to_owned(),
            };
            let reason = e
                .kind
                .reason()
                .map(|r| format!("  ({r})"))
                .unwrap_or_default();
            s.push_str(&format!(
                "{:>5}  {}  {:<16} {:<7} {what}{reason}\n",
                e.seq,
                e.at.strftime("%Y-%m-%d %H:%M:%S"),
                e.task.as_str(),
                e.actor.as_str(),
            ));
        }
    }
    if s.is_empty() && !app.json {
        s.push_str("no events\n");
    }
    out::print(&s);
    Ok(())
}

pub fn state(g: &Global, a: StateArgs) -> Result<(), CliError> {
    let app = App::open(g)?;
    match a.cmd {
        Some(StateCmd::Verify) => verify(&app),
        None => {
            let text = app.render_state()?;
            if a.write {
                files::write_atomic(&app.ws.state_md(), text.as_bytes())?;
            }
            if app.json {
                out::json(&json!({
                    "path": a.write.then(|| app.shown(&app.ws.state_md())),
                    "state_md": text,
                }));
            } else {
                out::print(&text);
            }
            Ok(())
        }
    }
}

fn verify(app: &App) -> Result<(), CliError> {
    let path = app.ws.state_md();
    let text = match files::read_text(&app.ws.dir, &path) {
        Ok(t) => t,
        Err(files::FileError::Missing(_)) => {
            return Err(CliError::not_found(format!(
                "{} does not exist; write it with `warden state --write`",
                app.shown(&path)
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let tasks = app.tasks()?;
    let events = app.store.events(None)?;
    let input = app.state_input(&tasks, &events);
    let diffs = state_md::verify(&text, &input);
    if app.json {
        let v: Vec<_> = diffs
            .iter()
            .map(|d| json!({"line": d.line, "expected": d.expected, "found": d.found}))
            .collect();
        out::json(&json!({"ok": diffs.is_empty(), "differences": v}));
    } else if diffs.is_empty() {
        out::line("STATE.md matches the derived state");
    } else {
        let mut s = String::new();
        for d in &diffs {
            s.push_str(&format!(
                "line {}: expected {:?}, found {:?}\n",
                d.line,
                d.expected.as_deref().unwrap_or("(nothing)"),
                d.found.as_deref().unwrap_or("(nothing)")
            ));
        }
        out::print(&s);
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(CliError::refused(format!(
            "refused: {} differs from the derived state in {} line(s); regenerate it with `warden state --write`",
            app.shown(&path),
            diffs.len()
        )))
    }
}

/// `warden check`: replays the event log and compares every task and memory row.
pub fn check(g: &Global) -> Result<(), CliError> {
    let app = App::open(g)?;
    let events = app.store.events(None)?;
    let stored = app.tasks()?;
    let mut problems = Vec::new();
    let rebuilt = match warden_core::event::replay(&events) {
        Ok(r) => r,
        Err(e) => {
            problems.push(e.to_string());
            Default::default()
        }
    };
    if problems.is_empty() {
        for t in &stored {
            match rebuilt.get(t.id()) {
                None => problems.push(format!("task {} is stored but no event creates it", t.id())),
                Some(r) if r != t => problems.push(format!(
                    "task {} differs from its replayed history (stored version {}, replayed version {})",
                    t.id(),
                    t.version(),
                    r.version()
                )),
                Some(_) => {}
            }
        }
        for id in rebuilt.keys() {
            if !stored.iter().any(|t| t.id() == id) {
                problems.push(format!(
                    "task {id} exists in the history but not in the store"
                ));
            }
        }
    }
    // Memory: fold every merge with the configured caps.
    let caps = app.memory_caps();
    let replayed = history::replay_memory(&events, &caps);
    let stored_mem = app.store.all_memory()?;
    for (id, m) in &stored_mem {
        if replayed.get(id) != Some(m) {
            problems.push(format!(
                "memory of {id} differs from its merges in the history"
            ));
        }
    }
    for id in replayed.keys() {
        if !stored_mem.iter().any(|(s, _)| s == id) && stored.iter().any(|t| t.id() == id) {
            problems.push(format!("memory of {id} is missing from the store"));
        }
    }
    if app.json {
        out::json(&json!({
            "ok": problems.is_empty(),
            "events": events.len(),
            "tasks": stored.len(),
            "problems": problems,
        }));
    } else if problems.is_empty() {
        out::line(&format!(
            "ok: {} events replay to the {} stored tasks",
            events.len(),
            stored.len()
        ));
    } else {
        for p in &problems {
            out::line(p);
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::refused(format!(
            "refused: the store disagrees with its history in {} place(s) (listed above)",
            problems.len()
        )))
    }
}
