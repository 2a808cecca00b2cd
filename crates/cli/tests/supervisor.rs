//! The supervisor's contract through the real binary, with real processes, git and tmux:
//! one regression test per failure found in the first wave (the numbers are the
//! issue's), each of which failed on the code before the scheduler.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::run_e2e::{Project, git};

impl Project {
    /// Sets `[limits]` keys in warden.toml.
    pub(crate) fn limits(&self, pairs: &[(&str, &str)]) {
        let cfg = self.root.join(".warden/warden.toml");
        let mut text = std::fs::read_to_string(&cfg).unwrap();
        for (k, v) in pairs {
            let start = text
                .find(&format!("\n{k} = "))
                .unwrap_or_else(|| panic!("{k} is not in warden.toml"))
                + 1;
            let end = start + text[start..].find('\n').unwrap();
            text.replace_range(start..end, &format!("{k} = {v}"));
        }
        std::fs::write(&cfg, text).unwrap();
    }

    /// The events of one task, oldest first.
    pub(crate) fn events(&self, id: &str) -> Vec<Value> {
        let o = self.ok(&["--json", "history", id]);
        o.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// `warden run` in the background.
    pub(crate) fn spawn_run(&self) -> Child {
        let mut c = self.cmd(&["run", "--max-parallel", "4"]);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        c.spawn().unwrap()
    }

    /// Waits until `cond` holds on the task, checking the store (not a clock); fails
    /// after `secs`.
    pub(crate) fn wait_task(
        &self,
        id: &str,
        secs: u64,
        what: &str,
        cond: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let t = self.task(id);
            if cond(&t) {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "{id}: {what} did not happen: {t}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The pid the simulated agent of `role` wrote.
    pub(crate) fn agent_pid(&self, id: &str, role: &str) -> u32 {
        let f = self
            .root
            .join(format!(".warden/tasks/{id}/.sim-pid-{role}"));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(pid) = std::fs::read_to_string(&f)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                return pid;
            }
            assert!(Instant::now() < deadline, "no agent pid in {}", f.display());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

pub(crate) fn alive(pid: u32) -> bool {
    // Signal 0 to a zombie succeeds too; /proc tells a zombie apart.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

/// Waits for a process to end; fails after `secs`. Its pidfd says when (a zombie counts
/// as ended); without pidfds, /proc is looked at every 50 ms.
pub(crate) fn wait_gone(pid: u32, secs: u64) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::process::{Pid, PidfdFlags, pidfd_open};
    if let Some(p) = Pid::from_raw(pid as i32) {
        match pidfd_open(p, PidfdFlags::empty()) {
            Err(rustix::io::Errno::SRCH) => return,
            Ok(fd) => {
                let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                let limit = Timespec {
                    tv_sec: secs as i64,
                    tv_nsec: 0,
                };
                let ended = poll(&mut fds, Some(&limit)).unwrap_or(0) > 0;
                assert!(
                    ended || !alive(pid),
                    "process {pid} is still alive after {secs} s"
                );
                return;
            }
            Err(_) => {}
        }
    }
    let deadline = Instant::now() + Duration::from_secs(secs);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} is still alive after {secs} s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn stop(mut run: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &run.id().to_string()])
        .status();
    let _ = run.wait();
}

pub(crate) fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("").to_owned())
        .collect()
}

pub(crate) fn position(events: &[Value], pred: impl Fn(&Value) -> bool) -> usize {
    events
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("no such event in {:#?}", kinds(events)))
}

