//! `warden plan …` through the real binary: import in three formats and its all-or-nothing
//! refusals, export round-trips, show, apply (seed 000's reconcile), next, and sync of a
//! get-shit-done `.planning/` directory (DESIGN 2.3, 2.6, 4).

use crate::common::{Workspace, err_line, ids, text};
use serde_json::{Value, json};

const PLAN_JSON: &str = r#"{"tasks": [
  {"id": "app", "title": "The app"},
  {"id": "api", "parent": "app", "order": 1, "agent": "Build the API", "postchecks": "true"},
  {"id": "ui", "parent": "app", "order": 0, "depends_on": ["api"], "max_attempts": 2},
  {"id": "docs", "title": "Docs", "work": "true"}
]}"#;

const PLAN_TOML: &str = r#"
[[tasks]]
id = "app"
title = "The app"

[[tasks]]
id = "api"
parent = "app"
order = 1
agent = "Build the API"
postchecks = "true"

[[tasks]]
id = "ui"
parent = "app"
order = 0
depends_on = ["api"]
max_attempts = 2

[[tasks]]
id = "docs"
title = "Docs"
work = "true"
"#;

const PLAN_YAML: &str = r#"
tasks:
  - id: app
    title: The app
  - id: api
    parent: app
    order: 1
    agent: Build the API
    postchecks: "true"
  - id: ui
    parent: app
    order: 0
    depends_on: [api]
    max_attempts: 2
  - id: docs
    title: Docs
    work: "true"
"#;

fn import(ws: &Workspace, name: &str, content: &str) -> std::process::Output {
    let p = ws.write(name, content);
    ws.run(&["plan", "import", p.to_str().unwrap()])
}

fn export(ws: &Workspace) -> Value {
    ws.json(&["plan", "export"])
}

#[test]
fn import_reads_json_toml_and_yaml_alike() {
    let mut exports = Vec::new();
    let bom = |s: &str| format!("\u{feff}{s}");
    for (name, content) in [
        ("plan.json", PLAN_JSON.to_owned()),
        ("plan.toml", PLAN_TOML.to_owned()),
        ("plan.yaml", PLAN_YAML.to_owned()),
        // What Notepad writes: a byte order mark first.
        ("plan.json", bom(PLAN_JSON)),
        ("plan.toml", bom(PLAN_TOML)),
        ("plan.yaml", bom(PLAN_YAML)),
    ] {
        let ws = Workspace::new("import");
        let o = import(&ws, name, &content);
        assert_eq!(
            crate::common::code(&o),
            0,
            "{}",
            crate::common::describe(&["plan", "import", name], &o)
        );
        let all = ws.tasks();
        assert_eq!(all.len(), 4, "{name}");
        let app = ws.show("app");
        assert_eq!(app["title"], "The app");
        assert_eq!(ids(&app["children"]), ["ui", "api"], "{name}: (order, id)");
        let api = ws.show("api");
        assert_eq!(api["workflow"], "review");
        assert_eq!(api["spec"]["work"]["agent"], "Build the API", "{api}");
        assert_eq!(api["spec"]["postchecks"]["shell"], "true", "{api}");
        assert_eq!(ws.show("ui")["max_attempts"], 2);
        assert_eq!(ws.show("ui")["title"], "ui", "title defaults to the id");
        assert_eq!(
            ws.show("docs")["workflow"],
            "direct",
            "shell work defaults to direct"
        );
        // An import writes no file; a task's TASK.md comes with its first write.
        assert!(!ws.task_md("api").exists(), "import writes no TASK.md");
        ws.ok(&["task", "update", "api", "--status", "working"]);
        assert!(
            ws.task_md("api").is_file(),
            "the first write writes TASK.md"
        );
        ws.check_ok();
        exports.push(export(&ws));
    }
    assert_eq!(exports[0], exports[1], "JSON and TOML import the same plan");
    assert_eq!(exports[0], exports[2], "JSON and YAML import the same plan");
    for (i, e) in exports[3..].iter().enumerate() {
        assert_eq!(&exports[i], e, "a byte order mark changes nothing");
    }
}

