//! `warden status`: what needs you, what runs, whether a supervisor is alive, progress.
//! Formats `warden_app::status::StatusView`; nothing here decides anything.

use jiff::Timestamp;
use warden_app::Result;
use warden_app::status::StatusView;

use crate::ctx::Global;
use crate::out;

pub fn status(g: &Global) -> Result<()> {
    let app = g.open()?;
    let v = app.status()?;
    if g.json {
        out::json(&v);
    } else {
        out::print(&render(&v, app.eng.now()));
    }
    Ok(())
}

/// The screen, as plain lines (colour only for statuses on a terminal).
pub fn render(v: &StatusView, now: Timestamp) -> String {
    let mut s = String::new();
    let p = &v.progress;
    s.push_str(&format!(
        "{}  {}%  {} of {} done · {}\n",
        p.bar, p.percentage, p.complete, p.total, p.status
    ));
    if !p.counts.is_empty() {
        let counts: Vec<String> = p
            .counts
            .iter()
            .map(|(st, n)| format!("{n} {}", out::status(*st)))
            .collect();
        s.push_str(&format!("  {}\n", counts.join(" · ")));
    }
    s.push('\n');
    if v.supervisors.is_empty() {
        s.push_str(
            "Supervisor: none running. Nothing starts or moves on until you run `warden run`.\n",
        );
    }
    if let Some(last) = &v.last_run {
        s.push_str(&format!(
            "  The last run stopped {} ago with steps failing (fix the cause, then run `warden run` again):\n",
            ago(now, last.stopped_at)
        ));
        for f in &last.failing {
            s.push_str(&format!(
                "  ✗ {}: {} failed step(s) in a row: {}\n",
                f.task,
                f.tries,
                out::one_line(&f.error)
            ));
        }
    }
    if !v.supervisors.is_empty() {
        for sup in &v.supervisors {
            let state = match sup.alive {
                Some(true) => "alive".to_owned(),
                Some(false) => "gone".to_owned(),
                None => "on another host".to_owned(),
            };
            let since = sup
                .started_at
                .map(|t| format!(", up {}", ago(now, t)))
                .unwrap_or_default();
            let held = if sup.tasks.is_empty() {
                "holds no task".to_owned()
            } else {
                format!(
                    "holds {}",
                    sup.tasks
                        .iter()
                        .map(|t| t.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            s.push_str(&format!(
                "Supervisor: pid {} on {} ({state}{since}); {held}\n",
                sup.pid, sup.host
            ));
            for f in &sup.failing {
                s.push_str(&format!(
                    "  ✗ {}: {} failed step(s) in a row, tried again within a minute: {}\n",
                    f.task, f.tries, f.error
                ));
            }
        }
    }
    s.push('\n');
    if v.needs_you.is_empty() {
        s.push_str("Needs you: nothing.\n");
    } else {
        s.push_str(&format!("Needs you ({}):\n", v.needs_you.len()));
        for n in &v.needs_you {
            let verdict = n
                .verdict
                .as_deref()
                .map(|v| format!(" — review says {}", v.to_uppercase()))
                .unwrap_or_default();
            let title = if n.title == n.id.as_str() {
                String::new()
            } else {
                format!("  {}", n.title)
            };
            s.push_str(&format!(
                "  {:8} {}{title}{verdict}\n",
                n.need.as_str(),
                n.id,
            ));
            if let Some(d) = &n.detail {
                s.push_str(&format!("           {}\n", out::one_line(d)));
            }
            for c in &n.commands {
                s.push_str(&format!("           → {c}\n"));
            }
        }
    }
    s.push('\n');
    if v.running.is_empty() {
        s.push_str("Running: nothing.\n");
    } else {
        s.push_str(&format!("Running ({}):\n", v.running.len()));
        for r in &v.running {
            let finishing = r.finishing.join(", ");
            let what = match (&r.role, &r.phase) {
                (Some(role), _) => format!("{role} session"),
                (None, Some(ph)) => format!("{ph} phase"),
                (None, None) if !r.finishing.is_empty() => format!("session {finishing} finishing"),
                (None, None) => "session".to_owned(),
            };
            let what = if r.finishing.is_empty() || (r.role.is_none() && r.phase.is_none()) {
                what
            } else {
                format!("{what}, and session {finishing} finishing")
            };
            let since = r
                .since
                .map(|t| format!(" for {}", ago(now, t)))
                .unwrap_or_default();
            s.push_str(&format!(
                "  {}  {}  {what}{since}   (follow: warden task log {} -f)\n",
                r.id,
                out::status(r.status),
                r.id
            ));
        }
    }
    s
}

/// A duration as a person reads it: `42s`, `3m`, `2h05m`, `3d`.
fn ago(now: Timestamp, then: Timestamp) -> String {
    let secs = now.duration_since(then).as_secs().max(0);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86400 => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d", secs / 86400),
    }
}