/// Item 1: The reviewer starts only after the worker has ended, and what the worker wrote
/// after its hand-off is committed and merged.
fn reviewer_waits_for_the_worker(session: &str) {
    let p = Project::new(session);
    p.import(r#"{"tasks": [{"id": "t", "agent": "build it (sim:linger)"}]}"#);
    assert_eq!(p.until_idle(), 6, "waits for the person's review");
    let ev = p.events("t");
    let worker_end = position(&ev, |e| {
        e["type"] == "session.exited" && e["data"]["session"] == "t-worker-1"
    });
    let reviewer = position(&ev, |e| {
        e["type"] == "agent.spawned" && e["data"]["role"] == "reviewer"
    });
    assert!(
        worker_end < reviewer,
        "the reviewer started while the worker lived: {:?}",
        kinds(&ev)
    );
    assert_eq!(ev[worker_end]["data"]["disposition"], "stale");
    assert_eq!(ev[worker_end]["actor"], "runner", "{}", ev[worker_end]);
    // One event per real end, however many reported it (the host, tmux's hook).
    for s in ["t-worker-1", "t-reviewer-1"] {
        let ends = ev
            .iter()
            .filter(|e| e["type"] == "session.exited" && e["data"]["session"] == s)
            .count();
        assert!(ends <= 1, "{s} ended {ends} times: {:?}", kinds(&ev));
    }
    let history = p.ok(&["history", "t"]);
    assert!(
        history.contains("worker t-worker-1 exited after its hand-off (exit 0)"),
        "{history}"
    );
    assert!(
        !kinds(&ev).contains(&"agent.crashed".to_owned()),
        "no crash"
    );
    // The late edit is on the branch before the review, and merged by the approval.
    assert_eq!(
        git(&p.root, &["show", "warden/t:late.txt"]),
        "late work of t\n"
    );
    p.ok(&["task", "update", "t", "--status", "done"]);
    assert_eq!(git(&p.root, &["show", "main:late.txt"]), "late work of t\n");
    assert_eq!(
        git(&p.root, &["show", "main:t.txt"]),
        "work of t, session 1\n"
    );
    p.person_files_intact();
    p.check();
}

#[test]
fn the_reviewer_waits_for_the_worker_in_process_sessions() {
    reviewer_waits_for_the_worker("process");
}

#[test]
fn the_reviewer_waits_for_the_worker_in_tmux_sessions() {
    reviewer_waits_for_the_worker("tmux");
}

/// Item 1: A worker that keeps running after its hand-off is stopped after the grace, the
/// reviewer starts after its end, and its end is not a crash.
#[test]
fn a_worker_running_past_its_hand_off_grace_is_stopped() {
    let p = Project::new("process");
    p.limits(&[("handoff_grace_s", "1"), ("kill_after_s", "1")]);
    p.import(r#"{"tasks": [{"id": "t", "agent": "build it (sim:linger-forever)"}]}"#);
    assert_eq!(p.until_idle(), 6);
    let pid = p.agent_pid("t", "worker");
    assert!(!alive(pid), "the worker was stopped");
    let ev = p.events("t");
    let stopped = position(&ev, |e| e["type"] == "session.stopped");
    assert!(
        ev[stopped]["reason"]
            .as_str()
            .unwrap()
            .contains("hand-off grace"),
        "{}",
        ev[stopped]
    );
    let reviewer = position(&ev, |e| {
        e["type"] == "agent.spawned" && e["data"]["role"] == "reviewer"
    });
    assert!(stopped < reviewer);
    assert!(!kinds(&ev).contains(&"agent.crashed".to_owned()));
    assert_eq!(p.task("t")["status"], "reviewing");
    p.check();
}

/// Item 2: `task cancel` stops the agent: with a supervisor running, and with none.
#[test]
fn cancel_stops_the_agent_with_and_without_a_supervisor() {
    for with_supervisor in [true, false] {
        let p = Project::new("process");
        p.import(r#"{"tasks": [{"id": "t", "agent": "never finishes (sim:hang)"}]}"#);
        let run = p.spawn_run();
        p.wait_task("t", 30, "the worker session", |t| !t["session"].is_null());
        let pid = p.agent_pid("t", "worker");
        assert!(alive(pid));
        if !with_supervisor {
            // The run stops; its sessions keep running, as they should.
            stop(run);
            assert!(alive(pid), "a stopped run leaves its sessions running");
            p.ok(&["task", "cancel", "t"]);
            wait_gone(pid, 15);
        } else {
            p.ok(&["task", "cancel", "t"]);
            wait_gone(pid, 15);
            stop(run);
        }
        let ev = p.events("t");
        let stopped = position(&ev, |e| e["type"] == "session.stopped");
        assert!(
            ev[stopped]["reason"]
                .as_str()
                .unwrap()
                .contains("moved to cancelled by the person"),
            "{}",
            ev[stopped]
        );
        assert_eq!(p.task("t")["status"], "cancelled");
        // The stopped session's end is recorded once, as the end of a stale session.
        p.wait_task("t", 15, "the end reported", |t| t["session"].is_null());
        let exits: Vec<Value> = p
            .events("t")
            .into_iter()
            .filter(|e| e["type"] == "session.exited")
            .collect();
        assert_eq!(exits.len(), 1, "one event for the one end: {exits:?}");
        assert_eq!(exits[0]["data"]["disposition"], "stale", "{exits:?}");
        assert_eq!(exits[0]["data"]["stopped"], true, "{exits:?}");
        p.check();
    }
}

/// Item 3: `task retry --clear-worktree` resets the worktree (and its branch) to the base.
#[test]
fn retry_with_clear_worktree_starts_from_the_base() {
    let p = Project::new("process");
    p.import(
        r#"{"tasks": [{"id": "s", "work": "echo line >> f.txt", "postchecks": "false",
                       "max_attempts": 1}]}"#,
    );
    assert_eq!(p.until_idle(), 7, "stuck after its one attempt");
    assert_eq!(p.task("s")["status"], "stuck");
    p.ok(&[
        "task",
        "retry",
        "s",
        "--clear-worktree",
        "--postchecks",
        "true",
    ]);
    assert_eq!(p.until_idle(), 0);
    assert_eq!(p.task("s")["status"], "done");
    // The work ran once on a fresh tree: one line, not the old one plus a new one.
    assert_eq!(git(&p.root, &["show", "main:f.txt"]), "line\n");
    assert!(p.events("s").iter().any(|e| e["type"] == "worktree.reset"));
    p.check();
}

