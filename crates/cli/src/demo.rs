//! `warden demo`: a sample plan driven end to end in a temporary workspace on the
//! embedded SQLite store. Simulated agents act exactly as real ones do: they edit TASK.md
//! and call the `warden` binary itself (`task complete`, `task update`, `task exited`),
//! so every decision shown is the real engine's.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;

use crate::app::Global;
use crate::error::CliError;
use crate::out;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Keep the workspace in this directory instead of a temporary one.
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
}

const PLAN: &str = r#"{"tasks": [
  {"id": "01-backend", "title": "Backend", "order": 1},
  {"id": "schema", "title": "Database schema", "parent": "01-backend", "order": 1,
   "work": "printf 'CREATE TABLE users (id INTEGER PRIMARY KEY);\n' > schema.sql",
   "postchecks": "grep -q 'CREATE TABLE users' schema.sql"},
  {"id": "api", "title": "REST API", "parent": "01-backend", "order": 2,
   "agent": "Build the REST API on top of the schema", "depends_on": ["schema"]},
  {"id": "02-frontend", "title": "Frontend", "order": 2},
  {"id": "ui", "title": "Login page", "parent": "02-frontend", "order": 1,
   "agent": "Build the login page", "depends_on": ["api"]},
  {"id": "i18n", "title": "Translations", "parent": "02-frontend", "order": 2,
   "agent": "Translate the login page into 40 languages"}
]}"#;

struct Demo {
    exe: PathBuf,
    root: PathBuf,
}

impl Demo {
    /// Runs `warden ARGS` in the workspace, as an agent (or person) would.
    fn warden(&self, args: &[&str], role: Option<&str>) -> Result<(i32, String), CliError> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(args)
            .current_dir(&self.root)
            .env("WARDEN_DIR", &self.root)
            .env("NO_COLOR", "1")
            .env_remove("WARDEN_TASK_ID");
        match role {
            Some(r) => cmd.env("WARDEN_ROLE", r),
            None => cmd.env_remove("WARDEN_ROLE"),
        };
        let o = cmd
            .output()
            .map_err(|e| CliError::internal(format!("cannot run {}: {e}", self.exe.display())))?;
        let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&o.stderr));
        Ok((o.status.code().unwrap_or(-1), text))
    }

    /// Runs a step and prints what Warden answered.
    fn step(&self, who: &str, args: &[&str], role: Option<&str>) -> Result<i32, CliError> {
        let (code, text) = self.warden(args, role)?;
        let first = text.lines().next().unwrap_or("");
        out::line(&format!(
            "  {who:<9} warden {:<40} → [{code}] {first}",
            args.join(" ")
        ));
        Ok(code)
    }

    fn task_file(&self, id: &str) -> PathBuf {
        self.root.join(".warden/tasks").join(id).join("TASK.md")
    }

    /// An agent appends a section to its TASK.md.
    fn write_section(&self, id: &str, section: &str, text: &str) -> Result<(), CliError> {
        let path = self.task_file(id);
        let mut body = std::fs::read_to_string(&path)
            .map_err(|e| CliError::internal(format!("{}: {e}", path.display())))?;
        body.push_str(&format!("\n## {section}\n{text}\n"));
        std::fs::write(&path, body).map_err(|e| CliError::internal(e.to_string()))?;
        out::line(&format!(
            "  {:<9} writes \"## {section}\" in TASK.md",
            "agent"
        ));
        Ok(())
    }
}

pub fn run(_g: &Global, a: DemoArgs) -> Result<(), CliError> {
    let started = std::time::Instant::now();
    let exe = std::env::current_exe().map_err(|e| CliError::internal(e.to_string()))?;
    let (root, temp) = match a.keep {
        Some(d) => {
            std::fs::create_dir_all(&d).map_err(|e| CliError::usage(e.to_string()))?;
            (d, false)
        }
        None => {
            let d = std::env::temp_dir().join(format!(
                "warden-demo-{}-{}",
                std::process::id(),
                jiff::Timestamp::now().as_millisecond()
            ));
            std::fs::create_dir_all(&d).map_err(|e| CliError::internal(e.to_string()))?;
            (d, true)
        }
    };
    let d = Demo {
        exe,
        root: root.clone(),
    };
    let result = script(&d);
    out::line(&format!(
        "\nDemo finished in {:.1}s. Workspace: {}{}",
        started.elapsed().as_secs_f64(),
        root.display(),
        if temp {
            " (temporary; pass --keep DIR to keep one)"
        } else {
            ""
        }
    ));
    if temp {
        let _ = std::fs::remove_dir_all(&root);
    }
    result
}

