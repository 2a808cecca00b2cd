//! The `warden` binary: command-line parsing, dispatch, and the mapping of every error
//! kind onto the documented exit codes (DESIGN.md section 4).
// Stderr is written through `warden_store::say!`, which a closed stderr cannot panic.
#![cfg_attr(not(test), deny(clippy::print_stderr))]

mod cmd_agent;
mod cmd_memory;
mod cmd_plan;
mod cmd_run;
mod cmd_serve;
mod cmd_sim;
mod cmd_state;
mod cmd_status;
mod cmd_task;
mod ctx;
mod demo;
mod out;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use warden_app::scope::{AgentSession, Request};
use warden_core::failure::Failure;

use crate::ctx::Global;

const AFTER_HELP: &str = "\
Exit codes: 0 ok · 1 refused (illegal transition, failed gate or guard, invalid input)
            2 usage or configuration · 3 not found · 4 conflict (safe to retry) · 5 storage/internal
            `run --until-idle` also: 6 waiting for you (a review, a question) · 7 stuck or dead

Examples:
  warden init
  warden status                       # what needs you, what runs
  warden task create login --title \"Login page\" --agent \"Build the login page\"
  warden task update login --status working
  warden task complete login          # needs a non-empty \"## Handoff\" in TASK.md
  warden --json task show login";

/// Warden: a deterministic state engine for autonomous coding agents.
///
/// Agents write artifacts (sections of TASK.md) and signal intent; Warden checks the
/// evidence, decides the state, records every change, and never trusts a claim.
#[derive(Parser, Debug)]
#[command(name = "warden", version, after_help = AFTER_HELP, propagate_version = true)]
struct Cli {
    /// The project root that holds .warden/ (default: $WARDEN_DIR when set and not
    /// empty, else found by walking up from here).
    #[arg(long, global = true, value_name = "PATH")]
    dir: Option<PathBuf>,
    /// Print machine-readable JSON on stdout.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create .warden/ with the default configuration (refuses to overwrite).
    #[command(after_help = "Example:\n  warden init\n  warden init --dir ~/src/app")]
    Init(InitArgs),
    /// Create, inspect and move tasks.
    #[command(subcommand)]
    Task(cmd_task::TaskCmd),
    /// The task tree: import, export, reconcile an edited tree, pick the next leaf.
    #[command(subcommand)]
    Plan(cmd_plan::PlanCmd),
    /// Per-task structured memory (goals, decisions, history, next focus).
    #[command(subcommand)]
    Memory(cmd_memory::MemoryCmd),
    /// What needs you, what runs, whether a supervisor is alive, and the progress.
    #[command(
        after_help = "The screen to open first: reviews to approve, questions to answer, stuck tasks and\ndead sessions (each with the command that acts on it), the sessions running, and the\nsupervisors (`warden run`) alive.\n\nExamples:\n  warden status\n  warden --json status"
    )]
    Status,
    /// Print the prompt for a task's current status and role.
    #[command(after_help = "Example:\n  warden prompt login")]
    Prompt(cmd_state::PromptArgs),
    /// Print the event history, oldest first.
    #[command(
        after_help = "Examples:\n  warden history\n  warden history login --tail 20\n  warden history --since 2h        # or 30m, 1d, 2026-11-24, 2026-11-24T09:00:00Z\n  warden --json history login   # JSON lines"
    )]
    History(cmd_state::HistoryArgs),
    /// Print STATE.md (project progress), write it, or verify it.
    #[command(
        after_help = "Examples:\n  warden state\n  warden state --write     # and keep it updated after every change\n  warden state verify"
    )]
    State(cmd_state::StateArgs),
    /// Run the supervisor: schedule ready tasks, run their phases and agent sessions.
    Run(cmd_run::RunArgs),
    /// Replay the event log and compare it with the stored tasks; exit 1 on any difference.
    #[command(
        after_help = "Run it after a crash, a restore or a hand edit of the store.\n\nExample:\n  warden check"
    )]
    Check,
    /// The terminal dashboard: every task, live; approve, reject, respawn, retry and cancel from it.
    #[command(
        after_help = "Example:\n  warden dashboard     # in the project; q quits\n\nKeys: ↑↓/jk move · Enter details · a approve · x reject · s respawn · r retry · c cancel · p peek · / filter · q quit\n(every key that changes a task asks first: approve, reject, respawn, retry, cancel)"
    )]
    Dashboard,
    /// The web console: every task, live, in a browser; approve, reject, retry, respawn
    /// and cancel from it.
    #[command(
        after_help = "Examples:\n  warden serve                       # http://127.0.0.1:7777/, this machine only\n  warden serve --addr 0.0.0.0:7777   # the team's network: prints a URL with the token"
    )]
    Serve(cmd_serve::ServeArgs),
    /// Run a sample plan end to end in a temporary workspace.
    #[command(after_help = "Example:\n  cargo run --release -- demo     # or: warden demo")]
    Demo(demo::DemoArgs),
    /// Serve Warden over MCP on stdio: tools, resources (STATE.md, TASK.md) and prompts.
    #[command(
        after_help = "Examples:\n  claude mcp add warden -- warden mcp\n  warden mcp --role agent --task api   # only task api, only its role's transitions"
    )]
    Mcp(McpArgs),
    /// Check what `warden run` needs before it starts anything: the agent programs, the
    /// session mode, the environment sessions get.
    Doctor(cmd_agent::DoctorArgs),
    /// Agent harness hooks for sessions you start yourself.
    #[command(subcommand)]
    Hooks(cmd_agent::HooksCmd),
    /// Answers an agent harness's hook (Claude Code, Codex): JSON on stdin.
    #[command(hide = true)]
    Hook(cmd_agent::HookArgs),
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  warden completions bash > ~/.local/share/bash-completion/completions/warden\n  warden completions zsh > ~/.zfunc/_warden      # with fpath+=(~/.zfunc) in ~/.zshrc\n  warden completions fish > ~/.config/fish/completions/warden.fish"
    )]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// A simulated agent for tests and the demo (runs inside a Warden session).
    #[command(hide = true)]
    AgentSim(cmd_sim::SimArgs),
    /// Hosts one process session and reports its end (started by `warden run`).
    #[command(hide = true)]
    SessionRun {
        /// The session description written by the supervisor.
        spec: PathBuf,
    },
}

