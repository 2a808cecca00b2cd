//! Rendering and key-handling tests: a sample project built through the core's own
//! operations, drawn on ratatui's `TestBackend` and compared with insta snapshots.

use jiff::Timestamp;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::style::Color;
use warden_core::artifact;
use warden_core::event::{Actor, Event};
use warden_core::exit::ExitReport;
use warden_core::memory::{self, Memory};
use warden_core::model::{
    Limits, Phase, PhaseStatus, Role, Status, Task, TaskId, TaskSpec, WorkSpec, WorkflowKind,
};
use warden_core::ops::{self, Change, Ctx, Initial, TransitionInput};

use crate::app::{App, Command, Detail, Mode, SectionInfo, Seen};
use crate::load;
use crate::view::{age, render};

const T0: i64 = 1_750_000_000;
const INITIAL: Initial = Initial::NEW;

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(T0 + s).unwrap()
}

/// "Now" for every snapshot: three hours after the project started.
fn now() -> Timestamp {
    at(3 * 3600)
}

fn ctx(s: i64) -> Ctx<'static> {
    Ctx {
        now: at(s),
        actor: Actor::Person,
        limits: Limits::default(),
        task_file: "TASK.md",
    }
}

fn id(s: &str) -> TaskId {
    TaskId::new(s).unwrap()
}

/// Builds tasks step by step through the core operations, keeping every event.
struct Builder {
    tasks: Vec<Task>,
    events: Vec<Event>,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            tasks: Vec::new(),
            events: Vec::new(),
        }
    }

    fn apply(&mut self, change: Change) {
        self.events.extend(change.events.clone());
        let t = change.after.unwrap();
        self.tasks.retain(|x| x.id() != t.id());
        self.tasks.push(t);
    }

    fn get(&self, i: &str) -> Task {
        self.tasks
            .iter()
            .find(|t| t.id().as_str() == i)
            .unwrap()
            .clone()
    }

    fn create(&mut self, i: &str, title: &str, parent: Option<&str>, s: i64) -> &mut Self {
        let mut spec = TaskSpec::new(id(i), WorkflowKind::Review, 3);
        spec.title = title.into();
        spec.parent = parent.map(id);
        self.apply(ops::create(spec, INITIAL, &ctx(s)).unwrap());
        self
    }

    fn create_spec(&mut self, spec: TaskSpec, s: i64) -> &mut Self {
        self.apply(ops::create(spec, INITIAL, &ctx(s)).unwrap());
        self
    }

    fn to(&mut self, i: &str, to: Status, doc: &str, s: i64) -> &mut Self {
        let t = self.get(i);
        // Each step's evidence is its own (an earlier round's never moves a task): the
        // step's time makes every section it wrote new.
        let doc = doc.replace("\n## ", &format!("\n<!-- step {s} -->\n## "));
        let doc = format!("{doc}\n<!-- step {s} -->\n");
        let mut input = TransitionInput {
            artifacts: artifact::artifacts(&doc),
            ..Default::default()
        };
        let (needs, _) = ops::check_transition(&t, to, &input.artifacts, &ctx(s)).unwrap();
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
        self.apply(ops::transition(&t, to, &input, &ctx(s)).unwrap());
        self
    }

    fn spawn(&mut self, i: &str, session: &str, role: Role, s: i64) -> &mut Self {
        let t = self.get(i);
        self.apply(ops::spawned(&t, session, role, None, &ctx(s)).unwrap());
        self
    }

    fn exit(&mut self, i: &str, session: &str, doc: &str, s: i64) -> &mut Self {
        let t = self.get(i);
        let report = ExitReport {
            role: None,
            session: Some(session.into()),
            exit_code: Some(1),
            reason: None,
        };
        let input = TransitionInput {
            artifacts: artifact::artifacts(doc),
            ..Default::default()
        };
        self.apply(ops::exited(&t, &report, &input, &ctx(s)).unwrap());
        self
    }

    fn events_of(&self, i: &str) -> Vec<Event> {
        self.events
            .iter()
            .filter(|e| e.task.as_str() == i)
            .cloned()
            .collect()
    }

    fn sorted(&self) -> Vec<Task> {
        let mut v = self.tasks.clone();
        v.sort_by(|a, b| a.id().cmp(b.id()));
        v
    }
}

