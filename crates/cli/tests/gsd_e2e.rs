//! A get-shit-done project run by Warden end to end: `plan sync`, then the real
//! supervisor with simulated agents (`warden agent-sim`'s `gsd` scenarios) in real git
//! worktrees, a person approving what reaches `reviewing`, and GSD's files written back;
//! also `plan sync --watch` picking up a plan added during a run, and a plan finished
//! outside Warden whose task has a branch going through merge-ri.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{bin, unique_dir};

fn git(root: &Path, args: &[&str]) -> String {
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

/// A git repository holding a `.planning/` tree (committed, as GSD does), with a Warden
/// workspace whose agent is the simulated one.
struct Project {
    root: PathBuf,
}

impl Drop for Project {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn plan(objective: &str, scenario: &str, front: &str) -> String {
    format!(
        "---\n{front}---\n\n<objective>\n{objective} (sim:{scenario})\n</objective>\n\n<tasks>\n<task type=\"auto\">\n  <name>Task 1: {objective}</name>\n  <action>Write the code for: {objective}.</action>\n</task>\n</tasks>\n\n<verification>\nIt works.\n</verification>\n"
    )
}

impl Project {
    fn new(name: &str, files: &[(&str, String)]) -> Project {
        let root = unique_dir(name);
        let p = Project { root };
        git(&p.root, &["init", "-q", "-b", "main"]);
        std::fs::write(p.root.join("README.md"), "# app\n").unwrap();
        for (path, text) in files {
            p.write(path, text);
        }
        git(&p.root, &["add", "-A"]);
        git(&p.root, &["commit", "-q", "-m", "plan the project"]);
        p.ok(&["init"]);
        let cfg = p.root.join(".warden/warden.toml");
        let text = crate::run_e2e::sim_agent(&std::fs::read_to_string(&cfg).unwrap());
        std::fs::write(&cfg, text).unwrap();
        p
    }

    fn write(&self, path: &str, text: &str) {
        let f = self.root.join(path);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    }

    fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.root.join(path)).unwrap_or_default()
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(args).current_dir(&self.root).env("NO_COLOR", "1");
        for v in crate::common::WARDEN_ENV {
            c.env_remove(v);
        }
        c.env_remove("WARDEN_CREDENTIALS").env_remove("PGPASSWORD");
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).stdin(Stdio::null()).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "warden {args:?} failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        serde_json::from_str(&self.ok(&a)).unwrap()
    }

    fn task(&self, id: &str) -> Value {
        self.json(&["task", "show", id])
    }

    fn status(&self, id: &str) -> String {
        self.task(id)["status"].as_str().unwrap().to_owned()
    }

    /// Runs the supervisor, approving what reaches `reviewing` as a person would, until
    /// nothing is left to run.
    fn run_to_end(&self) {
        for _ in 0..12 {
            // 0 all done, 6 reviews wait for a person (approved below), 7 blocked.
            let o = self.run(&["run", "--until-idle", "--max-parallel", "4"]);
            assert!(
                [Some(0), Some(6), Some(7)].contains(&o.status.code()),
                "warden run failed: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
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
        panic!("the plan did not settle in 12 passes");
    }

    /// The simulated agents' log: `(task, plan file, prompt held the plan)`, in order.
    fn sim_log(&self) -> Vec<(String, String, bool)> {
        self.read(".warden/sim-gsd.log")
            .lines()
            .map(|l| {
                let mut it = l.split(' ');
                let id = it.next().unwrap_or("").to_owned();
                let plan = it
                    .next()
                    .and_then(|p| p.strip_prefix("plan="))
                    .unwrap_or("")
                    .to_owned();
                let held = it.next() == Some("prompt_has_plan=true");
                (id, plan, held)
            })
            .collect()
    }
}

const STATE: &str = "---\nmilestone: v1.0\nprogress:\n  total_phases: 3\n  completed_phases: 0\n  total_plans: 5\n  completed_plans: 1\n  percent: 20\n---\n\n# Project State\n\nPhase: 1 of 3\n\nProgress: [██░░░░░░░░] 20%\n";

#[test]
fn a_synced_gsd_project_runs_in_declared_order_and_writes_back() {
    let p = Project::new(
        "gsd-e2e",
        &[
            (".planning/STATE.md", STATE.to_owned()),
            (
                ".planning/ROADMAP.md",
                "# Roadmap\n### Phase 1: Setup\n### Phase 2: Build\n### Phase 3: Later\n".into(),
            ),
            (
                ".planning/phases/01-setup/01-01-PLAN.md",
                plan("Create the repository layout", "gsd", ""),
            ),
            (
                ".planning/phases/01-setup/01-01-SUMMARY.md",
                "# Summary\n\nLayout created.\n".into(),
            ),
            // GSD's first versions: no wave, no depends_on: one by one.
            (
                ".planning/phases/01-setup/01-02-PLAN.md",
                plan("Add the configuration loader", "gsd", ""),
            ),
            (
                ".planning/phases/02-build/02-01-PLAN.md",
                plan("Build the parser", "gsd", "wave: 1\ndepends_on: []\n"),
            ),
            (
                ".planning/phases/02-build/02-02-PLAN.md",
                plan("Build the renderer", "gsd", "wave: 1\ndepends_on: []\n"),
            ),
            (
                ".planning/phases/02-build/02-03-PLAN.md",
                plan(
                    "Wire parser and renderer together",
                    "gsd-handoff",
                    "wave: 2\ndepends_on: [\"02-01\", \"02-02\"]\n",
                ),
            ),
        ],
    );
    std::fs::create_dir_all(p.root.join(".planning/phases/03-later")).unwrap();
    let v = p.json(&["plan", "sync"]);
    assert_eq!(v["plans"], 5, "{v}");
    assert_eq!(v["complete"], 1);
    assert_eq!(
        v["phases_without_plans"],
        serde_json::json!(["phases/03-later"])
    );
    assert_eq!(p.status("01-01"), "done");
    assert_eq!(
        p.task("02-03")["depends_on"],
        serde_json::json!(["02-01", "02-02"])
    );
    assert_eq!(p.json(&["plan", "next"])["next"], "01-02");

    p.run_to_end();

    // The agents ran in the declared order, each with its PLAN.md in its prompt.
    let log = p.sim_log();
    let order: Vec<&str> = log.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(order.len(), 4, "{log:?}");
    assert_eq!(order[0], "01-02", "{log:?}");
    let mut wave1 = vec![order[1], order[2]];
    wave1.sort();
    assert_eq!(wave1, ["02-01", "02-02"], "{log:?}");
    assert_eq!(order[3], "02-03", "{log:?}");
    for (id, file, held) in &log {
        assert!(*held, "{id}'s prompt did not hold {file}");
        assert!(file.ends_with(&format!("{id}-PLAN.md")), "{id}: {file}");
    }
    for id in ["01-02", "02-01", "02-02", "02-03"] {
        assert_eq!(p.status(id), "done", "{id}");
    }
    // The agents' SUMMARY files reached the project through merge-ri; the one whose
    // agent wrote only a Handoff was written back from it, in GSD's layout.
    for id in ["01-02", "02-01", "02-02"] {
        let phase = if id.starts_with("01") {
            "01-setup"
        } else {
            "02-build"
        };
        let s = p.read(&format!(".planning/phases/{phase}/{id}-SUMMARY.md"));
        assert!(s.contains("Done by agent-sim"), "{id}: {s:?}");
    }
    let s = p.read(".planning/phases/02-build/02-03-SUMMARY.md");
    assert!(s.starts_with("---\nphase: 02-build\nplan: 03\n"), "{s}");
    assert!(s.contains("DONE: carried out plan"), "{s}");
    assert!(s.contains("Written by Warden from task 02-03"), "{s}");
    // STATE.md's progress follows.
    let state = p.read(".planning/STATE.md");
    assert!(state.contains("Progress: [██████████] 100%"), "{state}");
    assert!(state.contains("  completed_plans: 5\n"), "{state}");
    assert!(state.contains("  completed_phases: 2\n"), "{state}");

    // A fresh sync reads every SUMMARY as done: nothing left, phases done.
    let v = p.json(&["plan", "sync"]);
    assert_eq!(v["complete"], 5, "{v}");
    assert!(
        v["notes"].as_array().unwrap().is_empty(),
        "no disagreement: {v}"
    );
    assert_eq!(p.status("01-setup"), "done");
    assert_eq!(p.status("02-build"), "done");
    assert_eq!(p.json(&["plan", "next"])["state"], "complete");
    p.ok(&["check"]);
}

#[test]
fn watch_picks_up_a_plan_added_while_a_run_goes_on() {
    let p = Project::new(
        "gsd-watch",
        &[(
            ".planning/phases/01-a/01-01-PLAN.md",
            plan("First plan", "gsd-wait", "wave: 1\ndepends_on: []\n"),
        )],
    );
    let watch = p
        .cmd(&["--json", "plan", "sync", "--watch"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // A failed assertion below must not leave the watch running for ever.
    struct KillOnPanic(u32);
    impl Drop for KillOnPanic {
        fn drop(&mut self) {
            if std::thread::panicking()
                && let Some(pid) = rustix::process::Pid::from_raw(self.0 as i32)
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
    let _guard = KillOnPanic(watch.id());
    let wait_for = |what: &str, ok: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ok() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let exists = |id: &str| p.run(&["task", "show", id]).status.success();
    wait_for("the first sync", &|| exists("01-01"));
    let mut run = p
        .cmd(&["run", "--until-idle", "--max-parallel", "2"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("01-01 to start", &|| p.sim_log().len() == 1);
    // A person adds a plan while 01-01's agent is working.
    p.write(
        ".planning/phases/01-a/01-02-PLAN.md",
        &plan("Second plan", "gsd", "wave: 1\ndepends_on: []\n"),
    );
    wait_for("the watch to sync 01-02", &|| exists("01-02"));
    wait_for("01-02's agent to run", &|| {
        p.sim_log().iter().any(|(id, _, _)| id == "01-02")
    });
    std::fs::write(p.root.join(".warden/sim-release"), "").unwrap();
    let status = run.wait().unwrap();
    // Idle with reviews waiting for a person: the documented exit code 6.
    assert!([Some(0), Some(6)].contains(&status.code()), "{status}");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(watch.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let out = watch.wait_with_output().unwrap();
    assert!(out.status.success(), "the watch stops cleanly on SIGTERM");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["created"] == serde_json::json!(["01-02"])),
        "{lines:?}"
    );
    assert_eq!(p.status("01-01"), "reviewing");
    assert_eq!(p.status("01-02"), "reviewing");
    p.ok(&["check"]);
}

/// A plan finished outside Warden while its task has a branch with work: the move to
/// done goes through merge-ri, and a conflict refuses it.
#[test]
fn finished_outside_with_a_branch_goes_through_merge_ri() {
    let p = Project::new(
        "gsd-branch",
        &[
            (
                ".planning/phases/01-a/01-01-PLAN.md",
                plan("Write notes", "no-artifact", ""),
            ),
            ("notes.txt", "base\n".into()),
        ],
    );
    p.ok(&["plan", "sync"]);
    // The agent ends without a handoff: the task waits (a dead session: exit 7), with
    // its worktree and branch.
    assert_eq!(p.run(&["run", "--until-idle"]).status.code(), Some(7));
    assert_eq!(p.status("01-01"), "working");
    p.ok(&["task", "update", "01-01", "--status", "stuck"]);
    let wt = p.root.join(".warden/worktrees/01-01");
    std::fs::write(wt.join("notes.txt"), "from the branch\n").unwrap();
    git(&wt, &["commit", "-q", "-am", "work on the branch"]);
    // The person changed the same line on main, and finished the plan with GSD.
    p.write("notes.txt", "from main\n");
    git(&p.root, &["commit", "-q", "-am", "person's change"]);
    p.write(
        ".planning/phases/01-a/01-01-SUMMARY.md",
        "# Summary\n\nDone by hand.\n",
    );
    let v = p.json(&["plan", "sync"]);
    assert_eq!(p.status("01-01"), "stuck", "a conflict refuses: {v}");
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("notes.txt"),
        "the conflict is named: {notes}"
    );
    // Without the conflict the move to done merges the branch.
    p.write("notes.txt", "from the branch\n");
    git(&p.root, &["commit", "-q", "-am", "person agrees"]);
    let v = p.json(&["plan", "sync"]);
    assert_eq!(v["finished_outside"], serde_json::json!(["01-01"]), "{v}");
    assert_eq!(p.status("01-01"), "done");
    assert_eq!(p.task("01-01")["phases"]["merge-ri"], "success");
    let log = git(&p.root, &["log", "--oneline", "main"]);
    assert!(log.contains("work on the branch"), "{log}");
    p.ok(&["check"]);
}
