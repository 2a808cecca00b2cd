//! `warden mcp` through a real MCP client (rmcp's client side) over stdio: the built
//! binary is spawned as a child process, and every result is checked against what the
//! CLI stores and prints for the same request.

use crate::common::{Workspace, bin, command, err_line};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, GetPromptRequestParams, ReadResourceRequestParams,
    ResourceContents,
};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

pub(crate) type Client = RunningService<RoleClient, ()>;

/// Starts `warden mcp ARGS` in the workspace with a clean environment plus `env`.
pub(crate) async fn connect(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Client {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.arg("mcp")
        .args(args)
        .current_dir(&ws.root)
        .env("NO_COLOR", "1");
    for k in crate::common::WARDEN_ENV {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let transport = TokioChildProcess::new(cmd).expect("spawn warden mcp");
    ().serve(transport).await.expect("MCP handshake")
}

/// Calls a tool; protocol errors fail the test (refusals are results).
pub(crate) async fn call(c: &Client, name: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    c.call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("{name}: protocol error {e}"))
}

/// The text of a result.
pub(crate) fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A successful result's JSON.
pub(crate) fn ok(r: &CallToolResult) -> Value {
    assert_ne!(r.is_error, Some(true), "tool failed: {}", text(r));
    serde_json::from_str(&text(r)).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(r)))
}

/// A refusal's first line.
pub(crate) fn refusal(r: &CallToolResult) -> String {
    assert_eq!(
        r.is_error,
        Some(true),
        "expected a refusal, got: {}",
        text(r)
    );
    text(r).lines().next().unwrap_or("").to_owned()
}

