//! Read-side commands over the whole project: `prompt`, `history`, `state`, `check`.

use clap::{Args, Subcommand};
use serde_json::json;
use warden_app::Result;
use warden_core::failure::Failure;

use crate::ctx::{Global, id_or_env};
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

pub fn prompt(g: &Global, a: PromptArgs) -> Result<()> {
    let app = g.open()?;
    let p = app.prompt(&id_or_env(a.id)?)?;
    if g.json {
        out::json(&p);
    } else {
        out::print(&p.prompt);
        if !p.prompt.ends_with('\n') {
            out::line("");
        }
    }
    Ok(())
}

pub fn history(g: &Global, a: HistoryArgs) -> Result<()> {
    let app = g.open()?;
    let id = a.id.as_deref().map(warden_app::task_id).transpose()?;
    let events = app.history(id.as_ref(), None)?;
    let mut s = String::new();
    for e in &events {
        if g.json {
            s.push_str(&serde_json::to_string(e).unwrap_or_default());
            s.push('\n');
        } else {
            let what = match (e.from, e.to) {
                (Some(f), Some(t)) => format!("{} {f} → {t}", e.kind),
                _ => e.kind.to_owned(),
            };
            let reason = e
                .reason
                .as_deref()
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
    if s.is_empty() && !g.json {
        s.push_str("no events\n");
    }
    out::print(&s);
    Ok(())
}

pub fn state(g: &Global, a: StateArgs) -> Result<()> {
    let app = g.open()?;
    match a.cmd {
        Some(StateCmd::Verify) => verify(g, &app),
        None => {
            let text = if a.write {
                app.write_state_md()?
            } else {
                app.state_md()?
            };
            if g.json {
                out::json(&json!({
                    "path": a.write.then(|| app.ws().display(&app.ws().state_md())),
                    "state_md": text,
                }));
            } else {
                out::print(&text);
            }
            Ok(())
        }
    }
}

fn verify(g: &Global, app: &warden_app::App) -> Result<()> {
    let v = app.verify_state()?;
    if g.json {
        out::json(&serde_json::json!({"ok": v.ok, "differences": v.differences}));
    } else if v.ok {
        out::line("STATE.md matches the derived state");
    } else {
        let mut s = String::new();
        for d in &v.differences {
            s.push_str(&format!(
                "line {}: expected {:?}, found {:?}\n",
                d.line,
                d.expected.as_deref().unwrap_or("(nothing)"),
                d.found.as_deref().unwrap_or("(nothing)")
            ));
        }
        out::print(&s);
    }
    if v.ok {
        Ok(())
    } else {
        Err(Failure::refused(format!(
            "{} differs from the derived state in {} line(s); regenerate it with `warden state --write`",
            v.path,
            v.differences.len()
        )))
    }
}

/// `warden check`: replays the event log and compares every task and memory row.
pub fn check(g: &Global) -> Result<()> {
    let app = g.open()?;
    let c = app.check()?;
    if g.json {
        out::json(&c);
    } else if c.ok {
        out::line(&format!(
            "ok: {} events replay to the {} stored tasks",
            c.events, c.tasks
        ));
    } else {
        for p in &c.problems {
            out::line(p);
        }
    }
    if c.ok {
        Ok(())
    } else {
        Err(Failure::refused(format!(
            "the store disagrees with its history in {} place(s) (listed above)",
            c.problems.len()
        )))
    }
}
