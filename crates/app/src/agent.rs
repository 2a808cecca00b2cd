//! Agent presets: how each harness — Claude Code, Codex, aider, or a custom argv — is
//! started for one session: its headless command line, how it is given its prompt (always
//! by file or standard input for the presets, so no prompt is too long for `exec`), how
//! it runs unattended, the conversation it resumes, the hooks that report to Warden and
//! enforce its gate, its connection to `warden mcp`, and what it sees of the environment.
//! Also the launch checks `warden run` and `warden doctor` make before anything starts.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use serde_json::json;
use warden_core::failure::Failure;
use warden_core::model::{AgentPreset, Role, Status, Task, TaskId};
use warden_core::prompt::shell_word;
use warden_core::tree::TreeIndex;
use warden_store::config::{AgentConfig, expand_placeholders};
use warden_store::{Engine, Workspace, files};

/// The tools Claude Code may use without asking (it runs unattended, often as root,
/// where `--dangerously-skip-permissions` is refused), Warden's MCP tools included.
pub const CLAUDE_TOOLS: &str = "Bash Edit Write MultiEdit NotebookEdit mcp__warden";

/// Above this many bytes a `{prompt}` argument is replaced by a pointer to the prompt
/// file and the prompt goes to standard input: one argument may not exceed 128 KiB on
/// Linux, and all of them with the environment share about 2 MiB (E2BIG).
pub const MAX_PROMPT_ARG: usize = 64 * 1024;

/// How to start one agent session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The preset.
    pub preset: AgentPreset,
    /// The program (resolved to an absolute path when it names one) and its arguments.
    pub argv: Vec<String>,
    /// A file the program reads as standard input (the prompt), if any.
    pub stdin: Option<PathBuf>,
    /// The variables it sees of Warden's environment (names, or prefixes ending in `*`).
    pub pass_env: Vec<String>,
    /// The harness conversation it resumes, if any.
    pub resumes: Option<String>,
    /// Something to note in the session's log (a prompt that cannot be an argument).
    pub note: Option<String>,
}

/// What one session is for.
#[derive(Clone, Copy, Debug)]
pub struct SessionInput<'a> {
    /// The task.
    pub task: &'a Task,
    /// Worker or reviewer.
    pub role: Role,
    /// The prompt's text.
    pub prompt: &'a str,
    /// The file holding it.
    pub prompt_file: &'a Path,
    /// The session's working directory (the worktree).
    pub cwd: &'a Path,
    /// The `warden` binary hooks and the MCP server run.
    pub warden_exe: &'a Path,
}

/// The preset a task's sessions use: its own, else the configured default.
pub fn preset_of(config: &AgentConfig, t: &Task) -> AgentPreset {
    t.spec.preset.unwrap_or_else(|| config.default_preset())
}

/// What a preset adds to the instructions, for a harness that cannot run commands.
pub fn instructions_note(preset: AgentPreset, role: Role, task_file: &str) -> Option<String> {
    (preset == AgentPreset::Aider).then(|| match role {
        Role::Worker => format!(
            "In this session you cannot run commands: you change files only. Make the changes, \
             then add the \"## Handoff\" section to the end of {task_file} (an edit of that \
             file). Warden moves the task to review when this session ends."
        ),
        Role::Reviewer => format!(
            "In this session you cannot run commands: you change files only. Add the \
             \"## Review\" section, its first line PASS or FAIL, to the end of {task_file} \
             (an edit of that file). Warden reads your verdict when this session ends."
        ),
    })
}

/// The directory of a task's agent files (hook settings, the MCP configuration, aider's
/// histories, the stop hook's counters): `.warden/tasks/<id>/agent/`.
pub fn agent_dir(ws: &Workspace, id: &TaskId) -> PathBuf {
    ws.task_dir(id).join("agent")
}

/// A shell command line that runs `warden hook EVENT`.
pub fn hook_command(warden_exe: &Path, event: &str) -> String {
    format!("{} hook {event}", shell_word(&warden_exe.to_string_lossy()))
}

