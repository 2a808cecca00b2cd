//! Claims under chaos: 10 runner processes share one PostgreSQL database while a driver
//! kills one at random (`SIGKILL`, every 0.5–3 s) and starts it again. Each runner loops:
//! claim a task with a short lease, commit the fenced `pending → working`, hold it a
//! little (renewing the lease when it holds it longer than a third of its life), commit
//! the fenced `working → done`, release. At the end the driver stops the runners and
//! checks, from the database and from the runners' logs, that no task was done twice,
//! that every epoch of a task was written by one owner and epochs never went backwards,
//! and that no live runner lost a lease; it prints a table and exits 1 when a check fails.
//!
//! Usage: `cargo run --release -p warden-store --example chaos -- URL [SECONDS] [SEED]`
//! with URL `postgres://…` (a server: a fresh database is created on it and dropped
//! after); `bench/pg_chaos.sh` runs it. The driver starts each runner as
//! `chaos --runner NAME DB_URL LOG`: NAME is its slot (`r0`…`r9`), its lease owner is
//! `NAME:PID` (a restarted runner is a new owner, as `warden run`'s `host:pid:start`),
//! and it appends one line per successful step to LOG, fsynced:
//!
//! ```text
//! start OWNER                       the process started
//! claimed TASK EPOCH OWNER [PREV]   a claim (PREV: the owner it was taken over from)
//! working TASK EPOCH OWNER          the fenced pending → working committed
//! renewed TASK EPOCH OWNER          the lease renewed during a long hold
//! done TASK EPOCH OWNER             the fenced working → done committed
//! stale TASK EPOCH OWNER STATUS     claimed, but done since the candidates were read
//! LOST TASK EPOCH OWNER STEP        StoreError::LeaseLost (or a renewal refused)
//! CONFLICT TASK EPOCH OWNER STEP    StoreError::Conflict (a write not fenced off)
//! ERR TASK EPOCH OWNER STEP …       any other store error
//! stop OWNER                        it stopped when asked (its stdin closed)
//! ```
//!
//! Every status change carries `OWNER@EPOCH` as its reason, so the event log itself says
//! who wrote it under which lease.

#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use warden_core::event::{Actor, EventKind};
use warden_core::model::{Limits, Status, TaskId, TaskSpec, WorkflowKind};
use warden_core::ops::{self, Ctx, Initial, TransitionInput};
use warden_store::postgres::PgStore;
use warden_store::{Batch, Lease, Store, StoreError};

/// The lease's life: short, so a killed runner's tasks are taken over soon.
const TTL: Duration = Duration::from_secs(2);
/// Runner processes.
const RUNNERS: usize = 10;
/// The driver keeps at least this many tasks pending (adding `TOP_UP` at a time).
const LOW_WATER: u64 = 150;
const TOP_UP: usize = 300;

/// splitmix64: a small deterministic generator.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`lo` when the range is empty).
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next() % (hi - lo)
        }
    }
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
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
    match &args[1..] {
        [flag, name, url, log] if flag == "--runner" => runner(name, url, Path::new(log)),
        [url, rest @ ..] if rest.len() <= 2 => {
            let secs = rest.first().map_or(600, |s| s.parse().expect("SECONDS"));
            let seed = rest
                .get(1)
                .map_or_else(clock_seed, |s| s.parse().expect("SEED"));
            let ok = driver(url, secs, seed);
            std::process::exit(if ok { 0 } else { 1 });
        }
        _ => {
            eprintln!("usage: chaos URL [SECONDS] [SEED]   (or: chaos --runner NAME URL LOG)");
            std::process::exit(2);
        }
    }
}

// ---------------------------------------------------------------------------------------
// The runner.

/// The runner's log: one line per write, fsynced before the next step.
struct Log(File);

impl Log {
    fn line(&mut self, mut s: String) {
        s.push('\n');
        // One write call: a kill lands before or after it, never in the middle.
        self.0.write_all(s.as_bytes()).expect("write the log");
        self.0.sync_data().expect("fsync the log");
    }
}

/// What a failed store call meant.
fn failure(e: &StoreError) -> &'static str {
    match e {
        StoreError::LeaseLost { .. } => "LOST",
        StoreError::Conflict { .. } => "CONFLICT",
        _ => "ERR",
    }
}

