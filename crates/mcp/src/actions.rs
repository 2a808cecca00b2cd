//! What each tool does, as blocking functions over an open [`Engine`]: the same reads,
//! the same write path (`Engine::write_task`, `Engine::commit_batch`), the same core
//! operations and the same refusal messages as the CLI commands they mirror.

use serde_json::{Value, json};
use warden_core::event::{Event, EventKind, SpecChange};
use warden_core::memory::MemoryDelta;
use warden_core::model::{IdError, Status, Task, TaskId, TaskSpec, WorkSpec, WorkflowKind};
use warden_core::ops::{self, Initial, Outcome, Refusal, TransitionInput};
use warden_core::plan_ops;
use warden_core::retry::RetryRequest;
use warden_core::tree::{self, AgentStatus, PlanFile};
use warden_store::engine::task_json;
use warden_store::files::{self, FileError};
use warden_store::{Batch, Decision, Engine, EngineError, StoreError, Written};

use crate::params::{CreateParams, RetryParams, WorkSpecParam};

/// A refused or failed tool call: the exit code the CLI would use, its one-line
/// message, and optional detail lines (a failed guard's output tail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    /// The CLI's exit code for the same failure (DESIGN 4).
    pub code: i32,
    /// The one-line message.
    pub message: String,
    /// Lines after the message.
    pub detail: Option<String>,
}

impl ToolError {
    /// An error with a code and message.
    pub fn new(code: i32, message: impl Into<String>) -> ToolError {
        ToolError {
            code,
            message: message.into(),
            detail: None,
        }
    }

    /// Usage (exit 2).
    pub fn usage(message: impl Into<String>) -> ToolError {
        ToolError::new(2, message)
    }

    /// Refused (exit 1).
    pub fn refused(message: impl Into<String>) -> ToolError {
        ToolError::new(1, message)
    }

    /// The first line exactly as the CLI prints it on stderr (`error: ` unless the
    /// message already says `refused:` or `error:`), then the detail.
    pub fn text(&self) -> String {
        let prefix = if self.message.starts_with("refused:") || self.message.starts_with("error:") {
            ""
        } else {
            "error: "
        };
        let mut s = format!("{prefix}{}", self.message);
        if let Some(d) = &self.detail {
            s.push('\n');
            s.push_str(d.trim_end());
        }
        s
    }
}

impl From<EngineError> for ToolError {
    fn from(e: EngineError) -> Self {
        ToolError::new(e.exit_code(), e.message())
    }
}

impl From<Refusal> for ToolError {
    fn from(e: Refusal) -> Self {
        ToolError::new(e.exit_code(), e.to_string())
    }
}

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> Self {
        ToolError::new(e.exit_code(), e.to_string())
    }
}

impl From<IdError> for ToolError {
    fn from(e: IdError) -> Self {
        ToolError::usage(e.to_string())
    }
}

impl From<FileError> for ToolError {
    fn from(e: FileError) -> Self {
        EngineError::from(e).into()
    }
}

/// What a tool returns on success.
pub type Res = Result<Value, ToolError>;

/// Parses a task id (exit 2 on a bad id).
pub fn task_id(s: &str) -> Result<TaskId, ToolError> {
    Ok(TaskId::new(s)?)
}

/// Parses a status (exit 2 on an unknown one).
pub fn status(s: &str) -> Result<Status, ToolError> {
    s.parse().map_err(ToolError::usage)
}

/// `task_get`: the task's JSON, as `warden --json task show`.
pub fn task_get(eng: &Engine, id: &TaskId) -> Res {
    let t = eng.get(id)?;
    Ok(task_json(&t, &eng.tasks()?))
}

/// `task_list`: `{"tasks": [...]}`, sorted by id.
pub fn task_list(eng: &Engine, filter: Option<&str>) -> Res {
    let filter = filter.map(status).transpose()?;
    let all = eng.tasks()?;
    let v: Vec<Value> = all
        .iter()
        .filter(|t| filter.is_none_or(|s| t.status() == s))
        .map(|t| task_json(t, &all))
        .collect();
    Ok(json!({ "tasks": v }))
}

