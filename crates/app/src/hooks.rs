//! The hooks of agent harnesses (Claude Code, Codex), as `warden hook EVENT` answers them:
//! `session-start` records the harness's conversation id (what a later session resumes),
//! `stop` turns Warden's gate into the agent's loop (see `warden_core::hook`), and
//! `session-end` reports the end of a session a person started by hand. Warden installs
//! them for its own sessions on the harness's command line; `warden hooks install`
//! installs them for sessions started by hand. A hook never breaks the harness: whatever
//! goes wrong, it lets the agent go on and says why on stderr.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use warden_core::event::{Actor, EventKind};
use warden_core::exit::ExitReport;
use warden_core::failure::Failure;
use warden_core::hook::{self, StopAnswer, StopInput};
use warden_core::model::{Role, TaskId};
use warden_core::ops;
use warden_store::{Decision, Workspace, files, taskfile};

use crate::{App, Result, agent};

/// The hook events Warden answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookEvent {
    /// The harness started (or resumed) a conversation.
    SessionStart,
    /// The agent wants to end its turn.
    Stop,
    /// The harness is ending.
    SessionEnd,
}

/// What a hook is about: the workspace, the task, and which session.
#[derive(Clone, Debug)]
pub struct HookContext {
    /// The workspace.
    pub ws: Workspace,
    /// The task.
    pub task: TaskId,
    /// Warden's session id, for a session Warden started (`WARDEN_SESSION`).
    pub session: Option<String>,
    /// The session's role when Warden started it (`WARDEN_ROLE`).
    pub role: Option<Role>,
}

/// The harness's input: the JSON object on the hook's standard input (at most 1 MiB).
pub fn read_input(mut r: impl Read) -> Value {
    let mut buf = Vec::new();
    let _ = r.by_ref().take(1 << 20).read_to_end(&mut buf);
    serde_json::from_slice(&buf).unwrap_or(Value::Null)
}

/// Finds what a hook is about: the task from `WARDEN_TASK_ID` (Warden's sessions), else
/// from the worktree the harness runs in (its `.warden/TASK.md` link names the task);
/// the workspace from `explicit` (`--dir`, `WARDEN_DIR`) or the link. `None` when the
/// harness does not run for a Warden task: the hook then has nothing to say.
pub fn context(explicit: Option<&Path>, cwd: &Path) -> Option<HookContext> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let linked = linked_task(cwd);
    let (task, ws) = match (env("WARDEN_TASK_ID"), linked) {
        (Some(id), _) => {
            let ws = Workspace::find(cwd, explicit).ok()?;
            (TaskId::new(&id).ok()?, ws)
        }
        (None, Some((id, root))) => {
            let ws = match explicit {
                Some(d) => Workspace::find(cwd, Some(d)).ok()?,
                None => Workspace::find(&root, Some(&root)).ok()?,
            };
            (id, ws)
        }
        (None, None) => return None,
    };
    Some(HookContext {
        ws,
        task,
        session: env("WARDEN_SESSION"),
        role: env("WARDEN_ROLE").and_then(|r| Role::parse(&r)),
    })
}

/// The task whose worktree holds `dir`: the `.warden/TASK.md` link of the nearest
/// directory that has one points at `<root>/.warden/tasks/<id>/TASK.md`.
fn linked_task(dir: &Path) -> Option<(TaskId, PathBuf)> {
    let mut cur = Some(dir);
    while let Some(d) = cur {
        if let Ok(target) = std::fs::read_link(d.join(".warden").join("TASK.md")) {
            let task_dir = target.parent()?;
            let id = TaskId::new(task_dir.file_name()?.to_str()?).ok()?;
            let warden_dir = task_dir.parent()?.parent()?;
            return Some((id, warden_dir.parent()?.to_path_buf()));
        }
        cur = d.parent();
    }
    None
}

/// Answers one hook. Returns what to print on stdout (the stop hook's block answer).
pub fn answer(ctx: &HookContext, event: HookEvent, input: &Value) -> Result<Option<String>> {
    let app = App::open(ctx.ws.clone(), Actor::Runner)?;
    let harness_session = input
        .get("session_id")
        .and_then(Value::as_str)
        // The harness's own id, stored as a conversation or a session: one that could
        // not be a request id (control characters, hundreds of characters) is ignored.
        .filter(|s| crate::task::fit_key(s));
    match event {
        HookEvent::SessionStart => {
            if let (Some(sid), Some(conv)) = (&ctx.session, harness_session) {
                record_conversation(&app, &ctx.task, sid, conv)?;
            }
            Ok(None)
        }
        HookEvent::Stop => stop(&app, ctx, harness_session),
        HookEvent::SessionEnd => {
            let reason = crate::person::bounded_reason(
                input
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown"),
            );
            match &ctx.session {
                // Warden's own session: its host (or tmux's pane-died hook) reports the
                // end with the real exit code as soon as the program exits.
                Some(sid) => {
                    warden_runner::session::note(
                        &app.ws().output_log(&ctx.task),
                        &format!(
                            "--- session {sid}: the harness ended its session (reason: {reason}) ---"
                        ),
                    );
                }
                // A session a person started: this hook is its end's only report.
                None => {
                    let report = ExitReport {
                        role: ctx.role,
                        session: harness_session.map(str::to_owned),
                        exit_code: None,
                        reason: Some(format!("harness session end: {reason}")),
                    };
                    app.exited(&ctx.task, &report)?;
                }
            }
            Ok(None)
        }
    }
}

