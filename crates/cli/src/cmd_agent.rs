//! `warden doctor` (what `warden run` would find wrong before starting anything), the
//! hidden `warden hook EVENT` that agent harnesses call, and `warden hooks install` for
//! sessions a person starts by hand.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use warden_app::hooks::{self, Harness, HookEvent};
use warden_core::failure::Failure;

use crate::ctx::Global;
use crate::out;

#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  warden doctor
  warden doctor --session tmux
  warden --json doctor

Exit codes: 0 nothing stops `warden run` (warnings may remain) · 2 a problem it refuses to start with")]
pub struct DoctorArgs {
    /// Check for this session mode (process or tmux) instead of agent.session.
    #[arg(long)]
    session: Option<String>,
}

/// `warden doctor`.
pub fn doctor(g: &Global, a: DoctorArgs) -> Result<(), Failure> {
    let app = g.open()?;
    let mode = a
        .session
        .unwrap_or_else(|| app.eng.config.agent.session.clone());
    let exe = warden_exe()?;
    let checks = warden_app::agent::doctor(&app, &exe, &mode)?;
    let problems: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == "problem")
        .map(|c| c.detail.as_str())
        .collect();
    if g.json {
        out::json(&serde_json::json!({"ok": problems.is_empty(), "checks": checks}));
    } else {
        for c in &checks {
            out::line(&format!("{:<8} {:<9} {}", c.status, c.check, c.detail));
        }
    }
    match problems.first() {
        None => Ok(()),
        Some(first) => Err(Failure::usage(format!(
            "{} problem(s) stop `warden run`; the first: {first}",
            problems.len()
        ))),
    }
}

/// The hook events a harness calls `warden hook` with.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum EventArg {
    /// SessionStart: records the harness's conversation id.
    SessionStart,
    /// Stop: sends an agent without its artifact back to write it.
    Stop,
    /// SessionEnd: reports the end of a session started by hand.
    SessionEnd,
}

#[derive(Args, Debug)]
pub struct HookArgs {
    /// The harness's event.
    event: EventArg,
}

/// `warden hook EVENT` (hidden): reads the harness's JSON on stdin and answers on
/// stdout. It never fails the harness: a problem is said on stderr and the agent goes on.
pub fn hook(g: &Global, a: HookArgs) -> Result<(), Failure> {
    let event = match a.event {
        EventArg::SessionStart => HookEvent::SessionStart,
        EventArg::Stop => HookEvent::Stop,
        EventArg::SessionEnd => HookEvent::SessionEnd,
    };
    let input = hooks::read_input(std::io::stdin().lock());
    let cwd = input
        .get("cwd")
        .and_then(|c| c.as_str())
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_default();
    let Some(ctx) = hooks::context(g.dir.as_deref(), &cwd) else {
        return Ok(());
    };
    match hooks::answer(&ctx, event, &input) {
        Ok(Some(text)) => out::line(&text),
        Ok(None) => {}
        Err(f) => warden_store::say!("warden hook: {} (the agent goes on)", f.headline()),
    }
    Ok(())
}

#[derive(Subcommand, Debug)]
pub enum HooksCmd {
    /// Install Warden's Stop and SessionEnd hooks for agent sessions you start yourself
    /// in a task's worktree (sessions `warden run` starts get them without this).
    #[command(after_help = "\
Examples:
  warden hooks install claude                                # .claude/settings.local.json here
  warden hooks install claude --path .warden/worktrees/api   # in a task's worktree
  warden hooks install codex                                 # $CODEX_HOME/hooks.json (~/.codex)")]
    Install(InstallArgs),
}

#[derive(Args, Debug)]
pub struct InstallArgs {
    /// claude or codex.
    harness: HarnessArg,
    /// Claude Code: the directory whose .claude/settings.local.json gets the hooks
    /// (default: the current directory).
    #[arg(long, value_name = "DIR")]
    path: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum HarnessArg {
    /// Claude Code.
    Claude,
    /// Codex.
    Codex,
}

/// `warden hooks install`.
pub fn hooks_cmd(g: &Global, c: HooksCmd) -> Result<(), Failure> {
    let HooksCmd::Install(a) = c;
    if matches!(a.harness, HarnessArg::Codex) && a.path.is_some() {
        return Err(Failure::usage(
            "--path is Claude Code's (its project settings); Codex's hooks live in $CODEX_HOME (default ~/.codex): set CODEX_HOME instead",
        ));
    }
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::internal(format!("cannot read the current directory: {e}")))?;
    let dir = a.path.map(|p| cwd.join(p)).unwrap_or(cwd);
    let codex_home = match std::env::var_os("CODEX_HOME").filter(|v| !v.is_empty()) {
        Some(h) => PathBuf::from(h),
        None => PathBuf::from(std::env::var_os("HOME").ok_or_else(|| {
            Failure::usage("HOME is not set; set CODEX_HOME to Codex's directory")
        })?)
        .join(".codex"),
    };
    let harness = match a.harness {
        HarnessArg::Claude => Harness::Claude,
        HarnessArg::Codex => Harness::Codex,
    };
    let done = hooks::install(harness, &dir, &codex_home, &warden_exe()?)?;
    if g.json {
        out::json(&done);
    } else if done.added.is_empty() {
        out::line(&format!(
            "{}: Warden's hooks were already there; {}",
            done.file.display(),
            done.note
        ));
    } else {
        out::line(&format!(
            "{}: added the {} hook(s); {}",
            done.file.display(),
            done.added.join(" and "),
            done.note
        ));
    }
    Ok(())
}

/// The running `warden` binary (what hooks and sessions run).
pub fn warden_exe() -> Result<PathBuf, Failure> {
    std::env::current_exe()
        .map_err(|e| Failure::internal(format!("cannot find the warden binary: {e}")))
}
