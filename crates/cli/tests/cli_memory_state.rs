//! `warden memory`, `prompt`, `history`, `state` and `check` through the real binary
//! (DESIGN 2.5, 2.6, 2.7 and 4).

use crate::common::{Workspace, code, describe, err_line, text};
use serde_json::{Value, json};

#[test]
fn memory_merges_from_a_file_and_stdin_with_caps() {
    let ws = Workspace::new("memory");
    ws.create("m", &[]);
    let v = ws.json(&["memory", "show", "m"]);
    let obj = v.as_object().expect("memory show --json is an object");
    let mut keys: Vec<&str> = obj.keys().map(|k| k.as_str()).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "constraints",
            "decisions",
            "goals",
            "history",
            "hypotheses",
            "next_focus",
            "open_issues"
        ],
        "the seven fields"
    );
    let o = ws.ok(&["memory", "show", "m"]);
    assert!(!text(&o.stdout).trim().is_empty());

    let delta = ws.write(
        "delta.json",
        r#"{"goals": ["ship login"], "decisions": ["use argon2"], "history": ["h1", "h2"], "next_focus": "write tests"}"#,
    );
    ws.ok(&["memory", "merge", "m", delta.to_str().unwrap()]);
    let o = ws.run_stdin(
        &["--json", "memory", "merge", "m", "-"],
        r#"{"decisions": ["keep sessions in sqlite"], "history": ["h3", "h4"], "next_focus": ""}"#,
    );
    assert_eq!(
        code(&o),
        0,
        "{}",
        describe(&["memory", "merge", "m", "-"], &o)
    );
    let printed: Value = serde_json::from_slice(&o.stdout).unwrap();
    let v = ws.json(&["memory", "show", "m"]);
    assert_eq!(printed, v, "merge --json prints the merged memory");
    assert_eq!(v["goals"], json!(["ship login"]));
    assert_eq!(
        v["decisions"],
        json!(["use argon2", "keep sessions in sqlite"]),
        "lists concatenate"
    );
    assert_eq!(
        v["history"],
        json!(["h2", "h3", "h4"]),
        "history keeps the last 3"
    );
    assert_eq!(
        v["next_focus"], "write tests",
        "an empty next_focus does not replace"
    );

    // Strings are cut to 256 characters, never inside a character.
    let long = "é".repeat(300);
    let o = ws.run_stdin(
        &["memory", "merge", "m", "-"],
        &json!({"hypotheses": [long]}).to_string(),
    );
    assert_eq!(code(&o), 0, "{}", describe(&["memory", "merge"], &o));
    let h = ws.json(&["memory", "show", "m"])["hypotheses"][0]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(h.chars().count(), 256);
    assert!(h.chars().all(|c| c == 'é'));

    // The id may come from WARDEN_TASK_ID with only the file given.
    let d2 = ws.write("d2.json", r#"{"open_issues": ["rate limits?"]}"#);
    let o = ws.run_env(
        &["memory", "merge", d2.to_str().unwrap()],
        &[("WARDEN_TASK_ID", "m")],
    );
    assert_eq!(
        code(&o),
        0,
        "{}",
        describe(&["memory", "merge", "FILE"], &o)
    );
    assert_eq!(
        ws.json(&["memory", "show", "m"])["open_issues"],
        json!(["rate limits?"])
    );

    // Refusals change nothing.
    let before = ws.json(&["memory", "show", "m"]);
    let events0 = ws.history().len();
    let o = ws.run_stdin(
        &["memory", "merge", "m", "-"],
        r#"{"decisions": ["x"], "bogus": ["y"]}"#,
    );
    assert_eq!(
        code(&o),
        1,
        "unknown key: {}",
        describe(&["memory", "merge"], &o)
    );
    assert!(err_line(&o).contains("bogus"), "{}", err_line(&o));
    let o = ws.run_stdin(&["memory", "merge", "m", "-"], "not json");
    assert_eq!(code(&o), 1, "{}", describe(&["memory", "merge"], &o));
    let o = ws.run_stdin(
        &["memory", "merge", "m", "-"],
        r#"{"decisions": "not a list"}"#,
    );
    assert_eq!(code(&o), 1, "{}", describe(&["memory", "merge"], &o));
    let o = ws.run_stdin(&["memory", "merge", "nope", "-"], r#"{"decisions": ["x"]}"#);
    assert_eq!(
        code(&o),
        3,
        "{}",
        describe(&["memory", "merge", "nope"], &o)
    );
    ws.expect(&["memory", "merge", "m", "/nonexistent/delta.json"], 2);
    assert_eq!(ws.json(&["memory", "show", "m"]), before);
    assert_eq!(ws.history().len(), events0);
    ws.expect(&["memory", "show", "nope"], 3);
    ws.expect(&["memory", "dump", "nope"], 3);

    // dump: the block embedded in prompts.
    let o = ws.ok(&["memory", "dump", "m"]);
    let out = text(&o.stdout);
    assert!(out.starts_with("<state>\n"), "{out}");
    assert!(out.trim_end().ends_with("</state>"), "{out}");
    for want in [
        "Goals:\n- ship login",
        "Decisions:\n- use argon2\n- keep sessions in sqlite",
        "History:\n- h2\n- h3\n- h4",
        "Open issues:\n- rate limits?",
        "Next focus: write tests",
    ] {
        assert!(out.contains(want), "dump lacks {want:?}:\n{out}");
    }
    assert!(
        !out.contains("Constraints:"),
        "empty lists are left out:\n{out}"
    );
    let v = ws.json(&["memory", "dump", "m"]);
    assert_eq!(v["block"].as_str().unwrap(), out.trim_end());
    assert_eq!(ws.events("memory.merged", Some("m")).len(), 4);
    ws.check_ok();
}

#[test]
fn prompt_embeds_memory_and_the_task_file() {
    let ws = Workspace::new("prompt");
    ws.create("p", &["--agent", "Build the login page"]);
    let o = ws.expect(&["prompt", "p"], 1);
    assert!(err_line(&o).contains("pending"), "{}", err_line(&o));
    ws.expect(&["prompt", "nope"], 3);
    let o = ws.run_stdin(
        &["memory", "merge", "p", "-"],
        r#"{"decisions": ["use argon2"], "next_focus": "forms"}"#,
    );
    assert_eq!(code(&o), 0);
    ws.to("p", "working");
    let o = ws.ok(&["prompt", "p"]);
    let out = text(&o.stdout);
    assert!(out.contains("<state>") && out.contains("</state>"), "{out}");
    assert!(out.contains("- use argon2"), "{out}");
    assert!(out.contains("Next focus: forms"), "{out}");
    let task_file = ws.task_md("p");
    assert!(
        out.contains(task_file.to_str().unwrap()),
        "names the task file {}:\n{out}",
        task_file.display()
    );
    assert!(out.contains("Build the login page"), "{out}");
    assert!(
        out.contains("Handoff"),
        "names the artifact to write:\n{out}"
    );
    let v = ws.json(&["prompt", "p"]);
    assert_eq!(v["prompt"].as_str().unwrap().trim_end(), out.trim_end());
    assert!(v["kind"].is_string());

    // The reviewer gets a different prompt.
    ws.handoff("p");
    ws.ok(&["task", "complete", "p"]);
    let reviewer = ws.json(&["prompt", "p"]);
    assert_ne!(reviewer["kind"], v["kind"]);
    assert!(reviewer["prompt"].as_str().unwrap().contains("Review"));
    // A person's override of the template is used.
    let kind = reviewer["kind"].as_str().unwrap().to_owned();
    ws.write(
        &format!(".warden/prompts/{kind}.md"),
        "CUSTOM REVIEW PROMPT\n",
    );
    let o = ws.ok(&["prompt", "p"]);
    assert!(
        text(&o.stdout).contains("CUSTOM REVIEW PROMPT"),
        "{}",
        text(&o.stdout)
    );
    // Done: no prompt.
    ws.create("d", &[]);
    ws.ok(&["task", "cancel", "d"]);
    ws.expect(&["prompt", "d"], 1);
}

#[test]
fn history_json_lines_have_the_documented_fields() {
    let ws = Workspace::new("history");
    let o = ws.ok(&["history"]);
    assert!(text(&o.stdout).contains("no events"));
    assert!(ws.history().is_empty());
    ws.create("a", &[]);
    ws.create("b", &[]);
    ws.ok(&[
        "task", "update", "a", "--status", "working", "--reason", "starting",
    ]);
    let o = ws.run_stdin(&["memory", "merge", "b", "-"], r#"{"goals": ["g"]}"#);
    assert_eq!(code(&o), 0);
    let all = ws.history();
    assert_eq!(all.len(), 4, "{all:?}");
    let mut last_seq = 0;
    for e in &all {
        for key in ["seq", "at", "task", "type", "from", "to", "reason", "actor"] {
            assert!(e.get(key).is_some(), "event lacks {key}: {e}");
        }
        let seq = e["seq"].as_u64().unwrap();
        assert!(seq > last_seq, "oldest first, seq increasing: {all:?}");
        last_seq = seq;
        assert!(e["at"].is_string());
        assert_eq!(e["actor"], "person");
    }
    let types: Vec<&str> = all.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "task.created",
            "task.created",
            "status.changed",
            "memory.merged"
        ]
    );
    let sc = &all[2];
    assert_eq!(
        (sc["task"].as_str(), sc["from"].as_str(), sc["to"].as_str()),
        (Some("a"), Some("pending"), Some("working"))
    );
    assert_eq!(sc["reason"], "starting");
    assert!(all[0]["from"].is_null() && all[3]["to"].is_null());
    // One task's history.
    let only_a = ws.json_lines(&["history", "a"]);
    assert_eq!(only_a.len(), 2);
    assert!(only_a.iter().all(|e| e["task"] == "a"));
    ws.expect(&["history", "nope"], 3);
    ws.expect(&["history", "../x"], 2);
    let o = ws.ok(&["history"]);
    assert_eq!(text(&o.stdout).lines().count(), 4);
}

