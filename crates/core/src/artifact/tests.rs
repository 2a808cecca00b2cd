//! Tests of TASK.md parsing: table tests of the seed's rules and property tests that
//! each fast path agrees with its parser.

use super::*;
use crate::model::{RunnerState, Status, TaskId, TaskSpec, WorkflowKind};
use jiff::Timestamp;
use proptest::prelude::*;

fn task(id: &str, title: &str, body: &str) -> Task {
    let mut spec = TaskSpec::new(TaskId::new(id).unwrap(), WorkflowKind::Review, 3);
    spec.title = title.to_owned();
    spec.body = body.to_owned();
    let mut runner = RunnerState::new(Status::AgentReview, false, 1, Timestamp::UNIX_EPOCH);
    runner.crash_count = 1;
    runner.review_round = 2;
    Task { spec, runner }
}

/// A task as `task create` makes it.
fn new_task(id: &str, title: &str, body: &str) -> Task {
    let mut t = task(id, title, body);
    t.runner = RunnerState::new(Status::Pending, false, 0, Timestamp::UNIX_EPOCH);
    t
}

// ----- sections -------------------------------------------------------------------

/// `expected`: (name, content) of every section, in order.
fn check_sections(text: &str, expected: &[(&str, &str)]) {
    let doc = parse(text);
    let got: Vec<(&str, &str)> = doc
        .sections
        .iter()
        .map(|s| (s.name.as_str(), &text[s.content.clone()]))
        .collect();
    assert_eq!(got, expected, "sections of {text:?}");
    fuzz(text.as_bytes());
}

#[test]
fn sections() {
    check_sections("## Handoff\ndone\n", &[("Handoff", "done\n")]);
    check_sections("intro\n\n## Handoff\ndone", &[("Handoff", "done")]);
    check_sections("## Handoff", &[("Handoff", "")]);
    check_sections("## Handoff\n", &[("Handoff", "")]);
    check_sections("   ## Handoff\nx\n", &[("Handoff", "x\n")]);
    check_sections(
        "## A\nx\n### B\ny\n#### C\n## D\nz",
        &[("A", "x\n### B\ny\n#### C\n"), ("D", "z")],
    );
    check_sections("## A\nx\n# Title\ny\n## B\n", &[("A", "x\n"), ("B", "")]);
    check_sections("## A\n1\n## A\n2\n", &[("A", "1\n"), ("A", "2\n")]);
    check_sections("## Handoff ##\nx\n", &[("Handoff", "x\n")]);
    check_sections("## Handoff #\nx\n", &[("Handoff", "x\n")]);
    check_sections("## Handoff #x\n", &[("Handoff #x", "")]);
    check_sections("##  Spaced Out  \nx\n", &[("Spaced Out", "x\n")]);
    check_sections("## **Review**\nPASS\n", &[("Review", "PASS\n")]);
    check_sections("## The `Review`\n", &[("The Review", "")]);
    check_sections("##\nx\n", &[("", "x\n")]);
    check_sections("##\tTabbed\nx\n", &[("Tabbed", "x\n")]);
    // CRLF line ends.
    check_sections(
        "## Handoff\r\ndone\r\n## Review\r\nPASS\r\n",
        &[("Handoff", "done\r\n"), ("Review", "PASS\r\n")],
    );
    // Not headings: no space, too deep, indented code, fences, quotes, lists, HTML.
    check_sections("##Handoff\nx\n", &[]);
    check_sections("####### Seven\n", &[]);
    check_sections("### Handoff\nx\n", &[]);
    check_sections("    ## Handoff\nx\n", &[]);
    check_sections("\t## Handoff\nx\n", &[]);
    check_sections("```\n## Handoff\n```\n", &[]);
    check_sections("~~~md\n## Handoff\n~~~\n", &[]);
    check_sections("```\n## Handoff\n", &[]);
    check_sections("> ## Handoff\n> x\n", &[]);
    check_sections("- ## Handoff\n  x\n", &[]);
    check_sections("<!--\n## Handoff\n-->\n", &[]);
    check_sections("\\## Handoff\n", &[]);
    // A fence inside a section keeps its headings; the section goes on after it.
    check_sections(
        "## Review\n```\n## Handoff\n```\nFAIL\n",
        &[("Review", "```\n## Handoff\n```\nFAIL\n")],
    );
    // Setext headings neither start nor end sections.
    check_sections("Handoff\n---\nx\n", &[]);
    check_sections("Handoff\n===\nx\n", &[]);
    check_sections("## A\nx\nFAIL\n---\ny\n", &[("A", "x\nFAIL\n---\ny\n")]);
    check_sections("## A\nx\nTitle\n===\ny\n", &[("A", "x\nTitle\n===\ny\n")]);
    // A level-1 or level-2 heading inside a quote or list does not end a section.
    check_sections("## A\n> ## B\nx\n", &[("A", "> ## B\nx\n")]);
    check_sections("## A\n- # B\nx\n", &[("A", "- # B\nx\n")]);
    // Unicode names and content.
    check_sections("## Übergabe ✓\nfertig é\n", &[("Übergabe ✓", "fertig é\n")]);
    // A lone "\r" ends a line too.
    check_sections("## A\rx\r## B\ry", &[("A", "x\r"), ("B", "y")]);
    check_sections("## \rHandoff\n", &[("", "Handoff\n")]);
}

