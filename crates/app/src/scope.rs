//! What an agent session may ask of Warden, whatever the front end it uses: its own task
//! only, and only the transitions of its role (DESIGN's agent role). The MCP server
//! serves that role with its own tool list; the CLI, which every session also has on its
//! `PATH`, checks each command against the same rules before it runs. A refused request
//! is recorded on the session's own task as `tamper.ignored`, so a person sees that an
//! agent reached for what was not its own.
//!
//! This guards against an agent that is confused or over-eager (one that reads
//! `warden --help` and approves its own work), not one that sets out to get around it:
//! a session can unset `WARDEN_ROLE`, as it can write the store's file.

use warden_core::failure::Failure;
use warden_core::model::{Role, Status, TaskId};
use warden_core::ops;

use crate::App;

/// What each role may move its task to: a worker hands off, asks a question, or resumes
/// after the person answered it; a reviewer gives its verdict. Everything else is a
/// person's (or the runner's) decision.
pub fn role_targets(role: Role) -> &'static [Status] {
    match role {
        Role::Worker => &[Status::AgentReview, Status::Clarification, Status::Working],
        Role::Reviewer => &[Status::Reviewing, Status::Working, Status::Stuck],
    }
}

/// May an agent of `role` move its task from `from` to `to`? Only from a status its role
/// works in (a worker does not give the verdict on its own hand-off) and only to its
/// role's targets.
pub fn may_move(role: Role, from: Status, to: Status) -> bool {
    ops::role_for(from) == Some(role) && role_targets(role).contains(&to)
}

/// The statuses, comma-separated.
pub fn names(ss: &[Status]) -> String {
    ss.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
}

/// An agent session, as its environment names it: `WARDEN_ROLE` (which makes the process
/// an agent's) and `WARDEN_TASK_ID`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentSession {
    /// Its own task, when `WARDEN_TASK_ID` names a valid id.
    pub task: Option<TaskId>,
    /// Its role; an unknown `WARDEN_ROLE` counts as a worker (the narrower scope).
    pub role: Role,
}

/// What a request asks for, in the terms of the agent scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// A read, or something that scopes itself (the MCP server, a harness hook): allowed.
    Free,
    /// A change of one task that is not a transition (a memory merge, a session's end).
    Change {
        /// The task it names (`None`: `$WARDEN_TASK_ID`).
        id: Option<String>,
    },
    /// A transition of one task to `to` (`task complete` asks for `agent-review`).
    Transition {
        /// The task it names (`None`: `$WARDEN_TASK_ID`).
        id: Option<String>,
        /// The status asked for, as given.
        to: String,
    },
    /// A person's command (`task approve`, `warden run`, `plan apply`, …).
    Person,
}

impl AgentSession {
    /// The agent session this process runs in, or `None` for a person (or the runner).
    pub fn from_env() -> Option<AgentSession> {
        if crate::actor_from_env() != warden_core::event::Actor::Agent {
            return None;
        }
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Some(AgentSession {
            task: var("WARDEN_TASK_ID").and_then(|s| TaskId::new(&s).ok()),
            role: var("WARDEN_ROLE")
                .and_then(|r| Role::parse(&r))
                .unwrap_or(Role::Worker),
        })
    }