fn record_conversation(app: &App, id: &TaskId, session: &str, conv: &str) -> Result<()> {
    let shown = app.task_file_shown(id);
    let t = app.get(id)?;
    // Nothing to write for a session that is not Warden's, or a conversation known.
    if ops::conversation(&t, session, conv, &app.ctx(&shown))?.is_none() {
        return Ok(());
    }
    // Recording it again after a race is harmless: the fold sets the same value.
    app.eng.write_task(id, None, |t, _| {
        let kind = EventKind::AgentConversation {
            session: session.to_owned(),
            conversation: conv.to_owned(),
        };
        Ok(Decision::retryable(ops::record(
            t,
            vec![kind],
            &app.ctx(&shown),
        )?))
    })?;
    Ok(())
}

/// The stop hook: Warden's gate as the agent's loop, at most `stop_hook_blocks` times.
fn stop(app: &App, ctx: &HookContext, harness_session: Option<&str>) -> Result<Option<String>> {
    let t = app.get(&ctx.task)?;
    let record = ctx
        .session
        .as_deref()
        .and_then(|s| t.sessions().iter().find(|r| r.id == s));
    let Some(role) = ctx.role.or_else(|| hook::role_for(t.status())) else {
        return Ok(None);
    };
    let doc = taskfile::read(app.ws(), &t).map_err(warden_store::EngineError::from)?;
    // The counter is per session: Warden's id, else the harness's (made safe as a name).
    let key: String = ctx
        .session
        .as_deref()
        .or(harness_session)
        .unwrap_or("unnamed")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    let dir = agent::agent_dir(app.ws(), &ctx.task);
    let counter = dir.join(format!("stop-blocks-{key}"));
    let blocks: u32 = std::fs::read_to_string(&counter)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let task_file = std::path::absolute(app.ws().task_file(&ctx.task))
        .unwrap_or_else(|_| app.ws().task_file(&ctx.task));
    let warden = warden_core::prompt::shell_word(&app.eng.warden_exe().to_string_lossy());
    let answer = hook::stop(&StopInput {
        task: &t,
        role,
        heal: record.is_some_and(|r| r.heal.is_some()),
        artifacts: &doc.artifacts,
        blocks,
        max_blocks: app.eng.config.agent.stop_hook_blocks,
        task_file: &task_file.display().to_string(),
        warden: &warden,
    });
    let log = app.ws().output_log(&ctx.task);
    let who = ctx.session.as_deref().or(harness_session).unwrap_or("?");
    match answer {
        StopAnswer::Allow => Ok(None),
        StopAnswer::GiveUp => {
            warden_runner::session::note(
                &log,
                &format!(
                    "--- session {who}: the stop hook let it end without its {} after {blocks} block(s) ---",
                    artifact(role)
                ),
            );
            Ok(None)
        }
        StopAnswer::Block(reason) => {
            files::create_dir(&app.ws().dir, &dir).map_err(warden_store::EngineError::from)?;
            files::write_atomic(&counter, format!("{}\n", blocks + 1).as_bytes())
                .map_err(warden_store::EngineError::from)?;
            warden_runner::session::note(
                &log,
                &format!(
                    "--- session {who}: the stop hook sent it back for its {} ({} of {}) ---",
                    artifact(role),
                    blocks + 1,
                    app.eng.config.agent.stop_hook_blocks
                ),
            );
            Ok(Some(
                json!({"decision": "block", "reason": reason}).to_string(),
            ))
        }
    }
}

fn artifact(role: Role) -> &'static str {
    match role {
        Role::Worker => "## Handoff",
        Role::Reviewer => "## Review verdict",
    }
}

/// The harnesses `warden hooks install` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Harness {
    /// Claude Code: `.claude/settings.local.json` of a directory.
    Claude,
    /// Codex: `hooks.json` in `$CODEX_HOME` (`~/.codex`).
    Codex,
}

/// What `warden hooks install` did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Installed {
    /// The file written.
    pub file: PathBuf,
    /// Hook events added (those already there are left as they are).
    pub added: Vec<String>,
    /// What the person should know (trust, git).
    pub note: String,
}

