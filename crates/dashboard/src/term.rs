//! The terminal side: raw mode and the alternate screen (restored on exit, on error and
//! on panic), the event loop that keeps input responsive, the cheap change detection
//! that reloads only when another process committed, and the actions keys ask for.

use std::io::{self, IsTerminal, Stdout};
use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyEventKind};
use ratatui::crossterm::{cursor, execute, terminal};
use warden_core::event::Actor;
use warden_core::model::{Status, TaskId};
use warden_core::ops::{self, Outcome, TransitionInput};
use warden_core::retry::RetryRequest;
use warden_store::{Decision, Engine, EngineError, Workspace, Written};

use crate::DashboardError;
use crate::app::{App, Command, Message};
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
    let engine = Engine::open(ws, Actor::Person)?;
    let mut app = App::new(project);
    app.set_tasks(engine.tasks()?);
    let mut version = engine.store.data_version().map_err(EngineError::from)?;
    let _screen = Screen::enter()?;
    let mut term = Terminal::new(CrosstermBackend::new(io::stdout()))?;
    term.clear()?;
    event_loop(&engine, &mut app, &mut term, &mut version)
}

fn event_loop(
    engine: &Engine,
    app: &mut App,
    term: &mut Terminal<CrosstermBackend<Stdout>>,
    version: &mut u64,
) -> Result<(), DashboardError> {
    let mut last_poll = Instant::now();
    let mut last_detail = Instant::now();
    let mut last_draw = Instant::now();
    let mut dirty = true;
    loop {
        if app.wants_detail().is_some() || last_detail.elapsed() >= DETAIL_REFRESH {
            dirty |= load_detail(engine, app);
            last_detail = Instant::now();
        }
        // Draw after a change, and once a second for the ages.
        if dirty || last_draw.elapsed() >= REDRAW {
            term.draw(|f| render(f, app, engine.now()))?;
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
                            reload(engine, app);
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
            match engine.store.data_version() {
                Ok(v) if v != *version => {
                    *version = v;
                    reload(engine, app);
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

fn reload(engine: &Engine, app: &mut App) {
    match engine.tasks() {
        Ok(tasks) => app.set_tasks(tasks),
        Err(e) => app.set_message(error_message(&e)),
    }
}

/// Loads the selected task's detail; says whether it differs from the one shown.
fn load_detail(engine: &Engine, app: &mut App) -> bool {
    let Some(t) = app.selected_task() else {
        return false;
    };
    let d = load::detail(engine, t);
    if app.detail() == Some(&d) {
        return false;
    }
    app.set_detail(d);
    true
}

/// The status-line text of a refused or failed action, as the CLI prints it.
pub fn error_message(e: &EngineError) -> Message {
    let m = e.message();
    let text = if m.starts_with("refused:") || m.starts_with("error:") {
        m
    } else {
        format!("error: {m}")
    };
    Message { error: true, text }
}

/// Carries out a command through the engine's write path and reports the result in the
/// status line, with the CLI's messages.
pub fn execute_command(engine: &Engine, app: &mut App, cmd: Command) {
    let result = match &cmd {
        Command::Quit => return,
        Command::Respawn(id) => respawn(engine, id),
        Command::Retry(id) => retry(engine, id),
        Command::Cancel(id) => cancel(engine, id),
    };
    app.set_message(match result {
        Ok(text) => Message { error: false, text },
        Err(e) => error_message(&e),
    });
}

/// `task respawn ID`.
pub fn respawn(engine: &Engine, id: &TaskId) -> Result<String, EngineError> {
    let shown = engine.task_file_shown(id);
    engine.write_task(id, None, |t, _doc| {
        Ok(Decision::retryable(ops::request_respawn(
            t,
            &engine.ctx(&shown),
        )?))
    })?;
    Ok(format!(
        "{id}: respawn requested; the running supervisor (or the next `warden run`) starts a new session"
    ))
}

/// `task retry ID` with no changes.
pub fn retry(engine: &Engine, id: &TaskId) -> Result<String, EngineError> {
    let shown = engine.task_file_shown(id);
    let req = RetryRequest::default();
    let written = engine.write_task(id, None, |t, _doc| {
        Ok(Decision::retryable(ops::retry(
            t,
            &req,
            &engine.ctx(&shown),
        )?))
    })?;
    Ok(moved(id, &written))
}

/// `task cancel ID`. Cancelling needs no guard; should a workflow ever gate it with
/// one, the dashboard refuses and points at the CLI, which runs checks. This is the one
/// place to swap for the runner's shared transition preparation.
pub fn cancel(engine: &Engine, id: &TaskId) -> Result<String, EngineError> {
    let shown = engine.task_file_shown(id);
    let written = engine.write_task(id, None, |t, doc| {
        let ctx = engine.ctx(&shown);
        let (needs, _) = ops::check_transition(t, Status::Cancelled, &doc.artifacts, &ctx)?;
        if needs.guard || needs.commit || needs.merge_ri {
            return Err(EngineError::Other {
                code: 1,
                message: format!(
                    "refused: cancelling {id} needs checks run; use `warden task cancel {id}`"
                ),
            });
        }
        let input = TransitionInput {
            artifacts: doc.artifacts.clone(),
            ..Default::default()
        };
        Ok(Decision::retryable(ops::transition(
            t,
            Status::Cancelled,
            &input,
            &ctx,
        )?))
    })?;
    Ok(moved(id, &written))
}

/// `ID: from → to`, as `warden task update` prints it.
fn moved(id: &TaskId, written: &Written) -> String {
    match written {
        Written::Done(change, _) => match (&change.before, &change.after) {
            (Some(b), Some(a)) => {
                let mut line = if b.status() != a.status() {
                    format!("{id}: {} → {}", b.status(), a.status())
                } else {
                    format!("{id}: {}", a.status())
                };
                if let Outcome::Retry(plan) = &change.outcome {
                    let names: Vec<&str> = plan.rerun.iter().map(|p| p.as_str()).collect();
                    line.push_str(&format!(
                        " · runs again: {}",
                        if names.is_empty() {
                            "none".into()
                        } else {
                            names.join(", ")
                        }
                    ));
                }
                line
            }
            _ => format!("{id}: done"),
        },
        Written::Replayed(_) => "already applied; nothing changed".into(),
    }
}