#[test]
fn invalid_plans_import_nothing() {
    let ws = Workspace::new("badplans");
    ws.create("keep", &[]);
    let cases: &[(&str, &str, &str)] = &[
        ("no tasks", "{}", "has no tasks; a plan is {\"tasks\""),
        ("a list", "[]", "has no tasks"),
        ("an empty list", r#"{"tasks": []}"#, "has no tasks"),
        (
            "already there",
            r#"{"tasks": [{"id": "keep"}, {"id": "ok1"}]}"#,
            "task keep already exists; import adds new tasks",
        ),
        (
            "parent cycle",
            r#"{"tasks": [{"id": "a", "parent": "b"}, {"id": "b", "parent": "a"}, {"id": "ok1"}]}"#,
            "cycle",
        ),
        (
            "self parent",
            r#"{"tasks": [{"id": "a", "parent": "a"}, {"id": "ok1"}]}"#,
            "itself",
        ),
        (
            "unknown parent",
            r#"{"tasks": [{"id": "a", "parent": "ghost"}, {"id": "ok1"}]}"#,
            "ghost",
        ),
        (
            "unknown dependency",
            r#"{"tasks": [{"id": "a", "depends_on": ["ghost"]}, {"id": "ok1"}]}"#,
            "ghost",
        ),
        (
            "dependency cycle",
            r#"{"tasks": [{"id": "a", "depends_on": ["b"]}, {"id": "b", "depends_on": ["a"]}]}"#,
            "cycle",
        ),
        (
            "a group that depends on its own task",
            r#"{"tasks": [{"id": "g", "depends_on": ["d"]}, {"id": "d", "parent": "g"}, {"id": "ok1"}]}"#,
            "g needs d, which is inside g",
        ),
        (
            "a task under a stored group that it depends on",
            r#"{"tasks": [{"id": "c", "parent": "keep", "depends_on": ["keep"]}, {"id": "ok1"}]}"#,
            "c needs keep, which holds c",
        ),
        (
            "duplicate ids",
            r#"{"tasks": [{"id": "a"}, {"id": "a"}, {"id": "ok1"}]}"#,
            "a",
        ),
        (
            "more attempts than allowed",
            r#"{"tasks": [{"id": "a", "attempts": 99, "max_attempts": 3}, {"id": "ok1"}]}"#,
            "task a has attempts: 99 but max_attempts: 3; attempts is at most max_attempts",
        ),
        (
            "existing id",
            r#"{"tasks": [{"id": "keep"}, {"id": "ok1"}]}"#,
            "keep",
        ),
        (
            "bad id",
            r#"{"tasks": [{"id": "../evil"}, {"id": "ok1"}]}"#,
            "evil",
        ),
        (
            "unknown field",
            r#"{"tasks": [{"id": "a", "colour": "red"}]}"#,
            "colour",
        ),
        (
            "work and agent",
            r#"{"tasks": [{"id": "a", "work": "true", "agent": "x"}]}"#,
            "a",
        ),
        ("not json", r#"{"tasks": [{"id": "a",}"#, "JSON"),
    ];
    let events0 = ws.history().len();
    for (what, plan, mention) in cases {
        let p = ws.write("bad.json", plan);
        let o = ws.expect(&["plan", "import", p.to_str().unwrap()], 1);
        let line = err_line(&o);
        assert!(
            line.contains(mention),
            "{what}: the message should mention {mention:?}: {line}"
        );
        assert_eq!(
            text(&o.stderr).trim_end().lines().count(),
            1,
            "{what}: one line"
        );
        let all: Vec<String> = ws
            .tasks()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(all, ["keep"], "{what}: nothing imported");
        assert!(!ws.task_md("ok1").exists(), "{what}: no TASK.md written");
    }
    assert_eq!(
        ws.history().len(),
        events0,
        "no event for any refused import"
    );
    ws.expect(&["plan", "import", "missing.json"], 2);
    // A plan imported twice names ten of the tasks already there and counts the rest.
    let twelve: Vec<String> = (0..12)
        .map(|i| format!("{{\"id\": \"r{i:02}\"}}"))
        .collect();
    let p = ws.write(
        "twice.json",
        format!("{{\"tasks\": [{}]}}", twelve.join(", ")),
    );
    ws.ok(&["plan", "import", p.to_str().unwrap()]);
    let o = ws.expect(&["plan", "import", p.to_str().unwrap()], 1);
    assert!(
        err_line(&o).contains(
            "(1 problem): tasks r00, r01, r02, r03, r04, r05, r06, r07, r08, r09 and 2 more already exist"
        ),
        "{}",
        err_line(&o)
    );
    // An invalid TOML and YAML plan are refused too.
    let p = ws.write("bad.toml", "[[tasks]]\nid = \"a\"\nparent = \"a\"\n");
    ws.expect(&["plan", "import", p.to_str().unwrap()], 1);
    let p = ws.write("bad.yaml", "tasks:\n  - id: a\n    parent: ghost\n");
    ws.expect(&["plan", "import", p.to_str().unwrap()], 1);
    assert_eq!(ws.tasks().len(), 13);
    ws.check_ok();
}

/// A group's `passes` in a file is not taken: it is its tasks'. The export of a tree
/// `plan sync` made (its groups stored as passing) imports into a fresh store, and a
/// group that says it passes over a task that does not is not done.
#[test]
fn a_groups_passes_come_from_its_tasks_on_import() {
    let ws = Workspace::new("grouppasses");
    let plan = r#"{"tasks": [
        {"id": "done-phase", "passes": true}, {"id": "p1", "parent": "done-phase", "passes": true},
        {"id": "open-phase", "passes": true}, {"id": "p2", "parent": "open-phase"}]}"#;
    assert_eq!(crate::common::code(&import(&ws, "plan.json", plan)), 0);
    assert_eq!(ws.show("done-phase")["status"], "done");
    assert_eq!(ws.show("p1")["status"], "done");
    assert_eq!(ws.show("open-phase")["passes"], false);
    assert_eq!(ws.show("p2")["status"], "pending");
    ws.check_ok();
}

#[test]
fn import_from_stdin_and_initial_runner_fields() {
    let ws = Workspace::new("stdin");
    let o = ws.run_stdin(
        &["--json", "plan", "import", "-"],
        r#"{"tasks": [{"id": "old", "passes": true}, {"id": "tried", "attempts": 2},
                      {"id": "spent", "work": "true", "attempts": 3, "max_attempts": 3}]}"#,
    );
    assert_eq!(
        crate::common::code(&o),
        0,
        "{}",
        crate::common::describe(&["plan", "import", "-"], &o)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["imported"], json!(["old", "tried", "spent"]));
    let old = ws.show("old");
    assert_eq!(
        (old["status"].as_str(), old["passes"].as_bool()),
        (Some("done"), Some(true))
    );
    assert_eq!(ws.show("tried")["attempts"], 2);
    assert_eq!(ws.show("tried")["status"], "pending");
    // Its attempts used up: stuck, as plan next reads it (it was pending, and the
    // supervisor would have run it while plan next said the plan was stuck on it).
    let spent = ws.show("spent");
    assert_eq!(
        (spent["status"].as_str(), spent["attempts"].as_u64()),
        (Some("stuck"), Some(3))
    );
    ws.ok(&["task", "retry", "spent"]);
    assert_eq!(ws.show("spent")["attempts"], 0);
    ws.check_ok();
}

