//! The terminal side: raw mode and the alternate screen (restored on exit, on error and
//! on panic), the event loop that keeps input responsive, the cheap change detection
//! that reloads only when another process committed, and the actions keys ask for.

use std::io::{self, IsTerminal, Stdout};
use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyEventKind};
use ratatui::crossterm::{cursor, execute, terminal};
use warden_app::App as Project;
use warden_app::task::{RetryTask, Transition};
use warden_core::event::Actor;
use warden_core::failure::Failure;
use warden_core::model::{Status, TaskId};
use warden_store::Workspace;

use crate::DashboardError;
use crate::app::{self, App, Command, Message};
use crate::load;
use crate::view::render;

/// How often the store is asked whether anything changed.
const POLL: Duration = Duration::from_millis(200);
/// How often the selected task's detail (output tail, TASK.md) is read again even when
/// the store did not change: those files change without a commit.
const DETAIL_REFRESH: Duration = Duration::from_secs(1);
/// How often the screen is drawn when nothing changed, so ages stay current.
const REDRAW: Duration = Duration::from_secs(1);

/// Leaves the alternate screen and raw mode; safe to call more than once.
fn restore() {
    let _ = terminal::disable_raw_mode();
    let _ = execute!(io::stdout(), terminal::LeaveAlternateScreen, cursor::Show);
}

/// Owns the terminal mode: entering installs a panic hook that restores the terminal
/// before the panic message is printed; dropping restores it.
struct Screen;