const HANDOFF: &str = "## Handoff\nImplemented.\n";
const PASS: &str = "## Handoff\nImplemented.\n## Review\nVerdict: PASS\n";
const FAIL: &str = "## Handoff\nImplemented.\n## Review\nFAIL: no tests\n";

/// A mixed project: two phases with leaves, a cancelled and a pending root leaf; one
/// task of every interesting kind (done, dead, blocked, in review, stuck).
fn mixed() -> Builder {
    let mut b = Builder::new();
    b.create("backend", "Backend API", None, 0)
        .create(
            "api",
            "REST endpoints for orders and carts",
            Some("backend"),
            10,
        )
        .create("db", "Schema and migrations", Some("backend"), 20)
        .create("frontend", "Web UI", None, 30)
        .create("ui", "Checkout pages", Some("frontend"), 40)
        .create("docs", "Write the user guide", None, 50)
        .create("release", "Cut a release", None, 60);
    let mut auth = TaskSpec::new(id("auth"), WorkflowKind::Review, 3);
    auth.title = "Login and sessions".into();
    auth.parent = Some(id("backend"));
    auth.depends_on = vec![id("db")];
    auth.order = 5;
    b.create_spec(auth, 70);
    let mut lint = TaskSpec::new(id("lint"), WorkflowKind::Direct, 2);
    lint.title = "Lint the code".into();
    lint.parent = Some(id("frontend"));
    lint.order = 9;
    lint.spec.work = Some(WorkSpec::Shell("cargo clippy".into()));
    b.create_spec(lint, 80);
    b.to("api", Status::Working, "", 600)
        .spawn("api", "s-1", Role::Worker, 610)
        .to("api", Status::AgentReview, HANDOFF, 1200)
        .to("api", Status::Reviewing, PASS, 1800)
        .to("api", Status::Done, PASS, 2400);
    b.to("db", Status::Working, "", 3000)
        .spawn("db", "s-2", Role::Worker, 3010)
        .exit("db", "s-2", "", 10_500);
    b.to("ui", Status::Working, "", 4000)
        .to("ui", Status::AgentReview, HANDOFF, 5000)
        .to("ui", Status::Working, FAIL, 6000)
        .to("ui", Status::AgentReview, HANDOFF, 7000);
    b.to("lint", Status::Working, "", 8000)
        .to("lint", Status::Stuck, "", 9000);
    b.to("docs", Status::Cancelled, "", 9500);
    b
}

fn app_of(b: &Builder) -> App {
    let mut app = App::new("shop");
    app.set_tasks(b.sorted());
    app
}

fn draw(app: &App, w: u16, h: u16) -> String {
    draw_term(app, w, h).backend().to_string()
}

fn draw_term(app: &App, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| render(f, app, now())).unwrap();
    t
}

