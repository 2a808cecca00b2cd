//! End-to-end tests of the supervisor (`warden run`) with real git, real processes, real
//! tmux and simulated agents (`warden agent-sim`) that act through the real CLI.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::pg_runners::wait_until;

pub(crate) fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_warden"))
}

static N: AtomicUsize = AtomicUsize::new(0);

/// A process started by [`Project::background`], killed with SIGKILL when dropped.
pub(crate) struct Background(std::process::Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) struct Project {
    pub(crate) root: PathBuf,
    /// Extra environment for every `warden` this test runs.
    pub(crate) env: Vec<(&'static str, String)>,
}

impl Drop for Project {
    fn drop(&mut self) {
        // Stop a private tmux server if a test started one.
        let sock = self.root.join(".warden/tmux.sock");
        if sock.exists() {
            let _ = Command::new("tmux")
                .args(["-S"])
                .arg(&sock)
                .arg("kill-server")
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

pub(crate) fn git(root: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(args)
        .current_dir(root)
        .env("GIT_AUTHOR_NAME", "Person")
        .env("GIT_AUTHOR_EMAIL", "p@example.invalid")
        .env("GIT_COMMITTER_NAME", "Person")
        .env("GIT_COMMITTER_EMAIL", "p@example.invalid")
        .output()
        .expect("git runs");
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

impl Project {
    /// An empty directory: no git repository, no workspace.
    pub(crate) fn empty(name: &str) -> Project {
        let root = std::env::temp_dir().join(format!(
            "warden-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&root).unwrap();
        Project {
            root,
            env: Vec::new(),
        }
    }

    /// A git repository with one commit, the person's own uncommitted and untracked
    /// files, and a Warden workspace whose agent is the simulated one.
    pub(crate) fn new(session: &str) -> Project {
        let root = std::env::temp_dir().join(format!(
            "warden-e2e-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        git(&root, &["init", "-q", "-b", "main"]);
        std::fs::write(root.join("README.md"), "# app\n").unwrap();
        git(&root, &["add", "README.md"]);
        git(&root, &["commit", "-q", "-m", "initial"]);
        std::fs::write(
            root.join("README.md"),
            "# app\n\nperson's work in progress\n",
        )
        .unwrap();
        std::fs::write(root.join("scratch.txt"), "untracked\n").unwrap();
        let p = Project {
            root,
            env: Vec::new(),
        };
        p.ok(&["init"]);
        let cfg = p.root.join(".warden/warden.toml");
        let text = sim_agent(&std::fs::read_to_string(&cfg).unwrap());
        let text = text.replace("session = \"process\"", &format!("session = \"{session}\""));
        std::fs::write(&cfg, text).unwrap();
        p
    }

    pub(crate) fn cmd(&self, args: &[&str]) -> Command {
        self.cmd_of(bin(), args)
    }

    /// `program ARGS` (a copy of the binary, say) in the project, with the environment
    /// of [`Project::cmd`].
    pub(crate) fn cmd_of(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(program);
        c.args(args).current_dir(&self.root).env("NO_COLOR", "1");
        for v in [
            "WARDEN_TASK_ID",
            "WARDEN_ROLE",
            "WARDEN_DIR",
            "WARDEN_STORE_URL",
            "WARDEN_CREDENTIALS",
            "PGPASSWORD",
        ] {
            c.env_remove(v);
        }
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// `warden ARGS` (a run, say), which must end within `limit`: one that does not
    /// fails the test instead of hanging it.
    pub(crate) fn run_within(&self, args: &[&str], limit: Duration) -> Output {
        let child = self
            .cmd(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        crate::hostile::finish(child, limit, &format!("warden {}", args.join(" ")))
    }

    /// Reads `warden --json ARGS` until `want` holds of the answer, and returns it: the
    /// state another process brings (a supervisor, a session) is looked for every 50 ms,
    /// and one that does not come within a minute fails the test.
    pub(crate) fn json_until(
        &self,
        args: &[&str],
        what: &str,
        want: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = self.json(args);
            if want(&v) {
                return v;
            }
            assert!(Instant::now() < deadline, "never {what}: {v:#}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts `c` (a `warden run`, say) in the background, its output dropped; it is
    /// killed (SIGKILL) and reaped when the answer is dropped, whatever the test did.
    pub(crate) fn background(&self, mut c: Command) -> Background {
        Background(
            c.stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    /// `warden doctor`'s line for `check` (`git`, `agent`, …).
    pub(crate) fn doctor_check(&self, check: &str) -> Value {
        let o = self.cmd(&["--json", "doctor"]).output().unwrap();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["check"] == check))
            .cloned()
            .unwrap_or_default()
    }

    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "warden {args:?} failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    pub(crate) fn json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        serde_json::from_str(&self.ok(&a)).unwrap()
    }

    pub(crate) fn task(&self, id: &str) -> Value {
        self.json(&["task", "show", id])
    }

    pub(crate) fn import(&self, plan: &str) {
        std::fs::write(self.root.join(".warden/plan.json"), plan).unwrap();
        self.ok(&["plan", "import", ".warden/plan.json"]);
    }

    /// Runs the supervisor until idle; returns its exit code, which is one of the
    /// documented ones (0 all done, 6 waiting for a person, 7 stuck, dead or blocked).
    pub(crate) fn until_idle(&self) -> i32 {
        // A run that never goes idle fails the test after a generous deadline instead of
        // hanging it (and CI with it).
        let mut child = self
            .cmd(&["run", "--until-idle", "--max-parallel", "4"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let read = |mut r: Box<dyn std::io::Read + Send>| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                let _ = r.read_to_end(&mut v);
                v
            })
        };
        let (out, err) = (read(Box::new(out)), read(Box::new(err)));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "warden run --until-idle did not go idle within 300 s:\n{}",
                    String::from_utf8_lossy(&out.join().unwrap())
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let o = Output {
            status,
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
        };
        let code = o.status.code().unwrap_or(-1);
        assert!(
            [0, 6, 7].contains(&code),
            "warden run failed ({code}): {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        code
    }

    /// Runs the supervisor, approving what reaches `reviewing`, until nothing changes.
    pub(crate) fn run_to_end(&self) {
        for _ in 0..10 {
            self.until_idle();
            let tasks = self.json(&["task", "list"]);
            let reviewing: Vec<String> = tasks
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["status"] == "reviewing")
                .map(|t| t["id"].as_str().unwrap().to_owned())
                .collect();
            if reviewing.is_empty() {
                return;
            }
            for id in reviewing {
                self.ok(&["task", "update", &id, "--status", "done"]);
            }
        }
        panic!("the plan did not settle in 10 passes");
    }

    pub(crate) fn check(&self) {
        self.ok(&["check"]);
    }

    pub(crate) fn person_files_intact(&self) {
        assert_eq!(
            std::fs::read_to_string(self.root.join("README.md")).unwrap(),
            "# app\n\nperson's work in progress\n"
        );
        assert_eq!(
            std::fs::read_to_string(self.root.join("scratch.txt")).unwrap(),
            "untracked\n"
        );
    }
}

const SIX: &str = r#"{"tasks": [
  {"id": "base", "work": "echo base > base.txt"},
  {"id": "lib", "agent": "write the library (sim:good)", "depends_on": ["base"]},
  {"id": "cli", "agent": "write the cli (sim:exit-only)", "depends_on": ["lib"]},
  {"id": "docs", "work": "echo docs > docs.txt", "depends_on": ["base"],
   "postchecks": "test -f docs.txt"},
  {"id": "web", "agent": "write the web ui (sim:fail-once)", "depends_on": ["lib"]},
  {"id": "ship", "work": "cat base.txt lib.txt cli.txt docs.txt web.txt > ship.txt",
   "depends_on": ["cli", "docs", "web"]}
]}"#;

fn plan_runs_to_done(session: &str) {
    let p = Project::new(session);
    p.import(SIX);
    p.run_to_end();
    for id in ["base", "lib", "cli", "docs", "web", "ship"] {
        assert_eq!(p.task(id)["status"], "done", "{id}: {}", p.task(id));
    }
    // Every task's result is merged into main, in dependency order.
    let shipped = git(&p.root, &["show", "main:ship.txt"]);
    for id in ["base", "lib", "cli", "docs", "web"] {
        assert!(shipped.contains(id), "ship.txt lacks {id}: {shipped}");
    }
    p.person_files_intact();
    assert_eq!(
        p.task("web")["review_round"],
        2,
        "web failed its first review"
    );
    p.check();
}

#[test]
fn plan_runs_to_done_with_process_sessions() {
    plan_runs_to_done("process");
}

#[test]
fn plan_runs_to_done_with_tmux_sessions() {
    plan_runs_to_done("tmux");
}

/// DESIGN 2.2's exit table, one row per task, driven by simulated agents in real sessions.
#[test]
fn exit_table_rows_in_real_sessions() {
    let p = Project::new("process");
    p.import(
        r#"{"tasks": [
      {"id": "handoff-exit", "agent": "x (sim:exit-only)"},
      {"id": "no-handoff", "agent": "x (sim:no-artifact)"},
      {"id": "crash-once", "agent": "x (sim:crash-once)"},
      {"id": "fail-always", "agent": "x (sim:fail-always)"}
    ]}"#,
    );
    p.until_idle();
    // working + Handoff at exit → agent-review, reviewer spawned, PASS at exit → reviewing.
    let t = p.task("handoff-exit");
    assert_eq!(t["status"], "reviewing", "{t}");
    // working without Handoff → crash 1, stays working, marked dead, waits for a person.
    let t = p.task("no-handoff");
    assert_eq!(
        (
            t["status"].as_str(),
            t["crash_count"].as_u64(),
            t["dead"].as_bool()
        ),
        (Some("working"), Some(1), Some(true)),
        "{t}"
    );
    // A second crash reaches the threshold → stuck.
    p.ok(&["task", "respawn", "no-handoff"]);
    p.until_idle();
    let t = p.task("no-handoff");
    assert_eq!(
        (t["status"].as_str(), t["crash_count"].as_u64()),
        (Some("stuck"), Some(2)),
        "{t}"
    );
    // A crash, then a respawn that hands off → review passes.
    let t = p.task("crash-once");
    assert_eq!(t["status"], "working", "{t}");
    p.ok(&["task", "respawn", "crash-once"]);
    p.until_idle();
    assert_eq!(p.task("crash-once")["status"], "reviewing");
    assert_eq!(
        p.task("crash-once")["crash_count"],
        0,
        "reset by the successful transition"
    );
    // FAIL in round 1 → working with a new worker; FAIL in round 2 → stuck.
    let t = p.task("fail-always");
    assert_eq!(
        (t["status"].as_str(), t["review_round"].as_u64()),
        (Some("stuck"), Some(2)),
        "{t}"
    );
    let hist = p.ok(&["--json", "history", "fail-always"]);
    let spawned = hist
        .lines()
        .filter(|l| l.contains("\"agent.spawned\""))
        .count();
    assert_eq!(spawned, 4, "worker, reviewer, worker, reviewer:\n{hist}");
    p.check();
}

/// A reviewer that exits without a verdict is respawned by the supervisor itself.
#[test]
fn reviewer_without_verdict_is_respawned_then_escalates() {
    let p = Project::new("process");
    p.import(r#"{"tasks": [{"id": "r", "agent": "x (sim:good)"}]}"#);
    // The worker hands off; every reviewer exits without writing a verdict.
    let cfg = p.root.join(".warden/warden.toml");
    let good = std::fs::read_to_string(&cfg).unwrap();
    let reviewer_silent = good.replace(
        "\"agent-sim\", \"--prompt\"",
        "\"agent-sim\", \"--silent-reviewer\", \"--prompt\"",
    );
    std::fs::write(&cfg, reviewer_silent).unwrap();
    p.until_idle();
    let t = p.task("r");
    assert_eq!(
        (t["status"].as_str(), t["crash_count"].as_u64()),
        (Some("stuck"), Some(2)),
        "{t}"
    );
    let hist = p.ok(&["--json", "history", "r"]);
    let reviewers = hist
        .lines()
        .filter(|l| l.contains("\"agent.spawned\"") && l.contains("reviewer"))
        .count();
    assert_eq!(
        reviewers, 2,
        "the reviewer is respawned once below the threshold:\n{hist}"
    );
}

/// A verdict left in TASK.md by an earlier round never passes the next one: after a
/// person sends passed work back, a reviewer that writes nothing is a reviewer without a
/// verdict (respawned, then stuck), not round 1's PASS again. Before, the task went
/// back to the person with "review says PASS" and nobody had reviewed the new work.
#[test]
fn an_earlier_rounds_pass_does_not_pass_the_next_round() {
    let p = Project::new("process");
    p.import(r#"{"tasks": [{"id": "r", "agent": "x (sim:good)"}]}"#);
    p.until_idle();
    assert_eq!(p.task("r")["status"], "reviewing");
    let cfg = p.root.join(".warden/warden.toml");
    let good = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        good.replace(
            "\"agent-sim\", \"--prompt\"",
            "\"agent-sim\", \"--silent-reviewer\", \"--prompt\"",
        ),
    )
    .unwrap();
    p.ok(&[
        "task",
        "reject",
        "r",
        "--reason",
        "the button is the wrong colour",
    ]);
    p.until_idle();
    let t = p.task("r");
    assert_eq!(
        (
            t["status"].as_str(),
            t["review_round"].as_u64(),
            t["crash_count"].as_u64()
        ),
        (Some("stuck"), Some(2), Some(2)),
        "{t}"
    );
    let hist = p.ok(&["history", "r"]);
    assert_eq!(
        hist.matches("agent-review → reviewing").count(),
        1,
        "only round 1's review passed:\n{hist}"
    );
    assert!(
        hist.contains("without a new ## Review verdict"),
        "the crash says why:\n{hist}"
    );
    p.check();
}

fn count_lines(p: &Path) -> usize {
    std::fs::read_to_string(p)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// Seed 004's retry on real phases: succeeded phases are kept and not run again.
#[test]
fn retry_resumes_from_the_failed_phase_only() {
    let p = Project::new("process");
    p.import(
        r#"{"tasks": [{"id": "t", "max_attempts": 2,
        "prechecks": "echo pre >> \"$WARDEN_DIR/pre.count\"",
        "work": "echo work >> \"$WARDEN_DIR/work.count\"; echo out > out.txt",
        "postchecks": "test -f missing.txt"}]}"#,
    );
    p.until_idle();
    let t = p.task("t");
    assert_eq!(t["status"], "stuck", "{t}");
    assert_eq!(t["phases"]["postchecks"], "failed");
    assert_eq!(count_lines(&p.root.join("pre.count")), 1);
    assert_eq!(count_lines(&p.root.join("work.count")), 1);
    let out = p.ok(&["task", "retry", "t", "--postchecks", "test -f out.txt"]);
    assert!(
        out.contains("kept:       merge-fi, prechecks, work"),
        "{out}"
    );
    p.until_idle();
    assert_eq!(p.task("t")["status"], "done", "{}", p.task("t"));
    assert_eq!(
        count_lines(&p.root.join("pre.count")),
        1,
        "prechecks not run again"
    );
    assert_eq!(
        count_lines(&p.root.join("work.count")),
        1,
        "work not run again"
    );
    assert_eq!(git(&p.root, &["show", "main:out.txt"]), "out\n");
    // New work re-runs work but not prechecks.
    p.check();
}

/// kill -9 of the supervisor mid-plan; a restart finishes everything, each work runs once.
#[test]
fn kill_9_mid_plan_then_restart() {
    let p = Project::new("process");
    let mut tasks = Vec::new();
    for i in 0..8 {
        tasks.push(format!(
            r#"{{"id": "w{i}", "work": "sleep 0.4; echo w{i} >> \"$WARDEN_DIR/ran.log\""}}"#
        ));
    }
    p.import(&format!(r#"{{"tasks": [{}]}}"#, tasks.join(",")));
    let mut child = p.cmd(&["run", "--max-parallel", "3"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(900));
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        p.until_idle();
        let all = p.json(&["task", "list"]);
        if all
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["status"] == "done")
        {
            break;
        }
        assert!(Instant::now() < deadline, "not finished: {all}");
    }
    let ran = std::fs::read_to_string(p.root.join("ran.log")).unwrap();
    for i in 0..8 {
        let n = ran.lines().filter(|l| *l == format!("w{i}")).count();
        assert_eq!(n, 1, "w{i} ran {n} times:\n{ran}");
    }
    p.check();
}

/// Outside a git repository the git phases are skipped and work runs in the project.
#[test]
fn outside_git_phases_are_skipped() {
    let p = Project::empty("nogit");
    p.ok(&["init"]);
    p.import(
        r#"{"tasks": [{"id": "a", "work": "echo hi > hi.txt", "postchecks": "test -f hi.txt"}]}"#,
    );
    p.until_idle();
    let t = p.task("a");
    assert_eq!(t["status"], "done", "{t}");
    assert_eq!(t["phases"]["merge-fi"], "skipped");
    assert_eq!(t["phases"]["commit"], "skipped");
    assert_eq!(t["phases"]["merge-ri"], "skipped");
    assert!(p.root.join("hi.txt").exists());
}

fn find_pwned(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if e.file_name().to_string_lossy().starts_with("PWNED") {
            found.push(p.clone());
        }
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            find_pwned(&p, found);
        }
    }
}

/// Titles, bodies and instructions reach git, tmux and the agent only as arguments:
/// shell metacharacters in them never run, in either session mode.
#[test]
fn shell_metacharacters_in_titles_never_run() {
    for session in ["process", "tmux"] {
        let p = Project::new(session);
        p.import(
            r#"{"tasks": [{"id": "evil",
              "title": "$(touch PWNED1) `touch PWNED2`; touch PWNED3 #{pane_pid} '\"",
              "body": "$(touch PWNED4)\n; touch PWNED5",
              "agent": "x $(touch PWNED6) `touch PWNED7` (sim:good)"}]}"#,
        );
        p.run_to_end();
        assert_eq!(
            p.task("evil")["status"],
            "done",
            "{session}: {}",
            p.task("evil")
        );
        let mut found = Vec::new();
        find_pwned(&p.root, &mut found);
        find_pwned(&std::env::temp_dir(), &mut found);
        assert!(found.is_empty(), "{session}: something ran: {found:?}");
        let log = git(&p.root, &["log", "-1", "--format=%s", "main"]);
        assert!(
            log.contains("$(touch PWNED1)"),
            "the title is kept literally: {log}"
        );
    }
}

/// The store's secrets given to `warden run` (`WARDEN_STORE_URL`, `PGPASSWORD`) never
/// reach a session's environment (nor the tmux server's), yet Warden's own calls from the
/// session still find the store: through the 0600 credentials file.
#[test]
fn sessions_carry_no_store_secrets() {
    use std::os::unix::fs::PermissionsExt;
    for session in ["process", "tmux"] {
        let mut p = Project::new(session);
        // The configured store is unusable: only the URL from the environment works.
        let cfg = p.root.join(".warden/warden.toml");
        let text = std::fs::read_to_string(&cfg).unwrap();
        let text = text.replace(
            "url = \"sqlite:.warden/warden.db\"",
            "url = \"sqlite:/nonexistent/warden.db\"",
        );
        assert!(text.contains("/nonexistent/"), "{text}");
        // The agent dumps its environment, then acts as the simulated agent.
        let text = text
            .lines()
            .map(|l| {
                if l.starts_with("command = ") {
                    format!(
                        "command = [\"sh\", \"-c\", \"env > \\\"$WARDEN_DIR/.warden/env-$WARDEN_SESSION\\\"; exec \\\"$0\\\" agent-sim --prompt \\\"$1\\\"\", \"{}\", \"{{prompt_file}}\"]",
                        bin().display()
                    )
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
            // An agent's key passes only when listed; the basics always do.
            .replace("pass_env = []", "pass_env = [\"MY_AGENT_KEY\"]");
        std::fs::write(&cfg, text).unwrap();
        let db = p.root.join(".warden/warden.db");
        p.env = vec![
            ("WARDEN_STORE_URL", format!("sqlite:{}", db.display())),
            ("PGPASSWORD", "hunter2-secret".into()),
            ("MY_AGENT_KEY", "listed-key".into()),
            ("ANTHROPIC_API_KEY", "unlisted-key".into()),
        ];
        p.import(r#"{"tasks": [{"id": "a", "agent": "do it (sim:good)"}]}"#);
        p.run_to_end();
        assert_eq!(p.task("a")["status"], "done", "{session}: {}", p.task("a"));

        let dir = p.root.join(".warden");
        let dumps: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|f| f.file_name().unwrap().to_string_lossy().starts_with("env-"))
            .collect();
        assert!(!dumps.is_empty(), "{session}: the agent ran no session");
        for f in &dumps {
            let env = std::fs::read_to_string(f).unwrap();
            assert!(!env.contains("hunter2"), "{session}: {env}");
            assert!(!env.contains("WARDEN_STORE_URL="), "{session}: {env}");
            assert!(env.contains("WARDEN_CREDENTIALS="), "{session}: {env}");
            assert!(
                env.contains("MY_AGENT_KEY=listed-key\n"),
                "{session}: {env}"
            );
            assert!(!env.contains("unlisted-key"), "{session}: {env}");
            assert!(env.contains("\nHOME="), "{session}: {env}");
        }
        let creds = dir.join("credentials");
        let mode = std::fs::metadata(&creds).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{session}: credentials mode {mode:o}");
        let text = std::fs::read_to_string(&creds).unwrap();
        assert!(text.contains("PGPASSWORD=hunter2-secret"), "{text}");
        if session == "tmux" {
            let out = Command::new("tmux")
                .arg("-S")
                .arg(dir.join("tmux.sock"))
                .args(["show-environment", "-g"])
                .output()
                .unwrap();
            let global = String::from_utf8_lossy(&out.stdout);
            assert!(!global.contains("hunter2"), "tmux global env: {global}");
            assert!(
                !global.contains("unlisted-key"),
                "tmux global env: {global}"
            );
        }
        // Without secrets in the environment, the next run removes the file.
        p.env = vec![("WARDEN_STORE_URL", String::new())];
        std::fs::write(
            &cfg,
            std::fs::read_to_string(&cfg)
                .unwrap()
                .replace("sqlite:/nonexistent/warden.db", "sqlite:.warden/warden.db"),
        )
        .unwrap();
        p.until_idle();
        assert!(!creds.exists(), "{session}: a stale credentials file stays");
    }
}

/// A runner killed after finishing a task but before releasing its lease leaves that
/// lease behind, and a finished task is never claimed again: the next runner to stop
/// releases it (and a lapsed one of any owner), but never a live runner's.
#[test]
fn abandoned_leases_are_released() {
    use warden_store::Store;
    let p = Project::new("process");
    p.import(r#"{"tasks": [{"id": "a", "work": "true"}, {"id": "b", "work": "true"}, {"id": "c", "work": "true"}]}"#);
    p.run_to_end();
    let store =
        warden_store::sqlite::SqliteStore::open(&p.root.join(".warden/warden.db"), 5000).unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let host = host.trim();
    // A pid that is not running (pid_max is at most 2^22).
    let dead = format!("{host}:{}:1", 1 << 23);
    let live = format!("{host}:{}:1", std::process::id());
    let now = jiff::Timestamp::now();
    let hour = Duration::from_secs(3600);
    let id = |s: &str| warden_core::model::TaskId::new(s).unwrap();
    store
        .acquire_lease(&id("a"), &dead, now, hour)
        .unwrap()
        .unwrap();
    store
        .acquire_lease(
            &id("b"),
            "elsewhere:1:1",
            now - hour,
            Duration::from_secs(1),
        )
        .unwrap()
        .unwrap();
    store
        .acquire_lease(&id("c"), &live, now, hour)
        .unwrap()
        .unwrap();
    p.until_idle();
    let left: Vec<(String, String)> = store
        .leases()
        .unwrap()
        .into_iter()
        .map(|l| (l.task.to_string(), l.owner))
        .collect();
    assert_eq!(
        left,
        vec![("c".to_owned(), live)],
        "only the live runner's lease stays"
    );
}

/// `warden run --until-idle` (at most 120 s) ends with exit 0 and task `id` done.
fn run_until_done(p: &Project, id: &str) {
    let o = p.run_within(&["run", "--until-idle"], Duration::from_secs(120));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(p.task(id)["status"], "done");
}

/// A task whose runner on another machine claimed it and died is taken over when the
/// lease lapses, even when nothing else changes in the store: the run looked at tasks
/// held elsewhere only after a change, so it waited for ever.
#[test]
fn a_lease_held_elsewhere_is_taken_over_when_it_lapses() {
    use warden_store::Store;
    let p = Project::new("process");
    p.import(r#"{"tasks": [{"id": "w", "work": "true"}]}"#);
    let store =
        warden_store::sqlite::SqliteStore::open(&p.root.join(".warden/warden.db"), 5000).unwrap();
    let w = warden_core::model::TaskId::new("w").unwrap();
    store
        .acquire_lease(
            &w,
            "elsewhere:1:1",
            jiff::Timestamp::now(),
            Duration::from_secs(2),
        )
        .unwrap()
        .unwrap();
    run_until_done(&p, "w");
}

/// A check a killed `warden run` left running (kill -9 while it ran the prechecks) is
/// stopped by the next run before it works on the task: nobody would record its result,
/// and it ran on beside the task's next steps (60 s here).
#[test]
fn a_check_a_killed_runner_left_running_is_stopped_by_the_next() {
    let p = Project::new("process");
    let pre = r#"[ -e "$WARDEN_DIR/second" ] || sleep 60"#;
    p.ok(&["task", "create", "k", "--work", "true", "--prechecks", pre]);
    let mut first = p
        .cmd(&["run"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let note = p.root.join(".warden/tasks/k/check.pid");
    let noted_group = || {
        let noted = std::fs::read_to_string(&note).unwrap_or_default();
        noted
            .split_whitespace()
            .nth(1)
            .map(|g| g.parse::<u32>().unwrap())
    };
    wait_until(Duration::from_secs(60), "the prechecks to run", || {
        noted_group().is_some()
    });
    let group = noted_group().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(
        crate::supervisor::alive(group),
        "the check outlives its runner"
    );
    std::fs::write(p.root.join("second"), "").unwrap();
    run_until_done(&p, "k");
    assert!(
        !crate::supervisor::alive(group),
        "the orphaned check still runs"
    );
}

/// A runner killed with kill -9 whose parent has not collected it yet (a zombie) is dead:
/// its leases are taken over at once, not when they lapse. A zombie answered the signal
/// 0 that tells a live process, so its task waited out the lease (600 s here).
#[test]
fn a_killed_runner_not_yet_collected_is_taken_over_at_once() {
    use warden_store::Store;
    let p = Project::new("process");
    p.limits(&[("lease_ttl_s", "600")]);
    p.ok(&[
        "task",
        "create",
        "z",
        "--work",
        "true",
        "--prechecks",
        "sleep 2",
    ]);
    let store =
        warden_store::sqlite::SqliteStore::open(&p.root.join(".warden/warden.db"), 5000).unwrap();
    let mut first = p
        .cmd(&["run"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(60), "the first run to claim z", || {
        !store.leases().unwrap().is_empty()
    });
    // SIGKILL, and not waited for: a zombie until this test collects it.
    first.kill().unwrap();
    let stat = format!("/proc/{}/stat", first.id());
    wait_until(
        Duration::from_secs(20),
        "the killed run to be a zombie",
        || {
            std::fs::read_to_string(&stat).is_ok_and(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
        },
    );
    run_until_done(&p, "z");
    assert!(
        std::fs::read_to_string(&stat).is_ok(),
        "still a zombie: not collected yet"
    );
    let _ = first.wait();
}

/// warden.toml with the custom preset running the simulated agent.
pub fn sim_agent(config: &str) -> String {
    let command = format!(
        "preset = \"custom\"\ncommand = [\"{}\", \"agent-sim\", \"--prompt\", \"{{prompt_file}}\"]",
        bin().display()
    );
    let text = config
        .lines()
        .map(|l| {
            if l.starts_with("preset = ") {
                command.clone()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(text.contains("agent-sim"), "no preset line in {config}");
    text + "\n"
}

/// A repository just made with `git init` has no commit for a task's worktree to branch
/// from. `warden run` refuses before it starts anything, with the fix (it used to start
/// the task and retry its worktree hundreds of times a second, for ever); `doctor` says
/// the same. After the first commit the same run works.
#[test]
fn a_repository_without_a_commit_is_refused_before_the_run_starts() {
    let p = Project::empty("unborn");
    git(&p.root, &["init", "-q", "-b", "main"]);
    p.ok(&["init"]);
    p.ok(&["task", "create", "a", "--work", "true"]);
    let before = p.task("a");
    let o = p.run_within(&["run", "--until-idle"], Duration::from_secs(60));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: branch main of the repository")
            && first.contains("has no commit yet")
            && first.contains("git commit --allow-empty"),
        "{err}"
    );
    assert_eq!(p.task("a"), before, "nothing stored changed");
    assert!(!p.root.join(".warden/worktrees").exists());
    let git_check = p.doctor_check("git");
    assert_eq!(git_check["status"], "problem", "{git_check}");
    git(&p.root, &["commit", "-q", "--allow-empty", "-m", "first"]);
    assert_eq!(p.until_idle(), 0);
    assert_eq!(p.task("a")["status"], "done");
}

/// A run that ends with tasks blocked names what holds each back, its own dependency or
/// its group's, with that task's status: a cancelled dependency needs a person, and
/// "blocked: b" alone did not say which.
#[test]
fn a_blocked_run_says_what_each_task_waits_for() {
    let p = Project::new("process");
    p.ok(&["task", "create", "a", "--work", "true"]);
    p.ok(&["task", "cancel", "a", "--reason", "not wanted"]);
    p.ok(&["task", "create", "b", "--work", "true", "--depends-on", "a"]);
    p.ok(&["task", "create", "g", "--depends-on", "a"]);
    p.ok(&["task", "create", "d", "--parent", "g", "--work", "true"]);
    // `task show` (the views read near the task) and `task list` (the tree index) say
    // the same before any run.
    let by_a = serde_json::json!({"task": "a", "status": "cancelled"});
    assert_eq!(p.task("d")["gate"], "BLOCKED");
    assert_eq!(p.task("d")["blocked_by"], by_a);
    assert_eq!(p.task("b")["blocked_by"], by_a);
    assert!(
        p.task("g").get("blocked_by").is_none(),
        "a group has no gate of its own"
    );
    let list = p.json(&["task", "list"]);
    let listed: Vec<(&str, &serde_json::Value)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["id"].as_str().unwrap(), &t["blocked_by"]))
        .collect();
    assert_eq!(
        listed,
        [
            ("a", &serde_json::Value::Null),
            ("b", &by_a),
            ("g", &serde_json::Value::Null),
            ("d", &by_a)
        ]
    );
    assert!(
        p.ok(&["task", "show", "d"])
            .contains("gate       BLOCKED by a (cancelled)"),
        "{}",
        p.ok(&["task", "show", "d"])
    );
    let o = p.run_within(&["run", "--until-idle"], Duration::from_secs(60));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(7), "{out}");
    assert!(
        out.contains("; blocked: b by a (cancelled), d by a (cancelled)"),
        "{out}"
    );
    // With the edits that go on without it, where each dependency is named.
    assert!(
        out.contains(
            "; to go on without it: `warden task edit b --drop-depends-on a`, `warden task edit g --drop-depends-on a`"
        ),
        "{out}"
    );
    let o = p.run_within(&["--json", "run", "--until-idle"], Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(7));
    let idle = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["blocked"].is_array())
        .unwrap_or_else(|| panic!("no idle event: {}", String::from_utf8_lossy(&o.stdout)));
    assert_eq!(
        idle["blocked_by"],
        serde_json::json!([
            {"task": "b", "waits_for": "a", "status": "cancelled"},
            {"task": "d", "waits_for": "a", "status": "cancelled", "needed_by": "g"}
        ]),
        "{idle}"
    );
}

/// A task under a cancelled group is cancelled with it: the run never starts it. Since
/// 11-28 a group's cancel cancels its tasks and nothing new may go under it; a store
/// from before holds a group cancelled alone, its tasks pending, and the run started
/// them while `plan next` called them cancelled. This builds that store as the old
/// `task cancel` wrote it: one `status.changed` of the group's row.
#[test]
fn nothing_under_a_cancelled_group_runs() {
    use warden_store::Store;
    let p = Project::new("process");
    p.ok(&["task", "create", "phase"]);
    p.ok(&[
        "task",
        "create",
        "late",
        "--parent",
        "phase",
        "--work",
        "echo late > late.txt",
    ]);
    p.ok(&["task", "create", "other", "--work", "true"]);
    let store =
        warden_store::sqlite::SqliteStore::open(&p.root.join(".warden/warden.db"), 5000).unwrap();
    let phase = store
        .get(&warden_core::model::TaskId::new("phase").unwrap())
        .unwrap()
        .unwrap();
    let ctx = warden_core::ops::Ctx::fixed(warden_core::event::Actor::Person);
    let old_cancel = warden_core::ops::record(
        &phase,
        vec![warden_core::event::EventKind::StatusChanged {
            from: warden_core::model::Status::Pending,
            to: warden_core::model::Status::Cancelled,
            reason: None,
            evidence: None,
            prior_review: None,
        }],
        &ctx,
    )
    .unwrap();
    store
        .commit(warden_store::Batch {
            changes: vec![old_cancel],
            ..Default::default()
        })
        .unwrap();
    drop(store);
    assert_eq!(p.task("late")["status"], "pending");
    // An import may not add to it now.
    let plan = p.root.join("more.json");
    std::fs::write(
        &plan,
        r#"{"tasks": [{"id": "more", "parent": "phase", "work": "true"}]}"#,
    )
    .unwrap();
    let o = p
        .cmd(&["plan", "import", plan.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("task more cannot go under phase: phase is cancelled"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = p.run_within(&["run", "--until-idle"], Duration::from_secs(60));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("1 of 1 task(s) done"), "{out}");
    assert!(!p.root.join("late.txt").exists(), "{out}");
    assert_eq!(p.json(&["plan", "next"])["state"], "complete");
}

/// A repository on a detached HEAD (a CI checkout of a pull request) runs without git,
/// in the project directory, as before; the run and `doctor` now say so and why, where
/// the run said "no git repository" and doctor promised a worktree per task.
#[test]
fn a_detached_head_runs_without_git_and_says_so() {
    let p = Project::new("process");
    git(&p.root, &["checkout", "-q", "--detach"]);
    p.ok(&["task", "create", "d", "--work", "echo d > d.txt"]);
    let o = p.run_within(&["run", "--until-idle"], Duration::from_secs(60));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.lines().next().is_some_and(
            |l| l.contains("is on a detached HEAD") && l.contains("check out a branch")
        ),
        "{out}"
    );
    assert!(
        p.root.join("d.txt").exists(),
        "the work ran in the project directory"
    );
    let git_check = p.doctor_check("git");
    assert_eq!(git_check["status"], "warning", "{git_check}");
    assert!(
        git_check["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("detached HEAD"),
        "{git_check}"
    );
}

/// A step that fails on Warden's side every time (git cannot make the task's worktree:
/// a file is in its place) is tried again after a wait that doubles, not at once: the run
/// used to retry it hundreds of times a second, for ever. `--until-idle` gives up after
/// three failures in a row and names the task and the error (exit 7); the other task
/// runs to done.
#[test]
fn a_step_that_keeps_failing_waits_between_tries_and_ends_the_run_named() {
    let p = Project::new("process");
    p.ok(&["task", "create", "a", "--work", "true"]);
    p.ok(&["task", "create", "b", "--work", "true"]);
    std::fs::create_dir_all(p.root.join(".warden/worktrees")).unwrap();
    std::fs::write(p.root.join(".warden/worktrees/a"), "in the way\n").unwrap();
    let o = p.run_within(&["--json", "run", "--until-idle"], Duration::from_secs(120));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(7), "{out}");
    let events: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let waits: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "step_failed" && e["task"] == "a")
        .map(|e| &e["retry_in_s"])
        .collect();
    assert_eq!(waits, [1, 2, 4], "{out}");
    let idle = events.last().unwrap();
    assert_eq!(idle["event"], "idle", "{out}");
    assert_eq!(idle["code"], 7);
    assert_eq!(idle["failing"][0]["task"], "a", "{idle}");
    assert!(
        idle["failing"][0]["error"].as_str().is_some_and(|e| e
            .contains("cannot prepare the worktree")
            && e.contains("already exists")),
        "{idle}"
    );
    assert_eq!(p.task("b")["status"], "done");
    // After the run: `warden status` still says what failed (it said nothing once the
    // run's own output was gone: "Needs you: nothing", every view healthy).
    let status = p.json(&["status"]);
    assert_eq!(status["supervisor_alive"], false);
    assert_eq!(status["last_run"]["failing"][0]["task"], "a", "{status}");
    let text = p.ok(&["status"]);
    assert!(
        text.contains("with steps failing (fix the cause, then run `warden run` again)")
            && text.contains("✗ a: 3 failed step(s) in a row: a: cannot prepare the worktree"),
        "{text}"
    );
    assert!(
        !p.root
            .join(".warden/runners")
            .read_dir()
            .unwrap()
            .any(|e| { e.unwrap().path().extension().is_some_and(|x| x == "json") }),
        "the ended run withdrew its announcement"
    );
    // A run that ends with nothing failing clears it.
    std::fs::remove_file(p.root.join(".warden/worktrees/a")).unwrap();
    assert_eq!(p.until_idle(), 0);
    assert!(p.json(&["status"]).get("last_run").is_none());
}

/// A process session whose host could not report its end (here `warden.toml` broke
/// while it ran) is seen by the run anyway: the end leaves no commit to wake it, and the
/// run waited for the phase timeout (an hour) with nothing said. Now it looks at open
/// sessions every few seconds, reports the end itself (failing, named, while the file is
/// broken), and once the file is fixed the recorded exit code is reported.
#[test]
fn a_session_end_its_host_could_not_report_is_seen_by_the_run() {
    session_end_unreported_is_seen("process");
}

/// The same in tmux mode, where the pane's hook (and the sweep after it) could not
/// report: the run tried again every 500 ms, silently, until the phase timeout. Now a
/// dead pane with its exit status is a gone session, reported by the pass with that
/// status and its failures named.
#[test]
fn a_tmux_session_end_its_hook_could_not_report_is_seen_by_the_run() {
    session_end_unreported_is_seen("tmux");
}

fn session_end_unreported_is_seen(mode: &str) {
    let p = Project::new(mode);
    let go = p.root.join("go");
    p.ok(&[
        "task",
        "create",
        "s",
        "--work",
        &format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display()),
    ]);
    let child = p
        .cmd(&["--json", "run", "--until-idle"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    p.json_until(&["task", "show", "s"], "s's session", |t| {
        !t["session"].is_null()
    });
    let config = p.root.join(".warden/warden.toml");
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{good}\ngarbage = = =\n")).unwrap();
    std::fs::write(&go, "").unwrap();
    let o = crate::hostile::finish(child, Duration::from_secs(120), "warden run --until-idle");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(7), "{out}");
    let idle: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(idle["failing"][0]["task"], "s", "{idle}");
    assert!(
        idle["failing"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("warden.toml") && e.contains("TOML parse error")),
        "{idle}"
    );
    std::fs::write(&config, good).unwrap();
    run_until_done(&p, "s");
    let history = p.ok(&["--json", "history", "s"]);
    assert!(
        history.lines().any(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            e["type"] == "session.exited" && e["data"]["exit_code"] == 0
        }),
        "{history}"
    );
}

/// A tmux session whose end no hook can report (the `warden` binary the run started
/// from was removed mid-run: a `cargo clean`, an upgrade) is reported by the run itself
/// with the pane's own exit status, and the work that succeeded is done. The dead pane
/// had counted as alive until the phase timeout; reported without its status, the end
/// would read 128 (unknown) and fail the work.
#[test]
fn a_tmux_session_is_reported_with_its_own_status_when_no_hook_can_run() {
    let p = Project::new("tmux");
    let go = work_until_go(&p, &[]);
    let copy = std::env::temp_dir().join(format!(
        "warden-copy-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::copy(bin(), &copy).unwrap();
    let child = p
        .cmd_of(&copy, &["run", "--until-idle"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    p.json_until(&["task", "show", "s"], "s's session", |t| {
        !t["session"].is_null()
    });
    std::fs::remove_file(&copy).unwrap();
    std::fs::write(&go, "").unwrap();
    let (t, out) = done_with_its_own_code(&p, child);
    assert_eq!(t["attempts"], 0, "{t}");
    assert!(out.contains("session s-worker-1 ended (exit 0)"), "{out}");
}

/// Creates task `s` whose work waits for the file `go` in the project, then writes
/// `hi.txt`; returns the path of `go`.
fn work_until_go(p: &Project, extra: &[&str]) -> PathBuf {
    let go = p.root.join("go");
    let work = format!(
        "echo s-runs; while [ ! -e '{}' ]; do sleep 0.05; done; echo hi > hi.txt",
        go.display()
    );
    let mut args = vec!["task", "create", "s", "--work", &work];
    args.extend_from_slice(extra);
    p.ok(&args);
    go
}

/// Follows task `id`'s log (`warden task log --follow`, as a person would) until its pane
/// prints `line`, which the pane's pipe carries only once the pane runs (at most 60 s).
/// Waits for the session to be recorded first: a follow of a task with none ends at once.
fn pane_printed(p: &Project, id: &str, line: &str) {
    p.json_until(&["task", "show", id], "a session recorded", |t| {
        !t["session"].is_null()
    });
    let mut follow = p
        .cmd(&["task", "log", id, "--follow"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::io::BufReader::new(follow.stdout.take().unwrap());
    let (runs, ran) = std::sync::mpsc::channel();
    let line = line.to_owned();
    std::thread::spawn(move || {
        use std::io::BufRead;
        if lines.lines().map_while(Result::ok).any(|l| l == line) {
            let _ = runs.send(());
        }
    });
    let printed = ran.recv_timeout(Duration::from_secs(60));
    let _ = follow.kill();
    let _ = follow.wait();
    printed.unwrap_or_else(|_| panic!("{id}'s pane never ran"));
}

/// Waits for `run --until-idle` to end, and checks that it ended well, that task `s` is
/// done, and that its one session ended with its own code, 0. Returns the task.
fn done_with_its_own_code(p: &Project, run: std::process::Child) -> (Value, String) {
    let o = crate::hostile::finish(run, Duration::from_secs(120), "warden run --until-idle");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let t = p.task("s");
    assert_eq!(t["status"], "done", "{out}");
    // An end seen with its own status is said as an end, not as one nobody saw.
    assert!(!out.contains("unseen"), "{out}");
    let history = p.ok(&["--json", "history", "s"]);
    let codes: Vec<Value> = history
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "session.exited")
        .map(|e| e["data"]["exit_code"].clone())
        .collect();
    assert_eq!(codes, [0], "{history}");
    (t, out.into_owned())
}

/// A tmux listing that fails for a while (tmux did not answer) does not end a live
/// session: the run took every pane missing from a failed listing for a gone session and
/// recorded its end with the unknown code 128, failing work that was still running. A
/// `tmux` in front of the real one fails every `list-panes` while a flag file exists;
/// once enough listings have failed for the run to have passed over the task twice, the
/// flag goes, the work finishes, and it is done with its own exit code.
#[test]
fn a_failed_tmux_listing_does_not_end_a_live_session() {
    // Each 500 ms sweep lists twice and the pass after it once; nine failed listings
    // are three sweeps and their passes, each followed by the report it asked for.
    through_a_faulty_tmux("echo 'tmux: lost the server for a moment' >&2; exit 1", 9);
}

/// Runs task `s` (its work waits for a go) with `warden run --until-idle` through a
/// `tmux` whose `list-panes` runs `fault` (shell; `$n` names a file with a line per
/// listing so far) from the session's start until `listings` listings have gone that
/// way; then tmux is itself again, the work goes on, and it must end done with its own
/// code. (A run that took the session for gone ends the task, and stops the wait.)
fn through_a_faulty_tmux(fault: &str, listings: usize) {
    let p = Project::new("tmux");
    let go = work_until_go(&p, &["--max-attempts", "1"]);
    let (flag, count) = (p.root.join("tmux-faulty"), p.root.join("tmux-listed"));
    let path = fake_program(
        &p,
        "tmux",
        "list-panes",
        &format!(
            "if [ -e '{flag}' ]; then n='{count}'; echo x >> \"$n\"; {fault}; fi",
            flag = flag.display(),
            count = count.display(),
        ),
    );
    let mut run = p.cmd(&["run", "--until-idle"]);
    run.env("PATH", &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = run.spawn().unwrap();
    p.json_until(&["task", "show", "s"], "s's session", |t| {
        !t["session"].is_null()
    });
    // The session is recorded before its pane starts, and starting it lists the panes:
    // the fault goes on once the pane runs, so that it meets a live session only.
    pane_printed(&p, "s", "s-runs");
    std::fs::write(&flag, "").unwrap();
    crate::pg_runners::wait_until(Duration::from_secs(60), "the faulty listings", || {
        std::fs::read_to_string(&count).map_or(0, |t| t.lines().count()) >= listings
            || child.try_wait().unwrap().is_some()
    });
    std::fs::remove_file(&flag).unwrap();
    std::fs::write(&go, "").unwrap();
    done_with_its_own_code(&p, child);
}

/// A `program` in front of the real one, for `warden run`'s `PATH`: when its arguments
/// hold the words `when`, it runs the shell `then` (which may exit; `$real` names the
/// real program); else, or after, the real one runs. Returns that `PATH`.
fn fake_program(p: &Project, program: &str, when: &str, then: &str) -> String {
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", &format!("command -v {program}")])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_owned();
    let bin_dir = p.root.join(format!("fake-{program}"));
    std::fs::create_dir_all(&bin_dir).unwrap();
    let fake = bin_dir.join(program);
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nreal='{real}'\ncase \" $* \" in *\" {when} \"*) {then};; esac\nexec \"$real\" \"$@\"\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// tmux lists a pane that died as dead for a moment before it has collected its exit
/// status; the run counts such a pane as running (its hook or the sweep reports it with
/// its code). A pass that saw no pane (its listing failed) asked for the session's end to
/// be reported, and the report's own look found the pane dead without a status and
/// recorded the unknown code 128: seen once in a clean-clone CI run, when the work ended
/// just as a failed listing was followed by a good one. Here a `tmux` in front of the real
/// one fails every other `list-panes` and shows every pane dead without a status in the
/// others, while the work runs; then it lists truly again, and the work ends with its own
/// code.
#[test]
fn a_pane_listed_dead_before_its_status_is_not_reported_with_an_unknown_code() {
    through_a_faulty_tmux(
        "if [ $(($(wc -l < \"$n\") % 2)) -eq 1 ]; then \
         echo 'tmux: lost the server for a moment' >&2; exit 1; fi; \
         \"$real\" \"$@\" | awk -F '\\t' -v OFS='\\t' '{ $2 = 1; $3 = \"\"; $4 = \"\"; print }'; exit 0",
        12,
    );
}

/// While `warden run` goes on trying a task whose steps keep failing, `warden status`
/// names it and its error under the supervisor (it was "Needs you: nothing" and
/// "Running: nothing" before). Once the person removes the cause the next try works,
/// and a failing task the person cancels is no longer listed.
#[test]
fn status_shows_a_task_whose_steps_keep_failing_until_it_is_fixed_or_cancelled() {
    let p = Project::new("process");
    for id in ["a", "c"] {
        p.ok(&["task", "create", id, "--work", "true"]);
    }
    std::fs::create_dir_all(p.root.join(".warden/worktrees")).unwrap();
    for id in ["a", "c"] {
        std::fs::write(p.root.join(".warden/worktrees").join(id), "in the way\n").unwrap();
    }
    let run = p.background(p.cmd(&["run"]));
    let status_until =
        |what: &str, want: &dyn Fn(&Value) -> bool| p.json_until(&["status"], what, want);
    let failing = |v: &Value| -> Vec<String> {
        v["supervisors"][0]["failing"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|f| f["task"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    status_until("a and c failing", &|v| failing(v) == ["a", "c"]);
    let text = String::from_utf8_lossy(&p.run(&["status"]).stdout).into_owned();
    assert!(
        text.lines().any(|l| l.starts_with("  ✗ a: ")
            && l.contains("in a row")
            && l.contains("cannot prepare the worktree")),
        "{text}"
    );
    // The person removes what was in a's way, and cancels c.
    std::fs::remove_file(p.root.join(".warden/worktrees/a")).unwrap();
    p.ok(&["task", "cancel", "c", "--reason", "not needed"]);
    status_until("a done and nothing failing", &|v| {
        failing(v).is_empty() && v["progress"]["complete"] == 1
    });
    assert_eq!(p.task("a")["status"], "done");
    assert_eq!(p.task("c")["status"], "cancelled");
    drop(run);
}

/// `plan apply` cannot remove a task whose session runs: the session went on working on
/// a task nobody could see or stop, and its runner renewed the lease of a task that was
/// gone for as long as it ran. A task the runner holds without a session (here while its
/// prechecks run) may be removed, and its lease goes with it.
#[test]
fn plan_apply_cannot_remove_a_task_whose_session_runs() {
    let p = Project::new("process");
    let wait_for = |file: &str| {
        let path = p.root.join(file);
        format!("while [ ! -e '{}' ]; do sleep 0.05; done", path.display())
    };
    p.ok(&["task", "create", "top", "--work", "true"]);
    p.ok(&[
        "task",
        "create",
        "s",
        "--parent",
        "top",
        "--work",
        &wait_for("go-s"),
    ]);
    p.ok(&[
        "task",
        "create",
        "f",
        "--parent",
        "top",
        "--work",
        "true",
        "--prechecks",
        &wait_for("go-f"),
    ]);
    p.ok(&[
        "task", "create", "k", "--parent", "top", "--work", "true", "--order", "9",
    ]);
    // Two at a time: s and f run, k (last in tree order) waits.
    let run = p.background(p.cmd(&["run", "--max-parallel", "2"]));
    let held = |v: &Value| -> Vec<String> {
        v["supervisors"][0]["tasks"]
            .as_array()
            .map(|a| a.iter().map(|t| t.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    };
    p.json_until(&["status"], "s and f held", |v| held(v) == ["f", "s"]);
    p.json_until(&["task", "show", "s"], "s's session", |t| {
        !t["session"].is_null()
    });
    let tree: Value = p.json(&["plan", "export"]);
    let without = |gone: &str| {
        let mut t = tree.clone();
        t["tasks"]
            .as_array_mut()
            .unwrap()
            .retain(|n| n["id"] != gone);
        std::fs::write(p.root.join("tree.json"), t.to_string()).unwrap();
    };
    let apply = [
        "plan",
        "apply",
        "tree.json",
        "--selected",
        "k",
        "--status",
        "retry",
    ];
    without("s");
    let o = p.run(&apply);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim_end(),
        "refused: task s has a live session (s-worker-1) and cannot be removed; cancel it first (warden task cancel s), or put it back in the plan"
    );
    assert_eq!(p.json(&["plan", "export"]), tree, "nothing changed");
    // f runs no session (its prechecks run): it may go, and once its step is over the
    // runner lets go of its lease.
    without("f");
    p.ok(&apply);
    std::fs::write(p.root.join("go-f"), "").unwrap();
    p.json_until(&["status"], "f no longer held", |v| held(v) == ["s"]);
    std::fs::write(p.root.join("go-s"), "").unwrap();
    p.json_until(&["task", "show", "s"], "s done", |t| t["status"] == "done");
    drop(run);
}

/// A task merges back into the branch it started from: the run announced "base branch
/// main", and a person who checks out another branch while the task works keeps that
/// branch and their checkout as they were (the task's work went into whatever was
/// checked out at the end, and the checkout was fast-forwarded to it).
#[test]
fn a_task_merges_into_the_branch_it_started_from_when_the_person_switches() {
    let p = Project::new("process");
    p.ok(&[
        "task",
        "create",
        "b",
        "--work",
        r#"while [ ! -e "$WARDEN_DIR/go" ]; do sleep 0.05; done; echo b > b.txt"#,
    ]);
    let child = p
        .cmd(&["run", "--until-idle"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    p.json_until(&["task", "show", "b"], "b started", |t| {
        !t["session"].is_null()
    });
    git(&p.root, &["checkout", "-q", "-b", "other"]);
    std::fs::write(p.root.join("go"), "").unwrap();
    let o = crate::hostile::finish(child, Duration::from_secs(60), "warden run --until-idle");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(p.task("b")["status"], "done");
    assert_eq!(git(&p.root, &["show", "main:b.txt"]), "b\n");
    assert_eq!(git(&p.root, &["branch", "--show-current"]).trim(), "other");
    assert!(
        !git(&p.root, &["log", "--format=%s", "other"]).contains("warden: b"),
        "{}",
        git(&p.root, &["log", "--oneline", "--all", "--graph"])
    );
    assert!(!p.root.join("b.txt").exists());
}

/// Work that makes a branch of its own in its worktree (agents do) has what it did
/// taken back onto the task's branch and merged: the run used to fail every step after
/// it ("worktree … is on sneaky, not warden/s") and never went idle.
#[test]
fn work_that_switches_to_a_branch_of_its_own_is_still_merged() {
    let p = Project::new("process");
    p.ok(&[
        "task",
        "create",
        "s",
        "--work",
        "git switch -q -c sneaky && echo x > x.txt",
    ]);
    assert_eq!(p.until_idle(), 0);
    assert_eq!(p.task("s")["status"], "done");
    assert_eq!(git(&p.root, &["show", "main:x.txt"]), "x\n");
}

/// Work that deletes its worktree's `.git` file had its commit and merge skipped as if
/// the task had no worktree: the task went to done without its work. The file is
/// restored and the work merged.
#[test]
fn work_that_deletes_its_worktrees_git_file_is_still_merged() {
    let p = Project::new("process");
    p.ok(&[
        "task",
        "create",
        "g",
        "--work",
        "rm -f .git && echo y > y.txt",
    ]);
    assert_eq!(p.until_idle(), 0);
    let t = p.task("g");
    assert_eq!(t["status"], "done");
    assert_eq!(t["phases"]["commit"], "success", "{t}");
    assert_eq!(git(&p.root, &["show", "main:y.txt"]), "y\n");
    assert!(!p.root.join(".warden/worktrees/g").exists());
}

/// The same in the review workflow: a worker that deletes the `.git` file before `task
/// complete`, and a reviewer that deletes it again after its verdict. The approval's
/// merge-ri read the missing file as "the task never had a branch" and the task went to
/// done without its work. The file is restored each time, and the work reviewed and
/// merged.
#[test]
fn an_agent_that_deletes_its_worktrees_git_file_has_its_work_committed() {
    let p = Project::new("process");
    let script = p.root.join("agent.sh");
    std::fs::write(
        &script,
        format!(
            r#"W="{}"
if [ "$WARDEN_ROLE" = worker ]; then
  rm -f .git && echo z > z.txt
  printf '\n## Handoff\nWrote z.txt.\n' >> "$WARDEN_TASK_FILE"
  "$W" task complete
else
  git log --format=%s -1 > "$WARDEN_DIR/reviewed.txt"
  printf '\n## Review\nPASS\n' >> "$WARDEN_TASK_FILE"
  rm -f .git
fi
"#,
            bin().display()
        ),
    )
    .unwrap();
    let cfg = p.root.join(".warden/warden.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text
        .lines()
        .map(|l| {
            if l.starts_with("command = ") {
                format!("command = [\"sh\", \"{}\"]", script.display())
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&cfg, text + "\n").unwrap();
    p.ok(&["task", "create", "r", "--agent", "write z.txt"]);
    assert_eq!(p.until_idle(), 6);
    assert_eq!(
        p.task("r")["phases"]["commit"],
        "success",
        "{}",
        p.task("r")
    );
    let reviewed = std::fs::read_to_string(p.root.join("reviewed.txt")).unwrap();
    assert!(
        reviewed.starts_with("warden: r"),
        "the reviewer saw {reviewed}"
    );
    p.ok(&["task", "approve", "r"]);
    assert_eq!(p.task("r")["status"], "done");
    assert_eq!(git(&p.root, &["show", "main:z.txt"]), "z\n");
}

/// An approve whose merge landed in main while the store refused its record (another
/// process held SQLite's write lock past `busy_timeout_ms`): it fails with exit 4 and
/// says the work is merged; a reject or cancel then is refused (it would leave main
/// holding work the task says was sent back), and the approve run again records it.
#[test]
fn an_approve_whose_record_did_not_land_is_not_contradicted() {
    let p = Project::new("process");
    script_agent(&p, "", "", &[("busy_timeout_ms", "busy_timeout_ms = 200")]);
    p.ok(&["task", "create", "r", "--agent", "write z.txt"]);
    assert_eq!(p.until_idle(), 6);
    assert_eq!(p.task("r")["status"], "reviewing");
    // Another process holds the store's write lock until the test lets it go.
    let mut holder = Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
             c.execute('BEGIN IMMEDIATE')\nprint('locked', flush=True)\nsys.stdin.readline()\n\
             c.execute('ROLLBACK')\n",
        )
        .arg(p.root.join(".warden/warden.db"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    let o = p.run(&["task", "approve", "r"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains("r's work is already merged into main")
            && err.contains("run `warden task approve r` again"),
        "{err}"
    );
    assert_eq!(git(&p.root, &["show", "main:z.txt"]), "z\n");
    std::io::Write::write_all(holder.stdin.as_mut().unwrap(), b"go\n").unwrap();
    holder.wait().unwrap();
    assert_eq!(p.task("r")["status"], "reviewing");
    // Sending it back, or cancelling it, would contradict main.
    for args in [
        &["task", "reject", "r", "--reason", "redo it"][..],
        &["task", "cancel", "r"][..],
    ] {
        let o = p.run(args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("task r's work is already in main")
                && err.contains("run `warden task approve r` to record it"),
            "{err}"
        );
    }
    assert_eq!(p.task("r")["status"], "reviewing");
    p.ok(&["task", "approve", "r"]);
    assert_eq!(p.task("r")["status"], "done");
    p.ok(&["check"]);
}

/// An approve killed (-9) right after its merge moved main, before its record: the
/// merge's note was written after the move, so nothing remembered it and a reject was
/// taken while main held the work. The note comes before the move now. A git
/// `reference-transaction` hook does the kill at the moment main's ref is committed.
#[test]
fn an_approve_killed_as_main_moves_is_not_contradicted() {
    let p = Project::new("process");
    script_agent(&p, "", "", &[]);
    p.ok(&["task", "create", "r", "--agent", "write z.txt"]);
    assert_eq!(p.until_idle(), 6);
    assert_eq!(p.task("r")["status"], "reviewing");
    let pid_file = p.root.join("approve.pid");
    let hook = p.root.join(".git/hooks/reference-transaction");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh
[ \"$1\" = committed ] || exit 0
grep -q ' refs/heads/main$' || exit 0
             while [ ! -s '{pid}' ]; do sleep 0.01; done
kill -9 $(cat '{pid}')
exit 0
",
            pid = pid_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut approve = p.cmd(&["task", "approve", "r"]).spawn().unwrap();
    std::fs::write(&pid_file, approve.id().to_string()).unwrap();
    let status = approve.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{status:?}"
    );
    std::fs::remove_file(&hook).unwrap();
    assert_eq!(git(&p.root, &["show", "main:z.txt"]), "z\n");
    assert_eq!(p.task("r")["status"], "reviewing");
    let o = p.run(&["task", "reject", "r", "--reason", "redo it"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("task r's work is already in main"), "{err}");
    assert_eq!(p.task("r")["status"], "reviewing");
    p.ok(&["task", "approve", "r"]);
    assert_eq!(p.task("r")["status"], "done");
    p.ok(&["check"]);
}

/// Makes the project's agent a script: the worker writes z.txt, hands off and then
/// runs `worker_then`; the reviewer runs `reviewer_also` (in the task's worktree) and
/// passes. Each `(prefix, line)` replaces the config line that starts with `prefix`.
fn script_agent(p: &Project, worker_then: &str, reviewer_also: &str, config: &[(&str, &str)]) {
    let script = p.root.join("agent.sh");
    std::fs::write(
        &script,
        format!(
            r#"W="{}"
if [ "$WARDEN_ROLE" = worker ]; then
  echo z > z.txt
  printf '\n## Handoff\nWrote z.txt.\n' >> "$WARDEN_TASK_FILE"
  "$W" task complete
  {worker_then}
else
  {reviewer_also}
  printf '\n## Review\nPASS\n' >> "$WARDEN_TASK_FILE"
fi
"#,
            bin().display()
        ),
    )
    .unwrap();
    let cfg = p.root.join(".warden/warden.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text
        .lines()
        .map(|l| {
            if l.starts_with("command = ") {
                format!("command = [\"sh\", \"{}\"]", script.display())
            } else if let Some((_, line)) = config.iter().find(|(k, _)| l.starts_with(k)) {
                (*line).to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&cfg, text + "\n").unwrap();
}

/// A reviewer that edits the work it reviews leaves changes nobody reviewed: approve
/// says so and what to do, and both ways on work. Before, it said "commit them or retry
/// with --clear-worktree", and that retry is refused for a task in review. A conflict
/// with main names its way on too: merged in the task's worktree, approve lands.
#[test]
fn an_approve_names_a_way_on_from_what_blocks_its_merge() {
    let p = Project::new("process");
    script_agent(&p, "", "echo reviewer >> z.txt", &[]);
    p.ok(&["task", "create", "r", "--agent", "write z.txt"]);
    assert_eq!(p.until_idle(), 6);
    assert_eq!(p.task("r")["status"], "reviewing");
    let wt = p.root.join(".warden/worktrees/r");
    let o = p.run(&["task", "approve", "r"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("changes nobody reviewed")
            && err.contains("z.txt")
            && err.contains(&format!("git -C {} stash", wt.display()))
            && err.contains("warden task reject r --reason"),
        "{err}"
    );
    assert_eq!(p.task("r")["status"], "reviewing");
    git(&wt, &["stash", "-q"]);
    // Main moves on with its own z.txt: merging it into the task's branch conflicts.
    std::fs::write(p.root.join("z.txt"), "main's\n").unwrap();
    git(&p.root, &["add", "z.txt"]);
    git(&p.root, &["commit", "-qm", "main's z"]);
    let o = p.run(&["task", "approve", "r"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.contains("conflicts in: z.txt")
            && err.contains(&format!("cd {} && git merge main", wt.display())),
        "{err}"
    );
    assert_eq!(p.task("r")["status"], "reviewing");
    let merge = Command::new("git")
        .current_dir(&wt)
        .args(["merge", "-q", "main"])
        .output()
        .unwrap();
    assert!(!merge.status.success(), "the merge conflicts");
    std::fs::write(wt.join("z.txt"), "z\nmain's\n").unwrap();
    git(&wt, &["commit", "-qam", "merge main"]);
    p.ok(&["task", "approve", "r"]);
    assert_eq!(p.task("r")["status"], "done");
    assert_eq!(git(&p.root, &["show", "main:z.txt"]), "z\nmain's\n");
}

/// The person's uncommitted edit of a file the task changed keeps merge-ri from
/// fast-forwarding their checkout: the failure says so, where, and what to do, instead
/// of calling it a conflict. Once the edit is stashed, a retry merges.
#[test]
fn merge_ri_says_when_the_persons_own_changes_are_in_the_way() {
    let p = Project::new("process");
    // Project::new leaves the person's own edit of README.md uncommitted.
    p.ok(&["task", "create", "m", "--work", "echo task >> README.md"]);
    assert_eq!(p.until_idle(), 7);
    let t = p.task("m");
    assert_eq!(t["status"], "stuck", "{t}");
    let failure = t["last_failure"].as_str().unwrap_or_default();
    assert!(
        failure.contains("would overwrite uncommitted changes in")
            && failure.contains(p.root.to_str().unwrap())
            && failure.contains("README.md")
            && failure.contains("commit or stash them"),
        "{failure}"
    );
    git(&p.root, &["stash", "-q"]);
    p.ok(&["task", "retry", "m"]);
    assert_eq!(p.until_idle(), 0);
    assert!(git(&p.root, &["show", "main:README.md"]).contains("task"));
}

/// A project in a subdirectory of its repository (`warden init` in a monorepo's
/// package): work runs in the package's place in the task's worktree, as it would in the
/// package, and nothing of `.warden/` is committed. Work ran at the worktree's top, and
/// the TASK.md link there, outside the `/pkg/.warden/` that `init` excludes, was
/// committed and merged into main.
#[test]
fn a_project_in_a_subdirectory_of_its_repository_works_there() {
    let mut p = Project::empty("mono");
    git(&p.root, &["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(p.root.join("pkg")).unwrap();
    std::fs::write(p.root.join("pkg/lib.txt"), "lib\n").unwrap();
    git(&p.root, &["add", "."]);
    git(&p.root, &["commit", "-q", "-m", "initial"]);
    let pkg = p.root.join("pkg");
    p.env.push(("WARDEN_DIR", pkg.display().to_string()));
    p.ok(&["init"]);
    p.ok(&[
        "task",
        "create",
        "a",
        "--work",
        r#"pwd > "$WARDEN_DIR/pwd.txt"; cat lib.txt > copy.txt"#,
        "--postchecks",
        "test -f copy.txt",
    ]);
    assert_eq!(p.until_idle(), 0);
    let pwd = std::fs::read_to_string(pkg.join("pwd.txt")).unwrap();
    assert_eq!(
        Path::new(pwd.trim()),
        pkg.join(".warden/worktrees/a/pkg")
            .canonicalize()
            .unwrap_or(pkg.join(".warden/worktrees/a/pkg")),
    );
    assert_eq!(git(&p.root, &["show", "main:pkg/copy.txt"]), "lib\n");
    let tracked = git(&p.root, &["ls-tree", "-r", "--name-only", "main"]);
    assert!(!tracked.contains(".warden"), "{tracked}");
}

/// A tmux session's output limit outlives the run that started it: the thread that
/// watched its log died with that run (kill -9), and the next run, which adopts the
/// session, ends it when it floods. Before, an adopted session could write until its
/// phase timeout (an hour by default).
#[test]
fn an_adopted_tmux_session_is_held_to_its_output_limit() {
    let p = Project::new("tmux");
    let cfg = p.root.join(".warden/warden.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("session_log_mib = 1024"), "{text}");
    std::fs::write(
        &cfg,
        text.replace("session_log_mib = 1024", "session_log_mib = 1"),
    )
    .unwrap();
    p.ok(&[
        "task",
        "create",
        "f",
        "--max-attempts",
        "1",
        "--work",
        r#"echo f-runs; while [ ! -e "$WARDEN_DIR/go" ]; do sleep 0.05; done; yes"#,
    ]);
    let first = p.background(p.cmd(&["run"]));
    // The session is recorded before its pane starts: a supervisor killed in between
    // leaves a session that never ran (ended as never started, and started again by the
    // next run). Follow the task's log until the pane's first line shows, which its pipe
    // only carries once the pane runs.
    p.json_until(&["task", "show", "f"], "f started", |t| {
        !t["session"].is_null()
    });
    pane_printed(&p, "f", "f-runs");
    drop(first); // kill -9
    std::fs::write(p.root.join("go"), "").unwrap();
    let o = p.run_within(&["run", "--until-idle"], Duration::from_secs(120));
    assert_eq!(
        o.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let t = p.task("f");
    assert_eq!(t["status"], "stuck", "{t}");
    let failure = t["last_failure"].as_str().unwrap_or_default();
    assert!(
        failure.contains("killed: its output passed limits.session_log_mib, 1 MiB"),
        "{failure}"
    );
}

/// A get-shit-done plan finished outside Warden goes to done through merge-ri when its
/// task has a worktree, even one whose `.git` file its agent deleted: `plan sync` took
/// such a task for one that never had a branch, and its branch was never merged.
#[test]
fn plan_sync_merges_a_finished_plan_whose_worktree_lost_its_git_file() {
    let p = Project::new("process");
    let plan = p.root.join(".planning/phases/01-a");
    std::fs::create_dir_all(&plan).unwrap();
    std::fs::write(plan.join("01-01-PLAN.md"), crate::gsd_sync::PLAN).unwrap();
    p.ok(&["plan", "sync"]);
    let wt = p.root.join(".warden/worktrees/01-01");
    git(
        &p.root,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "warden/01-01",
            wt.to_str().unwrap(),
            "main",
        ],
    );
    std::fs::write(wt.join("built.txt"), "built\n").unwrap();
    git(&wt, &["add", "built.txt"]);
    git(&wt, &["commit", "-q", "-m", "built"]);
    std::fs::remove_file(wt.join(".git")).unwrap();
    std::fs::write(plan.join("01-01-SUMMARY.md"), "# Summary\n\nBuilt it.\n").unwrap();
    p.ok(&["plan", "sync"]);
    let t = p.task("01-01");
    assert_eq!(t["status"], "done", "{t}");
    assert_eq!(t["phases"]["merge-ri"], "success", "{t}");
    assert_eq!(git(&p.root, &["show", "main:built.txt"]), "built\n");
}

/// A runner whose steps keep failing for a cause of its own (here its `git` cannot add
/// worktrees; on another machine, a full disk) lets go of the task once it gives up, and
/// a runner where the cause does not hold finishes it. Before, the first runner kept the
/// task's lease for as long as it ran, and the second waited on it.
#[test]
fn a_task_one_runner_keeps_failing_is_finished_by_another() {
    let p = Project::new("process");
    p.ok(&["task", "create", "t", "--work", "echo t > t.txt"]);
    // A `git` that refuses to add worktrees and passes everything else on.
    let path = fake_program(
        &p,
        "git",
        "worktree add",
        "echo 'fatal: no space left on device' >&2; exit 128",
    );
    let mut first = p.cmd(&["run"]);
    first.env("PATH", &path);
    let _first = p.background(first);
    // It gives up: three failures in a row, under its announcement.
    p.json_until(&["status"], "the first runner gave up", |v| {
        v["supervisors"][0]["failing"][0]["tries"]
            .as_u64()
            .is_some_and(|n| n >= 3)
    });
    run_until_done(&p, "t");
    assert_eq!(git(&p.root, &["show", "main:t.txt"]), "t\n");
}

/// The README's first command: `warden demo` runs its sample plan to the end, acting as
/// the person on each run's outcome (exit 6: approve the review; exit 7: respawn the
/// crashed worker), and ends 0 with every task where the plan's simulated agents lead it.
#[test]
fn the_demo_runs_its_plan_to_the_end() {
    let p = Project::empty("demo-test");
    let o = p
        .cmd(&["demo", "--keep", p.root.to_str().unwrap()])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("the run ended with exit 7"), "{out}");
    assert!(out.contains("the run ended with exit 6"), "{out}");
    assert!(out.contains("untracked notes.txt are intact"), "{out}");
    for id in ["schema", "api", "auth", "ui", "docs"] {
        let t = p.task(id);
        assert_eq!(t["status"], "done", "{id}: {t:#}");
    }
    let t = p.task("i18n");
    assert_eq!(t["status"], "stuck", "{t:#}");
}

/// `warden --json demo`: the transcript goes to stderr and stdout is one JSON summary a
/// script reads (before, stdout was the human transcript).
#[test]
fn the_demo_under_json_prints_one_summary() {
    let p = Project::empty("demo-json");
    let o = p.cmd(&["--json", "demo"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON value ({e})"));
    assert!(err.contains("person$ warden init"), "{err}");
    assert_eq!(v["person_files_intact"], true, "{v}");
    assert_eq!(v["kept"], false, "{v}");
    let status = |id: &str| {
        v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .map(|t| t["status"].clone())
    };
    assert_eq!(status("api"), Some(Value::from("done")), "{v}");
    assert_eq!(status("i18n"), Some(Value::from("stuck")), "{v}");
    assert!(
        v["main_log"]
            .as_array()
            .is_some_and(|l| l.iter().any(|c| c.as_str().unwrap().contains("api"))),
        "{v}"
    );
    // Never into a person's project: a directory with anything in it is refused, and
    // nothing in it changes.
    let mine = Project::new("process");
    let before = git(&mine.root, &["log", "--oneline"]);
    let o = mine
        .cmd(&["demo", "--keep", mine.root.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is not empty; give --keep a new or empty directory"),
        "{err}"
    );
    assert_eq!(git(&mine.root, &["log", "--oneline"]), before);
    assert_eq!(
        mine.json(&["task", "list"]).as_array().map(Vec::len),
        Some(0)
    );
}

/// A session that started and then vanished without a trace of its end (its host and
/// its process group killed; in tmux mode the server killed, or the machine ran out of
/// memory) is the work's failed attempt, with the unknown exit code: what it left as it
/// started (the host's pid file, the file a pane creates) says it ran, so it is not taken
/// for one its runner never started (which is ended without a charge and started again).
fn a_session_that_vanished_after_it_started_is_charged(mode: &str) {
    let p = Project::new(mode);
    p.ok(&[
        "task",
        "create",
        "v",
        "--max-attempts",
        "1",
        "--work",
        "echo v-runs; sleep 600",
    ]);
    let run = p.background(p.cmd(&["run"]));
    pane_printed(&p, "v", "v-runs");
    let sid = p.task("v")["session"].as_str().unwrap().to_owned();
    let files = p.root.join(".warden/tasks/v/sessions");
    if mode == "tmux" {
        assert!(
            files.join(format!("{sid}.started")).exists(),
            "the pane says it started"
        );
        let killed = Command::new("tmux")
            .arg("-S")
            .arg(p.root.join(".warden/tmux.sock"))
            .arg("kill-server")
            .status()
            .unwrap();
        assert!(killed.success());
    } else {
        // `<host> <supervisor> <group>`
        let pids = std::fs::read_to_string(files.join(format!("{sid}.pid"))).unwrap();
        let pids: Vec<&str> = pids.split_whitespace().collect();
        let group = format!("-{}", pids[2]);
        let killed = Command::new("kill")
            .args(["-KILL", pids[0], "--", &group])
            .status()
            .unwrap();
        assert!(killed.success());
    }
    let t = p.json_until(&["task", "show", "v"], "v stuck", |t| {
        t["status"] == "stuck"
    });
    drop(run);
    assert_eq!(t["attempts"], 1, "{t}");
    let history = p.ok(&["--json", "history", "v"]);
    let ends: Vec<(Value, Value)> = history
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "session.exited")
        .map(|e| {
            (
                e["data"]["disposition"].clone(),
                e["data"]["exit_code"].clone(),
            )
        })
        .collect();
    assert_eq!(
        ends,
        [(Value::from("current"), Value::from(128))],
        "{history}"
    );
    // The log says how it ended: nothing else wrote its end.
    let log = p.ok(&["task", "log", "v"]);
    let gone = if mode == "tmux" {
        "its tmux pane was gone (killed, or the tmux server was)"
    } else {
        "its host process was gone"
    };
    assert_eq!(
        log.lines().last(),
        Some(&*format!(
            "--- session {sid} ended unseen: {gone}; exit code unknown (recorded as 128) ---"
        )),
        "{log}"
    );
    // Nothing of it runs on: its program outlived the tmux server (the pane's script
    // traps HUP), and a respawn would have put a second one beside it.
    assert_eq!(
        warden_runner::check::session_groups(&sid, &std::fs::canonicalize(&p.root).unwrap()),
        Vec::<u32>::new(),
        "the session's processes were stopped before it was reported gone"
    );
}

#[test]
fn a_process_session_that_vanished_after_it_started_is_charged() {
    a_session_that_vanished_after_it_started_is_charged("process");
}

#[test]
fn a_tmux_session_that_vanished_after_it_started_is_charged() {
    a_session_that_vanished_after_it_started_is_charged("tmux");
}

/// Is process `pid` gone (or a zombie nobody reaped: it runs nothing)?
fn process_gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
    })
}

/// A session's work that starts a process in a session of its own (`setsid`: its own
/// group, out of reach of the pane's or host's group kill) and ends: the end stops it.
/// Before, it ran on after the task was done, free to edit the worktree beside the
/// next session.
fn a_detached_process_ends_with_its_session(mode: &str) {
    let p = Project::new(mode);
    let pid_file = p.root.join("bg.pid");
    let work = format!(
        "setsid sh -c 'echo $$ > {f}; exec sleep 300' </dev/null >/dev/null 2>&1 & \
         while [ ! -s {f} ]; do sleep 0.02; done; echo hi > hi.txt",
        f = pid_file.display()
    );
    p.ok(&["task", "create", "s", "--work", &work]);
    // Another project's agent with the same session id (ids repeat across projects) is
    // not this session's: it runs on.
    let mut bystander = Command::new("setsid")
        .args(["sleep", "300"])
        .env("WARDEN_SESSION", "s-worker-1")
        .env("WARDEN_DIR", "/elsewhere/another-project")
        .spawn()
        .unwrap();
    run_until_done(&p, "s");
    let survived = bystander.try_wait().unwrap().is_none();
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert!(survived, "another project's session was stopped");
    let sessions = p.task("s")["session"].clone();
    assert!(
        p.ok(&["--json", "history", "s"]).contains("\"s-worker-1\""),
        "the session id the bystander shares: {sessions}"
    );
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone = process_gone(pid);
    if !gone {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert!(gone, "the detached process {pid} outlived its session");
    // Noted by the report that stopped it: in tmux mode that may be the pane-died hook's,
    // which can finish after the supervisor's own report of the end let the task on.
    let start = Instant::now();
    loop {
        let log = p.ok(&["task", "log", "s"]);
        if log.contains("left processes running") && log.contains("stopped") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_detached_process_ends_with_its_process_session() {
    a_detached_process_ends_with_its_session("process");
}

#[test]
fn a_detached_process_ends_with_its_tmux_session() {
    a_detached_process_ends_with_its_session("tmux");
}

/// A session's last line without a newline, then its end: `task log` shows each on a
/// line of its own, and nothing of tmux's end marker (`^[]6973;…^G` in a file or JSON).
fn the_end_line_stands_on_its_own(mode: &str) {
    let p = Project::new(mode);
    p.ok(&[
        "task",
        "create",
        "x",
        "--work",
        "echo first; printf 'no newline'",
    ]);
    run_until_done(&p, "x");
    let log = p.ok(&["task", "log", "x"]);
    let lines: Vec<&str> = log.lines().map(|l| l.trim_end_matches('\r')).collect();
    let at = lines
        .iter()
        .position(|l| *l == "no newline")
        .unwrap_or_else(|| panic!("the last line is its own: {log:?}"));
    assert!(
        lines[at + 1].starts_with("--- session x-")
            && lines[at + 1].ends_with("exited with code 0 ---"),
        "{log:?}"
    );
    assert!(!log.contains('\x1b') && !log.contains('\x07'), "{log:?}");
    let json = p.json(&["task", "log", "x"]);
    assert!(!json["output"].as_str().unwrap().contains('\x1b'), "{json}");
}

#[test]
fn the_end_line_stands_on_its_own_in_process_mode() {
    the_end_line_stands_on_its_own("process");
}

#[test]
fn the_end_line_stands_on_its_own_in_tmux_mode() {
    the_end_line_stands_on_its_own("tmux");
}

/// A tmux session's end is reported twice (the pane's hook and the supervisor's sweep);
/// what it left running is stopped and noted once. Here the leftover ignores TERM, so
/// it outlives the first report's TERM for its whole grace: both reports found it, and
/// the log said so twice. Read once every report of the end has finished.
#[test]
fn what_a_session_left_is_noted_once() {
    let p = Project::new("tmux");
    let cfg = p.root.join(".warden/warden.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("kill_after_s = 5"), "{text}");
    std::fs::write(&cfg, text.replace("kill_after_s = 5", "kill_after_s = 2")).unwrap();
    let work = "setsid sh -c 'trap \"\" TERM; exec sleep 300' </dev/null >/dev/null 2>&1 & sleep 1";
    p.ok(&["task", "create", "x", "--work", work]);
    run_until_done(&p, "x");
    let root = std::fs::canonicalize(&p.root).unwrap();
    let mut dir_var = b"WARDEN_DIR=".to_vec();
    dir_var.extend_from_slice(root.as_os_str().as_encoded_bytes());
    // Every `task exited` of this project has ended (the hook's may outlive the run).
    let reporting = || {
        std::fs::read_dir("/proc").unwrap().any(|e| {
            let pid = e.unwrap().file_name();
            let cmd =
                std::fs::read(Path::new("/proc").join(&pid).join("cmdline")).unwrap_or_default();
            let env =
                std::fs::read(Path::new("/proc").join(&pid).join("environ")).unwrap_or_default();
            cmd.windows(7).any(|w| w == b"exited\0")
                && env.split(|b| *b == 0).any(|kv| kv == dir_var.as_slice())
        })
    };
    let start = Instant::now();
    while reporting() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "a report never ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = p.ok(&["task", "log", "x"]);
    assert_eq!(log.matches("left processes running").count(), 1, "{log}");
}

/// One task's leftover that ignores TERM is waited out for `kill_after_s` by the report
/// of its session's end; the run goes on meanwhile. Before, the supervisor's sweep made
/// that report itself and every other task's next step waited for it. Shown with a
/// grace longer than the test: the other task finishes while the leftover still runs.
#[test]
fn a_slow_stop_of_one_sessions_leftover_holds_up_no_other_task() {
    let p = Project::new("tmux");
    let cfg = p.root.join(".warden/warden.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("kill_after_s = 5", "kill_after_s = 300")).unwrap();
    let pid_file = p.root.join("stubborn.pid");
    let work = format!(
        "setsid sh -c 'trap \"\" TERM; echo $$ > {f}; exec sleep 600' </dev/null >/dev/null 2>&1 & \
         while [ ! -s {f} ]; do sleep 0.02; done",
        f = pid_file.display()
    );
    p.ok(&["task", "create", "a", "--work", &work]);
    let run = p.background(p.cmd(&["run", "--max-parallel", "4"]));
    let start = Instant::now();
    let pid: u32 = loop {
        if let Ok(pid) = std::fs::read_to_string(&pid_file)
            .unwrap_or_default()
            .trim()
            .parse()
        {
            break pid;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "a never ran");
        std::thread::sleep(Duration::from_millis(20));
    };
    // The supervisor's own report of a's end has started (it waits its turn behind the
    // hook's, which waits out the leftover's grace).
    let supervisor = run.0.id().to_string();
    let sweep_reports = || {
        std::fs::read_dir("/proc").unwrap().any(|e| {
            let dir = e.unwrap().path();
            let cmd = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(") ")
                .and_then(|(_, r)| r.split_whitespace().nth(1).map(str::to_owned));
            cmd.windows(10).any(|w| w == b"exited\0a\0-")
                && ppid.as_deref() == Some(supervisor.as_str())
        })
    };
    while !sweep_reports() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no sweep report of a"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    p.ok(&["task", "create", "b", "--work", "echo b > b.txt"]);
    while p.task("b")["status"] != "done" {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "b never finished: {}",
            p.task("b")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let stubborn_ran_on = !process_gone(pid);
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    drop(run);
    assert!(
        stubborn_ran_on,
        "the leftover was stopped before b was done"
    );
}

/// A worker that goes on after its hand-off (its `handoff_grace_s`; the reviewer starts
/// once it ends) is shown running: `warden status` names its session finishing. Before,
/// the task was shown running nothing while the worker still ran in the worktree.
#[test]
fn a_worker_in_its_grace_after_the_hand_off_is_shown_finishing() {
    let p = Project::new("process");
    let go = p.root.join("go");
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display());
    script_agent(&p, &wait, "", &[]);
    p.ok(&["task", "create", "r", "--agent", "write z.txt"]);
    let _run = p.background(p.cmd(&["run"]));
    let v = p.json_until(&["status"], "the worker shown finishing", |v| {
        v["running"][0]["finishing"][0] == "r-worker-1"
    });
    assert_eq!(v["running"][0]["status"], "agent-review", "{v:#}");
    let human = String::from_utf8_lossy(&p.run(&["status"]).stdout).into_owned();
    assert!(
        human.contains("r  agent-review  session r-worker-1 finishing"),
        "{human}"
    );
    std::fs::write(&go, "").unwrap();
    p.json_until(&["task", "show", "r"], "the review done", |t| {
        t["status"] == "reviewing"
    });
}

/// A worker that writes its own "## Review PASS" after `task complete` (in its grace,
/// before the reviewer starts) does not pass its review: the reviewer's start judges
/// the Review already there, and a reviewer that writes nothing is a crash, then stuck.
/// Before, the task reached the person as "review says PASS".
#[test]
fn a_review_the_worker_wrote_after_its_hand_off_is_not_the_verdict() {
    let p = Project::new("process");
    script_agent(
        &p,
        r#"printf '\n## Review\nPASS\n' >> "$WARDEN_TASK_FILE""#,
        "exit 0",
        &[],
    );
    p.ok(&["task", "create", "r", "--agent", "write z.txt"]);
    assert_eq!(p.until_idle(), 7);
    let t = p.task("r");
    assert_eq!(t["status"], "stuck", "{t}");
    assert!(
        !p.ok(&["history", "r"]).contains("review verdict PASS"),
        "{}",
        p.ok(&["history", "r"])
    );
}

/// What a session's end stops is only what the session left: not the supervisor, here
/// started from a shell that carried the session's own variables (before, the end of
/// the session killed the run that supervised it), and for a session that left nothing
/// the log says nothing was left (the pane-died hook's report, which may still run as
/// the supervisor reports the same end, is no remains of it).
#[test]
fn a_sessions_end_spares_the_supervisor() {
    let p = Project::new("tmux");
    p.ok(&["task", "create", "q", "--work", "echo hi > hi.txt"]);
    let root = std::fs::canonicalize(&p.root).unwrap();
    let o = Command::new("setsid")
        .arg(bin())
        .args(["run", "--until-idle"])
        .current_dir(&p.root)
        .env("WARDEN_DIR", &root)
        .env("WARDEN_SESSION", "q-worker-1")
        .env_remove("WARDEN_ROLE")
        .env_remove("WARDEN_TASK_ID")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(p.task("q")["status"], "done");
    let log = p.ok(&["task", "log", "q"]);
    assert!(!log.contains("left processes running"), "{log}");
}
