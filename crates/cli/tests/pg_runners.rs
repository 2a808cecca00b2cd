//! Several `warden run` processes on one PostgreSQL database (issue 7), through the real
//! binary: 200 shell tasks run exactly once each while one runner is killed with
//! SIGKILL and its tasks are adopted; a runner whose lease is taken over is refused on
//! its next write; a password in the store URL is never shown.
//!
//! Needs `WARDEN_TEST_PG_URL` (`./scripts/test` starts a throwaway cluster); without it
//! the tests are skipped with a notice, or fail under `CI=true`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use crate::common::{code, command, describe, text, unique_dir};
use warden_store::Store;
use warden_store::postgres::{PgStore, testing};

/// A `warden` command in `root` on the test database.
fn pg(root: &Path, url: &str) -> Command {
    let mut c = command(root);
    c.env("WARDEN_STORE_URL", url);
    c
}

fn run_ok(root: &Path, url: &str, args: &[&str]) -> Output {
    let o = pg(root, url).args(args).output().expect("run warden");
    assert_eq!(code(&o), 0, "{}", describe(args, &o));
    o
}

/// A runner in the background, its output in `log`.
fn runner(root: &Path, url: &str, log: &Path, parallel: &str) -> Child {
    let f = std::fs::File::create(log).unwrap();
    pg(root, url)
        .args(["run", "--until-idle", "--max-parallel", parallel])
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .expect("start warden run")
}

