//! The arguments of every tool, with their JSON schemas (schemars) and the descriptions
//! an MCP client shows a model. Unknown keys are refused so a misspelled argument fails
//! loudly instead of being dropped.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use warden_core::model::WorkSpec;

/// What a phase runs: exactly one of `shell`, `process` or `agent`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum WorkSpecParam {
    /// A shell line, run by `sh -c`.
    Shell(String),
    /// A program and its arguments, run without a shell.
    Process(Vec<String>),
    /// Instructions for an agent session (the configured agent command).
    Agent(String),
}

impl From<WorkSpecParam> for WorkSpec {
    fn from(p: WorkSpecParam) -> WorkSpec {
        match p {
            WorkSpecParam::Shell(s) => WorkSpec::Shell(s),
            WorkSpecParam::Process(a) => WorkSpec::Process(a),
            WorkSpecParam::Agent(s) => WorkSpec::Agent(s),
        }
    }
}

/// Keeps "absent" (`None`) apart from "null" (`Some(None)`): with `#[serde(default)]`
/// an absent key never reaches this function, and a present key, null or not, becomes
/// `Some(..)`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// An optional value that may be left out but is never `null`.
fn not_null<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    match Option::<T>::deserialize(d)? {
        Some(v) => Ok(Some(v)),
        None => Err(serde::de::Error::custom(
            "null is not allowed here (work cannot be removed); leave the key out to keep the current value",
        )),
    }
}

/// A task, named by id.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdParam {
    /// The task id (1-64 of a-z 0-9 . _ -).
    pub id: String,
}

/// A task of the agent's own session; the id may be left out.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OwnIdParam {
    /// The task id; leave it out to mean this session's own task (the only one allowed).
    #[serde(default)]
    pub id: Option<String>,
}

/// No arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// `task_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Only tasks in this status (pending, clarification, working, agent-review,
    /// reviewing, stuck, done, cancelled).
    #[serde(default)]
    pub status: Option<String>,
    /// At most this many tasks (default 200). The answer's `next` is the id to pass as
    /// `after` for the tasks that follow, or null at the end.
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only tasks whose id sorts after this one: the `next` of the page before.
    #[serde(default)]
    pub after: Option<String>,
}

/// `history`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryParams {
    /// Only this task's events; leave it out for the whole project.
    #[serde(default)]
    pub id: Option<String>,
    /// Only the last N events (default: all).
    #[serde(default)]
    pub last: Option<u32>,
}

/// `task_create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateParams {
    /// The new task's id: 1-64 of a-z 0-9 . _ - (starting with a letter or digit).
    pub id: String,
    /// A one-line title (default: the id).
    #[serde(default)]
    pub title: Option<String>,
    /// Instructions and context for whoever works on it.
    #[serde(default)]
    pub body: Option<String>,
    /// The parent task (must exist).
    #[serde(default)]
    pub parent: Option<String>,
    /// Tasks that must be done first (must exist).
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// The work. Leave it out in the review workflow to have the configured agent work
    /// from the title and body.
    #[serde(default)]
    pub work: Option<WorkSpecParam>,
    /// Checks run before the work.
    #[serde(default)]
    pub prechecks: Option<WorkSpecParam>,
    /// Checks run after the work: the guard that must pass.
    #[serde(default)]
    pub postchecks: Option<WorkSpecParam>,
    /// Failed attempts allowed before the task is stuck (default from warden.toml).
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// `review` (artifact-gated; default for agent work) or `direct` (guard only;
    /// default for shell and process work).
    #[serde(default)]
    pub workflow: Option<String>,
    /// Sort key among siblings (default 0).
    #[serde(default)]
    pub order: Option<i64>,
    /// The agent preset of its sessions: `claude`, `codex`, `aider` or `custom`
    /// (default: the one configured in warden.toml).
    #[serde(default)]
    pub preset: Option<String>,
}

