//! The MCP server: tool routers for the two roles, the agent's own-task fence (refusals
//! recorded as `tamper.ignored`), the 1 MiB cap on text arguments, resources
//! (`warden://state`, `warden://task/{id}`) and the role prompts.
//!
//! Every call opens the workspace on a blocking thread, so a slow guard never stalls
//! the protocol, and a panic inside a call becomes a tool error instead of ending the
//! server.

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    Prompt, PromptArgument, PromptMessage, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt, tool, tool_router};
use serde_json::{Value, json};
use warden_app::App;
use warden_app::scope::{may_move, names, role_targets};
use warden_app::task::Transition;
use warden_core::event::Actor;
use warden_core::failure::{ExitCode, Failure};
use warden_core::model::{Role as SessionRole, Status, TaskId};
use warden_core::prompt::PromptKind;
use warden_store::Workspace;

use crate::Role;
use crate::actions;
use crate::params::{
    AgentUpdateParams, ApplyParams, ApproveParams, CancelParams, CompleteParams, CreateParams,
    EditParams, HistoryParams, IdParam, ImportParams, ListParams, MemoryParams, NoParams,
    OwnIdParam, RejectParams, RetryParams, UpdateParams,
};

/// The longest text argument accepted, in bytes (the TASK.md limit).
pub const MAX_TEXT_BYTES: usize = 1 << 20;

/// How much of an agent's refused request is kept in messages and tamper events.
const SHOWN_CHARS: usize = 200;

/// The longest error text returned (a guard's output tail is at most 2,000 characters);
/// an error never echoes a huge argument back.
const MAX_ERROR_CHARS: usize = 4000;

const INSTRUCTIONS_ORCHESTRATOR: &str = "Warden is a deterministic state engine for coding-agent tasks. Agents write artifacts (sections of TASK.md such as `## Handoff` and `## Review`) and request transitions; Warden checks the evidence and decides. Start with `status` (what needs a person, what runs) or `plan_show` to see the project, `plan_next` to pick work, `plan_export` and `plan_apply` to edit the tree, `task_get` for one task, `history` for what happened. Create work with `task_create` or `plan_import`; move tasks with `task_update_status`, `task_complete` and `task_cancel`; decide a review with `task_approve` or `task_reject`; run a stuck task again with `task_retry`; change a task's title, dependencies or parent with `task_edit`. Refusals are tool errors whose first line says what is wrong and what to do.";

const INSTRUCTIONS_AGENT: &str = "Warden tracks the task this session works on. Read it with `task_get` and your instructions with `prompt`; record what you learn with `memory_merge`. When the work is done, write a non-empty `## Handoff` section in TASK.md and call `task_complete` (the postchecks run then). A reviewer writes `## Review` with a first verdict line saying PASS or FAIL and calls `task_update_status`. Only this task and only your role's transitions are allowed; anything else is refused and recorded.";

/// At most `SHOWN_CHARS` characters of `s`.
fn shown(s: &str) -> String {
    if s.chars().count() <= SHOWN_CHARS {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(SHOWN_CHARS).collect();
        t.push('…');
        t
    }
}

/// At most `n` characters of `s`, saying how much was left out.
fn clip(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        return s.to_owned();
    }
    let mut t: String = s.chars().take(n).collect();
    t.push_str(&format!("… ({} more characters)", count - n));
    t
}

/// Clips the text of an error result (the SDK's argument errors echo what was sent).
fn clip_error(mut resp: CallToolResponse) -> CallToolResponse {
    if let CallToolResponse::Complete(r) = &mut resp
        && r.is_error == Some(true)
    {
        for c in &mut r.content {
            if let ContentBlock::Text(t) = c {
                t.text = clip(&t.text, MAX_ERROR_CHARS);
            }
        }
    }
    resp
}

/// How long after a call the memory it freed is handed back: long enough for its answer
/// to be written (and its buffers freed), short enough that a burst of calls costs one
/// trim a second at most.
const TRIM_AFTER: Duration = Duration::from_secs(1);

/// Hands the memory calls freed back to the operating system, once after each burst of
/// calls (never while idle). glibc keeps what a call frees in its blocking thread's
/// arena: without this, a server that listed 10,000 tasks now and then sat at 435-527 MB
/// (`bench/mcp_memory.sh`), with fixed malloc thresholds alone at 174 MB after 20 lists.
async fn trim_after_calls(inner: Arc<Inner>) {
    loop {
        inner.worked.notified().await;
        tokio::time::sleep(TRIM_AFTER).await;
        let _ = tokio::task::spawn_blocking(warden_sys::release_free_memory).await;
    }
}

/// A successful tool result: pretty JSON text, and the object as structured content.
fn ok_result(v: Value) -> CallToolResult {
    let text = serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string());
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    if v.is_object() {
        r.structured_content = Some(v);
    }
    r
}

/// A refusal: `isError`, the CLI's message as text, and `{error, exit_code, detail}`.
fn err_result(e: &Failure) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(clip(&e.text(), MAX_ERROR_CHARS))]);
    r.structured_content = Some(json!({
        "error": clip(&e.headline(), MAX_ERROR_CHARS),
        "exit_code": e.code,
        "detail": e.detail.as_deref().map(|d| clip(d, MAX_ERROR_CHARS)),
    }));
    r
}

fn result(r: Result<Value, Failure>) -> CallToolResult {
    match r {
        Ok(v) => ok_result(v),
        Err(e) => err_result(&e),
    }
}

/// The first text argument longer than [`MAX_TEXT_BYTES`], as `(path, bytes)`.
fn oversized(v: &Value, path: &str) -> Option<(String, usize)> {
    match v {
        Value::String(s) if s.len() > MAX_TEXT_BYTES => Some((path.to_owned(), s.len())),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, x)| oversized(x, &format!("{path}[{i}]"))),
        Value::Object(m) => m.iter().find_map(|(k, x)| {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            if k.len() > MAX_TEXT_BYTES {
                return Some((p, k.len()));
            }
            oversized(x, &p)
        }),
        _ => None,
    }
}

