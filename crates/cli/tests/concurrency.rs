//! Many `warden` processes on one workspace (DESIGN 1.3 and 5): concurrent updates lose
//! nothing and count exactly, kill -9 mid-write leaves a consistent store and no torn
//! file, concurrent memory merges keep every item.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::thread;

use crate::common::{Workspace, code, command, frontmatter_field, text};

/// Runs `warden ARGS` in `root` (from a worker thread).
fn run(root: &Path, args: &[&str]) -> Output {
    command(root).args(args).output().expect("run warden")
}

/// Runs `warden ARGS` with `input` on stdin.
fn run_stdin(root: &Path, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = command(root)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn warden");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// One worker's loop: toggles working ↔ clarification with an illegal `done` mixed in.
/// Returns (status asked, exit code, first stderr line) per run.
fn toggler(
    root: PathBuf,
    id: &'static str,
    worker: usize,
    rounds: usize,
) -> Vec<(&'static str, i32, String)> {
    (0..rounds)
        .map(|i| {
            let to = match (i + worker) % 3 {
                0 => "clarification",
                1 => "working",
                _ => "done",
            };
            let o = run(&root, &["task", "update", id, "--status", to]);
            let line = text(&o.stderr).lines().next().unwrap_or("").to_owned();
            (to, code(&o), line)
        })
        .collect()
}

fn concurrent_toggles(
    ws: &Workspace,
    id: &'static str,
    workers: usize,
    rounds: usize,
) -> Vec<(&'static str, i32, String)> {
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let root = ws.root.clone();
            thread::spawn(move || toggler(root, id, w, rounds))
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("worker thread"))
        .collect()
}

#[test]
fn concurrent_updates_of_one_task_count_exactly() {
    let ws = Workspace::new("conc");
    ws.create("c", &[]);
    ws.to("c", "working");
    let v0 = ws.version("c");
    let e0 = ws.events("status.changed", Some("c")).len();

    let results = concurrent_toggles(&ws, "c", 8, 25);
    assert_eq!(results.len(), 200);
    let unexpected: Vec<_> = results
        .iter()
        .filter(|(_, c, _)| ![0, 1, 4].contains(c))
        .collect();
    assert!(
        unexpected.is_empty(),
        "only exit codes 0, 1 and 4 are allowed: {unexpected:?}"
    );
    let done_ok: Vec<_> = results
        .iter()
        .filter(|(to, c, _)| *to == "done" && *c != 1)
        .collect();
    assert!(
        done_ok.is_empty(),
        "working/clarification → done is always refused: {done_ok:?}"
    );
    let refused_wrong: Vec<_> = results
        .iter()
        .filter(|(_, c, line)| *c == 1 && !line.contains("not allowed"))
        .collect();
    assert!(
        refused_wrong.is_empty(),
        "refusals name the illegal transition: {refused_wrong:?}"
    );
    let ok = results.iter().filter(|(_, c, _)| *c == 0).count() as u64;
    assert!(ok > 0, "some updates must succeed");

    let v1 = ws.version("c");
    let e1 = ws.events("status.changed", Some("c")).len();
    assert_eq!(
        v1 - v0,
        ok,
        "every successful update is exactly one version"
    );
    assert_eq!(
        (e1 - e0) as u64,
        ok,
        "every successful update is exactly one status.changed event"
    );
    ws.check_ok();
}

#[test]
fn concurrent_writers_leave_a_true_mirror_and_record_no_tamper() {
    // Nobody edits TASK.md here, so no tamper.ignored may be recorded, and the
    // frontmatter mirror must end equal to the stored truth.
    let ws = Workspace::new("mirror");
    ws.create("m", &[]);
    ws.to("m", "working");
    let results = concurrent_toggles(&ws, "m", 8, 25);
    assert!(
        results.iter().all(|(_, c, _)| [0, 1, 4].contains(c)),
        "{results:?}"
    );
    let stored = ws.show("m");
    let md = ws.read_task_md("m");
    assert_eq!(
        frontmatter_field(&md, "status").as_deref(),
        stored["status"].as_str(),
        "TASK.md frontmatter must mirror the stored status after concurrent writes:\n{md}"
    );
    let tamper = ws.events("tamper.ignored", Some("m"));
    assert!(
        tamper.is_empty(),
        "no agent touched TASK.md, yet {} tamper.ignored event(s) were recorded, e.g. {}",
        tamper.len(),
        tamper[0]
    );
    ws.check_ok();
}

