//! The real agent programs — Claude Code, Codex and aider, the versions
//! `scripts/install-agents` pins — driven by `warden run` with their presets, against the
//! scripted fake model of `tests/agents/fake_model.py` on 127.0.0.1, inside a network
//! namespace that has only loopback, so nothing can leave the machine.
//!
//! A test binary of its own (run by `./scripts/test`'s real-agent step, never by a plain
//! `cargo test`) because it needs what the others do not: the installed programs (about
//! 1.5 GB, installed by that step) and root, for `unshare -n`. Each test re-runs itself
//! inside `tests/agents/netns.sh` when it is not isolated yet. A missing program fails
//! the test with the command that installs it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn warden() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_warden"))
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// How long a whole `warden run --until-idle` may take before the test fails (the fake
/// model answers at once; a run takes a few seconds).
const RUN_DEADLINE: Duration = Duration::from_secs(240);

// ---------------------------------------------------------------------------------------
// Isolation and the installed programs
// ---------------------------------------------------------------------------------------

/// True when this process has no network but loopback (then the test runs here). Else
/// runs this one test again inside `tests/agents/netns.sh`, fails unless it passed there,
/// and returns false.
fn isolated(test: &str) -> bool {
    let dev = std::fs::read_to_string("/proc/self/net/dev").expect("/proc/self/net/dev");
    let ifaces: Vec<&str> = dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    if ifaces == ["lo"] {
        return true;
    }
    assert!(
        std::env::var_os("WARDEN_AGENTS_IN_NETNS").is_none(),
        "inside tests/agents/netns.sh yet interfaces {ifaces:?} are visible"
    );
    let out = Command::new(repo_root().join("tests/agents/netns.sh"))
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env("WARDEN_AGENTS_IN_NETNS", "1")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("tests/agents/netns.sh runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{test} in a loopback-only network namespace (tests/agents/netns.sh, needs root):\n{text}"
    );
    false
}

/// The installed programs (`scripts/install-agents`).
struct Programs {
    claude: PathBuf,
    codex: PathBuf,
    aider: PathBuf,
}

fn programs() -> Programs {
    let dir = std::env::var_os("WARDEN_AGENTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/warden-agents")
        });
    let p = Programs {
        claude: dir.join("claude/node_modules/.bin/claude"),
        codex: dir.join("codex/node_modules/.bin/codex"),
        aider: dir.join("aider-venv/bin/aider"),
    };
    for exe in [&p.claude, &p.codex, &p.aider] {
        assert!(
            exe.exists(),
            "{} is missing: run scripts/install-agents (it installs the pinned Claude Code, Codex and aider into {})",
            exe.display(),
            dir.display()
        );
    }
    p
}

// ---------------------------------------------------------------------------------------
// The fake model
// ---------------------------------------------------------------------------------------

struct Model {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Model {
    fn start(dir: &Path, script: &Value) -> Model {
        let script_file = dir.join("script.json");
        std::fs::write(&script_file, serde_json::to_vec_pretty(script).unwrap()).unwrap();
        let log = dir.join("requests.jsonl");
        let mut child = Command::new("python3")
            .arg(repo_root().join("tests/agents/fake_model.py"))
            .arg("--script")
            .arg(&script_file)
            .arg("--log")
            .arg(&log)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs tests/agents/fake_model.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("port=")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("fake model said {line:?}"));
        Model { child, port, log }
    }

    /// Every request the model got, in order.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The requests of one conversation of the script.
    fn conversation(&self, index: u64) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r["conversation"] == json!(index))
            .collect()
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One scripted tool call that runs a shell command, in the harness's own tool.
fn shell(preset: &str, command: &str) -> Value {
    match preset {
        "claude" => json!({"tool": "Bash", "input": {"command": command}}),
        _ => json!({"tool": "exec_command", "input": {"cmd": command}}),
    }
}

fn text(t: &str) -> Value {
    json!({"text": t})
}

/// The conversations' `match`es: the first line of each role's prompt.
const WORKER: &str = "You are implementing a task.";
const REVIEWER: &str = "You are reviewing implementation quality.";

// ---------------------------------------------------------------------------------------
// A project
// ---------------------------------------------------------------------------------------

/// Where the project of test `name` lives (its root is `project/` inside).
fn project_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("warden-agents-{}-{name}", std::process::id()))
}

struct Project {
    dir: PathBuf,
    root: PathBuf,
    env: Vec<(String, String)>,
    model: Model,
}

