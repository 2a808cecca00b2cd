//! The person in the loop, through the real binary: `status`, `task approve` / `reject`,
//! `task list` in tree order and `--needs-me`, `plan graph` (checked by Graphviz),
//! `history --tail/--since`, `task log -f` following a live session, and completions.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use crate::common::{Workspace, code, describe, err_line, text};
use crate::run_e2e::Project;
use crate::supervisor::{kinds, stop, wait_gone};

/// A plan with one task in each state a person acts on.
fn waiting_room() -> Workspace {
    let ws = Workspace::new("person");
    ws.write(
        "plan.json",
        r#"{"tasks": [
            {"id": "app", "title": "The app"},
            {"id": "api", "parent": "app", "order": 1, "title": "REST API"},
            {"id": "ui", "parent": "app", "order": 2, "title": "Web UI", "depends_on": ["api"]},
            {"id": "ask", "parent": "app", "order": 3, "title": "Pick a database"},
            {"id": "flaky", "title": "Flaky job", "work": "false", "max_attempts": 1},
            {"id": "crashy", "title": "Crashing worker"},
            {"id": "later", "title": "Later"}
        ]}"#,
    );
    ws.ok(&["plan", "import", "plan.json"]);
    // api: in review with a PASS and findings.
    ws.to("api", "working");
    ws.handoff("api");
    ws.to("api", "agent-review");
    ws.add_section(
        "api",
        "Review",
        "Verdict: PASS\n\nThe handlers are tested; the 404 path is covered.",
    );
    ws.to("api", "reviewing");
    // ask: a question for the person.
    ws.to("ask", "clarification");
    ws.add_section(
        "ask",
        "Questions",
        "1. PostgreSQL or SQLite?\n2. Which port?\n3. Which user?\n4. Backups?\n5. Where?\n6. How often?\n7. Encrypted?\n8. Who restores them?",
    );
    // flaky: stuck by its failed work.
    ws.to("flaky", "working");
    ws.to("flaky", "stuck");
    // crashy: its worker died without a hand-off.
    ws.to("crashy", "working");
    ws.ok(&[
        "task",
        "exited",
        "crashy",
        "--exit-code",
        "1",
        "--session",
        "w1",
    ]);
    ws
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn status_lists_what_needs_the_person_with_the_command_for_each() {
    let ws = waiting_room();
    let v = ws.json(&["status"]);
    let needs: Vec<(String, String)> = v["needs_you"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["need"].as_str().unwrap().to_owned(),
                n["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        needs,
        [
            ("review".into(), "api".into()),
            ("question".into(), "ask".into()),
            ("stuck".into(), "flaky".into()),
            ("dead".into(), "crashy".into()),
        ],
        "{v:#}"
    );
    let api = &v["needs_you"][0];
    assert_eq!(api["verdict"], "pass");
    assert!(
        api["detail"]
            .as_str()
            .unwrap()
            .contains("404 path is covered"),
        "{api}"
    );
    assert_eq!(api["commands"][0], "warden task approve api");
    // What does not fit is said (the lines past the first six were dropped silently).
    let ask = v["needs_you"][1]["detail"].as_str().unwrap();
    assert!(
        ask.starts_with("1. PostgreSQL or SQLite? · 2. Which port?")
            && ask.ends_with(
                "6. How often? · (+2 more line(s): read all of it in the task's TASK.md)"
            ),
        "{ask}"
    );
    assert_eq!(
        v["needs_you"][3]["commands"][0],
        "warden task respawn crashy"
    );
    assert_eq!(v["supervisors"], serde_json::json!([]));
    assert_eq!(v["supervisor_alive"], false);
    assert_eq!(v["progress"]["total"], 6, "{v:#}");
    // The screen says the same in words.
    let o = ws.ok(&["status"]);
    let screen = text(&o.stdout);
    for line in [
        "Supervisor: none running",
        "Needs you (4):",
        "review   api  REST API — review says PASS",
        "→ warden task approve api",
        "→ warden task retry flaky",
        "Running: nothing.",
    ] {
        assert!(screen.contains(line), "{line:?} missing from:\n{screen}");
    }
    // A respawn asked for takes the dead task off the list: the supervisor has it.
    ws.ok(&["task", "respawn", "crashy"]);
    let v = ws.json(&["status"]);
    assert_eq!(v["needs_you"].as_array().unwrap().len(), 3);
}

#[test]
fn approve_and_reject_decide_a_review_and_refuse_anything_else() {
    let ws = waiting_room();
    // Reject: back to the worker, with the reason in its next prompt.
    let v = ws.json(&[
        "task",
        "reject",
        "api",
        "--reason",
        "Return 404 for a missing user, not 500",
    ]);
    assert_eq!(v["status"], "working", "{v}");
    let prompt = text(&ws.ok(&["prompt", "api"]).stdout);
    assert!(
        prompt.contains("Return 404 for a missing user, not 500"),
        "{prompt}"
    );
    // Refusals: not in review (exit 1), no reason (exit 2), unknown task (exit 3); none
    // changes anything.
    let version = ws.version("api");
    let events = ws.history().len();
    let o = ws.expect(&["task", "approve", "api"], 1);
    assert_eq!(
        err_line(&o),
        "refused: task api is working; only a task in reviewing can be approved"
    );
    let o = ws.expect(&["task", "reject", "api", "--reason", "   "], 2);
    assert!(err_line(&o).contains("a rejection needs a reason"), "{o:?}");
    ws.expect(&["task", "reject", "api"], 2);
    ws.expect(&["task", "approve", "nope"], 3);
    let o = ws.expect(&["--json", "task", "approve", "api"], 1);
    let err: Value = serde_json::from_slice(&o.stderr).unwrap();
    assert_eq!(err["error"]["code"], 1, "{err}");
    assert_eq!(ws.version("api"), version);
    assert_eq!(ws.history().len(), events);
    // The worker hands off again, the review passes, the person approves.
    ws.add_section("api", "Handoff", "404 now; a test covers it.");
    ws.to("api", "agent-review");
    ws.add_section("api", "Review", "Verdict: PASS");
    ws.to("api", "reviewing");
    let o = ws.ok(&["task", "approve", "api"]);
    assert_eq!(text(&o.stdout).trim(), "api: reviewing → done");
    assert_eq!(ws.status("api"), "done");
    let last = ws.history().pop().unwrap();
    assert_eq!(last["reason"], "approved by a person", "{last}");
    assert_eq!(last["actor"], "person");
    ws.check_ok();
}

/// Retry, approve, reject and respawn asked of a group: refused, naming the tasks in it
/// each fits and the command for each, with nothing changed. Before, the refusal said
/// "task g is pending" while every view showed the group stuck.
#[test]
fn an_action_on_a_group_names_the_tasks_it_fits() {
    let ws = Workspace::new("group-actions");
    ws.create("g", &["--title", "G"]);
    ws.create("c1", &["--parent", "g"]);
    ws.create("c2", &["--parent", "g"]);
    ws.create("sub", &["--parent", "g"]);
    ws.create("c3", &["--parent", "sub"]);
    for id in ["c1", "c3"] {
        ws.to(id, "working");
        ws.to(id, "stuck");
    }
    ws.to("c2", "working");
    ws.handoff("c2");
    ws.to("c2", "agent-review");
    ws.add_section("c2", "Review", "PASS");
    ws.to("c2", "reviewing");
    assert_eq!(ws.json(&["task", "show", "g"])["status"], "stuck");
    let version = ws.version("g");
    let events = ws.history().len();
    let o = ws.expect(&["task", "retry", "g"], 1);
    assert_eq!(
        err_line(&o),
        "refused: g is a group: its status comes from the tasks in it, and only a task can be retried; act on its tasks: `warden task retry c1`, `warden task retry c3`"
    );
    let o = ws.expect(&["task", "approve", "g"], 1);
    assert!(
        err_line(&o).ends_with("act on its tasks: `warden task approve c2`"),
        "{o:?}"
    );
    let o = ws.expect(&["task", "reject", "g", "--reason", "no"], 1);
    assert!(
        err_line(&o).ends_with("`warden task reject c2 --reason \"...\"`"),
        "{o:?}"
    );
    let o = ws.expect(&["task", "respawn", "sub"], 1);
    assert!(
        err_line(&o).ends_with("act on its tasks: `warden task respawn c3`"),
        "{o:?}"
    );
    let o = ws.expect(&["task", "approve", "sub"], 1);
    assert!(
        err_line(&o).ends_with("none of its tasks can be approved now (see `warden task list`)"),
        "{o:?}"
    );
    assert_eq!(ws.version("g"), version);
    assert_eq!(ws.history().len(), events);
    // What it names works.
    ws.ok(&["task", "retry", "c1"]);
    ws.ok(&["task", "approve", "c2"]);
}

#[test]
fn task_list_is_in_tree_order_and_needs_me_filters() {
    let ws = waiting_room();
    assert_eq!(
        ids(&ws.json(&["task", "list"])),
        ["app", "api", "ui", "ask", "crashy", "flaky", "later"]
    );
    let o = ws.ok(&["task", "list"]);
    assert!(
        text(&o.stdout).contains("\n  api "),
        "children are indented under their parent:\n{}",
        text(&o.stdout)
    );
    assert_eq!(
        ids(&ws.json(&["task", "list", "--needs-me"])),
        ["api", "ask", "crashy", "flaky"]
    );
    assert_eq!(
        ids(&ws.json(&["task", "list", "--status", "pending"])),
        ["ui", "later"]
    );
    ws.expect(&["task", "list", "--needs-me", "--status", "stuck"], 2);
    let empty = Workspace::new("person-empty");
    let o = empty.ok(&["task", "list", "--needs-me"]);
    assert_eq!(text(&o.stdout).trim(), "nothing waits for you");
}

/// Graphviz's `dot`, which CI installs; a developer machine without it skips loudly.
fn dot() -> Option<&'static str> {
    let found = Command::new("dot")
        .arg("-V")
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some("dot");
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "graphviz (dot) is missing; CI must have it (.ci/run installs it)"
    );
    eprintln!("!!! SKIPPED: the DOT check of `plan graph` (no graphviz `dot` here). CI runs it.");
    None
}

