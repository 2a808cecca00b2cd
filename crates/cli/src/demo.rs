//! `warden demo`: a sample plan run end to end by the real supervisor in a temporary git
//! repository, on the embedded SQLite store. The agents are `warden agent-sim`: they edit
//! their worktrees and TASK.md and call `warden` as real agents do — one crashes once,
//! one fails its first review, one never satisfies its reviewer and ends stuck. The demo
//! plays the person: it approves what reaches `reviewing` and respawns a crashed worker.

// Progress for the person watching (demo) and the simulated agent's own log.
#![allow(clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Args;

use crate::ctx::Global;
use crate::out;
use warden_core::failure::{ExitCode, Failure};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Keep the workspace in this directory instead of a temporary one.
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// Session mode for the agents: process or tmux.
    #[arg(long, default_value = "process")]
    session: String,
}

const PLAN: &str = r#"{"tasks": [
  {"id": "01-backend", "title": "Backend", "order": 1},
  {"id": "schema", "title": "Database schema", "parent": "01-backend", "order": 1,
   "work": "printf 'CREATE TABLE users (id INTEGER PRIMARY KEY);\n' > schema.sql",
   "postchecks": "grep -q 'CREATE TABLE users' schema.sql"},
  {"id": "api", "title": "REST API", "parent": "01-backend", "order": 2,
   "agent": "Build the REST API on top of the schema (sim:good)", "depends_on": ["schema"]},
  {"id": "auth", "title": "Sessions and login", "parent": "01-backend", "order": 3,
   "agent": "Add session handling (sim:crash-once)", "depends_on": ["schema"]},
  {"id": "02-frontend", "title": "Frontend", "order": 2},
  {"id": "ui", "title": "Login page", "parent": "02-frontend", "order": 1,
   "agent": "Build the login page (sim:fail-once)", "depends_on": ["api", "auth"]},
  {"id": "i18n", "title": "Translations", "parent": "02-frontend", "order": 2,
   "agent": "Translate the login page into 40 languages (sim:fail-always)", "depends_on": ["ui"]},
  {"id": "docs", "title": "API reference", "parent": "02-frontend", "order": 3,
   "work": "mkdir -p docs && echo '# API' > docs/api.md", "depends_on": ["api"]}
]}"#;

struct Demo {
    exe: PathBuf,
    root: PathBuf,
    json: bool,
}

impl Demo {
    /// A line of the transcript: on stdout, or on stderr under `--json` (stdout then
    /// carries only the closing JSON summary).
    fn say(&self, text: &str) {
        if self.json {
            eprintln!("{text}");
        } else {
            out::line(text);
        }
    }

    /// Text of the transcript as it is (see [`Demo::say`]).
    fn show(&self, text: &str) {
        if self.json {
            eprint!("{text}");
        } else {
            out::print(text);
        }
    }