struct Inner {
    ws: Workspace,
    role: Role,
    task: Option<TaskId>,
    session: Option<SessionRole>,
    actor: Actor,
    /// Told after every call, so the memory the call freed goes back to the system.
    worked: tokio::sync::Notify,
    /// The requests read and answered, and the calls running (see `framing::Replies`).
    replies: Arc<crate::framing::Replies>,
}

/// Warden's MCP server for one role.
#[derive(Clone)]
pub struct WardenServer {
    inner: Arc<Inner>,
    tools: ToolRouter<WardenServer>,
    /// Tool names only the orchestrator has (an agent asking for one is recorded).
    orchestrator_only: Arc<Vec<String>>,
}

impl std::fmt::Debug for WardenServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WardenServer")
            .field("root", &self.inner.ws.root)
            .field("role", &self.inner.role)
            .field("task", &self.inner.task)
            .finish()
    }
}

impl WardenServer {
    /// A server for `role`. The agent role is bound to `task`, which must exist;
    /// `session` (worker or reviewer, from `WARDEN_ROLE`) decides which transitions it
    /// may request (when absent, the task's current status decides).
    pub fn new(
        ws: Workspace,
        role: Role,
        task: Option<TaskId>,
        session: Option<SessionRole>,
    ) -> Result<WardenServer, Failure> {
        let in_session = std::env::var_os("WARDEN_ROLE").is_some_and(|r| !r.is_empty());
        let actor = if role == Role::Agent || in_session {
            Actor::Agent
        } else {
            Actor::Person
        };
        let app = App::open(ws.clone(), actor)?;
        let mut session = session;
        let task = match (role, task) {
            (Role::Agent, None) => {
                return Err(Failure::usage(
                    "the agent role is bound to one task; pass --task ID or set WARDEN_TASK_ID",
                ));
            }
            (Role::Agent, Some(t)) => {
                let status = app.get(&t)?.status();
                // Without `WARDEN_ROLE` (a session started by hand) the role is the one
                // the task's status calls for now, kept for the server's life. Before,
                // it followed the status: the worker that completed the task was its
                // reviewer a call later and passed its own work.
                session.get_or_insert(
                    warden_core::ops::role_for(status).unwrap_or(SessionRole::Worker),
                );
                Some(t)
            }
            (Role::Orchestrator, t) => t,
        };
        let orchestrator = Self::orchestrator_router();
        let agent = Self::agent_router();
        let orchestrator_only: Vec<String> = orchestrator
            .list_all()
            .into_iter()
            .map(|t| t.name.to_string())
            .filter(|n| !agent.has_route(n))
            .collect();
        Ok(WardenServer {
            inner: Arc::new(Inner {
                ws,
                role,
                task,
                session,
                actor,
                worked: tokio::sync::Notify::new(),
                replies: Arc::default(),
            }),
            tools: match role {
                Role::Orchestrator => orchestrator,
                Role::Agent => agent,
            },
            orchestrator_only: Arc::new(orchestrator_only),
        })
    }

