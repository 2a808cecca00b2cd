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
    // The task id alone, the delta on stdin: the one argument is the file, and the
    // message says so (it said "no task id given" though one was).
    for env in [None, Some("m")] {
        let mut c = ws.cmd();
        if let Some(id) = env {
            // Inside an agent session of m.
            c.env("WARDEN_TASK_ID", id).env("WARDEN_ROLE", "worker");
        }
        let mut child = c
            .args(["memory", "merge", "m"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), br#"{"goals": ["x"]}"#).unwrap();
        drop(child.stdin.take());
        let o = child.wait_with_output().unwrap();
        assert_eq!(code(&o), 2, "{}", describe(&["memory", "merge", "m"], &o));
        assert_eq!(
            crate::common::err_line(&o),
            "error: one argument is the delta FILE, and there is no file \"m\"; to merge into task m, name the delta too: `warden memory merge m FILE` (or `-` for standard input)"
        );
    }
    // An array is no delta (serde mapped one onto the fields by position).
    let before = ws.history();
    for array in [r#"[["goal via array"], ["constraint"]]"#, "[]", " \n[1]"] {
        let o = ws.run_stdin(&["memory", "merge", "m", "-"], array);
        assert_eq!(code(&o), 1, "{}", describe(&["memory", "merge"], &o));
        assert!(
            text(&o.stderr).contains("the memory delta in stdin is not a JSON object"),
            "{}",
            text(&o.stderr)
        );
    }
    assert_eq!(ws.history(), before, "nothing stored");

    // Written by a Windows editor: a byte order mark first.
    let delta = ws.write(
        "delta.json",
        "\u{feff}{\"goals\": [\"ship login\"], \"decisions\": [\"use argon2\"], \"history\": [\"h1\", \"h2\"], \"next_focus\": \"write tests\"}",
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
    // A directory where STATE.md goes is the person's to move: a refusal naming it, not
    // a storage error.
    std::fs::remove_file(ws.path(".warden/STATE.md")).unwrap();
    std::fs::create_dir(ws.path(".warden/STATE.md")).unwrap();
    let o = ws.expect(&["state", "--write"], 1);
    assert!(
        err_line(&o)
            .ends_with("/.warden/STATE.md is not a regular file; replace it with a regular file"),
        "{}",
        err_line(&o)
    );
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

/// A project too big to draw (over 200 tasks) keeps its STATE.md rendering in
/// `.warden/cache/state-md` and brings it up to date from the tasks changed since; every
/// render is still the one from every task (`state verify` compares with that), and a
/// kept rendering of another store, a damaged one or one left behind by a new task is
/// not trusted.
#[test]
fn a_big_projects_state_md_is_kept_and_follows_every_change() {
    let ws = Workspace::new("statekept");
    let mut tasks = vec![
        json!({"id": "p1"}),
        json!({"id": "p2"}),
        json!({"id": "p3"}),
    ];
    for i in 0..240 {
        let phase = ["p1", "p2", "p3"][i % 3];
        let mut t =
            json!({"id": format!("t{i:03}"), "parent": phase, "title": format!("Task | {i}")});
        if i % 7 == 0 && i > 0 {
            // Depends on a task of another phase: its status shows in this one's lines.
            t["depends_on"] = json!([format!("t{:03}", i - 1), "t001"]);
        }
        tasks.push(t);
    }
    let plan = ws.write("plan.json", json!({ "tasks": tasks }).to_string());
    ws.ok(&["plan", "import", plan.to_str().unwrap()]);
    ws.ok(&["state", "--write"]);
    let cache = ws.path(".warden/cache/state-md");
    assert!(cache.exists(), "a big project's rendering is kept");
    let seq_of = || {
        let kept = std::fs::read_to_string(&cache).unwrap();
        let line = kept
            .lines()
            .find(|l| l.starts_with("seq\t"))
            .unwrap()
            .to_owned();
        line["seq\t".len()..].parse::<u64>().unwrap()
    };
    let text_cache = ws.path(".warden/cache/state-md.text");
    let fresh = || {
        // What a render from every task gives: the same command without the kept ones.
        let kept = std::fs::read(&cache).unwrap();
        let kept_text = std::fs::read(&text_cache).ok();
        std::fs::remove_file(&cache).unwrap();
        let _ = std::fs::remove_file(&text_cache);
        let o = ws.ok(&["state"]);
        std::fs::write(&cache, kept).unwrap();
        match kept_text {
            Some(t) => std::fs::write(&text_cache, t).unwrap(),
            None => std::fs::remove_file(&text_cache).unwrap(),
        }
        text(&o.stdout)
    };
    let written = seq_of();
    let steps: &[(&[&str], &str)] = &[
        (
            &["task", "update", "t001", "--status", "working"],
            "a dependency starts",
        ),
        (
            &["task", "update", "t006", "--status", "working"],
            "a dependency starts",
        ),
        (
            &["task", "update", "t001", "--status", "clarification"],
            "a question",
        ),
        (
            &["task", "cancel", "t006", "--reason", "not needed"],
            "a dependency cancelled",
        ),
        (
            &["task", "update", "t100", "--status", "working"],
            "another phase",
        ),
        (
            &[
                "task",
                "update",
                "t100",
                "--status",
                "stuck",
                "--reason",
                "broke | badly\nreally",
            ],
            "stuck with a reason",
        ),
    ];
    for (args, what) in steps {
        ws.ok(args);
        // STATE.md was written after the change from the kept rendering.
        let o = ws.run(&["state", "verify"]);
        assert_eq!(
            code(&o),
            0,
            "{what}: {}",
            describe(&["state", "verify"], &o)
        );
        let printed = text(&ws.ok(&["state"]).stdout);
        assert_eq!(printed, fresh(), "{what}");
    }
    // Followed, not rewritten: that waits until 64 tasks changed.
    assert_eq!(
        seq_of(),
        written,
        "the kept rendering is rewritten only now and then"
    );
    for i in 150..215 {
        ws.to(&format!("t{i}"), "working");
    }
    assert!(seq_of() > written, "rewritten once 64 tasks changed");
    assert_eq!(text(&ws.ok(&["state"]).stdout), fresh());
    ws.ok(&["state", "verify"]);
    let printed = text(&ws.ok(&["state"]).stdout);
    assert!(
        printed.contains("t007: blocked by t006 (cancelled), t001 (clarification)"),
        "{printed}"
    );
    assert!(
        printed.contains("- t100: broke | badly really\n"),
        "{printed}"
    );

    // The kept rendering is what is shown: a row changed in it shows (so it is used), and
    // `state verify`, which renders from every task, reports it.
    let kept = std::fs::read_to_string(&cache).unwrap();
    let row = "| t230 | p3 | pending | - | 0/3 | Task \\| 230 |";
    assert!(kept.contains(row), "t230's row is kept");
    std::fs::write(
        &cache,
        kept.replace(row, "| t230 | p3 | pending | - | 0/3 | Tampered |"),
    )
    .unwrap();
    ws.to("t002", "working");
    assert!(text(&ws.ok(&["state"]).stdout).contains("Tampered"));
    let o = ws.expect(&["state", "verify"], 1);
    assert!(
        text(&o.stdout).contains("Tampered"),
        "{}",
        describe(&["state", "verify"], &o)
    );

    // The kept rendering made good again; the text last rendered is kept with the event
    // it reflects and shown again while no event is written: a line changed in it shows
    // (so it is used), until a change.
    let good = std::fs::read_to_string(&cache)
        .unwrap()
        .replace("| t230 | p3 | pending | - | 0/3 | Tampered |", row);
    std::fs::write(&cache, good).unwrap();
    let shown = text(&ws.ok(&["state"]).stdout);
    let kept_text = std::fs::read_to_string(&text_cache).unwrap();
    assert!(
        kept_text.ends_with(&shown),
        "the text kept is the text shown"
    );
    std::fs::write(
        &text_cache,
        kept_text.replace("# Project State:", "# Project State (kept):"),
    )
    .unwrap();
    assert!(text(&ws.ok(&["state"]).stdout).contains("(kept)"));
    ws.to("t003", "working");
    let after = text(&ws.ok(&["state"]).stdout);
    assert!(
        !after.contains("(kept)") && after.contains("| t003 | p1 | working |"),
        "a change renders again:\n{after}"
    );
    assert_eq!(after, fresh());
    // Nor is it shown for another resume file (a key it was not rendered for).
    ws.write(".warden/continue.md", "where we were");
    let resumed = text(&ws.ok(&["state"]).stdout);
    assert_ne!(resumed, after, "the resume file shows");
    assert_eq!(resumed, fresh());
    std::fs::remove_file(ws.path(".warden/continue.md")).unwrap();
    assert_eq!(text(&ws.ok(&["state"]).stdout), after);

    // A new task is not followed: STATE.md is rendered from every task again.
    ws.create("t999", &["--parent", "p1"]);
    assert_eq!(text(&ws.ok(&["state"]).stdout), fresh());
    ws.ok(&["state", "verify"]);

    // Damaged, cut short, or another store's: not trusted.
    let good = std::fs::read_to_string(&cache).unwrap();
    let expect = fresh();
    std::fs::write(&cache, &good[..good.len() / 2]).unwrap();
    assert_eq!(
        text(&ws.ok(&["state"]).stdout),
        expect,
        "a cut-short rendering"
    );
    std::fs::write(&cache, good.replace("\tpending\t0\t", "\tdone\t1\t")).unwrap();
    let other = Workspace::new("statekept-other");
    let plan = other.write("plan.json", json!({ "tasks": tasks }).to_string());
    other.ok(&["plan", "import", plan.to_str().unwrap()]);
    std::fs::create_dir_all(other.path(".warden/cache")).unwrap();
    std::fs::write(other.path(".warden/cache/state-md"), &good).unwrap();
    let theirs = text(&other.ok(&["state"]).stdout);
    assert!(
        !theirs.contains("working") && !theirs.contains("Tampered"),
        "another store's rendering is not used:\n{theirs}"
    );

    // A project that shrinks below a drawn graph's size drops its kept rendering.
    let kept = other.path(".warden/cache/state-md");
    assert!(kept.exists(), "its own rendering is kept");
    let mut tree: Value = serde_json::from_slice(&other.ok(&["plan", "export"]).stdout).unwrap();
    let nodes = tree["tasks"].as_array_mut().unwrap();
    nodes.truncate(60);
    // Without the tasks that depend on one removed (a plan apply keeps dependencies as
    // stored, and refuses to remove what a kept task waits for).
    loop {
        let left: Vec<Value> = nodes.iter().map(|n| n["id"].clone()).collect();
        let before = nodes.len();
        nodes.retain(|n| {
            n["depends_on"]
                .as_array()
                .is_none_or(|deps| deps.iter().all(|d| left.contains(d)))
        });
        if nodes.len() == before {
            break;
        }
    }
    let small = other.write("small.json", tree.to_string());
    other.ok(&[
        "plan",
        "apply",
        small.to_str().unwrap(),
        "--selected",
        "t000",
        "--status",
        "retry",
    ]);
    let printed = text(&other.ok(&["state"]).stdout);
    assert!(
        printed.contains("```mermaid"),
        "60 tasks are drawn:\n{printed}"
    );
    assert!(!kept.exists(), "a small project keeps no rendering");
    assert!(
        !other.path(".warden/cache/state-md.text").exists(),
        "nor its text"
    );
}

/// A merge repeated after an unknown outcome (a lost answer, a killed process) with the
/// same --request-id is applied once: its items are not added twice. The key is bound to
/// its delta: other items under it are refused, nothing stored.
#[test]
fn a_memory_merge_with_a_request_id_is_applied_once() {
    let ws = Workspace::new("memory-request-id");
    ws.create("t", &[]);
    let delta = r#"{"decisions": ["use sqlite"]}"#;
    let merge = ["--json", "memory", "merge", "t", "-", "--request-id", "m1"];
    for _ in 0..2 {
        let o = ws.run_stdin(&merge, delta);
        assert_eq!(code(&o), 0, "{}", text(&o.stderr));
        let m: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(m["decisions"], serde_json::json!(["use sqlite"]), "{m}");
    }
    assert_eq!(ws.events("memory.merged", Some("t")).len(), 1);
    let o = ws.run_stdin(&merge[1..], r#"{"decisions": ["use postgres"]}"#);
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("request id \"m1\" was already used for another request"),
        "{}",
        text(&o.stderr)
    );
    let m = ws.json(&["memory", "show", "t"]);
    assert_eq!(m["decisions"], serde_json::json!(["use sqlite"]), "{m}");
}
