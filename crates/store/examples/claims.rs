//! Claim throughput: N runners (threads, one connection each) claim M ready tasks one at
//! a time, as `warden run` does (a claim, then the fenced `pending → working` commit),
//! until every task is taken. Prints claims per second and checks that no task was
//! claimed twice.
//!
//! Usage: `cargo run --release -p warden-store --example claims -- URL RUNNERS TASKS [MODE]`
//! where MODE is `all` (the default: every runner offers every task not its own, in the
//! same order), `spread` (the same, each runner starting at its own offset) or `window`
//! (as `warden run` offers them: the next task in tree order that the runner has not
//! seen taken, and two spares after it; a runner that gets a spare knows the tasks
//! before it are taken)
//! with URL `postgres://…` (a server: a fresh database is created on it and dropped
//! after) or `sqlite:/tmp/x.db` (a new file). `bench/pg_claims.sh` starts a throwaway
//! PostgreSQL cluster and runs it for 1 and 3 runners.

#![allow(clippy::print_stdout)]

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use warden_core::event::Actor;
use warden_core::model::{Limits, Status, TaskId, TaskSpec, WorkflowKind};
use warden_core::ops::{self, Ctx, Initial, TransitionInput};
use warden_store::{Batch, Store, StoreUrl};

fn open(url: &str) -> Box<dyn Store> {
    match StoreUrl::parse(url, std::path::Path::new(".")).expect("store url") {
        StoreUrl::Sqlite(p) => Box::new(warden_store::sqlite::SqliteStore::open(&p, 5000).unwrap()),
        StoreUrl::Postgres(u) => Box::new(warden_store::postgres::PgStore::open(&u, 5000).unwrap()),
    }
}

fn ctx(now: jiff::Timestamp) -> Ctx<'static> {
    Ctx {
        now,
        actor: Actor::Runner,
        limits: Limits::default(),
        task_file: "TASK.md",
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (url, runners, tasks, mode) = match &args[..] {
        [_, url, runners, tasks] => (url, runners, tasks, "all"),
        [_, url, runners, tasks, m] if ["all", "spread", "window"].contains(&m.as_str()) => {
            (url, runners, tasks, m.as_str())
        }
        _ => {
            eprintln!("usage: claims URL RUNNERS TASKS [all|spread|window]");
            std::process::exit(2);
        }
    };
    let spread = mode == "spread";
    let window = mode == "window";
    let runners: usize = runners.parse().expect("RUNNERS");
    let n: usize = tasks.parse().expect("TASKS");
    let _db;
    let url = if url.starts_with("postgres") {
        let db = warden_store::postgres::testing::create_database(url, "claims bench");
        let u = db.url.clone();
        _db = db;
        u
    } else {
        url.clone()
    };
    let url = &url;
    let now = jiff::Timestamp::now();
    let ids: Vec<TaskId> = (0..n)
        .map(|i| TaskId::new(&format!("c{i:05}")).unwrap())
        .collect();
    let setup = open(url);
    let changes = ids
        .iter()
        .map(|id| {
            let spec = TaskSpec::new(id.clone(), WorkflowKind::Direct, 3);
            let init = Initial::NEW;
            ops::create(spec, init, &ctx(now)).unwrap()
        })
        .collect();
    setup
        .commit(Batch {
            changes,
            ..Default::default()
        })
        .expect("create the tasks (is the database empty?)");
    let ids = Arc::new(ids);
    let url = Arc::new(url.clone());
    let barrier = Arc::new(Barrier::new(runners + 1));
    let handles: Vec<_> = (0..runners)
        .map(|r| {
            let (ids, url, barrier) = (ids.clone(), url.clone(), barrier.clone());
            std::thread::spawn(move || {
                let s = open(&url);
                let owner = format!("bench:{r}");
                let mut mine: BTreeSet<TaskId> = BTreeSet::new();
                // In `window` mode: the first task this runner has not seen taken.
                let mut cursor = 0usize;
                barrier.wait();
                loop {
                    let now = jiff::Timestamp::now();
                    let ttl = Duration::from_secs(30);
                    let lease = if window {
                        if cursor >= ids.len() {
                            return mine;
                        }
                        let offered = &ids[cursor..(cursor + 3).min(ids.len())];
                        // The chosen task first; the spares only when another runner
                        // took it (two calls, as the supervisor's pass makes them).
                        let mut got = s.claim(&offered[..1], &owner, now, ttl, 1).unwrap();
                        if got.is_empty() && offered.len() > 1 {
                            got = s.claim(&offered[1..], &owner, now, ttl, 1).unwrap();
                        }
                        let Some(l) = got.into_iter().next() else {
                            cursor += offered.len();
                            continue;
                        };
                        let at = offered.iter().position(|i| *i == l.task).unwrap();
                        cursor += at + 1;
                        l
                    } else {
                        // Every runner offers the same candidates in the same order (as
                        // `warden run` did before it offered spares), or, with `spread`,
                        // starts at its own offset, so that runners rarely reach for the
                        // same task.
                        let k = if spread { r * ids.len() / runners } else { 0 };
                        let rest: Vec<TaskId> = ids[k..]
                            .iter()
                            .chain(&ids[..k])
                            .filter(|i| !mine.contains(*i))
                            .cloned()
                            .collect();
                        let got = s.claim(&rest, &owner, now, ttl, 1).unwrap();
                        let Some(l) = got.into_iter().next() else {
                            if s.leases().unwrap().len() >= ids.len() {
                                return mine;
                            }
                            continue;
                        };
                        l
                    };
                    // The fenced start of the claimed task.
                    let t = s.get(&lease.task).unwrap().unwrap();
                    let ch = ops::transition(
                        &t,
                        Status::Working,
                        &TransitionInput::default(),
                        &ctx(now),
                    )
                    .unwrap();
                    s.commit(Batch {
                        changes: vec![ch],
                        fence: Some(lease.fence()),
                        ..Default::default()
                    })
                    .unwrap();
                    mine.insert(lease.task);
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut total = 0;
    let mut all = BTreeSet::new();
    for h in handles {
        let mine = h.join().unwrap();
        total += mine.len();
        all.extend(mine);
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(total, n, "every task claimed once");
    assert_eq!(all.len(), n);
    let working = setup
        .list()
        .unwrap()
        .iter()
        .filter(|t| t.status() == Status::Working)
        .count();
    assert_eq!(working, n);
    println!(
        "{} runner(s), {n} tasks{}: {:.0} claims/s ({secs:.2} s)",
        runners,
        match mode {
            "all" => "",
            "spread" => ", spread",
            _ => ", a slot and two spares",
        },
        n as f64 / secs
    );
}
