//! Unit tests of the session helpers shared by both modes.

use super::*;

#[test]
fn tmux_arg_escapes_only_a_trailing_semicolon() {
    fn check(input: &str, expected: &str) {
        assert_eq!(tmux_arg(input), OsString::from(expected), "{input:?}");
    }
    check("plain", "plain");
    check("a;b", "a;b");
    check("a;", r"a\;");
    check(";", r"\;");
    check(r"a\;", r"a\\;");
    check("", "");
}

#[test]
fn quoting() {
    fn check(f: fn(&str) -> String, input: &str, expected: &str) {
        assert_eq!(f(input), expected, "{input:?}");
    }
    check(sh_quote, "a b", "'a b'");
    check(sh_quote, "it's", r"'it'\''s'");
    check(sh_quote, "", "''");
    check(format_escape, "#{x}#", "##{x}##");
    check(tmux_quote, r#"a "$b" \c"#, r#""a \"\$b\" \\c""#);
    check(
        tmux_session_name,
        "a.b-c_d-worker-1",
        "warden-a+b-c_d-worker-1",
    );
}

#[test]
fn ids_are_checked() {
    fn check(task: &str, session: &str, ok: bool) {
        let spec = SessionSpec {
            task_id: task.into(),
            session_id: session.into(),
            argv: vec!["true".into()],
            cwd: ".".into(),
            env: vec![],
            log_path: "log".into(),
            warden_exe: "warden".into(),
            project_root: ".".into(),
            timeout: Duration::from_secs(1),
            kill_after: Duration::from_secs(5),
            max_log_bytes: None,
            stdin: None,
            clean_env: false,
            pass_env: Vec::new(),
            started_file: None,
            stop_file: None,
        };
        assert_eq!(check_ids(&spec).is_ok(), ok, "{task:?} {session:?}");
    }
    check("t1", "s1", true);
    check("a.b_c-d", "0.x", true);
    check("T1", "s1", false);
    check("t1", "s'1", false);
    check("t1", "", false);
    check("../x", "s1", false);
    check("t1", "s 1", false);
}

#[test]
fn missing_tmux_says_what_to_do() {
    let e = run_tmux_with(
        OsStr::new("/nonexistent/tmux"),
        Path::new("/tmp/none.sock"),
        "list-panes",
        &[],
        None,
    )
    .unwrap_err();
    assert!(matches!(e, SessionError::TmuxMissing), "{e:?}");
    assert!(e.to_string().contains("agent.session = \"process\""));
}

#[test]
fn peek_log_reads_the_tail() {
    let dir = std::env::temp_dir().join(format!("warden-peek-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("log");
    let mut text = String::new();
    for i in 0..5000 {
        text.push_str(&format!("line {i}\r\n"));
    }
    std::fs::write(&path, &text).unwrap();
    fn check(path: &Path, n: usize, expected: &str) {
        assert_eq!(peek_log(path, n), expected, "{n}");
    }
    check(&path, 0, "");
    check(&path, 1, "line 4999");
    check(&path, 3, "line 4997\nline 4998\nline 4999");
    assert_eq!(peek_log(&path, 2000).lines().count(), 2000);
    assert!(peek_log(&path, 2000).starts_with("line 3000\n"));
    check(&dir.join("missing"), 5, "");
    std::fs::write(&path, "a\nb").unwrap();
    check(&path, 5, "a\nb");
    check(&path, 1, "b");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_note_starts_a_line_of_its_own() {
    let dir = std::env::temp_dir().join(format!("warden-note-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("log");
    let marker = format!("{END_MARKER_OSC}warden:output-ends:s-worker-1\x07");
    for (before, expected) in [
        ("", "--- end ---\n"),
        ("out\n", "out\n--- end ---\n"),
        ("partial", "partial\n--- end ---\n"),
        // The pane's end marker is not output: the byte before it decides.
        (
            &*format!("out\r\n{marker}"),
            &*format!("out\r\n{marker}--- end ---\n"),
        ),
        (
            &*format!("partial{marker}"),
            &*format!("partial{marker}\n--- end ---\n"),
        ),
    ] {
        std::fs::write(&path, before).unwrap();
        note(&path, "--- end ---");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            expected,
            "{before:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn end_markers_are_not_shown() {
    let m = |id: &str| format!("{END_MARKER_OSC}warden:output-ends:{id}\x07");
    let log = format!("a\r\n{}--- session s exited ---\nb{}\n", m("s"), m("t"));
    assert_eq!(
        without_end_markers(&log),
        "a\r\n--- session s exited ---\nb\n"
    );
    assert!(matches!(
        without_end_markers("plain\n"),
        std::borrow::Cow::Borrowed(_)
    ));
    // A tail read mid-marker keeps what it has.
    let cut = format!("x{END_MARKER_OSC}warden:out");
    assert_eq!(without_end_markers(&cut), cut);
    // peek reads them out too.
    let dir = std::env::temp_dir().join(format!("warden-markers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("log");
    std::fs::write(&path, &log).unwrap();
    assert_eq!(peek_log(&path, 2), "--- session s exited ---\nb");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A watch given the end of the session's process (a tmux pane's, whose end closes no
/// channel) returns when it ends, with the log's limit as without: before, the watch of
/// a pane that had ended held its inotify instance until the phase timeout (an hour).
#[test]
fn a_watch_ends_with_the_process_it_is_given() {
    let dir = std::env::temp_dir().join(format!("warden-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("output.log");
    std::fs::write(&log, "").unwrap();
    for limit in [Some(1 << 20), None] {
        let mut child = Command::new("sleep").arg("0.2").spawn().unwrap();
        let pid = Pid::from_raw(child.id() as i32).unwrap();
        let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap();
        let (done_tx, done) = mpsc::channel();
        let log2 = log.clone();
        std::thread::spawn(move || {
            let (_never, quiet) = mpsc::channel::<()>();
            let why = watch(&quiet, Duration::from_secs(3600), &log2, limit, Some(&fd));
            let _ = done_tx.send(why);
        });
        child.wait().unwrap();
        assert_eq!(
            done.recv_timeout(Duration::from_secs(30)),
            Ok(Watched::Exited),
            "{limit:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