#[test]
fn section_offsets_are_into_the_whole_file() {
    let text = "---\nid: a\n---\n## Handoff\r\ndone\n";
    let doc = parse(text);
    let s = doc.section("handoff").unwrap();
    assert_eq!(s.heading, 14..24);
    assert_eq!(&text[s.heading.clone()], "## Handoff");
    assert_eq!(doc.content(s), "done\n");
    assert_eq!(s.content, 26..31);
    // Headings inside the frontmatter are YAML comments, not sections.
    check_sections("---\n## Handoff\n---\nbody\n", &[]);
    check_sections("---\nid: a\n---\n## Handoff\nx", &[("Handoff", "x")]);
}

#[test]
fn the_last_section_of_a_name_counts() {
    let doc = parse("## Review\nFAIL\n## Handoff\nfixed\n##  REVIEW \nPASS\n");
    let review = section(&doc, " review ").unwrap();
    assert_eq!(review.name, "REVIEW");
    assert_eq!(doc.content(review), "PASS\n");
    assert_eq!(doc.artifacts().verdict, Some(Verdict::Pass));
    assert!(doc.section("Questions").is_none());
    assert!(same_name("ÜBERGABE", "übergabe"));
    assert!(!same_name("Review", "Reviews"));
}

// ----- has_content ----------------------------------------------------------------

fn check_content(s: &str, expected: bool) {
    assert_eq!(has_content(s), expected, "{s:?}");
}

#[test]
fn content() {
    check_content("", false);
    check_content(" \n\t\r\n \u{a0}\u{2003}", false);
    check_content("x", true);
    check_content("\n\n  done\n", true);
    check_content("<!-- nothing yet -->", false);
    check_content("<!-- a -->\n  <!-- b\nmore -->\n", false);
    check_content("<!-- a --> x", true);
    check_content("x <!-- a -->", true);
    check_content("<!-- unterminated\nx\n", false);
    check_content("<!-- a --><!-- b", false);
    check_content("<!---->", false);
    check_content("<!-- a -->--> x", true);
    check_content("<!- not a comment -->", true);
    check_content("--> x", true);
    check_content("<!--> x -->", false);
    // Something to read: a letter or digit, of any script.
    for nothing in [
        "-", "---", ">", "***", "…", "\u{1}", "\u{1b}", "\u{202e}", "\u{2800}", "\u{1160}",
        "\u{3164}", "-->", "✅",
    ] {
        check_content(nothing, false);
    }
    for something in ["1", "ok", "é", "完成", "- done", "> 42 tests pass"] {
        check_content(something, true);
    }
}

// ----- verdict --------------------------------------------------------------------

fn check_verdict(s: &str, expected: Option<Verdict>) {
    assert_eq!(verdict(s), expected, "{s:?}");
}

#[test]
fn verdicts() {
    use Verdict::{Fail, Pass};
    check_verdict("PASS", Some(Pass));
    check_verdict("FAIL", Some(Fail));
    check_verdict("pass", Some(Pass));
    check_verdict("Pass", Some(Pass));
    check_verdict("fAiL", Some(Fail));
    check_verdict("Verdict: **PASS**", Some(Pass));
    check_verdict("FAIL: tests broken", Some(Fail));
    check_verdict("(PASS)", Some(Pass));
    check_verdict("-PASS-", Some(Pass));
    check_verdict("PASS.", Some(Pass));
    check_verdict("é PASS é", Some(Pass));
    check_verdict("passes", None);
    check_verdict("PASSED", None);
    check_verdict("bypass", None);
    check_verdict("FAIL_X", None);
    check_verdict("_FAIL", None);
    check_verdict("FAIL2", None);
    check_verdict("éPASS", None);
    check_verdict("PASSé", None);
    check_verdict("P A S S", None);
    check_verdict("", None);
    check_verdict("Looks good overall.\n", None);
    // The first line with a token decides, and its first token.
    check_verdict("Summary\n\nFAIL, not a PASS\nPASS\n", Some(Fail));
    // An alternative names no verdict: a template's `PASS/FAIL` echoed is none.
    check_verdict("pass/fail\n", None);
    check_verdict("bypassed\nFAIL\n", Some(Fail));
    check_verdict("Verdict:\r\nPASS\r\n", Some(Pass));
    // Comments are not verdict lines.
    check_verdict("<!-- write PASS or FAIL -->", None);
    check_verdict("<!-- write PASS or FAIL -->\nFAIL\n", Some(Fail));
    check_verdict("<!--\nPASS\n-->\nFAIL", Some(Fail));
    check_verdict("FAIL <!-- not PASS -->", Some(Fail));
    check_verdict("<!-- PASS --> FAIL", Some(Fail));
    check_verdict("<!-- unterminated PASS", None);
    check_verdict("x<!-- -->PASS", Some(Pass));
    // Code counts (the seed's rule reads every line).
    check_verdict("```\nFAIL\n```\nPASS", Some(Fail));
    // A token after a negation on its line is no verdict: the next line decides.
    check_verdict("NOT PASS: tests are missing", None);
    check_verdict("Does not PASS; FAIL", Some(Fail));
    check_verdict("No FAIL found, PASS", Some(Pass));
    check_verdict("Don't PASS this", None);
    check_verdict("This doesn\u{2019}t PASS", None);
    check_verdict("Nothing passes; it cannot PASS as is", None);
    check_verdict("NOT PASS\nFAIL: the tests are missing\n", Some(Fail));
    check_verdict("No issues found.\nPASS\n", Some(Pass));
    check_verdict("<!-- not --> PASS", Some(Pass));
    check_verdict("PASS: nothing is missing, no FAIL", Some(Pass));
    check_verdict("Notable: PASS", Some(Pass));
    // Alternatives and negations name none; a line whose tokens disagree is no verdict
    // line. The negation is the word before the token (an article between allowed).
    check_verdict("Verdict (PASS/FAIL): FAIL", Some(Fail));
    check_verdict("**Verdict (PASS or FAIL):** FAIL", Some(Fail));
    check_verdict("PASS / FAIL: FAIL", Some(Fail));
    check_verdict("PASS | FAIL\nPASS", Some(Pass));
    check_verdict("PASS criteria not met -> FAIL", None);
    check_verdict("PASS but FAIL", None);
    check_verdict("Failed to PASS the integration tests.", None);
    check_verdict("No issues found. PASS", Some(Pass));
    check_verdict("I cannot find any problem. PASS", Some(Pass));
    check_verdict("Not blocking: PASS", Some(Pass));
    check_verdict("Without doubt, PASS", Some(Pass));
    check_verdict("FAIL, not a PASS", Some(Fail));
}