/// Installs Warden's Stop and SessionEnd hooks for sessions a person starts by hand: in
/// `dir`'s `.claude/settings.local.json` (Claude Code; kept out of git) or in
/// `codex_home`'s `hooks.json` (Codex, every project: the hook does nothing outside a
/// Warden task). Existing settings and hooks are kept; running it twice adds nothing.
pub fn install(
    harness: Harness,
    dir: &Path,
    codex_home: &Path,
    warden_exe: &Path,
) -> Result<Installed> {
    // The project named must be there: a mistyped --path would otherwise grow a stray
    // `.claude/` where no harness looks. (Codex's home is made when missing, as Codex
    // makes it.)
    if harness == Harness::Claude && !dir.is_dir() {
        return Err(Failure::usage(format!(
            "{} is not a directory; give --path a project directory that exists",
            dir.display()
        )));
    }
    let file = match harness {
        Harness::Claude => dir.join(".claude").join("settings.local.json"),
        Harness::Codex => codex_home.join("hooks.json"),
    };
    // A settings file kept elsewhere and linked here (a dotfiles repository) is
    // changed where it is: replacing the link by a file would cut it from its home.
    let file = match std::fs::symlink_metadata(&file) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(&file).map_err(|e| {
            Failure::usage(format!(
                "{} is a link to a file that cannot be reached ({e}); fix or remove the link",
                file.display()
            ))
        })?,
        _ => file,
    };
    let err = |e: std::io::Error, what: &str| {
        Failure::internal(format!("cannot {what} {}: {e}", file.display()))
    };
    let mut root: Value = match std::fs::read(&file) {
        Ok(bytes) if bytes.len() > 1 << 20 => {
            return Err(Failure::usage(format!(
                "{} is over 1 MiB; is it a settings file?",
                file.display()
            )));
        }
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            Failure::usage(format!(
                "{} is not valid JSON ({e}); fix or remove it, then run this again",
                file.display()
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => json!({}),
        Err(e) => return Err(err(e, "read")),
    };
    let Some(obj) = root.as_object_mut() else {
        return Err(Failure::usage(format!(
            "{} does not hold a JSON object; fix or remove it",
            file.display()
        )));
    };
    let hooks = obj.entry("hooks").or_insert_with(|| json!({}));
    let Some(hooks) = hooks.as_object_mut() else {
        return Err(Failure::usage(format!(
            "\"hooks\" in {} is not an object; fix it",
            file.display()
        )));
    };
    let mut added = Vec::new();
    for (name, event) in [("Stop", "stop"), ("SessionEnd", "session-end")] {
        let command = agent::hook_command(warden_exe, event);
        let list = hooks.entry(name).or_insert_with(|| json!([]));
        let Some(list) = list.as_array_mut() else {
            return Err(Failure::usage(format!(
                "hooks.{name} in {} is not a list; fix it",
                file.display()
            )));
        };
        let present = list.iter().any(|group| {
            group["hooks"].as_array().is_some_and(|hs| {
                hs.iter()
                    .any(|h| h["command"].as_str() == Some(command.as_str()))
            })
        });
        if !present {
            list.push(json!({"hooks": [{"type": "command", "command": command}]}));
            added.push(name.to_owned());
        }
    }
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).map_err(|e| err(e, "create the directory of"))?;
    }
    let text = serde_json::to_vec_pretty(&root).map_err(|e| Failure::internal(e.to_string()))?;
    files::write_atomic_keeping_mode(&file, &text).map_err(warden_store::EngineError::from)?;
    let note = match harness {
        Harness::Claude => {
            exclude_from_git(dir, "/.claude/settings.local.json");
            "Claude Code reads it in this directory; it is kept out of git (info/exclude)".to_owned()
        }
        Harness::Codex => "Codex runs new hooks once you trust them (/hooks in codex), or with --dangerously-bypass-hook-trust; outside a Warden task they do nothing".to_owned(),
    };
    Ok(Installed { file, added, note })
}

/// Adds `/<dir's path in the repository>/<rel>` to the git repository's `info/exclude`
/// of `dir`, if it is in one and the line is not there (ignoring failure: it only keeps a
/// settings file out of commits). Anchored at `dir`, which may be a subdirectory of the
/// repository (`/.claude/…` at its top would not match there).
fn exclude_from_git(dir: &Path, rel: &str) {
    let Ok(out) = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--git-path", "info/exclude", "--show-prefix"])
        .output()
    else {
        return;
    };
    if !out.status.success() {
        return;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    let (Some(exclude), prefix) = (lines.next(), lines.next().unwrap_or_default()) else {
        return;
    };
    let line = format!("/{prefix}{}", rel.trim_start_matches('/'));
    let line = line.as_str();
    let path = dir.join(exclude.trim());
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    if text.lines().any(|l| l.trim() == line) {
        return;
    }
    let mut new = text;
    if !new.is_empty() && !new.ends_with('\n') {
        new.push('\n');
    }
    new.push_str(line);
    new.push('\n');
    if let Some(p) = path.parent() {
        let _ = std::fs::create_dir_all(p);
    }
    let _ = std::fs::write(&path, new);
}