/// `task_update_status` for the orchestrator.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateParams {
    /// The task id.
    pub id: String,
    /// The target status (pending, clarification, working, agent-review, reviewing,
    /// stuck, done, cancelled).
    pub status: String,
    /// Why (recorded in the history).
    #[serde(default)]
    pub reason: Option<String>,
    /// Apply at most once: a repeated call with this key returns the first result.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// `task_update_status` for an agent.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentUpdateParams {
    /// The task id; leave it out to mean this session's own task (the only one allowed).
    #[serde(default)]
    pub id: Option<String>,
    /// The target status. A worker may request agent-review or clarification; a
    /// reviewer reviewing, working or stuck.
    pub status: String,
    /// Why (recorded in the history).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `task_complete` for the orchestrator.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteParams {
    /// The task id.
    pub id: String,
    /// Apply at most once: a repeated call with this key returns the first result.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// `task_cancel`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelParams {
    /// The task id.
    pub id: String,
    /// Why (recorded in the history).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `task_approve`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveParams {
    /// The id of the task in reviewing.
    pub id: String,
}

/// `task_reject`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectParams {
    /// The id of the task in reviewing.
    pub id: String,
    /// What the worker must change (shown to it in its next prompt).
    pub reason: String,
}

/// `task_edit`: what is left out is kept.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditParams {
    /// The task id.
    pub id: String,
    /// A new one-line title.
    #[serde(default)]
    pub title: Option<String>,
    /// Tasks to add to its dependencies (each must exist).
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Dependencies to remove (each must be one of them).
    #[serde(default)]
    pub drop_depends_on: Vec<String>,
    /// A new parent; `null` makes it a root; absent keeps it.
    #[serde(default, deserialize_with = "present")]
    pub parent: Option<Option<String>>,
    /// A new sort key among its siblings.
    #[serde(default)]
    pub order: Option<i64>,
    /// Failed attempts allowed before it is stuck (1 or more).
    #[serde(default)]
    pub max_attempts: Option<u32>,
}

/// `task_retry`: absent keeps a spec, `null` removes a check, an object replaces it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryParams {
    /// The stuck task's id.
    pub id: String,
    /// New work; absent keeps the current work (work cannot be removed: never null).
    #[serde(default, deserialize_with = "not_null")]
    #[schemars(with = "WorkSpecParam")]
    pub new_work: Option<WorkSpecParam>,
    /// New prechecks; `null` removes them; absent keeps them.
    #[serde(default, deserialize_with = "present")]
    pub new_prechecks: Option<Option<WorkSpecParam>>,
    /// New postchecks (the guard); `null` removes them; absent keeps them.
    #[serde(default, deserialize_with = "present")]
    pub new_postchecks: Option<Option<WorkSpecParam>>,
    /// Reset the worktree to its base and run every phase again (default false).
    #[serde(default)]
    pub clear_worktree: bool,
}

/// `memory_merge`: a delta of the task's memory.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryParams<Id> {
    /// The task id.
    pub id: Id,
    /// Goals to append.
    #[serde(default)]
    pub goals: Vec<String>,
    /// Constraints to append.
    #[serde(default)]
    pub constraints: Vec<String>,
    /// Decisions (with their reasons) to append.
    #[serde(default)]
    pub decisions: Vec<String>,
    /// Unconfirmed ideas to append.
    #[serde(default)]
    pub hypotheses: Vec<String>,
    /// What just happened; only the most recent entries are kept.
    #[serde(default)]
    pub history: Vec<String>,
    /// Open questions and problems to append.
    #[serde(default)]
    pub open_issues: Vec<String>,
    /// What to do next; replaces the current focus when non-empty.
    #[serde(default)]
    pub next_focus: Option<String>,
    /// An idempotency key: a merge repeated with the same key (after a lost answer) is
    /// applied once.
    #[serde(default)]
    pub request_id: Option<String>,
}

impl<Id> MemoryParams<Id> {
    /// The delta without the id.
    pub fn delta(&self) -> warden_core::memory::MemoryDelta {
        warden_core::memory::MemoryDelta {
            goals: self.goals.clone(),
            constraints: self.constraints.clone(),
            decisions: self.decisions.clone(),
            hypotheses: self.hypotheses.clone(),
            history: self.history.clone(),
            open_issues: self.open_issues.clone(),
            next_focus: self.next_focus.clone(),
        }
    }
}