    /// Checks `request`, named `what` in messages (`warden task approve`). A transition
    /// reads the task's status through `app`; a refusal is recorded on the session's own
    /// task through it (when there is one to record on) and returned.
    pub fn check(
        &self,
        what: &str,
        request: &Request,
        app: impl FnOnce() -> crate::Result<App>,
    ) -> Result<(), Failure> {
        // Opened at most once, and only when needed.
        let app = std::cell::Cell::new(Some(app));
        let opened = std::cell::OnceCell::new();
        let open = || {
            opened
                .get_or_init(|| app.take().and_then(|f| f().ok()))
                .as_ref()
        };
        let (asked, failure) = match request {
            Request::Free => return Ok(()),
            Request::Person => (
                "person's command".to_owned(),
                Failure::refused(format!(
                    "`{what}` is a person's command, and this is an agent session (WARDEN_ROLE is set); ask a person, or run it outside the session"
                )),
            ),
            Request::Change { id } => match self.other_task(id.as_deref()) {
                Some(refusal) => refusal,
                None => return Ok(()),
            },
            Request::Transition { id, to } => match self.other_task(id.as_deref()) {
                Some(refusal) => refusal,
                None => {
                    // An unknown status, or a task that cannot be read, is the command's
                    // own error to report.
                    let Ok(to) = to.parse::<Status>() else {
                        return Ok(());
                    };
                    let own = self.task.as_ref().expect("other_task checked it");
                    let Some(from) = open().and_then(|a| a.get(own).ok()).map(|t| t.status())
                    else {
                        return Ok(());
                    };
                    if may_move(self.role, from, to) {
                        return Ok(());
                    }
                    let why = if ops::role_for(from) == Some(self.role) {
                        format!(
                            "a {} may move its task only to {}, not {to}; a person decides everything else",
                            self.role,
                            names(role_targets(self.role))
                        )
                    } else {
                        format!(
                            "task {own} is {from}, which is not a {}'s to move; a person decides",
                            self.role
                        )
                    };
                    (format!("status={to}"), Failure::refused(why))
                }
            },
        };
        if let Some(own) = &self.task
            && let Some(app) = open()
        {
            let allowed = format!(
                "its own task {own}; moves to {}",
                names(role_targets(self.role))
            );
            let _ = app.record_tamper(own, format!("cli:{what}"), asked, allowed);
        }
        Err(failure)
    }

    /// The refusal of a request that names a task other than the session's own.
    fn other_task(&self, id: Option<&str>) -> Option<(String, Failure)> {
        let Some(own) = &self.task else {
            return Some((
                format!("id={}", id.unwrap_or("")),
                Failure::refused(
                    "this agent session names no task of its own (WARDEN_TASK_ID is not set), so it may change none; ask a person",
                ),
            ));
        };
        match id {
            None => None,
            Some(s) if s == own.as_str() => None,
            Some(s) => {
                let asked: String = s.chars().take(200).collect();
                Some((
                    format!("id={asked}"),
                    Failure::refused(format!(
                        "this agent session belongs to task {own}; an agent may change only its own task, not {asked:?}"
                    )),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(task: &str, role: Role) -> AgentSession {
        AgentSession {
            task: Some(TaskId::new(task).unwrap()),
            role,
        }
    }

    fn no_app() -> crate::Result<App> {
        Err(Failure::internal("no store in this test"))
    }

    #[test]
    fn a_role_moves_its_task_only_from_its_own_statuses_to_its_targets() {
        use Status::*;
        let w = Role::Worker;
        let r = Role::Reviewer;
        assert!(may_move(w, Working, AgentReview));
        assert!(may_move(w, Working, Clarification));
        assert!(may_move(w, Clarification, Working));
        assert!(may_move(w, Stuck, AgentReview));
        assert!(!may_move(w, Working, Reviewing));
        assert!(!may_move(w, Working, Cancelled));
        assert!(
            !may_move(w, AgentReview, Working),
            "a FAIL verdict is the reviewer's"
        );
        assert!(!may_move(w, Reviewing, Done));
        assert!(may_move(r, AgentReview, Reviewing));
        assert!(may_move(r, AgentReview, Working));
        assert!(may_move(r, AgentReview, Stuck));
        assert!(!may_move(r, Working, AgentReview));
        assert!(!may_move(r, Reviewing, Done));
    }

    #[test]
    fn an_agent_may_change_only_its_own_task() {
        let w = session("a", Role::Worker);
        let ok = |s: &AgentSession, req: Request| s.check("x", &req, no_app).is_ok();
        assert!(ok(&w, Request::Change { id: None }));
        assert!(ok(
            &w,
            Request::Change {
                id: Some("a".into())
            }
        ));
        assert!(!ok(
            &w,
            Request::Change {
                id: Some("b".into())
            }
        ));
        assert!(!ok(
            &w,
            Request::Transition {
                id: Some("b".into()),
                to: "agent-review".into()
            }
        ));
        assert!(ok(&w, Request::Free));
        assert!(!ok(&w, Request::Person));
        // Without a task of its own an agent changes nothing.
        let lost = AgentSession {
            task: None,
            role: Role::Worker,
        };
        assert!(!ok(
            &lost,
            Request::Change {
                id: Some("a".into())
            }
        ));
    }
}