    /// Where the supervisor's own output goes: the transcript's stream.
    fn stdout(&self) -> Result<Stdio, Failure> {
        if !self.json {
            return Ok(Stdio::inherit());
        }
        use std::os::fd::AsFd;
        let fd = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Failure::internal(format!("cannot share stderr: {e}")))?;
        Ok(Stdio::from(fd))
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.exe);
        c.args(args)
            .current_dir(&self.root)
            .env("WARDEN_DIR", &self.root)
            .env("NO_COLOR", "1")
            .env_remove("WARDEN_TASK_ID")
            .env_remove("WARDEN_ROLE")
            .env_remove("WARDEN_STORE_URL");
        c
    }

    /// Runs `warden ARGS` and returns (exit code, stdout+stderr).
    fn warden(&self, args: &[&str]) -> Result<(i32, String), Failure> {
        let o = self
            .cmd(args)
            .output()
            .map_err(|e| Failure::internal(format!("cannot run {}: {e}", self.exe.display())))?;
        let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&o.stderr));
        Ok((o.status.code().unwrap_or(-1), text))
    }

    /// A person's command, echoed with Warden's first line of answer.
    fn person(&self, args: &[&str]) -> Result<i32, Failure> {
        let (code, text) = self.warden(args)?;
        self.say(&format!(
            "  person$ warden {}  → [{code}] {}",
            args.join(" "),
            text.lines().next().unwrap_or("")
        ));
        Ok(code)
    }

    /// `warden run --until-idle`, its output streamed as it comes.
    fn run(&self, session: &str) -> Result<(), Failure> {
        self.say(&format!(
            "  person$ warden run --until-idle --session {session}"
        ));
        let st = self
            .cmd(&["run", "--until-idle", "--session", session])
            .stdout(self.stdout()?)
            .stderr(Stdio::inherit())
            .status()
            .map_err(|e| Failure::internal(e.to_string()))?;
        // `--until-idle` says how the run ended: all done, waiting for the person (a
        // review to approve), or something stuck or dead (a crash to respawn). The demo's
        // person acts on the last two; any other code is a failure of the run itself.
        let code = st.code().and_then(|c| ExitCode::from_code(c.into()));
        match code {
            Some(ExitCode::Ok) => {}
            Some(ExitCode::NeedsPerson) => {
                self.say("  (the run ended with exit 6: something waits for the person)")
            }
            Some(ExitCode::StuckOrDead) => {
                self.say("  (the run ended with exit 7: something is stuck or dead)")
            }
            _ => {
                return Err(Failure::internal(format!(
                    "the supervisor failed ({st}); see its output above"
                )));
            }
        }
        Ok(())
    }

    fn tasks(&self) -> Result<serde_json::Value, Failure> {
        let (_, text) = self.warden(&["--json", "task", "list"])?;
        serde_json::from_str(&text).map_err(|e| Failure::internal(format!("task list: {e}")))
    }
}