/// Waits for a child with a deadline; kills it and fails past it.
fn wait_for(mut child: Child, limit: Duration, what: &str, log: &Path) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code().unwrap_or(-1);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} did not finish within {limit:?}; its log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Like `wait_until`, but says whether it happened instead of panicking.
fn wait_until_ok(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !f() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A project outside git with a short lease, so adoption after expiry is quick.
fn project(name: &str, url: &str) -> crate::common::Workspace {
    let ws = crate::common::Workspace::bare(name);
    run_ok(&ws.root, url, &["init"]);
    let toml = ws.root.join(".warden/warden.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, text.replace("lease_ttl_s = 30", "lease_ttl_s = 3")).unwrap();
    ws
}

/// The work of every task: notes overlapping runs of one task, then appends its id.
const WORK: &str = r#"mkdir "$WARDEN_DIR/running/$WARDEN_TASK_ID" 2>/dev/null || echo "$WARDEN_TASK_ID" >> "$WARDEN_DIR/overlap.log"; echo "$WARDEN_TASK_ID" >> "$WARDEN_DIR/ids.log"; sleep 0.05; rmdir "$WARDEN_DIR/running/$WARDEN_TASK_ID""#;

#[test]
fn three_runners_run_200_tasks_once_each_and_adopt_a_killed_runners_tasks() {
    let Some(db) = testing::database("pg_runners::three_runners") else {
        return;
    };
    let url = db.url.as_str();
    let ws = project("pg-three", url);
    let root = &ws.root;
    std::fs::create_dir(root.join("running")).unwrap();
    let n = 200;
    let tasks: Vec<serde_json::Value> = (0..n)
        .map(|i| serde_json::json!({"id": format!("t{i:03}"), "work": WORK, "workflow": "direct"}))
        .collect();
    let plan = root.join("plan.json");
    std::fs::write(&plan, serde_json::json!({ "tasks": tasks }).to_string()).unwrap();
    run_ok(root, url, &["plan", "import", "plan.json"]);

    let start = Instant::now();
    let logs: Vec<_> = (1..=3).map(|i| root.join(format!("run{i}.log"))).collect();
    let mut runners: Vec<Child> = logs.iter().map(|l| runner(root, url, l, "4")).collect();
    // Kill the first runner with SIGKILL once the run is under way and it holds tasks.
    let victim = runners.remove(0);
    let pid = victim.id();
    let store = PgStore::open(url, 5000).unwrap();
    let marker = format!(":{pid}:");
    let mut held: BTreeSet<String> = BTreeSet::new();
    wait_until(
        Duration::from_secs(60),
        "the victim to hold leases mid-run",
        || {
            held = store
                .leases()
                .unwrap()
                .into_iter()
                .filter(|l| l.owner.contains(&marker))
                .map(|l| l.task.to_string())
                .collect();
            !held.is_empty() && lines(&root.join("ids.log")).len() >= 30
        },
    );
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let mut victim = victim;
    let _ = victim.wait();
    let done_at_kill = lines(&root.join("ids.log")).len();
    for (i, mut r) in runners.into_iter().enumerate() {
        let log = &logs[i + 1];
        let limit = Instant::now() + Duration::from_secs(120);
        let rc = loop {
            if let Some(s) = r.try_wait().unwrap() {
                break s.code().unwrap_or(-1);
            }
            if Instant::now() > limit {
                let state = diagnose(root, url, &store);
                let _ = r.kill();
                let _ = r.wait();
                panic!("a surviving runner did not finish in time:\n{state}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(rc, 0, "{}", std::fs::read_to_string(log).unwrap());
    }
    let elapsed = start.elapsed();
    eprintln!(
        "3 runners (one killed after {done_at_kill} tasks, holding {}): {n} tasks in {elapsed:.1?}",
        held.len()
    );

    // Every id exactly once, never two runs of one task at a time.
    let ids = lines(&root.join("ids.log"));
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for id in &ids {
        *counts.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, c)| **c > 1).collect();
    assert!(twice.is_empty(), "ran more than once: {twice:?}");
    assert_eq!(counts.len(), n, "every task ran");
    assert!(
        lines(&root.join("overlap.log")).is_empty(),
        "a task ran in two places at once"
    );
    // The killed runner's tasks were adopted and finished; every task is done.
    let list = run_ok(root, url, &["--json", "task", "list"]);
    let list: Vec<serde_json::Value> = serde_json::from_slice(&list.stdout).unwrap();
    let not_done: Vec<_> = list
        .iter()
        .filter(|t| t["status"] != "done")
        .map(|t| (t["id"].clone(), t["status"].clone()))
        .collect();
    assert!(not_done.is_empty(), "{not_done:?}");
    for id in &held {
        assert_eq!(
            counts.get(id.as_str()),
            Some(&1),
            "{id} held by the killed runner"
        );
    }
    assert!(store.leases().unwrap().is_empty(), "every lease released");
    let o = run_ok(root, url, &["check"]);
    assert!(text(&o.stdout).contains("replay"), "{}", text(&o.stdout));
    // Several runners shared the work.
    let started: Vec<usize> = logs
        .iter()
        .map(|l| {
            std::fs::read_to_string(l)
                .unwrap_or_default()
                .matches(": starting")
                .count()
        })
        .collect();
    assert!(
        started.iter().filter(|c| **c > 0).count() >= 2,
        "{started:?}"
    );
}

/// What is left of a run: unfinished tasks, leases, and the end of every runner's log.
fn diagnose(root: &Path, url: &str, store: &PgStore) -> String {
    let mut out = String::new();
    for t in store.list().unwrap() {
        if t.status().as_str() != "done" {
            out.push_str(&format!(
                "task {} {} session={:?} phases={:?}\n",
                t.id(),
                t.status(),
                t.live_session(),
                t.phases()
            ));
        }
    }
    for l in store.leases().unwrap() {
        out.push_str(&format!(
            "lease {} {} epoch {} until {}\n",
            l.task, l.owner, l.epoch, l.expires_at
        ));
    }
    for i in 1..=3 {
        let log = std::fs::read_to_string(root.join(format!("run{i}.log"))).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        out.push_str(&format!(
            "--- run{i}.log (last lines, newest first)\n{}\n",
            tail.join("\n")
        ));
    }
    let _ = url;
    out
}

#[test]
fn a_runner_whose_lease_was_taken_over_is_refused_on_its_next_write() {
    let Some(db) = testing::database("pg_runners::lease_taken_over") else {
        return;
    };
    let url = db.url.as_str();
    let ws = project("pg-fence", url);
    let root = &ws.root;
    run_ok(
        root,
        url,
        &[
            "task",
            "create",
            "slow",
            "--workflow",
            "direct",
            "--prechecks",
            "touch \"$WARDEN_DIR/prechecks.started\"; sleep 2",
            "--work",
            "echo ran >> \"$WARDEN_DIR/ran.log\"",
        ],
    );
    let log = root.join("run.log");
    let child = runner(root, url, &log, "1");
    let store = PgStore::open(url, 5000).unwrap();
    let id = warden_core::model::TaskId::new("slow").unwrap();
    // Wait for the prechecks step itself: the task turns working one step earlier.
    wait_until(Duration::from_secs(30), "the prechecks to start", || {
        root.join("prechecks.started").exists()
    });
    assert!(store.lease(&id).unwrap().is_some());
    // While its prechecks run, the lease expires (in SQL) and another runner takes it.
    let mut c = db.client();
    c.batch_execute("UPDATE leases SET expires_us = 0 WHERE task = 'slow'")
        .unwrap();
    let now = jiff::Timestamp::now();
    let taken = store
        .acquire_lease(&id, "intruder:1:0", now, Duration::from_secs(600))
        .unwrap()
        .expect("an expired lease can be taken over");
    assert!(taken.taken_from.is_some(), "{taken:?}");
    let events_before = store.events(Some(&id)).unwrap().len();
    let refused = wait_until_ok(Duration::from_secs(30), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("lease lost")
    });
    assert!(
        refused,
        "the runner never reported its lost lease; its log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // Nothing of the refused write was stored; the work did not run.
    assert_eq!(store.events(Some(&id)).unwrap().len(), events_before);
    let t = store.get(&id).unwrap().unwrap();
    assert_ne!(
        t.phases().get(warden_core::model::Phase::Prechecks),
        warden_core::model::PhaseStatus::Success
    );
    assert!(!root.join("ran.log").exists());
    // The other runner gives the task back: the first takes it again and finishes it.
    store.release_lease(&id, "intruder:1:0").unwrap();
    let rc = wait_for(child, Duration::from_secs(60), "the runner", &log);
    let out = std::fs::read_to_string(&log).unwrap();
    assert_eq!(rc, 0, "{out}");
    assert_eq!(
        store.get(&id).unwrap().unwrap().status().as_str(),
        "done",
        "{out}"
    );
    assert_eq!(lines(&root.join("ran.log")), ["ran"]);
    run_ok(root, url, &["check"]);
}

/// A store that cannot be reached for a while (a server restart, a failover): the run
/// says so and tries again, its session goes on, the session's end (which its host could
/// not report) is reported once the store answers, and the run finishes. It had ended at
/// the first failed read with exit 5, and the run's last line failed on the connection
/// the server had ended.
#[test]
fn a_run_rides_out_a_store_outage() {
    let Some(db) = testing::database("pg_runners::a_run_rides_out_a_store_outage") else {
        return;
    };
    let url = db.url.as_str();
    let ws = crate::common::Workspace::bare("pg-outage");
    let root = &ws.root;
    run_ok(root, url, &["init"]);
    let go = root.join("go");
    let work = format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display());
    run_ok(root, url, &["task", "create", "s", "--work", &work]);
    let log = root.join("run.log");
    let f = std::fs::File::create(&log).unwrap();
    let child = pg(root, url)
        .args(["run", "--until-idle"])
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .expect("start warden run");
    let store = PgStore::open(url, 5000).unwrap();
    let id = warden_core::model::TaskId::new("s").unwrap();
    wait_until(Duration::from_secs(60), "s's session", || {
        store
            .get(&id)
            .unwrap()
            .is_some_and(|t| t.live_session().is_some())
    });
    drop(store);
    // The outage: no new session on the database, and every open one ended.
    let mut admin = db.admin_client();
    let name = db.name();
    admin
        .batch_execute(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"))
        .unwrap();
    admin
        .query(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = $1",
            &[&name],
        )
        .unwrap();
    wait_until(
        Duration::from_secs(60),
        "the run to say the store failed",
        || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("(the store; sessions go on; trying again in")
        },
    );
    // The session ends meanwhile; its host cannot report it.
    std::fs::write(&go, "").unwrap();
    let session_log = root.join(".warden/tasks/s/output.log");
    wait_until(Duration::from_secs(60), "the host's failed report", || {
        std::fs::read_to_string(&session_log)
            .unwrap_or_default()
            .contains("exit report for task s session s-worker-1 failed")
    });
    admin
        .batch_execute(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"))
        .unwrap();
    let rc = wait_for(child, Duration::from_secs(120), "the run", &log);
    let out = std::fs::read_to_string(&log).unwrap();
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("✓ s done"), "{out}");
    assert!(out.contains("100% (1 of 1 leaves pass)"), "{out}");
    run_ok(root, url, &["check"]);
}

/// The refusals of `hostile` on PostgreSQL: nothing stored, where PostgreSQL's text type
/// used to turn a NUL character into a storage error (exit 5).
#[test]
fn unstorable_texts_are_refused_on_postgresql() {
    let Some(db) = testing::database("pg_runners::unstorable") else {
        return;
    };
    let ws = project("pg-unstorable", &db.url);
    crate::hostile::unstorable_texts_are_refused_before_anything_is_stored(
        &ws,
        &[("WARDEN_STORE_URL", db.url.as_str())],
    );
}

#[test]
fn a_password_in_the_store_url_is_never_shown() {
    let Some(db) = testing::database("pg_runners::password") else {
        return;
    };
    // The throwaway cluster trusts local connections, so any password is accepted.
    let secret = "Sup3rS3cretPw";
    let url = db
        .url
        .replacen("postgres@", &format!("postgres:{secret}@"), 1);
    assert!(url.contains(secret), "{url}");
    let dir = unique_dir("pg-secret");
    let mut all = String::new();
    let mut run = |args: &[&str], env_url: Option<&str>| {
        let mut c = command(&dir);
        if let Some(u) = env_url {
            c.env("WARDEN_STORE_URL", u);
        }
        let o = c.args(args).output().unwrap();
        all.push_str(&text(&o.stdout));
        all.push_str(&text(&o.stderr));
        o
    };
    let o = run(&["--json", "init", "--store", &url], None);
    assert_eq!(code(&o), 0, "{}", describe(&["init"], &o));
    assert!(
        text(&o.stdout).contains("postgres:***@"),
        "{}",
        text(&o.stdout)
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join(".warden/warden.toml"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "warden.toml with a password is private");
    for args in [
        &[
            "task",
            "create",
            "a",
            "--title",
            "A",
            "--work",
            "true",
            "--workflow",
            "direct",
        ][..],
        &["--json", "task", "show", "a"],
        &["--json", "task", "list"],
        &["run", "--until-idle"],
        &["--json", "history"],
        &["history", "a"],
        &["state", "--write"],
        &["plan", "export"],
        &["check"],
    ] {
        let o = run(args, None);
        assert_eq!(code(&o), 0, "{}", describe(args, &o));
    }
    // A server that cannot be reached: the error names the URL without its password.
    let bad = format!("postgresql://postgres:{secret}@/nodb?host=/nonexistent-dir");
    let o = run(&["task", "list"], Some(&bad));
    assert_eq!(code(&o), 5, "{}", describe(&["task", "list"], &o));
    assert!(
        text(&o.stderr).contains("postgres:***@"),
        "{}",
        text(&o.stderr)
    );
    let o = run(
        &[
            "init",
            "--dir",
            "sub",
            "--store",
            "postgres://u:Sup3rS3cretPw@h:bad/db",
        ],
        None,
    );
    assert_eq!(code(&o), 2, "{}", describe(&["init"], &o));
    assert!(!all.contains(secret), "the password was shown:\n{all}");
    // Nor in any file Warden wrote besides the configuration.
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n != "warden.toml") {
                let body = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
                assert!(!body.contains(secret), "{} holds the password", p.display());
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