/// `task_create`: as `warden task create`.
pub fn task_create(eng: &Engine, p: CreateParams) -> Res {
    let id = task_id(&p.id)?;
    let work: Option<WorkSpec> = p.work.map(Into::into);
    let workflow = match p.workflow.as_deref() {
        Some(w) => w.parse::<WorkflowKind>().map_err(ToolError::usage)?,
        None if matches!(work, Some(WorkSpec::Shell(_) | WorkSpec::Process(_))) => {
            WorkflowKind::Direct
        }
        None => WorkflowKind::Review,
    };
    let mut spec = TaskSpec::new(
        id.clone(),
        workflow,
        p.max_attempts.unwrap_or(eng.config.limits.max_attempts),
    );
    if let Some(t) = p.title {
        spec.title = t;
    }
    if let Some(b) = p.body {
        spec.body = b;
    }
    spec.order = p.order.unwrap_or(0);
    if let Some(parent) = &p.parent {
        let parent = task_id(parent)?;
        if eng.store.get(&parent)?.is_none() {
            return Err(ToolError::new(
                3,
                format!("parent {parent} does not exist; create it first or leave out parent"),
            ));
        }
        spec.parent = Some(parent);
    }
    for d in &p.depends_on {
        let d = task_id(d)?;
        if eng.store.get(&d)?.is_none() {
            return Err(ToolError::new(
                3,
                format!("dependency {d} does not exist; create it first"),
            ));
        }
        if !spec.depends_on.contains(&d) {
            spec.depends_on.push(d);
        }
    }
    spec.spec.work = work;
    spec.spec.prechecks = p.prechecks.map(Into::into);
    spec.spec.postchecks = p.postchecks.map(Into::into);
    if spec.spec.work.is_none() && workflow == WorkflowKind::Direct {
        return Err(ToolError::usage(
            "a direct task needs work (the guard decides it); use workflow review for agent work",
        ));
    }
    if eng.store.get(&id)?.is_some() {
        return Err(ToolError::refused(format!(
            "refused: task {id} already exists; pick another id or update it"
        )));
    }
    let shown = eng.task_file_shown(&id);
    let change = ops::create(
        spec,
        Initial {
            passes: false,
            attempts: 0,
        },
        &eng.ctx(&shown),
    )?;
    let task = change
        .after
        .clone()
        .ok_or_else(|| ToolError::new(5, "internal error: create made no task"))?;
    eng.commit_batch(Batch {
        changes: vec![change],
        ..Default::default()
    })?;
    Ok(task_json(&task, &eng.tasks()?))
}

/// `task_update_status`, `task_complete`, `task_cancel`: a validated transition, with
/// the guard run when the transition needs it (as `warden task update`).
pub fn transition(
    eng: &Engine,
    id: &TaskId,
    to: Status,
    reason: Option<String>,
    request: Option<&str>,
) -> Res {
    let shown = eng.task_file_shown(id);
    let written = eng.write_task(id, request, |t, doc| {
        let ctx = eng.ctx(&shown);
        let (needs, _) = ops::check_transition(t, to, &doc.artifacts, &ctx)?;
        let mut input = TransitionInput {
            artifacts: doc.artifacts.clone(),
            reason: reason.clone(),
            ..Default::default()
        };
        let ran = warden_runner::pipeline::prepare_transition(eng, t, needs, &mut input);
        Ok(Decision {
            change: ops::transition(t, to, &input, &ctx)?,
            retryable: !ran,
            memory: None,
        })
    })?;
    report(eng, written)
}