/// Item 4: `passes` is cleared when the evidence of the attempt is gone (a FAIL review).
#[test]
fn a_failed_review_clears_passes() {
    let p = Project::new("process");
    p.import(
        r#"{"tasks": [{"id": "t", "agent": "build it (sim:fail-always)", "postchecks": "true"}]}"#,
    );
    assert_eq!(p.until_idle(), 7);
    let t = p.task("t");
    assert_eq!(t["status"], "stuck");
    assert_eq!(t["passes"], false, "{t}");
    assert_eq!(p.json(&["plan", "next"])["state"], "stuck");
    let state = p.ok(&["state"]);
    assert!(state.contains("Plans complete: 0/1"), "{state}");
    p.check();
}

/// A worker that asked a question ended "after its hand-off" in the history, and once
/// a person answered (clarification → working) `status` listed the task as running its
/// work phase, for ever, with no session and no supervisor. The next run starts the
/// worker again.
#[test]
fn a_question_answered_waits_for_its_worker_and_says_so() {
    let p = Project::new("process");
    p.import(r#"{"tasks": [{"id": "q", "agent": "paint it (sim:ask-once)"}]}"#);
    p.until_idle();
    assert_eq!(p.task("q")["status"], "clarification");
    let history = p.ok(&["history", "q"]);
    let exited: Vec<&str> = history
        .lines()
        .filter(|l| l.contains("session.exited"))
        .collect();
    assert_eq!(exited.len(), 1, "{exited:?}");
    assert!(
        exited[0].contains("worker q-worker-1 exited after asking a question (exit 0)"),
        "{exited:?}"
    );
    p.ok(&["task", "update", "q", "--status", "working"]);
    let status = p.json(&["status"]);
    assert_eq!(status["running"], serde_json::json!([]), "{status}");
    assert_eq!(
        p.until_idle(),
        6,
        "the answer's worker runs, then review waits"
    );
    assert_eq!(p.task("q")["status"], "reviewing");
    p.check();
}

/// Item 5: A parent whose children are all done is done, in every view.
#[test]
fn parents_finish_with_their_children() {
    let p = Project::new("process");
    p.import(
        r#"{"tasks": [{"id": "g", "title": "Group"},
                      {"id": "a", "parent": "g", "work": "echo a > a.txt"},
                      {"id": "b", "parent": "g", "work": "echo b > b.txt"}]}"#,
    );
    assert_eq!(p.until_idle(), 0);
    let g = p.task("g");
    assert_eq!(
        (g["status"].as_str(), g["passes"].as_bool()),
        (Some("done"), Some(true))
    );
    let list = p.json(&["task", "list", "--status", "done"]);
    assert!(list.as_array().unwrap().iter().any(|t| t["id"] == "g"));
    let show = p.json(&["plan", "show"]);
    assert_eq!(show[0]["id"], "g");
    assert_eq!(show[0]["status"], "done");
    assert_eq!(show[0]["passes"], true);
    // A task that depends on the group runs once the group is done.
    p.import(r#"{"tasks": [{"id": "after", "work": "true", "depends_on": ["g"]}]}"#);
    assert_eq!(p.until_idle(), 0);
    assert_eq!(p.task("after")["status"], "done");
    p.check();
}