#[test]
fn verdict_wire_names() {
    for v in [Verdict::Pass, Verdict::Fail] {
        let json = serde_json::to_string(&v).unwrap();
        assert_eq!(json, format!("\"{v}\""));
        assert_eq!(serde_json::from_str::<Verdict>(&json).unwrap(), v);
    }
    assert!(serde_json::from_str::<Verdict>("\"PASS\"").is_err());
}

/// An independent reading of the rule for text without comments: split into words.
fn oracle(s: &str) -> Option<Verdict> {
    // Line by line, word by word (the strategy makes no `/`, `|` or apostrophe): a
    // token names a verdict unless it is a side of `X or Y` or follows a negation (an
    // article between allowed); the line's named tokens must agree.
    let negation = [
        "not", "no", "never", "nor", "cannot", "without", "neither", "none",
    ];
    let token = |w: &str| match w {
        "pass" => Some(Verdict::Pass),
        "fail" => Some(Verdict::Fail),
        _ => None,
    };
    s.lines().find_map(|line| {
        let words: Vec<String> = line
            .split(|c: char| !is_word_char(c))
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_lowercase)
            .collect();
        let mut found = None;
        for (k, w) in words.iter().enumerate() {
            let Some(v) = token(w) else { continue };
            let side = (k >= 2 && words[k - 1] == "or" && token(&words[k - 2]).is_some())
                || (words.get(k + 1).is_some_and(|o| o == "or")
                    && words.get(k + 2).is_some_and(|n| token(n).is_some()));
            let mut before = words[..k].iter().rev();
            let mut last = before.next();
            if matches!(last.map(String::as_str), Some("a" | "an" | "the")) {
                last = before.next();
            }
            let failing = ["fail", "fails", "failed", "failing"];
            let negated = last.is_some_and(|l| {
                negation.contains(&l.as_str())
                    || (l == "to" && before.next().is_some_and(|f| failing.contains(&f.as_str())))
            });
            if side || negated {
                continue;
            }
            match found {
                None => found = Some(v),
                Some(f) if f != v => return None,
                Some(_) => {}
            }
        }
        found
    })
}

// ----- artifacts ------------------------------------------------------------------

