//! Output helpers: stdout that treats a broken pipe as success, colour only on a
//! terminal (and never with `NO_COLOR`), and the JSON shapes of DESIGN.md section 4.

use std::io::{IsTerminal, Write};

use serde_json::{Value, json};
use warden_core::model::{Status, Task};
use warden_core::progress;

/// Writes text to stdout; a closed pipe (`warden … | head`) ends the process quietly
/// with success, as ripgrep does.
pub fn print(s: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(s.as_bytes()).and_then(|_| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(5);
    }
}

/// Prints a line.
pub fn line(s: &str) {
    print(&format!("{s}\n"));
}

/// Prints one JSON document.
pub fn json(v: &Value) {
    line(&serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into()));
}

/// Is colour wanted on stdout?
pub fn color() -> bool {
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}

/// A status, coloured for a terminal.
pub fn status(s: Status) -> String {
    if !color() {
        return s.to_string();
    }
    let code = match s {
        Status::Pending => "37",
        Status::Clarification => "35",
        Status::Working => "36",
        Status::AgentReview | Status::Reviewing => "34",
        Status::Stuck => "31;1",
        Status::Done => "32",
        Status::Cancelled => "90",
    };
    format!("\x1b[{code}m{s}\x1b[0m")
}

/// The JSON of one task (`task show --json`), with its children and gate status.
pub fn task_json(t: &Task, all: &[Task]) -> Value {
    let children: Vec<String> = warden_core::tree::children(all, t.id())
        .into_iter()
        .map(|c| c.to_string())
        .collect();
    let deps_done = t.spec.depends_on.iter().all(|d| {
        all.iter()
            .find(|x| x.id() == d)
            .is_some_and(|x| x.status() == Status::Done)
    });
    let phases: serde_json::Map<String, Value> = t
        .phases()
        .iter()
        .map(|(p, s)| (p.to_string(), json!(s.as_str())))
        .collect();
    json!({
        "id": t.id(),
        "title": t.spec.title,
        "body": t.spec.body,
        "parent": t.spec.parent,
        "order": t.spec.order,
        "children": children,
        "depends_on": t.spec.depends_on,
        "workflow": t.spec.workflow.as_str(),
        "status": t.status().as_str(),
        "passes": t.passes(),
        "attempts": t.attempts(),
        "max_attempts": t.spec.max_attempts,
        "crash_count": t.crash_count(),
        "review_round": t.review_round(),
        "gate": progress::gate_status(t, deps_done).map(|g| g.as_str()),
        "phases": phases,
        "resume_from_phase": t.resume_from_phase().map(|p| p.as_str()),
        "auto_heal": t.auto_heal().iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "spec": t.spec.spec,
        "branch": t.branch(),
        "session": t.live_session(),
        "dead": t.is_dead(),
        "respawn_requested": t.respawn_requested(),
        "last_failure": t.last_failure(),
        "version": t.version(),
        "created_at": t.created_at().to_string(),
        "updated_at": t.updated_at().to_string(),
    })
}
