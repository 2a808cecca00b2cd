//! `warden run`: the supervisor in the foreground, with live progress on a terminal and
//! plain log lines otherwise. An abnormal stop (signal, panic) writes
//! `.warden/continue.md`; the next run reports it and clears it once it has resumed.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use warden_app::supervisor::{Mode, Options, RunEvent, Supervisor};
use warden_core::failure::Failure;
use warden_core::progress::Progress;
use warden_core::tree::TreeIndex;
use warden_store::{Engine, files};

use crate::ctx::Global;
use crate::out;

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  warden run                      # supervise until interrupted\n  warden run --until-idle         # return when nothing is runnable and no session is alive\n  warden run --session tmux --max-parallel 8"
)]
pub struct RunArgs {
    /// Tasks worked on at once.
    #[arg(long, default_value_t = 4)]
    max_parallel: usize,
    /// Return when nothing is runnable and no session is alive.
    #[arg(long)]
    until_idle: bool,
    /// process (child process groups) or tmux (a private tmux server); default from config.
    #[arg(long)]
    session: Option<String>,
}

pub fn run(g: &Global, a: RunArgs) -> Result<(), Failure> {
    let ws = g.workspace()?;
    let engine = Engine::open(ws.clone(), warden_core::event::Actor::Runner)?;
    let mode = match a.session.as_deref().unwrap_or(&engine.config.agent.session) {
        "process" => Mode::Process,
        "tmux" => Mode::Tmux,
        other => {
            return Err(Failure::usage(format!(
                "--session {other:?} is not a session mode; use process or tmux"
            )));
        }
    };
    if a.max_parallel == 0 {
        return Err(Failure::usage("--max-parallel must be at least 1"));
    }
    let exe = std::env::current_exe().map_err(|e| Failure::internal(e.to_string()))?;
    let opts = Options {
        max_parallel: a.max_parallel,
        until_idle: a.until_idle,
        mode,
        warden_exe: exe,
        lease_ttl: Duration::from_secs(engine.config.store.lease_ttl_s),
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| Failure::internal(format!("cannot install signal handlers: {e}")))?;
    }
    let resumed = files::read_text(&ws.dir, &ws.continue_md()).ok();
    if let Some(text) = &resumed {
        let first = text
            .lines()
            .find(|l| l.starts_with("Stopped"))
            .unwrap_or("");
        log_line(&format!(
            "resuming after an abnormal stop ({}); see {}",
            first.trim(),
            ws.display(&ws.continue_md())
        ));
    }
    {
        // A panic anywhere in the supervisor leaves a resume file behind.
        let ws = ws.clone();
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            write_continue(&ws, &format!("panic: {info}"));
            prev(info);
        }));
    }
    let mut sup = Supervisor::new(ws.clone(), opts, Arc::clone(&stop))?;
    let tty = std::io::stdout().is_terminal();
    let mut display = Display::default();
    let mut cleared = resumed.is_none();
    let result = sup.run(&mut |ev| match ev {
        RunEvent::Log(l) => {
            display.clear(tty);
            log_line(&l);
            if !cleared && l.contains(':') {
                let _ = std::fs::remove_file(ws.continue_md());
                cleared = true;
            }
            display.draw(tty, &engine);
        }
        RunEvent::Active(a) => {
            display.active = a;
            display.clear(tty);
            display.draw(tty, &engine);
        }
    });
    display.clear(tty);
    let interrupted = stop.load(Ordering::SeqCst);
    if interrupted {
        write_continue(&ws, "interrupted by a signal");
    } else if let Err(e) = &result {
        write_continue(&ws, &format!("error: {e}"));
    }
    result?;
    let tasks = engine.tasks()?;
    let idx = TreeIndex::new(&tasks);
    let p = Progress::of(
        idx.depth_first()
            .into_iter()
            .filter(|t| idx.is_leaf(t.id())),
    );
    log_line(&format!(
        "{} {}% ({} of {} leaves pass)",
        p.bar(),
        p.percentage(),
        p.complete,
        p.total
    ));
    Ok(())
}

fn log_line(s: &str) {
    let ts = jiff::Zoned::now().strftime("%H:%M:%S").to_string();
    out::line(&format!("[{ts}] {s}"));
}

/// The live block on a terminal: one line per task being worked on, and the overall bar.
#[derive(Default)]
struct Display {
    active: Vec<(String, String, String, Instant)>,
    drawn: usize,
}

impl Display {
    fn clear(&mut self, tty: bool) {
        if tty && self.drawn > 0 {
            out::print(&format!("\x1b[{}A\x1b[J", self.drawn));
            self.drawn = 0;
        }
    }

    fn draw(&mut self, tty: bool, engine: &Engine) {
        if !tty {
            return;
        }
        let mut s = String::new();
        for (id, status, what, since) in &self.active {
            s.push_str(&format!(
                "  {id:<20} {status:<13} {what:<24} {:>5}s\n",
                since.elapsed().as_secs()
            ));
        }
        if let Ok(tasks) = engine.tasks() {
            let idx = TreeIndex::new(&tasks);
            let p = Progress::of(
                idx.depth_first()
                    .into_iter()
                    .filter(|t| idx.is_leaf(t.id())),
            );
            s.push_str(&format!("  {} {}%\n", p.bar(), p.percentage()));
        }
        self.drawn = s.lines().count();
        out::print(&s);
        let _ = std::io::stdout().flush();
    }
}

/// Writes `.warden/continue.md`: what was running, partial results, and next steps.
fn write_continue(ws: &warden_store::Workspace, why: &str) {
    let Ok(engine) = Engine::open(ws.clone(), warden_core::event::Actor::Runner) else {
        return;
    };
    let Ok(tasks) = engine.tasks() else { return };
    let mut s = format!(
        "# Resume\n\nStopped {} — {why}\n\n## In flight\n\n",
        jiff::Timestamp::now()
    );
    let active: Vec<_> = tasks
        .iter()
        .filter(|t| !t.status().is_terminal() && t.status() != warden_core::model::Status::Pending)
        .collect();
    if active.is_empty() {
        s.push_str("- nothing\n");
    }
    for t in &active {
        let phases: Vec<String> = t
            .phases()
            .iter()
            .map(|(p, st)| format!("{p}={st}"))
            .collect();
        s.push_str(&format!(
            "- {} ({}): {}{}\n",
            t.id(),
            t.status(),
            phases.join(" "),
            t.live_session()
                .map(|x| format!("; session {x} may still be running"))
                .unwrap_or_default()
        ));
    }
    s.push_str("\n## Next steps\n\n- Run `warden run` again: live sessions are adopted, dead ones are reported, and no succeeded phase runs again.\n- `warden task list --status stuck` shows what needs a person.\n");
    let _ = files::write_atomic(&ws.continue_md(), s.as_bytes());
}

/// `warden session-run SPEC.json` (hidden): hosts one process session and reports its end.
pub fn session_run(spec: &std::path::Path) -> Result<(), Failure> {
    let code = warden_app::supervisor::session_run(spec).map_err(Failure::internal)?;
    std::process::exit(code.clamp(0, 255));
}