    /// Serves on stdin/stdout until the client closes the connection.
    pub async fn serve_stdio(self) -> Result<(), Failure> {
        tokio::spawn(trim_after_calls(Arc::clone(&self.inner)));
        let replies = Arc::clone(&self.inner.replies);
        let running = self
            .serve((
                crate::framing::bounded_answering(
                    tokio::io::stdin(),
                    crate::framing::MAX_MESSAGE_BYTES,
                    Some(Arc::clone(&replies)),
                ),
                crate::framing::Counted::new(tokio::io::stdout(), replies),
            ))
            .await;
        let running = match running {
            Ok(r) => r,
            // A client that went away before it began: nothing was asked, nothing wrong
            // on this side (it was exit 5, "internal").
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
                warden_store::say!(
                    "warden mcp: the client closed the connection before it initialized the session; nothing was served"
                );
                return Ok(());
            }
            // The client's mistake, said in a line (it was exit 5 and a Rust debug dump
            // of the message).
            Err(rmcp::service::ServerInitializeError::ExpectedInitializeRequest(first)) => {
                let what = first
                    .and_then(|m| serde_json::to_value(m).ok())
                    .and_then(|v| v.get("method").and_then(|m| m.as_str()).map(str::to_owned))
                    .map_or_else(
                        || "a message that is not a request".to_owned(),
                        |m| format!("`{m}`"),
                    );
                return Err(Failure::usage(format!(
                    "the MCP client's first message was {what}, not `initialize`: a client starts the session with an initialize request, then the notifications/initialized notification"
                )));
            }
            Err(e) => {
                return Err(Failure::internal(format!(
                    "the MCP session could not start: {e}"
                )));
            }
        };
        running
            .waiting()
            .await
            .map_err(|e| Failure::internal(format!("the MCP server stopped abnormally: {e}")))?;
        Ok(())
    }

    /// Runs `f` on a blocking thread with a freshly opened workspace.
    async fn exec<T, F>(&self, f: F) -> Result<T, Failure>
    where
        T: Send + 'static,
        F: FnOnce(&App) -> Result<T, Failure> + Send + 'static,
    {
        let ws = self.inner.ws.clone();
        let actor = self.inner.actor;
        let replies = &self.inner.replies;
        replies.call_started();
        let done = tokio::task::spawn_blocking(move || {
            let app = App::open(ws, actor)?;
            f(&app)
        })
        .await;
        replies.call_ended();
        self.inner.worked.notify_one();
        match done {
            Ok(r) => r,
            Err(e) => Err(Failure::internal(format!(
                "internal error: the call failed ({e}); this is a Warden bug, please report it"
            ))),
        }
    }

    /// The agent's own task.
    fn own(&self) -> Result<TaskId, Failure> {
        self.inner
            .task
            .clone()
            .ok_or_else(|| Failure::usage("this MCP session is not bound to a task"))
    }

    /// Records a refused agent request on its own task; the refusal stands even when
    /// the record cannot be written.
    async fn tamper(&self, field: String, asked: String, allowed: String) {
        let Ok(own) = self.own() else { return };
        let _ = self
            .exec(move |app| app.record_tamper(&own, field, asked, allowed))
            .await;
    }

    /// The task an agent's call targets: its own, or a refusal that is recorded.
    async fn target(&self, tool: &str, id: Option<String>) -> Result<TaskId, Failure> {
        let own = self.own()?;
        match id {
            None => Ok(own),
            Some(s) if s == own.as_str() => Ok(own),
            Some(s) => {
                let asked = shown(&s);
                self.tamper(
                    format!("mcp:{tool}"),
                    format!("id={asked}"),
                    format!("id={own}"),
                )
                .await;
                Err(Failure::refused(format!(
                    "this MCP session belongs to task {own}; an agent may act only on its own task, not {asked:?}"
                )))
            }
        }
    }

    /// The agent's session role: `WARDEN_ROLE`, else the one its task's status called
    /// for when the server started (see `new`), else the status's now, else worker.
    async fn session_role(&self, id: &TaskId) -> SessionRole {
        if let Some(r) = self.inner.session {
            return r;
        }
        let id = id.clone();
        self.exec(move |app| Ok(app.get(&id)?.status()))
            .await
            .ok()
            .and_then(warden_core::ops::role_for)
            .unwrap_or(SessionRole::Worker)
    }

    /// Checks that an agent may request `to` from its task's status now (the shared
    /// rule of `warden_app::scope`); a forbidden request is recorded.
    async fn allowed(&self, tool: &str, id: &TaskId, to: &str) -> Result<Status, Failure> {
        let role = self.session_role(id).await;
        let targets = role_targets(role);
        let own = id.clone();
        let from = self.exec(move |app| Ok(app.get(&own)?.status())).await.ok();
        match to.parse::<Status>() {
            // A task that cannot be read fails the transition itself, with its reason.
            Ok(s) if from.map_or(targets.contains(&s), |f| may_move(role, f, s)) => Ok(s),
            _ => {
                let asked = shown(to);
                // What was kept is the task's status; the rule is said beside it (before,
                // the allowed targets stood alone where the kept value belongs).
                let kept = format!(
                    "{} (a {role} moves only to {})",
                    from.map_or_else(|| "its status".to_owned(), |f| f.to_string()),
                    names(targets)
                );
                self.tamper(format!("mcp:{tool}"), asked.clone(), kept)
                    .await;
                Err(Failure::refused(match from {
                    Some(f)
                        if targets.iter().any(|t| t.as_str() == to)
                            && warden_core::ops::role_for(f) != Some(role) =>
                    {
                        format!(
                            "task {id} is {f}, which is not a {role}'s to move; a person decides"
                        )
                    }
                    _ => format!(
                        "a {role} may request only {} through MCP, not {asked:?}; a person decides everything else",
                        names(targets)
                    ),
                }))
            }
        }
    }

    /// The role prompts and one that follows the task's status.
    fn prompt_list(&self) -> Vec<Prompt> {
        let id_arg = || {
            PromptArgument::new("id")
                .with_description(match self.inner.role {
                    Role::Orchestrator => "The task id.",
                    Role::Agent => "The task id (default: this session's own task).",
                })
                .with_required(self.inner.role == Role::Orchestrator)
        };
        let mut v = vec![Prompt::new(
            "task",
            Some(
                "The prompt for the task's current status and role (worker, worker-respawn, reviewer, clarification or stuck), with its memory embedded: what an agent session working on the task is told.",
            ),
            Some(vec![id_arg()]),
        )];
        for k in PromptKind::ALL {
            let when = match k {
                PromptKind::Worker => "a worker's first session on a working task",
                PromptKind::WorkerRespawn => "a worker fixing what a failed review found",
                PromptKind::Reviewer => "the review agent of a task in agent-review",
                PromptKind::Clarification => "an agent waiting for a person's answer",
                PromptKind::StuckRespawn => "an agent resuming a stuck task",
                PromptKind::Direct => "the agent of a direct task (no review; the checks decide)",
            };
            v.push(Prompt::new(
                k.as_str(),
                Some(format!(
                    "The {} prompt: {when}. Refused when the task's status calls for another prompt.",
                    k.as_str()
                )),
                Some(vec![id_arg()]),
            ));
        }
        v
    }
}