#[test]
fn artifacts_need_content() {
    let a = artifacts("# T\n## Handoff\n<!-- write here -->\n\n## Review\n<!-- PASS or FAIL -->\n");
    assert_eq!(a.handoff, None);
    assert_eq!(a.review, None);
    assert_eq!(a.verdict, None);
    assert!(a.errors.is_empty());

    let a = artifacts("## handoff\ndone\n## Review\nLooks fine, no verdict.\n");
    assert_eq!(
        a.handoff,
        Some(Evidence {
            nth: 1,
            section: "handoff".into(),
            // sha256("done"): the content without the line break around it.
            digest: "a4c3ed04a95a3da14a9d235c83d868bed7c0f45cf7f3faa751ee8f50598d2211".into(),
        })
    );
    assert!(a.review.is_some());
    assert_eq!(a.verdict, None);

    let a = artifacts("---\nid: [\n---\n## Review\nVerdict: FAIL\n");
    assert_eq!(a.verdict, Some(Verdict::Fail));
    assert_eq!(a.handoff, None);
    assert_eq!(a.errors.len(), 1);
    assert_eq!(
        sha256_hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

// ----- frontmatter ----------------------------------------------------------------

#[test]
fn split_finds_the_block() {
    let check = |text: &str, fm: Option<&str>, body: &str, error: bool| {
        let sp = split(text);
        assert_eq!(sp.frontmatter, fm, "{text:?}");
        assert_eq!(&text[sp.body_offset..], body, "{text:?}");
        assert_eq!(sp.error.is_some(), error, "{text:?}");
    };
    check("---\nid: a\n---\nbody", Some("id: a\n"), "body", false);
    check(
        "---\r\nid: a\r\n---\r\nbody",
        Some("id: a\r\n"),
        "body",
        false,
    );
    check("---\n---\n", Some(""), "", false);
    check("---\nid: a\n---", Some("id: a\n"), "", false);
    check(
        "---  \nid: a\n--- \t\n\n# T",
        Some("id: a\n"),
        "\n# T",
        false,
    );
    check("\u{feff}---\nid: a\n---\nb", Some("id: a\n"), "b", false);
    check("---\nid: a\n", None, "---\nid: a\n", true);
    check("---\n", None, "---\n", true);
    check("---", None, "---", false);
    check("----\nid: a\n---\n", None, "----\nid: a\n---\n", false);
    check("--- x\n---\n", None, "--- x\n---\n", false);
    check(" ---\n---\n", None, " ---\n---\n", false);
    check(
        "# T\n---\nid: a\n---\n",
        None,
        "# T\n---\nid: a\n---\n",
        false,
    );
    check("", None, "", false);
}

fn fm_of(text: &str) -> (Option<Frontmatter>, Vec<ParseError>) {
    let doc = parse(text);
    (doc.frontmatter, doc.errors)
}

#[test]
fn frontmatter_values() {
    let (fm, errors) = fm_of(
        "---\nid: login\ntitle: \"Log: in\"\nstatus: working\nattempts: 5\nmax_attempts: \"3\"\n\
         crash_count: 0x1\nreview_round:\nbranch: warden/login\nowner: ana\nflag: yes\n\
         tags: [a, {b: 1}]\nratio: 1.50\n'quoted key': ~\n---\nbody\n",
    );
    assert_eq!(errors, []);
    let fm = fm.unwrap();
    assert_eq!(fm.id.as_deref(), Some("login"));
    assert_eq!(fm.title.as_deref(), Some("Log: in"));
    assert_eq!(fm.status.as_deref(), Some("working"));
    assert_eq!(fm.attempts.as_deref(), Some("5"));
    assert_eq!(fm.max_attempts.as_deref(), Some("3"));
    assert_eq!(fm.crash_count.as_deref(), Some("1"));
    assert_eq!(fm.review_round, None);
    assert_eq!(fm.branch.as_deref(), Some("warden/login"));
    let extra: Vec<(&str, &str)> = fm
        .extra
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        extra,
        [
            ("flag", "yes"),
            ("owner", "ana"),
            ("quoted key", ""),
            ("ratio", "1.5"),
            ("tags", "[a, {b: 1}]")
        ]
    );
    // Unknown keys survive a rewrite.
    let rewritten = with_frontmatter("---\nowner: ana\nstatus: done\n---\n", &fm);
    assert_eq!(parse(&rewritten).frontmatter.unwrap().extra, fm.extra);
}

#[test]
fn frontmatter_errors() {
    let check = |text: &str, line: usize, column: usize, needle: &str, readable: bool| {
        let (fm, errors) = fm_of(text);
        assert_eq!(errors.len(), 1, "{text:?}: {errors:?}");
        let e = &errors[0];
        assert_eq!((e.line, e.column), (line, column), "{text:?}: {e}");
        assert!(e.message.contains(needle), "{text:?}: {e}");
        assert!(
            e.to_string()
                .starts_with(&format!("line {line}, column {column}: "))
        );
        assert_eq!(fm.is_some(), readable, "{text:?}");
    };
    check("---\nid: a\n", 1, 1, "never closed", false);
    check("---\nid: a\n## Handoff\nx\n", 1, 1, "never closed", false);
    check("---\nid: a\ntitle: [\n---\n", 3, 8, "not valid YAML", false);
    check(
        "---\nid: a\n  status: x\n---\n",
        3,
        9,
        "not valid YAML",
        false,
    );
}

#[test]
fn frontmatter_problems_are_listed() {
    let (fm, errors) = fm_of("---\nid: a\ntitle: [\n---\n");
    assert_eq!(fm, None);
    assert_eq!(errors[0].to_string().lines().count(), 1);
    assert_eq!((errors[0].line, errors[0].column), (3, 8));

    // A duplicate key is reported, and the last value is still read.
    let (fm, errors) = fm_of("---\nstatus: working\nstatus: done\n---\n");
    assert_eq!(fm.unwrap().status.as_deref(), Some("done"));
    assert_eq!((errors[0].line, errors[0].column), (3, 1));
    assert!(errors[0].message.contains("duplicate"), "{}", errors[0]);

    // Not a mapping.
    let (fm, errors) = fm_of("---\n- a\n---\n");
    assert_eq!(fm, None);
    assert!(errors[0].message.contains("mapping"), "{}", errors[0]);

    // Empty and comment-only blocks are empty mappings.
    assert_eq!(fm_of("---\n---\n"), (Some(Frontmatter::default()), vec![]));
    assert_eq!(
        fm_of("---\n# just a comment\n---\n"),
        (Some(Frontmatter::default()), vec![])
    );
    // An unclosed block: the whole text is the body, sections included.
    let doc = parse("---\nid: a\n## Handoff\ndone\n");
    assert_eq!(doc.body_offset, 0);
    assert_eq!(doc.section(HANDOFF).map(|s| doc.content(s)), Some("done\n"));
}

#[test]
fn render_is_canonical() {
    let t = task("login", "Log in: \"fast\" #1", "");
    let mut fm = mirror(&t);
    fm.extra.insert("owner".into(), "ana".into());
    fm.extra.insert("status".into(), "ignored".into());
    fm.extra.insert("multi line".into(), "a\nb\u{7}".into());
    assert_eq!(
        fm.render(),
        "---\nid: login\ntitle: \"Log in: \\\"fast\\\" #1\"\nstatus: agent-review \nattempts: 1\n\
         max_attempts: 3\ncrash_count: 1\nreview_round: 2\nbranch: warden/login\n\
         \"multi line\": \"a\\nb\\u0007\"\nowner: ana\n---\n"
    );
    fm.extra.remove("status");
    assert_eq!(parse(&fm.render()).frontmatter, Some(fm));
}

#[test]
fn plain_scalars_are_only_the_safe_ones() {
    for s in [
        "0",
        "7",
        "123456789012345678",
        "working",
        "agent-review",
        "warden/a.b_c-1",
        "n1",
    ] {
        assert!(is_plain_safe(s), "{s}");
    }
    for s in [
        "",
        "007",
        "-1",
        "1.5",
        "1e3",
        "0x1f",
        "1234567890123456789",
        "true",
        "null",
        "yes",
        "n",
        "nan",
        "inf",
        "Working",
        "a b",
        "a:b",
        "a#",
        ".x",
        "~",
        "é",
    ] {
        assert!(!is_plain_safe(s), "{s}");
    }
}

// ----- tamper ---------------------------------------------------------------------

fn check_tamper(found: &str, expected: &[(&str, &str, &str)]) {
    let truth = mirror(&task("login", "Log in", ""));
    let found = parse(found).frontmatter.unwrap();
    let got: Vec<(String, String, String)> = tampered(&found, &truth)
        .into_iter()
        .map(|t| (t.field, t.agent_value.unwrap_or_default(), t.true_value))
        .collect();
    let expected: Vec<(String, String, String)> = expected
        .iter()
        .map(|(f, a, t)| ((*f).to_owned(), (*a).to_owned(), (*t).to_owned()))
        .collect();
    assert_eq!(got, expected, "{found:?}");
}

#[test]
fn tamper() {
    let truth = mirror(&task("login", "Log in", ""));
    assert_eq!(tampered(&truth, &truth), []);
    check_tamper("---\n---\n", &[]);
    check_tamper("---\nstatus: agent-review\nattempts: \"1\"\n---\n", &[]);
    check_tamper("---\ntitle: Something else\nowner: me\n---\n", &[]);
    check_tamper(
        "---\nstatus: done\n---\n",
        &[("status", "done", "agent-review")],
    );
    check_tamper("---\nattempts: 0\n---\n", &[("attempts", "0", "1")]);
    check_tamper(
        "---\nmax_attempts: 99\n---\n",
        &[("max_attempts", "99", "3")],
    );
    check_tamper("---\ncrash_count: 0\n---\n", &[("crash_count", "0", "1")]);
    check_tamper("---\nreview_round: 0\n---\n", &[("review_round", "0", "2")]);
    check_tamper("---\nid: other\n---\n", &[("id", "other", "login")]);
    check_tamper(
        "---\nbranch: main\n---\n",
        &[("branch", "main", "warden/login")],
    );
    check_tamper(
        "---\nstatus: Agent-Review\n---\n",
        &[("status", "Agent-Review", "agent-review")],
    );
    check_tamper("---\nstatus:\nattempts: ~\n---\n", &[]);
    check_tamper(
        "---\nbranch: x\nstatus: done\nid: x\n---\n",
        &[
            ("id", "x", "login"),
            ("status", "done", "agent-review"),
            ("branch", "x", "warden/login"),
        ],
    );
    // Nothing to compare against: no tamper.
    let found = parse("---\nstatus: done\n---\n").frontmatter.unwrap();
    assert_eq!(tampered(&found, &Frontmatter::default()), []);
}

// ----- with_frontmatter -----------------------------------------------------------

#[test]
fn rewriting_keeps_the_body() {
    let fm = Frontmatter {
        id: Some("a".into()),
        ..Frontmatter::default()
    };
    let check = |text: &str, expected: &str| {
        assert_eq!(with_frontmatter(text, &fm), expected, "{text:?}");
    };
    check(
        "---\nid: b\nstatus: done\n---\n\n# T\n",
        "---\nid: a\n---\n\n# T\n",
    );
    check("# T\n", "---\nid: a\n---\n# T\n");
    check("", "---\nid: a\n---\n");
    check(
        "---\r\nid: b\r\n---\r\n# T\r\n",
        "---\r\nid: a\r\n---\r\n# T\r\n",
    );
    check("# T\r\nx", "---\r\nid: a\r\n---\r\n# T\r\nx");
    check("\u{feff}---\nid: b\n---\nx", "\u{feff}---\nid: a\n---\nx");
    check("\u{feff}x", "\u{feff}---\nid: a\n---\nx");
    check("---\nid: b\n", "---\nid: a\n---\n---\nid: b\n");
    check("---\nid: [\n---\nx", "---\nid: a\n---\nx");
}

// ----- skeleton -------------------------------------------------------------------

fn check_skeleton(t: &Task) -> String {
    let text = skeleton(t);
    let doc = parse(&text);
    assert_eq!(doc.errors, []);
    assert_eq!(doc.frontmatter, Some(mirror(t)));
    let names: Vec<&str> = doc.sections.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, [CONTEXT, NOTES], "{text}");
    let a = doc.artifacts();
    assert_eq!((a.handoff, a.review, a.verdict), (None, None, None));
    assert!(!has_content(doc.content(doc.section(NOTES).unwrap())));
    text
}

