//! Measures exit-detection latency (DESIGN 5: under 1 s): starts N short sessions in each
//! mode, one at a time, and prints p50/p99/max of the time from a session's last moment to
//! the arrival of its `warden task exited` report.
//!
//! Run: `cargo run -p warden-runner --example exit_latency -- [N]` (default N = 50).
//! The `warden` binary is stood in for by a script that stamps the arrival time; tmux mode
//! sweeps every 250 ms, as the supervisor does.

#![allow(clippy::print_stdout)] // printing the measurements is this program's job

use std::path::Path;
use std::time::{Duration, Instant};

use warden_runner::session::{SessionSpec, start_process, start_tmux, tmux_remove, tmux_sweep};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let dir = std::env::temp_dir().join(format!("warden-exit-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the temp dir");
    let exe = dir.join("warden");
    // Arguments: task exited <task> --session <session> --exit-code <code>.
    std::fs::write(
        &exe,
        "#!/bin/sh\nprintf '%s\\n' \"$(date +%s%N)\" > \"$(dirname \"$0\")/report-$5\"\n",
    )
    .expect("write the stand-in warden");
    chmod_x(&exe);

    let process = measure("process", n, &dir, &exe, |spec| {
        start_process(spec).expect("start a process session").join();
    });
    report("process", &process);

    let socket = dir.join("tmux.sock");
    let tmux = measure("tmux", n, &dir, &exe, |spec| {
        let name = start_tmux(&socket, spec).expect("start a tmux session");
        let arrived = dir.join(format!("report-{}", spec.session_id));
        let start = Instant::now();
        while !arrived.exists() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(250));
            let _ = tmux_sweep(&socket, |_| false);
        }
        let _ = tmux_remove(&socket, &name);
    });
    report("tmux", &tmux);

    let _ = std::process::Command::new("tmux")
        .arg("-S")
        .arg(&socket)
        .arg("kill-server")
        .output();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `n` sessions through `run` (which returns once the session has ended) and returns
/// the latencies of the reports that arrived.
fn measure(
    mode: &str,
    n: usize,
    dir: &Path,
    exe: &Path,
    run: impl Fn(&SessionSpec),
) -> Vec<Duration> {
    let mut latencies = Vec::new();
    for i in 0..n {
        let session = format!("{mode}-{i}");
        let exited = dir.join(format!("exited-{session}"));
        let spec = SessionSpec {
            task_id: format!("t{i}"),
            session_id: session.clone(),
            // `true`, plus a time stamp taken as the last thing before exiting.
            argv: vec![
                "sh".into(),
                "-c".into(),
                "date +%s%N > \"$0\"".into(),
                exited.display().to_string(),
            ],
            cwd: dir.to_path_buf(),
            env: vec![],
            log_path: dir.join("output.log"),
            warden_exe: exe.to_path_buf(),
            project_root: dir.to_path_buf(),
            timeout: Duration::from_secs(60),
            kill_after: Duration::from_secs(5),
            max_log_bytes: None,
            stdin: None,
            clean_env: false,
            pass_env: Vec::new(),
            started_file: None,
            stop_file: None,
        };
        run(&spec);
        let arrived = wait_for(&dir.join(format!("report-{session}")));
        if let (Some(a), Some(e)) = (arrived, stamp(&exited)) {
            latencies.push(Duration::from_nanos(a.saturating_sub(e)));
        }
    }
    latencies
}

fn wait_for(path: &Path) -> Option<u64> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if let Some(t) = stamp(path) {
            return Some(t);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

fn stamp(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn report(mode: &str, latencies: &[Duration]) {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    let pct = |p: f64| {
        sorted
            .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
            .map(|d| format!("{:.1} ms", d.as_secs_f64() * 1000.0))
            .unwrap_or_else(|| "-".into())
    };
    println!(
        "{mode:8} n={:<4} p50={:>9} p99={:>9} max={:>9}",
        sorted.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
}

fn chmod_x(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}