impl Screen {
    fn enter() -> io::Result<Screen> {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        terminal::enable_raw_mode()?;
        let screen = Screen;
        execute!(io::stdout(), terminal::EnterAlternateScreen)?;
        Ok(screen)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Runs the dashboard on this terminal until `q`.
pub fn run(ws: Workspace) -> Result<(), DashboardError> {
    if !io::stdin().is_terminal() || !io::stdout().is_terminal() {
        return Err(DashboardError::NoTerminal);
    }
    let project = ws
        .root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "project".into());
    let engine = Project::open(ws, Actor::Person)?;
    let mut app = App::new(project);
    let mut seen = Seen {
        seq: engine.eng.store.last_seq().map_err(Failure::from)?,
        version: engine.eng.store.data_version().map_err(Failure::from)?,
    };
    app.set_tasks(engine.tasks()?);
    let _screen = Screen::enter()?;
    let mut term = Terminal::new(CrosstermBackend::new(io::stdout()))?;
    term.clear()?;
    event_loop(&engine, &mut app, &mut term, &mut seen)
}

/// What the loop has read of the store: the newest event taken in, and the change
/// counter at the last look.
struct Seen {
    seq: u64,
    version: u64,
}

fn event_loop(
    engine: &Project,
    app: &mut App,
    term: &mut Terminal<CrosstermBackend<Stdout>>,
    seen: &mut Seen,
) -> Result<(), DashboardError> {
    let mut last_poll = Instant::now();
    let mut last_detail = Instant::now();
    let mut last_draw = Instant::now();
    let mut dirty = true;
    let mut last_sups: Option<Instant> = None;
    loop {
        // The supervisors: a run starting or stopping commits nothing, so look each second.
        if last_sups.is_none_or(|t| t.elapsed() >= REDRAW) {
            if let Ok(sups) = engine.supervisors()
                && app.supervisors() != Some(sups.as_slice())
            {
                app.set_supervisors(sups);
                dirty = true;
            }
            last_sups = Some(Instant::now());
        }
        if app.wants_detail().is_some() || last_detail.elapsed() >= DETAIL_REFRESH {
            dirty |= load_detail(engine, app);
            last_detail = Instant::now();
        }
        // Draw after a change, and once a second for the ages.
        if dirty || last_draw.elapsed() >= REDRAW {
            term.draw(|f| render(f, app, engine.eng.now()))?;
            last_draw = Instant::now();
            dirty = false;
        }
        let wait = POLL.saturating_sub(last_poll.elapsed());
        if event::poll(wait)? {
            // Drain every pending event before drawing again, so holding a key down
            // never queues up frames.
            loop {
                match event::read()? {
                    Event::Key(k) if k.kind != KeyEventKind::Release => {
                        dirty = true;
                        if let Some(cmd) = app.on_key(k) {
                            if cmd == Command::Quit {
                                return Ok(());
                            }
                            execute_command(engine, app, cmd);
                            // Our own commit does not move our connection's data_version.
                            reload(engine, app, seen);
                            last_detail = Instant::now() - DETAIL_REFRESH;
                        }
                    }
                    Event::Resize(..) => {
                        term.autoresize()?;
                        dirty = true;
                    }
                    _ => {}
                }
                if !event::poll(Duration::ZERO)? {
                    break;
                }
            }
        }
        if last_poll.elapsed() >= POLL {
            last_poll = Instant::now();
            match engine.eng.store.data_version() {
                Ok(v) if v != seen.version => {
                    seen.version = v;
                    reload(engine, app, seen);
                    last_detail = Instant::now() - DETAIL_REFRESH;
                    dirty = true;
                }
                Ok(_) => {}
                Err(e) => {
                    app.set_message(Message {
                        error: true,
                        text: format!("error: {e}"),
                    });
                    dirty = true;
                }
            }
        }
    }
}

/// Takes in the tasks with events since the last look (and only those).
fn reload(engine: &Project, app: &mut App, seen: &mut Seen) {
    let store = &engine.eng.store;
    let read = store.changed_since(seen.seq).and_then(|(ids, seq)| {
        let tasks = store.get_many(&ids)?;
        Ok((ids, tasks, seq))
    });
    match read {
        Ok((ids, _, seq)) if ids.is_empty() => seen.seq = seq,
        Ok((ids, tasks, seq)) => {
            let gone: Vec<TaskId> = ids
                .into_iter()
                .filter(|id| tasks.binary_search_by(|t| t.id().cmp(id)).is_err())
                .collect();
            app.update_tasks(tasks, &gone);
            seen.seq = seq;
        }
        Err(e) => app.set_message(error_message(&Failure::from(e))),
    }
}

/// Loads the selected task's detail; says whether it differs from the one shown.
fn load_detail(engine: &Project, app: &mut App) -> bool {
    let Some(t) = app.selected_task() else {
        return false;
    };
    let d = load::detail(&engine.eng, t);
    if app.detail() == Some(&d) {
        return false;
    }
    app.set_detail(d);
    true
}

/// The status-line text of a refused or failed action, as the CLI prints it.
pub fn error_message(e: &Failure) -> Message {
    Message {
        error: true,
        text: e.headline(),
    }
}

/// Carries out a command through the application layer and reports the result in the
/// status line, with the CLI's messages.
pub fn execute_command(engine: &Project, app: &mut App, cmd: Command) {
    let result = match &cmd {
        Command::Quit => return,
        Command::Respawn(id) => respawn(engine, id),
        Command::Retry(id) => retry(engine, id),
        Command::Cancel(id) => cancel(engine, id),
        Command::Approve(seen) => engine
            .approve_seen(&seen.id, Some(seen.version))
            .and_then(|a| a.into_result())
            .map(|a| one_line(&a.summary())),
        Command::Reject(seen, reason) => engine
            .reject_seen(&seen.id, reason, Some(seen.version))
            .and_then(|a| a.into_result())
            .map(|a| one_line(&a.summary())),
    };
    app.set_message(match result {
        Ok(text) => Message { error: false, text },
        Err(e) => error_message(&e),
    });
}

/// `task respawn ID`, of the task as the screen showed it.
pub fn respawn(engine: &Project, seen: &app::Seen) -> Result<String, Failure> {
    let id = &seen.id;
    engine.respawn_seen(id, Some(seen.version))?;
    Ok(format!(
        "{id}: respawn requested; the running supervisor (or the next `warden run`) starts a new session"
    ))
}

/// `task retry ID` with no changes.
pub fn retry(engine: &Project, seen: &app::Seen) -> Result<String, Failure> {
    let answer = engine.retry_seen(&seen.id, &RetryTask::default(), Some(seen.version))?;
    Ok(one_line(&answer.summary()))
}

/// `task cancel ID`.
pub fn cancel(engine: &Project, seen: &app::Seen) -> Result<String, Failure> {
    let answer = engine.transition_seen(
        &Transition::to(seen.id.clone(), Status::Cancelled),
        Some(seen.version),
    )?;
    Ok(one_line(&answer.into_result()?.summary()))
}

/// The summary's lines joined for the one-line status bar.
fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" · ")
}