fn git(root: &Path, args: &[&str]) -> Result<String, Failure> {
    let o = Command::new("git")
        .args(args)
        .current_dir(root)
        .env("GIT_AUTHOR_NAME", "Demo Person")
        .env("GIT_AUTHOR_EMAIL", "person@example.invalid")
        .env("GIT_COMMITTER_NAME", "Demo Person")
        .env("GIT_COMMITTER_EMAIL", "person@example.invalid")
        .output()
        .map_err(|e| Failure::internal(format!("the demo needs git: {e}")))?;
    if !o.status.success() {
        return Err(Failure::internal(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

pub fn run(g: &Global, a: DemoArgs) -> Result<(), Failure> {
    if a.session != "process" && a.session != "tmux" {
        return Err(Failure::usage("--session takes process or tmux"));
    }
    let started = std::time::Instant::now();
    let exe = std::env::current_exe().map_err(|e| Failure::internal(e.to_string()))?;
    let (root, temp) = match a.keep {
        Some(d) => {
            // The demo makes a repository of its own there: never inside a person's
            // project (it would commit to their branch and rewrite their config).
            if std::fs::read_dir(&d).is_ok_and(|mut e| e.next().is_some()) {
                return Err(Failure::usage(format!(
                    "{} is not empty; give --keep a new or empty directory",
                    d.display()
                )));
            }
            std::fs::create_dir_all(&d).map_err(|e| Failure::usage(e.to_string()))?;
            (d, false)
        }
        None => {
            let d = std::env::temp_dir().join(format!(
                "warden-demo-{}-{}",
                std::process::id(),
                jiff::Timestamp::now().as_millisecond()
            ));
            std::fs::create_dir_all(&d).map_err(|e| Failure::internal(e.to_string()))?;
            (d, true)
        }
    };
    let d = Demo {
        exe,
        root: root.clone(),
        json: g.json,
    };
    let result = script(&d, &a.session);
    d.say(&format!(
        "\nDemo finished in {:.1}s. Workspace: {}{}",
        started.elapsed().as_secs_f64(),
        root.display(),
        if temp {
            " (removed; pass --keep DIR to keep it and open `warden --dir DIR dashboard`)"
        } else {
            ""
        }
    ));
    if temp {
        let _ = std::fs::remove_dir_all(&root);
    }
    let mut summary = result?;
    if g.json {
        summary["seconds"] = serde_json::json!(started.elapsed().as_secs_f64());
        summary["workspace"] = serde_json::json!(root);
        summary["kept"] = serde_json::json!(!temp);
        out::json(&summary);
    }
    Ok(())
}

/// Runs the demo's story; returns what `--json` prints: the tasks as they ended, main's
/// log, and whether the person's own files were left alone.
fn script(d: &Demo, session: &str) -> Result<serde_json::Value, Failure> {
    d.say("Warden demo: a sample plan run by the supervisor with simulated agents.\n");
    let root = &d.root;
    git(root, &["init", "-q", "-b", "main"])?;
    std::fs::write(root.join("README.md"), "# demo app\n")
        .map_err(|e| Failure::internal(e.to_string()))?;
    git(root, &["add", "README.md"])?;
    git(root, &["commit", "-q", "-m", "initial commit"])?;
    // The person's own work in progress: Warden must never touch it.
    std::fs::write(root.join("README.md"), "# demo app\n\nwork in progress\n")
        .map_err(|e| Failure::internal(e.to_string()))?;
    std::fs::write(root.join("notes.txt"), "untracked notes\n")
        .map_err(|e| Failure::internal(e.to_string()))?;

    d.person(&["init"])?;
    let cfg = root.join(".warden/warden.toml");
    let text = std::fs::read_to_string(&cfg).map_err(|e| Failure::internal(e.to_string()))?;
    let exe = d
        .exe
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    let text = text
        .lines()
        .map(|l| match l.starts_with("preset = ") {
            true => format!(
                "preset = \"custom\"\ncommand = [\"{exe}\", \"agent-sim\", \"--prompt\", \"{{prompt_file}}\"]"
            ),
            false => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&cfg, text).map_err(|e| Failure::internal(e.to_string()))?;
    d.say(
        "  (agent.command set to the simulated agent: `warden agent-sim --prompt {prompt_file}`)",
    );
    std::fs::write(root.join(".warden/plan.json"), PLAN)
        .map_err(|e| Failure::internal(e.to_string()))?;
    d.person(&["plan", "import", ".warden/plan.json"])?;
    d.person(&["state", "--write"])?;

    for round in 1..=6 {
        d.say(&format!("\n# supervisor pass {round}"));
        d.run(session)?;
        let tasks = d.tasks()?;
        let mut acted = false;
        for t in tasks.as_array().into_iter().flatten() {
            let id = t["id"].as_str().unwrap_or_default();
            match t["status"].as_str() {
                Some("reviewing") => {
                    d.say(&format!("  (the person reviews {id} and approves it)"));
                    d.person(&["task", "approve", id])?;
                    acted = true;
                }
                Some("working") if t["dead"] == true => {
                    d.say(&format!(
                        "  ({id}'s worker crashed; the person respawns it)"
                    ));
                    d.person(&["task", "respawn", id])?;
                    acted = true;
                }
                _ => {}
            }
        }
        if !acted {
            break;
        }
    }

    d.say("\n# the record");
    d.person(&["task", "list"])?;
    let (_, list) = d.warden(&["task", "list"])?;
    d.show(&list);
    d.person(&["check"])?;
    let log = git(root, &["log", "--oneline", "main"])?;
    d.say("\n  git log --oneline main:");
    for l in log.lines() {
        d.say(&format!("    {l}"));
    }
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap_or_default();
    let notes = std::fs::read_to_string(root.join("notes.txt")).unwrap_or_default();
    let intact = readme.contains("work in progress") && notes == "untracked notes\n";
    d.say(&format!(
        "  the person's uncommitted README.md and untracked notes.txt are {}",
        if intact {
            "intact"
        } else {
            "CHANGED (this is a bug)"
        }
    ));
    let (_, state) = d.warden(&["state"])?;
    d.say("\n--- STATE.md ---");
    d.show(&state);
    d.say(&format!(
        "\nOn a kept workspace (--keep DIR), look around with: warden --dir {} dashboard",
        root.display()
    ));
    let tasks: Vec<serde_json::Value> = d
        .tasks()?
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| serde_json::json!({"id": t["id"], "status": t["status"]}))
        .collect();
    Ok(serde_json::json!({
        "tasks": tasks,
        "main_log": log.lines().collect::<Vec<_>>(),
        "person_files_intact": intact,
    }))
}