/// A group's `depends_on` holds back every leaf below it: the run starts none of them
/// before the dependency is done, and every view says they are blocked until then.
#[test]
fn a_groups_dependency_holds_back_its_leaves() {
    let p = Project::new("process");
    p.import(
        r#"{"tasks": [{"id": "g1", "title": "Phase 1"},
                      {"id": "a", "parent": "g1", "work": "echo a > a.txt"},
                      {"id": "g2", "title": "Phase 2", "depends_on": ["g1"]},
                      {"id": "d", "parent": "g2", "work": "echo d > d.txt"}]}"#,
    );
    assert_eq!(p.task("d")["gate"], "BLOCKED", "{}", p.task("d"));
    let list = p.json(&["task", "list"]);
    let d = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "d")
        .unwrap();
    assert_eq!(d["gate"], "BLOCKED", "{d}");
    assert_eq!(p.json(&["plan", "next"])["next"], "a");
    assert_eq!(p.until_idle(), 0);
    assert_eq!(p.task("d")["status"], "done");
    // d started only after a was done (one pass would have started both).
    let seq = |id: &str, to: &str| {
        p.events(id)
            .iter()
            .find(|e| e["type"] == "status.changed" && e["to"] == to)
            .unwrap_or_else(|| panic!("{id} never went {to}"))["seq"]
            .as_u64()
            .unwrap()
    };
    assert!(
        seq("a", "done") < seq("d", "working"),
        "d started before its group's dependency was done"
    );
    p.check();
}

/// Item 6: A direct task's agent is told only what the direct map allows.
#[test]
fn direct_agents_get_the_direct_prompt() {
    let p = Project::new("process");
    p.ok(&[
        "task",
        "create",
        "d",
        "--agent",
        "tidy the code",
        "--workflow",
        "direct",
    ]);
    p.ok(&["task", "update", "d", "--status", "working"]);
    let prompt = p.ok(&["prompt", "d"]);
    for absent in ["task complete", "Handoff", "clarification"] {
        assert!(!prompt.contains(absent), "{absent}: {prompt}");
    }
    assert_eq!(p.json(&["prompt", "d"])["kind"], "direct");
}

/// Item 6, carried on: a direct task's agent that ends its session is the work's result,
/// not a dead session waiting for a person. One that exits 0 is committed, checked and
/// merged; one that exits 1 gets its one heal and then finishes the same way.
#[test]
fn direct_agent_work_that_ends_goes_on_to_done() {
    let p = Project::new("process");
    p.import(
        r#"{"tasks": [
            {"id": "ok", "agent": "tidy the code (sim:exit-only)", "workflow": "direct"},
            {"id": "heal", "agent": "tidy more (sim:crash-once)", "workflow": "direct"}
        ]}"#,
    );
    assert_eq!(p.until_idle(), 0);
    for id in ["ok", "heal"] {
        let t = p.task(id);
        assert_eq!(t["status"], "done", "{t:#}");
        assert_eq!(t["dead"], false, "{t:#}");
    }
    assert_eq!(p.task("heal")["auto_heal"], serde_json::json!(["work"]));
    // The work reached the base branch.
    let files = git(&p.root, &["ls-tree", "--name-only", "main"]);
    assert!(files.contains("ok.txt"), "{files}");
    p.check();
}

