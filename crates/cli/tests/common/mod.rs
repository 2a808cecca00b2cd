//! Shared helpers for the integration tests: a temporary workspace driven through the
//! real `warden` binary (clean environment, `NO_COLOR=1`), JSON parsing of `--json`
//! output, and TASK.md edits as an agent would make them.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

/// Environment variables that would change which workspace or task a command uses.
pub const WARDEN_ENV: [&str; 6] = [
    "WARDEN_TASK_ID",
    "WARDEN_ROLE",
    "WARDEN_DIR",
    "WARDEN_STORE_URL",
    "WARDEN_TASK_FILE",
    "WARDEN_LOG",
];

/// The binary under test (built by cargo for integration tests; the same path that
/// `assert_cmd::cargo::cargo_bin!("warden")` expands to).
pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_warden"))
}

/// A `warden` command in `cwd` with a clean environment.
pub fn command(cwd: &Path) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(cwd).env("NO_COLOR", "1");
    for k in WARDEN_ENV {
        c.env_remove(k);
    }
    c.stdin(Stdio::null());
    c
}

/// The exit code (-1 when killed by a signal).
pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// Lossy text of a byte buffer.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A one-paragraph description of a run, for assertion messages.
pub fn describe(args: &[&str], o: &Output) -> String {
    format!(
        "`warden {}` exited {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        args.join(" "),
        code(o),
        text(&o.stdout),
        text(&o.stderr)
    )
}