/// The result of a write: the task after it; a failed guard is an error whose message
/// is the CLI's (the failed attempt is stored).
fn report(eng: &Engine, written: Written) -> Res {
    let (change, response) = match written {
        Written::Replayed(resp) => {
            let v: Value = serde_json::from_str(&resp).unwrap_or(Value::String(resp));
            // A repeated request gets the same answer, a failed guard's included.
            if let Some(msg) = v["error"]["message"].as_str() {
                return Err(ToolError {
                    code: v["error"]["code"].as_i64().unwrap_or(1) as i32,
                    message: msg.to_owned(),
                    detail: v["error"]["detail"].as_str().map(str::to_owned),
                });
            }
            return Ok(v);
        }
        Written::Done(c, r) if r.is_null() => {
            let r = eng.response_for(&c).map_err(ToolError::from)?;
            (c, r)
        }
        Written::Done(c, r) => (c, r),
    };
    match &change.outcome {
        Outcome::GuardFailed { tail, stuck } => {
            let t = change
                .after
                .as_ref()
                .ok_or_else(|| ToolError::new(5, "internal error: the guard removed the task"))?;
            let msg = if *stuck {
                format!(
                    "refused: the postchecks of {} failed and its {} attempts are used up; the task is now stuck (a person can `warden task retry {}`)",
                    t.id(),
                    t.spec.max_attempts,
                    t.id()
                )
            } else {
                format!(
                    "refused: the postchecks of {} failed (attempt {} of {}); fix the problem and run `warden task complete` again",
                    t.id(),
                    t.attempts(),
                    t.spec.max_attempts
                )
            };
            Err(ToolError {
                code: 1,
                message: msg,
                detail: Some(tail.clone()),
            })
        }
        Outcome::Retry(plan) => {
            let mut v = response;
            let names = |ps: &[warden_core::model::Phase]| -> Vec<&'static str> {
                ps.iter().map(|p| p.as_str()).collect()
            };
            if let Value::Object(m) = &mut v {
                m.insert(
                    "retry".into(),
                    json!({"runs_again": names(&plan.rerun), "kept": names(&plan.kept)}),
                );
            }
            Ok(v)
        }
        _ => Ok(response),
    }
}

/// `task_retry`: as `warden task retry`; absent keeps a spec, `null` removes a check.
pub fn task_retry(eng: &Engine, p: RetryParams) -> Res {
    let id = task_id(&p.id)?;
    let change = |c: Option<Option<WorkSpecParam>>| match c {
        None => SpecChange::Keep,
        Some(None) => SpecChange::Remove,
        Some(Some(w)) => SpecChange::Set(w.into()),
    };
    let req = RetryRequest {
        work: p.new_work.map(Into::into),
        prechecks: change(p.new_prechecks),
        postchecks: change(p.new_postchecks),
        clear_worktree: p.clear_worktree,
    };
    let shown = eng.task_file_shown(&id);
    let written = eng.write_task(&id, None, |t, _doc| {
        Ok(Decision::retryable(ops::retry(t, &req, &eng.ctx(&shown))?))
    })?;
    report(eng, written)
}

/// `task_spawn`: records a request for a new session (as `warden task spawn`).
pub fn task_spawn(eng: &Engine, id: &TaskId) -> Res {
    let shown = eng.task_file_shown(id);
    let written = eng.write_task(id, None, |t, _doc| {
        Ok(Decision::retryable(ops::request_respawn(
            t,
            &eng.ctx(&shown),
        )?))
    })?;
    report(eng, written)
}

/// `memory_get`: the seven fields.
pub fn memory_get(eng: &Engine, id: &TaskId) -> Res {
    eng.get(id)?;
    let m = eng.store.memory(id)?.unwrap_or_default();
    Ok(json!(m))
}

/// `memory_merge`: one transaction, as `warden memory merge`; returns the memory after it.
pub fn memory_merge(eng: &Engine, id: &TaskId, delta: MemoryDelta) -> Res {
    eng.merge_memory(id, &delta)?;
    memory_get(eng, id)
}

/// Records that an agent asked for something it may not have, on its own task: one
/// `tamper.ignored` event through the engine's write path.
pub fn record_tamper(
    eng: &Engine,
    own: &TaskId,
    field: String,
    agent_value: String,
    true_value: String,
) -> Result<(), ToolError> {
    let shown = eng.task_file_shown(own);
    eng.write_task(own, None, |t, _doc| {
        Ok(Decision::retryable(ops::record(
            t,
            vec![EventKind::TamperIgnored {
                field: field.clone(),
                agent_value: Some(agent_value.clone()),
                true_value: true_value.clone(),
            }],
            &eng.ctx(&shown),
        )?))
    })?;
    Ok(())
}

/// One event as `warden --json history` prints it.
fn event_json(e: &Event) -> Value {
    let (from, to) = e.kind.transition().unzip();
    json!({
        "seq": e.seq,
        "at": e.at.to_string(),
        "task": e.task,
        "type": e.kind.type_name(),
        "from": from.map(|s| s.as_str()),
        "to": to.map(|s| s.as_str()),
        "reason": e.kind.reason(),
        "actor": e.actor.as_str(),
        "version": e.version,
        "data": e.kind,
    })
}