/// Item 7: `task respawn` of a task without agent work is refused, pointing at retry.
#[test]
fn respawn_of_shell_work_is_refused() {
    let p = Project::new("process");
    p.import(r#"{"tasks": [{"id": "s", "work": "false", "max_attempts": 1}]}"#);
    assert_eq!(p.until_idle(), 7);
    assert_eq!(p.task("s")["status"], "stuck");
    let before = p.task("s")["version"].clone();
    let o = p.run(&["task", "respawn", "s"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("warden task retry"), "{err}");
    assert_eq!(p.task("s")["version"], before, "nothing changed");
}

/// Item 8: Attempts of shell work wait a doubling backoff, so a flaky check gets time.
#[test]
fn shell_attempts_wait_a_backoff() {
    let p = Project::new("process");
    p.limits(&[("retry_backoff_s", "1")]);
    p.import(
        r#"{"tasks": [{"id": "s", "work": "true", "postchecks": "false", "max_attempts": 3}]}"#,
    );
    assert_eq!(p.until_idle(), 7);
    let at: Vec<jiff::Timestamp> = p
        .events("s")
        .iter()
        .filter(|e| e["type"] == "guard.ran" && e["reason"] == "fail")
        .map(|e| e["at"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(at.len(), 3, "three attempts");
    let gap = |i: usize| at[i + 1].duration_since(at[i]).as_secs_f64();
    assert!(gap(0) >= 1.0, "first wait {}", gap(0));
    assert!(gap(1) >= 2.0, "second wait {} doubles", gap(1));
}

/// Item 9: Auto-heal as DESIGN 2.4: failed prechecks of agent work start the agent once to
/// fix them, then the prechecks run again; no attempt is charged.
#[test]
fn failed_prechecks_heal_then_run_again() {
    let p = Project::new("process");
    p.import(
        r#"{"tasks": [{"id": "t", "agent": "build it (sim:good)", "prechecks": "test -f fixed.txt"}]}"#,
    );
    assert_eq!(p.until_idle(), 6, "reaches review after the heal");
    let ev = p.events("t");
    let k = kinds(&ev);
    let healed = position(&ev, |e| e["type"] == "auto.healed");
    let heal_session = position(&ev, |e| {
        e["type"] == "agent.spawned" && e["data"]["heal"] == "prechecks"
    });
    let prechecks_ok = position(&ev, |e| {
        e["type"] == "phase.changed"
            && e["data"]["phase"] == "prechecks"
            && e["data"]["status"] == "success"
    });
    assert!(
        healed < heal_session && heal_session < prechecks_ok,
        "{k:?}"
    );
    assert!(
        !k.contains(&"attempt.failed".to_owned()),
        "a heal is not an attempt"
    );
    assert!(
        !k.contains(&"agent.crashed".to_owned()),
        "a heal session is not a crash"
    );
    let t = p.task("t");
    assert_eq!(t["attempts"], 0);
    assert_eq!(t["status"], "reviewing");
    p.check();
}

/// Item 10: `plan apply` reaching done merges the task's work like any other path.
#[test]
fn plan_apply_to_done_merges() {
    let p = Project::new("process");
    p.import(r#"{"tasks": [{"id": "t", "agent": "build it (sim:good)"}]}"#);
    assert_eq!(p.until_idle(), 6);
    assert!(
        git(&p.root, &["ls-tree", "--name-only", "main"])
            .lines()
            .all(|l| l != "t.txt")
    );
    let tree = p.ok(&["plan", "export"]);
    std::fs::write(p.root.join(".warden/tree.json"), tree).unwrap();
    p.ok(&[
        "plan",
        "apply",
        ".warden/tree.json",
        "--selected",
        "t",
        "--status",
        "done",
        "--guard",
        "pass",
    ]);
    assert_eq!(p.task("t")["status"], "done");
    assert_eq!(p.task("t")["phases"]["merge-ri"], "success");
    assert_eq!(
        git(&p.root, &["show", "main:t.txt"]),
        "work of t, session 1\n"
    );
    p.check();
}

/// Item 11: A commit that loses a race after merge-ri decides again (merge-ri is idempotent),
/// so the task ends done with its work merged instead of exit 4 with the base holding
/// work of a task that is not done.
#[test]
fn a_conflict_after_merge_ri_ends_done() {
    let p = Project::new("process");
    p.import(r#"{"tasks": [{"id": "t", "agent": "build it (sim:good)"}]}"#);
    assert_eq!(p.until_idle(), 6);
    let o = p
        .cmd(&["task", "update", "t", "--status", "done"])
        .env("WARDEN_FAILPOINT", "conflict-once")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(p.task("t")["status"], "done");
    assert_eq!(
        git(&p.root, &["show", "main:t.txt"]),
        "work of t, session 1\n"
    );
    p.check();
}

/// Item 12: Recovery state: continue.md is there after a kill -9 and kept until the next run
/// resumed; resume_from_phase is cleared once its phase runs; a done task's worktree is
/// removed; a tmux run leaves no server behind.
#[test]
fn recovery_state_is_reliable() {
    let p = Project::new("tmux");
    p.import(
        r#"{"tasks": [{"id": "t", "agent": "never finishes (sim:hang)"},
                      {"id": "s", "work": "echo s > s.txt", "postchecks": "test -f ok",
                       "max_attempts": 1}]}"#,
    );
    let mut run = p.spawn_run();
    p.wait_task("t", 30, "the worker session", |t| !t["session"].is_null());
    p.wait_task("s", 30, "s stuck", |t| t["status"] == "stuck");
    let cont = p.root.join(".warden/continue.md");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&cont).is_ok_and(|c| c.contains("- t (working)")) {
        assert!(Instant::now() < deadline, "continue.md does not name t");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill")
        .args(["-KILL", &run.id().to_string()])
        .status();
    let _ = run.wait();
    assert!(cont.exists(), "continue.md survives a kill -9");
    // The next run resumes: continue.md is kept while it works.
    let run = p.spawn_run();
    std::thread::sleep(Duration::from_millis(300));
    assert!(cont.exists(), "kept until the run has resumed");
    p.ok(&["task", "cancel", "t"]);
    p.wait_task("t", 20, "the end of the cancelled session", |t| {
        t["session"].is_null()
    });
    stop(run);
    // resume_from_phase: set by a retry, cleared when its phase runs.
    p.ok(&["task", "retry", "s", "--postchecks", "true"]);
    assert_eq!(p.task("s")["resume_from_phase"], "postchecks");
    assert_eq!(p.until_idle(), 0);
    let s = p.task("s");
    assert_eq!(s["status"], "done");
    assert!(s["resume_from_phase"].is_null(), "{s}");
    assert!(!cont.exists(), "an idle end removes continue.md");
    assert!(
        !p.root.join(".warden/worktrees/s").exists(),
        "a merged worktree is removed"
    );
    let o = Command::new("tmux")
        .arg("-S")
        .arg(p.root.join(".warden/tmux.sock"))
        .arg("list-sessions")
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "no tmux server is left: {}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// Work that cannot even start (here its sessions folder is a file) is a failed attempt
/// each time: the run ends with the task stuck after its attempts, instead of starting
/// it again and again for ever.
#[test]
fn work_that_cannot_start_spends_attempts_and_ends_stuck() {
    let p = Project::new("process");
    p.limits(&[("retry_backoff_s", "0")]);
    p.import(r#"{"tasks": [{"id": "s", "work": "echo hi", "max_attempts": 2}]}"#);
    // An import writes no task folder (TASK.md comes with the first write): make it.
    std::fs::create_dir_all(p.root.join(".warden/tasks/s")).unwrap();
    std::fs::write(p.root.join(".warden/tasks/s/sessions"), "").unwrap();
    assert_eq!(p.until_idle(), 7, "stuck");
    let t = p.task("s");
    assert_eq!(t["status"], "stuck", "{t}");
    assert_eq!(t["attempts"], 2, "{t}");
    let ev = p.events("s");
    let failed = ev.iter().filter(|e| e["type"] == "session.failed").count();
    assert_eq!(failed, 2, "{:?}", kinds(&ev));
    p.check();
}

/// A runner that stops dead between recording a session and starting it leaves a session
/// that never ran. The next run ends it as never started: Warden's side, so no crash is
/// charged, and the session it meant to start starts. (It was taken for the worker's
/// crash: a dead task waiting for a person's respawn, for a restart of `warden run`.)
fn a_session_its_runner_never_started_is_started_again(mode: &str) {
    let p = Project::new(mode);
    p.import(r#"{"tasks": [{"id": "r", "agent": "x (sim:good)"}]}"#);
    let o = p
        .cmd(&["run", "--until-idle"])
        .env("WARDEN_FAILPOINT", "session-recorded")
        .output()
        .unwrap();
    assert!(!o.status.success(), "the failpoint stops the run: {o:?}");
    let t = p.task("r");
    let sid = t["session"]
        .as_str()
        .expect("a session is recorded")
        .to_owned();
    assert!(
        !p.root
            .join(format!(".warden/tasks/r/sessions/{sid}.started"))
            .exists(),
        "nothing of it ran"
    );
    assert_eq!(p.until_idle(), 6, "the task waits for a person's review");
    let t = p.task("r");
    assert_eq!(
        (
            t["status"].as_str(),
            t["crash_count"].as_u64(),
            t["dead"].as_bool()
        ),
        (Some("reviewing"), Some(0), Some(false)),
        "{t}"
    );
    let ev = p.events("r");
    let never = position(&ev, |e| {
        e["type"] == "session.exited" && e["data"]["disposition"] == "unstarted"
    });
    assert_eq!(ev[never]["data"]["session"], sid.as_str());
    assert!(
        !kinds(&ev).contains(&"agent.crashed".to_owned()),
        "{:?}",
        kinds(&ev)
    );
    let workers = ev
        .iter()
        .filter(|e| e["type"] == "agent.spawned" && e["data"]["role"] == "worker")
        .count();
    assert_eq!(workers, 2, "the worker started again: {:?}", kinds(&ev));
    assert!(
        !p.root.join(".warden/tasks/r/sessions").exists()
            || std::fs::read_dir(p.root.join(".warden/tasks/r/sessions"))
                .unwrap()
                .next()
                .is_none(),
        "no session files are left"
    );
    p.check();
}

#[test]
fn a_process_session_its_runner_never_started_is_started_again() {
    a_session_its_runner_never_started_is_started_again("process");
}

#[test]
fn a_tmux_session_its_runner_never_started_is_started_again() {
    a_session_its_runner_never_started_is_started_again("tmux");
}

/// `warden run --until-idle` stopped by INT or TERM before it was idle exits 130 or
/// 143: a script's `warden run --until-idle && deploy` must not go on. Before, it exited
/// 0, the code for "every task is done".
#[test]
fn an_interrupted_until_idle_run_does_not_say_all_is_done() {
    let p = Project::new("process");
    p.import(r#"{"tasks": [{"id": "s", "work": "sleep 600"}]}"#);
    for (sig, code) in [("-INT", 130), ("-TERM", 143)] {
        let mut c = p.cmd(&["--json", "run", "--until-idle"]);
        c.stdout(Stdio::piped()).stderr(Stdio::null());
        let mut run = c.spawn().unwrap();
        // Its first event says it runs (its signal handlers are in place by then).
        let mut first = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(run.stdout.as_mut().unwrap()),
            &mut first,
        )
        .unwrap();
        assert!(first.contains("\"started\""), "{first}");
        let started: Value = serde_json::from_str(&first).unwrap();
        if sig == "-TERM" {
            // After a Ctrl-C, the next run says it resumes an interrupted run.
            assert!(
                started["resumed"]
                    .as_str()
                    .is_some_and(|r| r.contains("interrupted by a signal")),
                "{first}"
            );
        }
        p.wait_task("s", 30, "its work session is alive", |t| {
            t["session"].is_string()
        });
        Command::new("kill")
            .args([sig, &run.id().to_string()])
            .status()
            .unwrap();
        let status = run.wait().unwrap();
        assert_eq!(status.code(), Some(code), "{sig}");
    }
    // A run started beside a live one resumes nothing: the live run's resume file is
    // no stop (before, it said the live run "was killed (kill -9 …)").
    let started = |run: &mut Child| -> Value {
        let mut first = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(run.stdout.as_mut().unwrap()),
            &mut first,
        )
        .unwrap();
        serde_json::from_str(&first).unwrap()
    };
    let spawn = || {
        let mut c = p.cmd(&["--json", "run"]);
        c.stdout(Stdio::piped()).stderr(Stdio::null());
        c.spawn().unwrap()
    };
    let mut a = spawn();
    started(&mut a);
    p.wait_task("s", 30, "its session is adopted", |t| {
        t["session"].is_string()
    });
    let mut b = spawn();
    let b_started = started(&mut b);
    assert!(b_started["resumed"].is_null(), "{b_started}");
    stop(b);
    stop(a);
    p.ok(&["task", "cancel", "s"]);
}

/// A cancelled task runs nothing: `warden status` does not list it as running (its
/// `work` phase stayed marked `running`, and it was listed for good), and `task log -f`
/// on it returns instead of waiting for ever.
#[test]
fn a_cancelled_task_is_not_running_and_its_log_follow_ends() {
    let p = Project::new("process");
    p.import(r#"{"tasks": [{"id": "s", "work": "sleep 600"}]}"#);
    let run = p.spawn_run();
    p.wait_task("s", 30, "its work session is alive", |t| {
        t["session"].is_string()
    });
    let running = p.ok(&["--json", "status"]);
    let v: Value = serde_json::from_str(&running).unwrap();
    assert_eq!(v["running"][0]["id"], "s", "{v}");
    p.ok(&["task", "cancel", "s"]);
    stop(run);
    let v: Value = serde_json::from_str(&p.ok(&["--json", "status"])).unwrap();
    assert_eq!(v["running"], serde_json::json!([]), "{v}");
    let mut follow = p
        .cmd(&["task", "log", "s", "-f"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_gone(follow.id(), 20);
    assert_eq!(follow.wait().unwrap().code(), Some(0));
}

/// A task whose checks run shows as running, with the phase (before, a task whose
/// prechecks ran for minutes showed "Running: nothing" and its prechecks pending); a
/// cancel that stops them records no failure of them.
#[test]
fn a_task_whose_checks_run_shows_as_running() {
    let p = Project::new("process");
    p.import(r#"{"tasks": [{"id": "c", "work": "true", "prechecks": "sleep 600"}]}"#);
    let run = p.spawn_run();
    let note = p.root.join(".warden/tasks/c/check.pid");
    let deadline = Instant::now() + Duration::from_secs(30);
    // The note names the check's holder, group, start and phase once it runs.
    while !std::fs::read_to_string(&note).is_ok_and(|t| t.split_whitespace().count() == 4) {
        assert!(Instant::now() < deadline, "the prechecks never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let v: Value = serde_json::from_str(&p.ok(&["--json", "status"])).unwrap();
    assert_eq!(v["running"][0]["id"], "c", "{v}");
    assert_eq!(v["running"][0]["phase"], "prechecks", "{v}");
    // A cancel stops them; that is no verdict on the task: no failed prechecks, no heal.
    p.ok(&["task", "cancel", "c"]);
    let log = p.root.join(".warden/tasks/c/check.pid");
    let deadline = Instant::now() + Duration::from_secs(30);
    while log.exists() {
        assert!(Instant::now() < deadline, "the prechecks were not stopped");
        std::thread::sleep(Duration::from_millis(20));
    }
    stop(run);
    let events = p.events("c");
    assert!(
        !events.iter().any(|e| e["type"] == "auto.healed"
            || (e["type"] == "phase.changed" && e["data"]["phase"] == "prechecks")),
        "{:?}",
        kinds(&events)
    );
}