#[test]
fn skeleton_with_body() {
    let t = new_task(
        "login",
        "Log in page",
        "Add a login form.\n\n- email\n- password\n\n",
    );
    insta::assert_snapshot!(check_skeleton(&t));
}

#[test]
fn skeleton_without_body() {
    let t = new_task("login", "login", " \n");
    let text = check_skeleton(&t);
    assert!(!has_content(
        parse(&text)
            .section(CONTEXT)
            .map_or("x", |s| &text[s.content.clone()])
    ));
    insta::assert_snapshot!(text);
}

#[test]
fn skeleton_demotes_body_headings() {
    let t = new_task(
        "x",
        "A\nmulti-line title",
        "# Goal\nWork.\n## Handoff\ndone\n### Detail\n```\n## Review\n```\n",
    );
    insta::assert_snapshot!(check_skeleton(&t));
}

#[test]
fn skeleton_fences_a_body_that_would_swallow_the_rest() {
    let t = new_task("x", "", "Try this:\n```sh\nmake ``` test\n");
    let text = check_skeleton(&t);
    assert!(text.contains("````\nTry this:"), "{text}");
    insta::assert_snapshot!(text);
    check_skeleton(&new_task("x", "x", "<!-- open comment\n## Handoff\n"));
    check_skeleton(&new_task("x", "x", "<pre>\nno end\n"));
}

