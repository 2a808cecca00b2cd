//! `warden run`: the supervisor in the foreground. A line per outcome a person may act on
//! (with the command that acts on it), a live block of what runs on a terminal, plain
//! lines otherwise, and with `--json` one JSON line per event. `--until-idle` ends with
//! an exit code a script can act on: 0 all done, 6 waiting for a person, 7 something is
//! stuck, dead or blocked.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::Args;
use warden_app::supervisor::{Active, Idle, Mode, Options, Outcome, RunEvent, Supervisor};
use warden_core::failure::{ExitCode, Failure};

use crate::ctx::Global;
use crate::out;

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  warden run                      # supervise until interrupted (Ctrl-C: sessions keep running)
  warden run --until-idle         # return when nothing is runnable and no session is alive
  warden run --session tmux --max-parallel 8
  warden --json run --until-idle  # one JSON line per event

Exit codes with --until-idle:
  0  every task is done (or cancelled)
  6  some wait for a person: a review to approve (`warden task approve ID`), a question
  7  some are stuck, have a dead session, or are blocked (`warden status` lists them)
  130, 143  interrupted (INT, TERM) before it was idle: nothing above is known")]
pub struct RunArgs {
    /// Tasks worked on at once.
    #[arg(long, default_value_t = 4)]
    max_parallel: usize,
    /// Return when nothing is runnable, nothing is due and no session is alive.
    #[arg(long)]
    until_idle: bool,
    /// process (child process groups) or tmux (a private tmux server); default from config.
    #[arg(long)]
    session: Option<String>,
}