#[test]
fn plan_graph_draws_the_tree_and_graphviz_reads_its_dot() {
    let ws = waiting_room();
    ws.create(
        "odd.id-1",
        &["--title", "Quotes \" and \\ backslash; {braces} <b>"],
    );
    let m = text(&ws.ok(&["plan", "graph"]).stdout);
    assert!(m.starts_with("flowchart TD\n"), "{m}");
    assert!(m.contains("subgraph"), "{m}");
    // STATE.md carries the same picture.
    let state = text(&ws.ok(&["state"]).stdout);
    assert!(
        state.contains(&format!("```mermaid\n{m}```")),
        "STATE.md embeds the graph:\n{state}"
    );
    let d = text(&ws.ok(&["plan", "graph", "--format", "dot"]).stdout);
    assert!(d.starts_with("digraph plan {"), "{d}");
    let o = ws.expect(&["plan", "graph", "--format", "png"], 2);
    assert_eq!(
        err_line(&o),
        "error: unknown graph format \"png\"; use mermaid or dot"
    );
    let Some(dot) = dot() else { return };
    let svg = ws.path("plan.svg");
    let mut child = Command::new(dot)
        .args(["-Tsvg", "-o"])
        .arg(&svg)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(d.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "dot: {}",
        text(&o.stderr)
    );
    let svg = std::fs::read_to_string(svg).unwrap();
    for label in [
        "REST API",
        "Quotes &quot; and \\ backslash; {braces} &lt;b&gt;",
        "cluster_",
    ] {
        assert!(svg.contains(label), "{label:?} not in the SVG:\n{svg}");
    }
    // 1 dependency (ui after api): one edge.
    assert_eq!(svg.matches("class=\"edge\"").count(), 1, "{svg}");
}

