//! `warden agent-sim` (hidden): a simulated coding agent for tests and the demo. It
//! behaves like a real one through the real interfaces only — it reads its environment
//! (`WARDEN_TASK_ID`, `WARDEN_TASK_FILE`, `WARDEN_ROLE`), edits files in its worktree,
//! appends `## Handoff` or `## Review` to TASK.md and calls the `warden` binary — or
//! crashes, hangs, or never writes its artifact, as its scenario says. Nothing in Warden
//! knows it is simulated.
//!
//! The scenario comes from `--scenario`, or from a `sim:NAME` token in the task's
//! instructions (so one agent command serves a whole plan):
//!
//! | scenario      | worker                                   | reviewer            |
//! |---------------|------------------------------------------|---------------------|
//! | `good`        | writes a file, `## Handoff`, `task complete` | `PASS`, `--status reviewing` |
//! | `exit-only`   | writes `## Handoff` and exits (exit monitoring advances) | `PASS`, exits |
//! | `crash-once`  | first session exits 1 with nothing; then `good` | `PASS` |
//! | `fail-once`   | `good`                                   | FAIL in round 1, then PASS |
//! | `fail-always` | `good`                                   | FAIL every round    |
//! | `ask-once`    | first session asks a question (`## Questions`, `clarification`); then `good` | `PASS` |
//! | `no-artifact` | exits 0 without writing anything         | exits 0             |
//! | `hang`        | sleeps until killed                      | sleeps              |
//! | `linger`      | `good`, then edits `late.txt` 2 s later and exits | `PASS`     |
//! | `linger-forever` | `good`, then keeps running until killed | `PASS`            |
//! | `gsd`         | a get-shit-done plan (see below), `task complete` | `PASS`     |
//! | `gsd-handoff` | like `gsd`, but writes no SUMMARY.md     | `PASS`              |
//! | `gsd-wait`    | like `gsd`, once `.warden/sim-release` exists | `PASS`         |
//!
//! A heal session (its prompt says a phase failed) writes `fixed.txt` and exits. Every
//! session writes its pid to `.sim-pid-<role>` beside TASK.md, so a test can see it end.
//!
//! The `gsd` workers act as an agent given a plan by `plan sync`: they append a line to
//! `.warden/sim-gsd.log` (the task, the plan file their prompt names, and whether the
//! prompt holds that PLAN.md's objective and tasks), write a file of work, write the
//! plan's SUMMARY.md where the prompt says (relative to their working directory) and a
//! `## Handoff`, then run `warden task complete`.

// Progress for the person watching (demo) and the simulated agent's own log.
#![allow(clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;

use warden_core::failure::Failure;

#[derive(Args, Debug)]
pub struct SimArgs {
    /// The scenario (default: the `sim:NAME` token in the task's instructions, else good).
    #[arg(long)]
    scenario: Option<String>,
    /// The prompt file the agent command was given (read like a real agent would).
    #[arg(long)]
    prompt: Option<PathBuf>,
    /// Reviewers exit without writing a verdict (whatever the scenario).
    #[arg(long)]
    silent_reviewer: bool,
}

fn env(name: &str) -> Result<String, Failure> {
    std::env::var(name).map_err(|_| {
        Failure::usage(format!(
            "agent-sim runs inside a Warden session; {name} is not set"
        ))
    })
}

fn warden(args: &[&str]) -> Result<i32, Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::internal(e.to_string()))?;
    let st = Command::new(exe)
        .args(args)
        .status()
        .map_err(|e| Failure::internal(format!("cannot run warden: {e}")))?;
    Ok(st.code().unwrap_or(-1))
}

fn append(path: &Path, text: &str) -> Result<(), Failure> {
    let mut body = std::fs::read_to_string(path)
        .map_err(|e| Failure::internal(format!("agent-sim cannot read {}: {e}", path.display())))?;
    if !body.ends_with('\n') {
        body.push('\n');
    }
    body.push_str(text);
    std::fs::write(path, body)
        .map_err(|e| Failure::internal(format!("agent-sim cannot write {}: {e}", path.display())))
}

/// Counts this scenario's sessions for the task, in a file beside TASK.md.
fn bump(task_file: &Path, name: &str) -> u32 {
    let p = task_file.with_file_name(format!(".sim-{name}"));
    let n = std::fs::read_to_string(&p)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(0)
        + 1;
    let _ = std::fs::write(&p, n.to_string());
    n
}

