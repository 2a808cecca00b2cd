//! Runs a check (a [`WorkSpec`]) to completion and reports a guard outcome: shell specs
//! through `sh -c`, process specs by argv (never a shell), with a timeout that kills the
//! whole process group.
//!
//! A check ends when its own process ends: what it left running in its process group is
//! killed then, and its pipes are read for at most [`DRAIN`] more (a process that left
//! the group could hold them open forever). Only the last [`KEEP_BYTES`] of each stream
//! are kept, so a check that prints without end costs no more memory than one that
//! prints a line.

use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use warden_core::model::WorkSpec;
use warden_core::ops::GuardOutcome;

/// How much of a failed check's output is kept (DESIGN 2.4: the last 2,000 characters).
pub const TAIL_CHARS: usize = 2000;

/// The bytes kept of each of a check's streams: room for [`TAIL_CHARS`] characters of
/// four bytes each, twice over.
pub const KEEP_BYTES: usize = 16 * 1024;

/// How long a check's pipes are read after its process ended.
pub const DRAIN: Duration = Duration::from_secs(1);

/// How often a child's exit is looked for where no pidfd can announce it.
const RECHECK: Duration = Duration::from_millis(5);

/// The last `n` characters of `s`, never splitting a character. A NUL becomes U+FFFD:
/// the tail is shown to people and goes into the next attempt's prompt, where a NUL is
/// nothing anyone can read (and ends the text for any C-string reader).
pub fn tail(s: &str, n: usize) -> String {
    let count = s.chars().count();
    s.chars()
        .skip(count.saturating_sub(n))
        .map(|c| if c == '\0' { '\u{FFFD}' } else { c })
        .collect()
}

/// The result of running a check.
#[derive(Debug)]
pub struct CheckRun {
    /// Pass, fail (with the output tail) or error (could not start).
    pub outcome: GuardOutcome,
    /// The end of its output: the last [`KEEP_BYTES`] of stdout, then of stderr.
    pub output: String,
}

/// What is read from one of a child's pipes until it closes: all of it, or the last
/// `keep` bytes.
struct Stream<R> {
    pipe: Option<R>,
    kept: Vec<u8>,
    keep: Option<usize>,
    cut: bool,
}

impl<R: Read + AsFd> Stream<R> {
    fn new(pipe: Option<R>, keep: Option<usize>) -> Stream<R> {
        Stream {
            pipe,
            kept: Vec::new(),
            keep,
            cut: false,
        }
    }