#[test]
fn export_round_trips_through_import() {
    let a = Workspace::new("export-a");
    assert_eq!(crate::common::code(&import(&a, "plan.json", PLAN_JSON)), 0);
    // Some runner state worth carrying: a passed leaf and a charged attempt. (The agent's
    // task `api` is finished through its review; plan apply finishes the shell task.)
    let tree = a.write("tree.json", serde_json::to_string(&export(&a)).unwrap());
    let tree = tree.to_str().unwrap();
    a.ok(&[
        "plan",
        "apply",
        tree,
        "--selected",
        "docs",
        "--status",
        "done",
        "--guard",
        "pass",
    ]);
    let tree2 = a.write("tree2.json", serde_json::to_string(&export(&a)).unwrap());
    a.ok(&[
        "plan",
        "apply",
        tree2.to_str().unwrap(),
        "--selected",
        "ui",
        "--status",
        "retry",
    ]);
    let exported = export(&a);
    let nodes = exported["tasks"].as_array().unwrap();
    assert_eq!(nodes.len(), 4);
    for n in nodes {
        for key in [
            "id",
            "title",
            "parent",
            "order",
            "depends_on",
            "prechecks",
            "postchecks",
            "max_attempts",
            "workflow",
            "passes",
            "attempts",
        ] {
            assert!(n.get(key).is_some(), "export lacks {key}: {n}");
        }
    }
    let docs = nodes.iter().find(|n| n["id"] == "docs").unwrap();
    assert_eq!(docs["passes"], true);
    let api = nodes.iter().find(|n| n["id"] == "api").unwrap();
    assert_eq!(api["agent"], "Build the API");
    let ui = nodes.iter().find(|n| n["id"] == "ui").unwrap();
    assert_eq!(ui["attempts"], 1);

    let b = Workspace::new("export-b");
    let o = import(
        &b,
        "exported.json",
        &serde_json::to_string_pretty(&exported).unwrap(),
    );
    assert_eq!(
        crate::common::code(&o),
        0,
        "{}",
        crate::common::describe(&["plan", "import"], &o)
    );
    // The tasks; `as_of_event` is each store's own.
    assert_eq!(
        export(&b)["tasks"],
        exported["tasks"],
        "export → import → export is the identity"
    );
    assert_eq!(
        b.show("docs")["status"],
        "done",
        "a node imported with passes starts done"
    );
    b.check_ok();
}

/// Two writers never lose an update: a file exported before another writer edited a
/// task is refused (exit 4, nothing written) when it states that task otherwise; one
/// that leaves the task as it is now still applies. Before, the stale file put the
/// task's old title back without a word.
#[test]
fn a_stale_file_does_not_undo_another_writers_edit() {
    let ws = Workspace::new("stale-edit");
    let plan = r#"{"tasks": [{"id": "root"}, {"id": "a", "parent": "root", "order": 1, "agent": "do a"}, {"id": "b", "parent": "root", "order": 2, "agent": "do b"}]}"#;
    assert_eq!(crate::common::code(&import(&ws, "plan.json", plan)), 0);
    let stale = ws.write("stale.json", serde_json::to_string(&export(&ws)).unwrap());
    ws.ok(&[
        "task",
        "edit",
        "a",
        "--title",
        "A renamed by another writer",
    ]);
    let before = ws.history();
    let o = ws.expect(
        &[
            "plan",
            "apply",
            stale.to_str().unwrap(),
            "--selected",
            "b",
            "--status",
            "retry",
        ],
        4,
    );
    assert!(
        crate::common::err_line(&o)
            .contains("the plan file changes task a, which was edited after the file was exported"),
        "{}",
        crate::common::err_line(&o)
    );
    assert_eq!(ws.history(), before, "nothing written");
    assert_eq!(ws.show("a")["title"], "A renamed by another writer");
    // A fresh export applies.
    let fresh = ws.write("fresh.json", serde_json::to_string(&export(&ws)).unwrap());
    ws.ok(&[
        "plan",
        "apply",
        fresh.to_str().unwrap(),
        "--selected",
        "b",
        "--status",
        "retry",
    ]);
    ws.check_ok();
}