#[test]
fn kill_9_mid_write_leaves_a_consistent_store_and_no_torn_file() {
    let ws = Workspace::new("kill");
    ws.create("k", &[]);
    ws.to("k", "working");
    ws.ok(&["state", "--write"]); // STATE.md is rewritten by every write from now on
    // How long one whole update takes here; kills are spread over that span so they land
    // in every stage (startup, transaction, fsync, TASK.md and STATE.md rewrites).
    let t = std::time::Instant::now();
    ws.to("k", "clarification");
    ws.to("k", "working");
    let full = t.elapsed() / 2;
    let (mut killed, mut finished) = (0, 0);
    for round in 0..20u32 {
        let to = if round % 2 == 0 {
            "clarification"
        } else {
            "working"
        };
        let mut child = command(&ws.root)
            .args(["task", "update", "k", "--status", to])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn warden");
        thread::sleep(full * round / 16);
        match child.try_wait().expect("try_wait") {
            Some(_) => finished += 1,
            None => {
                child.kill().expect("kill -9");
                killed += 1;
            }
        }
        child.wait().expect("wait");
    }
    assert!(
        killed > 0,
        "no process was killed mid-run (finished {finished})"
    );

    // The store opens and replays to its rows.
    ws.check_ok();
    let v = ws.show("k");
    let st = v["status"].as_str().unwrap().to_owned();
    assert!(["working", "clarification"].contains(&st.as_str()), "{v}");

    // TASK.md is intact: a whole frontmatter block naming the task, and the body.
    let dir = ws.root.join(".warden/tasks/k");
    let md = ws.read_task_md("k");
    assert_eq!(
        frontmatter_field(&md, "id").as_deref(),
        Some("k"),
        "torn TASK.md:\n{md}"
    );
    let fm_status = frontmatter_field(&md, "status").expect("status in frontmatter");
    assert!(
        ["working", "clarification"].contains(&fm_status.as_str()),
        "{md}"
    );
    assert!(
        md.contains("## Context") && md.contains("## Notes"),
        "torn TASK.md:\n{md}"
    );
    let leftovers: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    if !leftovers.is_empty() {
        eprintln!("note: leftover temp files beside an intact TASK.md: {leftovers:?}");
    }
    let state_md = std::fs::read_to_string(ws.root.join(".warden/STATE.md")).expect("STATE.md");
    assert!(!state_md.trim().is_empty(), "STATE.md torn");

    // The next write works and brings every file back to the truth.
    let next = if st == "working" {
        "clarification"
    } else {
        "working"
    };
    ws.to("k", next);
    assert_eq!(ws.frontmatter("k", "status").as_deref(), Some(next));
    ws.ok(&["state", "verify"]);
    ws.check_ok();
}

