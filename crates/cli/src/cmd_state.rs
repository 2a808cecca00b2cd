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
    /// Only the last N events (after --since).
    #[arg(long, value_name = "N")]
    tail: Option<usize>,
    /// Only events at or after T: a time (2026-11-24T09:00:00Z, 2026-11-24 09:00, a date)
    /// or a span back from now (90s, 30m, 2h, 1d, 1w).
    #[arg(long, value_name = "T")]
    since: Option<String>,
}

/// Parses `--since`: a span back from `now` (`30m`), an RFC 3339 time, or a civil date
/// or time in the local time zone.
pub fn parse_since(s: &str, now: jiff::Timestamp) -> Result<jiff::Timestamp> {
    let s = s.trim();
    let bad = || {
        Failure::usage(format!(
            "--since {s:?} is not a time; give a span back from now (90s, 30m, 2h, 1d, 1w) or a time (2026-11-24T09:00:00Z, \"2026-11-24 09:00\", 2026-11-24)"
        ))
    };
    if let Some(unit) = s.chars().last().filter(|c| c.is_ascii_alphabetic())
        && let Ok(n) = s[..s.len() - 1].parse::<i64>()
    {
        let secs = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return Err(bad()),
        };
        let span = n.checked_mul(secs).ok_or_else(bad)?;
        return now
            .checked_sub(jiff::SignedDuration::from_secs(span))
            .map_err(|_| bad());
    }
    if let Ok(t) = s.parse::<jiff::Timestamp>() {
        return Ok(t);
    }
    let tz = jiff::tz::TimeZone::system();
    if let Ok(dt) = s.parse::<jiff::civil::DateTime>() {
        return dt.to_zoned(tz).map(|z| z.timestamp()).map_err(|_| bad());
    }
    if let Ok(d) = s.parse::<jiff::civil::Date>() {
        return d.to_zoned(tz).map(|z| z.timestamp()).map_err(|_| bad());
    }
    Err(bad())
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
    #[command(
        after_help = "Example:\n  warden state verify || warden state --write     # rewrite it from the store"
    )]
    Verify,
}

impl StateArgs {
    /// Whether the command writes STATE.md (a person's choice: it keeps it written from
    /// then on); printing and verifying are reads.
    pub fn writes(&self) -> bool {
        self.write
    }
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
    let since = a
        .since
        .as_deref()
        .map(|t| parse_since(t, app.eng.now()))
        .transpose()?;
    let events = app.history_since(id.as_ref(), a.tail, since)?;
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
                .map(|r| format!("  ({})", out::one_line(r)))
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