#[test]
fn history_tail_and_since_select_events() {
    let ws = waiting_room();
    let all = ws.history();
    let tail: Vec<Value> = ws.json_lines(&["history", "--tail", "3"]);
    assert_eq!(tail, all[all.len() - 3..]);
    let api = ws.json_lines(&["history", "api", "--tail", "1"]);
    assert_eq!(api.len(), 1);
    assert_eq!(api[0]["task"], "api");
    assert_eq!(
        ws.json_lines(&["history", "--since", "1h"]).len(),
        all.len()
    );
    assert!(
        ws.json_lines(&["history", "--since", "2999-01-01"])
            .is_empty()
    );
    let first = all[all.len() - 2]["at"].as_str().unwrap().to_owned();
    let since = ws.json_lines(&["history", "--since", &first]);
    assert!(since.len() >= 2 && since.len() < all.len(), "{since:?}");
    let o = ws.expect(&["history", "--since", "yesterday"], 2);
    assert!(
        err_line(&o).contains("--since \"yesterday\" is not a time"),
        "{o:?}"
    );
    ws.expect(&["history", "--tail", "-1"], 2);
}

#[test]
fn completions_are_scripts_the_shell_accepts() {
    let ws = Workspace::new("completions");
    let o = ws.ok(&["completions", "bash"]);
    let script = ws.write("warden.bash", &o.stdout);
    // bash loads it and registers a completion for warden.
    let check = Command::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p warden", script.display()))
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", text(&check.stderr));
    assert!(text(&check.stdout).contains("warden"), "{check:?}");
    for shell in ["zsh", "fish"] {
        let o = ws.ok(&["completions", shell]);
        assert!(text(&o.stdout).contains("approve"), "{shell}");
    }
    ws.expect(&["completions", "tcsh"], 2);
    // `--json` keeps its promise: one JSON document, the script inside it.
    let v = ws.json(&["completions", "bash"]);
    assert_eq!(v["shell"], "bash");
    let plain = ws.ok(&["completions", "bash"]);
    assert_eq!(v["script"].as_str().unwrap(), text(&plain.stdout));
}