fn runner(name: &str, url: &str, log: &Path) {
    let owner = format!("{name}:{}", std::process::id());
    let mut log = Log(OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("open the runner log"));
    // The driver closes our stdin to stop us (or by dying): finish the task in hand, then go.
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            stop.store(true, Ordering::SeqCst);
        });
    }
    let s = PgStore::open(url, 5000).expect("open the store");
    log.line(format!("start {owner}"));
    let mut rng = Rng(clock_seed() ^ u64::from(std::process::id()).rotate_left(32));
    let mut seen = 0;
    while !stop.load(Ordering::SeqCst) {
        // Candidates: working tasks first (only orphans are claimable: the others are
        // leased), then the pending ones from a random place, to spread the runners.
        let mut cands: Vec<TaskId> = match s.active() {
            Ok(ts) => ts
                .into_iter()
                .filter(|t| t.status() == Status::Working)
                .map(|t| t.id().clone())
                .collect(),
            Err(e) => {
                log.line(format!("ERR - 0 {owner} active {e}"));
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let mut pending: Vec<TaskId> = match s.with_status(Status::Pending) {
            Ok(ts) => ts.into_iter().map(|t| t.id().clone()).collect(),
            Err(e) => {
                log.line(format!("ERR - 0 {owner} pending {e}"));
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let n = pending.len() as u64;
        pending.rotate_left(rng.range(0, n.min(32)) as usize);
        cands.extend(pending);
        let now = jiff::Timestamp::now();
        let got = match s.claim(&cands, &owner, now, TTL, 1) {
            Ok(got) => got,
            Err(e) => {
                log.line(format!("ERR - 0 {owner} claim {e}"));
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let Some(lease) = got.into_iter().next() else {
            // Nothing free: sleep until something changes.
            seen = s
                .wait_for_change(seen, Duration::from_millis(50))
                .unwrap_or(seen);
            continue;
        };
        let from = lease.taken_from.clone().unwrap_or_default();
        log.line(format!(
            "claimed {} {} {owner} {from}",
            lease.task, lease.epoch
        ));
        if let Err((step, e)) = work(&s, &lease, &mut rng, &mut log) {
            log.line(format!(
                "{} {} {} {owner} {step} {e}",
                failure(&e),
                lease.task,
                lease.epoch
            ));
        }
        // Released whatever happened (a no-op when another owner has it now).
        if let Err(e) = s.release_lease(&lease.task, &owner) {
            log.line(format!(
                "ERR {} {} {owner} release {e}",
                lease.task, lease.epoch
            ));
        }
    }
    log.line(format!("stop {owner}"));
}

/// One claimed task taken to done.
fn work(
    s: &PgStore,
    lease: &Lease,
    rng: &mut Rng,
    log: &mut Log,
) -> Result<(), (&'static str, StoreError)> {
    let (task, owner, epoch) = (&lease.task, &lease.owner, lease.epoch);
    let mut renewed = Instant::now();
    let input = TransitionInput {
        reason: Some(format!("{owner}@{epoch}")),
        ..Default::default()
    };
    let fenced = |ch| Batch {
        changes: vec![ch],
        fence: Some(lease.fence()),
        ..Default::default()
    };
    let mut t = s
        .get(task)
        .map_err(|e| ("get", e))?
        .expect("a claimed task exists");
    match t.status() {
        Status::Pending => {
            let ch = ops::transition(&t, Status::Working, &input, &ctx(jiff::Timestamp::now()))
                .expect("pending → working is allowed");
            let after = ch.after.clone().expect("the task after");
            s.commit(fenced(ch)).map_err(|e| ("start", e))?;
            log.line(format!("working {task} {epoch} {owner}"));
            t = after;
        }
        // Taken over from a runner that died after starting it: finish it.
        Status::Working => {}
        // Done since the candidates were read (the claim does not look at the status).
        other => {
            log.line(format!("stale {task} {epoch} {owner} {other}"));
            return Ok(());
        }
    }
    // Hold it: mostly a few ms; one task in 40 for 1–2.5 s, renewing the lease.
    let hold = if rng.range(0, 40) == 0 {
        Duration::from_millis(rng.range(1000, 2500))
    } else {
        Duration::from_millis(rng.range(1, 6))
    };
    let start = Instant::now();
    loop {
        if renewed.elapsed() >= TTL / 3 {
            let now = jiff::Timestamp::now();
            match s.acquire_lease(task, owner, now, TTL) {
                Ok(Some(l)) if l.epoch == epoch => {
                    renewed = Instant::now();
                    log.line(format!("renewed {task} {epoch} {owner}"));
                }
                Ok(other) => {
                    let held = other.map_or("another owner's live lease".into(), |l| {
                        format!("epoch {}", l.epoch)
                    });
                    return Err((
                        "renew",
                        StoreError::LeaseLost {
                            task: format!("{task} (renewal got {held})"),
                            owner: owner.clone(),
                            epoch,
                        },
                    ));
                }
                Err(e) => return Err(("renew", e)),
            }
        }
        let left = hold.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(TTL / 6));
    }
    let ch = ops::transition(&t, Status::Done, &input, &ctx(jiff::Timestamp::now()))
        .expect("working → done is allowed");
    s.commit(fenced(ch)).map_err(|e| ("done", e))?;
    log.line(format!("done {task} {epoch} {owner}"));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The driver.

/// A runner slot and its current process.
struct Slot {
    name: String,
    log: PathBuf,
    child: Child,
}

impl Slot {
    fn owner(&self) -> String {
        format!("{}:{}", self.name, self.child.id())
    }
}

fn spawn(name: &str, url: &str, log: &Path) -> Child {
    Command::new(std::env::current_exe().expect("current exe"))
        .args(["--runner", name, url])
        .arg(log)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start a runner")
}

/// Creates `n` more pending tasks (`c0000000`, …), in one commit.
fn create_tasks(s: &PgStore, next: &mut usize, n: usize) {
    let now = jiff::Timestamp::now();
    let changes = (*next..*next + n)
        .map(|i| {
            let id = TaskId::new(&format!("c{i:07}")).expect("task id");
            let spec = TaskSpec::new(id, WorkflowKind::Direct, 3);
            ops::create(spec, Initial::NEW, &ctx(now)).expect("create")
        })
        .collect();
    s.commit(Batch {
        changes,
        ..Default::default()
    })
    .expect("create tasks");
    *next += n;
}

fn pending(s: &PgStore) -> u64 {
    s.tally()
        .expect("tally")
        .iter()
        .filter(|t| t.status == Status::Pending)
        .map(|t| t.n)
        .sum()
}

fn driver(admin: &str, secs: u64, seed: u64) -> bool {
    println!(
        "chaos: {RUNNERS} runner processes, {secs} s, lease ttl {} ms, seed {seed}",
        TTL.as_millis()
    );
    let db = warden_store::postgres::testing::create_database(admin, "chaos");
    let dir = std::env::temp_dir().join(format!("warden-chaos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("log dir");
    let store = PgStore::open(&db.url, 5000).expect("open the store");
    let mut next = 0;
    create_tasks(&store, &mut next, TOP_UP * 2);
    let mut rng = Rng(seed);
    let mut slots: Vec<Slot> = (0..RUNNERS)
        .map(|i| {
            let name = format!("r{i}");
            let log = dir.join(format!("{name}.log"));
            let child = spawn(&name, &db.url, &log);
            Slot { name, log, child }
        })
        .collect();
    let mut killed: BTreeSet<String> = BTreeSet::new();
    let mut died: BTreeSet<String> = BTreeSet::new();
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let mut next_kill = start + Duration::from_millis(rng.range(500, 3001));
    let mut last_report = start;
    while Instant::now() < end {
        if pending(&store) < LOW_WATER {
            create_tasks(&store, &mut next, TOP_UP);
        }
        for slot in &mut slots {
            if let Ok(Some(status)) = slot.child.try_wait() {
                eprintln!("chaos: runner {} exited by itself ({status})", slot.owner());
                died.insert(slot.owner());
                slot.child = spawn(&slot.name, &db.url, &slot.log);
            }
        }
        let now = Instant::now();
        if now >= next_kill {
            let slot = &mut slots[rng.range(0, RUNNERS as u64) as usize];
            let owner = slot.owner();
            slot.child.kill().expect("SIGKILL a runner");
            slot.child.wait().expect("reap a runner");
            killed.insert(owner);
            slot.child = spawn(&slot.name, &db.url, &slot.log);
            next_kill = now + Duration::from_millis(rng.range(500, 3001));
        }
        if now.duration_since(last_report) >= Duration::from_secs(30) {
            last_report = now;
            eprintln!(
                "chaos: {:>4} s, {} kills, {} tasks created",
                start.elapsed().as_secs(),
                killed.len(),
                next
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Stop: close every runner's stdin, give them time to finish the task in hand.
    for slot in &mut slots {
        drop(slot.child.stdin.take());
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut stragglers = 0;
    for slot in &mut slots {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match slot.child.try_wait() {
                Ok(Some(status)) if status.success() => break,
                Ok(Some(status)) => {
                    eprintln!(
                        "chaos: runner {} failed at the stop ({status})",
                        slot.owner()
                    );
                    died.insert(slot.owner());
                    break;
                }
                _ if Instant::now() >= deadline => {
                    eprintln!("chaos: runner {} did not stop; killed", slot.owner());
                    stragglers += 1;
                    let _ = slot.child.kill();
                    let _ = slot.child.wait();
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
    let ok = check(&db.url, &slots, &killed, &died, stragglers, elapsed);
    if ok {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("runner logs kept in {}", dir.display());
    }
    drop(store);
    drop(db);
    ok
}

// ---------------------------------------------------------------------------------------
// The checks.

/// A status change as the event log has it.
struct Change {
    to: Status,
    /// `OWNER@EPOCH` parsed from the reason (`None`: no such reason).
    by: Option<(String, u64)>,
}

/// One line of a runner log, split.
struct Line {
    kind: String,
    task: String,
    epoch: u64,
    owner: String,
    rest: String,
}

fn parse_line(l: &str) -> Option<Line> {
    let mut w = l.splitn(5, ' ');
    let kind = w.next()?.to_owned();
    if kind == "start" || kind == "stop" {
        return None;
    }
    Some(Line {
        kind,
        task: w.next()?.to_owned(),
        epoch: w.next()?.parse().ok()?,
        owner: w.next()?.to_owned(),
        rest: w.next().unwrap_or("").to_owned(),
    })
}

fn check(
    url: &str,
    slots: &[Slot],
    killed: &BTreeSet<String>,
    died: &BTreeSet<String>,
    stragglers: usize,
    elapsed: f64,
) -> bool {
    // The database: every status change, in commit order.
    let mut c = warden_store::postgres::parse_url(url)
        .expect("url")
        .connect(postgres::NoTls)
        .expect("connect for the checks");
    let mut by_task: HashMap<String, Vec<Change>> = HashMap::new();
    for r in c
        .query(
            "SELECT task, body FROM events WHERE type = 'status.changed' ORDER BY seq",
            &[],
        )
        .expect("read the events")
    {
        let kind: EventKind = serde_json::from_str(r.get(1)).expect("decode an event");
        let EventKind::StatusChanged { to, reason, .. } = kind else {
            continue;
        };
        let by = reason.as_deref().and_then(|r| {
            let (o, e) = r.rsplit_once('@')?;
            Some((o.to_owned(), e.parse().ok()?))
        });
        by_task.entry(r.get(0)).or_default().push(Change { to, by });
    }
    let done_rows: i64 = c
        .query_one("SELECT count(*) FROM tasks WHERE status = 'done'", &[])
        .expect("count done tasks")
        .get(0);
    let created: i64 = c
        .query_one("SELECT count(*) FROM tasks", &[])
        .expect("count tasks")
        .get(0);
    let (mut double_done, mut double_start, mut two_owners, mut backwards, mut unsigned) =
        (0, 0, 0, 0, 0);
    let (mut done_events, mut second_owner) = (0, 0);
    // (task, epoch, owner, to) of every change, to match the logs against.
    let mut written: BTreeSet<(String, u64, String, Status)> = BTreeSet::new();
    for (task, changes) in &by_task {
        let dones = changes.iter().filter(|c| c.to == Status::Done).count();
        done_events += dones;
        double_done += usize::from(dones > 1);
        double_start += usize::from(changes.iter().filter(|c| c.to == Status::Working).count() > 1);
        let mut owners: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
        let mut last = 0;
        let mut went_back = false;
        for ch in changes {
            let Some((o, e)) = &ch.by else {
                unsigned += 1;
                continue;
            };
            owners.entry(*e).or_default().insert(o);
            went_back |= *e < last;
            last = last.max(*e);
            written.insert((task.clone(), *e, o.clone(), ch.to));
        }
        two_owners += usize::from(owners.values().any(|o| o.len() > 1));
        backwards += usize::from(went_back);
        let distinct: BTreeSet<&&str> = owners.values().flatten().collect();
        second_owner += usize::from(distinct.len() > 1);
    }
    // The logs.
    let mut claims = 0;
    let mut claim_owner: HashMap<(String, u64), String> = HashMap::new();
    let (mut double_claims, mut not_written, mut partial) = (0, 0, 0);
    let (mut takeovers, mut from_live, mut renewals, mut stale) = (0, 0, 0, 0);
    let (mut lost, mut conflicts, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    for slot in slots {
        let mut text = String::new();
        File::open(&slot.log)
            .and_then(|mut f| f.read_to_string(&mut text))
            .expect("read a runner log");
        for raw in text.lines() {
            if raw.starts_with("start ") || raw.starts_with("stop ") {
                continue;
            }
            let Some(l) = parse_line(raw) else {
                partial += 1;
                continue;
            };
            match l.kind.as_str() {
                "claimed" => {
                    claims += 1;
                    let prev = claim_owner.insert((l.task.clone(), l.epoch), l.owner.clone());
                    if prev.is_some_and(|p| p != l.owner) {
                        double_claims += 1;
                    }
                    if !l.rest.is_empty() {
                        if killed.contains(&l.rest) || died.contains(&l.rest) {
                            takeovers += 1;
                        } else {
                            from_live += 1;
                            eprintln!("chaos: taken over from a live runner: {raw}");
                        }
                    }
                }
                "working" | "done" => {
                    let to = if l.kind == "done" {
                        Status::Done
                    } else {
                        Status::Working
                    };
                    if !written.contains(&(l.task, l.epoch, l.owner, to)) {
                        not_written += 1;
                        eprintln!("chaos: logged but not in the event log: {raw}");
                    }
                }
                "renewed" => renewals += 1,
                "stale" => stale += 1,
                "LOST" => lost.push(raw.to_owned()),
                "CONFLICT" => conflicts.push(raw.to_owned()),
                "ERR" => errors.push(raw.to_owned()),
                _ => partial += 1,
            }
        }
    }
    for l in lost.iter().chain(&conflicts).chain(&errors).take(20) {
        eprintln!("chaos: {l}");
    }
    let rows: Vec<(&str, String, bool)> = vec![
        (
            "runner kills (SIGKILL, then restart)",
            killed.len().to_string(),
            !killed.is_empty(),
        ),
        ("tasks created", created.to_string(), true),
        (
            "claims (claims/s)",
            format!("{claims} ({:.0}/s)", claims as f64 / elapsed),
            claims > 0,
        ),
        (
            "  of a task done meanwhile (stale candidate)",
            stale.to_string(),
            true,
        ),
        (
            "tasks done (done/s)",
            format!("{done_events} ({:.0}/s)", done_events as f64 / elapsed),
            done_events > 0 && done_events as i64 == done_rows,
        ),
        ("lease renewals (long holds)", renewals.to_string(), true),
        (
            "takeovers of a killed runner's task (logs)",
            takeovers.to_string(),
            takeovers > 0,
        ),
        (
            "tasks written by two owners (db)",
            second_owner.to_string(),
            true,
        ),
        (
            "tasks done twice (db)",
            double_done.to_string(),
            double_done == 0,
        ),
        (
            "tasks started twice (db)",
            double_start.to_string(),
            double_start == 0,
        ),
        (
            "epochs written by two owners (db)",
            two_owners.to_string(),
            two_owners == 0,
        ),
        (
            "tasks whose epochs went backwards (db)",
            backwards.to_string(),
            backwards == 0,
        ),
        (
            "status changes without owner@epoch (db)",
            unsigned.to_string(),
            unsigned == 0,
        ),
        (
            "epochs claimed by two owners (logs)",
            double_claims.to_string(),
            double_claims == 0,
        ),
        (
            "logged writes missing from the db",
            not_written.to_string(),
            not_written == 0,
        ),
        (
            "takeovers from a live runner (logs)",
            from_live.to_string(),
            from_live == 0,
        ),
        (
            "LOST: leases lost by live runners",
            lost.len().to_string(),
            lost.is_empty(),
        ),
        (
            "CONFLICT: unfenced writes",
            conflicts.len().to_string(),
            conflicts.is_empty(),
        ),
        (
            "other store errors",
            errors.len().to_string(),
            errors.is_empty(),
        ),
        (
            "runners that exited by themselves",
            died.len().to_string(),
            died.is_empty(),
        ),
        (
            "runners that did not stop when asked",
            stragglers.to_string(),
            stragglers == 0,
        ),
        ("unreadable log lines", partial.to_string(), partial == 0),
    ];
    println!("{:<44} {:>16}  check", "", "");
    for (what, value, ok) in &rows {
        println!(
            "{what:<44} {value:>16}  {}",
            if *ok { "ok" } else { "FAILED" }
        );
    }
    let ok = rows.iter().all(|r| r.2);
    println!(
        "{}",
        if ok {
            "all checks passed"
        } else {
            "CHECKS FAILED"
        }
    );
    ok
}
