//! The crash matrix (issue 8, RELIABILITY.md): for every failpoint of the write path,
//! stop a real `warden` there, reopen, and check that `warden check` passes and the task
//! is exactly as before or exactly as after — never in between — with TASK.md intact.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

static N: AtomicUsize = AtomicUsize::new(0);

struct Ws(PathBuf);

impl Drop for Ws {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Ws {
    fn new() -> Ws {
        let d = std::env::temp_dir().join(format!(
            "warden-crash-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let ws = Ws(d);
        ws.ok(&["init"]);
        ws
    }

    fn run(&self, args: &[&str], failpoint: Option<&str>) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_warden"));
        c.args(args).current_dir(&self.0).env("NO_COLOR", "1");
        for v in [
            "WARDEN_TASK_ID",
            "WARDEN_ROLE",
            "WARDEN_DIR",
            "WARDEN_STORE_URL",
        ] {
            c.env_remove(v);
        }
        match failpoint {
            Some(f) => c.env("WARDEN_FAILPOINT", f),
            None => c.env_remove("WARDEN_FAILPOINT"),
        };
        c.output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args, None);
        assert!(
            o.status.success(),
            "warden {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn show(&self, id: &str) -> Value {
        serde_json::from_str(&self.ok(&["--json", "task", "show", id])).unwrap()
    }

    fn events(&self) -> usize {
        self.ok(&["--json", "history"]).lines().count()
    }

    fn task_md(&self, id: &str) -> PathBuf {
        self.0.join(".warden/tasks").join(id).join("TASK.md")
    }
}

fn handoff(ws: &Ws, id: &str) {
    let p = ws.task_md(id);
    let mut s = std::fs::read_to_string(&p).unwrap();
    s.push_str("\n## Handoff\nDONE: the work\n");
    std::fs::write(p, s).unwrap();
}

fn assert_task_md_intact(path: &Path, status: &str) {
    let text = std::fs::read_to_string(path).expect("TASK.md is readable");
    assert!(text.starts_with("---\n"), "frontmatter intact:\n{text}");
    assert!(
        text.contains("## Handoff\nDONE: the work"),
        "body intact:\n{text}"
    );
    assert!(text.contains("## Context"), "skeleton intact:\n{text}");
    // The mirror may lag a crash between commit and rewrite, but it is one whole
    // version: either status line, never a torn file.
    assert!(
        text.contains("status: working") || text.contains(&format!("status: {status}")),
        "the mirror is a whole version:\n{text}"
    );
}

/// Every failpoint, three runs each: before or after, never between.
#[test]
fn every_failpoint_leaves_the_state_before_or_after() {
    let points = [
        "after-begin",
        "after-events",
        "after-row",
        "before-commit",
        "after-commit",
        "mid-taskmd-write",
        "before-sync",
    ];
    let mut injected = 0;
    for fp in points {
        for round in 0..3 {
            let ws = Ws::new();
            ws.ok(&["task", "create", "t", "--agent", "x"]);
            ws.ok(&["task", "update", "t", "--status", "working"]);
            handoff(&ws, "t");
            let before = ws.show("t");
            let events_before = ws.events();
            let o = ws.run(&["task", "complete", "t"], Some(fp));
            assert!(
                !o.status.success(),
                "{fp} round {round}: the failpoint did not fire"
            );
            injected += 1;
            // Reopen: the store opens, the log replays, the state is before or after.
            ws.ok(&["check"]);
            let after = ws.show("t");
            let events_after = ws.events();
            let committed = matches!(fp, "after-commit" | "mid-taskmd-write" | "before-sync");
            if committed {
                assert_eq!(after["status"], "agent-review", "{fp}: {after}");
                assert_eq!(after["version"], before["version"].as_u64().unwrap() + 1);
                assert!(events_after > events_before);
            } else {
                assert_eq!(after, before, "{fp}: nothing of the write survives");
                assert_eq!(events_after, events_before, "{fp}: no event survives");
            }
            assert_task_md_intact(&ws.task_md("t"), "agent-review");
            // The next write works and leaves the files consistent.
            ws.ok(&[
                "task",
                "update",
                "t",
                "--status",
                if committed {
                    "cancelled"
                } else {
                    "clarification"
                },
            ]);
            ws.ok(&["check"]);
        }
    }
    eprintln!("crash matrix: {injected} crashes injected, every one before or after");
}

/// Written but reported failed: the caller retries with the same request id and the
/// change is applied exactly once.
#[test]
fn written_but_reported_failed_applies_once_with_the_same_request_id() {
    let ws = Ws::new();
    ws.ok(&["task", "create", "t", "--agent", "x"]);
    ws.ok(&["task", "update", "t", "--status", "working"]);
    let args = [
        "task",
        "update",
        "t",
        "--status",
        "clarification",
        "--request-id",
        "req-1",
    ];
    let o = ws.run(&args, Some("after-commit-exit"));
    assert_eq!(o.status.code(), Some(5), "reported as failed");
    let v1 = ws.show("t")["version"].as_u64().unwrap();
    let o = ws.run(&args, None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = ws.show("t");
    assert_eq!(t["status"], "clarification");
    assert_eq!(
        t["version"].as_u64().unwrap(),
        v1,
        "the retry changed nothing"
    );
    let hist = ws.ok(&["--json", "history", "t"]);
    let n = hist
        .lines()
        .filter(|l| l.contains("\"to\":\"clarification\""))
        .count();
    assert_eq!(n, 1, "applied exactly once:\n{hist}");
    ws.ok(&["check"]);
}