fn cache_hint(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// The orchestrator's tools: every tool, on every task.
#[tool_router(router = orchestrator_router)]
impl WardenServer {
    #[tool(
        name = "plan_show",
        description = "Show the whole task tree with each task's status, passes and attempts, children nested under parents. Use it first to understand the project's structure; use task_list for the full details of every task.",
        annotations(read_only_hint = true)
    )]
    async fn o_plan_show(&self, Parameters(_): Parameters<NoParams>) -> CallToolResult {
        result(self.exec(actions::plan_show).await)
    }

    #[tool(
        name = "plan_export",
        description = "Export the whole task tree in the flat shape plan_import and plan_apply take ({\"as_of_event\": N, \"tasks\": [...]}, parents before children). Edit it and send it back to plan_apply, keeping as_of_event: a task the edit removes that changed after the export is then a conflict, not a deletion of work you never saw.",
        annotations(read_only_hint = true)
    )]
    async fn o_plan_export(&self, Parameters(_): Parameters<NoParams>) -> CallToolResult {
        result(self.exec(actions::plan_export).await)
    }

    #[tool(
        name = "plan_import",
        description = "Import a plan: new tasks in the flat shape {\"tasks\": [{\"id\", \"title\", \"parent\", \"depends_on\", \"work\" | \"agent\", \"prechecks\", \"postchecks\", ...}]}. All or nothing: if any task is invalid or already exists, nothing is imported and every problem is listed. Use it to create many tasks at once; use task_create for one.",
        annotations(destructive_hint = false)
    )]
    async fn o_plan_import(&self, Parameters(p): Parameters<ImportParams>) -> CallToolResult {
        result(self.exec(move |e| actions::plan_import(e, p.plan)).await)
    }

    #[tool(
        name = "plan_next",
        description = "Name the next leaf task to work on (the leftmost open leaf whose dependencies are done) and whether the plan as a whole is open, complete or stuck; a stuck plan lists in `stuck_on` the tasks a person must act on first (stuck leaves, dependencies that can never be done). Use it to decide what to start next.",
        annotations(read_only_hint = true)
    )]
    async fn o_plan_next(&self, Parameters(_): Parameters<NoParams>) -> CallToolResult {
        result(self.exec(actions::plan_next).await)
    }

    #[tool(
        name = "plan_apply",
        description = "Reconcile a task tree an agent edited (seed 000): `tree` is the edited tree in the shape plan_export gives (keep its as_of_event), `id` the node the agent worked on, `status` what it reports (done, retry or decomposed), `guard` the guard's outcome (pass, fail or skipped; required with done). Runner-owned fields edited in the tree are ignored, restored and recorded; parents' passes are derived.",
        annotations(destructive_hint = true)
    )]
    async fn o_plan_apply(&self, Parameters(p): Parameters<ApplyParams>) -> CallToolResult {
        result(
            self.exec(move |e| {
                actions::plan_apply(e, p.tree, &p.id, &p.status, p.guard.as_deref())
            })
            .await,
        )
    }

    #[tool(
        name = "task_list",
        description = "List tasks (sorted by id) with their status, gate, attempts, phases and specs, optionally only those in one status (e.g. `stuck` to find what needs a person). Answers a page of at most `limit` tasks (default 200), `total` (every task that matches) and `next`: pass it as `after` for the following page; null means the list is complete.",
        annotations(read_only_hint = true)
    )]
    async fn o_task_list(&self, Parameters(p): Parameters<ListParams>) -> CallToolResult {
        result(
            self.exec(move |e| {
                actions::task_list(e, p.status.as_deref(), p.after.as_deref(), p.limit)
            })
            .await,
        )
    }

    #[tool(
        name = "task_get",
        description = "Get one task: status, gate, passes, attempts, crash count, review round, phases, resume point, specs, session and last failure. Use it before deciding what to do with a task.",
        annotations(read_only_hint = true)
    )]
    async fn o_task_get(&self, Parameters(p): Parameters<IdParam>) -> CallToolResult {
        result(
            self.exec(move |e| actions::task_get(e, &actions::task_id(&p.id)?))
                .await,
        )
    }

    #[tool(
        name = "task_create",
        description = "Create one task (status pending; its TASK.md is created). Give `work` as {\"shell\": CMD}, {\"process\": [ARGV...]} or {\"agent\": INSTRUCTIONS}; shell and process work default to the direct workflow (the guard decides), agent work to the review workflow (artifact-gated). `postchecks` are the guard that must pass before the work is accepted.",
        annotations(destructive_hint = false)
    )]
    async fn o_task_create(&self, Parameters(p): Parameters<CreateParams>) -> CallToolResult {
        result(self.exec(move |e| actions::task_create(e, p)).await)
    }

    #[tool(
        name = "task_update_status",
        description = "Move a task to a new status, checked against its workflow and artifact gates: working → agent-review needs a non-empty `## Handoff` in TASK.md and passing postchecks; agent-review → reviewing needs a `## Review` verdict PASS; agent-review → working or stuck needs FAIL. A refused transition changes nothing and says why.",
        annotations(destructive_hint = true)
    )]
    async fn o_task_update_status(
        &self,
        Parameters(p): Parameters<UpdateParams>,
    ) -> CallToolResult {
        result(
            self.exec(move |e| {
                let req = Transition {
                    id: actions::task_id(&p.id)?,
                    to: actions::status(&p.status)?,
                    reason: p.reason,
                    request_id: p.request_id,
                };
                actions::transition(e, &req)
            })
            .await,
        )
    }

    #[tool(
        name = "task_complete",
        description = "Hand a working task over to review (working → agent-review): needs a non-empty `## Handoff` section in its TASK.md, then runs its postchecks. A failed check charges an attempt and returns its output; at the last attempt the task becomes stuck.",
        annotations(destructive_hint = true)
    )]
    async fn o_task_complete(&self, Parameters(p): Parameters<CompleteParams>) -> CallToolResult {
        result(
            self.exec(move |e| {
                let req = Transition {
                    request_id: p.request_id,
                    ..Transition::to(actions::task_id(&p.id)?, Status::AgentReview)
                };
                actions::transition(e, &req)
            })
            .await,
        )
    }

    #[tool(
        name = "task_retry",
        description = "Run a stuck task again (a person's decision): attempts and crashes reset, the task goes back to working and resumes from the earliest phase that failed or changed. Optionally replace its specs: `new_work`, `new_prechecks`, `new_postchecks` are WorkSpec objects ({\"shell\": ..}, {\"process\": [..]}, {\"agent\": ..}); `null` removes a check; leaving a key out keeps it. `clear_worktree` resets the worktree and runs every phase again.",
        annotations(destructive_hint = true)
    )]
    async fn o_task_retry(&self, Parameters(p): Parameters<RetryParams>) -> CallToolResult {
        result(self.exec(move |e| actions::task_retry(e, p)).await)
    }

    #[tool(
        name = "task_edit",
        description = "Change a task's place in the plan (a person's decision): `title`, `depends_on` (ids to add), `drop_depends_on` (ids to remove), `parent` (null makes it a root), `order`, `max_attempts`; what is left out is kept. The tree's rules hold as on import (every task named exists, no cycle, no dependency that can never be met). It is how a plan stuck on a cancelled task moves on: drop that dependency where `plan_next`'s `stuck_on` says it is needed. Answers the task and the fields changed, with their values before and after.",
        annotations(destructive_hint = false)
    )]
    async fn o_task_edit(&self, Parameters(p): Parameters<EditParams>) -> CallToolResult {
        result(self.exec(move |e| actions::task_edit(e, p)).await)
    }

    #[tool(
        name = "task_approve",
        description = "Approve a task in reviewing (a person's decision): it becomes done and its branch is merged into the base. Read its `## Review` first (`task_get`, or the TASK.md resource). Refused for any other status; a failed merge refuses and leaves it in review.",
        annotations(destructive_hint = false)
    )]
    async fn o_task_approve(&self, Parameters(p): Parameters<ApproveParams>) -> CallToolResult {
        result(self.exec(move |e| actions::task_approve(e, p)).await)
    }

    #[tool(
        name = "task_reject",
        description = "Reject a task in reviewing (a person's decision): it goes back to working, and `reason` (what the worker must change) is in the worker's next prompt. Refused for any other status; a blank reason is refused.",
        annotations(destructive_hint = false)
    )]
    async fn o_task_reject(&self, Parameters(p): Parameters<RejectParams>) -> CallToolResult {
        result(self.exec(move |e| actions::task_reject(e, p)).await)
    }

    #[tool(
        name = "status",
        description = "The one screen a person opens first: what needs a person (reviews to approve, questions, stuck tasks, dead sessions, each with the command that acts on it), what runs, the supervisors alive, and the progress.",
        annotations(read_only_hint = true)
    )]
    async fn o_status(&self) -> CallToolResult {
        result(self.exec(actions::status_view).await)
    }

    #[tool(
        name = "task_cancel",
        description = "Cancel a task (terminal: it never runs again). Use it for work that is no longer wanted.",
        annotations(destructive_hint = true)
    )]
    async fn o_task_cancel(&self, Parameters(p): Parameters<CancelParams>) -> CallToolResult {
        result(
            self.exec(move |e| {
                let req = Transition {
                    reason: p.reason,
                    ..Transition::to(actions::task_id(&p.id)?, Status::Cancelled)
                };
                actions::transition(e, &req)
            })
            .await,
        )
    }

    #[tool(
        name = "task_spawn",
        description = "Ask for a new agent session for a task whose session is dead or was never started (working, agent-review, clarification or stuck). The running supervisor starts it at once, otherwise the next `warden run` does. Refused while a session is alive.",
        annotations(destructive_hint = false)
    )]
    async fn o_task_spawn(&self, Parameters(p): Parameters<IdParam>) -> CallToolResult {
        result(
            self.exec(move |e| actions::task_spawn(e, &actions::task_id(&p.id)?))
                .await,
        )
    }

    #[tool(
        name = "memory_get",
        description = "Get a task's structured memory: goals, constraints, decisions, hypotheses, history, open_issues (lists) and next_focus. Agents' prompts embed it.",
        annotations(read_only_hint = true)
    )]
    async fn o_memory_get(&self, Parameters(p): Parameters<IdParam>) -> CallToolResult {
        result(
            self.exec(move |e| actions::memory_get(e, &actions::task_id(&p.id)?))
                .await,
        )
    }

    #[tool(
        name = "memory_merge",
        description = "Add to a task's memory: list items are appended, a non-empty next_focus replaces the focus; strings are cut to the configured length and only the latest history entries are kept. Returns the merged memory.",
        annotations(destructive_hint = false)
    )]
    async fn o_memory_merge(
        &self,
        Parameters(p): Parameters<MemoryParams<String>>,
    ) -> CallToolResult {
        result(
            self.exec(move |e| {
                actions::memory_merge(
                    e,
                    &actions::task_id(&p.id)?,
                    p.delta(),
                    p.request_id.as_deref(),
                )
            })
            .await,
        )
    }

    #[tool(
        name = "history",
        description = "The event history, oldest first: transitions, guard runs, retries, sessions, memory merges and ignored tampering, with who did what and why. Give `id` for one task, `last` for only the most recent events.",
        annotations(read_only_hint = true)
    )]
    async fn o_history(&self, Parameters(p): Parameters<HistoryParams>) -> CallToolResult {
        result(
            self.exec(move |e| actions::history(e, p.id.as_deref(), p.last))
                .await,
        )
    }

    #[tool(
        name = "state",
        description = "The project's state as STATE.md: progress bar, every task's status and gate, recent results and what to resume. The quickest overview of the whole project.",
        annotations(read_only_hint = true)
    )]
    async fn o_state(&self, Parameters(_): Parameters<NoParams>) -> CallToolResult {
        match self.exec(|app| app.state_md()).await {
            Ok(text) => {
                let mut r = CallToolResult::success(vec![ContentBlock::text(text.clone())]);
                r.structured_content = Some(json!({ "state_md": text }));
                r
            }
            Err(e) => err_result(&e),
        }
    }
}