#[test]
fn task_log_follows_a_live_session_until_it_ends() {
    let p = Project::new("process");
    p.import(r#"{"tasks": [{"id": "t", "agent": "talk as you go (sim:talk)"}]}"#);
    let run = p.spawn_run();
    let log = p.root.join(".warden/tasks/t/output.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log).is_ok_and(|s| s.contains("talk: first")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never talked"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut follow = p.cmd(&["task", "log", "t", "-f"]);
    let mut follow = follow
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let next = |seen: &mut Vec<String>, want: &str| loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{want:?} never came; saw {seen:?}"));
        seen.push(line.clone());
        if line.contains(want) {
            break;
        }
    };
    next(&mut seen, "talk: first");
    // Only now does the worker go on: what follows is followed, not read at the end.
    std::fs::write(p.root.join("go"), "").unwrap();
    next(&mut seen, "talk: second");
    let status = follow.wait().unwrap();
    assert!(status.success(), "{status:?}");
    stop(run);
    // With nothing live, `-f` prints the log and returns at once.
    let o = p.cmd(&["task", "log", "t", "-f"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", describe(&["task", "log", "t", "-f"], &o));
    assert!(text(&o.stdout).contains("talk: second"));
}

#[test]
fn status_shows_the_supervisor_alive_and_what_it_runs() {
    let p = Project::new("process");
    p.import(r#"{"tasks": [{"id": "t", "agent": "never finishes (sim:hang)"}]}"#);
    let status =
        |p: &Project| -> Value { serde_json::from_str(&p.ok(&["--json", "status"])).unwrap() };
    assert_eq!(status(&p)["supervisor_alive"], false);
    let run = p.spawn_run();
    let pid = run.id();
    p.wait_task("t", 30, "the worker session", |t| !t["session"].is_null());
    // Its agent started (the session is recorded before its host starts it; a run
    // killed in between leaves a session that never started, and on a loaded machine
    // the test killed it there).
    p.agent_pid("t", "worker");
    let v = status(&p);
    assert_eq!(v["supervisor_alive"], true, "{v:#}");
    let sup = &v["supervisors"][0];
    assert_eq!(sup["pid"], pid, "{v:#}");
    assert_eq!(sup["alive"], true);
    assert_eq!(sup["tasks"], serde_json::json!(["t"]), "{v:#}");
    assert_eq!(v["running"][0]["id"], "t");
    assert_eq!(v["running"][0]["role"], "worker", "{v:#}");
    let screen = p.ok(&["status"]);
    assert!(
        screen.contains(&format!("Supervisor: pid {pid} on ")) && screen.contains("holds t"),
        "{screen}"
    );
    assert!(
        screen.contains("t  working  worker session for "),
        "{screen}"
    );
    // Killed without a chance to clean up: its announcement stays, its pid is dead, and
    // status no longer counts it.
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    stop(run);
    let v = status(&p);
    assert_eq!(v["supervisor_alive"], false, "{v:#}");
    assert_eq!(v["supervisors"], serde_json::json!([]), "{v:#}");
    // A run stopped cleanly withdraws: nothing left in .warden/runners/.
    let run = p.spawn_run();
    let runners = p.root.join(".warden/runners");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while status(&p)["supervisor_alive"] != true {
        assert!(
            std::time::Instant::now() < deadline,
            "the second run never showed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stop(run);
    let left: Vec<_> = std::fs::read_dir(&runners).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
    // The worker's session outlived both supervisors. Cancelling stops it, and its host
    // reports the end: wait for that host to be gone, so that no report of this project
    // is still on its way once the test has removed it.
    let agent = p.agent_pid("t", "worker");
    let host = parent_pid(agent);
    p.ok(&["task", "cancel", "t"]);
    wait_gone(host, 30);
    let ended = p
        .events("t")
        .iter()
        .filter(|e| e["type"] == "session.exited" && e["data"]["session"] == "t-worker-1")
        .count();
    assert_eq!(ended, 1, "{:?}", kinds(&p.events("t")));
}

/// The parent of a live process (from `/proc/PID/stat`).
fn parent_pid(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no parent in {stat}"))
}

/// An idle supervisor holds no lease: its announcement in `.warden/runners/` is all that
/// shows it. Reading that announcement (`status`, a second supervisor starting) must
/// never withdraw it.
#[test]
fn an_idle_supervisor_stays_announced_however_often_status_looks() {
    let p = Project::new("process");
    let runners = p.root.join(".warden/runners");
    // Announcements only: a supervisor writes its `<pid>.json` through a temporary
    // `.<pid>.json.….tmp` beside it, which must not count as a second supervisor.
    let count = || {
        std::fs::read_dir(&runners)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                    .count()
            })
            .unwrap_or(0)
    };
    let wait_for = |n: usize, what: &str| {
        crate::pg_runners::wait_until(Duration::from_secs(30), what, || count() == n);
    };
    let first = p.spawn_run();
    wait_for(1, "the first run");
    for look in 0..3 {
        let v: Value = serde_json::from_str(&p.ok(&["--json", "status"])).unwrap();
        assert_eq!(v["supervisor_alive"], true, "look {look}: {v:#}");
        assert_eq!(v["supervisors"][0]["pid"], first.id(), "look {look}: {v:#}");
        assert_eq!(count(), 1, "look {look} withdrew the announcement");
    }
    // A second supervisor starting tidies only announcements of dead runners.
    let second = p.spawn_run();
    wait_for(2, "the second run");
    let v: Value = serde_json::from_str(&p.ok(&["--json", "status"])).unwrap();
    let pids: Vec<&Value> = v["supervisors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["pid"])
        .collect();
    assert_eq!(pids.len(), 2, "{v:#}");
    stop(second);
    wait_for(1, "the first run alone, after the second stopped");
    stop(first);
    assert_eq!(count(), 0);
}

/// One run with a merge, a stuck task, a review and a crash: the outcome lines a person
/// reads, the same as JSON events for a script, and `--until-idle`'s exit codes as the
/// person acts (7 while something is stuck or dead, 6 while only reviews wait, 0 done).
#[test]
fn a_run_says_what_happened_and_its_exit_code_says_what_is_left() {
    let p = Project::new("process");
    p.limits(&[("retry_backoff_s", "0")]);
    p.import(
        r#"{"tasks": [
            {"id": "ok", "work": "echo ok > ok.txt"},
            {"id": "bad", "work": "false", "max_attempts": 1},
            {"id": "rev", "agent": "review me"},
            {"id": "crash", "agent": "crash first (sim:crash-once)"}
        ]}"#,
    );
    let o = p.run(&["--json", "run", "--until-idle", "--max-parallel", "4"]);
    assert_eq!(
        o.status.code(),
        Some(7),
        "stuck or dead: {}",
        text(&o.stderr)
    );
    let events: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let outcome = |kind: &str, task: &str| {
        events
            .iter()
            .find(|e| e["event"] == "outcome" && e["outcome"] == kind && e["task"] == task)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} outcome of {task} in {events:#?}"))
    };
    assert_eq!(outcome("done", "ok")["merged"], true);
    outcome("stuck", "bad");
    outcome("needs_review", "rev");
    outcome("crashed", "crash");
    let idle = events.last().unwrap();
    assert_eq!(idle["event"], "idle", "{idle}");
    assert_eq!(idle["code"], 7);
    assert_eq!(idle["needs_person"], serde_json::json!(["rev"]), "{idle}");
    let mut left = idle["stuck_or_dead"].as_array().unwrap().clone();
    left.sort_by_key(|v| v.as_str().unwrap().to_owned());
    assert_eq!(left, [serde_json::json!("bad"), serde_json::json!("crash")]);
    assert_eq!(
        super::run_e2e::git(&p.root, &["show", "main:ok.txt"]),
        "ok\n"
    );
    // The person acts: respawn the crashed worker, cancel the stuck task. Only reviews
    // wait now: 6. The text log says so, with the commands.
    p.ok(&["task", "respawn", "crash"]);
    p.ok(&["task", "cancel", "bad"]);
    let o = p.run(&["run", "--until-idle"]);
    assert_eq!(o.status.code(), Some(6), "{}", text(&o.stderr));
    let log = text(&o.stdout);
    assert!(
        log.contains("? crash waits for your review: `warden task approve crash` or `warden task reject crash --reason …`"),
        "{log}"
    );
    assert!(log.contains("waiting for you: crash, rev"), "{log}");
    p.ok(&["task", "approve", "crash"]);
    p.ok(&["task", "approve", "rev"]);
    let o = p.run(&["run", "--until-idle"]);
    assert_eq!(o.status.code(), Some(0), "all done: {}", text(&o.stdout));
    p.check();
}
