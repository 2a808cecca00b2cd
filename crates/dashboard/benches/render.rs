//! Dashboard benchmark with 10,000 tasks: the time of one frame (target < 16 ms), of a
//! reload from a real SQLite store and of a filter keystroke, and the memory the
//! dashboard's work uses (target < 50 MB).
//!
//! Run: `cargo bench -p warden-dashboard --bench render`. The store is filled by a child
//! process (this binary run again with `WARDEN_BENCH_FILL=DIR`), so the peak memory
//! reported is that of loading and drawing only.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use warden_core::artifact;
use warden_core::event::Actor;
use warden_core::exit::ExitReport;
use warden_core::model::{
    Limits, Phase, PhaseStatus, Status, Task, TaskId, TaskSpec, WorkflowKind,
};
use warden_core::ops::{self, Change, Ctx, Initial, TransitionInput};
use warden_dashboard::{App, load, render};
use warden_store::{Batch, Engine, Workspace};

/// Phases of the plan: 100 (10,000 tasks), or `WARDEN_BENCH_PHASES` (1,000 for 100,000).
fn phases() -> usize {
    std::env::var("WARDEN_BENCH_PHASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}
const LEAVES_PER_PHASE: usize = 99;
const FRAMES: usize = 300;

fn ctx(now: Timestamp) -> Ctx<'static> {
    Ctx {
        now,
        actor: Actor::Person,
        limits: Limits::default(),
        task_file: "TASK.md",
    }
}

fn transition(t: &Task, to: Status, doc: &str, now: Timestamp) -> Change {
    let mut input = TransitionInput {
        artifacts: artifact::artifacts(doc),
        ..Default::default()
    };
    let (needs, _) = ops::check_transition(t, to, &input.artifacts, &ctx(now)).unwrap();
    if needs.commit {
        input
            .phases
            .push((Phase::Commit, PhaseStatus::Skipped, None));
        input
            .phases
            .push((Phase::Postchecks, PhaseStatus::Skipped, None));
    }
    if needs.merge_ri {
        input
            .phases
            .push((Phase::MergeRi, PhaseStatus::Skipped, None));
    }
    ops::transition(t, to, &input, &ctx(now)).unwrap()
}

/// The changes that create 100 phases of 99 leaves (10,000 tasks) in every status.
fn changes(now: Timestamp) -> Vec<Change> {
    let handoff = "## Handoff\nDone.\n";
    let pass = "## Handoff\nDone.\n## Review\nPASS\n";
    let mut out = Vec::new();
    let push = |out: &mut Vec<Change>, c: Change| -> Task {
        let t = c.after.clone().unwrap();
        out.push(c);
        t
    };
    for p in 0..phases() {
        let pid = TaskId::new(&format!("phase-{p:04}")).unwrap();
        let mut spec = TaskSpec::new(pid.clone(), WorkflowKind::Review, 3);
        spec.title = format!("Phase {p}: a group of plans");
        spec.order = p as i64;
        let init = Initial::NEW;
        push(&mut out, ops::create(spec, init, &ctx(now)).unwrap());
        for l in 0..LEAVES_PER_PHASE {
            let mut spec = TaskSpec::new(
                TaskId::new(&format!("p{p:04}-task-{l:03}")).unwrap(),
                WorkflowKind::Review,
                3,
            );
            spec.title = format!("Implement part {l} of phase {p} with care and tests");
            spec.parent = Some(pid.clone());
            spec.order = l as i64;
            let mut t = push(&mut out, ops::create(spec, init, &ctx(now)).unwrap());
            if l % 7 == 0 {
                continue;
            }
            t = push(&mut out, transition(&t, Status::Working, "", now));
            match l % 7 {
                1 => {}
                2 => {
                    let report = ExitReport {
                        role: None,
                        session: None,
                        exit_code: Some(1),
                        reason: None,
                    };
                    let c = ops::exited(&t, &report, &TransitionInput::default(), &ctx(now));
                    push(&mut out, c.unwrap());
                }
                3 => {
                    push(&mut out, transition(&t, Status::AgentReview, handoff, now));
                }
                4 => {
                    push(&mut out, transition(&t, Status::Stuck, "", now));
                }
                5 => {
                    t = push(&mut out, transition(&t, Status::AgentReview, handoff, now));
                    t = push(&mut out, transition(&t, Status::Reviewing, pass, now));
                    push(&mut out, transition(&t, Status::Done, pass, now));
                }
                _ => {
                    push(&mut out, transition(&t, Status::Cancelled, "", now));
                }
            }
        }
    }
    out
}

/// Fills a new workspace in `dir` (the child process).
fn fill(dir: &str) {
    let ws = Workspace::init(std::path::Path::new(dir), None).unwrap();
    let engine = Engine::open(ws, Actor::Person).unwrap();
    let all = changes(Timestamp::now());
    let mut it = all.into_iter().peekable();
    while it.peek().is_some() {
        let chunk: Vec<Change> = it.by_ref().take(2000).collect();
        engine
            .store
            .commit(Batch {
                changes: chunk,
                ..Default::default()
            })
            .unwrap();
    }
}

fn proc_status_kb(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn stats(name: &str, mut d: Vec<Duration>, target: Option<Duration>) {
    d.sort();
    let ms = |x: Duration| x.as_secs_f64() * 1000.0;
    let p = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize];
    let verdict = match target {
        Some(t) if p(0.99) < t => format!("  (p99 under the {} ms target)", ms(t)),
        Some(t) => format!("  (p99 OVER the {} ms target)", ms(t)),
        None => String::new(),
    };
    eprintln!(
        "{name:<28} n={:<4} median {:>7.3} ms  p99 {:>7.3} ms  max {:>7.3} ms{verdict}",
        d.len(),
        ms(p(0.5)),
        ms(p(0.99)),
        ms(d[d.len() - 1]),
    );
}

fn main() {
    if let Ok(dir) = std::env::var("WARDEN_BENCH_FILL") {
        fill(&dir);
        return;
    }
    let dir = std::env::temp_dir().join(format!("warden-dash-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let t = Instant::now();
    let st = std::process::Command::new(std::env::current_exe().unwrap())
        .env("WARDEN_BENCH_FILL", &dir)
        .status()
        .unwrap();
    assert!(st.success(), "filling the store failed");
    eprintln!(
        "filled a SQLite store with {} tasks in {:.1} s",
        phases() * (LEAVES_PER_PHASE + 1),
        t.elapsed().as_secs_f64()
    );
    let rss_start = proc_status_kb("VmRSS:");

    // What `warden dashboard` does: open, load every task, draw, follow keys.
    let ws = Workspace::find(&dir, Some(&dir)).unwrap();
    let engine = Engine::open(ws, Actor::Person).unwrap();
    let mut app = App::new("bench");
    let t = Instant::now();
    app.set_tasks(engine.tasks().unwrap());
    let first_load = t.elapsed();
    // What the loop does after another process commits: read the tasks with events
    // since the last look, and take them in.
    let mut reloads = Vec::new();
    let mut seq = engine.store.last_seq().unwrap();
    for i in 0..10 {
        let id = TaskId::new(&format!("p{:04}-task-{:03}", i * 7 % phases(), 7 * i + 1)).unwrap();
        let t = engine.store.get(&id).unwrap().unwrap();
        let c = transition(&t, Status::Cancelled, "", Timestamp::now());
        engine
            .store
            .commit(Batch {
                changes: vec![c],
                ..Default::default()
            })
            .unwrap();
        let t = Instant::now();
        let (ids, next) = engine.store.changed_since(seq).unwrap();
        seq = next;
        app.update_tasks(engine.store.get_many(&ids).unwrap(), &[]);
        reloads.push(t.elapsed());
    }
    assert_eq!(app.tasks().len(), phases() * (LEAVES_PER_PHASE + 1));
    let now = Timestamp::now();
    let mut details = Vec::new();
    let mut frames = Vec::new();
    let mut term = Terminal::new(TestBackend::new(100, 30)).unwrap();
    let down = KeyEvent::new(KeyCode::Down, KeyModifiers::NONE);
    let end = KeyEvent::new(KeyCode::End, KeyModifiers::NONE);
    for i in 0..FRAMES {
        // Move through the table (and jump to the end once) so frames scroll.
        app.on_key(if i == FRAMES / 2 { end } else { down });
        let t = Instant::now();
        let sel = app.selected_task().unwrap().clone();
        app.set_detail(load::detail(&engine, &sel));
        details.push(t.elapsed());
        let t = Instant::now();
        term.draw(|f| render(f, &app, now)).unwrap();
        frames.push(t.elapsed());
    }
    let mut frames_80 = Vec::new();
    let mut term80 = Terminal::new(TestBackend::new(80, 24)).unwrap();
    for _ in 0..FRAMES {
        app.on_key(down);
        let t = Instant::now();
        term80.draw(|f| render(f, &app, now)).unwrap();
        frames_80.push(t.elapsed());
    }
    let mut filters = Vec::new();
    for f in ["p0", "p05", "p050", "p050-task-0", "implement part 9", ""] {
        let t = Instant::now();
        app.set_filter(f.to_owned());
        filters.push(t.elapsed());
    }
    let t = Instant::now();
    let mut polls = 0;
    while t.elapsed() < Duration::from_millis(100) {
        engine.store.data_version().unwrap();
        polls += 1;
    }
    let rss_end = proc_status_kb("VmRSS:");
    let hwm = proc_status_kb("VmHWM:");

    eprintln!("--- warden dashboard with {} tasks ---", app.tasks().len());
    stats(
        "frame render 100x30",
        frames,
        Some(Duration::from_millis(16)),
    );
    stats(
        "frame render 80x24",
        frames_80,
        Some(Duration::from_millis(16)),
    );
    eprintln!(
        "first load (list + build)     {:.1} ms",
        first_load.as_secs_f64() * 1000.0
    );
    stats("reload (changed + rebuild)", reloads, None);
    stats("detail load (selected)", details, None);
    stats("filter keystroke", filters, None);
    eprintln!(
        "data_version poll            {:.1} µs each",
        100_000.0 / polls as f64
    );
    eprintln!(
        "memory: peak RSS {:.1} MB (target < 100 MB); RSS {:.1} MB before opening the store, {:.1} MB after",
        hwm as f64 / 1024.0,
        rss_start as f64 / 1024.0,
        rss_end as f64 / 1024.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}
