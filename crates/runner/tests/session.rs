//! Sessions with real processes and a real tmux server: every end of a session must arrive
//! as one run of `warden task exited` with the right task, session and exit code.
//!
//! The `warden` binary is stood in for by a shell script that records its arguments and
//! `$WARDEN_DIR`; it lives in a directory whose name needs quoting everywhere.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use warden_runner::session::{
    SessionError, SessionSpec, TmuxPane, peek_log, report_exit, report_exit_why, start_process,
    start_tmux, tmux_capture, tmux_expire, tmux_kill, tmux_list, tmux_remove, tmux_sweep,
};

/// A directory name with a space, quotes, `$`, `#`, `%` and a trailing `;`.
const AWKWARD: &str = "bin dir it's \"$HOME\" #{x} %s;";

struct Fixture {
    dir: PathBuf,
    exe: PathBuf,
    root: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let dir =
            std::env::temp_dir().join(format!("warden-session-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let bin = dir.join(AWKWARD);
        std::fs::create_dir_all(&bin).unwrap();
        let exe = bin.join("war den");
        std::fs::write(
            &exe,
            "#!/bin/sh\nprintf '%s|%s\\n' \"$WARDEN_DIR\" \"$*\" >> \"$(dirname \"$0\")/reports\"\n",
        )
        .unwrap();
        chmod_x(&exe);
        let root = dir.join("project root");
        std::fs::create_dir_all(root.join("work tree")).unwrap();
        Fixture { dir, exe, root }
    }

    fn spec(&self, task: &str, session: &str, argv: &[&str]) -> SessionSpec {
        SessionSpec {
            task_id: task.into(),
            session_id: session.into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: self.root.join("work tree"),
            env: vec![
                ("WARDEN_DIR".into(), self.root.display().to_string()),
                ("WARDEN_TASK_ID".into(), task.into()),
                ("WARDEN_TASK_FILE".into(), format!("/tasks/{task}/TASK.md")),
                ("WARDEN_ROLE".into(), "worker".into()),
            ],
            log_path: self.log(task),
            warden_exe: self.exe.clone(),
            project_root: self.root.clone(),
            timeout: Duration::from_secs(20),
            kill_after: Duration::from_secs(5),
            max_log_bytes: None,
            stdin: None,
            clean_env: false,
            pass_env: Vec::new(),
            started_file: None,
            stop_file: None,
        }
    }

    fn log(&self, task: &str) -> PathBuf {
        self.root.join(format!(".warden/tasks/{task}/output.log"))
    }

    fn reports(&self) -> String {
        std::fs::read_to_string(self.exe.parent().unwrap().join("reports")).unwrap_or_default()
    }

    /// Waits up to 5 s for the report of `session`, and checks it says `code`.
    fn expect_report(&self, task: &str, session: &str, code: i32) {
        self.expect_report_from(None, task, session, code, None)
    }

    /// Same, for a session Warden ended, whose report says why.
    fn expect_report_why(&self, task: &str, session: &str, code: i32, why: &str) {
        self.expect_report_from(None, task, session, code, Some(why))
    }

    /// Same, for a tmux session: sweeps every 50 ms as the supervisor does, but without
    /// reporting anything itself, so the report must come from the pane-died hook.
    fn expect_hook_report(&self, tmux: &Server, task: &str, session: &str, code: i32) {
        self.expect_report_from(Some(&tmux.0), task, session, code, None)
    }

    /// Same, for a tmux session Warden ended, whose report says why.
    fn expect_hook_report_why(
        &self,
        tmux: &Server,
        task: &str,
        session: &str,
        code: i32,
        why: &str,
    ) {
        self.expect_report_from(Some(&tmux.0), task, session, code, Some(why))
    }

    fn expect_report_from(
        &self,
        socket: Option<&Path>,
        task: &str,
        session: &str,
        code: i32,
        why: Option<&str>,
    ) {
        let mut want = format!(
            "{}|task exited {task} --session {session} --exit-code {code}",
            self.root.display()
        );
        if let Some(why) = why {
            want.push_str(&format!(" --reason {why}"));
        }
        let start = Instant::now();
        loop {
            let reports = self.reports();
            if reports.lines().any(|l| l == want) {
                return;
            }
            let tag = format!("--session {session} ");
            if reports.contains(&tag) || start.elapsed() > Duration::from_secs(5) {
                panic!("wanted {want:?}, reports are:\n{reports}");
            }
            if let Some(socket) = socket {
                tmux_sweep(socket, |_| false).unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits up to 5 s for `needle` in the log: tmux's pipe-pane writes it asynchronously.
    fn wait_log(&self, task: &str, needle: &str) {
        let start = Instant::now();
        while !self.log_text(task).contains(needle) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{needle:?} not in log:\n{}",
                self.log_text(task)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn log_text(&self, task: &str) -> String {
        std::fs::read_to_string(self.log(task)).unwrap_or_default()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn chmod_x(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Whether a process has died (gone, or a zombie nobody has reaped yet), waiting up to 2 s.
fn dies(pid: u32) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat)
                if stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .starts_with('Z') =>
            {
                return true;
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    false
}

fn read_pid(path: &Path) -> u32 {
    let start = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no pid in {path:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---------------------------------------------------------------------------------------
// Process mode
// ---------------------------------------------------------------------------------------

#[test]
fn process_reports_exit_codes() {
    let f = Fixture::new("codes");
    let ok = start_process(&f.spec("t0", "s0", &["true"])).unwrap();
    let three = start_process(&f.spec("t3", "s3", &["sh", "-c", "exit 3"])).unwrap();
    assert_eq!(ok.join(), Some(0));
    assert_eq!(three.join(), Some(3));
    f.expect_report("t0", "s0", 0);
    f.expect_report("t3", "s3", 3);
    assert!(
        f.log_text("t3")
            .contains("--- session s3 exited with code 3 ---")
    );
}

#[test]
fn process_gets_env_cwd_path_and_its_output_is_logged() {
    let f = Fixture::new("env");
    let script = "echo out; echo err >&2; pwd; echo \"$WARDEN_TASK_ID $WARDEN_ROLE $WARDEN_TASK_FILE\"; \
                  echo \"PATH=$PATH\"; echo \"argv=$1\"";
    let spec = f.spec(
        "t.1",
        "s1",
        &["sh", "-c", script, "sh", "$HOME; not a shell"],
    );
    start_process(&spec).unwrap().join();
    let log = f.log_text("t.1");
    for want in [
        "--- session s1 (worker, task t.1) started ---",
        "out\n",
        "err\n",
        &format!("{}\n", f.root.join("work tree").display()),
        "t.1 worker /tasks/t.1/TASK.md\n",
        &format!("PATH={}:", f.exe.parent().unwrap().display()),
        "argv=$HOME; not a shell\n",
    ] {
        assert!(log.contains(want), "{want:?} not in log:\n{log}");
    }
    // A respawn appends to the same log.
    start_process(&f.spec("t.1", "s2", &["echo", "second"]))
        .unwrap()
        .join();
    let log = f.log_text("t.1");
    assert!(log.contains("--- session s1 (") && log.contains("--- session s2 ("));
    assert_eq!(
        peek_log(&f.log("t.1"), 2),
        "second\n--- session s2 exited with code 0 ---"
    );
    f.expect_report("t.1", "s1", 0);
    f.expect_report("t.1", "s2", 0);
}

#[test]
fn process_timeout_kills_the_group_and_reports_124() {
    let f = Fixture::new("timeout");
    let gpid = f.dir.join("gpid");
    let mut spec = f.spec(
        "t1",
        "s1",
        &[
            "sh",
            "-c",
            "sleep 30 & echo $! > \"$1\"; sleep 30",
            "sh",
            gpid.to_str().unwrap(),
        ],
    );
    spec.timeout = Duration::from_millis(300);
    let s = start_process(&spec).unwrap();
    let grandchild = read_pid(&gpid);
    assert_eq!(s.join(), Some(124));
    f.expect_report_why(
        "t1",
        "s1",
        124,
        "killed: it ran past limits.phase_timeout_s, 0.3s",
    );
    assert!(
        dies(grandchild),
        "the background sleep survived the timeout"
    );
    assert!(f.log_text("t1").contains("timed out after 0.3s"));
}

#[test]
fn process_kill_kills_the_group_and_still_reports() {
    let f = Fixture::new("kill");
    let gpid = f.dir.join("gpid");
    let s = start_process(&f.spec(
        "t1",
        "s1",
        &[
            "sh",
            "-c",
            "sleep 30 & echo $! > \"$1\"; wait",
            "sh",
            gpid.to_str().unwrap(),
        ],
    ))
    .unwrap();
    let grandchild = read_pid(&gpid);
    assert!(s.is_alive());
    s.kill();
    assert_eq!(s.join(), Some(137));
    f.expect_report("t1", "s1", 137);
    assert!(dies(grandchild));
    assert!(f.log_text("t1").contains("--- session s1 was killed ---"));
}

#[test]
fn process_leftovers_die_with_the_session() {
    let f = Fixture::new("leftovers");
    let gpid = f.dir.join("gpid");
    let s = start_process(&f.spec(
        "t1",
        "s1",
        &[
            "sh",
            "-c",
            "sleep 30 & echo $! > \"$1\"",
            "sh",
            gpid.to_str().unwrap(),
        ],
    ))
    .unwrap();
    assert_eq!(s.join(), Some(0));
    assert!(dies(read_pid(&gpid)));
}

#[test]
fn process_start_errors() {
    let f = Fixture::new("errors");
    let check = |spec: SessionSpec, want: &str| {
        let e = start_process(&spec).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
    };
    check(f.spec("t1", "s1", &[]), "command is empty");
    check(f.spec("t1", "S1", &["true"]), "invalid session id");
    check(f.spec("T1", "s1", &["true"]), "invalid task id");
    check(f.spec("t1", "s1", &["/nonexistent/agent"]), "cannot start");
    assert!(f.reports().is_empty(), "nothing started, nothing reported");
}

#[test]
fn failed_report_is_an_error() {
    let f = Fixture::new("report");
    let e = report_exit(Path::new("/bin/false"), &f.root, "t1", "s1", 3).unwrap_err();
    assert!(e.to_string().contains("--exit-code 3` by hand"), "{e}");
}

// ---------------------------------------------------------------------------------------
// Tmux mode
// ---------------------------------------------------------------------------------------

/// A private tmux server, killed when the test ends.
struct Server(PathBuf);

impl Server {
    fn new(name: &str) -> Server {
        // Socket paths are limited to ~100 bytes, so not inside the awkward fixture dir.
        Server(std::env::temp_dir().join(format!("warden-tmux-{}-{name}.sock", std::process::id())))
    }

    fn pane(&self, name: &str) -> TmuxPane {
        tmux_list(&self.0)
            .unwrap()
            .into_iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no pane {name}"))
    }

    fn wait_dead(&self, name: &str) -> TmuxPane {
        let start = Instant::now();
        loop {
            let p = self.pane(name);
            if p.dead {
                return p;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{name} never died"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.0)
            .arg("kill-server")
            .output();
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A stopped process, continued when this is dropped (a test that fails while the tmux
/// server is stopped must not leave it so: the server's drop asks it to exit).
struct Stopped(i32);

impl Stopped {
    fn new(pid: i32) -> Stopped {
        let p = rustix::process::Pid::from_raw(pid).unwrap();
        rustix::process::kill_process(p, rustix::process::Signal::STOP).unwrap();
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let p = rustix::process::Pid::from_raw(self.0).unwrap();
        let _ = rustix::process::kill_process(p, rustix::process::Signal::CONT);
    }
}

/// tmux 3.3 drops what a pane printed but had not yet read when the pane's process
/// exited (it handles the SIGCHLD first), so a program that printed its last lines and
/// exited at once could lose them from the log on a loaded machine. The pane's process
/// now outlives its program until the program's output is in the log. Shown without a
/// race: the tmux server is stopped while the program prints its last line and exits;
/// the pane's process is still there after the program is gone (it was the program
/// itself, dead at once); once tmux runs again, the line is logged and the program's exit
/// code reported.
#[test]
fn a_pane_outlives_its_program_until_the_output_is_logged() {
    let f = Fixture::new("tmux-drain");
    let tmux = Server::new("tmux-drain");
    let (go, ended) = (f.dir.join("go"), f.dir.join("ended"));
    let script = format!(
        "until [ -e '{}' ]; do sleep 0.01; done; echo last-line; echo $$ > '{}'; exit 5",
        go.display(),
        ended.display()
    );
    let name = start_tmux(&tmux.0, &f.spec("t1", "s1", &["sh", "-c", &script])).unwrap();
    let pane_pid = tmux.pane(&name).pid.unwrap();
    let server_pid: i32 = String::from_utf8(
        Command::new("tmux")
            .arg("-S")
            .arg(&tmux.0)
            .args(["display-message", "-p", "#{pid}"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    let stopped = Stopped::new(server_pid);
    std::fs::write(&go, "").unwrap();
    let program = read_pid(&ended);
    assert!(dies(program), "the program never ended");
    let state = std::fs::read_to_string(format!("/proc/{pane_pid}/stat")).unwrap_or_default();
    let state = state.rsplit(')').next().unwrap_or("").trim();
    let state = state.split(' ').next().unwrap_or("").to_owned();
    assert!(
        program != pane_pid && !state.is_empty() && !state.starts_with('Z'),
        "the pane's process {pane_pid} ended with its program {program} ({state:?}), before tmux read its output"
    );
    drop(stopped);
    f.expect_hook_report(&tmux, "t1", "s1", 5);
    f.wait_log("t1", "last-line\r\n");
    f.wait_log("t1", "warden:output-ends:s1");
}

#[test]
fn tmux_reports_exit_code_logs_output_and_keeps_the_dead_pane() {
    let f = Fixture::new("tmux-exit");
    let tmux = Server::new("tmux-exit");
    let script = "echo hi; pwd; echo \"$WARDEN_TASK_ID $WARDEN_ROLE\"; echo \"PATH=$PATH\"; \
                  printf '%s|' \"$@\"; echo; exit 7";
    let spec = f.spec(
        "a.b",
        "s1",
        &[
            "sh",
            "-c",
            script,
            "sh",
            "x;",
            "#{session_name}",
            "it's $HOME",
            "b\\;",
        ],
    );
    let name = start_tmux(&tmux.0, &spec).unwrap();
    assert_eq!(name, "warden-s1", "one tmux session per agent session");
    f.expect_hook_report(&tmux, "a.b", "s1", 7);
    let pane = tmux.wait_dead(&name);
    assert_eq!(pane.dead_status, Some(7));
    assert_eq!(pane.task_id.as_deref(), Some("a.b"));
    assert_eq!(pane.session_id.as_deref(), Some("s1"));
    for want in [
        "--- session s1 (worker, task a.b) started ---",
        "hi\r\n",
        &format!("{}\r\n", f.root.join("work tree").display()),
        "a.b worker\r\n",
        &format!("PATH={}:", f.exe.parent().unwrap().display()),
        "x;|#{session_name}|it's $HOME|b\\;|",
        "--- session s1 exited with code 7 ---",
    ] {
        f.wait_log("a.b", want);
    }
    assert!(tmux_capture(&tmux.0, &name, 50).unwrap().contains("hi"));
    tmux_remove(&tmux.0, &name).unwrap();

    // Each session has its own name: a session cannot start twice while it lives, and
    // another session of the same task never waits for its name (at most one live
    // session per task is the scheduler's rule, not a tmux name clash).
    let name = start_tmux(&tmux.0, &f.spec("a.b", "s2", &["sleep", "30"])).unwrap();
    let e = start_tmux(&tmux.0, &f.spec("a.b", "s2", &["true"])).unwrap_err();
    assert!(matches!(e, SessionError::TmuxSessionAlive { .. }), "{e}");
    let other = start_tmux(&tmux.0, &f.spec("a.b", "s3", &["true"])).unwrap();
    assert_eq!(other, "warden-s3");
    f.expect_hook_report(&tmux, "a.b", "s3", 0);
    tmux.wait_dead(&other);
    tmux_remove(&tmux.0, &other).unwrap();
    tmux_kill(&tmux.0, &name).unwrap();
    f.expect_hook_report(&tmux, "a.b", "s2", 137);
    assert_eq!(tmux.wait_dead(&name).dead_status, Some(137));
    tmux_remove(&tmux.0, &name).unwrap();
    assert!(tmux_list(&tmux.0).unwrap().is_empty());
    tmux_remove(&tmux.0, &name).unwrap();
}

/// A pane makes its `started_file` (a directory) before its program runs. A link an
/// agent planted under that name is followed nowhere: its target keeps its content.
#[test]
fn a_pane_says_it_started_and_follows_no_planted_link() {
    let f = Fixture::new("tmux-started");
    let tmux = Server::new("tmux-started");
    let sessions = f.root.join(".warden/tasks/t1/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let spec = |s: &str| SessionSpec {
        started_file: Some(sessions.join(format!("{s}.started"))),
        stop_file: None,
        ..f.spec("t1", s, &["sh", "-c", "echo ran"])
    };
    start_tmux(&tmux.0, &spec("s1")).unwrap();
    f.expect_hook_report(&tmux, "t1", "s1", 0);
    assert!(
        sessions.join("s1.started").is_dir(),
        "the pane says it started"
    );
    let precious = f.dir.join("precious.txt");
    std::fs::write(&precious, "keep me\n").unwrap();
    std::os::unix::fs::symlink(&precious, sessions.join("s2.started")).unwrap();
    start_tmux(&tmux.0, &spec("s2")).unwrap();
    f.expect_hook_report(&tmux, "t1", "s2", 0);
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me\n");
}

/// A pane whose session was stopped before it started (its `stop_file` is there) ends
/// with 143 without running its program: a person's cancel between the runner's
/// recording of the session and the pane's start found no pane to signal.
#[test]
fn a_pane_stopped_before_it_started_never_runs_its_program() {
    let f = Fixture::new("tmux-stop-first");
    let tmux = Server::new("tmux-stop-first");
    let sessions = f.root.join(".warden/tasks/t1/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let ran = f.dir.join("ran");
    let touch = format!("touch '{}'", ran.display());
    let spec = |s: &str| SessionSpec {
        started_file: Some(sessions.join(format!("{s}.started"))),
        stop_file: Some(sessions.join(format!("{s}.stop"))),
        ..f.spec("t1", s, &["sh", "-c", &touch])
    };
    std::fs::write(sessions.join("s1.stop"), "").unwrap();
    start_tmux(&tmux.0, &spec("s1")).unwrap();
    f.expect_hook_report(&tmux, "t1", "s1", 143);
    assert!(!ran.exists(), "the program never ran");
    // Without the marker it runs.
    start_tmux(&tmux.0, &spec("s2")).unwrap();
    f.expect_hook_report(&tmux, "t1", "s2", 0);
    assert!(ran.exists());
}

/// An agent in a pane does not see which tmux server it runs in: its own `tmux`
/// commands (a `tmux kill-server` to clean up after itself) would reach Warden's private
/// server and every other task's agent on it.
#[test]
fn a_pane_program_does_not_see_wardens_tmux_server() {
    let f = Fixture::new("tmux-env");
    let tmux = Server::new("tmux-env");
    let script = "echo \"tmux=${TMUX:-none} pane=${TMUX_PANE:-none}\"";
    start_tmux(&tmux.0, &f.spec("t1", "s1", &["sh", "-c", script])).unwrap();
    f.expect_hook_report(&tmux, "t1", "s1", 0);
    f.wait_log("t1", "tmux=none pane=none");
}

/// The pane's program is given its session's id; the jobs tmux runs for the session (the
/// `pane-died` hook's report, the output pipe) are not, so a session's end does not count
/// them among what the session left running. Before, the hook's report carried the id,
/// and another report of the same end (the supervisor's sweep) stopped its process group:
/// the tmux server's, with every other task's pane. Shown while the hook's report is
/// held running.
#[test]
fn the_jobs_tmux_runs_for_a_session_are_not_the_session() {
    let f = Fixture::new("tmux-jobs");
    let tmux = Server::new("tmux-jobs");
    let bin = f.exe.parent().unwrap();
    let (seen, release) = (bin.join("hook saw"), bin.join("release"));
    let exe = bin.join("held warden");
    std::fs::write(
        &exe,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"${{WARDEN_SESSION:-none}}\" > {seen}.tmp && mv {seen}.tmp {seen}\n\
             while [ ! -e {release} ] && [ -e {seen} ]; do sleep 0.02; done\n",
            seen = sh_word(&seen),
            release = sh_word(&release),
        ),
    )
    .unwrap();
    chmod_x(&exe);
    let mut spec = f.spec(
        "t1",
        "s1",
        &["sh", "-c", "echo \"pane has ${WARDEN_SESSION:-none}\""],
    );
    spec.env.push(("WARDEN_SESSION".into(), "s1".into()));
    spec.warden_exe = exe;
    start_tmux(&tmux.0, &spec).unwrap();
    f.wait_log("t1", "pane has s1");
    let start = Instant::now();
    while !seen.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the hook never ran"
        );
        // As the supervisor does (see `expect_hook_report`), reporting nothing itself.
        tmux_sweep(&tmux.0, |_| false).unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    let groups = warden_runner::check::session_groups("s1", &f.root);
    std::fs::write(&release, "").unwrap();
    assert_eq!(groups, Vec::<u32>::new(), "the hook's report is no remains");
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "none\n");
}

/// `p` quoted for `sh`.
fn sh_word(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

#[test]
fn tmux_single_word_command_is_not_a_shell_line() {
    let f = Fixture::new("tmux-single");
    let tmux = Server::new("tmux-single");
    let prog = f.exe.parent().unwrap().join("run me; $(oops)");
    std::fs::write(&prog, "#!/bin/sh\necho single ok\n").unwrap();
    chmod_x(&prog);
    start_tmux(&tmux.0, &f.spec("t1", "s1", &[prog.to_str().unwrap()])).unwrap();
    f.expect_hook_report(&tmux, "t1", "s1", 0);
    f.wait_log("t1", "single ok");
}

#[test]
fn tmux_timeout_reports_124() {
    let f = Fixture::new("tmux-timeout");
    let tmux = Server::new("tmux-timeout");
    let mut spec = f.spec("t1", "s1", &["sleep", "30"]);
    spec.timeout = Duration::from_millis(300);
    let name = start_tmux(&tmux.0, &spec).unwrap();
    f.expect_hook_report_why(
        &tmux,
        "t1",
        "s1",
        124,
        "killed: it ran past limits.phase_timeout_s, 0.3s",
    );
    assert_eq!(tmux.wait_dead(&name).dead_status, Some(124));
}

/// A session that writes without end is killed once its output passes its
/// `max_log_bytes` (looked at every `LOG_CHECK`), in both modes, and its end reported
/// as a kill (137). Only its own output counts: earlier sessions' lines in the log do not.
#[test]
fn a_session_that_floods_its_log_is_killed_in_both_modes() {
    let f = Fixture::new("log-full");
    let flood = "while :; do head -c 65536 /dev/zero | tr '\\000' x; sleep 0.01; done";
    let capped = |task: &str, session: &str, argv: &[&str]| SessionSpec {
        max_log_bytes: Some(1 << 20),
        ..f.spec(task, session, argv)
    };
    let note = |s: &str| {
        format!(
            "--- session {s} wrote more than 1 MiB to this log; its process group was killed (limits.session_log_mib) ---"
        )
    };
    // A log that already holds 2 MiB from earlier sessions.
    std::fs::create_dir_all(f.log("p0").parent().unwrap()).unwrap();
    std::fs::write(f.log("p0"), vec![b'.'; 2 << 20]).unwrap();
    let quiet = start_process(&capped("p0", "s0", &["sh", "-c", "sleep 2.5; echo done"])).unwrap();

    let s = start_process(&capped("p1", "s1", &["sh", "-c", flood])).unwrap();
    assert_eq!(s.join(), Some(137));
    let why = "killed: its output passed limits.session_log_mib, 1 MiB";
    f.expect_report_why("p1", "s1", 137, why);
    assert!(f.log_text("p1").contains(&note("s1")));

    let tmux = Server::new("log-full");
    start_tmux(&tmux.0, &capped("t1", "s2", &["sh", "-c", flood])).unwrap();
    f.expect_hook_report_why(&tmux, "t1", "s2", 137, why);
    f.wait_log("t1", &note("s2"));

    assert_eq!(quiet.join(), Some(0), "{}", f.log_text("p0").len());
    f.expect_report("p0", "s0", 0);
}

/// A burst past the limit is caught as it is written, not at the next once-a-second
/// look: a session that writes 2 MiB and ends within the second was never measured, and
/// one writing without pause wrote a gigabyte past a 1 MiB limit before its look.
#[test]
fn a_burst_past_the_output_limit_is_caught_as_it_is_written() {
    let f = Fixture::new("log-burst");
    let burst = "head -c 2097152 /dev/zero | tr '\\000' x; sleep 0.9; echo late";
    let spec = SessionSpec {
        max_log_bytes: Some(1 << 20),
        ..f.spec("b1", "s1", &["sh", "-c", burst])
    };
    let s = start_process(&spec).unwrap();
    assert_eq!(s.join(), Some(137), "it ended on its own, uncaught");
    f.expect_report_why(
        "b1",
        "s1",
        137,
        "killed: its output passed limits.session_log_mib, 1 MiB",
    );
    assert!(!f.log_text("b1").contains("late"));
}

#[test]
fn tmux_sweep_reports_a_pane_whose_hook_did_not_fire() {
    let f = Fixture::new("tmux-sweep");
    let tmux = Server::new("tmux-sweep");
    let killed = start_tmux(&tmux.0, &f.spec("t1", "s1", &["sleep", "30"])).unwrap();
    let expired = start_tmux(&tmux.0, &f.spec("t2", "s2", &["sleep", "30"])).unwrap();
    // Take the hooks away, as if tmux had lost them, then end the sessions: one killed,
    // one ended by Warden for its timeout (which names why on the pane).
    for name in [&killed, &expired] {
        let unhook = Command::new("tmux")
            .arg("-S")
            .arg(&tmux.0)
            .args(["set-hook", "-u", "-t", &format!("={name}:"), "pane-died"])
            .status()
            .unwrap();
        assert!(unhook.success());
    }
    tmux_kill(&tmux.0, &killed).unwrap();
    tmux_expire(&tmux.0, &expired, Duration::from_secs(20)).unwrap();
    tmux.wait_dead(&killed);
    tmux.wait_dead(&expired);
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        f.reports().is_empty(),
        "the hook was removed: {}",
        f.reports()
    );

    let report = |p: &TmuxPane| {
        report_exit_why(
            &f.exe,
            &f.root,
            p.task_id.as_deref().unwrap(),
            p.session_id.as_deref().unwrap(),
            p.dead_status.unwrap(),
            p.why.as_deref(),
        )
        .is_ok()
    };
    assert_eq!(tmux_sweep(&tmux.0, report).unwrap(), 2);
    f.expect_report("t1", "s1", 137);
    f.expect_report_why(
        "t2",
        "s2",
        124,
        "killed: it ran past limits.phase_timeout_s, 20s",
    );
    assert_eq!(tmux_sweep(&tmux.0, report).unwrap(), 0, "reported once");
}

#[test]
fn tmux_without_a_server_lists_nothing() {
    let socket = std::env::temp_dir().join(format!("warden-none-{}.sock", std::process::id()));
    assert_eq!(tmux_list(&socket).unwrap(), vec![]);
    assert_eq!(tmux_sweep(&socket, |_| true).unwrap(), 0);
    tmux_remove(&socket, "warden-x").unwrap();
}

/// A spec for an agent-like session: its input from a file, and only the variables it
/// is given. (Cargo runs tests with `CARGO_PKG_*` and `CARGO_MANIFEST_DIR` set.)
fn agent_spec(f: &Fixture, task: &str, session: &str, input: &Path) -> SessionSpec {
    let script = "printf 'input=%s\\n' \"$(cat)\"; env | sort | sed 's/^/env:/'";
    SessionSpec {
        stdin: Some(input.to_path_buf()),
        clean_env: true,
        pass_env: vec!["HOME".into(), "CARGO_PKG_*".into()],
        started_file: None,
        stop_file: None,
        ..f.spec(task, session, &["sh", "-c", script])
    }
}

fn check_agent_log(log: &str) {
    for want in [
        "input=the prompt; $HOME #{x}",
        &format!("env:CARGO_PKG_NAME={}", env!("CARGO_PKG_NAME")),
        "env:WARDEN_TASK_ID=",
        "env:HOME=",
    ] {
        assert!(log.contains(want), "{want:?} not in log:\n{log}");
    }
    for absent in ["env:CARGO_MANIFEST_DIR=", "env:CARGO_TARGET_TMPDIR="] {
        assert!(!log.contains(absent), "{absent:?} in log:\n{log}");
    }
}

#[test]
fn agent_sessions_read_their_input_and_see_only_what_passes() {
    let f = Fixture::new("agent-input");
    let input = f.dir.join("prompt file");
    std::fs::write(&input, "the prompt; $HOME #{x}").unwrap();
    start_process(&agent_spec(&f, "p1", "s1", &input))
        .unwrap()
        .join();
    check_agent_log(&f.log_text("p1"));

    let tmux = Server::new("agent-input");
    start_tmux(&tmux.0, &agent_spec(&f, "t1", "s2", &input)).unwrap();
    f.expect_hook_report(&tmux, "t1", "s2", 0);
    f.wait_log("t1", "--- session s2 exited with code 0 ---");
    check_agent_log(&f.log_text("t1").replace("\r\n", "\n"));

    // A missing input file is an error before anything starts.
    let e = start_process(&agent_spec(&f, "p2", "s3", &f.dir.join("gone"))).unwrap_err();
    assert!(matches!(e, SessionError::Stdin { .. }), "{e}");
}

#[test]
fn tmux_runs_in_a_directory_whose_name_is_tmux_format_syntax() {
    // tmux expands formats in `new-session -c`: unescaped, this directory would become
    // another one (the server's own directory, the person's checkout).
    let f = Fixture::new("tmux-format-cwd");
    let tmux = Server::new("tmux-format-cwd");
    let cwd = f.root.join("wt #{pane_id} ##{session_name} #(echo no)");
    std::fs::create_dir_all(&cwd).unwrap();
    let spec = SessionSpec {
        cwd: cwd.clone(),
        ..f.spec("t1", "s1", &["sh", "-c", "echo \"cwd=$(pwd)\""])
    };
    start_tmux(&tmux.0, &spec).unwrap();
    f.expect_hook_report(&tmux, "t1", "s1", 0);
    f.wait_log("t1", &format!("cwd={}\r\n", cwd.display()));
}