#[derive(Args, Debug)]
struct InitArgs {
    /// Store URL to write into warden.toml (default: the embedded SQLite store).
    #[arg(long, value_name = "URL")]
    store: Option<String>,
}

#[derive(Args, Debug)]
struct McpArgs {
    /// orchestrator (every tool) or agent (its own task only). Default: agent inside an
    /// agent session ($WARDEN_ROLE set), else orchestrator.
    #[arg(long, value_name = "ROLE")]
    role: Option<warden_mcp::Role>,
    /// The agent's task (default: $WARDEN_TASK_ID).
    #[arg(long, value_name = "ID")]
    task: Option<String>,
}

fn main() -> ExitCode {
    // A file-size limit (`ulimit -f`) kills a writer with SIGXFSZ, silently and possibly
    // mid-write. With a handler installed the write fails with EFBIG instead: the
    // transaction rolls back and the error is reported like any other storage failure.
    let _ = signal_hook::flag::register(
        signal_hook::consts::SIGXFSZ,
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(usage_error(e)),
    };
    let json = cli.json;
    let code = match run(cli) {
        Ok(()) => 0,
        Err(e) => out::failure(&e, json),
    };
    ExitCode::from(code)
}

/// A command line clap refused. Help and version are printed as clap prints them;
/// with `--json` anywhere before `--` the refusal is the one-line JSON error every
/// other failure is (exit 2), and a negative number, which clap takes for an option and
/// advises to pass after `--` (where Warden cannot take it), is named as what it is.
fn usage_error(e: clap::Error) -> u8 {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let json = std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json");
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand
    ) && json
    {
        // `warden --json task`: the help a person would read is no answer for a script
        // (nor clap's list of every subcommand, the hidden ones included).
        let text = e.render().to_string();
        let command = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Usage: "))
            .and_then(|u| u.split(" [").next())
            .and_then(|u| u.split(" <").next())
            .unwrap_or("warden")
            .to_owned();
        return out::failure(
            &Failure::usage(format!(
                "{command} needs a subcommand; see `{command} --help`"
            )),
            true,
        );
    }
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    // A value that starts with `-` after an option is taken for an option: a negative
    // number after a count, or a text (`--title -5`), which `--title=-5` gives.
    let args: Vec<String> = std::env::args().collect();
    let dashed = match (e.kind(), e.get(ContextKind::InvalidArg)) {
        (ErrorKind::UnknownArgument, Some(ContextValue::String(a))) => args
            .iter()
            .position(|x| x == a)
            .and_then(|i| i.checked_sub(1))
            .map(|i| args[i].clone())
            .filter(|prev| prev.starts_with("--"))
            .map(|prev| (prev, a.clone())),
        _ => None,
    };
    if !json && dashed.is_none() {
        e.exit();
    }
    const COUNTS: &[&str] = &["--max-attempts", "--tail", "--lines", "--max-parallel"];
    let message = match dashed {
        Some((opt, n)) if COUNTS.contains(&opt.as_str()) && n[1..].parse::<f64>().is_ok() => {
            // `--max-parallel 0` is refused too: a run needs at least one slot.
            let least = if opt == "--max-parallel" { 1 } else { 0 };
            format!("{opt} {n}: the numbers Warden takes there are {least} or more")
        }
        Some((opt, v)) => {
            format!("{v} after {opt} reads as an option; to give it as the value, write {opt}={v}")
        }
        None => {
            // clap's text, on one line: the error, then any tip, then where to look.
            let text = e.render().to_string();
            let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
            let first = lines
                .next()
                .unwrap_or("the command line is not valid")
                .trim_start_matches("error: ")
                .to_owned();
            let rest: Vec<&str> = lines
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more"))
                .map(|l| l.trim_start_matches("tip: "))
                .collect();
            let mut m = first;
            if !rest.is_empty() {
                m = format!("{m} {}", rest.join(" "));
            }
            format!("{m}; see `--help`")
        }
    };
    out::failure(&Failure::usage(message), json)
}

