//! The CLI and the MCP server are two adapters over one application layer: the same
//! requests, written once in a table, give the same stored tasks, the same results and
//! the same refusals through both. Refusal messages and `--json` shapes are inline
//! snapshots, so a change of wording is reviewed, not grepped.

use serde_json::{Value, json};

use crate::common::{Workspace, err_line, text};
use crate::mcp::{Client, call, connect, ok, refusal};

/// One request, as both front ends take it.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// `task create` with agent work (the default workflow for agent work is review).
    CreateAgent(&'static str, &'static str),
    /// `task create` with shell work, checks and a limit (direct by default).
    CreateShell(&'static str, &'static str, &'static str, u32),
    /// A review task whose guard fails: working, a Handoff, then `task complete`.
    CreateGuarded(&'static str, &'static str, u32),
    /// `task update --status`.
    Update(&'static str, &'static str),
    /// Write `## Handoff` into TASK.md (as an agent would).
    Handoff(&'static str),
    /// `task complete`.
    Complete(&'static str),
    /// `plan import` of a JSON plan.
    Import(&'static str),
    /// `plan apply` of the exported tree for a selected node.
    Apply(&'static str, &'static str, Option<&'static str>),
    /// `task retry` with new postchecks.
    Retry(&'static str, &'static str),
}

use Step::*;

/// The table: create with agent work, plan import and apply, a failed guard, a retry.
const SCENARIO: &[Step] = &[
    CreateAgent("api", "Build the REST API"),
    CreateShell("lint", "cargo clippy", "true", 2),
    Import(
        r#"{"tasks": [{"id": "app", "title": "App"},
                      {"id": "ui", "parent": "app", "agent": "Build the UI"},
                      {"id": "docs", "parent": "app", "work": "echo docs"}]}"#,
    ),
    Apply("ui", "decomposed", None),
    Apply("docs", "done", Some("pass")),
    CreateGuarded("guarded", "false", 1),
    Update("guarded", "working"),
    Handoff("guarded"),
    Complete("guarded"),
    Retry("guarded", "true"),
];

/// The fields that differ between two runs by nature (times), blanked.
fn normalise(mut v: Value) -> Value {
    match &mut v {
        Value::Object(m) => {
            for k in ["created_at", "updated_at", "at"] {
                if m.contains_key(k) {
                    m.insert(k.into(), json!("[time]"));
                }
            }
            for (_, x) in m.iter_mut() {
                *x = normalise(x.take());
            }
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                *x = normalise(x.take());
            }
        }
        _ => {}
    }
    v
}

/// What a step answered: its JSON result, or its refusal's first line.
type Answer = Result<Value, String>;

fn cli_step(ws: &Workspace, step: Step) -> Answer {
    let run = |args: &[&str]| -> Answer {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let o = ws.run(&all);
        if o.status.success() {
            Ok(serde_json::from_slice(&o.stdout).unwrap_or(Value::Null))
        } else {
            Err(text(&o.stderr)
                .lines()
                .find(|l| l.starts_with('{'))
                .and_then(|l| serde_json::from_str::<Value>(l).ok())
                .map(|e| headline(&e["error"]))
                .unwrap_or_else(|| err_line(&o)))
        }
    };
    match step {
        CreateAgent(id, agent) => run(&["task", "create", id, "--agent", agent]),
        CreateShell(id, work, post, max) => run(&[
            "task",
            "create",
            id,
            "--work",
            work,
            "--postchecks",
            post,
            "--max-attempts",
            &max.to_string(),
        ]),
        CreateGuarded(id, post, max) => run(&[
            "task",
            "create",
            id,
            "--agent",
            "guarded work",
            "--postchecks",
            post,
            "--max-attempts",
            &max.to_string(),
        ]),
        Update(id, to) => run(&["task", "update", id, "--status", to]),
        Handoff(id) => {
            ws.handoff(id);
            Ok(Value::Null)
        }
        Complete(id) => run(&["task", "complete", id]),
        Import(plan) => {
            ws.write("plan.json", plan);
            run(&["plan", "import", "plan.json"])
        }
        Apply(id, status, guard) => {
            let tree = ws.json(&["plan", "export"]);
            let tree = with_children(tree, id, status);
            ws.write("tree.json", tree.to_string());
            let mut args = vec![
                "plan",
                "apply",
                "tree.json",
                "--selected",
                id,
                "--status",
                status,
            ];
            if let Some(g) = guard {
                args.extend(["--guard", g]);
            }
            run(&args)
        }
        Retry(id, post) => run(&["task", "retry", id, "--postchecks", post]),
    }
}

/// A failure object's headline, as stderr shows it.
fn headline(e: &Value) -> String {
    let prefix = if e["refused"].as_bool() == Some(true) {
        "refused"
    } else {
        "error"
    };
    format!("{prefix}: {}", e["message"].as_str().unwrap_or(""))
}

/// For `decomposed`, the exported tree with two new children under the selected node.
fn with_children(mut tree: Value, id: &str, status: &str) -> Value {
    if status == "decomposed"
        && let Some(tasks) = tree["tasks"].as_array_mut()
    {
        for child in ["ui-form", "ui-style"] {
            tasks.push(json!({"id": child, "parent": id, "agent": format!("{child} work")}));
        }
    }
    tree
}

async fn mcp_step(ws: &Workspace, c: &Client, step: Step) -> Answer {
    let result = match step {
        CreateAgent(id, agent) => {
            call(c, "task_create", json!({"id": id, "work": {"agent": agent}})).await
        }
        CreateShell(id, work, post, max) => {
            call(
                c,
                "task_create",
                json!({"id": id, "work": {"shell": work}, "postchecks": {"shell": post}, "max_attempts": max}),
            )
            .await
        }
        CreateGuarded(id, post, max) => {
            call(
                c,
                "task_create",
                json!({"id": id, "work": {"agent": "guarded work"}, "postchecks": {"shell": post}, "max_attempts": max}),
            )
            .await
        }
        Update(id, to) => call(c, "task_update_status", json!({"id": id, "status": to})).await,
        Handoff(id) => {
            ws.handoff(id);
            return Ok(Value::Null);
        }
        Complete(id) => call(c, "task_complete", json!({"id": id})).await,
        Import(plan) => {
            let plan: Value = serde_json::from_str(plan).expect("plan JSON");
            call(c, "plan_import", json!({ "plan": plan })).await
        }
        Apply(id, status, guard) => {
            // The tree an MCP agent edits is MCP's own export.
            let exported = ok(&call(c, "plan_export", json!({})).await);
            let tree = with_children(exported, id, status);
            let mut args = json!({"tree": tree, "id": id, "status": status});
            if let Some(g) = guard {
                args["guard"] = json!(g);
            }
            call(c, "plan_apply", args).await
        }
        Retry(id, post) => {
            call(
                c,
                "task_retry",
                json!({"id": id, "new_postchecks": {"shell": post}}),
            )
            .await
        }
    };
    if result.is_error == Some(true) {
        Err(refusal(&result))
    } else {
        Ok(ok(&result))
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_cli_and_mcp_give_the_same_results_for_the_same_requests() {
    let by_cli = Workspace::new("parity-cli");
    let by_mcp = Workspace::new("parity-mcp");
    let client = connect(&by_mcp, &["--role", "orchestrator"], &[]).await;
    for step in SCENARIO {
        let a = cli_step(&by_cli, *step).map(normalise);
        let b = mcp_step(&by_mcp, &client, *step).await.map(normalise);
        // MCP wraps lists in an object; the answers are otherwise the same documents.
        assert_eq!(a, b, "{step:?}: CLI and MCP answered differently");
    }
    client.cancel().await.expect("close");
    let a = normalise(by_cli.json(&["task", "list"]));
    let b = normalise(by_mcp.json(&["task", "list"]));
    assert_eq!(a, b, "the stored tasks differ");
    // The scenario reached every operation it names.
    let guarded = by_cli.show("guarded");
    assert_eq!(
        guarded["status"], "working",
        "retried after the failed guard"
    );
    assert_eq!(guarded["spec"]["postchecks"], json!({"shell": "true"}));
    assert_eq!(by_cli.show("docs")["status"], "done");
    assert_eq!(by_cli.show("ui-form")["parent"], "ui");
    assert_eq!(by_cli.show("api")["workflow"], "review");
    assert_eq!(by_cli.show("lint")["workflow"], "direct");
    by_cli.check_ok();
    by_mcp.check_ok();
}

/// Refusals the same request gets through both front ends, in one place.
#[tokio::test(flavor = "current_thread")]
async fn refusals_read_the_same_through_both_front_ends() {
    let ws = Workspace::new("refusals");
    ws.create("t", &[]);
    let client = connect(&ws, &["--role", "orchestrator"], &[]).await;
    let cases: &[(&[&str], &str, Value)] = &[
        (
            &["task", "update", "t", "--status", "done"],
            "task_update_status",
            json!({"id": "t", "status": "done"}),
        ),
        (
            &["task", "complete", "t"],
            "task_complete",
            json!({"id": "t"}),
        ),
        (&["task", "retry", "t"], "task_retry", json!({"id": "t"})),
        (&["task", "show", "nope"], "task_get", json!({"id": "nope"})),
        (
            &["task", "show", "Bad/Id"],
            "task_get",
            json!({"id": "Bad/Id"}),
        ),
        (&["task", "create", "t"], "task_create", json!({"id": "t"})),
        (
            &["task", "create", "x", "--parent", "nope"],
            "task_create",
            json!({"id": "x", "parent": "nope"}),
        ),
    ];
    let mut lines = Vec::new();
    for (args, tool, params) in cases {
        let o = ws.run(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let cli = err_line(&o);
        let r = call(&client, tool, params.clone()).await;
        let mcp = refusal(&r);
        assert_eq!(cli, mcp, "{args:?} and {tool} differ");
        lines.push(format!("{} → {}", o.status.code().unwrap_or(-1), cli));
    }
    client.cancel().await.expect("close");
    insta::assert_snapshot!(lines.join("\n"), @r#"
    1 → refused: pending → done is not allowed in the review workflow; from pending the task can go to: clarification, working, cancelled
    1 → refused: pending → agent-review is not allowed in the review workflow; from pending the task can go to: clarification, working, cancelled
    1 → refused: task t is pending; only a stuck task can be retried
    3 → error: no task nope; list tasks with `warden task list`
    2 → error: task id "Bad/Id" is invalid; use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit
    1 → refused: task t already exists; pick another id or update it
    3 → error: parent nope does not exist; create it first or leave out the parent
    "#);
}

/// The shape of `task show --json` and of a failure under `--json`.
#[test]
fn json_shapes() {
    let ws = Workspace::new("shapes");
    ws.ok(&[
        "task",
        "create",
        "api",
        "--title",
        "REST API",
        "--agent",
        "Build it",
        "--postchecks",
        "cargo test",
    ]);
    let v = normalise(ws.json(&["task", "show", "api"]));
    insta::assert_json_snapshot!(v, @r#"
    {
      "attempts": 0,
      "auto_heal": [],
      "body": "",
      "branch": "warden/api",
      "children": [],
      "crash_count": 0,
      "created_at": "[time]",
      "dead": false,
      "depends_on": [],
      "gate": null,
      "id": "api",
      "last_failure": null,
      "max_attempts": 3,
      "order": 0,
      "parent": null,
      "passes": false,
      "phases": {
        "commit": "pending",
        "merge-fi": "pending",
        "merge-ri": "pending",
        "postchecks": "pending",
        "prechecks": "pending",
        "work": "pending"
      },
      "respawn_requested": false,
      "resume_from_phase": null,
      "review_round": 0,
      "session": null,
      "spec": {
        "postchecks": {
          "shell": "cargo test"
        },
        "prechecks": null,
        "work": {
          "agent": "Build it"
        }
      },
      "status": "pending",
      "title": "REST API",
      "updated_at": "[time]",
      "version": 1,
      "workflow": "review"
    }
    "#);
    let o = ws.expect(&["--json", "task", "update", "api", "--status", "done"], 1);
    assert!(o.stdout.is_empty(), "nothing on stdout for a refusal");
    let e: Value = serde_json::from_slice(&o.stderr).expect("a JSON error on stderr");
    insta::assert_json_snapshot!(e, @r#"
    {
      "error": {
        "code": 1,
        "message": "pending → done is not allowed in the review workflow; from pending the task can go to: clarification, working, cancelled",
        "refused": true
      }
    }
    "#);
}