/// The line scan takes the usual TASK.md shapes itself, hands the rest to the parser,
/// and agrees with it on both.
#[test]
fn line_scan_cases() {
    let accepted = [
        "# T\n\n## Context\ntext\n\n## Notes\n<!-- placeholder -->\n",
        "## A\n```\n## not\n```\n## B\n",
        "## A\n~~~~\n~~~\n## not\n ~~~~~  \n## B\n",
        "## A\n```rust\n## not\n",
        "## A\n<!-- open\n## not\n-->\n## B\n",
        "- item\n## after a list\n> quote\n## after a quote\n    ## code\n## **Bold** `code`\n",
        "text\n## interrupts a paragraph\nline\n===\n## Handoff ##\n",
        "```` a`b\n## a backtick in the info: no fence\n",
        "- ```\n## ends the list item and its fence\n",
        "\t## tab: not a heading\n#no space\n### deeper\n",
    ];
    for doc in accepted {
        assert!(atx_headings_by_lines(doc).is_some(), "{doc:?}");
        check_line_scan(doc);
    }
    let handed_over = [
        "- a\n  ## inside the item\n",
        " ```\n## in a fence, or not\n",
        "<div>\n## in HTML\n",
        "<!-->\n## after a whole comment\n",
        "## [x]\n\n[x]: /url\n",
        "## A\r\n## B\r\n",
    ];
    for doc in handed_over {
        assert!(atx_headings_by_lines(doc).is_none(), "{doc:?}");
    }
    // A document of 64 KiB or more is searched with the `memchr` crate instead of the
    // standard library (see `Finder`): the same headings.
    let mut big = String::new();
    while big.len() < 80 << 10 {
        big.push_str("## A\n<!-- open\n## not\n-->\n```\n## not\n```\ntext\n## B\n");
    }
    let small = &big[..big.len().min(60 << 10)];
    let small = &small[..small.rfind('\n').unwrap() + 1];
    for doc in [big.as_str(), small] {
        let found = atx_headings_by_lines(doc).expect("a plain document");
        let expected = doc.matches("## A\n").count() + doc.matches("## B\n").count();
        assert_eq!(found.len(), expected, "{}", doc.len());
        check_line_scan(doc);
    }
    // The link definition is why: the full parse reads `[x]` as a link named `x`.
    let doc = "## [x]\n\n[x]: /url\n";
    assert_eq!(atx_headings_by_parser(doc)[0].name, "x");
    assert_eq!(heading_text("## [x]"), "[x]");
}

#[test]
fn plain_heading_names_skip_the_parser() {
    for (line, name) in [
        ("## Notes", Some("Notes")),
        ("## Notes\n", Some("Notes")),
        ("##   Two  words  ", Some("Two  words")),
        ("##", Some("")),
        ("## ", Some("")),
        (
            "## Step 1: (a/b) - \"x\" + y = 50% @ $5 {ok} | ^",
            Some("Step 1: (a/b) - \"x\" + y = 50% @ $5 {ok} | ^"),
        ),
        ("## *Notes*", None),
        ("## Notes ##", None),
        ("## a_b", None),
        ("## `x`", None),
        ("## a\tb", None),
        ("## caf\u{e9}", None),
        ("## a &amp; b", None),
        ("## <b>", None),
        ("## a\\b", None),
        ("##x", None),
    ] {
        assert_eq!(plain_heading_text(line), name, "{line:?}");
        // Whatever the path, the name is the parser's.
        let parsed: String = Parser::new_ext(line, Options::empty())
            .filter_map(|e| match e {
                Event::Text(t) | Event::Code(t) => Some(t.into_string()),
                _ => None,
            })
            .collect();
        assert_eq!(heading_text(line), parsed.trim(), "{line:?}");
    }
}

// ----- properties -----------------------------------------------------------------