/// A group's `passes` is its tasks', in `plan export` as in `task show`, and an apply of
/// that export notes no tamper for it. Before, an imported group whose tasks passed was
/// exported with `passes: false` while `task show` said true.
#[test]
fn a_groups_passes_in_an_export_are_its_tasks() {
    let ws = Workspace::new("export-group-passes");
    let plan =
        r#"{"tasks": [{"id": "g"}, {"id": "l", "parent": "g", "passes": true}, {"id": "o"}]}"#;
    assert_eq!(crate::common::code(&import(&ws, "plan.json", plan)), 0);
    assert_eq!(ws.show("g")["passes"], true);
    let exported = export(&ws);
    let g = exported["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "g")
        .unwrap()
        .clone();
    assert_eq!(g["passes"], true, "{exported}");
    let f = ws.write("tree.json", serde_json::to_string(&exported).unwrap());
    let v = ws.json(&[
        "plan",
        "apply",
        f.to_str().unwrap(),
        "--selected",
        "o",
        "--status",
        "retry",
    ]);
    assert_eq!(v["tamper_ignored"], json!([]), "{v}");
    // A file that says otherwise of the group is noted, as any runner field is.
    let mut edited = export(&ws);
    for n in edited["tasks"].as_array_mut().unwrap() {
        if n["id"] == "g" {
            n["passes"] = json!(false);
        }
    }
    let f = ws.write("tree2.json", serde_json::to_string(&edited).unwrap());
    let v = ws.json(&[
        "plan",
        "apply",
        f.to_str().unwrap(),
        "--selected",
        "o",
        "--status",
        "retry",
    ]);
    assert_eq!(v["tamper_ignored"], json!(["g"]), "{v}");
    ws.check_ok();
}

/// What a person cancelled stays cancelled through export and import (before, it came
/// back pending in the new store, and its agent ran); any other `status` in an import
/// file is refused rather than dropped without a word.
#[test]
fn a_cancelled_task_survives_export_and_import_and_other_statuses_are_refused() {
    let a = Workspace::new("export-cancelled");
    a.run_stdin(
        &["plan", "import", "-"],
        r#"{"tasks":[{"id":"g"},{"id":"done1","parent":"g","passes":true},{"id":"open","parent":"g"},
            {"id":"drop"},{"id":"keep"}]}"#,
    );
    a.ok(&["task", "cancel", "g"]);
    a.ok(&["task", "cancel", "drop"]);
    let exported = export(&a);
    let status_of = |v: &Value, id: &str| {
        v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == id)
            .unwrap()["status"]
            .clone()
    };
    assert_eq!(status_of(&exported, "g"), "cancelled");
    assert_eq!(status_of(&exported, "open"), "cancelled");
    assert_eq!(
        status_of(&exported, "done1"),
        Value::Null,
        "only cancelled is written"
    );
    let b = Workspace::new("import-cancelled");
    let o = b.run_stdin(&["plan", "import", "-"], &exported.to_string());
    assert_eq!(
        crate::common::code(&o),
        0,
        "{}",
        crate::common::describe(&["plan", "import"], &o)
    );
    for (id, status) in [
        ("g", "cancelled"),
        ("done1", "done"),
        ("open", "cancelled"),
        ("drop", "cancelled"),
        ("keep", "pending"),
    ] {
        assert_eq!(b.show(id)["status"], status, "{id}");
    }
    // The tasks; `as_of_event` is each store's own.
    assert_eq!(
        export(&b)["tasks"],
        exported["tasks"],
        "export → import → export is the identity"
    );
    b.check_ok();
    // Other statuses: refused, one line, nothing stored.
    let c = Workspace::new("import-status");
    let before = c.history().len();
    let o = c.run_stdin(
        &["plan", "import", "-"],
        r#"{"tasks":[{"id":"y","status":"done"}]}"#,
    );
    assert_eq!(crate::common::code(&o), 1);
    assert_eq!(
        err_line(&o),
        "refused: - was not imported (1 problem): task y: status done is not imported; a task starts pending, done with passes: true, stuck with attempts at max_attempts (only status: cancelled is taken)"
    );
    // A task's own problem is listed with the plan's, not after they are fixed.
    let o = c.run_stdin(
        &["plan", "import", "-"],
        r#"{"tasks":[{"id":"y","title":""},{"id":"z","depends_on":["nope"]}]}"#,
    );
    assert_eq!(crate::common::code(&o), 1);
    assert_eq!(
        err_line(&o),
        "refused: - was not imported (2 problems): task z depends on unknown task nope; add a task nope or remove it from depends_on; task y: the title is empty; give a title or leave it out to use the id"
    );
    let o = c.run_stdin(
        &["plan", "import", "-"],
        r#"{"tasks":[{"id":"y","status":"cancelled","passes":true}]}"#,
    );
    assert_eq!(crate::common::code(&o), 1);
    assert!(
        err_line(&o)
            .contains("task y has passes: true (done) and status: cancelled; keep one of them"),
        "{}",
        err_line(&o)
    );
    // An open task under a cancelled one is refused, as `task create` refuses it.
    let o = c.run_stdin(
        &["plan", "import", "-"],
        r#"{"tasks":[{"id":"cg","status":"cancelled"},{"id":"x","parent":"cg"}]}"#,
    );
    assert_eq!(crate::common::code(&o), 1);
    assert!(
        err_line(&o).contains("task x cannot go under cg: cg is cancelled"),
        "{}",
        err_line(&o)
    );
    assert_eq!(c.history().len(), before);
    c.check_ok();
}

/// `plan apply` keeps the tree's rules that `task create` and `task edit` keep: nothing
/// moved under a cancelled task, and no done or retry on a group (its passes come from
/// its tasks: before, `--selected GROUP --status done --guard pass` listed the group in
/// `passes_set` and stored nothing that meant it).
#[test]
fn apply_moves_nothing_under_a_cancelled_task_and_takes_no_verdict_on_a_group() {
    let ws = Workspace::new("apply-cancelled");
    ws.run_stdin(
        &["plan", "import", "-"],
        r#"{"tasks":[{"id":"cg"},{"id":"x","parent":"cg"},{"id":"w"},{"id":"s"},
            {"id":"g"},{"id":"a","parent":"g"}]}"#,
    );
    ws.ok(&["task", "cancel", "cg"]);
    let before = ws.history().len();
    let moved = write_tree(&ws, "moved.json", |nodes| {
        node(nodes, "w")["parent"] = json!("cg");
    });
    let o = ws.expect(
        &[
            "plan",
            "apply",
            &moved,
            "--selected",
            "s",
            "--status",
            "retry",
        ],
        1,
    );
    assert_eq!(
        err_line(&o),
        "refused: task w cannot go under cg: cg is cancelled, and nothing under a cancelled task runs; give it another parent"
    );
    let same = write_tree(&ws, "same.json", |_| {});
    let o = ws.expect(
        &[
            "plan",
            "apply",
            &same,
            "--selected",
            "g",
            "--status",
            "done",
            "--guard",
            "pass",
        ],
        1,
    );
    assert_eq!(
        err_line(&o),
        "refused: selected task g is a group: its status and passes come from the tasks in it (a); select one of them, or use --status decomposed to add tasks under it"
    );
    ws.expect(
        &[
            "plan",
            "apply",
            &same,
            "--selected",
            "g",
            "--status",
            "retry",
        ],
        1,
    );
    assert_eq!(ws.history().len(), before, "nothing stored");
    // Adding a task under the group still works.
    let more = write_tree(&ws, "more.json", |nodes| {
        nodes.push(json!({"id": "b", "parent": "g"}));
    });
    ws.ok(&[
        "plan",
        "apply",
        &more,
        "--selected",
        "g",
        "--status",
        "decomposed",
    ]);
    assert_eq!(ws.show("b")["status"], "pending");
    ws.check_ok();
}