/// The first line of stderr.
pub fn err_line(o: &Output) -> String {
    text(&o.stderr).lines().next().unwrap_or("").to_owned()
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh, empty, unique directory under the system temp dir.
pub fn unique_dir(name: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let p = std::env::temp_dir().join(format!("warden-it-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).expect("create temp dir");
    // Canonical, so paths printed by the binary compare equal.
    p.canonicalize().expect("canonical temp dir")
}

/// A temporary project directory, removed on drop.
pub struct Workspace {
    /// The project root (holds `.warden/` once initialised).
    pub root: PathBuf,
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Workspace {
    /// A directory with a workspace made by `warden init --dir D` (run from elsewhere).
    pub fn new(name: &str) -> Workspace {
        let ws = Workspace::bare(name);
        let elsewhere = std::env::temp_dir();
        let root = ws.root.to_str().expect("utf-8 temp path").to_owned();
        let args = ["init", "--dir", root.as_str()];
        let o = command(&elsewhere).args(args).output().expect("run warden");
        assert_eq!(code(&o), 0, "{}", describe(&args, &o));
        assert!(ws.root.join(".warden").is_dir(), "init made no .warden/");
        ws
    }

    /// A directory without a workspace.
    pub fn bare(name: &str) -> Workspace {
        Workspace {
            root: unique_dir(name),
        }
    }

    /// A `warden` command running in the project root.
    pub fn cmd(&self) -> Command {
        command(&self.root)
    }

    /// Runs `warden ARGS` in the root.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("run warden")
    }

    /// Runs `warden ARGS` in the root with extra environment variables.
    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = self.cmd();
        for (k, v) in env {
            c.env(k, v);
        }
        c.args(args).output().expect("run warden")
    }

    /// Runs `warden ARGS` with `input` on stdin.
    pub fn run_stdin(&self, args: &[&str], input: &str) -> Output {
        self.run_stdin_env(args, input, &[])
    }

    /// Runs `warden ARGS` with `input` on stdin and extra environment variables.
    pub fn run_stdin_env(&self, args: &[&str], input: &str, env: &[(&str, &str)]) -> Output {
        use std::io::Write;
        let mut c = self.cmd();
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn warden");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("wait warden")
    }

    /// Runs and asserts the exit code; returns the output.
    pub fn expect(&self, args: &[&str], want: i32) -> Output {
        let o = self.run(args);
        assert_eq!(code(&o), want, "{}", describe(args, &o));
        o
    }

    /// Runs and asserts exit 0.
    pub fn ok(&self, args: &[&str]) -> Output {
        self.expect(args, 0)
    }

    /// Runs `warden --json ARGS`, asserts exit 0 and parses stdout as one JSON document.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let o = self.expect(&full, 0);
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", describe(&full, &o)))
    }

    /// Runs `warden --json ARGS` and parses stdout as JSON lines.
    pub fn json_lines(&self, args: &[&str]) -> Vec<Value> {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let o = self.expect(&full, 0);
        text(&o.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("line {l:?} is not JSON: {e}"))
            })
            .collect()
    }

    /// `task show --json ID`.
    pub fn show(&self, id: &str) -> Value {
        self.json(&["task", "show", id])
    }

    /// The status of a task.
    pub fn status(&self, id: &str) -> String {
        self.show(id)["status"].as_str().expect("status").to_owned()
    }

    /// The version of a task.
    pub fn version(&self, id: &str) -> u64 {
        self.show(id)["version"].as_u64().expect("version")
    }

    /// Every event (`history --json`).
    pub fn history(&self) -> Vec<Value> {
        self.json_lines(&["history"])
    }

    /// Events of one type (optionally of one task).
    pub fn events(&self, ty: &str, task: Option<&str>) -> Vec<Value> {
        self.history()
            .into_iter()
            .filter(|e| e["type"] == ty && task.is_none_or(|t| e["task"] == t))
            .collect()
    }

    /// Every task (`task list --json`).
    pub fn tasks(&self) -> Vec<Value> {
        self.json(&["task", "list"])
            .as_array()
            .expect("task list is an array")
            .clone()
    }

    /// `task create ID EXTRA…`, asserting success.
    pub fn create(&self, id: &str, extra: &[&str]) {
        let mut args = vec!["task", "create", id];
        args.extend_from_slice(extra);
        self.ok(&args);
    }

    /// `task update ID --status S`, asserting success.
    pub fn to(&self, id: &str, status: &str) {
        self.ok(&["task", "update", id, "--status", status]);
    }

    /// `warden check` must pass.
    pub fn check_ok(&self) {
        let v = self.json(&["check"]);
        assert_eq!(v["ok"], true, "check found problems: {v}");
    }

    /// A path under the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Writes a file under the root (parents created); returns its path.
    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, content).expect("write file");
        p
    }

    /// `.warden/tasks/ID/TASK.md`.
    pub fn task_md(&self, id: &str) -> PathBuf {
        self.root.join(".warden/tasks").join(id).join("TASK.md")
    }

    /// The text of TASK.md.
    pub fn read_task_md(&self, id: &str) -> String {
        std::fs::read_to_string(self.task_md(id)).expect("read TASK.md")
    }

    /// Replaces TASK.md.
    pub fn write_task_md(&self, id: &str, text: &str) {
        std::fs::write(self.task_md(id), text).expect("write TASK.md");
    }

    /// Appends a `## NAME` section with `content` to TASK.md (agents append; the last
    /// section of a name counts).
    pub fn add_section(&self, id: &str, name: &str, content: &str) {
        let mut t = self.read_task_md(id);
        if !t.ends_with('\n') {
            t.push('\n');
        }
        t.push_str(&format!("\n## {name}\n\n{content}\n"));
        self.write_task_md(id, &t);
    }

    /// Writes a non-empty `## Handoff`.
    pub fn handoff(&self, id: &str) {
        self.add_section(id, "Handoff", "Implemented the change; tests added.");
    }

    /// A task `id` made stuck the way a failing guard makes one: postchecks `false`, one
    /// attempt, a hand-off that runs them.
    pub fn stuck_by_its_postchecks(&self, id: &str) {
        self.create(id, &["--postchecks", "false", "--max-attempts", "1"]);
        self.to(id, "working");
        self.handoff(id);
        self.expect(&["task", "complete", id], 1);
        assert_eq!(self.status(id), "stuck");
    }

    /// Writes a `## Review` whose verdict line says `verdict`.
    pub fn review(&self, id: &str, verdict: &str) {
        self.add_section(
            id,
            "Review",
            &format!("Verdict: {verdict}\n\nNotes from the reviewer."),
        );
    }

    /// The value of a frontmatter field of TASK.md (plain or double-quoted).
    pub fn frontmatter(&self, id: &str, field: &str) -> Option<String> {
        frontmatter_field(&self.read_task_md(id), field)
    }

    /// Replaces the value of a frontmatter field in TASK.md, as an agent would.
    pub fn set_frontmatter(&self, id: &str, field: &str, value: &str) {
        let t = self.read_task_md(id);
        let prefix = format!("{field}:");
        let mut found = false;
        let mut out = String::new();
        let mut fences = 0;
        for line in t.split_inclusive('\n') {
            if line.trim_end() == "---" {
                fences += 1;
            }
            if fences == 1 && !found && line.starts_with(&prefix) {
                out.push_str(&format!("{field}: {value}\n"));
                found = true;
            } else {
                out.push_str(line);
            }
        }
        assert!(
            found,
            "TASK.md of {id} has no frontmatter field {field}:\n{t}"
        );
        self.write_task_md(id, &out);
    }
}

/// The value of `field` in the frontmatter block of a TASK.md text.
pub fn frontmatter_field(text: &str, field: &str) -> Option<String> {
    let mut lines = text.lines();
    if lines.next()?.trim_end() != "---" {
        return None;
    }
    for line in lines {
        if line.trim_end() == "---" {
            return None;
        }
        if let Some(v) = line.strip_prefix(&format!("{field}:")) {
            return Some(v.trim().trim_matches('"').to_owned());
        }
    }
    None
}

/// Ids of a JSON array of ids, or of task objects (their `id`).
pub fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| {
            x.as_str()
                .or(x["id"].as_str())
                .expect("string id")
                .to_owned()
        })
        .collect()
}