/// The hooks object Claude Code's settings and Codex's `hooks` share: SessionStart (the
/// conversation id), Stop (the gate) and SessionEnd (the end and its reason).
pub fn hooks_json(warden_exe: &Path, events: &[(&str, &str)]) -> serde_json::Value {
    let mut hooks = serde_json::Map::new();
    for (name, event) in events {
        hooks.insert(
            (*name).to_owned(),
            json!([{"hooks": [{"type": "command", "command": hook_command(warden_exe, event)}]}]),
        );
    }
    serde_json::Value::Object(hooks)
}

const SESSION_HOOKS: &[(&str, &str)] = &[
    ("SessionStart", "session-start"),
    ("Stop", "stop"),
    ("SessionEnd", "session-end"),
];

/// Builds the command line of one session and writes the files it needs.
pub fn launch(eng: &Engine, s: &SessionInput<'_>) -> Result<Launch, Failure> {
    let cfg = &eng.config.agent;
    let t = s.task;
    let id = t.id();
    let preset = preset_of(cfg, t);
    let dir = agent_dir(&eng.ws, id);
    files::create_dir(&eng.ws.dir, &dir)
        .map_err(|e| Failure::from(warden_store::EngineError::from(e)))?;
    let file = |name: &str| dir.join(name);
    let resumes = match preset {
        AgentPreset::Claude | AgentPreset::Codex => t.last_conversation(s.role).map(str::to_owned),
        _ => None,
    };
    // `{prompt}` as an argument, unless it cannot be one: too long, or holding a NUL
    // character (an agent can write one into TASK.md), which would end the argument
    // there, so the session could not start at all. Why not is said twice: in the
    // argument, which then names the prompt file, and in the session's log.
    let unfit = if s.prompt.len() > MAX_PROMPT_ARG {
        Some((
            "too long for a command-line argument",
            "is too long for an argument",
        ))
    } else if s.prompt.contains('\0') {
        Some((
            "it holds a NUL character, which a command-line argument cannot carry",
            "holds a NUL character, which an argument cannot carry",
        ))
    } else {
        None
    };
    let prompt_arg = match unfit {
        Some((why, _)) => format!(
            "Your instructions for this session are in {} ({} bytes, {why}): read that file first and follow it.",
            s.prompt_file.display(),
            s.prompt.len()
        ),
        None => s.prompt.to_owned(),
    };
    let value = |name: &str| -> String {
        match name {
            "prompt" => prompt_arg.clone(),
            "prompt_file" => s.prompt_file.display().to_string(),
            "task_id" => id.to_string(),
            "worktree" => s.cwd.display().to_string(),
            _ => s.role.to_string(),
        }
    };
    let expand = |list: &[String]| -> Result<Vec<String>, Failure> {
        list.iter()
            .map(|a| expand_placeholders(a, &value).map_err(Failure::usage))
            .collect()
    };
    let extra = expand(cfg.args(preset, s.role))?;
    let program = program_path(eng, preset)?;
    let exe = s.warden_exe.display().to_string();
    let mcp_args = vec![
        "mcp".to_owned(),
        "--role".to_owned(),
        "agent".to_owned(),
        "--task".to_owned(),
        id.to_string(),
    ];
    let mut stdin = Some(s.prompt_file.to_path_buf());
    let mut note = None;
    let mut argv = vec![program];
    match preset {
        AgentPreset::Claude => {
            let settings = file("claude-settings.json");
            write_json(
                &settings,
                &json!({"hooks": hooks_json(s.warden_exe, SESSION_HOOKS)}),
            )?;
            let mcp = file("claude-mcp.json");
            let mut env = serde_json::Map::new();
            env.insert(
                "WARDEN_DIR".into(),
                json!(eng.ws.root.display().to_string()),
            );
            write_json(
                &mcp,
                &json!({"mcpServers": {"warden": {"command": exe, "args": mcp_args, "env": env}}}),
            )?;
            argv.push("-p".into());
            match &resumes {
                Some(c) => argv.extend(["--resume".into(), c.clone()]),
                None => argv.extend(["--session-id".into(), uuid_v4()]),
            }
            // `--allowedTools` and `--mcp-config` take several values: each list is one
            // argument and a flag follows it, and the prompt comes on standard input, so
            // nothing is swallowed as one of their values.
            argv.extend([
                "--allowedTools".into(),
                CLAUDE_TOOLS.into(),
                "--settings".into(),
                settings.display().to_string(),
                "--mcp-config".into(),
                mcp.display().to_string(),
            ]);
            argv.extend(extra);
        }
        AgentPreset::Codex => {
            argv.extend(
                [
                    "exec",
                    "--skip-git-repo-check",
                    "--dangerously-bypass-approvals-and-sandbox",
                    "--disable",
                    "plugins",
                    "-c",
                    "analytics.enabled=false",
                    "--json",
                    "--dangerously-bypass-hook-trust",
                ]
                .map(String::from),
            );
            for (name, event) in SESSION_HOOKS {
                let hooks = format!(
                    "[{{hooks=[{{type=\"command\",command={}}}]}}]",
                    toml_string(&hook_command(s.warden_exe, event))
                );
                argv.extend(["-c".into(), format!("hooks.{name}={hooks}")]);
            }
            let args: Vec<String> = mcp_args.iter().map(|a| toml_string(a)).collect();
            argv.extend([
                "-c".into(),
                format!("mcp_servers.warden.command={}", toml_string(&exe)),
                "-c".into(),
                format!("mcp_servers.warden.args=[{}]", args.join(",")),
                "-c".into(),
                format!(
                    "mcp_servers.warden.env={{WARDEN_DIR={}}}",
                    toml_string(&eng.ws.root.display().to_string())
                ),
            ]);
            argv.extend(extra);
            if let Some(c) = &resumes {
                argv.extend(["resume".into(), c.clone()]);
            }
            // `-`: the prompt is standard input (Codex reads it to its end).
            argv.push("-".into());
        }
        AgentPreset::Aider => {
            // Without git, aider keeps its root in the worktree and edits TASK.md through
            // the worktree's link to it; Warden commits the work itself. Its histories go
            // beside TASK.md, never into the work.
            argv.extend(
                [
                    "--no-git",
                    "--yes-always",
                    "--no-check-update",
                    "--analytics-disable",
                    "--no-show-release-notes",
                ]
                .map(String::from),
            );
            argv.extend([
                "--chat-history-file".into(),
                file("aider-chat.md").display().to_string(),
                "--input-history-file".into(),
                file("aider-input.history").display().to_string(),
            ]);
            argv.extend(extra);
            argv.extend(["--message-file".into(), s.prompt_file.display().to_string()]);
            stdin = None;
        }
        AgentPreset::Custom => {
            argv = expand(cfg.custom_command())?;
            argv[0] = absolute_program(eng, &argv[0]);
            argv.extend(extra);
            if let Some((_, why)) = unfit
                && cfg.custom_command().iter().any(|a| a.contains("{prompt}"))
            {
                note = Some(format!(
                    "the prompt ({} bytes) {why}: {{prompt}} names {} instead, and the prompt is the session's standard input",
                    s.prompt.len(),
                    s.prompt_file.display()
                ));
            } else {
                // Before presets a custom agent's input was /dev/null: keep it so.
                stdin = None;
            }
        }
    }
    Ok(Launch {
        preset,
        argv,
        stdin,
        pass_env: cfg.env_patterns(preset),
        resumes,
        note,
    })
}