pub fn run(a: SimArgs) -> Result<(), Failure> {
    let id = env("WARDEN_TASK_ID")?;
    let task_file = PathBuf::from(env("WARDEN_TASK_FILE")?);
    let role = env("WARDEN_ROLE")?;
    let prompt = match &a.prompt {
        Some(p) => std::fs::read_to_string(p).unwrap_or_default(),
        None => String::new(),
    };
    let body = std::fs::read_to_string(&task_file).unwrap_or_default();
    let scenario = a
        .scenario
        .clone()
        .or_else(|| find_token(&prompt).or_else(|| find_token(&body)))
        .unwrap_or_else(|| "good".into());
    eprintln!("agent-sim: task {id}, role {role}, scenario {scenario}");
    let _ = std::fs::write(
        task_file.with_file_name(format!(".sim-pid-{role}")),
        std::process::id().to_string(),
    );
    if prompt.contains("phase failed. Fix the cause") {
        eprintln!("agent-sim: healing");
        let _ = std::fs::write("fixed.txt", "fixed\n");
        return Ok(());
    }
    if a.silent_reviewer && role == "reviewer" {
        return Ok(());
    }
    if role == "worker" && scenario == "talk" {
        // Says something, waits for the test's go-ahead file, says more, then works as a
        // good worker: what `task log -f` must follow as it is written.
        crate::out::line("talk: first");
        let go = std::path::Path::new(&std::env::var("WARDEN_DIR").unwrap_or_default()).join("go");
        while !go.exists() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        crate::out::line("talk: second");
    }
    match (role.as_str(), scenario.as_str()) {
        (_, "hang") => loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        },
        (_, "no-artifact") => Ok(()),
        ("worker", "crash-once") if bump(&task_file, "worker") == 1 => {
            eprintln!("agent-sim: crashing on purpose");
            std::process::exit(1);
        }
        ("worker", "ask-once") if bump(&task_file, "ask") == 1 => {
            append(&task_file, "\n## Questions\nWhich colour should it be?\n")?;
            let code = warden(&["task", "update", &id, "--status", "clarification"])?;
            std::process::exit(code);
        }
        ("worker", s) if s.starts_with("gsd") => gsd_worker(&id, &task_file, &prompt, s),
        ("worker", s) => {
            let n = bump(&task_file, "handoff");
            // Real work in the worktree (the session's cwd): a file the commit picks up.
            let _ = std::fs::write(format!("{id}.txt"), format!("work of {id}, session {n}\n"));
            append(
                &task_file,
                &format!("\n## Handoff\nDONE: wrote {id}.txt (session {n})\nUNCERTAIN: nothing\n"),
            )?;
            if s == "exit-only" {
                return Ok(());
            }
            let code = warden(&["task", "complete", &id])?;
            match s {
                // Goes on after its hand-off: an edit the reviewer must still see.
                "linger" => {
                    std::thread::sleep(std::time::Duration::from_secs(2));
                    let _ = std::fs::write("late.txt", format!("late work of {id}\n"));
                }
                "linger-forever" => loop {
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                },
                _ => {}
            }
            std::process::exit(code);
        }
        ("reviewer", s) => {
            let round = bump(&task_file, "review");
            let pass = match s {
                "fail-always" => false,
                "fail-once" => round > 1,
                _ => true,
            };
            let verdict = if pass { "PASS" } else { "FAIL" };
            append(
                &task_file,
                &format!("\n## Review\nVerdict: {verdict} (round {round})\n"),
            )?;
            if s == "exit-only" {
                return Ok(());
            }
            let to = if pass {
                "reviewing"
            } else {
                // Round limit: the reviewer sends the task to stuck on its last round.
                let t = task_json(&id)?;
                let rr = t["review_round"].as_u64().unwrap_or(0);
                if rr >= 2 { "stuck" } else { "working" }
            };
            let code = warden(&["task", "update", &id, "--status", to])?;
            std::process::exit(code);
        }
        (r, _) => Err(Failure::usage(format!(
            "agent-sim: unknown role {r:?}; expected worker or reviewer"
        ))),
    }
}

fn task_json(id: &str) -> Result<serde_json::Value, Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::internal(e.to_string()))?;
    let o = Command::new(exe)
        .args(["--json", "task", "show", id])
        .output()
        .map_err(|e| Failure::internal(e.to_string()))?;
    serde_json::from_slice(&o.stdout).map_err(|e| Failure::internal(e.to_string()))
}

fn find_token(text: &str) -> Option<String> {
    let i = text.find("sim:")?;
    let rest = &text[i + 4..];
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The text between `start` and the next backtick after it, in `prompt`.
fn quoted_after<'a>(prompt: &'a str, start: &str) -> Option<&'a str> {
    let i = prompt.find(start)? + start.len();
    let rest = &prompt[i..];
    rest.find('`').map(|j| &rest[..j])
}

/// The inner text of `<tag>…</tag>` in `text`, trimmed.
fn block<'a>(text: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let i = text.find(&open)? + open.len();
    let j = text[i..].find(&close)? + i;
    Some(text[i..j].trim())
}

/// A worker given a get-shit-done plan by `plan sync` (see the module docs).
fn gsd_worker(id: &str, task_file: &Path, prompt: &str, scenario: &str) -> Result<(), Failure> {
    let root = PathBuf::from(env("WARDEN_DIR")?);
    let plan = quoted_after(prompt, "get-shit-done plan `").unwrap_or("");
    let plan_text = std::fs::read_to_string(root.join(plan)).unwrap_or_default();
    let parts: Vec<&str> = ["objective", "tasks"]
        .iter()
        .filter_map(|t| block(&plan_text, t))
        .collect();
    let holds = !parts.is_empty() && parts.iter().all(|p| prompt.contains(p));
    let log = root.join(".warden/sim-gsd.log");
    let mut line = std::fs::read_to_string(&log).unwrap_or_default();
    line.push_str(&format!("{id} plan={plan} prompt_has_plan={holds}\n"));
    std::fs::write(&log, line)
        .map_err(|e| Failure::internal(format!("agent-sim cannot write {}: {e}", log.display())))?;
    if scenario == "gsd-wait" {
        let release = root.join(".warden/sim-release");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !release.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    // Real work in the worktree (the session's cwd): a file the commit picks up.
    let _ = std::fs::write(format!("{id}.txt"), format!("work of {id}\n"));
    if scenario != "gsd-handoff"
        && let Some(summary) = quoted_after(prompt, "SUMMARY.md format to `")
    {
        let path = Path::new(summary);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::write(
            path,
            format!("---\nplan: {id}\n---\n\n# {id} Summary\n\n**Done by agent-sim.**\n"),
        )
        .map_err(|e| Failure::internal(format!("agent-sim cannot write {summary}: {e}")))?;
    }
    append(
        task_file,
        &format!("\n## Handoff\nDONE: carried out plan {plan}\nUNCERTAIN: nothing\n"),
    )?;
    let code = warden(&["task", "complete", id])?;
    std::process::exit(code);
}