/// The JSON schema of a plan in the flat import shape.
fn plan_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "description": "A plan: {\"tasks\": [{\"id\", \"title\", \"parent\", \"order\", \"depends_on\", \"work\" | \"agent\", \"prechecks\", \"postchecks\", \"max_attempts\", \"workflow\", \"body\"}]}. work/prechecks/postchecks are a shell string or a WorkSpec object ({\"shell\": ..}, {\"process\": [..]}, {\"agent\": ..}); agent is shorthand for agent work.",
        "properties": {
            "tasks": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "title": {"type": "string"},
                        "body": {"type": "string"},
                        "parent": {"type": ["string", "null"]},
                        "order": {"type": "integer"},
                        "depends_on": {"type": "array", "items": {"type": "string"}},
                        "work": {},
                        "agent": {"type": "string"},
                        "prechecks": {},
                        "postchecks": {},
                        "max_attempts": {"type": "integer", "minimum": 1},
                        "workflow": {"enum": ["review", "direct"]},
                        "passes": {"type": "boolean"},
                        "attempts": {"type": "integer", "minimum": 0}
                    },
                    "required": ["id"]
                }
            }
        },
        "required": ["tasks"]
    })
}

/// `plan_import`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportParams {
    /// The plan to import.
    #[schemars(schema_with = "plan_schema")]
    pub plan: Value,
}

/// `plan_apply`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyParams {
    /// The edited tree (the shape plan_export gives: {"as_of_event": N, "tasks": [...]}).
    #[schemars(schema_with = "plan_schema")]
    pub tree: Value,
    /// The node the agent worked on.
    pub id: String,
    /// What the agent reports for it: done, retry or decomposed.
    pub status: String,
    /// The guard's outcome: pass, fail or skipped (required with status done).
    #[serde(default)]
    pub guard: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn retry(v: Value) -> Result<RetryParams, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    fn shape(p: &Option<Option<WorkSpecParam>>) -> &'static str {
        match p {
            None => "keep",
            Some(None) => "remove",
            Some(Some(_)) => "set",
        }
    }

    #[test]
    fn absent_null_and_object_are_three_different_things() {
        let check = |v: Value, pre: &str, post: &str| {
            let r = retry(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"));
            assert_eq!(
                (shape(&r.new_prechecks), shape(&r.new_postchecks)),
                (pre, post),
                "{v}"
            );
        };
        check(json!({"id": "a"}), "keep", "keep");
        check(json!({"id": "a", "new_postchecks": null}), "keep", "remove");
        check(json!({"id": "a", "new_prechecks": null}), "remove", "keep");
        check(
            json!({"id": "a", "new_postchecks": {"shell": "true"}}),
            "keep",
            "set",
        );
        check(
            json!({"id": "a", "new_prechecks": {"process": ["make", "lint"]}, "new_postchecks": null}),
            "set",
            "remove",
        );
    }

    #[test]
    fn malformed_retry_arguments_are_refused() {
        let bad = |v: Value| assert!(retry(v.clone()).is_err(), "{v} was accepted");
        bad(json!({}));
        bad(json!({"id": 7}));
        bad(json!({"id": "a", "new_postchecks": "true"}));
        bad(json!({"id": "a", "new_postchecks": {"shell": "a", "agent": "b"}}));
        bad(json!({"id": "a", "new_postchecks": {"bash": "true"}}));
        bad(json!({"id": "a", "new_work": null}));
        bad(json!({"id": "a", "clear_worktree": "yes"}));
        bad(json!({"id": "a", "postchecks": null}));
    }

    #[test]
    fn the_retry_schema_allows_null_for_checks_only() {
        let s = serde_json::to_value(schemars::schema_for!(RetryParams)).unwrap();
        let text = s.to_string();
        assert_eq!(s["required"], json!(["id"]), "{text}");
        let nullable = |k: &str| s["properties"][k].to_string().contains("\"null\"");
        assert!(nullable("new_prechecks"), "{text}");
        assert!(nullable("new_postchecks"), "{text}");
    }
}