fn script(d: &Demo) -> Result<(), CliError> {
    out::line("Warden demo: a sample plan driven by simulated agents through the real CLI.\n");
    d.step("person", &["init"], None)?;
    std::fs::write(d.root.join("plan.json"), PLAN)
        .map_err(|e| CliError::internal(e.to_string()))?;
    d.step("person", &["plan", "import", "plan.json"], None)?;
    d.step("person", &["state", "--write"], None)?;

    out::line("\n# schema: shell work, decided by its guard (direct workflow)");
    d.step(
        "runner",
        &["task", "update", "schema", "--status", "working"],
        None,
    )?;
    run_shell(
        &d.root,
        "printf 'CREATE TABLE users (id INTEGER PRIMARY KEY);\\n' > schema.sql",
    )?;
    d.step(
        "runner",
        &["task", "update", "schema", "--status", "done"],
        None,
    )?;

    out::line("\n# api: the worker crashes once, is respawned, then hands off; review PASS");
    d.step(
        "runner",
        &["task", "update", "api", "--status", "working"],
        None,
    )?;
    d.step("agent", &["task", "complete", "api"], Some("worker"))?;
    d.step(
        "runner",
        &["task", "exited", "api", "--exit-code", "137"],
        None,
    )?;
    d.step("person", &["task", "respawn", "api"], None)?;
    d.write_section(
        "api",
        "Handoff",
        "DONE: endpoints /login and /users\nUNCERTAIN: rate limits",
    )?;
    d.step("agent", &["task", "complete", "api"], Some("worker"))?;
    d.write_section(
        "api",
        "Review",
        "Verdict: PASS\nClean handlers, tests included.",
    )?;
    d.step(
        "agent",
        &["task", "update", "api", "--status", "reviewing"],
        Some("reviewer"),
    )?;
    d.step(
        "person",
        &["task", "update", "api", "--status", "done"],
        None,
    )?;

    out::line("\n# ui: review FAIL sends the worker back; the second round passes");
    d.step(
        "runner",
        &["task", "update", "ui", "--status", "working"],
        None,
    )?;
    d.write_section("ui", "Handoff", "DONE: login form")?;
    d.step("agent", &["task", "complete", "ui"], Some("worker"))?;
    d.write_section("ui", "Review", "FAIL: no error message on a wrong password")?;
    d.step(
        "agent",
        &["task", "update", "ui", "--status", "working"],
        Some("reviewer"),
    )?;
    d.write_section("ui", "Handoff", "DONE: login form with error messages")?;
    d.step("agent", &["task", "complete", "ui"], Some("worker"))?;
    d.write_section("ui", "Review", "PASS: errors shown, tests cover both paths")?;
    d.step(
        "runner",
        &["task", "exited", "ui", "--exit-code", "0"],
        None,
    )?;
    d.step(
        "person",
        &["task", "update", "ui", "--status", "done"],
        None,
    )?;

    out::line("\n# i18n: an agent claims success without evidence, then fails review twice");
    d.step(
        "runner",
        &["task", "update", "i18n", "--status", "working"],
        None,
    )?;
    d.step(
        "agent",
        &["task", "update", "i18n", "--status", "reviewing"],
        Some("worker"),
    )?;
    for round in 1..=2 {
        d.write_section("i18n", "Handoff", &format!("DONE: {round}0 languages"))?;
        d.step("agent", &["task", "complete", "i18n"], Some("worker"))?;
        d.write_section("i18n", "Review", "FAIL: most languages missing")?;
        let to = if round == 1 { "working" } else { "stuck" };
        d.step(
            "agent",
            &["task", "update", "i18n", "--status", to],
            Some("reviewer"),
        )?;
    }

    out::line("\n# the record");
    d.step("person", &["check"], None)?;
    let (_, next) = d.warden(&["plan", "next"], None)?;
    out::line(&format!("  plan next: {}", next.trim()));
    let (_, state) = d.warden(&["state"], None)?;
    out::line("\n--- STATE.md ---");
    out::print(&state);
    Ok(())
}

fn run_shell(root: &Path, line: &str) -> Result<(), CliError> {
    out::line(&format!("  {:<9} sh -c {line:?}", "runner"));
    let st = Command::new("sh")
        .arg("-c")
        .arg(line)
        .current_dir(root)
        .status()
        .map_err(|e| CliError::internal(e.to_string()))?;
    if st.success() {
        Ok(())
    } else {
        Err(CliError::internal(format!("demo step failed: {line}")))
    }
}