/// `history`: `{"events": [...]}`, oldest first.
pub fn history(eng: &Engine, id: Option<&str>, last: Option<u32>) -> Res {
    let id = match id {
        Some(s) => {
            let id = task_id(s)?;
            if eng.store.get(&id)?.is_none() && eng.store.events(Some(&id))?.is_empty() {
                return Err(EngineError::NotFound(id).into());
            }
            Some(id)
        }
        None => None,
    };
    let events = eng.store.events(id.as_ref())?;
    let skip = match last {
        Some(n) => events.len().saturating_sub(n as usize),
        None => 0,
    };
    let v: Vec<Value> = events[skip..].iter().map(event_json).collect();
    Ok(json!({ "events": v }))
}

/// `state`: STATE.md as text.
pub fn state(eng: &Engine) -> Result<String, ToolError> {
    Ok(eng.render_state()?)
}

/// `plan_show`: the tree with statuses, `{"roots": [...]}` (as `warden --json plan show`).
pub fn plan_show(eng: &Engine) -> Res {
    let tasks = eng.tasks()?;
    let idx = tree::TreeIndex::new(&tasks);
    fn node_json(idx: &tree::TreeIndex<'_>, t: &Task) -> Value {
        let children: Vec<Value> = idx
            .children(t.id())
            .into_iter()
            .map(|c| node_json(idx, c))
            .collect();
        json!({
            "id": t.id(),
            "title": t.spec.title,
            "status": t.status().as_str(),
            "passes": t.passes(),
            "attempts": t.attempts(),
            "max_attempts": t.spec.max_attempts,
            "depends_on": t.spec.depends_on,
            "children": children,
        })
    }
    let roots: Vec<Value> = tree::depth_first(&tasks)
        .into_iter()
        .filter(|t| t.spec.parent.as_ref().is_none_or(|p| idx.get(p).is_none()))
        .map(|t| node_json(&idx, t))
        .collect();
    Ok(json!({ "roots": roots }))
}

/// `plan_next`: `{"next": ID|null, "state": "open"|"complete"|"stuck"}`.
pub fn plan_next(eng: &Engine) -> Res {
    let tasks = eng.tasks()?;
    serde_json::to_value(tree::plan_next(&tasks)).map_err(|e| ToolError::new(5, e.to_string()))
}

/// Reads a plan given as JSON.
fn read_plan(v: Value, what: &str) -> Result<PlanFile, ToolError> {
    serde_json::from_value(v).map_err(|e| {
        ToolError::refused(format!(
            "refused: {what} is not valid: {}; send {{\"tasks\": [{{\"id\": ..}}, ..]}} in the shape of `warden plan export`",
            e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
        ))
    })
}

/// `plan_import`: all or nothing, as `warden plan import`.
pub fn plan_import(eng: &Engine, plan: Value) -> Res {
    let shown = "the plan";
    let plan = read_plan(plan, shown)?;
    let existing_ids: Vec<TaskId> = eng.tasks()?.iter().map(|t| t.id().clone()).collect();
    let mut problems: Vec<String> = match tree::validate_plan(&plan.tasks, &existing_ids) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(|e| e.to_string()).collect(),
    };
    for n in &plan.tasks {
        if existing_ids.contains(&n.id) {
            problems.push(format!(
                "task {} already exists; import adds new tasks (change existing ones with plan_apply)",
                n.id
            ));
        }
    }
    let mut changes = Vec::new();
    if problems.is_empty() {
        for n in &plan.tasks {
            let spec = n.to_spec(&eng.config.limits);
            let initial = Initial {
                passes: n.passes.unwrap_or(false),
                attempts: n.attempts.unwrap_or(0),
            };
            match ops::create(spec, initial, &eng.ctx(shown)) {
                Ok(c) => changes.push(c),
                Err(e) => problems.push(e.to_string().trim_start_matches("refused: ").to_owned()),
            }
        }
    }
    if !problems.is_empty() {
        return Err(ToolError::refused(format!(
            "refused: {shown} was not imported ({} problem{}): {}",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" },
            problems.join("; ")
        )));
    }
    eng.commit_batch(Batch {
        changes,
        ..Default::default()
    })?;
    let ids: Vec<&str> = plan.tasks.iter().map(|n| n.id.as_str()).collect();
    Ok(json!({ "imported": ids }))
}