/// The command's name and what it asks of an agent session's scope (see
/// `warden_app::scope`).
fn agent_request(c: &Command) -> (&'static str, Request) {
    match c {
        Command::Task(t) => t.agent_request(),
        Command::Plan(p) => p.agent_request(),
        Command::Memory(m) => m.agent_request(),
        Command::State(a) if a.writes() => ("warden state --write", Request::Person),
        Command::Init(_) => ("warden init", Request::Person),
        Command::Run(_) => ("warden run", Request::Person),
        Command::Dashboard => ("warden dashboard", Request::Person),
        Command::Serve(_) => ("warden serve", Request::Person),
        Command::Hooks(_) => ("warden hooks install", Request::Person),
        // Every tool on every task is a person's (an orchestrator's) server: inside an
        // agent session it would let the agent approve its own work.
        Command::Mcp(McpArgs {
            role: Some(warden_mcp::Role::Orchestrator),
            ..
        }) => ("warden mcp --role orchestrator", Request::Person),
        // Another task's agent server is another task's (a session that names no task
        // of its own may name the one it serves).
        Command::Mcp(McpArgs { task: Some(t), .. })
            if std::env::var("WARDEN_TASK_ID").is_ok_and(|own| !own.is_empty() && own != *t) =>
        {
            (
                "warden mcp --task",
                Request::Change {
                    id: Some(t.clone()),
                },
            )
        }
        // Reads, and what scopes itself: the MCP server serves an agent session its
        // agent role, a harness hook reports the session's own end.
        Command::State(_)
        | Command::Status
        | Command::Prompt(_)
        | Command::History(_)
        | Command::Check
        | Command::Demo(_)
        | Command::Mcp(_)
        | Command::Doctor(_)
        | Command::Hook(_)
        | Command::Completions { .. }
        | Command::AgentSim(_)
        | Command::SessionRun { .. } => ("", Request::Free),
    }
}

/// For a command that may run a task's checks (`task complete`, `task update`, `mcp`):
/// a TERM, INT or HUP ends the checks this process runs, then the process (exit 128 +
/// the signal). A check runs in a process group of its own, which the signal never
/// reaches: killed while its postchecks ran, the process left them running to the end.
/// What the check would have decided is not recorded; the task stays where it was.
fn end_checks_on_signal() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let stopped =
                warden_runner::check::stop_running_checks(std::time::Duration::from_secs(2));
            if !stopped.is_empty() {
                // Said, not left to a silent exit code: the person sees why the
                // command ended and that the check is to be run again.
                let name = match sig {
                    SIGHUP => "SIGHUP",
                    SIGINT => "SIGINT",
                    _ => "SIGTERM",
                };
                warden_store::say!(
                    "warden: ended by {name}: the check it ran was stopped and nothing of it was recorded; run the command again to check"
                );
            }
            std::process::exit(128 + sig);
        }
    });
}