/// The agent's tools: its own task only.
#[tool_router(router = agent_router)]
impl WardenServer {
    #[tool(
        name = "task_get",
        description = "Get this session's task: status, attempts, review round, phases, specs and last failure. Leave out `id` (only your own task is allowed).",
        annotations(read_only_hint = true)
    )]
    async fn a_task_get(&self, Parameters(p): Parameters<OwnIdParam>) -> CallToolResult {
        let id = match self.target("task_get", p.id).await {
            Ok(id) => id,
            Err(e) => return err_result(&e),
        };
        result(self.exec(move |e| actions::task_get(e, &id)).await)
    }

    #[tool(
        name = "task_update_status",
        description = "Request a transition of this session's task. A worker may request agent-review (same as task_complete) or clarification (it needs a person's answer); a reviewer reviewing (after `## Review` says PASS), working or stuck (after FAIL, by review round). Write the artifact in TASK.md first; Warden checks it.",
        annotations(destructive_hint = true)
    )]
    async fn a_task_update_status(
        &self,
        Parameters(p): Parameters<AgentUpdateParams>,
    ) -> CallToolResult {
        let id = match self.target("task_update_status", p.id).await {
            Ok(id) => id,
            Err(e) => return err_result(&e),
        };
        let to = match self.allowed("task_update_status", &id, &p.status).await {
            Ok(s) => s,
            Err(e) => return err_result(&e),
        };
        result(
            self.exec(move |e| {
                let req = Transition {
                    reason: p.reason,
                    ..Transition::to(id, to)
                };
                actions::transition(e, &req)
            })
            .await,
        )
    }

    #[tool(
        name = "task_complete",
        description = "Hand your finished work over to review: first write a non-empty `## Handoff` section in TASK.md (what you did, how to check it), then call this. The postchecks run; if they fail, the output comes back and an attempt is charged: fix the problem and call it again.",
        annotations(destructive_hint = true)
    )]
    async fn a_task_complete(&self, Parameters(p): Parameters<OwnIdParam>) -> CallToolResult {
        let id = match self.target("task_complete", p.id).await {
            Ok(id) => id,
            Err(e) => return err_result(&e),
        };
        let to = match self.allowed("task_complete", &id, "agent-review").await {
            Ok(s) => s,
            Err(e) => return err_result(&e),
        };
        result(
            self.exec(move |e| actions::transition(e, &Transition::to(id, to)))
                .await,
        )
    }

    #[tool(
        name = "memory_get",
        description = "Get this task's memory: goals, constraints, decisions, hypotheses, history, open_issues and next_focus.",
        annotations(read_only_hint = true)
    )]
    async fn a_memory_get(&self, Parameters(p): Parameters<OwnIdParam>) -> CallToolResult {
        let id = match self.target("memory_get", p.id).await {
            Ok(id) => id,
            Err(e) => return err_result(&e),
        };
        result(self.exec(move |e| actions::memory_get(e, &id)).await)
    }

    #[tool(
        name = "memory_merge",
        description = "Record what you learned so the next session starts from it: decisions (with reasons), constraints, hypotheses, open_issues, a history entry, and next_focus (what to do next). Lists are appended; keep items short.",
        annotations(destructive_hint = false)
    )]
    async fn a_memory_merge(
        &self,
        Parameters(p): Parameters<MemoryParams<Option<String>>>,
    ) -> CallToolResult {
        let delta = p.delta();
        let request_id = p.request_id;
        let id = match self.target("memory_merge", p.id).await {
            Ok(id) => id,
            Err(e) => return err_result(&e),
        };
        result(
            self.exec(move |e| actions::memory_merge(e, &id, delta, request_id.as_deref()))
                .await,
        )
    }

    #[tool(
        name = "prompt",
        description = "Your instructions for this task's current status and role: what to do, which artifact to write in TASK.md and which tool to call when done, with the task's memory embedded.",
        annotations(read_only_hint = true)
    )]
    async fn a_prompt(&self, Parameters(p): Parameters<OwnIdParam>) -> CallToolResult {
        let id = match self.target("prompt", p.id).await {
            Ok(id) => id,
            Err(e) => return err_result(&e),
        };
        result(self.exec(move |e| actions::prompt(e, &id)).await)
    }
}

