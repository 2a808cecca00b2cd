//! The HTTP surface: the page and its files (embedded in the binary), the board stream,
//! a task's detail and its file stream, and the person's five actions. Each handler
//! parses its input, calls warden-app on a worker, and formats the answer; nothing here
//! decides anything about a task.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use warden_app::task::{RetryTask, Transition};
use warden_app::view::TaskResponse;
use warden_core::failure::Failure;
use warden_core::model::{Status, TaskId};

use crate::error::ApiError;
use crate::security::{self, MAX_BODY};
use crate::{Shared, detail, live};

const INDEX: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");
const FAVICON: &str = include_str!("../assets/favicon.svg");

/// The router with every route and the security middleware.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(index))
        .route(
            "/assets/app.js",
            get(|| asset(APP_JS, "text/javascript; charset=utf-8")),
        )
        .route(
            "/assets/app.css",
            get(|| asset(APP_CSS, "text/css; charset=utf-8")),
        )
        .route("/favicon.svg", get(|| asset(FAVICON, "image/svg+xml")))
        .route("/api/events", get(events))
        .route("/api/tasks/{id}", get(task_detail))
        .route("/api/tasks/{id}/live", get(task_live))
        .route("/api/tasks/{id}/{action}", post(act))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&shared),
            security::guard,
        ))
        .with_state(shared)
}

async fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// The page, with this server's CSRF secret in a meta tag only same-origin script can
/// read.
async fn index(State(s): State<Arc<Shared>>) -> Response {
    let html = INDEX.replace("{{CSRF}}", &s.policy.csrf);
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        html,
    )
        .into_response()
}

async fn not_found() -> ApiError {
    Failure::not_found("no such page; the console lives at /").into()
}

async fn method_not_allowed() -> ApiError {
    ApiError::refused(
        StatusCode::METHOD_NOT_ALLOWED,
        "this address does not take that method: pages are GET, actions are POST",
    )
}

fn parse_id(id: &str) -> Result<TaskId, ApiError> {
    Ok(warden_app::task_id(id)?)
}

fn busy(what: &str) -> ApiError {
    ApiError::refused(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("too many open {what} streams; close some console tabs"),
    )
}

async fn events(State(s): State<Arc<Shared>>) -> Result<Response, ApiError> {
    let permit = Arc::clone(&s.board_streams)
        .try_acquire_owned()
        .map_err(|_| busy("board"))?;
    Ok(live::board_stream(Arc::clone(&s.live), s.shutdown.clone(), permit).into_response())
}

async fn task_detail(
    State(s): State<Arc<Shared>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = parse_id(&path(id)?)?;
    let d = s.pool.run(move |app| detail::read(app, &id)).await?;
    Ok(axum::Json(d).into_response())
}

async fn task_live(
    State(s): State<Arc<Shared>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = parse_id(&path(id)?)?;
    let check = id.clone();
    s.pool.run(move |app| app.get(&check).map(|_| ())).await?;
    let permit = Arc::clone(&s.task_streams)
        .try_acquire_owned()
        .map_err(|_| busy("task"))?;
    Ok(live::task_stream(&s.ws, &id, s.shutdown.clone(), permit).into_response())
}

/// The URL's path parameters, or a JSON failure like every other (axum's own rejection
/// is plain text): a task id that is not UTF-8 once decoded, for one.
fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    p.map(|Path(v)| v).map_err(|e| {
        Failure::usage(format!(
            "the URL's path is not a task's ({}); use the id as `warden task list` shows it",
            e.body_text()
        ))
        .into()
    })
}

/// An action's body: `{}`, or `{"reason": "…"}` for a rejection.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionBody {
    reason: Option<String>,
    /// The task's version the page showed: an action on a task that changed since is
    /// refused as a conflict (409), nothing written.
    version: Option<u64>,
}

/// What an action answers: one line saying what happened, and the task after it.
#[derive(Debug, Serialize)]
struct Acted {
    message: String,
    task: TaskResponse,
}

async fn act(
    State(s): State<Arc<Shared>>,
    parts: Result<Path<(String, String)>, PathRejection>,
    body: Body,
) -> Result<Response, ApiError> {
    let (id, action) = path(parts)?;
    let id = parse_id(&id)?;
    let bytes = axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        ApiError::refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is over {MAX_BODY} bytes"),
        )
    })?;
    let body: ActionBody = if bytes.iter().all(u8::is_ascii_whitespace) {
        ActionBody::default()
    } else {
        serde_json::from_slice(&bytes)
            .map_err(|e| Failure::usage(format!("the body is not an action's JSON: {e}")))?
    };
    // A reason is kept by reject and cancel; the others have nowhere to keep one (it was
    // taken, answered 200 and dropped).
    if body.reason.is_some() && !matches!(action.as_str(), "reject" | "cancel") {
        return Err(Failure::usage(format!(
            "{action} takes no reason (reject and cancel do); send {{}}"
        ))
        .into());
    }
    let acted = s
        .pool
        .run(move |app| {
            let answer = match action.as_str() {
                "approve" => app.approve_seen(&id, body.version)?,
                "reject" => {
                    app.reject_seen(&id, body.reason.as_deref().unwrap_or(""), body.version)?
                }
                "retry" => app.retry_seen(&id, &RetryTask::default(), body.version)?,
                "respawn" => app.respawn_seen(&id, body.version)?,
                "cancel" => app.transition_seen(
                    &Transition {
                        id: id.clone(),
                        to: Status::Cancelled,
                        reason: Some(match body.reason.as_deref().map(str::trim) {
                            Some(r) if !r.is_empty() => {
                                format!("cancelled by a person in the web console: {r}")
                            }
                            _ => "cancelled by a person in the web console".into(),
                        }),
                        request_id: None,
                    },
                    body.version,
                )?,
                other => {
                    return Err(Failure::not_found(format!(
                        "no action {other:?}; the console offers approve, reject, retry, respawn and cancel"
                    )));
                }
            };
            let answer = answer.into_result()?;
            let mut message = one_line(&answer.summary());
            if action == "respawn" {
                message.push_str(
                    " · respawn requested; the running supervisor (or the next `warden run`) starts a new session",
                );
            }
            Ok(Acted {
                message,
                task: app.response(&answer)?,
            })
        })
        .await?;
    Ok(axum::Json(acted).into_response())
}

/// The summary's lines joined into one.
fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" · ")
}