/// One frontmatter line, weighted toward what the line read accepts: keys and values
/// that YAML reads as strings, numbers, booleans, nulls or other types, quoted or not.
fn frontmatter_line() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        4 => prop::sample::select(vec!["id", "title", "status", "attempts", "max_attempts",
            "crash_count", "review_round", "branch", "owner", "x"]).prop_map(str::to_owned),
        1 => prop::sample::select(vec!["null", "true", "Key", "a b", "1", "01", "~", "'q'",
            "-", "a:b", "y", "é"]).prop_map(str::to_owned),
    ];
    let value = prop_oneof![
        4 => "[a-z][a-z0-9./_-]{0,8}",
        2 => "[0-9]{1,3}",
        2 => "\"[ -~é€🦀]{0,8}\"",
        3 => prop::sample::select(vec!["", "0x1", "1.50", "1e3", "+5", "007", "-1", "~",
            "null", "Null", "NULL", "true", "True", "FALSE", "yes", "no", "on", "off",
            "y", "n", "inf", ".inf", "nan", ".NaN", "Infinity", "'q'", "\"a\\\"b\"",
            "\"\\n\"", "a #c", "a: b", "[a]", "{b: 1}", "- x", "a ", " a", "Log in",
            "\"\u{2028}\"", "\"\u{85}\"", "\"\"", "&a x", "*a", "!tag x", "|", ">", "%x",
            "@x", "`x`", "\"a\tb\""]).prop_map(str::to_owned),
    ];
    prop_oneof![
        8 => (key, value).prop_map(|(k, v)| if v.is_empty() {
            format!("{k}:\n")
        } else {
            format!("{k}: {v}\n")
        }),
        1 => prop::sample::select(vec!["\n", "# c\n", "  x: 1\n", "k:v\n", "k: 1\r\n",
            "- a\n", "k:  2\n", "k: 1 # c\n"]).prop_map(str::to_owned),
    ]
}

/// One line of the block constructs the line scan must get right (or give up on):
/// headings, fences, HTML comments and blocks, lists, quotes, indented code, link
/// definitions, setext underlines, with and without indentation.
fn block_line() -> impl Strategy<Value = String> {
    // Weighted toward what the scan accepts, so most documents are checked rather
    // than handed to the parser.
    let start = prop_oneof![
        12 => Just(""),
        1 => Just(" "), 1 => Just("   "), 1 => Just("    "), 1 => Just("\t"),
        1 => Just("- "), 1 => Just("* "), 1 => Just("1. "), 1 => Just("10.  "),
        1 => Just("> "), 1 => Just(">"), 1 => Just("  - "),
    ];
    let lead = prop_oneof![
        4 => Just("# "), 4 => Just("## "), 1 => Just("##"), 1 => Just("### "),
        1 => Just("#"), 1 => Just("##\t"), 1 => Just("#######"),
        3 => Just("```"), 1 => Just("````"), 2 => Just("~~~"), 1 => Just("~~~~"),
        1 => Just("``"), 3 => Just("<!--"), 1 => Just("<!-->"), 1 => Just("<!--->"),
        2 => Just("-->"), 1 => Just("<div>"), 1 => Just("</div>"), 1 => Just("<pre>"),
        1 => Just("[x]: /url"), 1 => Just("---"), 1 => Just("==="),
        2 => Just("text"), 2 => Just(""),
    ];
    let tail = prop_oneof![
        4 => Just(""), 2 => Just(" Handoff"), 1 => Just(" Review ##"),
        1 => Just(" **Rev**`iew`"), 1 => Just(" [x]"), 1 => Just("rust"),
        1 => Just(" a`b"), 1 => Just(" -->"), 1 => Just("x -->"), 1 => Just(" ~~~"),
        1 => Just("```"), 1 => Just("  "), 1 => Just(" &amp; \\#"),
    ];
    (start, lead, tail).prop_map(|(s, l, t)| format!("{s}{l}{t}\n"))
}

fn markdownish() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        Just("## "),
        Just("# "),
        Just("### "),
        Just("```"),
        Just("~~~"),
        Just("<!--"),
        Just("-->"),
        Just("---\n"),
        Just("---"),
        Just("===\n"),
        Just("\n"),
        Just("\r\n"),
        Just("\r"),
        Just("    "),
        Just("\t"),
        Just("> "),
        Just("- "),
        Just("1. "),
        Just("Handoff"),
        Just("Review"),
        Just("PASS"),
        Just("fail"),
        Just("id: "),
        Just("status: "),
        Just(": "),
        Just("["),
        Just("{"),
        Just("\""),
        Just("'"),
        Just("\\"),
        Just("&"),
        Just("*"),
        Just("\u{feff}"),
        Just("é"),
        Just("🦀"),
        Just("\u{0}"),
    ]
    .prop_map(str::to_owned);
    prop::collection::vec(prop_oneof![fragment, "\\PC{0,6}"], 0..48).prop_map(|v| v.concat())
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z][a-z0-9._/-]{0,8}",
        "[0-9]{1,20}",
        "[ -~]{0,12}",
        Just(String::new()),
    ]
}