/// The `tamper.ignored` events of a task, as `(field, agent_value, true_value)`.
fn tampers(ws: &Workspace, id: &str) -> Vec<(String, String, String)> {
    ws.events("tamper.ignored", Some(id))
        .iter()
        .map(|e| {
            let d = &e["data"];
            (
                d["field"].as_str().unwrap_or("").to_owned(),
                d["agent_value"].as_str().unwrap_or("").to_owned(),
                d["true_value"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

const ORCHESTRATOR_TOOLS: [&str; 21] = [
    "history",
    "memory_get",
    "memory_merge",
    "plan_apply",
    "plan_export",
    "plan_import",
    "plan_next",
    "plan_show",
    "state",
    "status",
    "task_approve",
    "task_cancel",
    "task_complete",
    "task_create",
    "task_edit",
    "task_get",
    "task_list",
    "task_reject",
    "task_retry",
    "task_spawn",
    "task_update_status",
];

const AGENT_TOOLS: [&str; 6] = [
    "memory_get",
    "memory_merge",
    "prompt",
    "task_complete",
    "task_get",
    "task_update_status",
];

async fn tool_names(c: &Client) -> Vec<String> {
    let mut names: Vec<String> = c
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| {
            let desc = t.description.as_deref().unwrap_or("");
            assert!(desc.len() > 40, "tool {} has no real description", t.name);
            assert_eq!(
                t.input_schema.get("type"),
                Some(&json!("object")),
                "tool {} has no object schema",
                t.name
            );
            t.name.to_string()
        })
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn orchestrator_drives_a_task_through_its_gates() {
    let ws = Workspace::new("mcp-orch");
    let c = connect(&ws, &[], &[]).await;
    assert_eq!(tool_names(&c).await, ORCHESTRATOR_TOOLS);
    let schema = c
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == "task_update_status")
        .unwrap()
        .input_schema;
    assert_eq!(schema["required"], json!(["id", "status"]), "{schema:?}");

    let t = ok(&call(
        &c,
        "task_create",
        json!({"id": "api", "title": "REST API", "work": {"agent": "Build the API"}}),
    )
    .await);
    assert_eq!(
        (t["status"].as_str(), t["workflow"].as_str()),
        (Some("pending"), Some("review"))
    );
    assert_eq!(ws.status("api"), "pending");

    // A legal transition, then an illegal one with the CLI's exact message.
    let t = ok(&call(
        &c,
        "task_update_status",
        json!({"id": "api", "status": "working"}),
    )
    .await);
    assert_eq!(t["status"], "working");
    let r = call(
        &c,
        "task_update_status",
        json!({"id": "api", "status": "done"}),
    )
    .await;
    let cli = ws.expect(&["task", "update", "api", "--status", "done"], 1);
    assert_eq!(refusal(&r), err_line(&cli));
    assert!(
        refusal(&r).starts_with("refused: working → done is not allowed"),
        "{}",
        text(&r)
    );
    assert_eq!(r.structured_content.as_ref().unwrap()["exit_code"], 1);

    // The gate: no handoff, no review.
    let r = call(&c, "task_complete", json!({"id": "api"})).await;
    assert!(refusal(&r).contains("## Handoff"), "{}", text(&r));
    ws.handoff("api");
    let t = ok(&call(
        &c,
        "task_complete",
        json!({"id": "api", "request_id": "k1"}),
    )
    .await);
    assert_eq!(t["status"], "agent-review");
    // The same request id again changes nothing.
    let again = ok(&call(
        &c,
        "task_complete",
        json!({"id": "api", "request_id": "k1"}),
    )
    .await);
    assert_eq!(again["version"], t["version"]);
    assert_eq!(ws.show("api")["version"], t["version"]);

    let got = ok(&call(&c, "task_get", json!({"id": "api"})).await);
    assert_eq!(
        got,
        ws.show("api"),
        "task_get and `task show --json` differ"
    );
    let list = ok(&call(&c, "task_list", json!({"status": "agent-review"})).await);
    assert_eq!(list["tasks"].as_array().map(Vec::len), Some(1));

    let r = call(
        &c,
        "task_cancel",
        json!({"id": "api", "reason": "not wanted"}),
    )
    .await;
    assert_eq!(ok(&r)["status"], "cancelled");
    let h = ok(&call(&c, "history", json!({"id": "api", "last": 1})).await);
    assert_eq!(h["events"][0]["to"], "cancelled");
    assert_eq!(h["events"][0]["actor"], "person");
    ws.check_ok();
    c.cancel().await.expect("close");
}

#[tokio::test]
async fn retry_keeps_absent_specs_and_removes_null_ones() {
    let ws = Workspace::new("mcp-retry");
    let c = connect(&ws, &[], &[]).await;
    ok(&call(
        &c,
        "task_create",
        json!({
            "id": "lint",
            "work": {"shell": "true"},
            "prechecks": {"process": ["true"]},
            "postchecks": {"shell": "echo broken; exit 1"},
            "max_attempts": 1
        }),
    )
    .await);
    ok(&call(
        &c,
        "task_update_status",
        json!({"id": "lint", "status": "working"}),
    )
    .await);
    // The guard fails at the last attempt: the task is stuck, with the check's output.
    let r = call(
        &c,
        "task_update_status",
        json!({"id": "lint", "status": "done"}),
    )
    .await;
    assert!(refusal(&r).contains("attempts are used up"), "{}", text(&r));
    assert!(text(&r).contains("broken"), "{}", text(&r));
    assert_eq!(ws.status("lint"), "stuck");

    let r = ok(&call(
        &c,
        "task_retry",
        json!({"id": "lint", "new_postchecks": null}),
    )
    .await);
    assert_eq!(r["status"], "working");
    assert!(r["retry"]["runs_again"].as_array().is_some(), "{r}");
    let t = ws.show("lint");
    assert_eq!(t["status"], "working");
    assert_eq!(t["attempts"], 0);
    assert_eq!(t["spec"]["postchecks"], Value::Null, "null removes: {t}");
    assert_eq!(
        t["spec"]["prechecks"],
        json!({"process": ["true"]}),
        "absent keeps: {t}"
    );
    assert_eq!(
        t["spec"]["work"],
        json!({"shell": "true"}),
        "absent keeps: {t}"
    );
    let ev = ws.events("retry.requested", Some("lint"));
    assert_eq!(ev[0]["data"]["postchecks"], "remove", "{:?}", ev[0]);
    assert_eq!(ev[0]["data"]["prechecks"], "keep", "{:?}", ev[0]);

    // Only a stuck task can be retried: the CLI's message.
    let r = call(&c, "task_retry", json!({"id": "lint"})).await;
    let cli = ws.expect(&["task", "retry", "lint"], 1);
    assert_eq!(refusal(&r), err_line(&cli));
    // Without a guard the task is accepted now.
    assert_eq!(
        ok(&call(
            &c,
            "task_update_status",
            json!({"id": "lint", "status": "done"})
        )
        .await)["status"],
        "done"
    );
    ws.check_ok();
    c.cancel().await.expect("close");
}

/// `task_edit` answers as `warden task edit --json`, refuses with the CLI's line, and
/// `null` for the parent makes a root while an absent one keeps it.
#[tokio::test]
async fn task_edit_frees_a_task_held_by_a_cancelled_one() {
    let ws = Workspace::new("mcp-edit");
    ws.create("api", &["--work", "true"]);
    ws.create("web", &[]);
    ws.create(
        "ui",
        &["--work", "true", "--parent", "web", "--depends-on", "api"],
    );
    ws.ok(&["task", "cancel", "api"]);
    let c = connect(&ws, &[], &[]).await;
    let next = ok(&call(&c, "plan_next", json!({})).await);
    assert_eq!(next["stuck_on"][0]["needed_by"], "ui", "{next}");
    let r = call(
        &c,
        "task_edit",
        json!({"id": "ui", "drop_depends_on": ["web"]}),
    )
    .await;
    let cli = ws.expect(&["task", "edit", "ui", "--drop-depends-on", "web"], 1);
    assert_eq!(refusal(&r), err_line(&cli));
    let r = ok(&call(
        &c,
        "task_edit",
        json!({"id": "ui", "drop_depends_on": ["api"], "title": "Pages"}),
    )
    .await);
    assert_eq!(r["task"]["depends_on"], json!([]), "{r}");
    assert_eq!(r["task"]["parent"], "web", "absent keeps: {r}");
    assert_eq!(r["changed"][0]["field"], "title", "{r}");
    assert_eq!(r["changed"][1]["was"], json!(["api"]), "{r}");
    let r = ok(&call(&c, "task_edit", json!({"id": "ui", "parent": null})).await);
    assert_eq!(r["task"]["parent"], Value::Null, "null makes a root: {r}");
    assert_eq!(ok(&call(&c, "plan_next", json!({})).await)["next"], "ui");
    ws.check_ok();
}

#[tokio::test]
async fn plans_memory_state_resources_and_prompts() {
    let ws = Workspace::new("mcp-plan");
    let c = connect(&ws, &[], &[]).await;
    let plan = json!({"tasks": [
        {"id": "app", "title": "The app"},
        {"id": "api", "parent": "app", "agent": "Build the API"},
        {"id": "ui", "parent": "app", "agent": "Build the UI", "depends_on": ["api"]}
    ]});
    assert_eq!(
        ok(&call(&c, "plan_import", json!({"plan": plan})).await)["imported"],
        json!(["app", "api", "ui"])
    );
    // All or nothing: a second import of the same ids imports nothing.
    let r = call(&c, "plan_import", json!({"plan": plan})).await;
    assert!(
        refusal(&r).contains("tasks app, api, ui already exist"),
        "{}",
        text(&r)
    );
    assert_eq!(ws.tasks().len(), 3);
    let next = ok(&call(&c, "plan_next", json!({})).await);
    assert_eq!(next, json!({"next": "api", "state": "open"}));
    let shown = ok(&call(&c, "plan_show", json!({})).await);
    assert_eq!(shown["roots"][0]["children"][0]["id"], "api");
    // The export is the CLI's, and an edit of it goes back through plan_apply, which
    // keeps its as_of_event: removing a task changed since is a conflict.
    let exported = ok(&call(&c, "plan_export", json!({})).await);
    assert_eq!(exported, ws.json(&["plan", "export"]));
    assert!(exported["as_of_event"].as_u64().is_some(), "{exported}");
    let mut edited = exported.clone();
    edited["tasks"]
        .as_array_mut()
        .unwrap()
        .retain(|t| t["id"] != "ui");
    ws.ok(&["task", "edit", "ui", "--title", "The UI"]);
    let r = call(
        &c,
        "plan_apply",
        json!({"tree": edited, "id": "api", "status": "retry"}),
    )
    .await;
    assert!(
        refusal(&r).contains("removes task ui, which changed after the file was exported"),
        "{}",
        text(&r)
    );
    assert_eq!(ws.tasks().len(), 3, "nothing removed");

    let m = ok(&call(
        &c,
        "memory_merge",
        json!({"id": "api", "decisions": ["use axum"], "next_focus": "routes"}),
    )
    .await);
    assert_eq!(m["decisions"], json!(["use axum"]));
    let shown = ws.json(&["memory", "show", "api"]);
    assert_eq!(
        shown,
        ok(&call(&c, "memory_get", json!({"id": "api"})).await)
    );
    assert_eq!(shown["next_focus"], "routes");

    // STATE.md and TASK.md as resources, equal to what the CLI and the file say.
    let state = call(&c, "state", json!({})).await;
    let cli_state = String::from_utf8(ws.ok(&["state"]).stdout).unwrap();
    assert_eq!(text(&state), cli_state);
    let read = |uri: &str| {
        let c = &c;
        let uri = uri.to_owned();
        async move {
            let r = c
                .read_resource(ReadResourceRequestParams::new(uri.clone()))
                .await
                .unwrap_or_else(|e| panic!("read {uri}: {e}"));
            match &r.contents[0] {
                ResourceContents::TextResourceContents { text, .. } => text.clone(),
                other => panic!("not text: {other:?}"),
            }
        }
    };
    assert_eq!(read("warden://state").await, cli_state);
    assert_eq!(read("warden://task/api").await, ws.read_task_md("api"));
    let uris: Vec<String> = c
        .list_all_resources()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.uri.clone())
        .collect();
    assert!(uris.contains(&"warden://state".to_owned()), "{uris:?}");
    assert!(uris.contains(&"warden://task/ui".to_owned()), "{uris:?}");
    assert!(
        c.read_resource(ReadResourceRequestParams::new("warden://task/nope"))
            .await
            .is_err()
    );
    assert!(
        c.read_resource(ReadResourceRequestParams::new("file:///etc/passwd"))
            .await
            .is_err()
    );

    // Prompts: the one for the task's status equals `warden prompt`.
    ws.to("api", "working");
    let names: Vec<String> = c
        .list_all_prompts()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(
        names,
        [
            "task",
            "worker",
            "worker-respawn",
            "reviewer",
            "clarification",
            "stuck",
            "direct"
        ]
    );
    let args = json!({"id": "api"}).as_object().cloned().unwrap();
    let p = c
        .get_prompt(GetPromptRequestParams::new("task").with_arguments(args.clone()))
        .await
        .expect("prompt");
    let cli_prompt = String::from_utf8(ws.ok(&["prompt", "api"]).stdout).unwrap();
    let got = p.messages[0]
        .content
        .as_text()
        .map(|t| t.text.clone())
        .unwrap();
    assert_eq!(got.trim_end(), cli_prompt.trim_end());
    assert!(got.contains("use axum"), "memory is embedded: {got}");
    assert!(
        c.get_prompt(GetPromptRequestParams::new("reviewer").with_arguments(args))
            .await
            .is_err()
    );
    c.cancel().await.expect("close");
}

#[tokio::test]
async fn an_agent_may_touch_only_its_own_task_and_roles_transitions() {
    let ws = Workspace::new("mcp-agent");
    ws.create("mine", &["--agent", "Do it"]);
    ws.create("other", &["--agent", "Not yours"]);
    ws.to("mine", "working");
    let other_before = ws.show("other");
    let c = connect(
        &ws,
        &[],
        &[("WARDEN_ROLE", "worker"), ("WARDEN_TASK_ID", "mine")],
    )
    .await;
    assert_eq!(tool_names(&c).await, AGENT_TOOLS);

    assert_eq!(ok(&call(&c, "task_get", json!({})).await)["id"], "mine");
    assert_eq!(
        ok(&call(&c, "task_get", json!({"id": "mine"})).await)["id"],
        "mine"
    );

    let r = call(&c, "task_get", json!({"id": "other"})).await;
    assert!(refusal(&r).contains("only on its own task"), "{}", text(&r));
    let r = call(
        &c,
        "memory_merge",
        json!({"id": "other", "decisions": ["x"]}),
    )
    .await;
    refusal(&r);
    let r = call(&c, "task_update_status", json!({"status": "done"})).await;
    assert!(
        refusal(&r).contains("a worker may request only agent-review, clarification"),
        "{}",
        text(&r)
    );
    let r = call(
        &c,
        "task_retry",
        json!({"id": "mine", "new_postchecks": null}),
    )
    .await;
    assert!(
        refusal(&r).contains("not available to an agent"),
        "{}",
        text(&r)
    );
    assert!(
        c.read_resource(ReadResourceRequestParams::new("warden://task/other"))
            .await
            .is_err()
    );

    let t = tampers(&ws, "mine");
    let fields: Vec<&str> = t.iter().map(|(f, _, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "mcp:task_get",
            "mcp:memory_merge",
            "mcp:task_update_status",
            "mcp:task_retry",
            "mcp:resource:task"
        ],
        "{t:?}"
    );
    assert_eq!(t[0].1, "id=other");
    assert_eq!(t[0].2, "id=mine");
    assert_eq!(
        t[2],
        (
            "mcp:task_update_status".into(),
            "done".into(),
            "working (a worker moves only to agent-review, clarification, working)".into()
        )
    );
    assert_eq!(ws.show("other"), other_before, "the other task changed");
    assert!(ws.events("memory.merged", Some("other")).is_empty());
    assert_eq!(
        ws.events("tamper.ignored", None).len(),
        5,
        "tampers land on the agent's own task only"
    );

    // Legal requests work, and refusals by the gate are not tampering.
    let m = ok(&call(&c, "memory_merge", json!({"history": ["read the code"]})).await);
    assert_eq!(m["history"], json!(["read the code"]));
    let r = call(&c, "task_complete", json!({})).await;
    assert!(refusal(&r).contains("## Handoff"), "{}", text(&r));
    assert_eq!(tampers(&ws, "mine").len(), 5);
    let p = ok(&call(&c, "prompt", json!({})).await);
    assert_eq!(p["kind"], "worker");
    ws.handoff("mine");
    assert_eq!(
        ok(&call(&c, "task_complete", json!({})).await)["status"],
        "agent-review"
    );
    let ev = ws.events("status.changed", Some("mine"));
    assert_eq!(ev.last().unwrap()["actor"], "agent");
    ws.check_ok();
    c.cancel().await.expect("close");

    // A reviewer may not hand the task back to review, but may pass it on a PASS verdict.
    let c = connect(
        &ws,
        &["--role", "agent", "--task", "mine"],
        &[("WARDEN_ROLE", "reviewer")],
    )
    .await;
    let r = call(&c, "task_complete", json!({})).await;
    assert!(
        refusal(&r).contains("a reviewer may request only reviewing, working, stuck"),
        "{}",
        text(&r)
    );
    let r = call(&c, "task_update_status", json!({"status": "reviewing"})).await;
    assert!(
        refusal(&r).contains("## Review"),
        "gate refusal: {}",
        text(&r)
    );
    ws.review("mine", "PASS");
    assert_eq!(
        ok(&call(&c, "task_update_status", json!({"status": "reviewing"})).await)["status"],
        "reviewing"
    );
    assert_eq!(tampers(&ws, "mine").len(), 6);
    c.cancel().await.expect("close");
}

/// A session started by hand (`warden mcp --role agent --task ID`, no `WARDEN_ROLE`)
/// keeps the role its task's status called for when it started. Before, the role
/// followed the status: the worker that completed the task was its reviewer a call
/// later, wrote `## Review PASS` and passed its own work.
#[tokio::test]
async fn a_hand_started_session_keeps_its_role() {
    let ws = Workspace::new("mcp-fixed-role");
    ws.create("api", &["--agent", "Build the API"]);
    ws.to("api", "working");
    let worker = connect(&ws, &["--role", "agent", "--task", "api"], &[]).await;
    ws.handoff("api");
    assert_eq!(
        ok(&call(&worker, "task_complete", json!({})).await)["status"],
        "agent-review"
    );
    ws.review("api", "PASS");
    let r = call(
        &worker,
        "task_update_status",
        json!({"status": "reviewing"}),
    )
    .await;
    assert!(
        refusal(&r).contains("a worker may request only agent-review, clarification"),
        "{}",
        text(&r)
    );
    assert_eq!(ws.show("api")["status"], "agent-review");
    worker.cancel().await.expect("close");
    // A session started for the review is its reviewer.
    let reviewer = connect(&ws, &["--role", "agent", "--task", "api"], &[]).await;
    assert_eq!(
        ok(&call(
            &reviewer,
            "task_update_status",
            json!({"status": "reviewing"})
        )
        .await)["status"],
        "reviewing"
    );
    reviewer.cancel().await.expect("close");
    ws.check_ok();
}

/// A client that sends its requests and closes its stdin gets every answer: rmcp gives
/// its handlers 5 s after the input ends and dropped the answer of a `task_complete`
/// whose postchecks took longer (the change was made, the client never told). A last
/// request without a newline is a request too.
#[test]
fn every_request_read_is_answered_after_stdin_closes() {
    use std::io::Write;
    let ws = Workspace::new("mcp-eof");
    ws.create("slow", &["--agent", "Do it", "--postchecks", "sleep 6"]);
    ws.to("slow", "working");
    ws.handoff("slow");
    let mut cmd = std::process::Command::new(bin());
    cmd.arg("mcp")
        .current_dir(&ws.root)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for k in crate::common::WARDEN_ENV {
        cmd.env_remove(k);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let complete = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "task_complete", "arguments": {"id": "slow"}}});
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    write!(stdin, "{init}\n{initialized}\n{complete}\n{ping}").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ids: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].clone())
        .collect();
    ids.sort_by_key(|v| v.as_i64());
    assert_eq!(
        ids,
        [json!(0), json!(1), json!(2)],
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(ws.show("slow")["status"], "agent-review");
}