#[test]
fn show_prints_the_tree() {
    let ws = Workspace::new("show");
    let o = ws.ok(&["plan", "show"]);
    assert!(text(&o.stdout).contains("no tasks"));
    assert_eq!(crate::common::code(&import(&ws, "plan.json", PLAN_JSON)), 0);
    let v = ws.json(&["plan", "show"]);
    let roots: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(roots, ["app", "docs"]);
    let kids: Vec<&str> = v[0]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(kids, ["ui", "api"]);
    assert_eq!(v[0]["children"][0]["depends_on"], json!(["api"]));
    assert_eq!(v[0]["children"][0]["status"], "pending");
    let o = ws.ok(&["plan", "show"]);
    let out = text(&o.stdout);
    let (ui, api) = (out.find(" ui ").unwrap(), out.find(" api ").unwrap());
    assert!(ui < api, "children in order:\n{out}");
    assert!(out.contains("(after api)"), "{out}");
}

fn write_tree(ws: &Workspace, name: &str, edit: impl FnOnce(&mut Vec<Value>)) -> String {
    let mut v = export(ws);
    let nodes = v["tasks"].as_array_mut().unwrap();
    edit(nodes);
    ws.write(name, serde_json::to_string_pretty(&v).unwrap())
        .to_str()
        .unwrap()
        .to_owned()
}

fn node<'a>(nodes: &'a mut [Value], id: &str) -> &'a mut Value {
    nodes
        .iter_mut()
        .find(|n| n["id"] == id)
        .unwrap_or_else(|| panic!("no node {id}"))
}

#[test]
fn apply_reconciles_an_edited_tree() {
    let ws = Workspace::new("apply");
    let plan = r#"{"tasks": [
      {"id": "app"},
      {"id": "api", "parent": "app", "order": 0},
      {"id": "ui", "parent": "app", "order": 1},
      {"id": "x"},
      {"id": "y"}
    ]}"#;
    assert_eq!(crate::common::code(&import(&ws, "plan.json", plan)), 0);

    // done + pass: passes set; the parent is derived once every child passes.
    let f = write_tree(&ws, "t1.json", |_| {});
    let v = ws.json(&[
        "plan",
        "apply",
        &f,
        "--selected",
        "api",
        "--status",
        "done",
        "--guard",
        "pass",
    ]);
    assert_eq!(v["passes_set"], json!(["api"]));
    assert_eq!(v["derived_passes_set"], json!([]));
    assert_eq!(v["attempts_incremented"], json!([]));
    assert_eq!(v["tamper_ignored"], json!([]));
    assert_eq!(ws.show("api")["status"], "done");
    assert_eq!(ws.show("api")["passes"], true);
    assert_eq!(ws.show("app")["passes"], false);
    let f = write_tree(&ws, "t2.json", |_| {});
    let v = ws.json(&[
        "plan",
        "apply",
        &f,
        "--selected",
        "ui",
        "--status",
        "done",
        "--guard",
        "pass",
    ]);
    assert_eq!(v["passes_set"], json!(["ui"]));
    assert_eq!(v["derived_passes_set"], json!(["app"]));
    assert_eq!(ws.show("app")["passes"], true);
    assert!(!ws.events("plan.applied", None).is_empty());

    // retry: attempts + 1; a pending leaf becomes working.
    let f = write_tree(&ws, "t3.json", |_| {});
    let v = ws.json(&["plan", "apply", &f, "--selected", "x", "--status", "retry"]);
    assert_eq!(v["attempts_incremented"], json!(["x"]));
    let x = ws.show("x");
    assert_eq!(
        (x["attempts"].as_u64(), x["status"].as_str()),
        (Some(1), Some("working"))
    );
    // done + fail also charges an attempt.
    let f = write_tree(&ws, "t4.json", |_| {});
    let v = ws.json(&[
        "plan",
        "apply",
        &f,
        "--selected",
        "x",
        "--status",
        "done",
        "--guard",
        "fail",
    ]);
    assert_eq!(v["attempts_incremented"], json!(["x"]));
    assert_eq!(ws.show("x")["attempts"], 2);

    // Tampered runner-owned fields in the file are ignored and listed.
    let f = write_tree(&ws, "t5.json", |nodes| {
        let y = node(nodes, "y");
        y["passes"] = json!(true);
        y["attempts"] = json!(0);
        let x = node(nodes, "x");
        x["attempts"] = json!(0);
        x["passes"] = json!(true);
    });
    let v = ws.json(&[
        "plan",
        "apply",
        &f,
        "--selected",
        "x",
        "--status",
        "done",
        "--guard",
        "skipped",
    ]);
    assert_eq!(v["tamper_ignored"], json!(["x", "y"]));
    assert_eq!(v["passes_set"], json!([]));
    assert_eq!(ws.show("y")["passes"], false);
    let x = ws.show("x");
    assert_eq!(
        (x["attempts"].as_u64(), x["passes"].as_bool()),
        (Some(2), Some(false))
    );

    // Refusals: nothing written.
    let versions = |ws: &Workspace| -> Vec<u64> {
        ws.tasks()
            .iter()
            .map(|t| t["version"].as_u64().unwrap())
            .collect()
    };
    let before = versions(&ws);
    let events0 = ws.history().len();
    let f = write_tree(&ws, "t6.json", |_| {});
    let o = ws.expect(
        &[
            "plan",
            "apply",
            &f,
            "--selected",
            "y",
            "--status",
            "decomposed",
        ],
        1,
    );
    assert!(err_line(&o).starts_with("refused"), "{}", err_line(&o));
    ws.expect(
        &["plan", "apply", &f, "--selected", "y", "--status", "done"],
        2,
    );
    ws.expect(
        &[
            "plan",
            "apply",
            &f,
            "--selected",
            "y",
            "--status",
            "finished",
        ],
        2,
    );
    ws.expect(
        &[
            "plan",
            "apply",
            &f,
            "--selected",
            "y",
            "--status",
            "done",
            "--guard",
            "maybe",
        ],
        2,
    );
    ws.expect(
        &[
            "plan",
            "apply",
            &f,
            "--selected",
            "ghost",
            "--status",
            "retry",
        ],
        1,
    );
    let with_child = write_tree(&ws, "t7.json", |nodes| {
        nodes.push(json!({"id": "y1", "parent": "y"}))
    });
    ws.expect(
        &[
            "plan",
            "apply",
            &with_child,
            "--selected",
            "y",
            "--status",
            "retry",
        ],
        1,
    );
    let elsewhere = write_tree(&ws, "t8.json", |nodes| {
        nodes.push(json!({"id": "z1", "parent": "x"}))
    });
    ws.expect(
        &[
            "plan",
            "apply",
            &elsewhere,
            "--selected",
            "y",
            "--status",
            "decomposed",
        ],
        1,
    );
    let removed_passed = write_tree(&ws, "t9.json", |nodes| nodes.retain(|n| n["id"] != "api"));
    ws.expect(
        &[
            "plan",
            "apply",
            &removed_passed,
            "--selected",
            "y",
            "--status",
            "retry",
        ],
        1,
    );
    let changed_passed = write_tree(&ws, "t10.json", |nodes| {
        node(nodes, "api")["title"] = json!("renamed")
    });
    ws.expect(
        &[
            "plan",
            "apply",
            &changed_passed,
            "--selected",
            "y",
            "--status",
            "retry",
        ],
        1,
    );
    let dup = write_tree(&ws, "t11.json", |nodes| nodes.push(json!({"id": "y"})));
    ws.expect(
        &[
            "plan",
            "apply",
            &dup,
            "--selected",
            "y",
            "--status",
            "retry",
        ],
        1,
    );
    assert_eq!(versions(&ws), before, "refused applies write nothing");
    assert_eq!(ws.history().len(), events0);

    // decomposed with new children: they are created under the selected node.
    let v = ws.json(&[
        "plan",
        "apply",
        &with_child,
        "--selected",
        "y",
        "--status",
        "decomposed",
    ]);
    assert_eq!(v["passes_set"], json!([]));
    let y1 = ws.show("y1");
    assert_eq!(
        (
            y1["parent"].as_str(),
            y1["passes"].as_bool(),
            y1["attempts"].as_u64()
        ),
        (Some("y"), Some(false), Some(0))
    );
    assert_eq!(ids(&ws.show("y")["children"]), ["y1"]);
    // A batch writes no TASK.md; the child's comes with its first write.
    assert!(!ws.task_md("y1").exists());
    ws.ok(&["task", "update", "y1", "--status", "working"]);
    assert!(ws.task_md("y1").is_file());
    ws.check_ok();
}

