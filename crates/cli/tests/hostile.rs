//! Hostile input, through the real binary and the real MCP server: deep and wide trees,
//! ids git cannot branch on, oversized texts, devices and FIFOs where files belong, odd
//! project paths, concurrent idempotent requests, tampered stores, an agent reaching for
//! what is not its own, and messages too large to read. Each case says what Warden
//! answers (the one-line error and the documented exit code) and checks that nothing
//! stored changed. RELIABILITY.md lists them.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Workspace, code, command, describe, err_line, text};

/// A chain of `n` tasks, each the parent of the next.
fn chain(n: usize) -> String {
    let tasks: Vec<Value> = (0..n)
        .map(|i| match i {
            0 => json!({"id": "n0"}),
            _ => json!({"id": format!("n{i}"), "parent": format!("n{}", i - 1)}),
        })
        .collect();
    json!({ "tasks": tasks }).to_string()
}

/// The stored tasks and events, to show nothing changed.
fn snapshot(ws: &Workspace) -> (Vec<Value>, usize) {
    (ws.tasks(), ws.history().len())
}

/// `warden run --until-idle` from `c`, which must end within a minute and exit 0.
fn until_idle(mut c: Command) -> std::process::Output {
    let child = c
        .args(["run", "--until-idle"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = finish(child, Duration::from_secs(60), "warden run --until-idle");
    assert_eq!(code(&o), 0, "{}", describe(&["run", "--until-idle"], &o));
    o
}

/// Waits for a child with a deadline; a process that blocks (on a FIFO, say) fails the
/// test instead of hanging it.
/// The process id a child writes to `path` (`echo $$ > path`), once it is there whole:
/// the shell's `>` makes the file before `echo` fills it.
pub(crate) fn pid_written(path: &std::path::Path, what: &str) -> u32 {
    let start = Instant::now();
    loop {
        if let Ok(p) = std::fs::read_to_string(path)
            && let Ok(p) = p.trim().parse::<u32>()
        {
            return p;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what} never wrote {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn finish(mut child: Child, limit: Duration, what: &str) -> std::process::Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("{what} still ran after {limit:?}: {}", text(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_tree_deeper_than_the_limit_is_refused_before_anything_is_stored() {
    let ws = Workspace::new("deep");
    ws.ok(&["state", "--write"]);
    let state_before = std::fs::read_to_string(ws.path(".warden/STATE.md")).unwrap();
    ws.write("deep.json", chain(40_000));
    let o = ws.expect(&["plan", "import", "deep.json"], 1);
    assert_eq!(
        err_line(&o),
        "refused: task n50 would sit 51 levels deep; Warden keeps plans to 50 levels (a chain of parents that long is almost always a mistake): give it a parent higher up"
    );
    assert!(ws.tasks().is_empty());
    assert_eq!(
        std::fs::read_to_string(ws.path(".warden/STATE.md")).unwrap(),
        state_before
    );
    // 50 levels is a plan; every view of it works (its JSON nests within the 128 levels
    // strict parsers such as serde_json take).
    ws.write("ok.json", chain(50));
    ws.ok(&["plan", "import", "ok.json"]);
    let shown = text(&ws.ok(&["plan", "show"]).stdout);
    assert!(shown.contains("n49 [pending]"), "{shown}");
    let mut node = ws.json(&["plan", "show"]);
    let mut depth = 0;
    while let Some(next) = node
        .get("roots")
        .and_then(|r| r.get(0))
        .or_else(|| node.get("children").and_then(|c| c.get(0)))
        .or_else(|| node.get(0))
        .cloned()
    {
        node = next;
        depth += 1;
    }
    assert!(depth >= 50, "the JSON nests every level: {depth}");
    ws.ok(&["state"]);
    ws.ok(&["plan", "graph"]);
    ws.ok(&["plan", "graph", "--format", "dot"]);
    ws.check_ok();
    // One more level, by create or by apply, is refused.
    let before = snapshot(&ws);
    let o = ws.expect(&["task", "create", "n50", "--parent", "n49"], 1);
    assert!(
        err_line(&o).contains("task n50 would sit 51 levels deep"),
        "{o:?}"
    );
    assert_eq!(snapshot(&ws), before);
    let mut tree = ws.json(&["plan", "export"]);
    tree["tasks"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"id": "n50", "parent": "n49"}));
    ws.write("deeper.json", tree.to_string());
    let before = snapshot(&ws);
    let o = ws.expect(
        &[
            "plan",
            "apply",
            "deeper.json",
            "--selected",
            "n49",
            "--status",
            "decomposed",
        ],
        1,
    );
    assert!(
        err_line(&o).contains("task n50 would sit 51 levels deep"),
        "{o:?}"
    );
    assert_eq!(snapshot(&ws), before);
}

#[test]
fn ids_git_cannot_branch_on_are_refused() {
    let ws = Workspace::new("ids");
    for (id, why) in [
        ("x.lock", "it ends with \".lock\""),
        ("a..b", "it contains \"..\""),
        ("y.", "it ends with \".\""),
    ] {
        let o = ws.expect(&["task", "create", id], 2);
        assert_eq!(
            err_line(&o),
            format!("error: task id {id} cannot name a git branch ({why}); choose another id")
        );
    }
    ws.write(
        "plan.json",
        r#"{"tasks": [{"id": "ok"}, {"id": "x.lock"}, {"id": "a..b"}, {"id": "y."}, {"id": "z", "max_attempts": 0}]}"#,
    );
    let o = ws.expect(&["plan", "import", "plan.json"], 1);
    let all = text(&o.stderr);
    for id in ["x.lock", "a..b", "y."] {
        assert_eq!(
            all.matches(&format!("task id {id} cannot name a git branch"))
                .count(),
            1,
            "each problem is named once: {all}"
        );
    }
    assert_eq!(all.matches("task z has max_attempts 0").count(), 1, "{all}");
    assert!(all.contains("(4 problems)"), "{all}");
    assert!(ws.tasks().is_empty(), "nothing imported");
    // Fine ids with dots still work.
    ws.ok(&["task", "create", "v1.2-release"]);
}

#[test]
fn texts_are_bounded_on_write_as_they_are_on_read() {
    let ws = Workspace::new("sizes");
    ws.write("big.md", "x".repeat(600 * 1024));
    let o = ws.expect(&["task", "create", "big", "--body-file", "big.md"], 1);
    assert!(
        err_line(&o).contains("the body is 614400 bytes, over the 512 KiB limit; shorten it"),
        "{o:?}"
    );
    let body = "y".repeat(3_000_000);
    ws.write(
        "plan.json",
        json!({"tasks": [{"id": "huge", "body": body}]}).to_string(),
    );
    ws.expect(&["plan", "import", "plan.json"], 1);
    assert!(ws.tasks().is_empty());
    // Just under the limit: created, and every later change reads its TASK.md back.
    ws.write("fits.md", "z".repeat(500 * 1024));
    ws.ok(&["task", "create", "fits", "--body-file", "fits.md"]);
    ws.ok(&["task", "update", "fits", "--status", "working"]);
    ws.handoff("fits");
    ws.ok(&["task", "complete", "fits"]);
    ws.check_ok();
}

/// A NUL character in a task's text or a memory item is refused before anything is
/// stored, on every path that stores one (`plan import`, `memory merge`, `plan apply`,
/// which now also applies the size limits `plan import` does). SQLite would keep it,
/// PostgreSQL's text refuses it (that was a storage error, exit 5), and a prompt that
/// carries it cannot be an agent's argument. A request id is printable and at most 200
/// characters, and a transition's reason at most 4,000, as a rejection's is. `env` names
/// the store (PostgreSQL in `pg_runners`).
pub(crate) fn unstorable_texts_are_refused_before_anything_is_stored(
    ws: &Workspace,
    env: &[(&str, &str)],
) {
    let run = |args: &[&str]| ws.run_env(args, env);
    let refused = |args: &[&str], what: &str| {
        let o = run(args);
        assert_eq!(code(&o), 1, "{}", describe(args, &o));
        let line = err_line(&o);
        assert!(line.contains(what), "{line}");
        assert_eq!(text(&o.stderr).lines().count(), 1, "{o:?}");
    };
    let stored = || {
        let list = run(&["--json", "task", "list"]);
        let history = run(&["--json", "history"]);
        let memory = run(&["--json", "memory", "show", "m"]);
        (
            text(&list.stdout),
            text(&history.stdout),
            text(&memory.stdout),
        )
    };
    assert_eq!(code(&run(&["task", "create", "m"])), 0);
    let before = stored();
    ws.write(
        "nul.json",
        r#"{"tasks": [{"id": "n1", "title": "a\u0000b"}]}"#,
    );
    refused(
        &["plan", "import", "nul.json"],
        "task n1: the title contains a NUL character (\\u0000)",
    );
    // A title is one line of plain text: a line break would split every table's row,
    // an escape would reach the terminal of whoever lists the tasks.
    ws.write(
        "lines.json",
        r#"{"tasks": [{"id": "n2", "title": "two\nlines"}]}"#,
    );
    refused(
        &["plan", "import", "lines.json"],
        "task n2: the title contains the control character '\\n'; a title is one line of plain text: put the rest in the body",
    );
    refused(
        &["task", "create", "n3", "--title", "e\u{1b}[31mred"],
        "task n3: the title contains the control character '\\u{1b}'",
    );
    refused(
        &["task", "edit", "m", "--title", "a\tb"],
        "task m: the title contains the control character '\\t'",
    );
    // `sh -c ''` succeeds: an empty postcheck would be a guard that always passes.
    ws.write(
        "empty.json",
        r#"{"tasks": [{"id": "n6", "work": "make", "postchecks": "  "}]}"#,
    );
    refused(
        &["plan", "import", "empty.json"],
        "task n6: the postchecks are an empty shell command, which always succeeds; give a command, or leave postchecks out",
    );
    refused(
        &["task", "create", "n7", "--work", ""],
        "task n7: the work is an empty shell command",
    );
    // Only a comment is as empty to `sh`.
    refused(
        &[
            "task",
            "create",
            "n11",
            "--work",
            "make",
            "--postchecks",
            "# run the tests\n  ",
        ],
        "task n11: the postchecks are only a comment (\"# run the tests\"), which runs nothing and always succeeds",
    );
    refused(
        &["task", "create", "n8", "--agent", " "],
        "task n8: the agent instructions are empty; say what the agent should do",
    );
    // A bidirectional-text control reorders what a reader sees after it.
    ws.write(
        "bidi.json",
        r#"{"tasks": [{"id": "n4", "title": "safe \u202e)lmth.exe(\u202c"}]}"#,
    );
    refused(
        &["plan", "import", "bidi.json"],
        "task n4: the title contains the control character '\\u{202e}'",
    );
    refused(
        &["task", "create", "n5", "--title", "a\u{2066}b"],
        "task n5: the title contains the control character '\\u{2066}'",
    );
    refused(
        &["task", "create", "n9", "--title", "a\u{61c}b"],
        "task n9: the title contains the control character '\\u{61c}'",
    );
    refused(
        &["task", "create", "n10", "--title", "a\u{2028}b"],
        "task n10: the title contains the control character '\\u{2028}'",
    );
    ws.write("delta.json", r#"{"decisions": ["fine", "a\u0000"]}"#);
    refused(
        &["memory", "merge", "m", "delta.json"],
        "the memory delta's decisions[1] contains a NUL character (\\u0000); remove it",
    );
    let export = run(&["--json", "plan", "export"]);
    let tree: Value = serde_json::from_slice(&export.stdout).unwrap();
    let mut edited = tree.clone();
    edited["tasks"][0]["title"] = json!("m\u{0}");
    ws.write("edited.json", edited.to_string());
    refused(
        &[
            "plan",
            "apply",
            "edited.json",
            "--selected",
            "m",
            "--status",
            "retry",
        ],
        "task m: the title contains a NUL character",
    );
    let mut grown = tree;
    grown["tasks"].as_array_mut().unwrap().push(json!({
        "id": "big", "parent": "m", "title": "big", "agent": "a".repeat(200 * 1024)
    }));
    ws.write("grown.json", grown.to_string());
    refused(
        &[
            "plan",
            "apply",
            "grown.json",
            "--selected",
            "m",
            "--status",
            "decomposed",
        ],
        "task big: the agent instructions are 204800 bytes, over the 128 KiB limit",
    );
    let usage = |args: &[&str], what: &str| {
        let o = run(args);
        assert_eq!(code(&o), 2, "{}", describe(args, &o));
        assert!(err_line(&o).contains(what), "{}", err_line(&o));
        assert_eq!(text(&o.stderr).lines().count(), 1, "{o:?}");
    };
    let update = ["task", "update", "m", "--status", "working"];
    usage(
        &[&update[..], &["--request-id", "a\tb"]].concat(),
        "the request id holds a control character; use printable characters only",
    );
    let long_id = "k".repeat(201);
    usage(
        &[&update[..], &["--request-id", long_id.as_str()]].concat(),
        "the request id is 201 characters; keep it to 200",
    );
    let long_reason = "r".repeat(4001);
    usage(
        &[&update[..], &["--reason", long_reason.as_str()]].concat(),
        "the reason is 4001 characters; keep it under 4000",
    );
    // An ESC or a BEL in a reason would drive the terminal of whoever reads the history.
    usage(
        &[&update[..], &["--reason", "ok\u{1b}]0;pwned\u{7}"]].concat(),
        "the reason contains a control character (U+001B); remove it",
    );
    usage(
        &[&update[..], &["--reason", "looks fine \u{202e}LIAF"]].concat(),
        "the reason contains a control character (U+202E); remove it",
    );
    usage(
        &["task", "exited", "m", "--session", "a\tb"],
        "the session id holds a control character; use printable characters only",
    );
    // A reason with a NUL arrives as JSON, from MCP (or the web console).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let c = crate::mcp::connect(ws, &[], env).await;
        for (tool, args) in [
            ("task_cancel", json!({"id": "m", "reason": "a\u{0}b"})),
            (
                "task_update_status",
                json!({"id": "m", "status": "working", "reason": "\u{0}"}),
            ),
            ("task_reject", json!({"id": "m", "reason": "no\u{0}"})),
        ] {
            let r = crate::mcp::call(&c, tool, args).await;
            assert_eq!(
                crate::mcp::refusal(&r),
                "error: the reason contains a NUL character (\\u0000); remove it",
                "{tool}"
            );
        }
        c.cancel().await.unwrap();
    });
    assert_eq!(stored(), before, "nothing stored changed");
    // A session's end is recorded whatever its reporter says of it: a harness's hook
    // input with a NUL and 10,000 characters in its reason, and an unfit session id
    // (which is then not stored), is kept, cut and made storable.
    let hook_env = [env, &[("WARDEN_TASK_ID", "m")]].concat();
    let input = json!({
        "session_id": format!("s{}", "\u{0}".repeat(3)),
        "reason": format!("x\u{0}\u{1b}{}", "y".repeat(10_000)),
    });
    let o = ws.run_stdin_env(&["hook", "session-end"], &input.to_string(), &hook_env);
    assert_eq!(code(&o), 0, "{}", describe(&["hook", "session-end"], &o));
    let ended: Vec<Value> = text(&run(&["--json", "history"]).stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "session.exited")
        .collect();
    assert_eq!(ended.len(), 1, "{ended:#?}");
    let reason = ended[0]["data"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("harness session end: x\u{FFFD}\u{FFFD}yyy") && reason.ends_with("y…"),
        "{reason:.80}"
    );
    assert_eq!(reason.chars().count(), 4000);
    assert!(ended[0]["data"]["session"].is_null(), "{:#}", ended[0]);
    // At the limits: applied.
    let fits = "k".repeat(200);
    let reason = "r".repeat(4000);
    let args = [
        &update[..],
        &["--request-id", fits.as_str(), "--reason", reason.as_str()],
    ]
    .concat();
    let o = run(&args);
    assert_eq!(code(&o), 0, "{}", describe(&args, &o));
    // A check's output is kept as it came, but for a NUL, which becomes U+FFFD: the tail
    // is shown to people and goes into the next attempt's prompt.
    let create = [
        "task",
        "create",
        "g",
        "--work",
        "true",
        "--postchecks",
        "printf 'a\\000b'; exit 1",
        "--max-attempts",
        "1",
    ];
    assert_eq!(code(&run(&create)), 0);
    assert_eq!(
        code(&run(&["task", "cancel", "m"])),
        0,
        "m has no work to run"
    );
    let o = run(&["run", "--until-idle", "--max-parallel", "1"]);
    assert_eq!(code(&o), 7, "{}", describe(&["run"], &o));
    let g: Value = serde_json::from_slice(&run(&["--json", "task", "show", "g"]).stdout).unwrap();
    assert_eq!(g["status"], "stuck", "{g:#}");
    let tails: Vec<String> = text(&run(&["--json", "history"]).stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["task"] == "g" && e["type"] == "guard.ran")
        .map(|e| e["data"]["output_tail"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(tails, ["a\u{FFFD}b\n(exit code 1)"]);
}

#[test]
fn unstorable_texts_are_refused_on_sqlite() {
    let ws = Workspace::new("unstorable");
    unstorable_texts_are_refused_before_anything_is_stored(&ws, &[]);
}

/// `task retry` with new work or checks holds them to what `task create` takes: a
/// 40,000-byte shell command (the limit is 32 KiB) was accepted and the task restarted.
#[test]
fn a_retry_with_oversized_work_is_refused_and_the_task_stays_stuck() {
    let ws = Workspace::new("retry-size");
    ws.stuck_by_its_postchecks("s");
    let before = snapshot(&ws);
    let work = "x".repeat(40_000);
    for flag in ["--work", "--postchecks"] {
        let o = ws.expect(&["task", "retry", "s", flag, &work], 1);
        assert!(
            err_line(&o).contains("bytes, over the 32 KiB limit; shorten it"),
            "{o:?}"
        );
    }
    assert_eq!(snapshot(&ws), before, "nothing stored changed");
    // Within the limit it restarts.
    ws.ok(&["task", "retry", "s", "--postchecks", "true"]);
    assert_eq!(ws.status("s"), "working");
}

/// A daemon a check starts in a session of its own (`setsid`), outside the check's
/// process group, ends with the check, as one a session's work starts ends with the
/// session. Before, it ran on after the task was done.
#[test]
fn a_daemon_a_check_leaves_in_its_own_session_ends_with_the_check() {
    let ws = Workspace::new("check-daemon");
    for (id, phase) in [("pre", "--prechecks"), ("post", "--postchecks")] {
        let daemon = format!(
            r#"setsid sh -c 'echo $$ > "$WARDEN_DIR/{id}.pid"; exec sleep 600' </dev/null >/dev/null 2>&1 & while [ ! -s "$WARDEN_DIR/{id}.pid" ]; do sleep 0.01; done; true"#
        );
        ws.ok(&["task", "create", id, phase, &daemon, "--work", "true"]);
    }
    until_idle(ws.cmd());
    for id in ["pre", "post"] {
        assert_eq!(ws.status(id), "done");
        let pid: u32 = std::fs::read_to_string(ws.path(&format!("{id}.pid")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        crate::supervisor::wait_gone(pid, 20);
    }
}

/// A person's cancel during a direct task's postchecks stops them, and the run says so:
/// no failure, no retry. Before, it reported "the postchecks could not be started …
/// trying again in 1 s".
#[test]
fn a_cancel_during_postchecks_is_said_as_a_stop_not_a_failure() {
    let ws = Workspace::new("cancel-postchecks");
    ws.ok(&[
        "task",
        "create",
        "p",
        "--work",
        "true",
        "--postchecks",
        "sleep 600",
    ]);
    let run = ws
        .cmd()
        .args(["run", "--until-idle"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let note = ws.path(".warden/tasks/p/check.pid");
    let start = Instant::now();
    while !std::fs::read_to_string(&note).is_ok_and(|n| n.contains("postchecks")) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the postchecks never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    ws.ok(&["task", "cancel", "p"]);
    let o = finish(run, Duration::from_secs(60), "warden run");
    let said = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert!(
        said.contains("p: postchecks stopped: a person is cancelling the task"),
        "{said}"
    );
    assert!(!said.contains("could not be started"), "{said}");
    assert_eq!(ws.status("p"), "cancelled");
    assert_eq!(ws.show("p")["attempts"], 0);
}

/// A run stopped by a signal stops the checks it runs (sessions go on, to be adopted):
/// a check left running was an orphan whose outcome nobody recorded. The next run runs
/// the phase again.
#[test]
fn a_run_stopped_by_a_signal_stops_its_checks() {
    for sig in ["INT", "TERM"] {
        let ws = Workspace::new("run-signal-check");
        let pid_file = ws.root.join("check.pid");
        // Long the first time, passing at once the next.
        let pre = format!(
            "[ -e '{0}.ran' ] && exit 0; touch '{0}.ran'; echo $$ > '{0}'; exec sleep 600",
            pid_file.display()
        );
        ws.ok(&["task", "create", "t", "--prechecks", &pre, "--work", "true"]);
        let mut run = ws
            .cmd()
            .args(["run", "--until-idle"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = pid_written(&pid_file, "the check");
        let sent = Command::new("kill")
            .args([&format!("-{sig}"), &run.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let status = run.wait().unwrap();
        assert_eq!(status.code(), Some(128 + signal_number(sig)), "{sig}");
        // Gone with the run, not after its 600 s.
        crate::supervisor::wait_gone(pid, 20);
        // The next run runs it again (and it is gone at once this time).
        until_idle(ws.cmd());
        assert_eq!(ws.status("t"), "done", "{sig}");
    }
}

/// A store file an agent deleted under the run does not come back for that process: the
/// run ends at once, exit 5, saying so. Before, it said "trying again" for five minutes.
#[test]
fn a_store_deleted_under_the_run_ends_it_at_once() {
    let ws = Workspace::new("store-deleted");
    ws.ok(&[
        "task",
        "create",
        "nuke",
        "--work",
        r#"rm -f "$WARDEN_DIR"/.warden/warden.db*; echo nuked"#,
    ]);
    let o = ws.cmd().args(["run", "--until-idle"]).output().unwrap();
    assert_eq!(code(&o), 5, "{}", describe(&["run", "--until-idle"], &o));
    let said = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert!(
        said.contains("was removed since this process opened it"),
        "{said}"
    );
    assert!(!said.contains("trying again"), "{said}");
}

/// A check that leaves a process running (a server started with `&`, say) ends with its
/// own process, and what it left in its process group is killed: the leftover held the
/// check's output pipe, and the run waited on it for as long as it lived.
#[test]
fn a_check_that_leaves_a_process_behind_does_not_hold_up_the_run() {
    let ws = Workspace::new("leftover");
    ws.ok(&[
        "task",
        "create",
        "w",
        "--work",
        "true",
        "--postchecks",
        r#"sleep 600 & echo $! > "$WARDEN_DIR/left.pid"; true"#,
    ]);
    until_idle(ws.cmd());
    assert_eq!(ws.status("w"), "done");
    let pid = std::fs::read_to_string(ws.path("left.pid")).unwrap();
    // Killed: it ends (a zombie its new parent has not reaped yet counts as ended).
    crate::supervisor::wait_gone(pid.trim().parse().unwrap(), 30);
}

#[test]
fn devices_and_fifos_are_refused_at_once() {
    let ws = Workspace::new("devices");
    ws.create("t", &[]);
    let fifo = ws.path("fifo");
    let st = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    let fifo = fifo.to_str().unwrap().to_owned();
    for args in [
        vec!["task", "create", "z", "--body-file", "/dev/zero"],
        vec!["task", "create", "z", "--body-file", fifo.as_str()],
        vec!["plan", "import", "/dev/zero"],
        vec!["plan", "import", fifo.as_str()],
        vec!["memory", "merge", "t", "/dev/zero"],
        vec!["memory", "merge", "t", fifo.as_str()],
    ] {
        let child = ws
            .cmd()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = finish(child, Duration::from_secs(20), &args.join(" "));
        assert_eq!(code(&o), 1, "{}", describe(&args, &o));
        let line = err_line(&o);
        assert!(
            line.contains("is a device") || line.contains("is a FIFO"),
            "{line}"
        );
    }
    assert_eq!(ws.tasks().len(), 1);
}

/// A FIFO an agent plants where Warden keeps a task's lock, the STATE.md lock or a
/// session log held every command that opened it, before any busy timeout applied: a
/// person's cancel, every write once STATE.md is kept, `task peek`, and the session
/// host (the run waited for ever with nothing said). Each is now a one-line error, or a
/// warning where the file is only a view.
#[test]
fn fifos_planted_as_locks_and_logs_hold_up_nothing() {
    let ws = Workspace::new("fifo-locks");
    ws.create("t", &["--work", "echo hi"]);
    ws.ok(&["state", "--write"]);
    let mkfifo = |rel: &str| {
        let p = ws.path(rel);
        let _ = std::fs::remove_file(&p);
        assert!(Command::new("mkfifo").arg(&p).status().unwrap().success());
    };
    let within = |args: &[&str]| {
        let child = ws
            .cmd()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        finish(child, Duration::from_secs(30), &args.join(" "))
    };
    mkfifo(".warden/tasks/t/.lock");
    let o = within(&["task", "cancel", "t"]);
    assert_eq!(code(&o), 5, "{}", describe(&["task", "cancel", "t"], &o));
    assert!(
        err_line(&o).ends_with(
            ".warden/tasks/t/.lock: not a regular file (a FIFO, socket or device was put where Warden keeps a lock); remove it and run the command again"
        ),
        "{}",
        err_line(&o)
    );
    std::fs::remove_file(ws.path(".warden/tasks/t/.lock")).unwrap();
    mkfifo(".warden/state.lock");
    let o = within(&["task", "create", "u", "--work", "true"]);
    assert_eq!(code(&o), 0, "{}", describe(&["task", "create", "u"], &o));
    assert!(text(&o.stderr).contains("STATE.md not updated"), "{o:?}");
    std::fs::remove_file(ws.path(".warden/state.lock")).unwrap();
    // The configuration: said what is wrong with it (a FIFO read for ever through
    // `--dir`; found otherwise, "no Warden workspace … run `warden init`").
    let toml = std::fs::read(ws.path(".warden/warden.toml")).unwrap();
    mkfifo(".warden/warden.toml");
    for args in [&["task", "list"][..], &["--dir", ".", "task", "list"][..]] {
        let o = within(args);
        assert_eq!(code(&o), 2, "{}", describe(args, &o));
        assert_eq!(
            err_line(&o),
            "error: .warden/warden.toml: is not a regular file (a directory, FIFO or device is there) but must hold the configuration; fix the file (see `warden init` for the defaults)"
        );
    }
    std::fs::remove_file(ws.path(".warden/warden.toml")).unwrap();
    std::fs::write(ws.path(".warden/warden.toml"), toml).unwrap();
    mkfifo(".warden/tasks/t/output.log");
    assert_eq!(code(&within(&["task", "peek", "t"])), 0);
    let o = within(&["run", "--until-idle"]);
    assert_eq!(code(&o), 7, "{}", describe(&["run"], &o));
    assert_eq!(ws.status("t"), "stuck");
    assert!(
        ws.show("t")["last_failure"]
            .as_str()
            .unwrap()
            .contains("output.log: not a regular file"),
        "{}",
        ws.show("t")
    ); // A get-shit-done STATE.md: read only as a file (the sync waited on it for ever).
    ws.write(".planning/phases/01-x/01-01-PLAN.md", "# a plan\n");
    mkfifo(".planning/STATE.md");
    let o = within(&["plan", "sync"]);
    assert_eq!(code(&o), 0, "{}", describe(&["plan", "sync"], &o));
    assert!(text(&o.stderr).contains("not a regular file"), "{o:?}");
}

#[test]
fn odd_project_paths_work_end_to_end() {
    use std::os::unix::ffi::OsStrExt;
    let base = crate::common::unique_dir("paths");
    // A path that is not UTF-8 is refused up front, with nothing made.
    let bad = base.join(std::ffi::OsStr::from_bytes(b"bad \xff name"));
    std::fs::create_dir_all(&bad).unwrap();
    let o = command(&bad).arg("init").output().unwrap();
    assert_eq!(code(&o), 2, "{}", describe(&["init"], &o));
    assert!(err_line(&o).contains("is not valid UTF-8"), "{o:?}");
    assert!(!bad.join(".warden").exists());
    // Everything else a directory name may hold works end to end.
    let root = base.join("a b #{pane_id} $HOME 'q' \"d\" é\nnl");
    std::fs::create_dir_all(&root).unwrap();
    let run = |args: &[&str]| {
        let o = command(&root).args(args).output().unwrap();
        assert_eq!(code(&o), 0, "{}", describe(args, &o));
        o
    };
    run(&["init"]);
    run(&["task", "create", "s", "--work", "echo ran > out.txt"]);
    run(&["state", "--write"]);
    until_idle(command(&root));
    assert_eq!(
        std::fs::read_to_string(root.join("out.txt")).unwrap(),
        "ran\n"
    );
    let v: Value = serde_json::from_slice(&run(&["--json", "task", "show", "s"]).stdout).unwrap();
    assert_eq!(v["status"], "done");
    run(&["check"]);
    run(&["state", "verify"]);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn eight_concurrent_requests_with_one_key_get_one_answer() {
    let ws = Workspace::new("idem");
    ws.create("t", &[]);
    ws.create("u", &[]);
    let root = ws.root.clone();
    let outs: Vec<std::process::Output> = (0..8)
        .map(|_| {
            command(&root)
                .args([
                    "--json",
                    "task",
                    "update",
                    "t",
                    "--status",
                    "working",
                    "--request-id",
                    "k1",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect::<Vec<Child>>()
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    // Every caller gets the first answer: the same JSON, exit 0.
    for o in &outs {
        assert_eq!(code(o), 0, "{}", describe(&["task", "update", "t"], o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let first: Value = serde_json::from_slice(&outs[0].stdout).unwrap();
        assert_eq!(v, first);
        assert_eq!(v["status"], "working", "{v}");
    }
    assert_eq!(ws.events("status.changed", Some("t")).len(), 1);
    // The key belongs to that request: on another task it is refused, and u is untouched.
    let before = snapshot(&ws);
    let o = ws.expect(
        &[
            "task",
            "update",
            "u",
            "--status",
            "working",
            "--request-id",
            "k1",
        ],
        2,
    );
    assert!(err_line(&o).contains("k1"), "{o:?}");
    assert_eq!(snapshot(&ws), before);
}

#[test]
fn a_handoff_of_invisible_characters_or_an_empty_fence_is_no_handoff() {
    let ws = Workspace::new("invisible");
    ws.create("t", &[]);
    ws.to("t", "working");
    for content in ["\u{200B}\u{FEFF}\u{2060}", "```\n```", "~~~text\n\n~~~"] {
        ws.add_section("t", "Handoff", content);
        let o = ws.expect(&["task", "complete", "t"], 1);
        assert!(
            err_line(&o).contains("needs a non-empty \"## Handoff\""),
            "{o:?}"
        );
    }
    assert_eq!(ws.status("t"), "working");
}

#[test]
fn a_symlinked_store_is_refused() {
    let ws = Workspace::new("symlink-db");
    ws.create("t", &[]);
    let db = ws.path(".warden/warden.db");
    let elsewhere = ws.path("elsewhere.db");
    std::fs::rename(&db, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &db).unwrap();
    let size = std::fs::metadata(&elsewhere).unwrap().len();
    let o = ws.expect(&["task", "create", "u"], 5);
    assert!(
        err_line(&o).contains("is a symbolic link; Warden opens only its own regular file"),
        "{o:?}"
    );
    assert_eq!(std::fs::metadata(&elsewhere).unwrap().len(), size);
}

#[test]
fn check_compares_every_stored_column_and_respects_old_memory_caps() {
    let ws = Workspace::new("check-columns");
    ws.create("t", &[]);
    for i in 0..5 {
        ws.run_stdin(
            &["memory", "merge", "t", "-"],
            &format!("{{\"history\": [\"h{i}\"]}}"),
        );
    }
    // Raising the caps later is not corruption: each merge replays with its own caps.
    let cfg = ws.path(".warden/warden.toml");
    let toml = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, toml.replace("max_history = 3", "max_history = 10")).unwrap();
    ws.check_ok();
    // A status column edited behind Warden's back is.
    let c = rusqlite::Connection::open(ws.path(".warden/warden.db")).unwrap();
    c.execute("UPDATE tasks SET status = 'done' WHERE id = 't'", [])
        .unwrap();
    drop(c);
    let o = ws.expect(&["check"], 1);
    assert!(
        text(&o.stdout).contains("task t: the status column says done, its body pending"),
        "{}",
        describe(&["check"], &o)
    );
}

/// A busy timeout past what SQLite takes (milliseconds as a C int) is a one-line
/// configuration error, where it was a panic in rusqlite ("too big", exit 101).
#[test]
fn a_busy_timeout_sqlite_cannot_take_is_refused_not_a_panic() {
    let ws = Workspace::new("busy-timeout");
    ws.ok(&["task", "create", "t"]);
    let cfg = ws.path(".warden/warden.toml");
    let toml = std::fs::read_to_string(&cfg).unwrap();
    for (ms, ok) in [
        ("18446744073709551615", false),
        ("2147483648", false),
        ("2147483647", true),
    ] {
        let edited = toml.replace("busy_timeout_ms = 5000", &format!("busy_timeout_ms = {ms}"));
        std::fs::write(&cfg, edited).unwrap();
        if ok {
            ws.ok(&["task", "list"]);
            continue;
        }
        let o = ws.expect(&["task", "list"], 2);
        assert_eq!(
            err_line(&o),
            format!(
                "error: .warden/warden.toml: store.busy_timeout_ms is {ms}; it must be at most 2147483647 (about 24 days); fix the file (see `warden init` for the defaults)"
            ),
            "{o:?}"
        );
        assert_eq!(text(&o.stderr).lines().count(), 1, "{o:?}");
    }
}

/// An `init` whose store cannot be opened leaves no workspace behind pointing at it: a
/// file that is not a SQLite database is named (exit 2) and left as it was; a store
/// SQLite cannot open (its directory is missing) is a storage error (exit 5). Either
/// way there is no `.warden/`, and `init` works once the store is fixed.
#[test]
fn an_init_whose_store_cannot_open_leaves_nothing() {
    let ws = Workspace::bare("init-bad-store");
    ws.write("notes.txt", "my notes\n");
    let o = ws.expect(&["init", "--store", "sqlite:notes.txt"], 2);
    assert!(
        err_line(&o).ends_with(
            "notes.txt is not a SQLite database; give --store a new file, or the store of a Warden workspace"
        ),
        "{o:?}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path("notes.txt")).unwrap(),
        "my notes\n"
    );
    assert!(!ws.path(".warden").exists());
    let o = ws.expect(&["init", "--store", "sqlite:no/such/dir/x.db"], 5);
    assert!(
        err_line(&o).contains("check that the directory exists"),
        "{o:?}"
    );
    assert!(
        !ws.path(".warden").exists(),
        "a half-made workspace was left"
    );
    ws.ok(&["init"]);
    ws.ok(&["task", "create", "t"]);
}

#[test]
fn an_interrupted_init_leaves_nothing_half_made() {
    let ws = Workspace::bare("init-leftover");
    // What an init killed by an earlier Warden left: `.warden/tasks/` and nothing else.
    std::fs::create_dir_all(ws.path(".warden/tasks")).unwrap();
    // And a staging folder of a killed init of this one (its pid is gone).
    std::fs::create_dir_all(ws.path(".warden.init-999999999/tasks")).unwrap();
    ws.ok(&["init"]);
    assert!(ws.path(".warden/warden.toml").is_file());
    assert!(!ws.path(".warden.init-999999999").exists());
    // A real workspace is never replaced.
    let o = ws.expect(&["init"], 1);
    assert!(err_line(&o).contains("already exists"), "{o:?}");
}

#[test]
fn a_file_size_limit_fails_a_write_with_a_message_not_a_signal() {
    let ws = Workspace::new("ulimit");
    ws.write("body.md", "x".repeat(300 * 1024));
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -f 8; exec '{}' task create big --body-file body.md",
            crate::common::bin().display()
        ))
        .current_dir(&ws.root)
        .env("NO_COLOR", "1")
        .env_remove("WARDEN_DIR")
        .output()
        .unwrap();
    assert_eq!(code(&o), 5, "{}", describe(&["task", "create", "big"], &o));
    assert!(
        err_line(&o).contains("check free space, the file-size limit (`ulimit -f`)"),
        "{o:?}"
    );
    assert!(ws.tasks().is_empty());
}

/// A raw MCP session over the real server's stdin and stdout.
struct Raw {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Raw {
    fn start(ws: &Workspace, args: &[&str]) -> Raw {
        let mut child = ws
            .cmd()
            .arg("mcp")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut r = Raw { child, out };
        r.send(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "hostile", "version": "0"}}}),
        );
        r.answer(1);
        r.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }

    fn send(&mut self, v: &Value) {
        self.send_raw(v.to_string().as_bytes());
    }

    fn send_raw(&mut self, line: &[u8]) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The response to request `id` (lines are read until it comes, or the server ends).
    fn answer(&mut self, id: i64) -> Value {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.out.read_line(&mut line).unwrap();
            assert!(n > 0, "the server closed before answering {id}");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_oversized_mcp_message_is_answered_with_an_error() {
    let ws = Workspace::new("mcp-big");
    ws.create("t", &[]);
    let mut mcp = Raw::start(&ws, &[]);
    let filler = "x".repeat(20 * 1024 * 1024);
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{{\"name\":\"task_create\",\"arguments\":{{\"id\":\"big\",\"body\":\"{filler}\"}}}}}}"
    );
    let start = Instant::now();
    mcp.send_raw(big.as_bytes());
    let a = mcp.answer(7);
    assert!(start.elapsed() < Duration::from_secs(60));
    let msg = a["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("over Warden's 8 MiB limit") && msg.contains("tools/call"),
        "{a}"
    );
    // The session goes on.
    mcp.send(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "task_get", "arguments": {"id": "t"}}}));
    let a = mcp.answer(8);
    assert!(a["result"].is_object(), "{a}");
    assert_eq!(
        ws.tasks().len(),
        1,
        "nothing of the oversized call was applied"
    );
}

#[test]
fn an_agent_cannot_read_the_whole_state() {
    let ws = Workspace::new("mcp-agent-state");
    ws.create("mine", &[]);
    ws.create("theirs", &["--title", "Secret project"]);
    let mut mcp = Raw::start(&ws, &["--role", "agent", "--task", "mine"]);
    mcp.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list"}));
    let list = mcp.answer(2);
    let uris: Vec<&str> = list["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, ["warden://task/mine"], "{list}");
    mcp.send(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
        "params": {"uri": "warden://state"}}),
    );
    let a = mcp.answer(3);
    let msg = a["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("not available to an agent session"), "{a}");
    assert!(!a.to_string().contains("Secret project"));
    let tamper = ws.events("tamper.ignored", Some("mine"));
    assert_eq!(tamper.len(), 1, "{tamper:?}");
    assert_eq!(tamper[0]["data"]["field"], "mcp:resource:state");
}

#[test]
fn plan_sync_never_touches_a_task_it_did_not_make() {
    let ws = Workspace::new("sync-foreign");
    ws.create("login", &["--title", "The person's login task"]);
    ws.to("login", "working");
    let phase = ws.path(".planning/phases/01-x");
    std::fs::create_dir_all(&phase).unwrap();
    ws.write(".planning/ROADMAP.md", "# Roadmap\n\n## Phase 1: X\n");
    ws.write(
        ".planning/phases/01-x/login-PLAN.md",
        "---\nphase: 01-x\nplan: login\n---\n<objective>Log in</objective>\n",
    );
    ws.write(
        ".planning/phases/01-x/login-SUMMARY.md",
        "# Done\n\nLogged in.\n",
    );
    let before = ws.show("login");
    let o = ws.ok(&["plan", "sync"]);
    let after = ws.show("login");
    assert_eq!(after["status"], "working", "{}", text(&o.stdout));
    assert_eq!(after["version"], before["version"]);
    assert_eq!(after["title"], "The person's login task");
    // A done task named like a new plan is never moved back either.
    ws.handoff("login");
    ws.to("login", "agent-review");
    ws.review("login", "PASS");
    ws.to("login", "reviewing");
    ws.ok(&["task", "approve", "login"]);
    std::fs::remove_file(ws.path(".planning/phases/01-x/login-SUMMARY.md")).unwrap();
    ws.ok(&["plan", "sync"]);
    assert_eq!(ws.status("login"), "done");
    ws.check_ok();
}

#[test]
fn plan_apply_refuses_a_dependency_on_a_removed_task() {
    let ws = Workspace::new("dangling");
    ws.write(
        "plan.json",
        r#"{"tasks": [{"id": "a"}, {"id": "b", "depends_on": ["a"]}]}"#,
    );
    ws.ok(&["plan", "import", "plan.json"]);
    ws.to("b", "working");
    let mut tree = ws.json(&["plan", "export"]);
    tree["tasks"]
        .as_array_mut()
        .unwrap()
        .retain(|t| t["id"] != "a");
    ws.write("edited.json", tree.to_string());
    let before = snapshot(&ws);
    let o = ws.expect(
        &[
            "plan",
            "apply",
            "edited.json",
            "--selected",
            "b",
            "--status",
            "done",
            "--guard",
            "pass",
        ],
        1,
    );
    assert!(
        err_line(&o).contains("task b depends on unknown task a"),
        "{o:?}"
    );
    assert_eq!(snapshot(&ws), before);
    ws.check_ok();
}

/// STATE.md's kept rendering lives under `.warden/`, where an agent can write: a FIFO, a
/// device or a link there is never waited on nor followed, and `warden state` renders
/// from the store as if nothing were kept.
#[test]
fn a_kept_state_md_that_is_a_fifo_or_a_link_is_not_read() {
    let ws = Workspace::new("statecache");
    let mut tasks = vec![serde_json::json!({"id": "p"})];
    for i in 0..210 {
        tasks.push(serde_json::json!({"id": format!("t{i}"), "parent": "p"}));
    }
    ws.write(
        "plan.json",
        serde_json::json!({ "tasks": tasks }).to_string(),
    );
    ws.ok(&["plan", "import", "plan.json"]);
    let fresh = text(&ws.ok(&["state"]).stdout);
    let cache = ws.path(".warden/cache/state-md");
    let text_cache = ws.path(".warden/cache/state-md.text");
    assert!(cache.exists(), "a project of 211 tasks keeps its rendering");
    assert!(text_cache.exists(), "and the text it rendered");
    // `warden state`, failing the test instead of hanging it if it blocks.
    let state = |what: &str| {
        let child = ws
            .cmd()
            .args(["state"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        finish(child, Duration::from_secs(20), what)
    };
    let fifo = ws.path("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    // Each kept file in turn (the other one gone), linked to what would change the text
    // if it were read, then a FIFO in its place.
    let files = [
        (&cache, std::fs::read_to_string(&cache).unwrap()),
        (&text_cache, std::fs::read_to_string(&text_cache).unwrap()),
    ];
    for (kept, content) in &files {
        let elsewhere = ws.path("elsewhere");
        std::fs::write(
            &elsewhere,
            content.replace("| t5 | p | pending |", "| t5 | p | done |"),
        )
        .unwrap();
        let reset = || {
            for (f, _) in &files {
                let _ = std::fs::remove_file(f);
            }
        };
        for (what, target) in [
            ("a FIFO", &fifo),
            ("a device", &"/dev/zero".into()),
            ("a file elsewhere", &elsewhere),
        ] {
            reset();
            std::os::unix::fs::symlink(target, kept).unwrap();
            let o = state(&format!("state with {what} linked at {}", kept.display()));
            assert_eq!(code(&o), 0, "{what}: {}", describe(&["state"], &o));
            assert_eq!(text(&o.stdout), fresh, "{what} linked is not read");
        }
        // A FIFO in its place is not waited on either.
        reset();
        assert!(Command::new("mkfifo").arg(kept).status().unwrap().success());
        let o = state(&format!("state with a FIFO at {}", kept.display()));
        assert_eq!(text(&o.stdout), fresh);
    }
    // Nor is it written where a linked cache directory points.
    std::fs::remove_dir_all(ws.path(".warden/cache")).unwrap();
    let other = ws.path("other-dir");
    std::fs::create_dir(&other).unwrap();
    std::os::unix::fs::symlink(&other, ws.path(".warden/cache")).unwrap();
    assert_eq!(text(&ws.ok(&["state"]).stdout), fresh);
    assert_eq!(
        std::fs::read_dir(&other).unwrap().count(),
        0,
        "nothing written through the link"
    );
}

#[test]
fn a_request_naming_no_task_leaves_no_folder_behind() {
    let ws = Workspace::new("ghost-ids");
    ws.create("real", &["--work", "true"]);
    let folders = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(ws.path(".warden/tasks"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let before = (folders(), snapshot(&ws));
    ws.write("delta.json", r#"{"goals": ["g"]}"#);
    for args in [
        &["task", "update", "ghost1", "--status", "working"][..],
        &["task", "complete", "ghost2"],
        &["task", "exited", "ghost3", "--exit-code", "0"],
        &["task", "retry", "ghost4"],
        &["task", "approve", "ghost5"],
        &["task", "reject", "ghost6", "--reason", "no"],
        &["task", "cancel", "ghost7"],
        &["task", "respawn", "ghost8"],
        &["task", "spawn", "ghost9"],
        &["memory", "merge", "ghost10", "delta.json"],
    ] {
        let o = ws.expect(args, 3);
        assert_eq!(
            err_line(&o),
            format!(
                "error: no task {}; list tasks with `warden task list`",
                args[2]
            ),
            "{}",
            describe(args, &o)
        );
    }
    assert_eq!((folders(), snapshot(&ws)), before);
}

/// What people read of an agent's or a reporter's words shows line breaks without
/// breaking its lines: `warden history`, `task show` and `warden status` print a
/// reason or a failure on one line (`⏎`), and any control character stored before
/// reasons refused them in caret notation.
#[test]
fn stored_words_print_on_one_line_and_drive_no_terminal() {
    let ws = Workspace::new("one-line");
    ws.create("t", &[]);
    ws.ok(&[
        "task",
        "update",
        "t",
        "--status",
        "working",
        "--reason",
        "two\nlines",
    ]);
    let history = text(&ws.ok(&["history", "t"]).stdout);
    assert!(history.contains("(two ⏎ lines)"), "{history}");
    // A crash whose reporter's reason has a line break is the task's last failure.
    ws.ok(&[
        "task",
        "exited",
        "t",
        "--reason",
        "killed\nby the OOM killer",
    ]);
    let failure = ws.json(&["task", "show", "t"])["last_failure"].clone();
    assert!(failure.as_str().unwrap().contains('\n'), "{failure}");
    for (args, line) in [
        (&["task", "show", "t"][..], "  failure    "),
        (&["status"][..], "           "),
    ] {
        let out = text(&ws.ok(args).stdout);
        assert!(
            out.lines()
                .any(|l| l.starts_with(line) && l.contains("(killed ⏎ by the OOM killer)")),
            "{args:?}: {out}"
        );
    }
}

/// A project whose path leaves tmux's socket (`.warden/tmux.sock`) longer than a Unix
/// socket path may be: `doctor` names the problem and the ways out, and `warden run`
/// starts nothing. Before, doctor said ok, and every session start failed with tmux's
/// "File name too long", charging the task's attempts until it was stuck.
#[test]
fn a_project_too_deep_for_a_tmux_socket_is_told_so() {
    let ws = Workspace::new(&"d".repeat(100));
    let cfg = ws.path(".warden/warden.toml");
    let text0 = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text0.replace("session = \"process\"", "session = \"tmux\""),
    )
    .unwrap();
    ws.create("t", &["--work", "true"]);
    let o = ws.expect(&["--json", "doctor"], 2);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let session = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "session")
        .unwrap()
        .clone();
    assert_eq!(session["status"], "problem", "{v}");
    let detail = session["detail"].as_str().unwrap();
    assert!(
        detail.contains("longer than the 107 bytes a Unix socket path may have")
            && detail.contains("move the project to a shorter path, or use session = \"process\""),
        "{detail}"
    );
    let o = ws.expect(&["run", "--until-idle"], 2);
    assert!(
        text(&o.stderr).contains("longer than the 107 bytes")
            && text(&o.stderr).contains("or use --session process")
            && text(&o.stderr).contains("nothing was started"),
        "{}",
        text(&o.stderr)
    );
    let t = ws.show("t");
    assert_eq!(
        (t["status"].as_str(), t["attempts"].as_u64()),
        (Some("pending"), Some(0))
    );
}

/// A `task complete` (or `warden mcp`) ended by a signal while its postchecks run ends
/// them too: they run in a process group of their own, which a Ctrl-C or a TERM to the
/// command never reached, and they ran on to the end beside the task's next attempt.
/// The task stays where it was; nothing of the check is recorded.
#[test]
fn a_signal_that_ends_a_command_ends_the_checks_it_runs() {
    for sig in ["TERM", "INT", "HUP"] {
        let ws = Workspace::new("signal-check");
        let pid_file = ws.root.join("check.pid");
        // With a daemon in a session of its own, outside the check's group, that holds
        // the check's output open (so the check's own thread is still draining it when
        // the command exits).
        let daemon = ws.root.join("daemon.pid");
        let post = format!(
            "setsid sh -c 'echo $$ > {d}; exec sleep 600' </dev/null & while [ ! -s {d} ]; do sleep 0.01; done; echo $$ > {}; sleep 30; touch {}",
            pid_file.display(),
            ws.root.join("finished").display(),
            d = daemon.display()
        );
        ws.create("s", &["--postchecks", &post]);
        ws.to("s", "working");
        ws.handoff("s");
        let complete = ws
            .cmd()
            .args(["task", "complete", "s"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = pid_written(&pid_file, "the check");
        let sent = Command::new("kill")
            .args([&format!("-{sig}"), &complete.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let done = complete.wait_with_output().unwrap();
        assert_eq!(done.status.code(), Some(128 + signal_number(sig)), "{sig}");
        // Said, not left to an exit code alone.
        assert_eq!(
            String::from_utf8_lossy(&done.stderr),
            format!(
                "warden: ended by SIG{sig}: the check it ran was stopped and nothing of it was recorded; run the command again to check\n"
            )
        );
        let start = Instant::now();
        while std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .rsplit_once(") ")
                .is_some_and(|(_, r)| r.starts_with('Z'))
        {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{sig}: the check {pid} outlived its command"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!ws.root.join("finished").exists());
        let daemon: u32 = std::fs::read_to_string(&daemon)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        crate::supervisor::wait_gone(daemon, 20);
        assert_eq!(ws.show("s")["status"], "working", "{sig}");
        assert!(
            !ws.root.join(".warden/tasks/s/check.pid").exists(),
            "{sig}: the check's note is gone"
        );
        ws.check_ok();
    }
}

fn signal_number(sig: &str) -> i32 {
    match sig {
        "HUP" => 1,
        "INT" => 2,
        "TERM" => 15,
        other => panic!("{other}"),
    }
}