pub fn run(g: &Global, a: RunArgs) -> Result<(), Failure> {
    let ws = g.workspace()?;
    let app = g.open()?;
    let mode = match a
        .session
        .as_deref()
        .unwrap_or(&app.eng.config.agent.session)
    {
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
    let exe = crate::cmd_agent::warden_exe()?;
    // Launch checks: a missing agent program (or tmux) stops the run before any session
    // starts, naming the program and its preset (a bad placeholder never got this far:
    // the configuration is refused when it is read).
    let mut problems = warden_app::agent::launch_problems(&app.eng, &exe)?;
    if mode == Mode::Tmux
        && let Err(e) =
            warden_app::agent::resolve_program("tmux", &warden_app::agent::session_path(&exe))
    {
        problems.push(format!(
            "the session mode is tmux but tmux cannot be run ({e}); install tmux or use --session process"
        ));
    }
    if mode == Mode::Tmux
        && let Some(problem) =
            warden_app::agent::tmux_socket_problem(&app.eng.ws, "use --session process")
    {
        problems.push(problem);
    }
    if let Some(first) = problems.first() {
        let more: String = problems[1..].iter().map(|p| format!("{p}\n")).collect();
        return Err(Failure::usage(first.clone()).with_detail(format!(
            "{more}nothing was started; `warden doctor` lists everything it checks"
        )));
    }
    let opts = Options {
        max_parallel: a.max_parallel,
        until_idle: a.until_idle,
        mode,
        warden_exe: exe,
        lease_ttl: Duration::from_secs(app.eng.config.store.lease_ttl_s),
    };
    let stop = Arc::new(AtomicBool::new(false));
    // Which signal stopped the run, for `--until-idle`'s exit code.
    let stopped_by = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_usize(sig, Arc::clone(&stopped_by), sig as usize)
            .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&stop)))
            .map_err(|e| Failure::internal(format!("cannot install signal handlers: {e}")))?;
    }
    {
        // A panic anywhere in the supervisor leaves a resume file behind.
        let path = ws.continue_md();
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let text = format!(
                "# Resume\n\nStopped {} — panic: {info}\n\nRun `warden run` again: live sessions are adopted.\n",
                jiff::Timestamp::now()
            );
            let _ = warden_store::files::write_atomic(&path, text.as_bytes());
            prev(info);
        }));
    }
    let mut sup = Supervisor::new(ws, opts, Arc::clone(&stop))?;
    let tty = !g.json && std::io::stdout().is_terminal();
    let mut display = Display::default();
    let json = g.json;
    let idle = sup.run(&mut |ev| {
        if json {
            let mut v = serde_json::to_value(&ev).unwrap_or_default();
            v["at"] = serde_json::json!(jiff::Timestamp::now());
            out::line(&serde_json::to_string(&v).unwrap_or_default());
            return;
        }
        display.clear(tty);
        match &ev {
            RunEvent::Active { tasks } => display.active = tasks.clone(),
            other => {
                if let Some(line) = describe(other) {
                    log_line(&line);
                }
            }
        }
        display.draw(tty, &app);
    })?;
    // Ended: its announcement is withdrawn (and what still failed is kept for `warden
    // status`) now, as the exits below skip destructors.
    drop(sup);
    display.clear(tty);
    if !json {
        // The run's work is over: a store that cannot be read now costs the last line,
        // not the run's answer.
        match app.progress() {
            Ok(p) => log_line(&format!(
                "{} {}% ({} of {} leaves pass)",
                p.bar(),
                p.percentage(),
                p.complete,
                p.total
            )),
            Err(e) => log_line(&format!("(progress not shown: {})", e.headline())),
        }
    }
    match idle {
        Some(Idle { code, .. }) if code != ExitCode::Ok => {
            // Not a failure of the run: an answer for a script.
            std::process::exit(i32::from(code.code()));
        }
        // Stopped before it was idle: `--until-idle` has no answer, and a script's
        // `warden run --until-idle && …` must not go on as if all were done.
        None if a.until_idle => {
            let sig = stopped_by.load(std::sync::atomic::Ordering::SeqCst);
            if sig != 0 {
                std::process::exit(128 + sig as i32);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A run event as a log line for a person; `None` for events the live block shows.
fn describe(ev: &RunEvent) -> Option<String> {
    Some(match ev {
        RunEvent::Started {
            root,
            git,
            without_git,
            max_parallel,
            resumed,
        } => {
            let mut s = match (git, without_git) {
                (Some((top, base)), _) => format!(
                    "supervising {} (git: {}, base branch {base}; {max_parallel} task(s) at once)",
                    root.display(),
                    top.display()
                ),
                (None, Some(why)) => format!("supervising {} ({why})", root.display()),
                (None, None) => format!(
                    "supervising {} (no git repository: git phases are skipped)",
                    root.display()
                ),
            };
            if let Some(r) = resumed {
                // A Ctrl-C is a stop the person asked for, not an abnormal one.
                let how = if r.contains("interrupted by a signal") {
                    "an interrupted run"
                } else {
                    "an abnormal stop"
                };
                s.push_str(&format!(
                    "\nresuming after {how} ({}); see .warden/continue.md",
                    r.trim()
                ));
            }
            s
        }
        RunEvent::Step { task, what } => format!("{task}: {what}"),
        RunEvent::Stepped { task, what } => format!("{task}: {what}"),
        RunEvent::StepFailed {
            task,
            failure,
            retry_in_s,
        } => match retry_in_s {
            Some(n) => format!("{task}: {} (trying again in {n} s)", failure.headline()),
            None => format!("{task}: {}", failure.headline()),
        },
        RunEvent::StoreFailed {
            failure,
            retry_in_s,
        } => format!(
            "{} (the store; sessions go on; trying again in {retry_in_s} s)",
            failure.headline()
        ),
        RunEvent::Outcome(o) => outcome_line(o),
        RunEvent::Active { .. } => return None,
        RunEvent::Stopping => {
            "stopping: sessions keep running and are adopted by the next `warden run`".into()
        }
        RunEvent::Idle(i) => {
            let mut s = format!(
                "idle: nothing runnable and no session alive; {} of {} task(s) done",
                i.done, i.total
            );
            if !i.needs_person.is_empty() {
                s.push_str(&format!("; waiting for you: {}", ids(&i.needs_person)));
            }
            if !i.stuck_or_dead.is_empty() {
                s.push_str(&format!(
                    "; stuck or dead: {} (see `warden status`)",
                    ids(&i.stuck_or_dead)
                ));
            }
            if !i.blocked.is_empty() {
                // Each with what holds it back: a cancelled or stuck dependency needs
                // a person, and the line should say which.
                let blocked: Vec<String> = i
                    .blocked
                    .iter()
                    .map(|t| match i.blocked_by.iter().find(|b| &b.task == t) {
                        Some(b) => format!("{t} by {}", out::waited_on(&b.waits_for, b.status)),
                        None => t.to_string(),
                    })
                    .collect();
                s.push_str(&format!("; blocked: {}", blocked.join(", ")));
                // A dependency that can never be done is dropped by a person's edit.
                let mut ways: Vec<String> = Vec::new();
                for b in i.blocked_by.iter().filter(|b| b.never()) {
                    let way = out::drop_dependency(b.named_by(), &b.waits_for);
                    if !ways.contains(&way) && ways.len() < 3 {
                        ways.push(way);
                    }
                }
                if !ways.is_empty() {
                    s.push_str(&format!("; to go on without it: {}", ways.join(", ")));
                }
            }
            for f in &i.failing {
                s.push_str(&format!("; its steps keep failing: {}", f.error));
            }
            s
        }
    })
}

fn ids(v: &[warden_core::model::TaskId]) -> String {
    v.iter().map(|i| i.as_str()).collect::<Vec<_>>().join(", ")
}

/// One outcome with the command that acts on it.
pub fn outcome_line(o: &Outcome) -> String {
    match o {
        Outcome::Done { task, merged: true } => {
            format!("✓ {task} done, merged into the base branch")
        }
        Outcome::Done {
            task,
            merged: false,
        } => format!("✓ {task} done"),
        Outcome::GroupDone { task } => format!("✓ {task}: every task in it is done"),
        Outcome::Cancelled { task } => format!("· {task} cancelled"),
        Outcome::Stuck { task, reason } => format!(
            "✗ {task} is stuck{}: read `warden task show {task}`, then `warden task retry {task}`",
            reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        Outcome::NeedsReview { task } => format!(
            "? {task} waits for your review: `warden task approve {task}` or `warden task reject {task} --reason …`"
        ),
        Outcome::Question { task } => format!(
            "? {task} asks you a question in .warden/tasks/{task}/TASK.md: answer there, then `warden task update {task} --status working`"
        ),
        Outcome::BackToWorker { task, reason } => format!(
            "↺ {task} went back to the worker{}",
            reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ),
        Outcome::Crashed {
            task,
            crash_count,
            threshold,
            waits_for_respawn,
        } => format!(
            "✗ {task}: the session ended without its evidence (crash {crash_count} of {threshold}){}",
            if *waits_for_respawn {
                format!("; `warden task respawn {task}` starts it again")
            } else {
                String::new()
            }
        ),
        Outcome::AttemptFailed {
            task,
            attempt,
            max,
            reason,
        } => format!(
            "✗ {task}: attempt {attempt} of {max} failed{}",
            reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        Outcome::Healing { task, phase } => {
            format!("⚕ {task}: {phase} failed; the agent is started once to fix it")
        }
        Outcome::SessionFailed { task, error } => format!(
            "✗ {task}: {}; fix it, then `warden task respawn {task}`",
            error.as_deref().unwrap_or("the session could not start")
        ),
    }
}

fn log_line(s: &str) {
    let ts = jiff::Zoned::now().strftime("%H:%M:%S").to_string();
    for (i, l) in s.lines().enumerate() {
        if i == 0 {
            out::line(&format!("[{ts}] {l}"));
        } else {
            out::line(&format!("           {l}"));
        }
    }
}

/// The live block on a terminal: one line per task being worked on, and the overall bar.
#[derive(Default)]
struct Display {
    active: Vec<Active>,
    drawn: usize,
}

impl Display {
    fn clear(&mut self, tty: bool) {
        if tty && self.drawn > 0 {
            out::print(&format!("\x1b[{}A\x1b[J", self.drawn));
            self.drawn = 0;
        }
    }

    fn draw(&mut self, tty: bool, app: &warden_app::App) {
        if !tty {
            return;
        }
        let now = jiff::Timestamp::now();
        let mut s = String::new();
        for a in &self.active {
            let age = now.duration_since(a.since).as_secs().max(0);
            s.push_str(&format!(
                "  {:<20} {:<13} {:<34} {:>5}s\n",
                a.id.as_str(),
                a.status.as_str(),
                a.what,
                age
            ));
        }
        if let Ok(p) = app.progress() {
            s.push_str(&format!(
                "  {} {}% ({} of {})\n",
                p.bar(),
                p.percentage(),
                p.complete,
                p.total
            ));
        }
        self.drawn = s.lines().count();
        out::print(&s);
        let _ = std::io::stdout().flush();
    }
}

/// `warden session-run SPEC.json` (hidden): hosts one process session and reports its end.
pub fn session_run(spec: &std::path::Path) -> Result<(), Failure> {
    let code = warden_app::supervisor::session_run(spec).map_err(Failure::internal)?;
    std::process::exit(code.clamp(0, 255));
}