/// A string as a TOML basic string (JSON's escapes are TOML's).
fn toml_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

fn write_json(path: &Path, v: &serde_json::Value) -> Result<(), Failure> {
    let text = serde_json::to_vec_pretty(v).map_err(|e| Failure::internal(e.to_string()))?;
    files::write_atomic(path, &text).map_err(|e| Failure::from(warden_store::EngineError::from(e)))
}

/// A random (version 4) UUID: the session id Claude Code is started with.
pub fn uuid_v4() -> String {
    let mut b = [0u8; 16];
    // Without randomness the clock and pid still make a session id unique enough here.
    if getrandom::fill(&mut b).is_err() {
        let t = jiff::Timestamp::now().as_nanosecond() as u128 ^ u128::from(std::process::id());
        b = t.to_le_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A program named with a `/` but relative is taken from the project root (a session
/// runs in its worktree, so it must not depend on the directory).
fn absolute_program(eng: &Engine, program: &str) -> String {
    if program.contains('/') && !program.starts_with('/') {
        eng.ws.root.join(program).display().to_string()
    } else {
        program.to_owned()
    }
}

/// The program of a preset, as its sessions run it.
pub fn program_path(eng: &Engine, preset: AgentPreset) -> Result<String, Failure> {
    let p =
        eng.config.agent.program(preset).ok_or_else(|| {
            Failure::usage("agent.command is empty; set it in .warden/warden.toml")
        })?;
    Ok(absolute_program(eng, p))
}

/// The `PATH` a session gets: the `warden` binary's directory first, then Warden's own.
pub fn session_path(warden_exe: &Path) -> OsString {
    let mut p = OsString::new();
    if let Some(dir) = warden_exe.parent().filter(|d| !d.as_os_str().is_empty()) {
        p.push(dir);
        p.push(":");
    }
    p.push(std::env::var_os("PATH").unwrap_or_default());
    p
}

/// Finds a program as `exec` would: a path is checked as it is, a name is looked up in
/// `path`. It must be a regular file with an execute bit. The error is the operating
/// system's way of saying why.
pub fn resolve_program(program: &str, path: &OsStr) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let usable = |p: &Path| -> Result<(), std::io::Error> {
        let m = std::fs::metadata(p)?;
        if m.is_dir() {
            return Err(std::io::Error::from_raw_os_error(21));
        }
        if m.permissions().mode() & 0o111 == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        }
        Ok(())
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return usable(&p).map(|()| p).map_err(|e| e.to_string());
    }
    let mut last = None;
    for dir in std::env::split_paths(path) {
        let p = dir.join(program);
        match usable(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => e.to_string(),
        None => format!(
            "{} (not on PATH={})",
            std::io::Error::from(std::io::ErrorKind::NotFound),
            path.to_string_lossy()
        ),
    })
}

/// The presets the open tasks use: those whose work is an agent and that are not done
/// or cancelled (leaves only: a group runs nothing), with the tasks using each.
pub fn presets_in_use(eng: &Engine, tasks: &[Task]) -> Vec<(AgentPreset, Vec<TaskId>)> {
    let idx = TreeIndex::new(tasks);
    let mut out: Vec<(AgentPreset, Vec<TaskId>)> = Vec::new();
    for t in tasks {
        if !idx.is_leaf(t.id())
            || !t.spec.work_is_agent()
            || matches!(t.status(), Status::Done | Status::Cancelled)
        {
            continue;
        }
        let p = preset_of(&eng.config.agent, t);
        match out.iter_mut().find(|(q, _)| *q == p) {
            Some((_, ids)) => ids.push(t.id().clone()),
            None => out.push((p, vec![t.id().clone()])),
        }
    }
    out.sort_by_key(|(p, _)| p.as_str());
    out
}

/// One problem found before starting sessions: what is wrong and what to do, one line.
pub fn program_problem(
    eng: &Engine,
    preset: AgentPreset,
    warden_exe: &Path,
) -> Result<PathBuf, String> {
    let program = program_path(eng, preset).map_err(|f| f.message)?;
    resolve_program(&program, &session_path(warden_exe)).map_err(|e| {
        let fix = match preset {
            AgentPreset::Custom => {
                "fix agent.command in .warden/warden.toml (or install the program)".to_owned()
            }
            p => format!(
                "install it, or set [agent.{p}] program = \"/path/to/{}\" in .warden/warden.toml",
                eng.config.agent.program(p).unwrap_or("program")
            ),
        };
        format!("the agent program {program:?} of preset {preset} cannot be run ({e}); {fix}")
    })
}

/// The launch checks of `warden run`: every preset the open tasks use resolves to a
/// program that can run, and the repository's branch has a commit to start worktrees
/// from. Returns the problems, one line each.
pub fn launch_problems(eng: &Engine, warden_exe: &Path) -> Result<Vec<String>, Failure> {
    let tasks = eng.tasks().map_err(Failure::from)?;
    let mut problems = Vec::new();
    for (preset, ids) in presets_in_use(eng, &tasks) {
        if let Err(e) = program_problem(eng, preset, warden_exe) {
            let names: Vec<&str> = ids.iter().take(3).map(TaskId::as_str).collect();
            let more = if ids.len() > 3 { ", …" } else { "" };
            problems.push(format!("{e} (tasks {}{more})", names.join(", ")));
        }
    }
    if let Err(problem) = git_check(&eng.ws.root) {
        problems.push(problem);
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_look_like_uuids() {
        let u = uuid_v4();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"), "{u}");
        assert_ne!(u, uuid_v4());
    }

    #[test]
    fn programs_resolve_as_exec_finds_them() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("agent");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "x").unwrap();
        let path = std::env::join_paths(["/nonexistent", dir.path().to_str().unwrap()]).unwrap();
        assert_eq!(resolve_program("agent", &path).unwrap(), exe);
        assert_eq!(resolve_program(exe.to_str().unwrap(), &path).unwrap(), exe);
        let e = resolve_program("nope", &path).unwrap_err();
        assert!(
            e.contains("not on PATH") && e.contains("/nonexistent"),
            "{e}"
        );
        let e = resolve_program("plain", &path).unwrap_err();
        assert!(e.contains("ermission denied"), "{e}");
        let e = resolve_program(dir.path().to_str().unwrap(), &path).unwrap_err();
        assert!(e.contains("directory"), "{e}");
    }

    #[test]
    fn toml_strings_are_quoted() {
        assert_eq!(toml_string("a \"b\" \\ c"), r#""a \"b\" \\ c""#);
    }
}

/// One line of `warden doctor`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    /// What was checked: `workspace`, `store`, `session`, `agent`, `env`, `git`.
    pub check: &'static str,
    /// `ok`, `warning` (works, but probably not as meant) or `problem` (`warden run`
    /// refuses to start).
    pub status: &'static str,
    /// What was found, or what is wrong and what to do.
    pub detail: String,
}

