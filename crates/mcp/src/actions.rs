//! Each tool as a call of the application layer (`warden_app`): tool parameters become
//! its typed requests, its typed results become the tool's JSON. The same operations,
//! refusals and messages as the CLI commands they mirror, because they are the same code.

use serde::Serialize;
use serde_json::{Value, json};
use warden_app::App;
use warden_app::plan::{ApplyRequest, PlanInput, plan_from_json};
use warden_app::task::{CreateTask, RetryTask, Transition};
use warden_app::view::Children;
use warden_core::event::SpecChange;
use warden_core::failure::Failure;
use warden_core::memory::MemoryDelta;
use warden_core::model::{Status, TaskId};
use warden_core::tree::{self, AgentStatus};

use crate::params::{
    ApproveParams, CreateParams, EditParams, RejectParams, RetryParams, WorkSpecParam,
};

/// What a tool returns on success.
pub type Res = Result<Value, Failure>;

fn to_value<T: Serialize>(v: &T) -> Res {
    serde_json::to_value(v).map_err(|e| Failure::internal(e.to_string()))
}

/// Parses a task id (exit 2 on a bad id).
pub fn task_id(s: &str) -> Result<TaskId, Failure> {
    warden_app::task_id(s)
}

/// Parses a status (exit 2 on an unknown one).
pub fn status(s: &str) -> Result<Status, Failure> {
    warden_app::status(s)
}

/// `task_get`: the task's JSON, as `warden --json task show`.
pub fn task_get(app: &App, id: &TaskId) -> Res {
    to_value(&app.task(id)?)
}

/// The tasks `task_list` answers with when it is given no `limit`: a page an agent's
/// context can hold (a task is about a kilobyte of JSON, sent twice: as text and as
/// structured content). A list of 10,000 tasks in one answer was 20 MB.
pub const LIST_PAGE: usize = 200;

/// `task_list`: `{"tasks": [...], "total": N, "next": ID|null}`, a page of the tasks
/// (in id order) after `after`, of at most `limit`; `total` counts every task that
/// matches the status.
pub fn task_list(
    app: &App,
    filter: Option<&str>,
    after: Option<&str>,
    limit: Option<usize>,
) -> Res {
    let filter = filter.map(status).transpose()?;
    let limit = limit.unwrap_or(LIST_PAGE);
    if limit == 0 {
        return Err(Failure::usage(
            "limit is 0; ask for 1 or more tasks, or leave it out for a page of 200",
        ));
    }
    let after = after.map(warden_app::task_id).transpose()?;
    // In id order (the app's lists are in tree order), so that a page follows on from
    // the one before even when the task named by `after` has gone since.
    let mut tasks = app.list(filter, Children::Listed)?;
    tasks.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    let total = tasks.len();
    if let Some(after) = &after {
        let start = tasks.partition_point(|t| &t.id <= after);
        tasks.drain(..start);
    }
    let next = (tasks.len() > limit).then(|| tasks[limit - 1].id.clone());
    tasks.truncate(limit);
    Ok(json!({ "tasks": tasks, "total": total, "next": next }))
}

/// `task_create`: as `warden task create`.
pub fn task_create(app: &App, p: CreateParams) -> Res {
    let workflow = p
        .workflow
        .as_deref()
        .map(|w| w.parse().map_err(Failure::usage))
        .transpose()?;
    let req = CreateTask {
        id: p.id,
        title: p.title,
        body: p.body,
        parent: p.parent,
        depends_on: p.depends_on,
        work: p.work.map(Into::into),
        prechecks: p.prechecks.map(Into::into),
        postchecks: p.postchecks.map(Into::into),
        max_attempts: p.max_attempts,
        workflow,
        order: p.order,
        preset: p
            .preset
            .as_deref()
            .map(|x| x.parse().map_err(Failure::usage))
            .transpose()?,
    };
    to_value(&app.create(req)?)
}

/// `task_update_status`, `task_complete`, `task_cancel`: a validated transition, with
/// the guard run when the transition needs it (as `warden task update`). A stored
/// failure (a failed guard) is the tool's error.
pub fn transition(app: &App, req: &Transition) -> Res {
    let answer = app.transition(req)?;
    let response = app.response(&answer)?;
    answer.into_result()?;
    to_value(&response)
}

/// `task_edit`: as `warden task edit`; the task as it is now and the fields changed.
pub fn task_edit(app: &App, p: EditParams) -> Res {
    let id = task_id(&p.id)?;
    let req = warden_app::edit::EditTask {
        title: p.title,
        depends_on: p.depends_on,
        drop_depends_on: p.drop_depends_on,
        parent: p.parent,
        order: p.order,
        max_attempts: p.max_attempts,
    };
    to_value(&app.edit(&id, &req)?)
}

