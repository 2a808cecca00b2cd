//! `warden dashboard` end to end in a real tmux: it starts, shows changes made by another
//! process within two seconds, acts on keys through the store, survives a resize, and
//! `q` leaves with exit 0 and the terminal restored (no alternate screen, no raw mode).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{WARDEN_ENV, Workspace, bin, code, describe};

/// A tmux server of our own on a private socket, killed on drop.
struct Tmux {
    sock: PathBuf,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.sock)
            .args(["-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux is installed (.ci/run installs it)")
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.cmd(args);
        assert!(
            o.status.success(),
            "tmux {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.ok(&["capture-pane", "-p", "-t", "dash"])
    }

    /// Polls the screen every 20 ms until `pred` holds; returns the time it took, or
    /// fails with the last screen.
    /// Like `wait_for`, returning the screen.
    fn wait_for_screen(&self, what: &str, limit: Duration, pred: impl Fn(&str) -> bool) -> String {
        self.wait_for(what, limit, &pred);
        self.screen()
    }

    fn wait_for(&self, what: &str, limit: Duration, pred: impl Fn(&str) -> bool) -> Duration {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if pred(&s) {
                return start.elapsed();
            }
            if start.elapsed() > limit {
                panic!("{what}: not on screen after {limit:?}; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// The screen line that shows task `id` in the table.
fn row<'a>(screen: &'a str, id: &str) -> Option<&'a str> {
    screen.lines().find(|l| {
        l.trim_start_matches(['▸', ' '])
            .split_whitespace()
            .next()
            .is_some_and(|w| w == id)
    })
}

fn ok(ws: &Workspace, args: &[&str]) -> Output {
    let o = ws.run(args);
    assert_eq!(code(&o), 0, "{}", describe(args, &o));
    o
}

#[test]
fn dashboard_in_a_real_tmux() {
    let ws = Workspace::new("dash");
    ok(&ws, &["task", "create", "alpha", "--title", "First task"]);
    let tmux = Tmux {
        sock: ws.root.join("tmux.sock"),
    };
    // A clean environment for the dashboard; its exit code and the terminal's mode are
    // printed by the shell after it returns, and the pane stays open to be read.
    let unset: String = WARDEN_ENV.iter().map(|k| format!("-u {k} ")).collect();
    let script = format!(
        "env {unset} NO_COLOR=1 '{}' dashboard; echo EXIT=$?; stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e -icanon -e echo -e -echo | tr '\\n' ' '; echo; sleep 60",
        bin().display()
    );
    let root = ws.root.to_str().unwrap();
    tmux.ok(&[
        "new-session",
        "-d",
        "-s",
        "dash",
        "-x",
        "100",
        "-y",
        "30",
        "-c",
        root,
        "sh",
        "-c",
        &script,
    ]);

    // It starts and shows the project.
    tmux.wait_for("the dashboard with alpha", Duration::from_secs(15), |s| {
        row(s, "alpha").is_some() && s.contains("q quit")
    });
    assert_eq!(
        tmux.ok(&["display-message", "-p", "-t", "dash", "#{alternate_on}"])
            .trim(),
        "1"
    );

    // A change by another process shows (within a second here; the deadline is generous
    // because this machine is shared, and the time is printed; bench/ measures it).
    ok(&ws, &["task", "create", "beta", "--title", "Second task"]);
    let took = tmux.wait_for("beta after task create", Duration::from_secs(20), |s| {
        row(s, "beta").is_some()
    });
    eprintln!("task create showed after {took:?}");
    ok(&ws, &["task", "update", "alpha", "--status", "working"]);
    let took = tmux.wait_for("alpha working", Duration::from_secs(20), |s| {
        row(s, "alpha").is_some_and(|r| r.contains("working"))
    });
    eprintln!("task update showed after {took:?}");

    // A crash marks the session dead (✗); Enter asks for a respawn through the store.
    ok(&ws, &["task", "exited", "alpha", "--exit-code", "1"]);
    tmux.wait_for("alpha's ✗", Duration::from_secs(20), |s| {
        row(s, "alpha").is_some_and(|r| r.contains('✗'))
    });
    // Nothing supervises this project: the header says so.
    tmux.wait_for("no supervisor", Duration::from_secs(5), |s| {
        s.contains("○ no supervisor: `warden run`")
    });
    // Respawn asks first (`s`), then asks the store.
    tmux.ok(&["send-keys", "-t", "dash", "s"]);
    tmux.wait_for("the respawn question", Duration::from_secs(5), |s| {
        s.contains("Respawn alpha? The supervisor starts a new session for it. y/n")
    });
    tmux.ok(&["send-keys", "-t", "dash", "y"]);
    tmux.wait_for("the respawn message", Duration::from_secs(5), |s| {
        s.contains("alpha: respawn requested")
    });
    assert_eq!(ws.show("alpha")["respawn_requested"], true);

    // A refusal shows the CLI's one-line message: alpha is not stuck.
    tmux.ok(&["send-keys", "-t", "dash", "r", "y"]);
    tmux.wait_for("the retry refusal", Duration::from_secs(5), |s| {
        s.lines().any(|l| l.trim_start().starts_with("refused:"))
    });

    // Enter opens the detail; Esc closes it.
    tmux.ok(&["send-keys", "-t", "dash", "Enter"]);
    tmux.wait_for("the detail view", Duration::from_secs(5), |s| {
        s.contains("alpha — First task · Enter or Esc closes")
    });
    tmux.ok(&["send-keys", "-t", "dash", "Escape"]);
    tmux.wait_for("the table again", Duration::from_secs(5), |s| {
        !s.contains("Enter or Esc closes") && row(s, "beta").is_some()
    });

    // Cancel asks first; `y` cancels beta.
    tmux.ok(&["send-keys", "-t", "dash", "j", "c"]);
    tmux.wait_for("the confirmation", Duration::from_secs(5), |s| {
        s.contains("Cancel beta? It becomes cancelled for good. y/n")
    });
    tmux.ok(&["send-keys", "-t", "dash", "y"]);
    tmux.wait_for("beta cancelled", Duration::from_secs(5), |s| {
        s.contains("beta: pending → cancelled")
    });
    assert_eq!(ws.status("beta"), "cancelled");

    // A review decided from the keys: `x` rejects with a reason, `a` approves.
    ok(&ws, &["task", "create", "gamma", "--title", "Third task"]);
    ws.to("gamma", "working");
    ws.handoff("gamma");
    ws.to("gamma", "agent-review");
    ws.review("gamma", "PASS");
    ws.to("gamma", "reviewing");
    tmux.wait_for("gamma in review", Duration::from_secs(5), |s| {
        row(s, "gamma").is_some_and(|r| r.contains("reviewing"))
    });
    tmux.ok(&["send-keys", "-t", "dash", "G"]);
    tmux.wait_for("the review beside the keys", Duration::from_secs(5), |s| {
        s.contains("review PASS") && s.contains("a approves · x rejects")
    });
    tmux.ok(&["send-keys", "-t", "dash", "x"]);
    tmux.ok(&["send-keys", "-t", "dash", "-l", "Cover the error path"]);
    tmux.wait_for("the reason typed", Duration::from_secs(5), |s| {
        s.contains("Reject gamma: what must change? Cover the error path")
    });
    tmux.ok(&["send-keys", "-t", "dash", "Enter"]);
    tmux.wait_for("gamma rejected", Duration::from_secs(5), |s| {
        s.contains("gamma: reviewing → working")
    });
    assert_eq!(ws.status("gamma"), "working");
    assert!(
        ws.json(&["prompt", "gamma"])["prompt"]
            .as_str()
            .unwrap()
            .contains("Cover the error path")
    );
    ws.add_section("gamma", "Handoff", "Covered.");
    ws.to("gamma", "agent-review");
    ws.review("gamma", "PASS");
    ws.to("gamma", "reviewing");
    tmux.wait_for("gamma in review again", Duration::from_secs(5), |s| {
        row(s, "gamma").is_some_and(|r| r.contains("reviewing"))
    });
    // A round reviewed while the question waits is not approved unseen: the answer
    // is of the task the screen showed when `a` was pressed.
    tmux.ok(&["send-keys", "-t", "dash", "a"]);
    tmux.wait_for("the approve question", Duration::from_secs(5), |s| {
        s.contains("Approve gamma? It becomes done")
    });
    ok(
        &ws,
        &["task", "reject", "gamma", "--reason", "one more thing"],
    );
    ws.add_section("gamma", "Handoff", "One more thing done.");
    ws.to("gamma", "agent-review");
    ws.review("gamma", "PASS");
    ws.to("gamma", "reviewing");
    tmux.ok(&["send-keys", "-t", "dash", "y"]);
    tmux.wait_for("the stale approve refused", Duration::from_secs(5), |s| {
        s.contains("gamma changed since you looked at it")
    });
    assert_eq!(ws.status("gamma"), "reviewing");
    tmux.ok(&["send-keys", "-t", "dash", "a"]);
    tmux.wait_for("the approve question", Duration::from_secs(5), |s| {
        s.contains("Approve gamma? It becomes done")
    });
    tmux.ok(&["send-keys", "-t", "dash", "y"]);
    tmux.wait_for("gamma approved", Duration::from_secs(5), |s| {
        s.contains("gamma: reviewing → done")
    });
    assert_eq!(ws.status("gamma"), "done");
    // The screen a person sees, kept for the record at two sizes.
    for (w, h) in [("160", "45"), ("80", "24")] {
        tmux.ok(&["resize-window", "-t", "dash", "-x", w, "-y", h]);
        let lines: usize = h.parse().unwrap();
        let s = tmux.wait_for_screen("the resized screen", Duration::from_secs(5), |s| {
            s.lines().count() == lines && s.contains("q quit")
        });
        if let Ok(dir) = std::env::var("WARDEN_SCREENS") {
            std::fs::write(format!("{dir}/dashboard-{w}x{h}.txt"), &s).unwrap();
        }
    }
    tmux.ok(&["resize-window", "-t", "dash", "-x", "100", "-y", "30"]);
    tmux.ok(&["send-keys", "-t", "dash", "g"]);

    // The filter narrows the table.
    tmux.ok(&["send-keys", "-t", "dash", "/", "alp", "Enter"]);
    tmux.wait_for("the filter", Duration::from_secs(5), |s| {
        row(s, "alpha").is_some() && row(s, "beta").is_none()
    });
    tmux.ok(&["send-keys", "-t", "dash", "Escape"]);

    // A resize to 80×24 redraws at the new size.
    tmux.ok(&["resize-window", "-t", "dash", "-x", "80", "-y", "24"]);
    tmux.wait_for("the 80×24 screen", Duration::from_secs(5), |s| {
        s.lines().count() == 24 && row(s, "beta").is_some() && s.contains("q quit")
    });

    // q leaves: exit 0, the normal screen back, canonical mode and echo on again.
    tmux.ok(&["send-keys", "-t", "dash", "q"]);
    tmux.wait_for("the shell after q", Duration::from_secs(5), |s| {
        s.contains("EXIT=") && s.contains("icanon")
    });
    let s = tmux.screen();
    assert!(s.contains("EXIT=0"), "the dashboard failed:\n{s}");
    assert!(
        s.contains("icanon echo") && !s.contains("-icanon") && !s.contains("-echo"),
        "raw mode was left on:\n{s}"
    );
    assert!(
        !s.contains("q quit"),
        "the dashboard is still on screen:\n{s}"
    );
    assert_eq!(
        tmux.ok(&["display-message", "-p", "-t", "dash", "#{alternate_on}"])
            .trim(),
        "0"
    );
}

#[test]
fn dashboard_refuses_without_a_terminal() {
    let ws = Workspace::new("dash-noterm");
    let o = ws.run(&["dashboard"]);
    assert_eq!(code(&o), 2, "{}", describe(&["dashboard"], &o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("error: warden dashboard needs an interactive terminal"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "nothing on stdout");
}