fn run(cli: Cli) -> Result<(), Failure> {
    let g = Global {
        // An empty WARDEN_DIR (`WARDEN_DIR= warden …`) is unset, as a shell user means it
        // (read by clap, it was an empty `--dir`, and the error blamed the flag).
        dir: cli.dir.or_else(|| {
            std::env::var_os("WARDEN_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        }),
        json: cli.json,
    };
    if let Some(session) = AgentSession::from_env() {
        let (what, request) = agent_request(&cli.command);
        session.check(what, &request, || g.open())?;
    }
    match cli.command {
        Command::Init(a) => init(&g, a.store.as_deref()),
        Command::Task(c) => {
            end_checks_on_signal();
            cmd_task::run(&g, c)
        }
        Command::Plan(c) => cmd_plan::run(&g, c),
        Command::Memory(c) => cmd_memory::run(&g, c),
        Command::Prompt(a) => cmd_state::prompt(&g, a),
        Command::Status => cmd_status::status(&g),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "warden", &mut script);
            let script = String::from_utf8_lossy(&script);
            if g.json {
                // One JSON document on stdout, as `--json` promises everywhere.
                out::json(&serde_json::json!({
                    "shell": shell.to_string(),
                    "script": script,
                }));
            } else {
                out::print(&script);
            }
            Ok(())
        }
        Command::History(a) => cmd_state::history(&g, a),
        Command::State(a) => cmd_state::state(&g, a),
        Command::Run(a) => cmd_run::run(&g, a),
        Command::Check => cmd_state::check(&g),
        Command::Dashboard => Ok(warden_dashboard::run(g.workspace()?)?),
        Command::Serve(a) => cmd_serve::run(&g, a),
        Command::Demo(a) => demo::run(&g, a),
        Command::Mcp(a) => {
            end_checks_on_signal();
            let (role, task) = warden_mcp::resolve(a.role, a.task.as_deref())?;
            warden_mcp::run(g.workspace()?, role, task)
        }
        Command::Doctor(a) => cmd_agent::doctor(&g, a),
        Command::Hooks(c) => cmd_agent::hooks_cmd(&g, c),
        Command::Hook(a) => cmd_agent::hook(&g, a),
        Command::AgentSim(a) => cmd_sim::run(a),
        Command::SessionRun { spec } => cmd_run::session_run(&spec),
    }
}

/// `warden init`.
fn init(g: &Global, store: Option<&str>) -> Result<(), Failure> {
    let root = match &g.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()
            .map_err(|e| Failure::internal(format!("cannot read the current directory: {e}")))?,
    };
    let done = warden_app::init(&root, store)?;
    if g.json {
        out::json(&done);
    } else {
        out::line(&format!(
            "Initialised a Warden workspace in {}\nNext: warden task create ID --title \"…\"  (or warden plan import plan.json)",
            done.dir
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Cli;

    /// Every command a person can type teaches by example in its `--help` (ten had
    /// none): the whole command tree is walked, hidden commands and `help` left out.
    #[test]
    fn every_command_help_has_an_example() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let subs: Vec<&clap::Command> = cmd
                .get_subcommands()
                .filter(|c| !c.is_hide_set() && c.get_name() != "help")
                .collect();
            if subs.is_empty() {
                let text = cmd
                    .get_after_help()
                    .map(|t| t.to_string())
                    .unwrap_or_default()
                    + &cmd
                        .get_after_long_help()
                        .map(|t| t.to_string())
                        .unwrap_or_default();
                if !text.contains("Example") {
                    missing.push(path.to_owned());
                }
            }
            for s in subs {
                walk(s, &format!("{path} {}", s.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(
            &<Cli as clap::CommandFactory>::command(),
            "warden",
            &mut missing,
        );
        assert!(missing.is_empty(), "no example in the help of: {missing:?}");
    }
}
