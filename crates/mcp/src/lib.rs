//! Warden's MCP server: the state engine as tools, resources and prompts for coding agents
//! and orchestrators, on stdio, built with the official Rust SDK (`rmcp`). Every change
//! goes through the application layer the CLI uses (`warden_app`), with the same
//! refusals and the same one-line messages.
// Stderr is written through `warden_store::say!`, which a closed stderr cannot panic.
#![cfg_attr(not(test), deny(clippy::print_stderr))]

mod actions;
mod framing;
#[cfg(feature = "testing")]
pub mod fuzzing;
mod params;
mod server;

use std::fmt;
use std::str::FromStr;

use warden_core::failure::Failure;
use warden_core::model::TaskId;
use warden_store::Workspace;

pub use server::WardenServer;

/// Who the server serves: a person's orchestrator (every tool) or an agent session
/// (its own task only, and only the transitions its session role may request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Every tool, on every task.
    Orchestrator,
    /// Only its own task: read it, request its role's transitions, complete it, memory,
    /// and its prompt. Anything else is refused and recorded as `tamper.ignored`.
    Agent,
}

impl Role {
    /// The wire name (`orchestrator`, `agent`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Orchestrator => "orchestrator",
            Role::Agent => "agent",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "orchestrator" => Ok(Role::Orchestrator),
            "agent" => Ok(Role::Agent),
            other => Err(format!(
                "unknown MCP role {other:?}; use orchestrator or agent"
            )),
        }
    }
}

/// Is this process inside an agent session (`WARDEN_ROLE` set)?
fn in_session() -> bool {
    std::env::var_os("WARDEN_ROLE").is_some_and(|r| !r.is_empty())
}

/// Resolves the role and task of `warden mcp [--role R] [--task ID]`: inside an agent
/// session (`WARDEN_ROLE` set) the default role is `agent`, bound to `$WARDEN_TASK_ID`;
/// elsewhere `orchestrator`. The agent role needs a task.
pub fn resolve(role: Option<Role>, task: Option<&str>) -> Result<(Role, Option<TaskId>), Failure> {
    let role = role.unwrap_or(if in_session() {
        Role::Agent
    } else {
        Role::Orchestrator
    });
    let task = match task {
        Some(t) => Some(t.to_owned()),
        None if role == Role::Agent => std::env::var("WARDEN_TASK_ID")
            .ok()
            .filter(|s| !s.is_empty()),
        None => None,
    };
    let task = match task {
        Some(t) => Some(TaskId::new(&t).map_err(|e| Failure::usage(e.to_string()))?),
        None => None,
    };
    if role == Role::Agent && task.is_none() {
        return Err(Failure::usage(
            "the agent role is bound to one task; pass --task ID or set WARDEN_TASK_ID",
        ));
    }
    Ok((role, task))
}

/// Serves MCP on stdin/stdout until the client disconnects. Creates its own
/// current-thread tokio runtime (the rest of the CLI has none). The agent role needs
/// `task`, which must exist.
pub fn run(ws: Workspace, role: Role, task: Option<TaskId>) -> Result<(), Failure> {
    // Before any blocking thread: what their calls free goes back to the system.
    warden_sys::return_freed_memory_promptly();
    let server = WardenServer::new(ws, role, task, session_role_from_env())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::internal(format!("cannot start the MCP runtime: {e}")))?;
    rt.block_on(server.serve_stdio())
}

/// The session role (`worker`/`reviewer`) of this process, from `WARDEN_ROLE`.
fn session_role_from_env() -> Option<warden_core::model::Role> {
    std::env::var("WARDEN_ROLE")
        .ok()
        .and_then(|r| warden_core::model::Role::parse(r.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_by_name() {
        let check = |s: &str, want: Option<Role>| assert_eq!(s.parse::<Role>().ok(), want, "{s}");
        check("orchestrator", Some(Role::Orchestrator));
        check("agent", Some(Role::Agent));
        check(" agent ", Some(Role::Agent));
        check("worker", None);
        check("", None);
        for r in [Role::Orchestrator, Role::Agent] {
            assert_eq!(r.as_str().parse::<Role>().ok(), Some(r));
        }
    }
}