fn frontmatter() -> impl Strategy<Value = Frontmatter> {
    let field = || prop::option::of(value());
    (
        (field(), field(), field(), field()),
        (field(), field(), field(), field()),
        prop::collection::btree_map(value(), value(), 0..4),
    )
        .prop_map(
            |(
                (id, title, status, attempts),
                (max_attempts, crash_count, review_round, branch),
                mut extra,
            )| {
                extra.retain(|k, _| !FIELDS.contains(&k.as_str()));
                Frontmatter {
                    id,
                    title,
                    status,
                    attempts,
                    max_attempts,
                    crash_count,
                    review_round,
                    branch,
                    extra,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn never_panics_on_any_string(s in any::<String>()) {
        fuzz(s.as_bytes());
    }

    #[test]
    fn never_panics_on_markdownish_text(s in markdownish()) {
        fuzz(s.as_bytes());
    }

    #[test]
    fn never_panics_on_frontmatter_like_text(body in markdownish(), yaml in markdownish()) {
        fuzz(format!("---\n{yaml}\n---\n{body}").as_bytes());
    }

    #[test]
    fn never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        fuzz(&bytes);
    }

    #[test]
    fn render_round_trips(fm in frontmatter(), body in markdownish()) {
        let rendered = fm.render();
        prop_assert_eq!(parse(&rendered).frontmatter, Some(fm.clone()));
        let text = with_frontmatter(&body, &fm);
        let doc = parse(&text);
        prop_assert_eq!(doc.frontmatter, Some(fm));
        // The old block (if `body` has one) is replaced; everything after it is kept.
        let old = split(&body);
        let kept = match old.frontmatter {
            Some(_) => &body[old.body_offset..],
            None => body.strip_prefix(BOM).unwrap_or(&body),
        };
        prop_assert_eq!(&text[doc.body_offset..], kept);
    }

    #[test]
    fn verdict_matches_the_word_rule(s in "[ a-zA-Z_éP*:\n-]{0,40}|(PASS|FAIL|pass|fail|x|_| |\n|é)*") {
        prop_assert_eq!(verdict(&s), oracle(&s));
    }

    #[test]
    fn frontmatter_lines_agree_with_serde_saphyr(lines in prop::collection::vec(frontmatter_line(), 0..10)) {
        check_frontmatter_lines(&lines.concat());
    }

    #[test]
    fn line_scan_agrees_with_the_parser(s in markdownish()) {
        check_line_scan(&s);
    }

    #[test]
    fn line_scan_agrees_with_the_parser_on_block_structure(lines in prop::collection::vec(block_line(), 0..12)) {
        check_line_scan(&lines.concat());
    }

    #[test]
    fn sections_partition_the_body(s in markdownish()) {
        let doc = parse(&s);
        // Each section's content ends where the next level-1/2 heading starts, so
        // consecutive sections with nothing in between touch.
        for pair in doc.sections.windows(2) {
            prop_assert!(pair[0].content.end <= pair[1].heading.start);
        }
        if let Some(last) = doc.sections.last() {
            prop_assert!(last.content.end == s.len() || s[last.content.end..].trim_start_matches(' ').starts_with('#'));
        }
    }
}

#[test]
fn invisible_characters_and_empty_fences_are_not_content() {
    for empty in [
        "\u{200B}",
        "\u{200B}\u{FEFF}\u{2060}\n\u{00AD}",
        "```\n```",
        "```rust\n\n```\n",
        "~~~\n\u{200B}\n~~~",
        "<!-- only a comment -->\n```\n```",
    ] {
        assert!(!has_content(empty), "{empty:?}");
        let doc = format!("## Handoff\n{empty}\n");
        assert!(artifacts(&doc).handoff.is_none(), "{empty:?}");
    }
    for full in ["done", "```\ncargo test passes\n```", "\u{200B}x", "`code`"] {
        assert!(has_content(full), "{full:?}");
    }
}

/// A fence "closed" by a line with a tab after it is still open (as pulldown-cmark reads
/// it): a heading after the next fence line is a heading. Found by the `taskmd` fuzzer.
#[test]
fn a_closing_fence_with_a_tab_after_it_does_not_close() {
    let doc = parse("## A\n```\n## no\n```\t\n```\n\n## Handoff\ndone\n");
    let names: Vec<&str> = doc.sections.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["A", "Handoff"]);
}

/// Every status fits the width its line is padded to, and the padded line reads back as
/// the status (by the line reader and by YAML alike).
#[test]
fn the_status_line_takes_the_same_bytes_for_every_status() {
    use crate::model::Status;
    let widest = Status::ALL.iter().map(|s| s.as_str().len()).max().unwrap();
    assert_eq!(widest, STATUS_WIDTH);
    let mut lens = Vec::new();
    for s in Status::ALL {
        let fm = Frontmatter {
            id: Some("t".into()),
            status: Some(s.as_str().into()),
            attempts: Some("1".into()),
            ..Frontmatter::default()
        };
        let text = fm.render();
        lens.push(text.len());
        let yaml = &text["---\n".len()..text.len() - "---\n".len()];
        assert_eq!(
            frontmatter_by_lines(yaml).unwrap().status.as_deref(),
            Some(s.as_str())
        );
        let mut errors = Vec::new();
        assert_eq!(
            frontmatter_by_yaml(yaml, &mut errors)
                .unwrap()
                .status
                .as_deref(),
            Some(s.as_str()),
            "{errors:?}"
        );
    }
    assert!(lens.windows(2).all(|w| w[0] == w[1]), "{lens:?}");
}