/// `task_retry`: as `warden task retry`; absent keeps a spec, `null` removes a check.
pub fn task_retry(app: &App, p: RetryParams) -> Res {
    let id = task_id(&p.id)?;
    let change = |c: Option<Option<WorkSpecParam>>| match c {
        None => SpecChange::Keep,
        Some(None) => SpecChange::Remove,
        Some(Some(w)) => SpecChange::Set(w.into()),
    };
    let req = RetryTask {
        work: p.new_work.map(Into::into),
        prechecks: change(p.new_prechecks),
        postchecks: change(p.new_postchecks),
        clear_worktree: p.clear_worktree,
    };
    let answer = app.retry(&id, &req)?;
    to_value(&app.response(&answer)?)
}

/// `task_approve`: reviewing → done (merge-ri runs), as `warden task approve`.
pub fn task_approve(app: &App, p: ApproveParams) -> Res {
    let answer = app.approve(&task_id(&p.id)?)?;
    let response = app.response(&answer)?;
    answer.into_result()?;
    to_value(&response)
}

/// `task_reject`: back to the worker with the reason, as `warden task reject`.
pub fn task_reject(app: &App, p: RejectParams) -> Res {
    let answer = app.reject(&task_id(&p.id)?, &p.reason)?;
    let response = app.response(&answer)?;
    answer.into_result()?;
    to_value(&response)
}

/// `status`: what needs a person, what runs, the supervisors, the progress.
pub fn status_view(app: &App) -> Res {
    to_value(&app.status()?)
}

/// `task_spawn`: records a request for a new session (as `warden task spawn`).
pub fn task_spawn(app: &App, id: &TaskId) -> Res {
    let answer = app.respawn(id)?;
    to_value(&app.response(&answer)?)
}

/// `memory_get`: the seven fields.
pub fn memory_get(app: &App, id: &TaskId) -> Res {
    to_value(&app.memory(id)?)
}

/// `memory_merge`: one transaction; returns the memory after it.
pub fn memory_merge(app: &App, id: &TaskId, delta: MemoryDelta, request_id: Option<&str>) -> Res {
    to_value(&app.merge_memory(id, &delta, request_id)?)
}

/// `history`: `{"events": [...]}`, oldest first.
pub fn history(app: &App, id: Option<&str>, last: Option<u32>) -> Res {
    let id = id.map(task_id).transpose()?;
    let events = app.history(id.as_ref(), last.map(|n| n as usize))?;
    Ok(json!({ "events": events }))
}

/// `plan_show`: `{"roots": [...]}` (the nodes of `warden --json plan show`).
pub fn plan_show(app: &App) -> Res {
    Ok(json!({ "roots": app.plan_show()? }))
}

/// `plan_export`: the tree in the flat shape `plan_import` and `plan_apply` take, with
/// `as_of_event` (as `warden --json plan export`).
pub fn plan_export(app: &App) -> Res {
    to_value(&app.plan_export()?)
}

/// `plan_next`: `{"next": ID|null, "state": "open"|"complete"|"stuck"}`.
pub fn plan_next(app: &App) -> Res {
    to_value(&app.plan_next()?)
}

/// `plan_import`: all or nothing, as `warden plan import`.
pub fn plan_import(app: &App, plan: Value) -> Res {
    let plan = plan_from_json(plan, "the plan")?;
    to_value(&app.plan_import(&plan, "the plan")?)
}

/// `plan_apply`: seed 000's reconcile of an edited tree, as `warden plan apply`.
pub fn plan_apply(
    app: &App,
    tree_v: Value,
    selected: &str,
    status: &str,
    guard: Option<&str>,
) -> Res {
    let selected = task_id(selected)?;
    let status: AgentStatus = status.parse().map_err(Failure::usage)?;
    let guard = guard
        .map(|g| g.parse::<tree::GuardOutcome>().map_err(Failure::usage))
        .transpose()?;
    if status == AgentStatus::Done && guard.is_none() {
        return Err(Failure::usage(
            "status done needs guard pass|fail|skipped (the guard's outcome decides)",
        ));
    }
    let req = ApplyRequest {
        plan: PlanInput::Tree(plan_from_json(tree_v, "the tree")?),
        source: "the tree".into(),
        selected,
        status,
        guard,
    };
    to_value(&app.plan_apply(req)?)
}

/// `prompt`: the prompt for the task's current status and role.
pub fn prompt(app: &App, id: &TaskId) -> Res {
    to_value(&app.prompt(id)?)
}
