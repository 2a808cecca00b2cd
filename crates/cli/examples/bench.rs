//! Warden's benchmark table (run by `bench/run`): every figure beside its target and the
//! physical limit measured in the same run, so the ratio means something on a shared,
//! noisy machine. `cargo run --release -p warden --example bench -- [--quick]`.
#![allow(clippy::print_stdout)] // the benchmark prints its table

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use warden_core::artifact;
use warden_core::event::Actor;
use warden_core::memory::MemoryDelta;
use warden_core::model::{Limits, Status, Task, TaskId, TaskSpec, WorkflowKind};
use warden_core::ops::{self, Ctx, Initial, TransitionInput};
use warden_core::tree::{self, AgentStatus, PlanNode};
use warden_store::{Decision, Engine, Workspace};

struct Row {
    name: String,
    figure: String,
    target: String,
    limit: String,
    ok: Option<bool>,
}

fn ctx() -> Ctx<'static> {
    Ctx::fixed(Actor::Runner)
}

fn new_task(id: &str, parent: Option<&str>, order: i64) -> Task {
    let mut spec = TaskSpec::new(TaskId::new(id).unwrap(), WorkflowKind::Review, 3);
    spec.parent = parent.map(|p| TaskId::new(p).unwrap());
    spec.order = order;
    ops::create(spec, Initial::NEW, &ctx())
        .unwrap()
        .after
        .unwrap()
}

