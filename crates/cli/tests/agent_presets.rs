//! Agent presets through the real binary, without the real agent programs (those are in
//! `tests/agents.rs`): the launch checks of `warden run` and `warden doctor`, what a
//! custom agent is given, a program that cannot be executed, the hooks as harnesses call
//! them, and `warden hooks install`.

use std::path::Path;

use serde_json::{Value, json};

use crate::common::{Workspace, code, describe, err_line, text};

/// Replaces warden.toml's `[agent]` settings: the lines given replace the default
/// `preset = …` line; `tail` is appended (preset tables).
fn agent_config(ws: &Workspace, lines: &[&str], tail: &str) {
    let cfg = ws.root.join(".warden/warden.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text
        .lines()
        .map(|l| {
            if l.starts_with("preset = ") {
                lines.join("\n")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&cfg, format!("{text}\n{tail}")).unwrap();
}

/// The database and its WAL: what "nothing stored changed" compares.
fn stored(ws: &Workspace) -> Vec<u8> {
    let mut all = std::fs::read(ws.root.join(".warden/warden.db")).unwrap();
    all.extend(std::fs::read(ws.root.join(".warden/warden.db-wal")).unwrap_or_default());
    all
}

fn run_until_idle(ws: &Workspace) -> std::process::Output {
    ws.run(&["run", "--until-idle"])
}

#[test]
fn a_missing_agent_program_is_refused_before_any_session_starts() {
    let ws = Workspace::new("missing-program");
    agent_config(
        &ws,
        &["preset = \"claude\""],
        "[agent.claude]\nprogram = \"warden-test-no-such-agent\"\n",
    );
    ws.ok(&["task", "create", "a", "--agent", "do it"]);
    let before = ws.history();
    let o = run_until_idle(&ws);
    assert_eq!(code(&o), 2, "{}", describe(&["run"], &o));
    let line = err_line(&o);
    for want in [
        "\"warden-test-no-such-agent\"",
        "preset claude",
        "not on PATH",
        "[agent.claude] program",
        "tasks a",
    ] {
        assert!(line.contains(want), "{want:?} not in {line:?}");
    }
    assert!(text(&o.stderr).contains("nothing was started"));
    assert_eq!(ws.history(), before, "nothing stored changed");
    assert_eq!(ws.status("a"), "pending");
    assert!(!ws.root.join(".warden/tasks/a/sessions").exists());
    assert!(!ws.root.join(".warden/tasks/a/output.log").exists());

    // doctor says the same, and what is fine.
    let o = ws.run(&["doctor"]);
    assert_eq!(code(&o), 2, "{}", describe(&["doctor"], &o));
    let out = text(&o.stdout);
    assert!(out.contains("ok       workspace"), "{out}");
    assert!(
        out.contains(
            "problem  agent     the agent program \"warden-test-no-such-agent\" of preset claude"
        ),
        "{out}"
    );
    assert!(
        err_line(&o).contains("1 problem(s) stop `warden run`"),
        "{}",
        err_line(&o)
    );
    let j: Value = serde_json::from_slice(&ws.run(&["--json", "doctor"]).stdout).unwrap();
    assert_eq!(j["ok"], false, "{j}");

    // Shell work needs no agent: the same workspace runs it, and doctor, with no open
    // task using the missing program, warns of it but says nothing stops the run.
    ws.ok(&["task", "cancel", "a"]);
    let o = ws.run(&["doctor"]);
    assert_eq!(code(&o), 0, "{}", describe(&["doctor"], &o));
    assert!(
        text(&o.stdout).contains(
            "warning  agent     the agent program \"warden-test-no-such-agent\" of preset claude"
        ),
        "{}",
        text(&o.stdout)
    );
    assert!(text(&o.stdout).contains("(no open task uses it yet)"));
    ws.ok(&["task", "create", "s", "--work", "true"]);
    let o = run_until_idle(&ws);
    assert_eq!(code(&o), 0, "{}", describe(&["run"], &o));
    assert_eq!(ws.status("s"), "done");
}

#[test]
fn an_unknown_placeholder_is_refused_everywhere_and_changes_nothing() {
    let ws = Workspace::new("bad-placeholder");
    ws.ok(&["task", "create", "a", "--agent", "do it"]);
    let before = stored(&ws);
    agent_config(&ws, &["command = [\"echo\", \"{promt}\"]"], "");
    for args in [&["run", "--until-idle"][..], &["doctor"], &["task", "list"]] {
        let o = ws.run(args);
        assert_eq!(code(&o), 2, "{}", describe(args, &o));
        let line = err_line(&o);
        assert!(line.contains("unknown placeholder {promt}"), "{line}");
        assert!(line.contains("{prompt}"), "it names the right ones: {line}");
        assert_eq!(
            text(&o.stderr).lines().count(),
            1,
            "one line: {}",
            text(&o.stderr)
        );
    }
    assert_eq!(stored(&ws), before, "nothing stored changed");
}

#[test]
fn doctor_reports_presets_in_use_and_keys_sessions_will_not_see() {
    let ws = Workspace::new("doctor");
    agent_config(
        &ws,
        &[
            "preset = \"custom\"",
            "command = [\"sh\", \"-c\", \"true\"]",
        ],
        "[agent.codex]\nprogram = \"/bin/true\"\n",
    );
    ws.ok(&["task", "create", "a", "--agent", "do it"]);
    ws.ok(&[
        "task", "create", "b", "--agent", "do it", "--preset", "codex",
    ]);
    assert_eq!(ws.show("b")["preset"], "codex");
    let o = ws.run_env(&["doctor"], &[("OPENAI_API_KEY", "sk-x")]);
    assert_eq!(code(&o), 0, "{}", describe(&["doctor"], &o));
    let out = text(&o.stdout);
    for want in [
        "ok       agent     default preset custom: /",
        "(1 open task(s): a)",
        "ok       agent     preset codex: /bin/true (1 open task(s): b)",
        "warning  env       OPENAI_API_KEY is set but not in [agent] pass_env",
        "warning  git       not a git repository",
    ] {
        assert!(out.contains(want), "{want:?} not in\n{out}");
    }
    // A preset a task names is checked by `warden run` too.
    let cfg = ws.root.join(".warden/warden.toml");
    let t = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, t.replace("\"/bin/true\"", "\"/nonexistent/codex\"")).unwrap();
    let o = run_until_idle(&ws);
    assert_eq!(code(&o), 2, "{}", describe(&["run"], &o));
    assert!(
        err_line(&o).contains("\"/nonexistent/codex\" of preset codex"),
        "{}",
        err_line(&o)
    );
    let o = ws.run(&["task", "create", "c", "--preset", "gemini"]);
    assert_eq!(code(&o), 2, "{}", describe(&["task", "create"], &o));
    assert!(
        err_line(&o).contains("unknown agent preset \"gemini\""),
        "{}",
        err_line(&o)
    );
}

/// Passes the launch check (it exists and is executable) but cannot be executed: the
/// OS error lands in output.log, the run log and a `session.failed` event, and it is not
/// the agent's crash.
#[test]
fn a_program_that_cannot_be_executed_is_a_failed_start_not_a_crash() {
    let ws = Workspace::new("exec-fails");
    let agent = ws.root.join("agent.sh");
    std::fs::write(&agent, "#!/nonexistent/interpreter\n").unwrap();
    chmod_x(&agent);
    agent_config(
        &ws,
        &[
            "preset = \"custom\"",
            &format!(
                "command = [{}, \"{{prompt_file}}\"]",
                json!(agent.display().to_string())
            ),
        ],
        "",
    );
    ws.ok(&["task", "create", "a", "--agent", "do it"]);
    let o = run_until_idle(&ws);
    assert_eq!(code(&o), 7, "{}", describe(&["run"], &o));
    let log = std::fs::read_to_string(ws.root.join(".warden/tasks/a/output.log")).unwrap();
    assert!(
        log.contains("No such file or directory (os error 2)"),
        "{log}"
    );
    let run_log = text(&o.stdout);
    assert!(
        run_log.contains("could not start") && run_log.contains("os error 2"),
        "{run_log}"
    );
    let t = ws.show("a");
    assert_eq!(t["crash_count"], 0, "{t}");
    assert_eq!(t["status"], "working", "{t}");
    let types: Vec<String> = ws
        .history()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert!(types.contains(&"session.failed".to_owned()), "{types:?}");
    assert!(!types.contains(&"agent.crashed".to_owned()), "{types:?}");
    assert!(!types.contains(&"session.exited".to_owned()), "{types:?}");
}

fn chmod_x(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A workspace whose custom agent, given `{prompt}`, records what each session got:
/// its standard input in `.warden/got-SESSION.stdin`, its argument in `….arg`.
fn recording_agent(name: &str) -> Workspace {
    let ws = Workspace::new(name);
    let script = "cat > \"$WARDEN_DIR/.warden/got-$WARDEN_SESSION.stdin\"; printf %s \"$1\" > \"$WARDEN_DIR/.warden/got-$WARDEN_SESSION.arg\"";
    agent_config(
        &ws,
        &[
            "preset = \"custom\"",
            &format!(
                "command = [\"sh\", \"-c\", {}, \"sh\", \"{{prompt}}\"]",
                json!(script)
            ),
        ],
        "",
    );
    ws
}

/// The event types of the whole history.
fn event_types(ws: &Workspace) -> Vec<String> {
    ws.history()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

/// A custom agent given `{prompt}`: as its argument while the prompt is short; over
/// 64 KiB (here over 2 MiB, far past what exec takes) a pointer to the prompt file as
/// its argument and the whole prompt on standard input.
#[test]
fn a_long_prompt_reaches_a_custom_agent_on_its_input() {
    let ws = recording_agent("long-prompt");
    // Room for 9,000 decisions: a list keeps its newest `max_items` (50 by default).
    let cfg = ws.root.join(".warden/warden.toml");
    let toml = std::fs::read_to_string(&cfg).unwrap();
    assert!(toml.contains("max_items = 50"), "{toml}");
    std::fs::write(&cfg, toml.replace("max_items = 50", "max_items = 10000")).unwrap();
    ws.ok(&["task", "create", "short", "--agent", "SHORT-PROMPT-MARK"]);
    ws.ok(&["task", "create", "long", "--agent", "LONG-PROMPT-MARK"]);
    let item = "y".repeat(250);
    for i in 0..9 {
        let items: Vec<String> = (0..1000).map(|j| format!("{i}-{j} {item}")).collect();
        let f = ws.root.join(format!("m{i}.json"));
        std::fs::write(&f, json!({"decisions": items}).to_string()).unwrap();
        ws.ok(&["memory", "merge", "long", f.to_str().unwrap()]);
    }
    let o = run_until_idle(&ws);
    // Neither hands over (crashes are expected); what matters is what each was given.
    assert_eq!(code(&o), 7, "{}", describe(&["run"], &o));
    let got = |name: &str| std::fs::read(ws.root.join(format!(".warden/{name}"))).unwrap();
    let long_prompt = std::fs::read(ws.root.join(".warden/tasks/long/prompt-worker.md")).unwrap();
    assert!(long_prompt.len() > 2 << 20, "{} bytes", long_prompt.len());
    assert_eq!(
        got("got-long-worker-1.stdin"),
        long_prompt,
        "the whole prompt on stdin"
    );
    let arg = text(&got("got-long-worker-1.arg"));
    assert!(
        arg.contains("too long for a command-line argument"),
        "{arg}"
    );
    assert!(arg.contains("tasks/long/prompt-worker.md"), "{arg}");
    let log = std::fs::read_to_string(ws.root.join(".warden/tasks/long/output.log")).unwrap();
    assert!(log.contains("is too long for an argument"), "{log}");
    // The short one: its argument is the prompt; its input stays empty.
    assert!(text(&got("got-short-worker-1.arg")).contains("SHORT-PROMPT-MARK"));
    assert!(got("got-short-worker-1.stdin").is_empty());
    let types = event_types(&ws);
    assert!(!types.contains(&"session.failed".to_owned()), "{types:?}");
}

/// A prompt holding a NUL character (here from the project's own worker template; an
/// agent can write one into TASK.md too) cannot be a command-line argument: `{prompt}`
/// names the prompt file instead and the prompt is the agent's input, as for a prompt
/// too long for an argument, so the session starts.
#[test]
fn a_prompt_with_a_nul_reaches_a_custom_agent_on_its_input() {
    let ws = recording_agent("nul-prompt");
    let prompts = ws.root.join(".warden/prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    std::fs::write(
        prompts.join("worker.md"),
        "Task {task_id}: NUL-MARK \u{0} after the NUL\n",
    )
    .unwrap();
    ws.ok(&["task", "create", "t", "--agent", "do it"]);
    let o = run_until_idle(&ws);
    assert_eq!(code(&o), 7, "{}", describe(&["run"], &o));
    let types = event_types(&ws);
    assert!(!types.contains(&"session.failed".to_owned()), "{types:?}");
    let got = |name: &str| std::fs::read(ws.root.join(format!(".warden/{name}"))).unwrap();
    let prompt = std::fs::read(ws.root.join(".warden/tasks/t/prompt-worker.md")).unwrap();
    assert!(prompt.contains(&0), "the prompt holds the NUL");
    assert_eq!(
        got("got-t-worker-1.stdin"),
        prompt,
        "the whole prompt on stdin"
    );
    let arg = text(&got("got-t-worker-1.arg"));
    assert!(arg.contains("holds a NUL character"), "{arg}");
    assert!(arg.contains("tasks/t/prompt-worker.md"), "{arg}");
    let log = std::fs::read_to_string(ws.root.join(".warden/tasks/t/output.log")).unwrap();
    assert!(log.contains("holds a NUL character"), "{log}");
}

/// `warden hook stop` as a harness calls it, from a task's worktree (found through its
/// `.warden/TASK.md` link) with no Warden variables: it blocks until the Handoff is
/// written, at most `stop_hook_blocks` times; outside a Warden task it says nothing.
#[test]
fn the_stop_hook_holds_a_hand_started_session_to_the_gate() {
    let ws = Workspace::new("stop-hook");
    agent_config(&ws, &["preset = \"claude\"", "stop_hook_blocks = 2"], "");
    // The default stop_hook_blocks line follows; keep only ours.
    let cfg = ws.root.join(".warden/warden.toml");
    let t = std::fs::read_to_string(&cfg).unwrap();
    let t = t.replacen("stop_hook_blocks = 3", "", 1);
    std::fs::write(&cfg, t).unwrap();
    ws.ok(&["task", "create", "a", "--agent", "do it"]);
    ws.ok(&["task", "update", "a", "--status", "working"]);
    // A worktree as `warden run` makes it: a directory with the TASK.md link.
    let wt = ws.root.join(".warden/worktrees/a");
    std::fs::create_dir_all(wt.join(".warden")).unwrap();
    std::os::unix::fs::symlink(
        ws.root.join(".warden/tasks/a/TASK.md"),
        wt.join(".warden/TASK.md"),
    )
    .unwrap();
    let hook = |cwd: &Path| {
        let input = json!({"session_id": "by-hand-1", "cwd": cwd, "hook_event_name": "Stop",
                           "stop_hook_active": false});
        let mut c = crate::common::command(Path::new("/"));
        c.args(["hook", "stop"]).stdin(std::process::Stdio::piped());
        c.stdout(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        assert_eq!(code(&o), 0, "{}", describe(&["hook", "stop"], &o));
        text(&o.stdout)
    };
    let first: Value = serde_json::from_str(&hook(&wt)).unwrap();
    assert_eq!(first["decision"], "block", "{first}");
    let reason = first["reason"].as_str().unwrap();
    assert!(
        reason.contains("## Handoff") && reason.contains("task complete a"),
        "{reason}"
    );
    assert!(reason.contains("1 of them"), "{reason}");
    let second: Value = serde_json::from_str(&hook(&wt)).unwrap();
    assert!(second["reason"].as_str().unwrap().contains("2 of them"));
    assert_eq!(hook(&wt), "", "after its bound it lets the session end");
    let log = std::fs::read_to_string(ws.root.join(".warden/tasks/a/output.log")).unwrap();
    assert!(
        log.contains("let it end without its ## Handoff after 2 block(s)"),
        "{log}"
    );
    // Outside any Warden task the hook has nothing to say.
    assert_eq!(hook(Path::new("/tmp")), "");

    // With the Handoff written, it lets the agent stop; its session end is reported.
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(ws.root.join(".warden/tasks/a/TASK.md"))
            .unwrap();
        f.write_all(b"\n## Handoff\nDONE: all\n").unwrap();
    }
    std::fs::remove_file(ws.root.join(".warden/tasks/a/agent/stop-blocks-by-hand-1")).unwrap();
    assert_eq!(hook(&wt), "");
    let o = ws.run_stdin(
        &["hook", "session-end"],
        &json!({"session_id": "by-hand-1", "cwd": wt, "reason": "logout"}).to_string(),
    );
    assert_eq!(code(&o), 0, "{}", describe(&["hook", "session-end"], &o));
    assert_eq!(ws.status("a"), "agent-review");
    let exited = ws
        .history()
        .into_iter()
        .find(|e| e["type"] == "session.exited")
        .unwrap();
    assert!(
        exited["reason"]
            .as_str()
            .unwrap()
            .contains("harness session end: logout"),
        "{exited}"
    );
    assert_eq!(exited["actor"], "runner", "{exited}");
}

/// The Claude settings file `hooks install` writes is kept out of git where it is
/// written, at the repository's top or in a subdirectory of it (the line was anchored at
/// the top, so a subdirectory's file showed up as untracked, ready to be committed).
#[test]
fn hooks_install_keeps_its_settings_file_out_of_git_in_a_subdirectory() {
    let ws = Workspace::bare("hooks-sub");
    let root = &ws.root;
    crate::run_e2e::git(root, &["init", "-q", "-b", "main"]);
    let pkg = root.join("pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    for dir in [root.as_path(), pkg.as_path()] {
        let o = crate::common::command(dir)
            .args(["hooks", "install", "claude"])
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "{}", describe(&["hooks", "install"], &o));
        assert!(dir.join(".claude/settings.local.json").is_file());
    }
    let untracked = crate::run_e2e::git(root, &["status", "--porcelain", "--untracked-files=all"]);
    assert_eq!(untracked, "", "{untracked}");
    let exclude = std::fs::read_to_string(root.join(".git/info/exclude")).unwrap();
    assert!(
        exclude.lines().any(|l| l == "/.claude/settings.local.json"),
        "{exclude}"
    );
    assert!(
        exclude
            .lines()
            .any(|l| l == "/pkg/.claude/settings.local.json"),
        "{exclude}"
    );
}

#[test]
fn hooks_install_keeps_what_is_there_and_adds_once() {
    let ws = Workspace::new("hooks-install");
    let home = ws.root.join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("hooks.json"),
        r#"{"description": "mine", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "my-own"}]}]}}"#,
    )
    .unwrap();
    let home_s = home.to_str().unwrap();
    let o = ws.run_env(&["hooks", "install", "codex"], &[("CODEX_HOME", home_s)]);
    assert_eq!(code(&o), 0, "{}", describe(&["hooks", "install"], &o));
    assert!(text(&o.stdout).contains("trust"), "{}", text(&o.stdout));
    // A mistyped --path is refused, and nothing is made there.
    let o = ws.expect(&["hooks", "install", "claude", "--path", "no-such-dir"], 2);
    assert!(
        err_line(&o).contains("give --path a project directory that exists"),
        "{}",
        err_line(&o)
    );
    assert!(!ws.root.join("no-such-dir").exists());
    let o = ws.run_env(
        &["hooks", "install", "codex", "--path", "."],
        &[("CODEX_HOME", home_s)],
    );
    assert_eq!(code(&o), 2, "{}", describe(&["hooks", "install"], &o));
    assert!(
        err_line(&o).contains("set CODEX_HOME instead"),
        "{}",
        err_line(&o)
    );
    ws.ok(&["hooks", "install", "claude"]);
    let o = ws.run_env(&["hooks", "install", "codex"], &[("CODEX_HOME", home_s)]);
    assert!(
        text(&o.stdout).contains("already there"),
        "{}",
        text(&o.stdout)
    );
    let j: Value =
        serde_json::from_slice(&std::fs::read(home.join("hooks.json")).unwrap()).unwrap();
    assert_eq!(j["description"], "mine");
    let stop = j["hooks"]["Stop"].as_array().unwrap();
    assert_eq!(stop.len(), 2, "{j}");
    assert_eq!(stop[0]["hooks"][0]["command"], "my-own");
    assert!(
        stop[1]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .ends_with("hook stop")
    );
    assert_eq!(j["hooks"]["SessionEnd"].as_array().unwrap().len(), 1);
    let claude: Value = serde_json::from_slice(
        &std::fs::read(ws.root.join(".claude/settings.local.json")).unwrap(),
    )
    .unwrap();
    assert!(
        claude["hooks"]["SessionEnd"][0]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .ends_with("hook session-end")
    );
    // A file that is not JSON is left alone, with a one-line error.
    std::fs::write(home.join("hooks.json"), "not json").unwrap();
    let o = ws.run_env(&["hooks", "install", "codex"], &[("CODEX_HOME", home_s)]);
    assert_eq!(code(&o), 2, "{}", describe(&["hooks", "install"], &o));
    assert!(
        err_line(&o).contains("is not valid JSON"),
        "{}",
        err_line(&o)
    );
    assert_eq!(
        std::fs::read_to_string(home.join("hooks.json")).unwrap(),
        "not json"
    );
}

/// A settings file linked in from elsewhere (a dotfiles repository) is changed where it
/// lives, its mode kept: the link stays a link, a private file stays private.
#[test]
fn hooks_install_writes_through_a_link_and_keeps_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new("hooks-link");
    let home = ws.root.join("codex-home");
    let dotfiles = ws.root.join("dotfiles");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&dotfiles).unwrap();
    let real = dotfiles.join("hooks.json");
    std::fs::write(&real, r#"{"description": "mine"}"#).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = home.join("hooks.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let home_s = home.to_str().unwrap();
    let o = ws.run_env(&["hooks", "install", "codex"], &[("CODEX_HOME", home_s)]);
    assert_eq!(code(&o), 0, "{}", describe(&["hooks", "install"], &o));
    assert!(
        text(&o.stdout).starts_with(&format!("{}:", real.canonicalize().unwrap().display())),
        "names the file it changed: {}",
        text(&o.stdout)
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link was replaced by a file"
    );
    let j: Value = serde_json::from_slice(&std::fs::read(&real).unwrap()).unwrap();
    assert_eq!(j["description"], "mine");
    assert_eq!(j["hooks"]["Stop"].as_array().unwrap().len(), 1, "{j}");
    let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
    // Whatever the mode, the umask included (0666 came back 0644).
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::write(&real, r#"{"description": "mine"}"#).unwrap();
    ws.run_env(&["hooks", "install", "codex"], &[("CODEX_HOME", home_s)]);
    let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666, "{mode:o}");
    // A link to nothing is refused, and left as it is.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(dotfiles.join("gone.json"), &link).unwrap();
    let o = ws.run_env(&["hooks", "install", "codex"], &[("CODEX_HOME", home_s)]);
    assert_eq!(code(&o), 2, "{}", describe(&["hooks", "install"], &o));
    assert!(
        err_line(&o).contains("fix or remove the link"),
        "{}",
        err_line(&o)
    );
    assert!(!dotfiles.join("gone.json").exists());
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// A task's own preset travels through plan files, and an agent's edit of it through
/// `plan apply` is restored and noted like any field a person owns.
#[test]
fn presets_in_plan_files() {
    let ws = Workspace::new("plan-preset");
    let plan = ws.root.join("plan.json");
    std::fs::write(
        &plan,
        r#"{"tasks": [{"id": "a", "agent": "x", "preset": "codex"}, {"id": "b", "agent": "y"}]}"#,
    )
    .unwrap();
    ws.ok(&["plan", "import", plan.to_str().unwrap()]);
    assert_eq!(ws.show("a")["preset"], "codex");
    assert!(ws.show("b").get("preset").is_none());
    let export: Value = ws.json(&["plan", "export"]);
    assert_eq!(export["tasks"][0]["preset"], "codex", "{export}");
    let mut edited = export.clone();
    edited["tasks"][0]["preset"] = json!("aider");
    std::fs::write(&plan, edited.to_string()).unwrap();
    let j = ws.json(&[
        "plan",
        "apply",
        plan.to_str().unwrap(),
        "--selected",
        "b",
        "--status",
        "retry",
    ]);
    assert_eq!(ws.show("a")["preset"], "codex", "restored: {j}");
    let noted = ws
        .history()
        .into_iter()
        .filter(|e| e["type"] == "tamper.ignored" && e["task"] == "a")
        .map(|e| e.to_string())
        .collect::<String>();
    assert!(noted.contains("preset"), "noted: {noted}");
}

/// An agent that makes its TASK.md unreadable (2 MB pasted into it, or a FIFO in its
/// place) does not wedge its task. The session's end is recorded as a crash without
/// evidence whose reason names the file's problem, the run goes idle, and a gate refuses
/// with that problem. The end used to be refused, so the task showed a live session for
/// ever, `warden status` needed nothing of the person, and `run --until-idle` never
/// returned.
#[test]
fn an_agent_that_breaks_its_task_file_does_not_wedge_its_task() {
    for (name, script, problem) in [
        (
            "huge",
            "head -c 2000000 /dev/zero | tr '\\000' x >> \"$WARDEN_TASK_FILE\"",
            "bytes, over the 1 MiB limit; shorten it",
        ),
        (
            "fifo",
            "rm -f \"$WARDEN_TASK_FILE\"; mkfifo \"$WARDEN_TASK_FILE\"",
            "is not a regular file; replace it with a regular file",
        ),
    ] {
        let ws = Workspace::new(&format!("broken-task-file-{name}"));
        agent_config(
            &ws,
            &[
                "preset = \"custom\"",
                &format!("command = [\"sh\", \"-c\", {}]", json!(script)),
            ],
            "",
        );
        ws.ok(&["task", "create", "a", "--agent", "do it"]);
        let run = ws
            .cmd()
            .args(["run", "--until-idle"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let o = crate::hostile::finish(run, std::time::Duration::from_secs(60), name);
        assert_eq!(code(&o), 7, "{name}: {}", describe(&["run"], &o));
        let crashed: Vec<Value> = ws
            .history()
            .into_iter()
            .filter(|e| e["type"] == "agent.crashed")
            .collect();
        assert_eq!(crashed.len(), 1, "{name}: {crashed:?}");
        let reason = crashed[0]["reason"].as_str().unwrap_or("");
        assert!(
            reason.contains("without ## Handoff (no evidence read: ") && reason.contains(problem),
            "{name}: {reason}"
        );
        let status = ws.json(&["status"]);
        assert!(
            status["needs_you"].to_string().contains("\"a\""),
            "{name}: {status:#}"
        );
        let o = ws.expect(&["task", "update", "a", "--status", "agent-review"], 1);
        assert!(err_line(&o).contains(problem), "{name}: {}", err_line(&o));
    }
}