/// `plan_apply`: seed 000's reconcile of an edited tree, as `warden plan apply`.
pub fn plan_apply(
    eng: &Engine,
    tree_v: Value,
    selected: &str,
    status: &str,
    guard: Option<&str>,
) -> Res {
    let selected = task_id(selected)?;
    let status: AgentStatus = status.parse().map_err(ToolError::usage)?;
    let guard = guard
        .map(|g| g.parse::<tree::GuardOutcome>().map_err(ToolError::usage))
        .transpose()?;
    if status == AgentStatus::Done && guard.is_none() {
        return Err(ToolError::usage(
            "status done needs guard pass|fail|skipped (the guard's outcome decides)",
        ));
    }
    let shown = "the tree";
    let plan = read_plan(tree_v, shown)?;
    for _ in 0..20 {
        let prev = eng.tasks()?;
        let update = tree::apply_state_updates(
            &prev,
            plan.tasks.clone(),
            &selected,
            status,
            guard,
            &eng.config.limits,
        )
        .map_err(|e| {
            let code = if matches!(e, tree::ApplyError::MissingGuard) {
                2
            } else {
                1
            };
            let msg = e.to_string();
            ToolError::new(
                code,
                if code == 1 && !msg.starts_with("refused") {
                    format!("refused: {msg}")
                } else {
                    msg
                },
            )
        })?;
        let changes = plan_ops::plan_applied(&prev, &update, &selected, &eng.ctx(shown))?;
        match eng.commit_batch(Batch {
            changes,
            ..Default::default()
        }) {
            Ok(()) => {}
            Err(e) if e.exit_code() == 4 => continue,
            Err(e) => return Err(e.into()),
        }
        let mut tamper: Vec<&TaskId> = update.tamper_ignored.iter().map(|t| &t.id).collect();
        tamper.sort();
        tamper.dedup();
        return Ok(json!({
            "passes_set": update.passes_set,
            "derived_passes_set": update.derived_passes_set,
            "attempts_incremented": update.attempts_incremented,
            "tamper_ignored": tamper,
        }));
    }
    Err(StoreError::Conflict {
        task: selected.to_string(),
        expected: 0,
        found: 0,
    }
    .into())
}

/// `prompt`: the prompt for the task's current status and role.
pub fn prompt(eng: &Engine, id: &TaskId) -> Res {
    let t = eng.get(id)?;
    let text = eng.prompt(&t, None)?;
    let kind = warden_core::prompt::prompt_kind(&t).map(|k| k.as_str());
    Ok(json!({"id": id, "kind": kind, "prompt": text}))
}

/// The text of a task's TASK.md (the `warden://task/{id}` resource).
pub fn task_md(eng: &Engine, id: &TaskId) -> Result<String, ToolError> {
    eng.get(id)?;
    match files::read_text(&eng.ws.dir, &eng.ws.task_file(id)) {
        Ok(text) => Ok(text),
        Err(FileError::Missing(_)) => Err(ToolError::new(
            3,
            format!(
                "{} does not exist yet; it is written after the task's next change",
                eng.task_file_shown(id)
            ),
        )),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_what_the_cli_prints() {
        let check = |e: ToolError, want: &str| assert_eq!(e.text(), want);
        check(
            ToolError::new(3, "no task x; list tasks with `warden task list`"),
            "error: no task x; list tasks with `warden task list`",
        );
        check(
            ToolError::refused("refused: pending → done is not allowed"),
            "refused: pending → done is not allowed",
        );
        check(ToolError::usage("error: bad"), "error: bad");
        check(
            ToolError {
                code: 1,
                message: "refused: the postchecks of a failed".into(),
                detail: Some("line 1\nline 2\n\n".into()),
            },
            "refused: the postchecks of a failed\nline 1\nline 2",
        );
    }

    #[test]
    fn ids_and_statuses_are_usage_errors() {
        assert_eq!(task_id("../x").unwrap_err().code, 2);
        assert_eq!(task_id("").unwrap_err().code, 2);
        assert!(task_id("api.v2").is_ok());
        assert_eq!(status("finished").unwrap_err().code, 2);
        assert_eq!(status("agent-review").unwrap(), Status::AgentReview);
    }
}