    /// Reads what the pipe has (poll said it is readable or closed).
    fn read(&mut self, buf: &mut [u8]) {
        let Some(p) = self.pipe.as_mut() else { return };
        match p.read(buf) {
            Ok(0) => self.pipe = None,
            Ok(n) => {
                self.kept.extend_from_slice(&buf[..n]);
                if let Some(keep) = self.keep
                    && self.kept.len() > 2 * keep
                {
                    self.kept.drain(..self.kept.len() - keep);
                    self.cut = true;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => self.pipe = None,
        }
    }

    /// What was kept: with a `keep`, the last `keep` bytes, from a character's start.
    fn bytes(self) -> Vec<u8> {
        let mut kept = self.kept;
        if let Some(keep) = self.keep
            && (self.cut || kept.len() > keep)
        {
            let mut from = kept.len().saturating_sub(keep);
            while kept.get(from).is_some_and(|b| b & 0xC0 == 0x80) {
                from += 1;
            }
            kept.drain(..from);
        }
        kept
    }
}

/// Waits until `a` or `b` has something to read (and reads it), `exit` (the child's
/// pidfd) says the child ended, or `wait` passes (`None`: no limit).
fn pump<A: Read + AsFd, B: Read + AsFd>(
    a: &mut Stream<A>,
    b: &mut Stream<B>,
    exit: Option<&OwnedFd>,
    wait: Option<Duration>,
) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let flags = PollFlags::IN | PollFlags::HUP | PollFlags::ERR;
    let (ready_a, ready_b) = {
        // Which of the three is watched, in poll's order.
        let watched: Vec<(usize, BorrowedFd<'_>)> = [
            a.pipe.as_ref().map(AsFd::as_fd),
            b.pipe.as_ref().map(AsFd::as_fd),
            exit.map(AsFd::as_fd),
        ]
        .into_iter()
        .enumerate()
        .filter_map(|(k, fd)| fd.map(|f| (k, f)))
        .collect();
        if watched.is_empty() {
            return;
        }
        let mut fds: Vec<PollFd<'_>> = watched
            .iter()
            .map(|(_, f)| PollFd::from_borrowed_fd(*f, flags))
            .collect();
        let timeout = wait.and_then(|w| Timespec::try_from(w).ok());
        if poll(&mut fds, timeout.as_ref()).is_err() {
            return;
        }
        let mut ready = [false; 3];
        for ((k, _), fd) in watched.iter().zip(&fds) {
            ready[*k] = !fd.revents().is_empty();
        }
        (ready[0], ready[1])
    };
    let mut buf = [0u8; 64 * 1024];
    if ready_a {
        a.read(&mut buf);
    }
    if ready_b {
        b.read(&mut buf);
    }
}

/// Whether child `pid` has exited, leaving it unreaped (with `now`, without waiting; a
/// child that cannot be waited for counts as exited).
fn await_exit(pid: u32, now: bool) -> bool {
    use rustix::process::{Pid, WaitId, WaitIdOptions, waitid};
    let Some(p) = Pid::from_raw(pid as i32) else {
        return true;
    };
    let mut how = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
    if now {
        how |= WaitIdOptions::NOHANG;
    }
    loop {
        match waitid(WaitId::Pid(p), how) {
            Ok(found) => return found.is_some(),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return true,
        }
    }
}

/// How a child ended and what it wrote, as [`collect`] gathered it.
#[derive(Debug)]
pub struct Collected {
    /// Its exit status (`None` when it could not be waited for).
    pub status: Option<std::process::ExitStatus>,
    /// Its standard output (all of it, or the end [`collect`] was asked to keep).
    pub stdout: Vec<u8>,
    /// Its standard error (likewise).
    pub stderr: Vec<u8>,
    /// It ran past its time limit and its process group was killed.
    pub timed_out: bool,
}

/// Waits for `child`, reading its piped stdout and stderr as they fill (so it never
/// blocks on a full pipe), keeping all of each or its last `keep` bytes. Past `limit`
/// its process group is killed. Once it has exited, the pipes are read to their end or
/// for [`DRAIN`] at most: a process it left behind may hold them open for ever. With
/// `group` (the child leads its own process group), what it left in that group is
/// killed when it exits.
pub fn collect(
    child: &mut std::process::Child,
    keep: Option<usize>,
    limit: Option<Duration>,
    group: bool,
) -> Collected {
    let pid = child.id();
    let mut out = Stream::new(child.stdout.take(), keep);
    let mut err = Stream::new(child.stderr.take(), keep);
    // The child's end as a file descriptor, so one poll waits for output and the exit
    // alike; without pidfds (Linux before 5.3) the exit is looked for every 5 ms.
    let exit = rustix::process::Pid::from_raw(pid as i32)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
    let start = Instant::now();
    let mut timed_out = false;
    loop {
        if out.pipe.is_none() && err.pipe.is_none() && limit.is_none() {
            // Both pipes are closed: nothing left to read while it finishes.
            await_exit(pid, false);
            break;
        }
        let left = limit.map(|l| l.saturating_sub(start.elapsed()));
        if left.is_some_and(|l| l.is_zero()) {
            timed_out = true;
            break;
        }
        let wait = match &exit {
            Some(_) => left,
            None => Some(left.map_or(RECHECK, |l| l.min(RECHECK))),
        };
        if exit.is_none() && out.pipe.is_none() && err.pipe.is_none() {
            // Nothing to poll: only the clock can end this wait.
            std::thread::sleep(wait.unwrap_or(RECHECK));
        } else {
            pump(&mut out, &mut err, exit.as_ref(), wait);
        }
        if await_exit(pid, true) {
            break;
        }
    }
    // Not reaped yet, so the group id is still this child's: killing it cannot reach a
    // group that took the number over.
    if group || timed_out {
        kill_group(pid);
    }
    let status = child.wait().ok();
    let drained = Instant::now();
    while out.pipe.is_some() || err.pipe.is_some() {
        let left = DRAIN.saturating_sub(drained.elapsed());
        if left.is_zero() {
            break;
        }
        pump(&mut out, &mut err, None, Some(left));
    }
    Collected {
        status,
        stdout: out.bytes(),
        stderr: err.bytes(),
        timed_out,
    }
}

/// Runs `spec` in `cwd` with extra environment variables, waiting at most `timeout`.
pub fn run_check(
    spec: &WorkSpec,
    cwd: &Path,
    env: &[(&str, String)],
    timeout: Duration,
) -> CheckRun {
    run_check_noted(spec, cwd, env, timeout, None)
}

/// [`run_check`], naming the running check in `note` ("HOLDER GROUP START WHAT": this
/// process, the check's process group and its start time, and what it checks — the
/// phase a view shows) while it runs, so that another process can stop it (see
/// [`stop_noted_check`]). A note that cannot be written is left out.
pub fn run_check_noted(
    spec: &WorkSpec,
    cwd: &Path,
    env: &[(&str, String)],
    timeout: Duration,
    note: Option<(&Path, &str)>,
) -> CheckRun {
    let (note, what) = match note {
        Some((p, w)) => (Some(p), w),
        None => (None, ""),
    };
    let mut cmd = match spec {
        WorkSpec::Shell(line) => {
            let mut c = Command::new("sh");
            c.arg("-c").arg(line);
            c
        }
        WorkSpec::Process(argv) => {
            let Some((prog, args)) = argv.split_first() else {
                return CheckRun {
                    outcome: GuardOutcome::Error("the process spec is empty".into()),
                    output: String::new(),
                };
            };
            let mut c = Command::new(prog);
            c.args(args);
            c
        }
        WorkSpec::Agent(_) => {
            return CheckRun {
                outcome: GuardOutcome::Error(
                    "an agent spec cannot be a check; use a shell or process spec".into(),
                ),
                output: String::new(),
            };
        }
    };
    cmd.current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // A check is a person's command, run for a task: no store secrets (see SECRET_VARS).
    for k in warden_store::config::SECRET_VARS {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    // What tells an orphaned check from anyone else's process (see `noted_check`).
    if let Some(n) = note {
        cmd.env(CHECK_NOTE_VAR, n);
    }
    // What names this run of the check in every process it starts, even one that
    // leaves its process group (see `kill_carrying`).
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let marker = format!(
        "{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    cmd.env(CHECK_RUN_VAR, &marker);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return CheckRun {
                outcome: GuardOutcome::Error(format!("cannot start {}: {e}", describe(spec))),
                output: String::new(),
            };
        }
    };
    // The group's start time names it for good: a check whose holder died (a `warden
    // run` killed with kill -9) is told from a later process given the same pid.
    let started = Proc::read(child.id()).map_or(0, |p| p.start);
    let noted = note.filter(|p| {
        let text = format!("{} {} {started} {what}\n", std::process::id(), child.id());
        // Whole or not at all: a cancel reading a half-written note would not find the
        // check to stop, and a refused command would not name it.
        warden_store::files::write_view(p, text.as_bytes()).is_ok()
    });
    // The check is over when its process is: what it left running in its group ends
    // with it.
    let running = Running::add(child.id(), noted.map(Path::to_path_buf), &marker);
    if ENDING.load(std::sync::atomic::Ordering::SeqCst) {
        // Started after `stop_running_checks` looked (it sets ENDING first, then reads
        // RUNNING): stopped here, or it would run on as an orphan.
        kill_group(child.id());
        kill_carrying(CHECK_RUN_VAR, &marker);
    }
    let c = collect(&mut child, Some(KEEP_BYTES), Some(timeout), true);
    // What it left outside its group (a daemon started with `setsid`, a double fork into
    // a session of its own) ends too: it ran on after the task was done.
    kill_carrying(CHECK_RUN_VAR, &marker);
    if ENDING.load(std::sync::atomic::Ordering::SeqCst) {
        // Stopped by this process's own end (`stop_running_checks`): its outcome is no
        // verdict on the work, and the process exits before anything is recorded.
        loop {
            std::thread::park();
        }
    }
    drop(running);
    // Stopped by a person's cancel (see `stop_noted_check`): no verdict on the work, so
    // no failure to charge; the caller records nothing and lets the cancel through.
    let stopped = noted.is_some_and(|p| std::fs::remove_file(stop_mark(p)).is_ok());
    if let Some(p) = noted {
        let _ = std::fs::remove_file(p);
    }
    if stopped {
        return CheckRun {
            outcome: GuardOutcome::Error(format!("{} {STOPPED}", describe(spec))),
            output: String::new(),
        };
    }
    let (status, timed_out) = (c.status, c.timed_out);
    let mut output = String::from_utf8_lossy(&c.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&c.stderr));
    let outcome = match status {
        _ if timed_out => GuardOutcome::Fail(tail(
            &format!(
                "{output}\n(check timed out after {}s and was killed)",
                timeout.as_secs()
            ),
            TAIL_CHARS,
        )),
        Some(st) if st.success() => GuardOutcome::Pass,
        Some(st) => {
            let code = st
                .code()
                .map(|c| format!("exit code {c}"))
                .unwrap_or_else(|| "killed by a signal".into());
            GuardOutcome::Fail(tail(&format!("{output}\n({code})"), TAIL_CHARS))
        }
        None => GuardOutcome::Error(format!("lost track of {}", describe(spec))),
    };
    CheckRun { outcome, output }
}