/// A file exported before a task was created (or before it changed) does not remove
/// it: its editor never saw the task as it is. The apply is a conflict (exit 4) that
/// changes nothing; exported again, the removal goes through and is listed.
#[test]
fn a_stale_file_removes_nothing_it_did_not_see() {
    let ws = Workspace::new("applystale");
    let plan = r#"{"tasks": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}"#;
    assert_eq!(crate::common::code(&import(&ws, "plan.json", plan)), 0);
    let old = write_tree(&ws, "old.json", |_| {});
    let without_c = write_tree(&ws, "noc.json", |n| n.retain(|t| t["id"] != "c"));
    let without_b = write_tree(&ws, "nob.json", |n| n.retain(|t| t["id"] != "b"));
    // A task created and a task started after those files were exported.
    ws.create("urgent", &[]);
    ws.to("b", "working");
    let before = ws.history();
    for (file, gone) in [(&old, "urgent"), (&without_c, "urgent"), (&without_b, "b")] {
        let o = ws.expect(
            &[
                "plan",
                "apply",
                file,
                "--selected",
                "a",
                "--status",
                "retry",
            ],
            4,
        );
        let err = crate::common::err_line(&o);
        assert!(
            err.contains(&format!(
                "removes task {gone}, which changed after the file was exported"
            )) && err.contains("warden plan export"),
            "{err}"
        );
    }
    // A number past the store's newest event (edited, or another store's) excuses nothing.
    let ahead = write_tree(&ws, "ahead.json", |n| n.retain(|t| t["id"] != "urgent"));
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&ahead).unwrap()).unwrap();
    v["as_of_event"] = json!(1_000_000);
    let ahead = ws.write("ahead.json", v.to_string());
    let o = ws.expect(
        &[
            "plan",
            "apply",
            ahead.to_str().unwrap(),
            "--selected",
            "a",
            "--status",
            "retry",
        ],
        1,
    );
    assert!(
        crate::common::err_line(&o)
            .contains("as_of_event 1000000 is past this store's newest event"),
        "{o:?}"
    );
    assert_eq!(ws.history(), before, "a refused apply writes nothing");
    // Exported again, the removal goes through and is listed.
    let fresh = write_tree(&ws, "fresh.json", |n| n.retain(|t| t["id"] != "c"));
    let v = ws.json(&[
        "plan",
        "apply",
        &fresh,
        "--selected",
        "a",
        "--status",
        "retry",
    ]);
    assert_eq!(v["removed"], json!(["c"]));
    assert_eq!(v["created"], json!([]));
    assert_eq!(ws.show("urgent")["status"], "pending");
    ws.check_ok();
}