#[test]
fn state_write_and_verify() {
    let ws = Workspace::new("state");
    ws.expect(&["state", "verify"], 3); // not written yet
    let plan = ws.write(
        "plan.json",
        r#"{"tasks": [{"id": "p1"}, {"id": "a", "parent": "p1"}, {"id": "b", "parent": "p1"}, {"id": "p2"}, {"id": "c", "parent": "p2"}]}"#,
    );
    ws.ok(&["plan", "import", plan.to_str().unwrap()]);
    let o = ws.ok(&["state"]);
    let printed = text(&o.stdout);
    assert!(printed.contains('░'), "a progress bar:\n{printed}");
    assert!(
        !ws.path(".warden/STATE.md").exists(),
        "plain `state` writes nothing"
    );
    let v = ws.json(&["state", "--write"]);
    assert_eq!(v["path"], ".warden/STATE.md");
    let written = std::fs::read_to_string(ws.path(".warden/STATE.md")).unwrap();
    assert_eq!(written, printed, "state --write writes what state prints");
    ws.ok(&["state", "verify"]);
    assert_eq!(ws.json(&["state", "verify"])["ok"], true);

    // Kept up to date by later writes once it exists.
    ws.to("a", "working");
    ws.ok(&["state", "verify"]);
    let now = std::fs::read_to_string(ws.path(".warden/STATE.md")).unwrap();
    assert_ne!(now, written, "STATE.md follows the change");
    assert!(now.contains("In progress"), "{now}");

    // An edited line is reported.
    let lines: Vec<&str> = now.lines().collect();
    let idx = lines
        .iter()
        .position(|l| l.contains('░'))
        .expect("a progress line");
    let mut edited: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    edited[idx] = "Progress: [####################] 100%".to_owned();
    std::fs::write(ws.path(".warden/STATE.md"), edited.join("\n") + "\n").unwrap();
    let o = ws.expect(&["state", "verify"], 1);
    assert!(
        text(&o.stdout).contains(&format!("line {}", idx + 1)),
        "{}",
        describe(&["state", "verify"], &o)
    );
    assert!(err_line(&o).contains("state --write"), "{}", err_line(&o));
    let v: Value = serde_json::from_slice(&ws.run(&["--json", "state", "verify"]).stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert!(!v["differences"].as_array().unwrap().is_empty());
    ws.ok(&["state", "--write"]);
    ws.ok(&["state", "verify"]);
}

#[test]
fn check_passes_after_many_operations() {
    let ws = Workspace::new("check");
    assert_eq!(ws.json(&["check"])["ok"], true, "an empty store checks");
    let plan = ws.write(
        "plan.json",
        r#"{"tasks": [{"id": "g"}, {"id": "a", "parent": "g", "postchecks": "false"}, {"id": "b", "parent": "g"}, {"id": "c"}]}"#,
    );
    ws.ok(&["plan", "import", plan.to_str().unwrap()]);
    ws.ok(&["state", "--write"]);
    ws.to("a", "working");
    ws.handoff("a");
    for _ in 0..3 {
        ws.expect(&["task", "complete", "a"], 1);
    }
    ws.ok(&["task", "retry", "a", "--postchecks", "true"]);
    ws.ok(&["task", "complete", "a"]);
    ws.review("a", "PASS");
    ws.to("a", "reviewing");
    ws.to("a", "done");
    ws.to("b", "working");
    ws.ok(&["task", "exited", "b", "--session", "x1"]);
    ws.ok(&["task", "respawn", "b"]);
    ws.set_frontmatter("b", "crash_count", "0");
    ws.to("b", "clarification");
    let o = ws.run_stdin(
        &["memory", "merge", "b", "-"],
        r#"{"history": ["1", "2", "3", "4", "5"]}"#,
    );
    assert_eq!(code(&o), 0);
    ws.ok(&["task", "cancel", "c"]);
    let tree = ws.write(
        "tree.json",
        serde_json::to_string(&ws.json(&["plan", "export"])).unwrap(),
    );
    ws.ok(&[
        "plan",
        "apply",
        tree.to_str().unwrap(),
        "--selected",
        "b",
        "--status",
        "retry",
    ]);
    let v = ws.json(&["check"]);
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["events"].as_u64().unwrap() > 20, "{v}");
    assert_eq!(v["tasks"], 4);
    let o = ws.ok(&["check"]);
    assert!(text(&o.stdout).starts_with("ok:"), "{}", text(&o.stdout));
    ws.ok(&["state", "verify"]);
}