/// The checks this process runs now (their process groups and notes), so that a signal
/// that ends the process ends them too: a check runs in a group of its own, which a
/// Ctrl-C at the terminal or a TERM to the process never reaches, and a `warden mcp` or
/// `task complete` killed while its postchecks ran left them running to the end,
/// side effects and all, beside the task's next attempt.
static RUNNING: std::sync::Mutex<Vec<(u32, Option<PathBuf>, String)>> =
    std::sync::Mutex::new(Vec::new());

/// Set once the process is ending on a signal (see [`stop_running_checks`]).
static ENDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One check in [`RUNNING`], taken out when dropped.
struct Running(u32);

impl Running {
    fn add(pgid: u32, note: Option<PathBuf>, marker: &str) -> Running {
        running().push((pgid, note, marker.to_owned()));
        Running(pgid)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        running().retain(|(g, ..)| *g != self.0);
    }
}

fn running() -> std::sync::MutexGuard<'static, Vec<(u32, Option<PathBuf>, String)>> {
    RUNNING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Stops every check this process runs: TERM to each group, KILL to what is left after
/// `grace`, and their notes removed. For a process about to end on a signal: the
/// threads that ran the checks wait for that end and record nothing. Returns the
/// groups it signalled.
pub fn stop_running_checks(grace: Duration) -> Vec<u32> {
    // No thread reports the outcome of a check stopped here (see `run_check_noted`).
    ENDING.store(true, std::sync::atomic::Ordering::SeqCst);
    let checks: Vec<(u32, Option<PathBuf>, String)> = running().clone();
    let groups: Vec<u32> = checks.iter().map(|(g, ..)| *g).collect();
    for &g in &groups {
        term_group(g);
    }
    let deadline = Instant::now() + grace;
    while !groups_running(&groups).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for g in groups_running(&groups) {
        kill_group(g);
    }
    for (_, note, marker) in checks {
        // What a check left outside its group: the thread that would end it waits for
        // the process's end.
        kill_carrying(CHECK_RUN_VAR, &marker);
        if let Some(n) = note {
            let _ = std::fs::remove_file(n);
        }
    }
    groups
}