/// A client that goes away before it begins, or begins with something else than
/// `initialize`, is not Warden's failure: exit 0, or 2 with one line naming what it
/// sent (both were exit 5, "internal", the second with a Rust debug dump).
#[test]
fn a_client_that_never_initializes_is_not_an_internal_error() {
    use std::io::Write;
    let ws = Workspace::new("mcp-noinit");
    for (input, want, line) in [
        (
            "",
            0,
            "warden mcp: the client closed the connection before it initialized the session; nothing was served",
        ),
        (
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
            2,
            "error: the MCP client's first message was `notifications/initialized`, not `initialize`: a client starts the session with an initialize request, then the notifications/initialized notification",
        ),
    ] {
        let mut cmd = std::process::Command::new(bin());
        cmd.arg("mcp")
            .current_dir(&ws.root)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for k in crate::common::WARDEN_ENV {
            cmd.env_remove(k);
        }
        let mut child = cmd.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(want), "{err}");
        assert_eq!(err.trim_end(), line);
    }
}

/// A request for an MCP method whose params do not fit is "invalid params" (-32602),
/// naming what the method needs; only a method MCP does not have is "method not found".
/// Before, `tools/call` without params was answered "no method tools/call".
#[test]
fn a_known_method_with_unfit_params_is_invalid_params() {
    use std::io::Write;
    let ws = Workspace::new("mcp-params");
    let mut cmd = std::process::Command::new(bin());
    cmd.arg("mcp")
        .current_dir(&ws.root)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for k in crate::common::WARDEN_ENV {
        cmd.env_remove(k);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let asks = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read"}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/get", "params": {"name": 7}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "no/such"}),
    ];
    write!(stdin, "{init}\n{initialized}\n").unwrap();
    for a in &asks {
        writeln!(stdin, "{a}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect();
    let error = |id: i64| {
        let a = answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer to {id}: {answers:?}"));
        (
            a["error"]["code"].as_i64().unwrap(),
            a["error"]["message"].as_str().unwrap().to_owned(),
        )
    };
    for (id, needs) in [
        (1, "\"name\": TOOL"),
        (2, "\"name\": TOOL"),
        (3, "\"uri\": URI"),
        (4, "\"name\": PROMPT"),
    ] {
        let (code, message) = error(id);
        assert_eq!(code, -32602, "{id}: {message}");
        assert!(message.contains(needs), "{id}: {message}");
    }
    assert_eq!(error(5), (-32601, "no method no/such".to_owned()));
}

#[tokio::test]
async fn task_list_answers_in_pages_that_follow_on() {
    let ws = Workspace::new("mcp-pages");
    // 205 tasks, under a group so that the app's tree order is not the id order.
    let mut tasks = vec![json!({"id": "z-group"})];
    tasks.extend(
        (0..204).map(|i| json!({"id": format!("t{i:03}"), "parent": "z-group", "order": -i})),
    );
    let plan = ws.write("plan.json", json!({ "tasks": tasks }).to_string());
    ws.ok(&["plan", "import", plan.to_str().unwrap()]);
    let c = connect(&ws, &[], &[]).await;
    let ids = |v: &Value| -> Vec<String> {
        v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut all: Vec<String> = ws
        .tasks()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    all.sort();

    // No limit: the first 200 by id, and where to go on.
    let first = ok(&call(&c, "task_list", json!({})).await);
    assert_eq!(ids(&first), all[..200]);
    assert_eq!(first["total"], 205);
    assert_eq!(first["next"], all[199]);
    let rest = ok(&call(&c, "task_list", json!({"after": all[199]})).await);
    assert_eq!(ids(&rest), all[200..]);
    assert_eq!(rest["next"], Value::Null);

    // Small pages walk the whole list once, each page after the one before.
    let mut walked = Vec::new();
    let mut after = Value::Null;
    loop {
        let page = ok(&call(&c, "task_list", json!({"limit": 64, "after": after})).await);
        assert!(ids(&page).len() <= 64);
        walked.extend(ids(&page));
        assert_eq!(page["total"], 205);
        after = page["next"].clone();
        if after.is_null() {
            break;
        }
    }
    assert_eq!(walked, all);

    // A page follows on even when the task it follows has gone.
    ws.ok(&["task", "cancel", "t010", "--reason", "not wanted"]);
    let page = ok(&call(
        &c,
        "task_list",
        json!({"status": "pending", "after": "t010", "limit": 2}),
    )
    .await);
    assert_eq!(ids(&page), ["t011", "t012"]);
    assert_eq!(
        page["total"], 204,
        "pending: every task but t010 (the group's derived status is pending)"
    );
    assert_eq!(page["next"], "t012");

    // Bad paging is refused with the fix.
    let r = call(&c, "task_list", json!({"limit": 0})).await;
    assert!(refusal(&r).contains("limit is 0"), "{}", text(&r));
    let r = call(&c, "task_list", json!({"after": "../x"})).await;
    assert!(refusal(&r).contains("is invalid"), "{}", text(&r));
}

#[tokio::test]
async fn malformed_arguments_are_errors_and_the_server_keeps_serving() {
    let ws = Workspace::new("mcp-bad");
    ws.create("a", &["--agent", "x"]);
    let c = connect(&ws, &[], &[]).await;
    let huge = "x".repeat((1 << 20) + 1);
    let cases: Vec<(&str, Value, &str)> = vec![
        ("task_get", json!({"id": 7}), "invalid type"),
        ("task_get", json!({}), "missing field `id`"),
        (
            "task_get",
            json!({"id": "a", "extra": true}),
            "unknown field",
        ),
        (
            "task_get",
            json!({"id": "nope"}),
            "error: no task nope; list tasks with `warden task list`",
        ),
        ("task_get", json!({"id": "../../etc"}), "is invalid"),
        (
            "task_update_status",
            json!({"id": "a", "status": "finished"}),
            "unknown status \"finished\"",
        ),
        (
            "task_update_status",
            json!({"id": "a", "status": ["working"]}),
            "invalid type",
        ),
        (
            "task_create",
            json!({"id": "b", "work": {"bash": "true"}}),
            "unknown variant",
        ),
        (
            "task_create",
            json!({"id": "b", "work": {"shell": "a", "agent": "b"}}),
            "",
        ),
        (
            "task_create",
            json!({"id": "b", "title": huge}),
            "limited to 1 MiB",
        ),
        (
            "memory_merge",
            json!({"id": "a", "decisions": [huge]}),
            "decisions[0]",
        ),
        (
            "memory_merge",
            json!({"id": "a", "decisions": "one"}),
            "invalid type",
        ),
        (
            "task_retry",
            json!({"id": "a", "new_work": null}),
            "work cannot be removed",
        ),
        (
            "task_retry",
            json!({"id": "a", "clear_worktree": "yes"}),
            "invalid type",
        ),
        (
            "plan_import",
            json!({"plan": {"tasks": [{"title": "no id"}]}}),
            "refused: the plan is not valid",
        ),
        (
            "plan_import",
            json!({"plan": "tasks"}),
            "refused: the plan is not valid",
        ),
        ("history", json!({"last": -1}), "invalid value"),
        // Just under the cap: refused by what it says, without echoing it all back.
        (
            "task_update_status",
            json!({"id": "a", "status": "s".repeat(1 << 19)}),
            "unknown status",
        ),
        (
            "task_get",
            json!({"id": "a", "k".repeat(1 << 19): 1}),
            "unknown field",
        ),
    ];
    for (tool, args, want) in cases {
        let r = call(&c, tool, args.clone()).await;
        assert_eq!(
            r.is_error,
            Some(true),
            "{tool} {args} was accepted: {}",
            text(&r)
        );
        assert!(text(&r).contains(want), "{tool} {args}: {}", text(&r));
        assert!(text(&r).len() < 5000, "{tool}: the error echoes too much");
    }
    // The CLI says the same for a missing task.
    assert_eq!(
        err_line(&ws.expect(&["task", "show", "nope"], 3)),
        "error: no task nope; list tasks with `warden task list`"
    );
    // Unknown tools are protocol errors.
    assert!(
        c.call_tool(CallToolRequestParams::new("rm_rf"))
            .await
            .is_err()
    );
    // Nothing was created or changed, and the server still answers.
    assert_eq!(ws.tasks().len(), 1);
    assert_eq!(ws.version("a"), 1);
    assert_eq!(
        ok(&call(&c, "task_get", json!({"id": "a"})).await)["id"],
        "a"
    );
    ws.check_ok();
    c.cancel().await.expect("close");
}

#[test]
fn the_agent_role_needs_an_existing_task() {
    let ws = Workspace::new("mcp-args");
    let o = ws.expect(&["mcp", "--role", "agent"], 2);
    assert!(
        err_line(&o).contains("pass --task ID or set WARDEN_TASK_ID"),
        "{}",
        err_line(&o)
    );
    let o = ws.expect(&["mcp", "--role", "agent", "--task", "nope"], 3);
    assert_eq!(
        err_line(&o),
        "error: no task nope; list tasks with `warden task list`"
    );
    let o = ws.expect(&["mcp", "--role", "boss"], 2);
    assert!(
        err_line(&o).contains("use orchestrator or agent"),
        "{}",
        err_line(&o)
    );
    // Outside a workspace the server does not start.
    let bare = Workspace::bare("mcp-bare");
    let o = command(&bare.root).arg("mcp").output().expect("run warden");
    assert_eq!(o.status.code(), Some(2), "{}", err_line(&o));
}

#[tokio::test]
async fn a_person_decides_reviews_and_reads_status_through_mcp() {
    let ws = Workspace::new("mcp-person");
    ws.create("api", &[]);
    ws.to("api", "working");
    ws.handoff("api");
    ws.to("api", "agent-review");
    ws.review("api", "PASS");
    ws.to("api", "reviewing");
    let c = connect(&ws, &[], &[]).await;
    let st = ok(&call(&c, "status", json!({})).await);
    assert_eq!(st["needs_you"][0]["id"], "api", "{st}");
    assert_eq!(st["needs_you"][0]["need"], "review");
    // Reject: blank reason refused; a reason sends it back, into the worker's prompt.
    let r = call(&c, "task_reject", json!({"id": "api", "reason": " "})).await;
    assert!(
        refusal(&r).contains("a rejection needs a reason"),
        "{}",
        text(&r)
    );
    let v = ok(&call(
        &c,
        "task_reject",
        json!({"id": "api", "reason": "Cover the 404 path"}),
    )
    .await);
    assert_eq!(v["status"], "working", "{v}");
    assert!(
        ws.json(&["prompt", "api"])["prompt"]
            .as_str()
            .unwrap()
            .contains("Cover the 404 path")
    );
    // Approve refuses anything but reviewing, then decides it.
    let r = call(&c, "task_approve", json!({"id": "api"})).await;
    assert_eq!(
        refusal(&r),
        "refused: task api is working; only a task in reviewing can be approved"
    );
    ws.add_section("api", "Handoff", "404 covered.");
    ws.to("api", "agent-review");
    ws.review("api", "PASS");
    ws.to("api", "reviewing");
    let v = ok(&call(&c, "task_approve", json!({"id": "api"})).await);
    assert_eq!(v["status"], "done", "{v}");
    c.cancel().await.unwrap();
    // The agent role has neither: a person's decisions are not an agent's.
    let c = connect(&ws, &["--role", "agent", "--task", "api"], &[]).await;
    let names = tool_names(&c).await;
    assert!(
        !names
            .iter()
            .any(|n| n == "task_approve" || n == "task_reject" || n == "status"),
        "{names:?}"
    );
    c.cancel().await.unwrap();
}