fn key(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

fn ch(c: char) -> KeyEvent {
    key(KeyCode::Char(c))
}

/// The detail the terminal loop would load for `db`: TASK.md sections, its events,
/// its memory and an output tail with escape sequences.
fn db_detail(b: &Builder) -> Detail {
    let task_md = "---\nid: db\n---\n## Context\nThe schema.\n## Notes\n\n## Handoff\n";
    let (sections, problems) = load::sections_of(task_md);
    let mem = Memory {
        goals: vec!["Tables for orders and carts".into()],
        decisions: vec!["Use SQLite in tests".into()],
        next_focus: "Write the migration for carts".into(),
        ..Memory::default()
    };
    let output = "\x1b[32mCompiling\x1b[0m shop v0.1.0\nrunning 12 tests\ntest carts ... ok\n\ttest orders ... FAILED\nerror: 1 test failed\n";
    Detail {
        id: Some(id("db")),
        sections,
        problems,
        events: b.events_of("db"),
        memory: memory::render(&mem),
        output: load::tail_lines(output, 200),
        output_note: None,
        texts: load::texts_of(task_md),
    }
}

#[test]
fn ages() {
    let cases = [
        (0, "0s"),
        (59, "59s"),
        (60, "1m"),
        (3599, "59m"),
        (3600, "1h"),
        (86_399, "23h"),
        (86_400, "1d"),
        (-5, "0s"),
    ];
    for (secs, want) in cases {
        assert_eq!(age(at(secs), at(0)), want, "{secs}s");
    }
}

#[test]
fn empty_project() {
    let app = App::new("shop");
    insta::assert_snapshot!(draw(&app, 100, 30));
}

#[test]
fn mixed_project() {
    let b = mixed();
    let app = app_of(&b);
    insta::assert_snapshot!(draw(&app, 100, 30));
}

#[test]
fn mixed_project_at_80x24() {
    let b = mixed();
    let mut app = app_of(&b);
    app.select(&id("db"));
    app.set_detail(db_detail(&b));
    insta::assert_snapshot!(draw(&app, 80, 24));
}

#[test]
fn dead_session_with_detail() {
    let b = mixed();
    let db = b.get("db");
    assert!(db.is_dead(), "the fixture's db session must be dead");
    assert_eq!(db.crash_count(), 1);
    let mut app = app_of(&b);
    app.select(&id("db"));
    assert_eq!(app.wants_detail(), Some(&id("db")));
    app.set_detail(db_detail(&b));
    assert_eq!(app.wants_detail(), None);
    let t = draw_term(&app, 100, 30);
    // The ✗ of the dead session is red, in the row of db.
    let buf = t.backend().buffer();
    let row = (0..30)
        .find(|&y| {
            (0..100)
                .map(|x| buf[(x, y)].symbol())
                .collect::<String>()
                .contains("  db ")
        })
        .expect("a row for db");
    let cross = (0..100)
        .find(|&x| buf[(x, row)].symbol() == "✗")
        .expect("a ✗ in db's row");
    assert_eq!(buf[(cross, row)].fg, Color::Red);
    insta::assert_snapshot!(t.backend().to_string());
}

#[test]
fn status_colours() {
    let b = mixed();
    let mut app = app_of(&b);
    app.select(&id("release"));
    let t = draw_term(&app, 100, 30);
    let buf = t.backend().buffer();
    let find = |word: &str| -> Color {
        for y in 3..20 {
            let line: String = (0..100).map(|x| buf[(x, y)].symbol()).collect();
            if let Some(col) = line.find(&format!(" {word} ")) {
                // Byte offset equals column here: the text before is ASCII.
                return buf[(col as u16 + 1, y)].fg;
            }
        }
        panic!("{word} not in the table");
    };
    assert_eq!(find("stuck"), Color::Red);
    assert_eq!(find("done"), Color::Green);
    assert_eq!(find("working"), Color::Cyan);
    assert_eq!(find("agent-review"), Color::Blue);
    assert_eq!(find("cancelled"), Color::DarkGray);
}

#[test]
fn peek_popup() {
    let b = mixed();
    let mut app = app_of(&b);
    app.select(&id("db"));
    app.set_detail(db_detail(&b));
    assert_eq!(app.on_key(ch('p')), None);
    assert_eq!(app.mode(), &Mode::Peek);
    insta::assert_snapshot!(draw(&app, 100, 30));
    app.on_key(key(KeyCode::Esc));
    assert_eq!(app.mode(), &Mode::Normal);
}

#[test]
fn filter() {
    let b = mixed();
    let mut app = app_of(&b);
    for c in "/au".chars() {
        assert_eq!(app.on_key(ch(c)), None);
    }
    assert_eq!(app.mode(), &Mode::Filter);
    let shown = |app: &App| -> Vec<String> {
        app.visible()
            .iter()
            .map(|&r| app.tasks()[app.rows()[r].task].id().to_string())
            .collect()
    };
    assert_eq!(shown(&app), vec!["auth"]);
    app.on_key(key(KeyCode::Backspace));
    assert!(
        shown(&app).len() > 5,
        "\"a\" matches more: {:?}",
        shown(&app)
    );
    app.on_key(ch('P'));
    app.on_key(ch('i'));
    // Case-insensitive, ids and titles: the phase "Backend API" and the task api.
    assert_eq!(shown(&app), vec!["backend", "api"]);
    insta::assert_snapshot!(draw(&app, 100, 30));
    app.on_key(key(KeyCode::Enter));
    assert_eq!(app.mode(), &Mode::Normal);
    assert_eq!(app.filter(), "aPi");
    app.on_key(ch('j'));
    assert_eq!(app.selected_id(), Some(&id("api")));
    app.on_key(key(KeyCode::Esc));
    assert_eq!(app.filter(), "");
    assert_eq!(app.selected_id(), Some(&id("api")), "the selection stays");
}

#[test]
fn filter_with_no_match() {
    let b = mixed();
    let mut app = app_of(&b);
    app.set_filter("zzz".into());
    assert_eq!(app.selected_task(), None);
    assert_eq!(app.on_key(key(KeyCode::Enter)), None);
    assert_eq!(app.on_key(ch('r')), None);
    assert_eq!(app.on_key(ch('c')), None);
    assert_eq!(app.on_key(ch('p')), None);
    assert_eq!(app.mode(), &Mode::Normal);
    insta::assert_snapshot!(draw(&app, 80, 24));
}

/// Tree order: each phase followed by its children in `(order, id)` order, indented.
#[test]
fn rows_follow_the_tree() {
    let b = mixed();
    let app = app_of(&b);
    let rows: Vec<String> = app
        .rows()
        .iter()
        .map(|r| {
            format!(
                "{}{} {}{}",
                "  ".repeat(r.depth),
                app.tasks()[r.task].id(),
                r.gate.map_or("-", |g| g.as_str()),
                r.blocked_by
                    .as_ref()
                    .map_or(String::new(), |(d, s)| format!(
                        " by {d} {}",
                        s.map_or("-", |s| s.as_str())
                    ))
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            "backend -",
            "  api APPROVED",
            "  db EXECUTING",
            "  auth BLOCKED by db working",
            "docs SKIPPED",
            "frontend -",
            "  ui REVIEWING",
            "  lint FAILED",
            "release -",
        ]
    );
    let p = app.progress();
    assert_eq!(
        (p.complete, p.total),
        (1, 6),
        "docs is cancelled: not counted"
    );
    assert_eq!(app.dead(), 1);
}

/// The detail pane of a blocked task says what it waits for.
#[test]
fn a_blocked_task_says_what_it_waits_for() {
    let b = mixed();
    let mut app = app_of(&b);
    let down = key(KeyCode::Down);
    for _ in 0..3 {
        app.on_key(down);
    }
    assert_eq!(app.selected_id().map(|i| i.as_str()), Some("auth"));
    let screen = draw(&app, 100, 30);
    assert!(screen.contains("gate BLOCKED by db (working)"), "{screen}");
}

/// Keys, one case a line: the keys pressed from a fresh mixed app, then the selected
/// id, the mode's name and the last command.
#[test]
fn keys() {
    fn check(keys: &[KeyEvent], selected: &str, mode: &str, command: Option<Command>) {
        let b = mixed();
        let mut app = app_of(&b);
        let mut last = None;
        for k in keys {
            last = app.on_key(*k);
        }
        let m = match app.mode() {
            Mode::Normal => "normal",
            Mode::Filter => "filter",
            Mode::Confirm(_) => "confirm",
            Mode::Reason { .. } => "reason",
            Mode::Peek => "peek",
            Mode::Detail => "detail",
        };
        assert_eq!(
            (app.selected_id().map_or("-", |i| i.as_str()), m, last),
            (selected, mode, command),
            "keys {keys:?}"
        );
    }
    // Each check starts from the same tasks: a command carries the task as shown.
    let shown = app_of(&mixed());
    let seen = |name: &str| {
        Seen::of(
            shown
                .tasks()
                .iter()
                .find(|t| t.id().as_str() == name)
                .unwrap(),
        )
    };
    let down = key(KeyCode::Down);
    let up = key(KeyCode::Up);
    check(&[], "backend", "normal", None);
    check(&[down], "api", "normal", None);
    check(&[ch('j'), ch('j')], "db", "normal", None);
    check(&[ch('j'), ch('k')], "backend", "normal", None);
    check(&[up, up], "backend", "normal", None);
    check(&[key(KeyCode::End)], "release", "normal", None);
    check(&[ch('G'), down], "release", "normal", None);
    check(
        &[key(KeyCode::PageDown), ch('g')],
        "backend",
        "normal",
        None,
    );
    // Enter opens the detail; Enter or Esc closes it; keys act from it.
    check(
        &[ch('j'), ch('j'), key(KeyCode::Enter)],
        "db",
        "detail",
        None,
    );
    check(
        &[ch('j'), ch('j'), key(KeyCode::Enter), key(KeyCode::Esc)],
        "db",
        "normal",
        None,
    );
    check(
        &[ch('j'), key(KeyCode::Enter), ch('j')],
        "db",
        "detail",
        None,
    );
    check(
        &[ch('j'), ch('j'), key(KeyCode::Enter), ch('s')],
        "db",
        "confirm",
        None,
    );
    // Respawn and retry ask first.
    check(&[ch('j'), ch('j'), ch('s')], "db", "confirm", None);
    check(
        &[ch('j'), ch('j'), ch('s'), ch('y')],
        "db",
        "normal",
        Some(Command::Respawn(seen("db"))),
    );
    check(&[ch('j'), ch('j'), ch('s'), ch('n')], "db", "normal", None);
    check(&[ch('G'), ch('k'), ch('r')], "lint", "confirm", None);
    check(
        &[ch('G'), ch('k'), ch('r'), ch('y')],
        "lint",
        "normal",
        Some(Command::Retry(seen("lint"))),
    );
    // Approve and reject only offer themselves for a task in review.
    check(&[ch('j'), ch('a')], "api", "normal", None);
    check(&[ch('j'), ch('x')], "api", "normal", None);
    check(&[ch('j'), ch('c')], "api", "confirm", None);
    check(
        &[ch('j'), ch('c'), ch('y')],
        "api",
        "normal",
        Some(Command::Cancel(seen("api"))),
    );
    check(&[ch('j'), ch('c'), ch('n')], "api", "normal", None);
    check(&[ch('j'), ch('c'), ch('q')], "api", "normal", None);
    check(&[ch('p')], "backend", "peek", None);
    check(&[ch('p'), ch('j')], "api", "peek", None);
    check(&[ch('p'), ch('q')], "backend", "normal", None);
    check(&[ch('/'), ch('q')], "-", "filter", None);
    check(
        &[ch('/'), ch('q'), key(KeyCode::Backspace)],
        "backend",
        "filter",
        None,
    );
    check(&[ch('/'), ch('p'), ch('a'), ch('g')], "ui", "filter", None);
    check(
        &[ch('/'), ch('p'), ch('a'), ch('g'), key(KeyCode::Esc)],
        "ui",
        "normal",
        None,
    );
    check(
        &[ch('/'), ch('p'), ch('a'), ch('g'), key(KeyCode::Enter)],
        "ui",
        "normal",
        None,
    );
    check(&[ch('q')], "backend", "normal", Some(Command::Quit));
    check(
        &[
            ch('/'),
            KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL),
        ],
        "backend",
        "filter",
        Some(Command::Quit),
    );
}

#[test]
fn cancel_confirmation_is_shown_and_declining_says_so() {
    let b = mixed();
    let mut app = app_of(&b);
    app.select(&id("ui"));
    app.on_key(ch('c'));
    let screen = draw(&app, 100, 30);
    assert!(
        screen.contains("Cancel ui? It becomes cancelled for good. y/n"),
        "{screen}"
    );
    app.on_key(ch('n'));
    let screen = draw(&app, 100, 30);
    assert!(screen.contains("ui: not cancelled"), "{screen}");
}

/// A reload keeps the selection on the same task, wherever it moved.
#[test]
fn reload_keeps_the_selection() {
    let mut b = mixed();
    let mut app = app_of(&b);
    app.select(&id("ui"));
    b.create("aaa", "A new first root", None, 10_600);
    app.set_tasks(b.sorted());
    assert_eq!(app.selected_id(), Some(&id("ui")));
    assert_eq!(app.rows().len(), 10);
}

/// Every size from tiny to large draws without panicking, the selection in view.
#[test]
fn any_size_draws() {
    let b = mixed();
    let mut app = app_of(&b);
    app.select(&id("release"));
    app.set_detail(Detail {
        id: Some(id("release")),
        sections: vec![SectionInfo {
            name: "Context".into(),
            has_content: true,
            verdict: None,
        }],
        ..Detail::default()
    });
    for w in [1u16, 10, 20, 40, 80, 200] {
        for h in [1u16, 3, 5, 8, 12, 24, 60] {
            let s = draw(&app, w, h);
            if w >= 40 && h >= 8 {
                assert!(s.contains("release"), "{w}x{h}:\n{s}");
            }
        }
    }
}

/// Scrolling through many tasks keeps the selection on screen and builds only the
/// visible rows.
#[test]
fn scrolling_keeps_the_selection_visible() {
    let mut b = Builder::new();
    for i in 0..300 {
        b.create(&format!("t{i:03}"), &format!("Task {i}"), None, i);
    }
    let mut app = app_of(&b);
    for step in 0..300 {
        let s = draw(&app, 80, 24);
        let want = format!("t{step:03}");
        assert!(s.contains(&want), "step {step}: {want} not shown");
        app.on_key(ch('j'));
    }
    // Going back up scrolls back one row at a time.
    app.on_key(ch('k'));
    let s = draw(&app, 80, 24);
    assert!(s.contains("t298") && s.contains("t299"), "{s}");
}

/// A task in review: `a` asks, then approves; `x` takes a reason, refuses an empty one,
/// and sends it; Esc keeps the task in review. The review's verdict and findings are
/// beside the keys.
#[test]
fn approve_and_reject_keys() {
    let mut b = Builder::new();
    b.create("api", "REST endpoints", None, 0)
        .to("api", Status::Working, "", 10)
        .to("api", Status::AgentReview, HANDOFF, 20)
        .to("api", Status::Reviewing, PASS, 30);
    let mut app = app_of(&b);
    let api = Seen::of(app.selected_task().unwrap());
    assert_eq!(api.id, id("api"));
    let (sections, _) = load::sections_of(PASS);
    app.set_detail(Detail {
        id: Some(id("api")),
        sections,
        texts: load::texts_of(PASS),
        ..Detail::default()
    });
    let screen = draw(&app, 100, 30);
    assert!(screen.contains("review PASS"), "{screen}");
    assert!(screen.contains("a approves · x rejects"), "{screen}");
    assert_eq!(app.on_key(ch('a')), None);
    let screen = draw(&app, 100, 30);
    assert!(
        screen.contains("Approve api? It becomes done and its branch is merged into the base. y/n"),
        "{screen}"
    );
    assert_eq!(app.on_key(ch('y')), Some(Command::Approve(api.clone())));
    assert_eq!(app.on_key(ch('a')), None);
    assert_eq!(app.on_key(ch('n')), None);
    assert!(draw(&app, 100, 30).contains("api: not approved"));
    // Reject: a reason is typed; Enter with none is refused and keeps the prompt.
    assert_eq!(app.on_key(ch('x')), None);
    assert!(matches!(app.mode(), Mode::Reason { .. }));
    assert_eq!(app.on_key(key(KeyCode::Enter)), None);
    let screen = draw(&app, 120, 30);
    assert!(screen.contains("Reject api: what must change?"), "{screen}");
    assert!(screen.contains("a rejection needs a reason"), "{screen}");
    for c in "Add tests".chars() {
        app.on_key(ch(c));
    }
    app.on_key(key(KeyCode::Backspace));
    assert!(draw(&app, 120, 30).contains("Add test▏"));
    assert_eq!(
        app.on_key(key(KeyCode::Enter)),
        Some(Command::Reject(api.clone(), "Add test".into()))
    );
    assert_eq!(*app.mode(), Mode::Normal);
    app.on_key(ch('x'));
    app.on_key(ch('z'));
    assert_eq!(app.on_key(key(KeyCode::Esc)), None);
    assert_eq!(*app.mode(), Mode::Normal);
    assert!(draw(&app, 100, 30).contains("api: not rejected"));
}

/// Enter shows the review in full; the header says whether a supervisor is alive.
#[test]
fn detail_view_and_supervisor_header() {
    let mut b = Builder::new();
    b.create("api", "REST endpoints", None, 0)
        .to("api", Status::Working, "", 10)
        .to("api", Status::AgentReview, HANDOFF, 20)
        .to("api", Status::Reviewing, PASS, 30);
    let mut app = app_of(&b);
    let doc = "## Handoff\nImplemented the endpoints.\n## Review\nVerdict: PASS\n\nThe 404 path is covered by tests.\n";
    let (sections, _) = load::sections_of(doc);
    app.set_detail(Detail {
        id: Some(id("api")),
        sections,
        texts: load::texts_of(doc),
        ..Detail::default()
    });
    let screen = draw(&app, 100, 30);
    assert!(!screen.contains("supervisor"), "not looked yet:\n{screen}");
    app.set_supervisors(Vec::new());
    let screen = draw(&app, 100, 30);
    assert!(screen.contains("○ no supervisor: `warden run`"), "{screen}");
    // Narrow: shorter, never dropped (at 80 columns with a long count line it was).
    let screen = draw(&app, 40, 20);
    assert!(screen.contains("○ no supervisor"), "{screen}");
    let screen = draw(&app, 20, 20);
    assert!(screen.contains("○ no supervisor"), "{screen}");
    // A supervisor of this machine holding api, with these failing tasks.
    let alive = |failing| {
        vec![warden_app::status::SupervisorView {
            owner: "box:4242:1".into(),
            host: "box".into(),
            pid: 4242,
            alive: Some(true),
            started_at: None,
            tasks: vec![id("api")],
            failing,
        }]
    };
    app.set_supervisors(alive(Vec::new()));
    assert!(draw(&app, 100, 30).contains("● supervisor pid 4242"));
    assert!(!draw(&app, 100, 30).contains("steps failing"));
    app.set_supervisors(alive(vec![warden_app::supervisor::StepFailure {
        task: id("api"),
        tries: 3,
        error: "api: cannot prepare the worktree".into(),
    }]));
    let screen = draw(&app, 120, 30);
    assert!(
        screen.contains("● supervisor pid 4242 · ✗ steps failing: api (`warden status`)"),
        "{screen}"
    );
    app.on_key(key(KeyCode::Enter));
    let screen = draw(&app, 100, 30);
    for text in [
        "api — REST endpoints · Enter or Esc closes",
        "## Handoff",
        "Implemented the endpoints.",
        "## Review",
        "The 404 path is covered by tests.",
    ] {
        assert!(screen.contains(text), "{text:?} missing:\n{screen}");
    }
    app.on_key(key(KeyCode::Esc));
    assert!(!draw(&app, 100, 30).contains("Enter or Esc closes"));
}

/// A group shows the status derived from its children, in the table and the counts.
#[test]
fn groups_show_derived_statuses() {
    let b = mixed();
    let app = app_of(&b);
    let row = |i: &str| {
        app.rows()
            .iter()
            .find(|r| app.tasks()[r.task].id().as_str() == i)
            .unwrap()
            .status
    };
    // backend: api done, db working (dead), auth pending → working.
    assert_eq!(row("backend"), Status::Working);
    assert_eq!(
        app.tasks()
            .iter()
            .find(|t| t.id().as_str() == "backend")
            .unwrap()
            .status(),
        Status::Pending
    );
}

/// A reload that takes in only what changed (a task moved on, one removed, one new)
/// shows exactly what a reload of every task shows, and keeps the selection.
#[test]
fn an_update_of_what_changed_equals_a_full_reload() {
    let mut b = mixed();
    let mut drawn = app_of(&b);
    let before = draw(&drawn, 100, 30);
    let mut moved = app_of(&b);
    moved.on_key(ch('j'));
    moved.on_key(ch('j'));
    let selected = moved.selected_id().cloned().unwrap();
    b.to("lint", Status::Working, "", 9100);
    b.create("zeta", "A task made later", Some("backend"), 9200);
    b.tasks.retain(|t| t.id().as_str() != "docs");
    let changed = || -> Vec<Task> {
        b.sorted()
            .into_iter()
            .filter(|t| ["lint", "zeta"].contains(&t.id().as_str()))
            .collect()
    };
    drawn.update_tasks(changed(), &[id("docs")]);
    moved.update_tasks(changed(), &[id("docs")]);
    let full = app_of(&b);
    assert_eq!(drawn.tasks(), full.tasks());
    assert_eq!(draw(&drawn, 100, 30), draw(&full, 100, 30));
    assert_ne!(draw(&full, 100, 30), before, "the change shows");
    assert_eq!(moved.selected_id(), Some(&selected));
}

/// A task waiting for a person's answer says so in full: the STATUS column cut
/// "clarification" to "clarificatio" at every width.
#[test]
fn the_status_column_holds_every_status() {
    let mut b = Builder::new();
    b.create("ask", "Pick a colour", None, 0)
        .to("ask", Status::Clarification, "", 10);
    let app = app_of(&b);
    for w in [80, 120] {
        let screen = draw(&app, w, 20);
        assert!(
            screen
                .lines()
                .any(|l| l.contains("ask") && l.contains("clarification ")),
            "{screen}"
        );
    }
}

/// Narrow screens: a confirmation starts with the keys that answer it, a reason typed
/// past the width keeps its end and the cursor in view, and a long message (a refused
/// merge's paths and commands) is shown whole over a few lines.
#[test]
fn narrow_screens_keep_what_answers_and_what_was_typed() {
    let mut b = Builder::new();
    b.create("api", "REST endpoints", None, 0)
        .to("api", Status::Working, "", 10)
        .to("api", Status::AgentReview, HANDOFF, 20)
        .to("api", Status::Reviewing, PASS, 30);
    let mut app = app_of(&b);
    app.on_key(ch('a'));
    let screen = draw(&app, 40, 20);
    assert!(screen.contains(" y/n: Approve api?"), "{screen}");
    app.on_key(ch('n'));
    app.on_key(ch('x'));
    for c in "please also add a French greeting line and a Spanish one, and test both".chars() {
        app.on_key(ch(c));
    }
    let screen = draw(&app, 60, 20);
    assert!(
        screen.contains("…") && screen.contains("and test both▏"),
        "{screen}"
    );
    app.on_key(key(KeyCode::Esc));
    let long = "refused: merge-ri failed: merging warden/a2 into main conflicts in: same.txt; resolve it in the task's worktree (cd /tmp/x/.warden/worktrees/a2 && git merge main, fix, git commit) and run this again, or send the work back with `warden task reject a2 --reason \"...\"`";
    app.set_message(crate::app::Message {
        error: true,
        text: long.into(),
    });
    let screen = draw(&app, 100, 24);
    let joined: String = screen.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    assert!(
        joined.contains("git merge main, fix, git commit")
            && joined.contains("warden task reject a2"),
        "{screen}"
    );
}