/// API key variables of the harnesses: set in Warden's environment but not passed,
/// sessions do not see them (`warden doctor` says so).
pub const KNOWN_KEY_VARS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
];

/// The longest path a Unix socket may have here (`sun_path` holds 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Why tmux mode cannot run in this workspace although tmux can: the private server's
/// socket (`.warden/tmux.sock`) would have a path longer than a Unix socket may. tmux
/// then says only "File name too long", and every session start failed, charging the
/// task's attempts until it was stuck. `or` names the other way out (the flag or the
/// setting).
pub fn tmux_socket_problem(ws: &warden_store::Workspace, or: &str) -> Option<String> {
    let socket = crate::supervisor::tmux_socket(ws);
    let socket = std::path::absolute(&socket).unwrap_or(socket);
    let len = socket.as_os_str().len();
    (len > MAX_SOCKET_PATH).then(|| {
        format!(
            "tmux's socket would be {} ({len} bytes), longer than the {MAX_SOCKET_PATH} bytes a Unix socket path may have; move the project to a shorter path, or {or}",
            socket.display()
        )
    })
}

/// `warden doctor`: what `warden run` would find before it starts anything, and more.
pub fn doctor(
    app: &crate::App,
    warden_exe: &Path,
    session_mode: &str,
) -> Result<Vec<Check>, Failure> {
    let eng = &app.eng;
    let cfg = &eng.config.agent;
    let mut out = Vec::new();
    let mut push = |check, status, detail: String| {
        out.push(Check {
            check,
            status,
            detail,
        })
    };
    push("workspace", "ok", eng.ws.root.display().to_string());
    push("store", "ok", format!("{} backend", eng.store.backend()));
    match session_mode {
        "tmux" => match resolve_program("tmux", &session_path(warden_exe)) {
            Ok(_)
                if let Some(problem) =
                    tmux_socket_problem(&eng.ws, "use session = \"process\"") =>
            {
                push("session", "problem", problem)
            }
            Ok(p) => push("session", "ok", format!("tmux ({})", p.display())),
            Err(e) => push(
                "session",
                "problem",
                format!(
                    "agent.session is \"tmux\" but tmux cannot be run ({e}); install tmux or use session = \"process\""
                ),
            ),
        },
        other => push("session", "ok", other.to_owned()),
    }
    let tasks = eng.tasks().map_err(Failure::from)?;
    let mut presets = presets_in_use(eng, &tasks);
    let default = cfg.default_preset();
    if !presets.iter().any(|(p, _)| *p == default) {
        presets.insert(0, (default, Vec::new()));
    }
    for (preset, ids) in presets {
        let used = match ids.len() {
            0 => "no open task uses it yet".to_owned(),
            n => format!(
                "{n} open task(s): {}{}",
                ids.iter()
                    .take(5)
                    .map(TaskId::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
                if n > 5 { ", …" } else { "" }
            ),
        };
        let which = if preset == default {
            "default preset"
        } else {
            "preset"
        };
        match program_problem(eng, preset, warden_exe) {
            Ok(p) => push(
                "agent",
                "ok",
                format!("{which} {preset}: {} ({used})", p.display()),
            ),
            // `warden run` checks only the presets its open tasks use: one no task uses
            // stops nothing yet, and doctor must not say it does.
            Err(e) if ids.is_empty() => push("agent", "warning", format!("{e} ({used})")),
            Err(e) => push("agent", "problem", format!("{e} ({used})")),
        }
    }
    for name in &cfg.pass_env {
        if !name.ends_with('*') && std::env::var_os(name).is_none() {
            push(
                "env",
                "warning",
                format!(
                    "{name} is in [agent] pass_env but not set here: sessions will not have it"
                ),
            );
        }
    }
    for name in KNOWN_KEY_VARS {
        if std::env::var_os(name).is_some() && !cfg.passes_env(default, name) {
            push(
                "env",
                "warning",
                format!(
                    "{name} is set but not in [agent] pass_env: sessions do not see it (add it if the agent should use it)"
                ),
            );
        }
    }
    match git_check(&eng.ws.root) {
        Ok((status, detail)) => push("git", status, detail),
        Err(problem) => push("git", "problem", problem),
    }
    Ok(out)
}

/// What `warden run` makes of the project's repository: a doctor line (`ok` or
/// `warning`), or the problem that keeps it from starting.
///
/// A branch with no commit yet (a repository just made with `git init`) is a problem:
/// every task's worktree branches from it, so no task could start. A detached HEAD is
/// not: the run works without git then, in the project directory, as outside a
/// repository (a CI checkout of a pull request is one).
fn git_check(root: &Path) -> Result<(&'static str, String), String> {
    use warden_runner::git::Repo;
    let outside = || {
        (
            "warning",
            "not a git repository: tasks work in the project directory and the git phases are skipped"
                .to_owned(),
        )
    };
    let Ok(Some(repo)) = Repo::discover(root) else {
        return Ok(outside());
    };
    let top = repo.top.display();
    match repo.current_branch() {
        Ok(Some(branch)) => match repo.branch_has_commit(&branch) {
            Ok(true) => Ok((
                "ok",
                format!("repository {top}, base branch {branch}: each task works in a worktree"),
            )),
            Ok(false) => Err(format!(
                "branch {branch} of the repository {top} has no commit yet, and every task's worktree branches from it; make the first commit (git commit --allow-empty -m \"Initial commit\") and run again"
            )),
            Err(e) => Err(format!(
                "cannot read branch {branch} of the repository {top}: {e}"
            )),
        },
        _ => Ok((
            "warning",
            format!(
                "the repository {top} is on a detached HEAD: tasks work in the project directory and the git phases are skipped; check out a branch to give each task a worktree"
            ),
        )),
    }
}