fn describe(spec: &WorkSpec) -> String {
    match spec {
        WorkSpec::Shell(s) => format!("`sh -c {s:?}`"),
        WorkSpec::Process(a) => format!("{:?}", a.first().map(String::as_str).unwrap_or("")),
        WorkSpec::Agent(_) => "an agent".into(),
    }
}

/// A process as `/proc/<pid>/stat` tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Proc {
    /// Its parent.
    parent: u32,
    /// Its process group.
    group: u32,
    /// When it started, in clock ticks since boot.
    start: u64,
    /// It has exited and waits for its parent to collect it (or is being removed).
    zombie: bool,
}

impl Proc {
    fn read(pid: u32) -> Option<Proc> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The fields after the command name (which may hold spaces) in parentheses:
        // state, ppid, pgrp, …, and starttime the 20th.
        let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
        Some(Proc {
            parent: fields.get(1)?.parse().ok()?,
            group: fields.get(2)?.parse().ok()?,
            start: fields.get(19)?.parse().ok()?,
            zombie: matches!(fields.first(), Some(&"Z" | &"X")),
        })
    }
}

/// Has process `pid` exited without being collected by its parent (a zombie)?
pub fn zombie(pid: u32) -> bool {
    Proc::read(pid).is_some_and(|p| p.zombie)
}

/// What a check note says: "HOLDER GROUP START" (START 0 in a note of an older Warden).
fn read_note(note: &Path) -> Option<(u32, u32, u64)> {
    let text = std::fs::read_to_string(note).ok()?;
    let mut it = text.split_whitespace();
    let holder = it.next()?.parse().ok()?;
    let group = it.next()?.parse().ok()?;
    let start = it.next().map_or(Some(0), |w| w.parse().ok())?;
    (group != 0).then_some((holder, group, start))
}

/// The variable a noted check starts with: its note's path.
const CHECK_NOTE_VAR: &str = "WARDEN_CHECK_NOTE";

/// The variable every check starts with: this run of it (`HOLDER-N`), which the
/// processes it starts inherit.
const CHECK_RUN_VAR: &str = "WARDEN_CHECK_RUN";

/// Kills every process (but this one) whose environment has `var=value`, looked up in
/// `/proc`, until none is left (one that forked while being found is found next time):
/// what a check left running outside its process group. Bounded: a process that
/// cleared its environment is out of reach, and a few rounds end it.
fn kill_carrying(var: &str, value: &str) {
    let needle = format!("{var}={value}");
    let own = std::process::id();
    for _ in 0..5 {
        let carriers: Vec<u32> = all_pids()
            .filter(|&pid| pid != own)
            .filter(|&pid| carries_all(pid, &[needle.as_bytes()]))
            .filter(|&pid| Proc::read(pid).is_some_and(|p| !p.zombie))
            .collect();
        if carriers.is_empty() {
            return;
        }
        for pid in carriers {
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
    }
}

/// Is the check `note` names still running, and whose is it? `Some(true)` while its
/// holder runs it, `Some(false)` for a check whose holder died (an orphan: the same
/// process group leader, by its start time, started with this note in its environment,
/// and no longer the holder's child), `None` when it is over or the numbers name someone
/// else's processes (a stale note, or one an agent wrote to have another process
/// stopped: it cannot give that process the variable).
fn noted_check(note: &Path, holder: u32, group: u32, start: u64) -> Option<bool> {
    let p = Proc::read(group).filter(|p| !p.zombie)?;
    if p.parent == holder {
        return Some(true);
    }
    let holder_gone = Proc::read(holder).is_none_or(|h| h.zombie || h.start > p.start);
    let ours = || {
        let mut var = format!("{CHECK_NOTE_VAR}=").into_bytes();
        var.extend_from_slice(note.as_os_str().as_encoded_bytes());
        std::fs::read(format!("/proc/{group}/environ"))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == var.as_slice()))
    };
    (start != 0 && p.start == start && holder_gone && ours()).then_some(false)
}

/// Stops the check `note` names (see [`run_check_noted`]): TERM to its process group,
/// and KILL `grace` later if it still runs. Only a check that still runs as the child of
/// the process that noted it, or one whose holder died (its group leader the same
/// process, by its start time), is signalled: a stale note, whose numbers may name
/// someone else's processes by now, is ignored. Returns the group stopped.
pub fn stop_noted_check(note: &Path, grace: Duration) -> Option<u32> {
    // Said before the signal, so that the check's holder, seeing it end, knows why.
    if read_note(note).is_some() {
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(stop_mark(note));
    }
    let stopped = stop_check(note, grace, |_| true);
    if stopped.is_none() {
        let _ = std::fs::remove_file(stop_mark(note));
    }
    stopped
}