#[test]
fn concurrent_memory_merges_keep_every_item() {
    let ws = Workspace::new("memconc");
    // Room for all 80 decisions (a list keeps its newest `max_items`, 50 by default).
    let cfg = ws.root.join(".warden/warden.toml");
    let toml = std::fs::read_to_string(&cfg).unwrap();
    assert!(toml.contains("max_items = 50"), "{toml}");
    std::fs::write(&cfg, toml.replace("max_items = 50", "max_items = 100")).unwrap();
    ws.create("m", &[]);
    let handles: Vec<_> = (0..4)
        .map(|p| {
            let root = ws.root.clone();
            thread::spawn(move || {
                (0..20)
                    .map(|i| {
                        let delta = format!(
                            r#"{{"decisions": ["p{p}-item{i}"], "history": ["p{p}-h{i}"]}}"#
                        );
                        let o = run_stdin(&root, &["memory", "merge", "m", "-"], &delta);
                        (code(&o), text(&o.stderr))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<(i32, String)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let failed: Vec<_> = results.iter().filter(|(c, _)| *c != 0).collect();
    assert!(failed.is_empty(), "every merge must succeed: {failed:?}");

    let mem = ws.json(&["memory", "show", "m"]);
    let decisions: Vec<&str> = mem["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    let want: BTreeSet<String> = (0..4)
        .flat_map(|p| (0..20).map(move |i| format!("p{p}-item{i}")))
        .collect();
    let got: BTreeSet<String> = decisions.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        decisions.len(),
        80,
        "no item lost or doubled: {decisions:?}"
    );
    assert_eq!(got, want);
    // Each process's items stay in its own order.
    for p in 0..4 {
        let mine: Vec<&&str> = decisions
            .iter()
            .filter(|d| d.starts_with(&format!("p{p}-")))
            .collect();
        let expected: Vec<String> = (0..20).map(|i| format!("p{p}-item{i}")).collect();
        assert_eq!(
            mine.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            expected
        );
    }
    assert_eq!(
        mem["history"].as_array().unwrap().len(),
        3,
        "history is still capped"
    );
    assert_eq!(ws.events("memory.merged", Some("m")).len(), 80);
    ws.check_ok();
}

/// STATE.md kept (`state --write`) and many writers at once: each renders it after its
/// commit, and the file left is the last state, not an older render renamed over a
/// newer one. A temporary file a killed writer left beside it is removed by the next.
#[test]
fn concurrent_writers_leave_state_md_true() {
    let ws = Workspace::new("state-race");
    let tasks: Vec<String> = (0..64)
        .map(|i| format!(r#"{{"id": "s{i}", "agent": "x"}}"#))
        .collect();
    ws.write(
        "plan.json",
        format!(r#"{{"tasks": [{}]}}"#, tasks.join(",")),
    );
    ws.ok(&["plan", "import", "plan.json"]);
    ws.ok(&["state", "--write"]);
    let stale = ws.root.join(".warden/.STATE.md.999999999.0.tmp");
    std::fs::write(&stale, "a killed writer's half").unwrap();
    for round in 0..4 {
        let writers: Vec<_> = (0..16)
            .map(|k| {
                let root = ws.root.clone();
                thread::spawn(move || {
                    let id = format!("s{}", round * 16 + k);
                    run(&root, &["task", "update", &id, "--status", "working"])
                })
            })
            .collect();
        for w in writers {
            let o = w.join().unwrap();
            assert_eq!(code(&o), 0, "{}", text(&o.stderr));
        }
        let o = run(&ws.root, &["state", "verify"]);
        assert_eq!(
            code(&o),
            0,
            "round {round}: STATE.md is not the last state:\n{}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
    }
    assert!(
        !stale.exists(),
        "the killed writer's temporary file is left"
    );
}

/// Two commands at once whose decisions each pass the tree rules alone and together
/// break them: each was decided against the tree it read and committed only its own
/// task. In 12 rounds per pair (the race came out in about half the rounds of each
/// before the tree lock): never both.
#[test]
fn concurrent_placements_never_break_the_tree_rules_together() {
    let ws = Workspace::new("tree-race");
    let root = ws.root.clone();
    let pair = |a: Vec<String>, b: Vec<String>| {
        let (ra, rb) = (root.clone(), root.clone());
        let ta = thread::spawn(move || {
            let args: Vec<&str> = a.iter().map(String::as_str).collect();
            code(&run(&ra, &args))
        });
        let args: Vec<&str> = b.iter().map(String::as_str).collect();
        let cb = code(&run(&rb, &args));
        (ta.join().unwrap(), cb)
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    for i in 0..12 {
        let (a, b, x, y, p, c, g, k, n) = (
            format!("a{i}"),
            format!("b{i}"),
            format!("x{i}"),
            format!("y{i}"),
            format!("p{i}"),
            format!("c{i}"),
            format!("g{i}"),
            format!("k{i}"),
            format!("n{i}"),
        );
        for id in [&a, &b, &x, &y, &p, &c, &g] {
            ws.create(id, &["--agent", "x"]);
        }
        ws.create(&k, &["--parent", &g, "--agent", "x"]);
        // Parents in a cycle.
        let got = pair(
            s(&["task", "edit", &a, "--parent", &b]),
            s(&["task", "edit", &b, "--parent", &a]),
        );
        assert_ne!(
            got,
            (0, 0),
            "round {i}: {a} and {b} are each other's parent"
        );
        // Dependencies in a cycle.
        let got = pair(
            s(&["task", "edit", &x, "--depends-on", &y]),
            s(&["task", "edit", &y, "--depends-on", &x]),
        );
        assert_ne!(got, (0, 0), "round {i}: {x} and {y} wait on each other");
        // A child under a leaf that starts.
        let got = pair(
            s(&["task", "update", &p, "--status", "working"]),
            s(&["task", "edit", &c, "--parent", &p]),
        );
        assert_ne!(
            got,
            (0, 0),
            "round {i}: {c} went under {p}, which is working"
        );
        // An open task under a group being cancelled.
        let got = pair(
            s(&["task", "cancel", &g]),
            s(&["task", "create", &n, "--parent", &g, "--agent", "x"]),
        );
        if got == (0, 0) {
            assert_eq!(
                ws.show(&n)["status"],
                "cancelled",
                "round {i}: {n} stays open under cancelled {g}"
            );
        }
    }
    ws.check_ok();
}

/// A placement that must wait for one task's lock (a running check holds it) lets go of
/// the tree's lock while it waits: it held it, and every create, edit and start in the
/// project waited behind it for up to `busy_timeout_ms`, then failed with exit 4. Here
/// an unrelated create finishes while the edit still waits.
#[test]
fn a_placement_waiting_on_a_checked_task_holds_up_no_other() {
    let ws = Workspace::new("tree-wait");
    let cfg = ws.path(".warden/warden.toml");
    let toml = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("busy_timeout_ms = 5000", "busy_timeout_ms = 3000");
    std::fs::write(&cfg, toml).unwrap();
    let pid_file = ws.path("guard.pid");
    let guard = format!("echo $$ > '{}'; exec sleep 60", pid_file.display());
    ws.create("r", &["--agent", "x", "--postchecks", &guard]);
    ws.to("r", "working");
    ws.handoff("r");
    let mut complete = command(&ws.root)
        .args(["task", "complete", "r"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let guard_pid = crate::hostile::pid_written(&pid_file, "the guard");
    let mut edit = command(&ws.root)
        .args(["task", "edit", "r", "--title", "renamed"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The edit waits on r's lock: its waiting thread is there.
    let edit_pid = edit.id();
    let waiting = || {
        std::fs::read_dir(format!("/proc/{edit_pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.trim() == "task-lock")
            })
    };
    let start = std::time::Instant::now();
    while !waiting() {
        assert!(
            edit.try_wait().unwrap().is_none(),
            "the edit ended before it waited on r's lock"
        );
        assert!(start.elapsed() < std::time::Duration::from_secs(30));
        thread::sleep(std::time::Duration::from_millis(10));
    }
    let o = run(&ws.root, &["task", "create", "u", "--agent", "x"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(
        edit.try_wait().unwrap().is_none(),
        "the create waited for the edit to give up"
    );
    let _ = std::process::Command::new("kill")
        .arg(guard_pid.to_string())
        .status();
    let _ = complete.wait();
    let _ = edit.wait();
    ws.check_ok();
}