impl Drop for Project {
    fn drop(&mut self) {
        let sock = self.root.join(".warden/tmux.sock");
        if sock.exists() {
            let _ = Command::new("tmux")
                .arg("-S")
                .arg(&sock)
                .arg("kill-server")
                .output();
        }
        // Kept after a failure, or with WARDEN_AGENTS_KEEP set, to be read.
        if !std::thread::panicking() && std::env::var_os("WARDEN_AGENTS_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn git(root: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(args)
        .current_dir(root)
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
    /// A git repository with one commit and a workspace whose agent is `preset` (its
    /// program the installed one), `session` mode, and a fake model running `script`.
    fn new(name: &str, preset: &str, session: &str, script: Value) -> Project {
        let dir = project_dir(name);
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("project");
        let home = dir.join("home");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let model = Model::start(&dir, &script);
        let base = format!("http://127.0.0.1:{}", model.port);
        let env: Vec<(String, String)> = [
            ("HOME", home.display().to_string()),
            ("GIT_AUTHOR_NAME", "Person".into()),
            ("GIT_AUTHOR_EMAIL", "p@example.invalid".into()),
            ("GIT_COMMITTER_NAME", "Person".into()),
            ("GIT_COMMITTER_EMAIL", "p@example.invalid".into()),
            // Claude Code: the fake model, no other traffic, fail at the first error.
            ("ANTHROPIC_BASE_URL", base.clone()),
            ("ANTHROPIC_API_KEY", "fake-key".into()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
            ("DISABLE_AUTOUPDATER", "1".into()),
            ("DISABLE_TELEMETRY", "1".into()),
            ("CLAUDE_CODE_MAX_RETRIES", "0".into()),
            // Codex's provider key; aider's price list stays local.
            ("FAKE_KEY", "fake-key".into()),
            ("LITELLM_LOCAL_MODEL_COST_MAP", "True".into()),
            // Set, and not listed in pass_env: no session may see it.
            ("OPENAI_API_KEY", "sk-must-not-reach-the-agent".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let p = Project {
            dir,
            root,
            env,
            model,
        };
        git(&p.root, &["init", "-q", "-b", "main"]);
        for (k, v) in [("user.name", "Person"), ("user.email", "p@example.invalid")] {
            git(&p.root, &["config", k, v]);
        }
        std::fs::write(p.root.join("README.md"), "# demo\n").unwrap();
        git(&p.root, &["add", "-A"]);
        git(&p.root, &["commit", "-q", "-m", "initial"]);
        p.ok(&["init"]);
        p.configure(preset, session, &[]);
        p
    }

    /// Rewrites `[agent]`: the preset (its program the installed one, with the fake
    /// model's arguments), the session mode, the variables sessions may see, and more
    /// lines of `[agent.<preset>]` (`extra`).
    fn configure(&self, preset: &str, session: &str, extra: &[&str]) {
        let progs = programs();
        let base = format!("http://127.0.0.1:{}", self.model.port);
        let (program, args) = match preset {
            "claude" => (progs.claude, json!([])),
            "codex" => (
                progs.codex,
                json!([
                    "-c",
                    "model=\"fake-model\"",
                    "-c",
                    "model_provider=\"fake\"",
                    "-c",
                    "model_providers.fake.name=\"fake\"",
                    "-c",
                    format!("model_providers.fake.base_url=\"{base}/v1\""),
                    "-c",
                    "model_providers.fake.env_key=\"FAKE_KEY\"",
                    "-c",
                    "model_providers.fake.wire_api=\"responses\"",
                    "-c",
                    "model_providers.fake.request_max_retries=0",
                    "-c",
                    "model_providers.fake.stream_max_retries=0",
                ]),
            ),
            _ => {
                let meta = self.dir.join("aider-models.json");
                let model = json!({"max_tokens": 8192, "max_input_tokens": 128000,
                    "max_output_tokens": 8192, "input_cost_per_token": 0,
                    "output_cost_per_token": 0, "litellm_provider": "openai", "mode": "chat"});
                std::fs::write(
                    &meta,
                    json!({"openai/worker-model": model, "openai/reviewer-model": model})
                        .to_string(),
                )
                .unwrap();
                (
                    progs.aider,
                    json!([
                        "--openai-api-base",
                        format!("{base}/v1"),
                        "--openai-api-key",
                        "x",
                        "--model",
                        "openai/worker-model",
                        "--edit-format",
                        "diff",
                        "--model-metadata-file",
                        meta.display().to_string(),
                    ]),
                )
            }
        };
        let cfg = self.root.join(".warden/warden.toml");
        let text = std::fs::read_to_string(&cfg).unwrap();
        // The preset tables an earlier call appended go: they are written again below.
        let text = match text.find("\n[agent.") {
            Some(i) => text[..i].to_owned(),
            None => text,
        };
        let mut out = String::new();
        for l in text.lines() {
            let l = if l.starts_with("preset = ") {
                format!("preset = \"{preset}\"")
            } else if l.starts_with("session = ") {
                format!("session = \"{session}\"")
            } else if l.starts_with("pass_env = ") {
                "pass_env = [\"ANTHROPIC_BASE_URL\", \"ANTHROPIC_API_KEY\", \"CLAUDE_CODE_*\", \"DISABLE_AUTOUPDATER\", \"DISABLE_TELEMETRY\", \"FAKE_KEY\", \"LITELLM_LOCAL_MODEL_COST_MAP\"]".to_owned()
            } else {
                l.to_owned()
            };
            out.push_str(&l);
            out.push('\n');
        }
        out.push_str(&format!(
            "\n[agent.{preset}]\nprogram = {}\nargs = {args}\n",
            json!(program.display().to_string())
        ));
        for l in extra {
            out.push_str(l);
            out.push('\n');
        }
        std::fs::write(&cfg, out).unwrap();
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(warden());
        c.args(args).current_dir(&self.root).env("NO_COLOR", "1");
        for v in [
            "WARDEN_TASK_ID",
            "WARDEN_ROLE",
            "WARDEN_DIR",
            "WARDEN_SESSION",
        ] {
            c.env_remove(v);
        }
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    fn output(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("warden runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.output(args);
        assert!(
            o.status.success(),
            "warden {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// `warden run --until-idle`: its exit code and output. Fails the test if the run
    /// does not end within [`RUN_DEADLINE`].
    fn run(&self) -> (i32, String) {
        let out = self.dir.join("run.log");
        let file = std::fs::File::create(&out).unwrap();
        let mut child = self
            .cmd(&["run", "--until-idle"])
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > RUN_DEADLINE {
                let _ = child.kill();
                panic!(
                    "warden run did not end in {RUN_DEADLINE:?}:\n{}\n--- output.log ---\n{}",
                    std::fs::read_to_string(&out).unwrap_or_default(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        (
            status.code().unwrap_or(-1),
            std::fs::read_to_string(&out).unwrap_or_default(),
        )
    }

    fn task(&self, id: &str) -> Value {
        serde_json::from_str(&self.ok(&["--json", "task", "show", id])).unwrap()
    }

    fn events(&self, id: &str) -> Vec<Value> {
        self.ok(&["--json", "history", id])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn event_types(&self, id: &str) -> Vec<String> {
        self.events(id)
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect()
    }

    fn task_file(&self, id: &str) -> PathBuf {
        self.root.join(format!(".warden/tasks/{id}/TASK.md"))
    }

    /// Every task's output.log, for failure messages.
    fn logs(&self) -> String {
        let mut s = String::new();
        if let Ok(rd) = std::fs::read_dir(self.root.join(".warden/tasks")) {
            for e in rd.flatten() {
                s.push_str(
                    &std::fs::read_to_string(e.path().join("output.log")).unwrap_or_default(),
                );
            }
        }
        s
    }

    /// The text of a file on the base branch.
    fn on_main(&self, path: &str) -> String {
        git(&self.root, &["show", &format!("main:{path}")])
    }

    /// Every environment a session of the project recorded (see [`ENV_DUMP`]) holds no
    /// unlisted key.
    fn no_unlisted_key_reached_a_session(&self) {
        let all = self.model.requests();
        assert!(!all.is_empty());
        for r in &all {
            assert!(
                !r.to_string().contains("sk-must-not-reach-the-agent"),
                "the unlisted key reached the model: {r}"
            );
        }
    }
}

/// The commands a worker runs: writes `line` into hello.txt (appends), appends a Handoff
/// to TASK.md, and hands over — naming Warden by the absolute path its prompt gives.
fn work(line: &str, handoff: &str) -> String {
    format!(
        "printf '%s\\n' '{line}' >> hello.txt && printf '\\n## Handoff\\nDONE: {handoff}\\n' >> \"$WARDEN_TASK_FILE\" && {} task complete hello",
        warden().display()
    )
}

fn review(verdict: &str, status: &str) -> String {
    format!(
        "printf '\\n## Review\\n{verdict}\\n' >> \"$WARDEN_TASK_FILE\" && {} task update hello --status {status}",
        warden().display()
    )
}

/// Worker → reviewer FAIL → the worker resumes its conversation → reviewer PASS → a
/// person approves and the worker's files reach the base branch.
fn review_cycle(preset: &str, session: &str, test: &str) {
    if !isolated(test) {
        return;
    }
    let script = json!({"conversations": [
        {"match": WORKER, "turns": [
            // Warden's own MCP server, registered for the session, fenced to its task.
            {"tool": "mcp__warden__task_get", "input": {"id": "hello"}},
            shell(preset, &work("hello", "hello.txt has its first line")),
            text("Handed over."),
            shell(preset, &work("second", "the second line the review asked for")),
            text("Fixed and handed over again."),
        ]},
        {"match": REVIEWER, "turns": [
            shell(preset, &review("FAIL: hello.txt needs a second line", "working")),
            text("Sent back."),
            shell(preset, &review("PASS: both lines are there", "reviewing")),
            text("Passed."),
        ]},
    ]});
    let p = Project::new(test.rsplit("::").next().unwrap(), preset, session, script);
    p.ok(&[
        "task",
        "create",
        "hello",
        "--title",
        "Write hello.txt with two lines",
    ]);
    let (code, out) = p.run();
    assert_eq!(
        code,
        6,
        "the run waits for a person's review:\n{out}\n{}",
        p.logs()
    );
    let t = p.task("hello");
    assert_eq!(t["status"], "reviewing", "{t}");
    assert_eq!(t["crash_count"], 0, "{t}");
    assert_eq!(t["review_round"], 2, "{t}");

    // Four sessions, each a real run of the harness, each ended by its own report.
    let ev = p.events("hello");
    let spawned: Vec<&Value> = ev.iter().filter(|e| e["type"] == "agent.spawned").collect();
    assert_eq!(spawned.len(), 4, "{ev:#?}");
    assert!(!p.event_types("hello").contains(&"agent.crashed".to_owned()));
    assert!(
        !p.event_types("hello")
            .contains(&"session.failed".to_owned())
    );
    // Each harness named its conversation (its SessionStart hook) ...
    let convs: Vec<&str> = ev
        .iter()
        .filter(|e| e["type"] == "agent.conversation")
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    assert!(convs.len() >= 2, "{convs:?}");
    // ... and the second worker and reviewer resumed theirs: the model got the first
    // session's prompt and calls again in the same conversation, then the new prompt.
    for (conv, first, again, steps) in [
        (0, WORKER, "You are fixing issues found in review.", 5),
        (1, REVIEWER, REVIEWER, 4),
    ] {
        let reqs = p.model.conversation(conv);
        let positions: Vec<u64> = reqs
            .iter()
            .map(|r| r["position"].as_u64().unwrap())
            .collect();
        assert_eq!(
            positions,
            (0..steps).collect::<Vec<u64>>(),
            "{conv}: one conversation, resumed: {positions:?}"
        );
        let last = reqs.last().unwrap()["body"].to_string();
        assert!(
            last.contains(first),
            "{conv}: the resumed request keeps the first prompt"
        );
        assert_eq!(
            last.matches(again).count(),
            if first == again { 2 } else { 1 },
            "{conv}: the resumed request ends with the new prompt"
        );
    }
    let logs = p.logs();
    assert!(logs.contains("resuming conversation"), "{logs}");
    // The MCP call reached Warden, which answered with the task (as the agent role).
    let after_mcp = p.model.conversation(0)[1]["body"].to_string();
    assert!(
        after_mcp.contains(r#"\"gate\":\"EXECUTING\""#) && after_mcp.contains("warden/hello"),
        "no task_get result in the request after the call: {}",
        &after_mcp[after_mcp.len().saturating_sub(3000)..]
    );
    // Prompts name Warden by its absolute path (an agent's shell may not find it on PATH).
    let prompt =
        std::fs::read_to_string(p.root.join(".warden/tasks/hello/prompt-worker.md")).unwrap();
    assert!(
        prompt.contains(&format!("{} task complete hello", warden().display())),
        "{prompt}"
    );

    // The person approves: merge-ri brings the worker's file to the base branch.
    p.ok(&["task", "approve", "hello"]);
    assert_eq!(p.task("hello")["status"], "done");
    assert_eq!(p.on_main("hello.txt"), "hello\nsecond\n");
    p.no_unlisted_key_reached_a_session();
    if session == "tmux" {
        // One tmux session per agent session, and the server gone with the run.
        let sock = p.root.join(".warden/tmux.sock");
        let alive = Command::new("tmux")
            .arg("-S")
            .arg(&sock)
            .arg("list-sessions")
            .output()
            .unwrap();
        assert!(!alive.status.success(), "the tmux server outlived the run");
    }
    assert!(p.ok(&["check"]).contains("ok"));
}

#[test]
fn claude_review_cycle_in_process_sessions() {
    review_cycle(
        "claude",
        "process",
        "claude_review_cycle_in_process_sessions",
    );
}

#[test]
fn claude_review_cycle_in_tmux_sessions() {
    review_cycle("claude", "tmux", "claude_review_cycle_in_tmux_sessions");
}

#[test]
fn codex_review_cycle() {
    review_cycle("codex", "process", "codex_review_cycle");
}

/// A model that fails ends the agent non-zero: one crash, the worker waits for a person;
/// `task respawn` starts it again, resuming its conversation, and it finishes.
fn failing_model(preset: &str, failure: Value, test: &str) {
    if !isolated(test) {
        return;
    }
    let script = json!({"conversations": [
        {"match": WORKER, "turns": [
            failure,
            shell(preset, &work("hello", "written after the model came back")),
            text("Handed over."),
        ]},
        {"match": REVIEWER, "turns": [
            shell(preset, &review("PASS: fine", "reviewing")),
            text("Passed."),
        ]},
    ]});
    let p = Project::new(test, preset, "process", script);
    p.ok(&["task", "create", "hello", "--title", "Write hello.txt"]);
    let (code, out) = p.run();
    assert_eq!(
        code,
        7,
        "a crashed worker waits for a person:\n{out}\n{}",
        p.logs()
    );
    let t = p.task("hello");
    assert_eq!(
        (t["status"].as_str(), t["crash_count"].as_u64()),
        (Some("working"), Some(1)),
        "{t}"
    );
    assert!(t["dead"].as_bool().unwrap(), "{t}");
    let ev = p.events("hello");
    let exits: Vec<&Value> = ev
        .iter()
        .filter(|e| e["type"] == "session.exited")
        .collect();
    assert_eq!(exits.len(), 1, "one end, reported once: {ev:#?}");
    assert!(
        exits[0]["reason"].as_str().unwrap().contains("exit 1"),
        "{}",
        exits[0]
    );
    assert_eq!(
        ev.iter().filter(|e| e["type"] == "agent.crashed").count(),
        1
    );

    p.ok(&["task", "respawn", "hello"]);
    let (code, out) = p.run();
    assert_eq!(code, 6, "{out}\n{}", p.logs());
    let t = p.task("hello");
    assert_eq!(t["status"], "reviewing", "{t}");
    assert!(p.logs().contains("resuming conversation"), "{}", p.logs());
    // The respawned worker's request carries the first session's prompt: resumed.
    let reqs = p.model.conversation(0);
    let last = reqs.last().unwrap()["body"].to_string();
    assert_eq!(
        last.matches(WORKER).count(),
        2,
        "both prompts in one conversation"
    );
}

#[test]
fn claude_model_http_500_is_one_crash_and_respawn_resumes() {
    failing_model(
        "claude",
        json!({"http_error": 500}),
        "claude_model_http_500_is_one_crash_and_respawn_resumes",
    );
}

#[test]
fn codex_dropped_stream_is_one_crash_and_respawn_resumes() {
    failing_model(
        "codex",
        json!({"drop": true}),
        "codex_dropped_stream_is_one_crash_and_respawn_resumes",
    );
}

/// A worker that tries to stop without its Handoff is sent back by Warden's stop hook,
/// told what to write where and which command to run; it writes it and hands over, and
/// nothing is counted as a crash.
#[test]
fn claude_stop_hook_sends_a_worker_back_for_its_handoff() {
    let test = "claude_stop_hook_sends_a_worker_back_for_its_handoff";
    if !isolated(test) {
        return;
    }
    let script = json!({"conversations": [
        {"match": WORKER, "turns": [
            shell("claude", "printf 'hello\\n' > hello.txt"),
            text("I believe I am done."),
            shell("claude", &format!(
                "printf '\\n## Handoff\\nDONE: hello.txt\\n' >> \"$WARDEN_TASK_FILE\" && {} task complete hello",
                warden().display()
            )),
            text("Handed over."),
        ]},
        {"match": REVIEWER, "turns": [
            shell("claude", &review("PASS: fine", "reviewing")),
            text("Passed."),
        ]},
    ]});
    let p = Project::new(test, "claude", "process", script);
    p.ok(&["task", "create", "hello", "--title", "Write hello.txt"]);
    let (code, out) = p.run();
    assert_eq!(code, 6, "{out}\n{}", p.logs());
    let t = p.task("hello");
    assert_eq!(
        (t["status"].as_str(), t["crash_count"].as_u64()),
        (Some("reviewing"), Some(0)),
        "{t}"
    );
    // The request after the stop carries Warden's answer, naming the file and command.
    let reqs = p.model.conversation(0);
    assert_eq!(reqs.len(), 4, "{reqs:#?}");
    let blocked = reqs[2]["body"].to_string();
    for want in [
        "is not handed over yet",
        "## Handoff",
        &p.task_file("hello").display().to_string(),
        &format!("{} task complete hello", warden().display()),
        "1 of them",
    ] {
        assert!(
            blocked.contains(want),
            "{want:?} not in the request after the block"
        );
    }
    assert!(
        !reqs[1]["body"]
            .to_string()
            .contains("is not handed over yet")
    );
    let logs = p.logs();
    assert!(
        logs.contains("the stop hook sent it back for its ## Handoff (1 of 3)"),
        "{logs}"
    );
    assert!(!p.event_types("hello").contains(&"agent.crashed".to_owned()));
}

/// Codex has no cap on a stop hook's blocks: Warden's own bound (`stop_hook_blocks`)
/// lets a worker that never writes its Handoff end, and exit monitoring counts the crash.
#[test]
fn codex_stop_hook_gives_up_after_its_bound() {
    let test = "codex_stop_hook_gives_up_after_its_bound";
    if !isolated(test) {
        return;
    }
    let script = json!({"conversations": [
        {"match": WORKER, "turns": [text("I believe I am done.")]},
    ]});
    let p = Project::new(test, "codex", "process", script);
    p.ok(&["task", "create", "hello", "--title", "Write hello.txt"]);
    let (code, out) = p.run();
    assert_eq!(code, 7, "{out}\n{}", p.logs());
    let t = p.task("hello");
    assert_eq!(
        (t["status"].as_str(), t["crash_count"].as_u64()),
        (Some("working"), Some(1)),
        "{t}"
    );
    // The first answer, then one per block: three blocks, then Warden let it stop.
    let reqs = p.model.conversation(0);
    assert_eq!(reqs.len(), 4, "{}", p.logs());
    for (i, r) in reqs.iter().enumerate() {
        let sent_back = r["body"]
            .to_string()
            .matches("is not handed over yet")
            .count();
        assert_eq!(sent_back, i, "request {i} carries each block so far");
    }
    let logs = p.logs();
    assert!(logs.contains("(3 of 3)"), "{logs}");
    assert!(
        logs.contains("let it end without its ## Handoff after 3 block(s)"),
        "{logs}"
    );
}

/// aider runs no commands: its worker edits files, writes its Handoff into TASK.md and
/// exits, and exit monitoring moves the task to review; its reviewer writes a verdict
/// the same way. The reviewer runs with its own arguments (another model).
#[test]
fn aider_hands_over_by_exiting_with_its_handoff_written() {
    let test = "aider_hands_over_by_exiting_with_its_handoff_written";
    if !isolated(test) {
        return;
    }
    let task_file = project_dir(test).join("project/.warden/tasks/hello/TASK.md");
    let task_file = task_file.display().to_string();
    let edit = |file: &str, text: &str| {
        format!("{file}\n```\n<<<<<<< SEARCH\n=======\n{text}>>>>>>> REPLACE\n```\n\n")
    };
    let script = json!({"conversations": [
        {"match": WORKER, "turns": [text(&format!(
            "{}{}",
            edit("hello.txt", "hello\n"),
            edit(&task_file, "\n## Handoff\nDONE: hello.txt\n")
        ))]},
        {"match": REVIEWER, "turns": [text(&edit(&task_file, "\n## Review\nPASS: hello.txt is there\n"))]},
    ]});
    let p = Project::new(test, "aider", "process", script);
    p.configure(
        "aider",
        "process",
        &[
            "[agent.aider.reviewer]",
            &format!(
                "args = {}",
                json!([
                    "--openai-api-base",
                    format!("http://127.0.0.1:{}/v1", p.model.port),
                    "--openai-api-key",
                    "x",
                    "--model",
                    "openai/reviewer-model",
                    "--edit-format",
                    "diff",
                    "--model-metadata-file",
                    p.dir.join("aider-models.json").display().to_string(),
                ])
            ),
        ],
    );
    p.ok(&["task", "create", "hello", "--title", "Write hello.txt"]);
    let (code, out) = p.run();
    assert_eq!(code, 6, "{out}\n{}", p.logs());
    let t = p.task("hello");
    assert_eq!(
        (t["status"].as_str(), t["crash_count"].as_u64()),
        (Some("reviewing"), Some(0)),
        "{t}"
    );
    // Both moves were exit monitoring's: aider never called Warden.
    let advanced: Vec<String> = p
        .events("hello")
        .iter()
        .filter(|e| e["type"] == "auto.advanced")
        .map(|e| {
            format!(
                "{} -> {}",
                e["from"].as_str().unwrap(),
                e["to"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        advanced,
        ["working -> agent-review", "agent-review -> reviewing"]
    );
    // The worker and the reviewer asked different models (the reviewer's own args).
    let models: Vec<String> = p
        .model
        .requests()
        .iter()
        .filter(|r| r["api"] == "chat")
        .map(|r| {
            format!(
                "{}:{}",
                r["conversation"],
                r["body"]["model"].as_str().unwrap()
            )
        })
        .collect();
    assert!(models.contains(&"0:worker-model".to_owned()), "{models:?}");
    assert!(
        models.contains(&"1:reviewer-model".to_owned()),
        "{models:?}"
    );
    // Its histories stay beside TASK.md; the worktree holds only the work.
    p.ok(&["task", "approve", "hello"]);
    assert_eq!(p.on_main("hello.txt"), "hello\n");
    let tree = git(&p.root, &["ls-tree", "-r", "--name-only", "main"]);
    assert_eq!(
        tree, "README.md\nhello.txt\n",
        "nothing of aider's reached the branch"
    );
    assert!(
        p.root
            .join(".warden/tasks/hello/agent/aider-chat.md")
            .is_file()
    );
}

/// Fills a task's memory until its prompt is over 2 MiB (each merge a file under the
/// 1 MiB input limit, each item at the 256-character cap), ending with `marker`.
fn two_mib_of_memory(p: &Project, id: &str, marker: &str) {
    // Room for 9,000 decisions: a list keeps its newest `max_items` (50 by default).
    let cfg = p.root.join(".warden/warden.toml");
    let toml = std::fs::read_to_string(&cfg).unwrap();
    assert!(toml.contains("max_items = 50"), "{toml}");
    std::fs::write(&cfg, toml.replace("max_items = 50", "max_items = 10000")).unwrap();
    let item = "x".repeat(250);
    for i in 0..9 {
        let items: Vec<String> = (0..1000).map(|j| format!("{i}-{j} {item}")).collect();
        let f = p.dir.join(format!("memory-{i}.json"));
        std::fs::write(&f, json!({"decisions": items}).to_string()).unwrap();
        p.ok(&["memory", "merge", id, f.to_str().unwrap()]);
    }
    let f = p.dir.join("memory-last.json");
    std::fs::write(&f, json!({"decisions": [marker]}).to_string()).unwrap();
    p.ok(&["memory", "merge", id, f.to_str().unwrap()]);
}

/// A prompt of over 2 MiB (far over what `exec` takes as one argument) reaches Claude
/// Code whole, on its standard input.
#[test]
fn claude_gets_a_two_mib_prompt_whole() {
    let test = "claude_gets_a_two_mib_prompt_whole";
    if !isolated(test) {
        return;
    }
    let script = json!({"conversations": [
        {"match": WORKER, "turns": [
            shell("claude", &work("hello", "hello.txt")),
            text("Handed over."),
        ]},
        {"match": REVIEWER, "turns": [
            shell("claude", &review("PASS: fine", "reviewing")),
            text("Passed."),
        ]},
    ]});
    let p = Project::new(test, "claude", "process", script);
    p.ok(&["task", "create", "hello", "--title", "Write hello.txt"]);
    two_mib_of_memory(&p, "hello", "END-OF-THE-LONG-PROMPT");
    let (code, out) = p.run();
    assert_eq!(code, 6, "{out}\n{}", p.logs());
    let prompt = std::fs::metadata(p.root.join(".warden/tasks/hello/prompt-worker.md")).unwrap();
    assert!(
        prompt.len() > 2 << 20,
        "the prompt is {} bytes",
        prompt.len()
    );
    let first = &p.model.conversation(0)[0];
    let body = first["body"].to_string();
    assert!(body.len() > 2 << 20, "the request is {} bytes", body.len());
    assert!(
        body.contains("END-OF-THE-LONG-PROMPT"),
        "the prompt's end arrived"
    );
    assert!(body.contains("0-0 xxxx"), "the prompt's start arrived");
}

/// A person runs Claude Code by hand on a task, with Warden's hooks installed by
/// `warden hooks install claude`: the stop hook holds the agent to the gate, and the
/// session-end hook reports the end, so exit monitoring moves the task on.
#[test]
fn claude_started_by_hand_with_installed_hooks() {
    let test = "claude_started_by_hand_with_installed_hooks";
    if !isolated(test) {
        return;
    }
    let script = json!({"conversations": [
        {"match": WORKER, "turns": [
            shell("claude", "printf 'hello\\n' > hello.txt"),
            text("I believe I am done."),
            shell("claude", "printf '\\n## Handoff\\nDONE: hello.txt\\n' >> .warden/tasks/hello/TASK.md"),
            text("Handoff written."),
        ]},
    ]});
    let p = Project::new(test, "claude", "process", script);
    p.ok(&["task", "create", "hello", "--title", "Write hello.txt"]);
    p.ok(&["task", "update", "hello", "--status", "working"]);
    let said = p.ok(&["hooks", "install", "claude"]);
    assert!(
        said.contains("added the Stop and SessionEnd hook(s)"),
        "{said}"
    );
    assert!(
        p.ok(&["hooks", "install", "claude"])
            .contains("already there")
    );
    assert_eq!(
        git(&p.root, &["status", "--porcelain"]),
        "",
        "the settings stay out of git"
    );
    let prompt = p.dir.join("prompt.txt");
    std::fs::write(&prompt, p.ok(&["prompt", "hello"])).unwrap();
    let out = Command::new(programs().claude)
        .args(["-p", "--allowedTools", "Bash Edit Write"])
        .current_dir(&p.root)
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .env("WARDEN_TASK_ID", "hello")
        .stdin(std::fs::File::open(&prompt).unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = p.task("hello");
    assert_eq!(
        (t["status"].as_str(), t["crash_count"].as_u64()),
        (Some("agent-review"), Some(0)),
        "{t}"
    );
    let ev = p.events("hello");
    let exited = ev
        .iter()
        .find(|e| e["type"] == "session.exited")
        .expect("an exit report");
    assert!(
        exited["reason"]
            .as_str()
            .unwrap()
            .contains("harness session end: other"),
        "{exited}"
    );
    assert!(ev.iter().any(|e| e["type"] == "auto.advanced"), "{ev:#?}");
    let reqs = p.model.conversation(0);
    assert!(
        reqs[2]["body"]
            .to_string()
            .contains("is not handed over yet")
    );
}

/// A worker that writes its own "## Review PASS" beside its hand-off does not pass its
/// review: the real Claude Code reviewer that tries to stop without a verdict of its own
/// is sent back by the stop hook (the Review there was written before its round began),
/// writes one, and only that moves the task. Before, the worker's PASS reached the person
/// as "review says PASS" while the reviewer wrote nothing.
#[test]
fn claude_worker_cannot_pass_its_own_review() {
    let test = "claude_worker_cannot_pass_its_own_review";
    if !isolated(test) {
        return;
    }
    let script = json!({"conversations": [
        {"match": WORKER, "turns": [
            shell("claude", &format!(
                "printf 'hello\\n' > hello.txt && printf '\\n## Handoff\\nDONE: hello.txt\\n\\n## Review\\nPASS: trust me\\n' >> \"$WARDEN_TASK_FILE\" && {} task complete hello",
                warden().display()
            )),
            text("Handed over, and reviewed it myself."),
        ]},
        {"match": REVIEWER, "turns": [
            text("The review is already there."),
            shell("claude", &review("PASS: hello.txt checked", "reviewing")),
            text("Passed."),
        ]},
    ]});
    let p = Project::new(test, "claude", "process", script);
    p.ok(&["task", "create", "hello", "--title", "Write hello.txt"]);
    let (code, out) = p.run();
    assert_eq!(code, 6, "{out}\n{}", p.logs());
    let t = p.task("hello");
    assert_eq!(
        (t["status"].as_str(), t["crash_count"].as_u64()),
        (Some("reviewing"), Some(0)),
        "{t}"
    );
    let reqs = p.model.conversation(1);
    let blocked = reqs
        .iter()
        .map(|r| r["body"].to_string())
        .find(|b| b.contains("has no review verdict from this round yet"))
        .unwrap_or_else(|| panic!("the reviewer was never sent back: {reqs:#?}"));
    assert!(
        blocked.contains("written before this round began"),
        "{}",
        &blocked[blocked.len().saturating_sub(2000)..]
    );
    let text = std::fs::read_to_string(p.task_file("hello")).unwrap();
    assert_eq!(text.matches("## Review").count(), 2, "{text}");
}