/// How a check a person's cancel stopped ends its error: no verdict on the work, so
/// nothing to record (see [`stopped_by_cancel`]).
pub const STOPPED: &str = "was stopped: a person is cancelling the task";

/// Is this a check's error (or a phase's detail) saying a person's cancel stopped it?
pub fn stopped_by_cancel(text: &str) -> bool {
    text.ends_with(STOPPED)
}

/// Does the check `note` names run now (its holder's, or an orphan)?
pub fn noted_check_running(note: &Path) -> bool {
    read_note(note)
        .is_some_and(|(holder, group, start)| noted_check(note, holder, group, start).is_some())
}

/// What the check `note` names checks (`prechecks`, `postchecks`), as its holder said,
/// while it runs; `None` when none runs or the note does not say (an older note).
pub fn noted_check_what(note: &Path) -> Option<String> {
    if !noted_check_running(note) {
        return None;
    }
    let text = std::fs::read_to_string(note).ok()?;
    text.split_whitespace()
        .nth(3)
        .filter(|w| w.bytes().all(|b| b.is_ascii_lowercase()))
        .map(str::to_owned)
}

/// The file a person's stop of a noted check leaves beside its note.
fn stop_mark(note: &Path) -> std::path::PathBuf {
    let mut p = note.as_os_str().to_owned();
    p.push(".stopped");
    std::path::PathBuf::from(p)
}

/// Stops the check `note` names only if its holder died (a `warden run` killed while it
/// ran a task's checks): nobody will record its result, and it would run on beside the
/// task's next steps. Returns the group stopped.
pub fn stop_orphaned_check(note: &Path, grace: Duration) -> Option<u32> {
    let stopped = stop_check(note, grace, |held| !held);
    if stopped.is_some() {
        let _ = std::fs::remove_file(note);
    }
    stopped
}

fn stop_check(note: &Path, grace: Duration, which: impl Fn(bool) -> bool) -> Option<u32> {
    let (holder, group, start) = read_note(note)?;
    if !noted_check(note, holder, group, start).is_some_and(&which) {
        return None;
    }
    term_group(group);
    let deadline = std::time::Instant::now() + grace;
    while noted_check(note, holder, group, start).is_some() {
        if std::time::Instant::now() >= deadline {
            kill_group(group);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(group)
}

/// The process groups (not this process's own) of every process that carries
/// `WARDEN_SESSION=<session>` and `WARDEN_DIR=<root>` in its environment: what is left
/// of a session that ended (an agent's detached children; a program whose tmux pane or
/// server is gone). Both: session ids (`TASK-ROLE-N`) repeat across projects, and
/// another project's agent on this machine is not this session's. A group whose leader
/// still runs without them is not the session's (a script that started one such
/// process, the tmux server whose jobs share its group): only a group the session
/// started, or one whose leader is gone, is. Read from `/proc`.
pub fn session_groups(session: &str, root: &Path) -> Vec<u32> {
    let needle = format!("WARDEN_SESSION={session}");
    let mut dir_needle = b"WARDEN_DIR=".to_vec();
    dir_needle.extend_from_slice(root.as_os_str().as_encoded_bytes());
    let needles = [needle.as_bytes(), dir_needle.as_slice()];
    let carries = |pid: u32| carries_all(pid, &needles);
    let own = rustix::process::getpgrp().as_raw_nonzero().get() as u32;
    let mut groups: Vec<u32> = all_pids()
        .filter(|&pid| carries(pid))
        .filter_map(group_of)
        .filter(|&g| g != 0 && g != own)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    groups.retain(|&g| !leads_alive(g) || carries(g));
    groups
}

/// Every process id in `/proc` (none when it cannot be read).
fn all_pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
}

/// Does process `pid`'s environment hold every one of `entries` (`NAME=value`, whole)?
fn carries_all(pid: u32, entries: &[&[u8]]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
        entries
            .iter()
            .all(|want| env.split(|b| *b == 0).any(|kv| kv == *want))
    })
}

/// Stops what is left of session `session` of the project at `root` (see
/// [`session_groups`]): TERM to each of its groups, then KILL to any still there after
/// `grace`. Returns the groups it signalled.
pub fn stop_session_remains(session: &str, root: &Path, grace: Duration) -> Vec<u32> {
    stop_session_remains_but(session, root, &[], grace)
}

/// [`stop_session_remains`], sparing the process groups of the processes `spare` (a
/// supervisor started from a shell that carried the session's variables is no remains
/// of it).
pub fn stop_session_remains_but(
    session: &str,
    root: &Path,
    spare: &[u32],
    grace: Duration,
) -> Vec<u32> {
    let spared: Vec<u32> = spare.iter().filter_map(|&pid| group_of(pid)).collect();
    let groups: Vec<u32> = session_groups(session, root)
        .into_iter()
        .filter(|g| !spared.contains(g))
        .collect();
    for &g in &groups {
        term_group(g);
    }
    let deadline = Instant::now() + grace;
    while !groups_running(&groups).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed = groups_running(&groups);
    for &g in &killed {
        kill_group(g);
    }
    // A KILL takes effect when the process is next scheduled: until then it still runs,
    // and another report of the same end would find it (and note it) again.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !groups_running(&killed).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    groups
}

