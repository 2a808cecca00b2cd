//! Runs a check (a [`WorkSpec`]) to completion and reports a guard outcome: shell specs
//! through `sh -c`, process specs by argv (never a shell), with a timeout that kills the
//! whole process group.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use warden_core::model::WorkSpec;
use warden_core::ops::GuardOutcome;

/// How much of a failed check's output is kept (DESIGN 2.4: the last 2,000 characters).
pub const TAIL_CHARS: usize = 2000;

/// The last `n` characters of `s`, never splitting a character.
pub fn tail(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        return s.to_owned();
    }
    s.chars().skip(count - n).collect()
}

/// The result of running a check.
#[derive(Debug)]
pub struct CheckRun {
    /// Pass, fail (with the output tail) or error (could not start).
    pub outcome: GuardOutcome,
    /// Combined stdout and stderr.
    pub output: String,
}

/// Runs `spec` in `cwd` with extra environment variables, waiting at most `timeout`.
pub fn run_check(
    spec: &WorkSpec,
    cwd: &Path,
    env: &[(&str, String)],
    timeout: Duration,
) -> CheckRun {
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
    let pid = child.id();
    // Drain both pipes on threads so a chatty check never blocks on a full pipe.
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut s);
        }
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut s);
        }
        s
    });
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if start.elapsed() >= timeout => {
                timed_out = true;
                kill_group(pid);
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => break None,
        }
    };
    let mut output = String::from_utf8_lossy(&t_out.join().unwrap_or_default()).into_owned();
    output.push_str(&String::from_utf8_lossy(&t_err.join().unwrap_or_default()));
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

fn describe(spec: &WorkSpec) -> String {
    match spec {
        WorkSpec::Shell(s) => format!("`sh -c {s:?}`"),
        WorkSpec::Process(a) => format!("{:?}", a.first().map(String::as_str).unwrap_or("")),
        WorkSpec::Agent(_) => "an agent".into(),
    }
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

    #[test]
    fn tail_respects_chars() {
        assert_eq!(tail("héllo", 3), "llo");
        assert_eq!(tail("ab", 5), "ab");
        assert_eq!(tail("ééé", 2), "éé");
    }
}