/// `plan apply --status done --guard pass` is a runner's decision, but not one past
/// what the store knows: a task waiting on an unfinished dependency, a stuck one, and
/// an agent's work its reviewer has not passed are refused, nothing written (merge-ri
/// included). Before, an orchestrator finished all three on its word.
#[test]
fn a_done_apply_finishes_nothing_the_store_says_is_not_ready() {
    let ws = Workspace::new("applydone");
    let plan = r#"{"tasks": [
      {"id": "base", "work": "true"},
      {"id": "dep", "work": "true", "depends_on": ["base"]},
      {"id": "spent", "work": "true", "max_attempts": 1},
      {"id": "rvw", "agent": "Build it"}
    ]}"#;
    assert_eq!(crate::common::code(&import(&ws, "plan.json", plan)), 0);
    let f = write_tree(&ws, "t.json", |_| {});
    ws.ok(&[
        "plan",
        "apply",
        &f,
        "--selected",
        "spent",
        "--status",
        "retry",
    ]);
    assert_eq!(ws.show("spent")["status"], "stuck");
    ws.ok(&["task", "update", "rvw", "--status", "working"]);
    let done = |id: &str| {
        let f = write_tree(&ws, "t.json", |_| {});
        let args = [
            "plan",
            "apply",
            &f,
            "--selected",
            id,
            "--status",
            "done",
            "--guard",
            "pass",
        ];
        ws.run(&args)
    };
    let stored = || (ws.tasks(), text(&ws.ok(&["--json", "history"]).stdout));
    let before = stored();
    for (id, why) in [
        (
            "dep",
            "plan apply cannot finish task dep: it depends on base, which is pending; finish that first",
        ),
        (
            "spent",
            "plan apply cannot finish task spent: it is stuck (its attempts are used up); a person runs it again first: warden task retry spent",
        ),
        (
            "rvw",
            "plan apply cannot finish task rvw: it is in the review workflow and working, so done would skip its review",
        ),
    ] {
        let o = done(id);
        assert_eq!(crate::common::code(&o), 1, "{id}: {}", text(&o.stderr));
        assert!(err_line(&o).contains(why), "{id}: {}", err_line(&o));
        assert_eq!(stored(), before, "{id}: nothing written");
    }
    // Nor through children: a stuck task or one in review gains none, and a child
    // waits for its group's dependencies (before, finishing a child finished them).
    let decompose = |id: &str| {
        let child = format!("{id}-part");
        let f = write_tree(&ws, "t.json", |nodes| {
            nodes.push(json!({"id": child, "parent": id, "work": "true"}));
        });
        ws.run(&[
            "plan",
            "apply",
            &f,
            "--selected",
            id,
            "--status",
            "decomposed",
        ])
    };
    for (id, why) in [
        (
            "spent",
            "plan apply cannot decompose task spent: it is stuck, so it is not its agent's to decompose now",
        ),
        (
            "rvw",
            "plan apply cannot decompose task rvw: it is agent-review, so it is not its agent's to decompose now (its review decides it first)",
        ),
    ] {
        if id == "rvw" {
            ws.handoff("rvw");
            ws.ok(&["task", "complete", "rvw"]);
        }
        let before = stored();
        let o = decompose(id);
        assert_eq!(crate::common::code(&o), 1, "{id}: {}", text(&o.stderr));
        assert!(err_line(&o).contains(why), "{id}: {}", err_line(&o));
        assert_eq!(stored(), before, "{id}: nothing written");
    }
    assert_eq!(
        crate::common::code(&decompose("dep")),
        0,
        "a pending task plans"
    );
    let before = stored();
    let o = done("dep-part");
    assert_eq!(crate::common::code(&o), 1, "{}", text(&o.stderr));
    assert!(
        err_line(&o).contains(
            "plan apply cannot finish task dep-part: it depends on base, which is pending"
        ),
        "{}",
        err_line(&o)
    );
    assert_eq!(stored(), before, "nothing written");
    // What the store allows: the dependency first, then the task that waited on it.
    for id in ["base", "dep-part"] {
        assert_eq!(crate::common::code(&done(id)), 0, "{id}");
        assert_eq!(ws.show(id)["status"], "done", "{id}");
    }
    assert_eq!(
        ws.show("dep")["status"],
        "done",
        "the group is done by its task"
    );
    ws.check_ok();
}

#[test]
fn attempts_saturate_into_stuck_through_apply() {
    let ws = Workspace::new("applystuck");
    assert_eq!(
        crate::common::code(&import(
            &ws,
            "plan.json",
            r#"{"tasks": [{"id": "s", "max_attempts": 2}]}"#
        )),
        0
    );
    for _ in 0..2 {
        let f = write_tree(&ws, "t.json", |_| {});
        ws.ok(&["plan", "apply", &f, "--selected", "s", "--status", "retry"]);
    }
    let s = ws.show("s");
    assert_eq!(
        (s["attempts"].as_u64(), s["status"].as_str()),
        (Some(2), Some("stuck"))
    );
    let f = write_tree(&ws, "t.json", |_| {});
    let v = ws.json(&["plan", "apply", &f, "--selected", "s", "--status", "retry"]);
    assert_eq!(
        v["attempts_incremented"],
        json!([]),
        "saturated at max_attempts"
    );
    assert_eq!(ws.show("s")["attempts"], 2);
    ws.check_ok();
}

#[test]
fn next_names_the_leftmost_ready_leaf() {
    let ws = Workspace::new("next");
    let plan = r#"{"tasks": [
      {"id": "g"},
      {"id": "b", "parent": "g", "order": 1, "depends_on": ["a"]},
      {"id": "a", "parent": "g", "order": 2}
    ]}"#;
    assert_eq!(crate::common::code(&import(&ws, "plan.json", plan)), 0);
    assert_eq!(
        ws.json(&["plan", "next"]),
        json!({"next": "a", "state": "open"}),
        "b waits for a"
    );
    let o = ws.ok(&["plan", "next"]);
    assert!(text(&o.stdout).contains("a"));
    let f = write_tree(&ws, "t.json", |_| {});
    ws.ok(&[
        "plan",
        "apply",
        &f,
        "--selected",
        "a",
        "--status",
        "done",
        "--guard",
        "pass",
    ]);
    assert_eq!(
        ws.json(&["plan", "next"]),
        json!({"next": "b", "state": "open"})
    );
    // b crashes twice: stuck, and nothing else is open.
    ws.to("b", "working");
    ws.ok(&["task", "exited", "b"]);
    ws.ok(&["task", "exited", "b"]);
    assert_eq!(ws.status("b"), "stuck");
    assert_eq!(
        ws.json(&["plan", "next"]),
        json!({"next": null, "state": "stuck", "stuck_on": [{"task": "b", "status": "stuck"}]})
    );
    assert_eq!(
        text(&ws.ok(&["plan", "next"]).stdout).trim_end(),
        "no open leaf is ready; the plan is stuck on b (stuck)\n  → `warden task retry b`"
    );
    ws.ok(&["task", "retry", "b"]);
    let f = write_tree(&ws, "t.json", |_| {});
    ws.ok(&[
        "plan",
        "apply",
        &f,
        "--selected",
        "b",
        "--status",
        "done",
        "--guard",
        "pass",
    ]);
    assert_eq!(
        ws.json(&["plan", "next"]),
        json!({"next": null, "state": "complete"})
    );
    assert_eq!(ws.show("g")["passes"], true);
    ws.check_ok();
}