fn per_sec(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2} M/s", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1} k/s", r / 1e3)
    } else {
        format!("{r:.0} /s")
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Best of `reps` runs of `f`.
fn best(reps: usize, mut f: impl FnMut() -> Duration) -> Duration {
    (0..reps).map(|_| f()).min().unwrap_or_default()
}

fn engine_rows(rows: &mut Vec<Row>, quick: bool) {
    let n = if quick { 200_000 } else { 2_000_000 };
    let working = {
        let t = new_task("t", None, 0);
        ops::transition(&t, Status::Working, &TransitionInput::default(), &ctx())
            .unwrap()
            .after
            .unwrap()
    };
    let input = TransitionInput::default();
    let c = ctx();
    let d = best(3, || {
        let mut t = working.clone();
        let start = Instant::now();
        for i in 0..n {
            let to = if i % 2 == 0 {
                Status::Clarification
            } else {
                Status::Working
            };
            t = ops::transition(&t, to, &input, &c).unwrap().after.unwrap();
        }
        std::hint::black_box(&t);
        start.elapsed()
    });
    // The least a transition can cost: copying the task it produces.
    let limit = best(3, || {
        let start = Instant::now();
        let mut t = working.clone();
        for _ in 0..n {
            t = std::hint::black_box(t.clone());
        }
        std::hint::black_box(&t);
        start.elapsed()
    });
    let rate = per_sec(n, d);
    rows.push(Row {
        name: "1. pure engine: validated transitions".into(),
        figure: fmt_rate(rate),
        target: "≥ 1 M/s".into(),
        limit: format!("task clone {}", fmt_rate(per_sec(n, limit))),
        ok: Some(rate >= 1e6),
    });
}

fn tree_rows(rows: &mut Vec<Row>) {
    let mut results = Vec::new();
    for n in [1_000usize, 10_000, 100_000] {
        let groups = (n / 100).max(1);
        let mut prev = Vec::with_capacity(n + groups);
        for g in 0..groups {
            prev.push(new_task(&format!("g{g}"), None, g as i64));
        }
        for i in 0..n {
            prev.push(new_task(
                &format!("t{i}"),
                Some(&format!("g{}", i % groups)),
                (i / groups) as i64,
            ));
        }
        // As `plan apply` meets them: the store's tasks read back in id order (so each
        // task's strings are allocated in that order), the file in `plan export`'s
        // depth-first order.
        prev.sort_by(|a, b| a.id().cmp(b.id()));
        let prev: Vec<_> = prev.to_vec();
        let next: Vec<PlanNode> = tree::depth_first(&prev)
            .into_iter()
            .map(PlanNode::from_task)
            .collect();
        let selected = TaskId::new("t0").unwrap();
        let limits = Limits::default();
        let d = best(5, || {
            let nx = next.clone();
            let start = Instant::now();
            let u =
                tree::apply_state_updates(&prev, nx, &selected, AgentStatus::Retry, None, &limits)
                    .unwrap();
            let e = start.elapsed();
            std::hint::black_box(u);
            e
        });
        // The least a reconcile can do: produce a tree of the same size (a copy of the
        // file's nodes) and index the store's tasks by id.
        let limit = best(5, || {
            let start = Instant::now();
            let copy = next.clone();
            let idx: std::collections::HashMap<&TaskId, usize> =
                prev.iter().enumerate().map(|(i, t)| (t.id(), i)).collect();
            let e = start.elapsed();
            std::hint::black_box((copy, idx));
            e
        });
        results.push((n, d, limit));
    }
    for (n, d, limit) in &results {
        let target_ms = if *n == 100_000 { Some(30.0) } else { None };
        rows.push(Row {
            name: format!("2. tree reconcile, {n} nodes"),
            figure: ms(*d),
            target: target_ms
                .map(|t| format!("< {t} ms"))
                .unwrap_or_else(|| "linear".into()),
            limit: format!("copy + id index {}", ms(*limit)),
            ok: target_ms.map(|t| d.as_secs_f64() * 1e3 < t),
        });
    }
    let (n1, d1, _) = results[1];
    let (n2, d2, _) = results[2];
    let growth = (d2.as_secs_f64() / d1.as_secs_f64()) / (n2 as f64 / n1 as f64);
    rows.push(Row {
        name: "   growth 10k → 100k (1.0 = linear)".into(),
        figure: format!("{growth:.2}"),
        target: "≈ 1".into(),
        limit: String::new(),
        ok: Some(growth < 1.6),
    });
}

fn parse_rows(rows: &mut Vec<Row>) {
    let mut doc = String::from(
        "---\nid: t\ntitle: \"A task\"\nstatus: working\nattempts: 1\n---\n# A task\n\n## Context\n",
    );
    while doc.len() < 1 << 20 {
        doc.push_str("Some context line with `code` and *emphasis*, and a [link](http://x).\n\n```rust\nfn main() {}\n## not a heading\n```\n\n### Detail\n- item one\n- item two\n\n<!-- a comment with PASS -->\n");
    }
    doc.push_str("\n## Handoff\nDONE: everything\n\n## Review\nVerdict: PASS\n");
    let bytes = doc.len();
    let rate = |d: Duration| bytes as f64 / d.as_secs_f64() / 1e6;
    let d = best(5, || {
        let start = Instant::now();
        std::hint::black_box(artifact::artifacts(std::hint::black_box(&doc)));
        start.elapsed()
    });
    // The least any section scan can do: find every line end.
    let lines = best(5, || {
        let start = Instant::now();
        std::hint::black_box(
            std::hint::black_box(doc.as_bytes())
                .split(|&b| b == b'\n')
                .count(),
        );
        start.elapsed()
    });
    rows.push(Row {
        name: "3. TASK.md parsing (1 MiB document)".into(),
        figure: format!("{:.0} MB/s", rate(d)),
        target: "≥ 100 MB/s".into(),
        limit: format!("splitting the lines {:.0} MB/s", rate(lines)),
        ok: Some(rate(d) >= 100.0),
    });
    // A body with a construct the line scan does not model (an HTML block) goes through
    // pulldown-cmark's event stream instead.
    let html = doc.replacen("## Context\n", "## Context\n<details>\n\n", 1);
    let slow = best(5, || {
        let start = Instant::now();
        std::hint::black_box(artifact::artifacts(std::hint::black_box(&html)));
        start.elapsed()
    });
    let events = best(5, || {
        let start = Instant::now();
        let n = pulldown_cmark::Parser::new_ext(&html, pulldown_cmark::Options::empty())
            .into_offset_iter()
            .count();
        std::hint::black_box(n);
        start.elapsed()
    });
    rows.push(Row {
        name: "   … with an HTML block (parser path)".into(),
        figure: format!("{:.0} MB/s", rate(slow)),
        target: "–".into(),
        limit: format!("pulldown-cmark events {:.0} MB/s", rate(events)),
        ok: None,
    });
}

fn warden() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/release/examples/bench → target/release/warden
    exe.parent().unwrap().parent().unwrap().join("warden")
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("warden-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(dir: &Path, args: &[&str]) -> Duration {
    let start = Instant::now();
    let st = Command::new(warden())
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("WARDEN_DIR")
        .env_remove("WARDEN_TASK_ID")
        .env_remove("WARDEN_ROLE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let e = start.elapsed();
    assert!(st.success(), "warden {args:?} failed in {}", dir.display());
    e
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn cli_rows(rows: &mut Vec<Row>, quick: bool) {
    let n = if quick { 50 } else { 200 };
    let dir = temp_dir("cli");
    run(&dir, &["init"]);
    run(&dir, &["task", "create", "t", "--agent", "x"]);
    run(&dir, &["task", "update", "t", "--status", "working"]);
    let mut version = Vec::new();
    let mut show = Vec::new();
    let mut update = Vec::new();
    for i in 0..n {
        version.push(run(&dir, &["--version"]));
        show.push(run(&dir, &["task", "show", "t"]));
        let to = if i % 2 == 0 {
            "clarification"
        } else {
            "working"
        };
        update.push(run(&dir, &["task", "update", "t", "--status", to]));
    }
    // What a durable update must add to a read in a new process, measured on this disk:
    // one commit's fsync and one rename over an existing file (TASK.md's mirror).
    let (fsync, rename) = update_io(&dir, n);
    let _ = std::fs::remove_dir_all(&dir);
    let v50 = percentile(version.clone(), 0.5);
    let s50 = percentile(show, 0.5);
    let u50 = percentile(update.clone(), 0.5);
    let u99 = percentile(update, 0.99);
    let ratio = u50.as_secs_f64() / v50.as_secs_f64();
    let floor = (s50 + fsync + rename).as_secs_f64() / v50.as_secs_f64();
    rows.push(Row {
        name: "4. `task update` / `--version` (p50)".into(),
        figure: format!("{ratio:.2}× ({} vs {}; p99 {})", ms(u50), ms(v50), ms(u99)),
        target: "≤ 2.0×".into(),
        limit: format!(
            "`task show` {} + fsync {} + rename {} = {floor:.2}×",
            ms(s50),
            ms(fsync),
            ms(rename)
        ),
        ok: Some(ratio <= 2.0),
    });
    // task list with 1,000 tasks.
    let dir = temp_dir("list");
    run(&dir, &["init"]);
    let plan: Vec<String> = (0..1000)
        .map(|i| format!(r#"{{"id": "t{i}", "agent": "work {i}"}}"#))
        .collect();
    std::fs::write(
        dir.join("plan.json"),
        format!(r#"{{"tasks": [{}]}}"#, plan.join(",")),
    )
    .unwrap();
    run(&dir, &["plan", "import", "plan.json"]);
    let list: Vec<Duration> = (0..n / 4).map(|_| run(&dir, &["task", "list"])).collect();
    let l50 = percentile(list, 0.5);
    let _ = std::fs::remove_dir_all(&dir);
    rows.push(Row {
        name: "   `task list`, 1,000 tasks (p50)".into(),
        figure: ms(l50),
        target: "< 10 ms".into(),
        limit: format!("--version {}", ms(v50)),
        ok: Some(l50 < Duration::from_millis(10)),
    });
}

/// Raw durable-write rate of this disk: append `bytes` + fdatasync in a loop.
fn fsync_rate(dir: &Path, n: usize, bytes: usize) -> f64 {
    use std::io::Write;
    let p = dir.join("fsync.probe");
    let mut f = std::fs::File::create(&p).unwrap();
    let buf = vec![0u8; bytes];
    let start = Instant::now();
    for _ in 0..n {
        f.write_all(&buf).unwrap();
        f.sync_data().unwrap();
    }
    let r = per_sec(n, start.elapsed());
    let _ = std::fs::remove_file(&p);
    r
}

/// The two I/O steps every durable update takes, one after the other as `task update`
/// does them, `n` times: appending a 3-page commit (24-byte frame header + 4 KiB page
/// each) and fsyncing it, then replacing an existing file by rename (TASK.md's mirror:
/// temp file written, renamed over it). Returns the median of each step. Measured
/// together because they interact: on ext4 the rename starts the new file's writeback
/// (`auto_da_alloc`), which the next fsync's device flush then waits for.
fn update_io(dir: &Path, n: usize) -> (Duration, Duration) {
    use std::os::unix::fs::FileExt;
    let wal = std::fs::File::create(dir.join("wal.probe")).unwrap();
    let target = dir.join("rename.probe");
    std::fs::write(&target, [b'x'; 320]).unwrap();
    let tmp = dir.join(".rename.probe.tmp");
    let (header, page) = ([1u8; 24], [2u8; 4096]);
    let mut at = 0u64;
    let (mut commit, mut rename) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let start = Instant::now();
        for _ in 0..3 {
            wal.write_all_at(&header, at).unwrap();
            wal.write_all_at(&page, at + 24).unwrap();
            at += 24 + 4096;
        }
        wal.sync_all().unwrap();
        let synced = Instant::now();
        std::fs::write(&tmp, [b'y'; 320]).unwrap();
        std::fs::rename(&tmp, &target).unwrap();
        commit.push(synced - start);
        rename.push(synced.elapsed());
    }
    let _ = std::fs::remove_file(dir.join("wal.probe"));
    let _ = std::fs::remove_file(&target);
    (percentile(commit, 0.5), percentile(rename, 0.5))
}

/// The WAL bytes of the smallest memory-merge commit: four pages (the task row, the
/// event, its index entry, the memory row), each a 24-byte frame header and 4 KiB.
const MERGE_COMMIT_BYTES: usize = 4 * (24 + 4096);

fn engine_in(dir: &Path) -> Engine {
    let ws = Workspace::find(dir, Some(dir)).unwrap();
    Engine::open(ws, Actor::Runner).unwrap()
}

fn durable_rows(rows: &mut Vec<Row>, quick: bool) {
    let n = if quick { 100 } else { 400 };
    let dir = temp_dir("durable");
    run(&dir, &["init"]);
    run(&dir, &["task", "create", "t", "--agent", "x"]);
    run(&dir, &["task", "update", "t", "--status", "working"]);
    let raw = fsync_rate(&dir, n, 128);
    let commit = fsync_rate(&dir, n, MERGE_COMMIT_BYTES);
    let eng = engine_in(&dir);
    let id = TaskId::new("t").unwrap();
    let start = Instant::now();
    for i in 0..n {
        let to = if i % 2 == 0 {
            Status::Clarification
        } else {
            Status::Working
        };
        eng.write_task(&id, None, |t, doc| {
            let input = TransitionInput {
                artifacts: doc.artifacts.clone(),
                ..Default::default()
            };
            Ok(Decision::retryable(ops::transition(
                t,
                to,
                &input,
                &eng.ctx("TASK.md"),
            )?))
        })
        .unwrap();
    }
    let one = per_sec(n, start.elapsed());
    rows.push(Row {
        name: "5. durable transitions, 1 writer".into(),
        figure: fmt_rate(one),
        target: "near the fsync rate".into(),
        limit: format!("fsync {}", fmt_rate(raw)),
        ok: None,
    });
    // 8 processes, each its own `bench` child doing writes.
    let per = n / 8;
    let start = Instant::now();
    let kids: Vec<_> = (0..8)
        .map(|k| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--child-writes",
                    &dir.display().to_string(),
                    &per.to_string(),
                    &k.to_string(),
                ])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    let eight = per_sec(per * 8, start.elapsed());
    rows.push(Row {
        name: "   durable transitions, 8 processes".into(),
        figure: fmt_rate(eight),
        target: "no loss".into(),
        limit: format!("fsync {}", fmt_rate(raw)),
        ok: None,
    });
    // Memory merges, 4 processes, count what survives.
    let per = if quick { 100 } else { 500 };
    let start = Instant::now();
    let kids: Vec<_> = (0..4)
        .map(|k| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--child-merges",
                    &dir.display().to_string(),
                    &per.to_string(),
                    &k.to_string(),
                ])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    let rate = per_sec(per * 4, start.elapsed());
    let m = eng.store.memory(&id).unwrap().unwrap_or_default();
    let lost = per * 4 - m.decisions.len();
    drop(eng);
    let _ = std::fs::remove_dir_all(&dir);
    rows.push(Row {
        name: "8. durable memory merges, 4 processes".into(),
        figure: format!("{} ({lost} lost)", fmt_rate(rate)),
        target: "≥ 5 k/s, 0 lost".into(),
        limit: format!("fsync of a 4-page commit {}", fmt_rate(commit)),
        ok: Some(rate >= 5000.0 && lost == 0),
    });
}

fn child_writes(dir: &str, n: usize, k: usize) {
    let eng = engine_in(Path::new(dir));
    let id = TaskId::new("t").unwrap();
    for i in 0..n {
        let to = if (i + k).is_multiple_of(2) {
            Status::Clarification
        } else {
            Status::Working
        };
        // A refusal (already there) is fine; conflicts are retried by the engine.
        let _ = eng.write_task(&id, None, |t, doc| {
            let input = TransitionInput {
                artifacts: doc.artifacts.clone(),
                ..Default::default()
            };
            Ok(Decision::retryable(ops::transition(
                t,
                to,
                &input,
                &eng.ctx("TASK.md"),
            )?))
        });
    }
}

fn child_merges(dir: &str, n: usize, k: usize) {
    let eng = engine_in(Path::new(dir));
    let id = TaskId::new("t").unwrap();
    for i in 0..n {
        let delta = MemoryDelta {
            decisions: vec![format!("p{k}-{i}")],
            ..Default::default()
        };
        eng.merge_memory(&id, &delta).unwrap();
    }
}

fn state_rows(rows: &mut Vec<Row>) {
    let n = 10_000;
    let mut tasks = Vec::with_capacity(n + 100);
    for g in 0..100 {
        tasks.push(new_task(&format!("g{g:03}"), None, g));
    }
    for i in 0..n {
        tasks.push(new_task(
            &format!("t{i:05}"),
            Some(&format!("g{:03}", i % 100)),
            i as i64,
        ));
    }
    let input = warden_core::history::state_input("bench".into(), &tasks, &[], None);
    let d = best(5, || {
        let start = Instant::now();
        std::hint::black_box(warden_core::state_md::render(&input));
        start.elapsed()
    });
    let limit = best(5, || {
        let start = Instant::now();
        let mut s = String::new();
        for t in &tasks {
            s.push_str(t.id().as_str());
            s.push('\n');
        }
        std::hint::black_box(s);
        start.elapsed()
    });
    rows.push(Row {
        name: "   STATE.md render, 10,000 tasks".into(),
        figure: ms(d),
        target: "< 20 ms".into(),
        limit: format!("id list {}", ms(limit)),
        ok: Some(d < Duration::from_millis(20)),
    });
}

fn rss_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn supervisor_rows(rows: &mut Vec<Row>, quick: bool) {
    let mut figures = Vec::new();
    for n in if quick {
        vec![1_000]
    } else {
        vec![1_000, 10_000]
    } {
        let dir = temp_dir(&format!("rss{n}"));
        run(&dir, &["init"]);
        let plan: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"id": "t{i}", "work": "sleep 30"}}"#))
            .collect();
        std::fs::write(
            dir.join("plan.json"),
            format!(r#"{{"tasks": [{}]}}"#, plan.join(",")),
        )
        .unwrap();
        run(&dir, &["plan", "import", "plan.json"]);
        let mut sup = Command::new(warden())
            .args(["run", "--max-parallel", "50"])
            .current_dir(&dir)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let mut peak = 0;
        while start.elapsed() < Duration::from_secs(6) {
            std::thread::sleep(Duration::from_millis(200));
            peak = peak.max(rss_kb(sup.id()).unwrap_or(0));
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(sup.id().to_string())
            .status();
        let _ = sup.wait();
        // Stop the sleeping sessions.
        let _ = Command::new("pkill")
            .args(["-f", "warden session-run"])
            .status();
        let _ = Command::new("pkill").args(["-f", "sleep 30"]).status();
        figures.push((n, peak));
        let _ = std::fs::remove_dir_all(&dir);
    }
    let base = rss_kb(std::process::id()).unwrap_or(0);
    for (n, peak) in &figures {
        rows.push(Row {
            name: format!("7. supervisor RSS, {n} tasks, 50 sessions"),
            figure: format!("{:.1} MB", *peak as f64 / 1024.0),
            target: "< 50 MB, flat".into(),
            limit: format!("this process {:.1} MB", base as f64 / 1024.0),
            ok: Some((*peak as f64) < 50.0 * 1024.0),
        });
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child-writes") {
        child_writes(&args[2], args[3].parse().unwrap(), args[4].parse().unwrap());
        return;
    }
    if args.get(1).map(String::as_str) == Some("--child-merges") {
        child_merges(&args[2], args[3].parse().unwrap(), args[4].parse().unwrap());
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    // `--only engine,tree,…` runs a subset (for profiling one figure).
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').map(str::to_owned).collect());
    let want = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == name));
    let mut rows = Vec::new();
    if want("engine") {
        engine_rows(&mut rows, quick);
    }
    if want("tree") {
        tree_rows(&mut rows);
    }
    if want("parse") {
        parse_rows(&mut rows);
    }
    if want("cli") {
        cli_rows(&mut rows, quick);
    }
    if want("durable") {
        durable_rows(&mut rows, quick);
    }
    if want("state") {
        state_rows(&mut rows);
    }
    if want("supervisor") {
        supervisor_rows(&mut rows, quick);
    }
    let w = rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(10);
    let f = rows
        .iter()
        .map(|r| r.figure.chars().count())
        .max()
        .unwrap_or(10);
    let t = rows
        .iter()
        .map(|r| r.target.chars().count())
        .max()
        .unwrap_or(10);
    println!(
        "{:w$}  {:f$}  {:t$}  {:4}  physical limit (same run)",
        "figure", "measured", "target", "met"
    );
    for r in rows {
        let met = match r.ok {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        println!(
            "{:w$}  {:f$}  {:t$}  {met:4}  {}",
            r.name, r.figure, r.target, r.limit
        );
    }
}