/// What an MCP request method of the protocol needs as its params, or `None` for a
/// method MCP does not define.
fn standard_params(method: &str) -> Option<&'static str> {
    Some(match method {
        "tools/call" => r#"{"name": TOOL, "arguments": {…}}"#,
        "prompts/get" => r#"{"name": PROMPT, "arguments": {…}}"#,
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => r#"{"uri": URI}"#,
        "logging/setLevel" => r#"{"level": LEVEL}"#,
        "completion/complete" => r#"{"ref": {…}, "argument": {"name": …, "value": …}}"#,
        "initialize" => {
            r#"{"protocolVersion": …, "capabilities": {…}, "clientInfo": {"name": …, "version": …}}"#
        }
        "ping" | "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" => {
            r#"no params, or {"cursor": STRING} where it pages"#
        }
        _ => return None,
    })
}

impl ServerHandler for WardenServer {
    /// The stand-in for a message over the size limit (see `framing`): answered with an
    /// error naming the size, so the client is not left waiting.
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        if request.method == crate::framing::INVALID_METHOD {
            let p = request.params.unwrap_or_default();
            let code = p["code"].as_i64().unwrap_or(-32600) as i32;
            let message = p["message"]
                .as_str()
                .unwrap_or("invalid request")
                .to_owned();
            return Err(ErrorData::new(rmcp::model::ErrorCode(code), message, None));
        }
        if request.method != crate::framing::OVERSIZED_METHOD {
            // An MCP method lands here only when its params did not fit (rmcp matches it
            // otherwise): "no method tools/call" sent the client looking for the wrong
            // fault.
            if let Some(wants) = standard_params(&request.method) {
                return Err(ErrorData::invalid_params(
                    format!(
                        "the params of {} do not fit MCP's schema; send {wants}",
                        request.method
                    ),
                    None,
                ));
            }
            return Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("no method {}", shown(&request.method)),
                None,
            ));
        }
        let p = request.params.unwrap_or_default();
        let bytes = p["bytes"].as_u64().unwrap_or(0);
        let method = p["method"].as_str().unwrap_or("");
        Err(ErrorData::invalid_request(
            format!(
                "the {} message is {bytes} bytes, over Warden's {} MiB limit; send less (a plan of that size goes in a file: `warden plan import FILE`)",
                if method.is_empty() {
                    "request".to_owned()
                } else {
                    shown(method)
                },
                crate::framing::MAX_MESSAGE_BYTES / (1024 * 1024)
            ),
            None,
        ))
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
        .with_server_info(Implementation::new("warden", env!("CARGO_PKG_VERSION")))
        .with_instructions(match self.inner.role {
            Role::Orchestrator => INSTRUCTIONS_ORCHESTRATOR,
            Role::Agent => INSTRUCTIONS_AGENT,
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(args) = &request.arguments
            && let Some((path, n)) = oversized(&Value::Object(args.clone()), "")
        {
            let e = Failure::refused(format!(
                "argument {} of {} is {n} bytes; text arguments are limited to 1 MiB ({MAX_TEXT_BYTES} bytes), send a shorter one",
                shown(&path),
                shown(&request.name)
            ));
            return Ok(err_result(&e).into());
        }
        if self.inner.role == Role::Agent
            && self
                .orchestrator_only
                .iter()
                .any(|n| n.as_str() == request.name.as_ref())
        {
            let name = request.name.to_string();
            let args = request
                .arguments
                .as_ref()
                .map(|a| Value::Object(a.clone()).to_string())
                .unwrap_or_default();
            self.tamper(
                format!("mcp:{name}"),
                shown(&format!("{name} {args}")),
                "not available to agents".into(),
            )
            .await;
            let e = Failure::refused(format!(
                "{name} is not available to an agent session; ask a person (agents may use task_get, task_update_status, task_complete, memory_get, memory_merge and prompt)"
            ));
            return Ok(err_result(&e).into());
        }
        let tcc = ToolCallContext::new(self, request, context);
        self.tools.call(tcc).await.map(clip_error)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut r = ListToolsResult::with_all_items(self.tools.list_all());
        if cache_hint(&context) {
            r = r.with_ttl_ms(0).with_cache_scope(CacheScope::Private);
        }
        Ok(r)
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.tools.get(name).cloned()
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        // STATE.md lists every task: a person's view, not an agent's (as the `state` tool).
        let mut items = Vec::new();
        if self.inner.role != Role::Agent {
            items.push(
                Resource::new("warden://state", "state")
                    .with_title("STATE.md")
                    .with_description(
                        "The project's state: progress, every task's status and gate, recent results.",
                    )
                    .with_mime_type("text/markdown"),
            );
        }
        let ids: Vec<TaskId> = match (&self.inner.role, &self.inner.task) {
            (Role::Agent, Some(t)) => vec![t.clone()],
            _ => self
                .exec(|app| Ok(app.tasks()?.iter().map(|t| t.id().clone()).collect()))
                .await
                .map_err(|e| ErrorData::internal_error(e.text(), None))?,
        };
        for id in ids {
            items.push(
                Resource::new(format!("warden://task/{id}"), format!("task/{id}"))
                    .with_title(format!("TASK.md of {id}"))
                    .with_description("The agent-facing file of the task: frontmatter mirror and sections (Handoff, Review, ...).")
                    .with_mime_type("text/markdown"),
            );
        }
        let mut r = ListResourcesResult::with_all_items(items);
        if cache_hint(&context) {
            r = r.with_ttl_ms(0).with_cache_scope(CacheScope::Private);
        }
        Ok(r)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let mut r = ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("warden://task/{id}", "task")
                .with_title("TASK.md of a task")
                .with_description("The agent-facing file of task {id}.")
                .with_mime_type("text/markdown"),
        ]);
        if cache_hint(&context) {
            r = r.with_ttl_ms(0).with_cache_scope(CacheScope::Private);
        }
        Ok(r)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let text = if uri == "warden://state" && self.inner.role == Role::Agent {
            self.tamper(
                "mcp:resource:state".into(),
                "warden://state".into(),
                "not available to agents".into(),
            )
            .await;
            Err(Failure::refused(
                "warden://state is not available to an agent session (it lists every task); read your own task at warden://task/{id}",
            ))
        } else if uri == "warden://state" {
            self.exec(|app| app.state_md()).await
        } else if let Some(raw) = uri.strip_prefix("warden://task/") {
            let raw = raw.to_owned();
            let id = if self.inner.role == Role::Agent {
                self.target("resource:task", Some(raw)).await
            } else {
                actions::task_id(&raw)
            };
            match id {
                Ok(id) => self.exec(move |app| app.task_md(&id)).await,
                Err(e) => Err(e),
            }
        } else {
            return Err(ErrorData::resource_not_found(
                format!(
                    "no resource {}; use warden://state or warden://task/{{id}}",
                    shown(&uri)
                ),
                None,
            ));
        };
        match text {
            Ok(t) => Ok(ReadResourceResult::new(vec![
                ResourceContents::text(t, uri).with_mime_type("text/markdown"),
            ])
            .into()),
            Err(e) if e.code == ExitCode::NotFound => {
                Err(ErrorData::resource_not_found(e.text(), None))
            }
            Err(e) if matches!(e.code, ExitCode::Refused | ExitCode::Usage) => {
                Err(ErrorData::invalid_params(e.text(), None))
            }
            Err(e) => Err(ErrorData::internal_error(e.text(), None)),
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let mut r = ListPromptsResult::with_all_items(self.prompt_list());
        if cache_hint(&context) {
            r = r.with_ttl_ms(0).with_cache_scope(CacheScope::Private);
        }
        Ok(r)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let name = request.name;
        let wanted = match name.as_str() {
            "task" => None,
            n => match PromptKind::parse(n) {
                Some(k) => Some(k),
                None => {
                    return Err(ErrorData::invalid_params(
                        format!(
                            "no prompt {}; use task, worker, worker-respawn, reviewer, clarification or stuck",
                            shown(n)
                        ),
                        None,
                    ));
                }
            },
        };
        let arg = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("id"))
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        let id = match self.inner.role {
            Role::Agent => self.target(&format!("prompt:{name}"), arg).await,
            Role::Orchestrator => match arg {
                Some(s) => actions::task_id(&s),
                None => Err(Failure::usage(
                    "the prompt needs the argument id (the task)",
                )),
            },
        }
        .map_err(|e| ErrorData::invalid_params(e.text(), None))?;
        let rendered = self
            .exec(move |app| {
                let t = app.get(&id)?;
                let kind = warden_core::prompt::prompt_kind(&t);
                if let Some(w) = wanted
                    && kind != Some(w)
                {
                    return Err(Failure::refused(format!(
                        "task {} is {}, which calls for the {} prompt, not {}; ask for the task prompt",
                        t.id(),
                        t.status(),
                        kind.map(|k| k.as_str()).unwrap_or("no"),
                        w.as_str()
                    )));
                }
                Ok((app.eng.prompt(&t, None)?, kind, t.id().clone()))
            })
            .await;
        match rendered {
            Ok((text, kind, id)) => {
                let mut r = GetPromptResult::new(vec![PromptMessage::new_text(
                    rmcp::model::Role::User,
                    text,
                )]);
                r.description = Some(format!(
                    "The {} prompt of task {id}",
                    kind.map(|k| k.as_str()).unwrap_or("task")
                ));
                Ok(r.into())
            }
            Err(e) if e.code == ExitCode::NotFound => {
                Err(ErrorData::resource_not_found(e.text(), None))
            }
            Err(e) if matches!(e.code, ExitCode::Refused | ExitCode::Usage) => {
                Err(ErrorData::invalid_params(e.text(), None))
            }
            Err(e) => Err(ErrorData::internal_error(e.text(), None)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_text_is_found_wherever_it_is() {
        let big = "x".repeat(MAX_TEXT_BYTES + 1);
        let edge = "é".repeat(MAX_TEXT_BYTES / 2);
        let check = |v: Value, want: Option<&str>| {
            let got = oversized(&v, "");
            assert_eq!(got.as_ref().map(|(p, _)| p.as_str()), want, "{want:?}");
        };
        check(json!({"id": "a", "title": "fine"}), None);
        check(json!({"title": edge}), None);
        check(json!({"title": big}), Some("title"));
        check(json!({"decisions": ["a", big]}), Some("decisions[1]"));
        check(
            json!({"plan": {"tasks": [{"id": "a"}, {"body": big}]}}),
            Some("plan.tasks[1].body"),
        );
        check(json!({ big.clone(): 1 }), Some(big.as_str()));
        check(json!({"n": 1, "b": true, "z": null}), None);
    }

    #[test]
    fn each_role_may_request_only_its_own_targets() {
        let check = |role: SessionRole, to: Status, allowed: bool| {
            assert_eq!(role_targets(role).contains(&to), allowed, "{role} → {to}");
        };
        check(SessionRole::Worker, Status::AgentReview, true);
        check(SessionRole::Worker, Status::Clarification, true);
        check(SessionRole::Worker, Status::Working, true);
        check(SessionRole::Worker, Status::Done, false);
        check(SessionRole::Worker, Status::Reviewing, false);
        check(SessionRole::Worker, Status::Cancelled, false);
        check(SessionRole::Reviewer, Status::Reviewing, true);
        check(SessionRole::Reviewer, Status::Working, true);
        check(SessionRole::Reviewer, Status::Stuck, true);
        check(SessionRole::Reviewer, Status::AgentReview, false);
        check(SessionRole::Reviewer, Status::Done, false);
        for role in SessionRole::ALL {
            for to in role_targets(*role) {
                assert!(
                    !to.is_terminal(),
                    "an agent may never end a task: {role} → {to}"
                );
            }
        }
    }

    #[test]
    fn errors_never_echo_huge_arguments() {
        let huge = "y".repeat(MAX_TEXT_BYTES);
        let e = Failure::usage(format!("unknown status {huge:?}; use one of: …"));
        let r = err_result(&e);
        let text = r.content[0].as_text().map(|t| t.text.clone()).unwrap();
        assert!(
            text.chars().count() < MAX_ERROR_CHARS + 40,
            "{}",
            text.len()
        );
        assert!(
            text.starts_with("error: unknown status \"yyy"),
            "{}",
            &text[..40]
        );
        assert!(
            text.ends_with("more characters)"),
            "{}",
            &text[text.len() - 40..]
        );
        let raw: CallToolResponse =
            CallToolResult::error(vec![ContentBlock::text(format!("unknown field `{huge}`"))])
                .into();
        let CallToolResponse::Complete(r) = clip_error(raw) else {
            panic!("not complete")
        };
        assert!(r.content[0].as_text().unwrap().text.len() < MAX_ERROR_CHARS + 40);
        assert_eq!(clip("short", 10), "short");
    }

    #[test]
    fn shown_keeps_messages_short() {
        assert_eq!(shown("abc"), "abc");
        let long = "ü".repeat(SHOWN_CHARS + 5);
        let s = shown(&long);
        assert_eq!(s.chars().count(), SHOWN_CHARS + 1);
        assert!(s.ends_with('…'));
    }

    #[test]
    fn results_carry_the_message_and_the_exit_code() {
        let e = Failure::not_found("no task x; list tasks with `warden task list`");
        let r = err_result(&e);
        assert_eq!(r.is_error, Some(true));
        let sc = r.structured_content.unwrap();
        assert_eq!(sc["exit_code"], 3);
        let ok = ok_result(json!({"tasks": []}));
        assert_eq!(ok.is_error, Some(false));
        assert_eq!(ok.structured_content, Some(json!({"tasks": []})));
        assert_eq!(ok_result(json!([1])).structured_content, None);
    }
}