/// Which of `groups` still hold a process that runs: a group of zombies nobody reaped
/// (their parent is gone, or does not wait) has ended. A signal test of the group
/// counts them, and the stop waited out its whole grace for a process that died at
/// the TERM.
fn groups_running(groups: &[u32]) -> Vec<u32> {
    if groups.is_empty() {
        return Vec::new();
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return groups.to_vec();
    };
    let mut running: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Proc::read(pid).filter(|p| !p.zombie && groups.contains(&p.group)))
        .map(|p| p.group)
        .collect();
    running.sort_unstable();
    running.dedup();
    running
}

/// Process groups as messages name them: `12, 34`.
pub fn group_list(groups: &[u32]) -> String {
    groups
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether process `g` runs (not a zombie, whose environment reads empty) and leads
/// group `g`.
fn leads_alive(g: u32) -> bool {
    Proc::read(g).is_some_and(|p| !p.zombie && p.group == g)
}

/// The process group of process `pid`, from `/proc`.
fn group_of(pid: u32) -> Option<u32> {
    Proc::read(pid).map(|p| p.group)
}

/// Sends SIGKILL to a whole process group.
pub fn kill_group(pgid: u32) {
    signal_group(pgid, rustix::process::Signal::KILL);
}

/// Sends SIGTERM to a whole process group: the polite first half of a stop.
pub fn term_group(pgid: u32) {
    signal_group(pgid, rustix::process::Signal::TERM);
}

fn signal_group(pgid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(pid, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group is a session's remains when what leads it carries the session's
    /// variables, or when its leader is gone; not when a leader without them still runs
    /// (a script that started one such process; the tmux server, whose hook jobs share
    /// its group).
    #[test]
    fn only_a_group_the_session_leads_or_left_is_its_remains() {
        use std::os::unix::process::CommandExt;
        let root = std::env::temp_dir().join(format!("warden-lead-{}", std::process::id()));
        let r = root.display().to_string();
        // `sh` stays as each group's leader (a second command keeps it from exec'ing
        // `sleep`) and waits for its `sleep` to start before it says so.
        let group = |script: &str, vars: bool| {
            let mut c = Command::new("sh");
            c.arg("-c").arg(script).arg("sh").arg(&r).process_group(0);
            c.stdout(Stdio::piped()).stdin(Stdio::null());
            if vars {
                c.env("WARDEN_SESSION", "lead-1").env("WARDEN_DIR", &r);
            }
            let mut child = c.spawn().unwrap();
            let mut line = [0u8; 3];
            child
                .stdout
                .as_mut()
                .unwrap()
                .read_exact(&mut line)
                .unwrap();
            assert_eq!(&line, b"up\n");
            child
        };
        let child_starts = "env WARDEN_SESSION=lead-1 WARDEN_DIR=\"$1\" sleep 30 & \
             while ! grep -qs sleep /proc/$!/comm; do sleep 0.01; done; echo up; wait";
        let mut innocent = group(child_starts, false);
        let mut own = group(
            "sleep 30 & while ! grep -qs sleep /proc/$!/comm; do sleep 0.01; done; echo up; wait",
            true,
        );
        let found = session_groups("lead-1", &root);
        assert_eq!(found, vec![own.id()], "innocent leader {}", innocent.id());
        // Its leader gone, what the group holds is what was left.
        let orphan_leader = innocent.id();
        term_group(own.id());
        own.wait().unwrap();
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(orphan_leader as i32).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        innocent.wait().unwrap();
        assert_eq!(session_groups("lead-1", &root), vec![orphan_leader]);
        kill_group(orphan_leader);
        let start = Instant::now();
        while !session_groups("lead-1", &root).is_empty() {
            assert!(start.elapsed() < Duration::from_secs(10), "still there");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A leftover that dies at the TERM but is not reaped (a zombie: its parent does not
    /// wait) has ended: the stop returns then, not after its whole grace.
    #[test]
    fn a_group_of_zombies_has_ended() {
        use std::os::unix::process::CommandExt;
        let root = std::env::temp_dir().join(format!("warden-zombie-{}", std::process::id()));
        let mut child = Command::new("sleep")
            .arg("300")
            .env("WARDEN_SESSION", "zombie-1")
            .env("WARDEN_DIR", &root)
            .process_group(0)
            .spawn()
            .unwrap();
        // Until its exec has finished, its environment reads empty.
        let environ = format!("/proc/{}/environ", child.id());
        while !std::fs::read(&environ)
            .is_ok_and(|e| e.starts_with(b"WARDEN") || e.windows(8).any(|w| w == b"\0WARDEN_"))
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let start = Instant::now();
        // Not waited for until the stop returns: the TERM leaves a zombie.
        let stopped = stop_session_remains("zombie-1", &root, Duration::from_secs(60));
        let took = start.elapsed();
        assert_eq!(stopped, vec![child.id()]);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            child.wait().unwrap().signal(),
            Some(15),
            "ended by the TERM"
        );
        assert!(
            took < Duration::from_secs(30),
            "waited out the grace: {took:?}"
        );
    }

    /// A note whose numbers no longer name a check of its holder (the holder died and
    /// the numbers were reused) signals nothing; a live one stops its check.
    #[test]
    fn only_a_live_noted_check_is_stopped() {
        let dir = std::env::temp_dir().join(format!("warden-note-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let note = dir.join("check.pid");
        let mut bystander = Command::new("sleep").arg("30").spawn().unwrap();
        // Its parent is this process, not pid 1.
        std::fs::write(&note, format!("1 {}\n", bystander.id())).unwrap();
        assert_eq!(stop_noted_check(&note, Duration::from_secs(1)), None);
        assert!(
            bystander.try_wait().unwrap().is_none(),
            "a bystander was signalled"
        );
        bystander.kill().unwrap();
        bystander.wait().unwrap();
        // A check that runs, noted by this process, is stopped by another thread.
        let (n, spec) = (note.clone(), WorkSpec::Shell("sleep 30".into()));
        let run = std::thread::spawn(move || {
            run_check_noted(
                &spec,
                Path::new("."),
                &[],
                Duration::from_secs(60),
                Some((&n, "postchecks")),
            )
        });
        let start = std::time::Instant::now();
        let stopped = loop {
            if let Some(g) = stop_noted_check(&note, Duration::from_secs(1)) {
                break g;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "never noted");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(stopped > 0);
        let r = run.join().unwrap();
        // A stop is no verdict on the work: an error, which charges nothing.
        assert!(
            matches!(&r.outcome, GuardOutcome::Error(e) if e.contains("was stopped: a person is cancelling the task")),
            "{:?}",
            r.outcome
        );
        assert!(!note.exists(), "the note goes with the check");
        assert!(!stop_mark(&note).exists(), "and so does its stop mark");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A check whose holder died (its runner killed) is stopped by the next runner, but
    /// only the very process the note names: a note whose start time does not match
    /// (the group's pid given to someone else since), or from an older Warden without
    /// one, signals nothing; nor does a check whose holder still runs it, nor a process
    /// that did not start as this note's check (a note an agent forged).
    #[test]
    fn an_orphaned_check_is_stopped_and_only_it() {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        let dir = std::env::temp_dir().join(format!("warden-orphan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let note = dir.join("check.pid");
        let mut dead = Command::new("true").spawn().unwrap();
        dead.wait().unwrap();
        let grace = Duration::from_secs(1);
        // Someone else's process, named by a note an agent wrote: every number right,
        // but it never was a check of this note.
        let mut other = Command::new("sleep");
        other.arg("30").process_group(0);
        let mut other = other.spawn().unwrap();
        let other_start = Proc::read(other.id()).unwrap().start;
        std::fs::write(
            &note,
            format!("{} {} {other_start}\n", dead.id(), other.id()),
        )
        .unwrap();
        assert_eq!(stop_orphaned_check(&note, grace), None);
        assert_eq!(stop_noted_check(&note, grace), None);
        assert!(
            other.try_wait().unwrap().is_none(),
            "a bystander was signalled"
        );
        other.kill().unwrap();
        other.wait().unwrap();
        // A check, as `run_check_noted` starts one.
        let mut check = Command::new("sleep");
        check.arg("30").env(CHECK_NOTE_VAR, &note).process_group(0);
        let mut check = check.spawn().unwrap();
        let start = Proc::read(check.id()).unwrap().start;
        for (holder, start) in [
            (dead.id(), start + 1),
            (dead.id(), 0),
            (std::process::id(), start),
        ] {
            std::fs::write(&note, format!("{holder} {} {start}\n", check.id())).unwrap();
            assert_eq!(stop_orphaned_check(&note, grace), None, "{holder} {start}");
            assert!(check.try_wait().unwrap().is_none(), "{holder} {start}");
        }
        std::fs::write(&note, format!("{} {} {start}\n", dead.id(), check.id())).unwrap();
        assert_eq!(stop_orphaned_check(&note, grace), Some(check.id()));
        assert!(
            check.wait().unwrap().signal().is_some(),
            "stopped by a signal"
        );
        assert!(!note.exists(), "its note goes with it");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn run(spec: WorkSpec, timeout_ms: u64) -> CheckRun {
        run_check(
            &spec,
            Path::new("."),
            &[],
            Duration::from_millis(timeout_ms),
        )
    }

    #[test]
    fn outcomes() {
        assert_eq!(
            run(WorkSpec::Shell("true".into()), 5000).outcome,
            GuardOutcome::Pass
        );
        match run(WorkSpec::Shell("echo broken >&2; exit 3".into()), 5000).outcome {
            GuardOutcome::Fail(t) => {
                assert!(t.contains("broken") && t.contains("exit code 3"), "{t}")
            }
            o => panic!("{o:?}"),
        }
        let p = WorkSpec::Process(vec!["echo".into(), "$HOME; rm -rf /".into()]);
        let r = run(p, 5000);
        assert_eq!(r.outcome, GuardOutcome::Pass);
        assert_eq!(
            r.output, "$HOME; rm -rf /\n",
            "argv is never interpreted by a shell"
        );
        assert!(matches!(
            run(WorkSpec::Process(vec!["/nonexistent/prog".into()]), 5000).outcome,
            GuardOutcome::Error(_)
        ));
        assert!(matches!(
            run(WorkSpec::Agent("x".into()), 5000).outcome,
            GuardOutcome::Error(_)
        ));
    }

    #[test]
    fn timeout_kills_the_group() {
        let r = run(WorkSpec::Shell("sleep 30 & sleep 30; wait".into()), 300);
        match r.outcome {
            GuardOutcome::Fail(t) => assert!(t.contains("timed out"), "{t}"),
            o => panic!("{o:?}"),
        }
    }

    /// Runs `spec` on a thread; a check that does not return within a minute fails the
    /// test instead of hanging it.
    fn run_bounded(spec: WorkSpec, timeout: Duration) -> CheckRun {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(run_check(&spec, Path::new("."), &[], timeout));
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the check never returned")
    }

    /// Whether process `pid` ends (a zombie no one has reaped yet counts) within `limit`,
    /// as its pidfd tells.
    fn ends_within(pid: &str, limit: Duration) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let pid = rustix::process::Pid::from_raw(pid.trim().parse().unwrap()).unwrap();
        match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
            Err(rustix::io::Errno::SRCH) => true,
            Err(e) => panic!("pidfd_open: {e}"),
            Ok(fd) => {
                let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                let limit = Timespec::try_from(limit).unwrap();
                poll(&mut fds, Some(&limit)).unwrap() > 0
            }
        }
    }

    #[test]
    fn a_check_ends_with_its_own_process_and_takes_what_it_left_behind() {
        let pids = std::env::temp_dir().join(format!("warden-check-pids-{}", std::process::id()));
        // One leftover in the check's process group, one that left it (and would hold
        // the pipes open for ten minutes): both end with the check.
        let line = format!(
            "sleep 600 & echo $! > {p}; setsid sh -c 'echo $$ >> {p}; exec sleep 600' & \
             while [ \"$(wc -l < {p})\" -lt 2 ]; do sleep 0.01; done; echo started",
            p = pids.display()
        );
        let r = run_bounded(WorkSpec::Shell(line), Duration::from_secs(3600));
        assert_eq!(r.outcome, GuardOutcome::Pass);
        assert_eq!(r.output, "started\n");
        let text = std::fs::read_to_string(&pids).unwrap();
        let _ = std::fs::remove_file(&pids);
        let mut pids = text.lines();
        let (in_group, outside) = (pids.next().unwrap(), pids.next().unwrap());
        assert!(
            ends_within(in_group, Duration::from_secs(30)),
            "the leftover {in_group} lives on"
        );
        // The one in a session of its own carries the check's run marker: it ends too.
        assert!(
            ends_within(outside, Duration::from_secs(30)),
            "the leftover {outside}, outside the group, lives on"
        );
    }

    #[test]
    fn endless_output_keeps_only_its_end_storable_and_whole_characters() {
        // 50 MB of output, then a NUL and a failure.
        let r = run_bounded(
            WorkSpec::Shell(
                "head -c 50000000 /dev/zero | tr '\\000' x; printf 'a\\000b'; exit 1".into(),
            ),
            Duration::from_secs(3600),
        );
        assert!(
            r.output.len() <= KEEP_BYTES,
            "{} bytes kept",
            r.output.len()
        );
        match r.outcome {
            GuardOutcome::Fail(t) => {
                assert!(
                    t.ends_with("xxa\u{FFFD}b\n(exit code 1)"),
                    "{}",
                    tail(&t, 40)
                );
                assert_eq!(t.chars().count(), TAIL_CHARS);
            }
            o => panic!("{o:?}"),
        }
        // Cut inside a stream of two-byte characters: the kept text starts on a whole one.
        let r = run_bounded(
            WorkSpec::Shell("yes é | head -c 100001".into()),
            Duration::from_secs(3600),
        );
        let start: String = r.output.chars().take(4).collect();
        assert!(!r.output.contains('\u{FFFD}'), "{start:?}");
        assert!(r.output.starts_with(['é', '\n']), "{start:?}");
    }

    #[test]
    fn a_stream_holds_at_most_twice_what_it_keeps() {
        let path = std::env::temp_dir().join(format!("warden-check-mb-{}", std::process::id()));
        std::fs::write(&path, vec![b'x'; 1 << 20]).unwrap();
        let mut s = Stream::new(Some(std::fs::File::open(&path).unwrap()), Some(KEEP_BYTES));
        let mut buf = [0u8; 4096];
        let mut most = 0;
        while s.pipe.is_some() {
            s.read(&mut buf);
            most = most.max(s.kept.len());
        }
        let _ = std::fs::remove_file(&path);
        assert!(most <= 2 * KEEP_BYTES, "{most} bytes held");
        assert_eq!(s.bytes().len(), KEEP_BYTES);
    }

    #[test]
    fn tail_respects_chars() {
        assert_eq!(tail("héllo", 3), "llo");
        assert_eq!(tail("ab", 5), "ab");
        assert_eq!(tail("ééé", 2), "éé");
        assert_eq!(tail("a\0b", 5), "a\u{FFFD}b");
    }
}