#[test]
fn sync_follows_the_planning_directory() {
    let ws = Workspace::new("sync");
    ws.expect(&["plan", "sync"], 2); // no .planning yet
    ws.write(
        ".planning/phases/01-setup/01-01-PLAN.md",
        "# Set up the repo\n\nSteps.\n",
    );
    ws.write(".planning/phases/01-setup/01-01-SUMMARY.md", "Done.\n");
    ws.write(".planning/phases/01-setup/01-02-PLAN.md", "# Add CI\n");
    ws.write(".planning/phases/02-build/02-01-PLAN.md", "# Build it\n");
    ws.write(".planning/phases/notes/README.md", "not a phase\n");
    let v = ws.json(&["plan", "sync"]);
    // `phases/notes` has no GSD number and no plan: a warning, and no task.
    assert_eq!(v["phases"], 3);
    assert_eq!(v["phases_without_plans"], json!(["phases/notes"]));
    assert!(
        v["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["path"] == "phases/notes" && w["kind"] == "no_phase_number"),
        "{v}"
    );
    assert_eq!(v["plans"], 3);
    assert_eq!(v["complete"], 1);
    let phase = ws.show("01-setup");
    assert_eq!(ids(&phase["children"]), ["01-01", "01-02"]);
    let p = ws.show("01-01");
    assert_eq!(p["title"], "Set up the repo");
    assert_eq!(p["passes"], true, "a plan with a SUMMARY passes");
    assert_eq!(p["status"], "done");
    assert_eq!(ws.show("01-02")["passes"], false);
    assert_eq!(ws.show("02-01")["parent"], "02-build");
    // Old plans run one by one; a phase starts when the one before it is done.
    assert_eq!(ws.show("01-02")["depends_on"], json!(["01-01"]));
    assert_eq!(ws.show("02-01")["depends_on"], json!(["01-01", "01-02"]));
    assert_eq!(ws.tasks().len(), 5);

    // Syncing again without changes changes nothing.
    let versions: Vec<u64> = ws
        .tasks()
        .iter()
        .map(|t| t["version"].as_u64().unwrap())
        .collect();
    let v = ws.json(&["plan", "sync"]);
    assert_eq!(v["changed"], 0, "{v}");
    let again: Vec<u64> = ws
        .tasks()
        .iter()
        .map(|t| t["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, again);

    // A done task never moves back: a deleted SUMMARY is reported, not obeyed.
    std::fs::remove_file(ws.path(".planning/phases/01-setup/01-01-SUMMARY.md")).unwrap();
    let v = ws.json(&["plan", "sync"]);
    assert_eq!(ws.show("01-01")["status"], "done");
    assert!(
        v["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["task"] == "01-01" && n["kind"] == "done_in_warden_only"),
        "{v}"
    );
    // A new SUMMARY of a plan nobody started: finished outside Warden, with its reason.
    ws.write(".planning/phases/01-setup/01-02-SUMMARY.md", "Done.\n");
    let v = ws.json(&["plan", "sync"]);
    assert_eq!(v["finished_outside"], json!(["01-02"]), "{v}");
    assert_eq!(ws.show("01-02")["status"], "done");
    assert_eq!(ws.show("01-setup")["status"], "done", "every plan is done");
    let h = text(&ws.ok(&["history", "01-02"]).stdout);
    assert!(
        h.contains(
            "plan sync: finished outside Warden (.planning/phases/01-setup/01-02-SUMMARY.md exists)"
        ),
        "{h}"
    );
    ws.check_ok();
}

/// `warden plan sync DIR` reads DIR (not `.planning`), in the current workspace.
#[test]
fn sync_reads_an_explicit_planning_directory() {
    let ws = Workspace::new("syncdir");
    ws.write("docs/planning/phases/01-setup/01-01-PLAN.md", "# Set up\n");
    ws.write("docs/planning/phases/01-setup/01-01-SUMMARY.md", "Done.\n");
    let dir = ws.path("docs/planning");
    for arg in ["docs/planning", dir.to_str().unwrap()] {
        let o = ws.run(&["plan", "sync", arg]);
        assert_eq!(
            crate::common::code(&o),
            0,
            "the DIR argument must name the planning directory, not the workspace: {}",
            crate::common::describe(&["plan", "sync", arg], &o)
        );
    }
    assert_eq!(ws.show("01-01")["passes"], true);
}

/// The full plan in `plan import --help` is a plan `plan import` takes, with every
/// field the help lists.
#[test]
fn the_plan_in_import_help_imports() {
    let ws = Workspace::new("import-help");
    let help = text(&ws.ok(&["plan", "import", "--help"]).stdout);
    let start = help.find("  {\"tasks\": [").expect("an example plan");
    let end = start + help[start..].find("\n  ]}").expect("its end") + 5;
    let plan = &help[start..end];
    for field in [
        "\"id\"",
        "\"title\"",
        "\"parent\"",
        "\"order\"",
        "\"depends_on\"",
        "\"agent\"",
        "\"work\"",
        "\"prechecks\"",
        "\"postchecks\"",
        "\"max_attempts\"",
        "\"workflow\"",
        "\"body\"",
    ] {
        assert!(
            plan.contains(field),
            "{field} is not in the example:\n{plan}"
        );
    }
    ws.write("plan.json", plan);
    ws.ok(&["plan", "import", "plan.json"]);
    assert_eq!(ws.show("ui")["depends_on"][0], "api");
    assert_eq!(
        ws.show("api")["spec"]["postchecks"]["shell"],
        "cargo test -p api"
    );
    assert_eq!(ws.show("migrate")["workflow"], "direct");
}
