//! Tmux mode: sessions on a private tmux server (its socket under `.warden/`), kept after
//! their program ends (`remain-on-exit`) so a `pane-died` hook reports the end through
//! the same command as process mode; listing, capturing, killing and the sweep that
//! reports an end the hook missed.

#[allow(unused_imports)]
use super::*;

/// One pane on Warden's tmux server (one per session).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TmuxPane {
    /// The tmux session name (`warden-<session id>`, see [`tmux_session_name`]).
    pub name: String,
    /// The task, as recorded when the session was started.
    pub task_id: Option<String>,
    /// The Warden session id, as recorded when the session was started.
    pub session_id: Option<String>,
    /// The pane's process has exited (the pane stays because of `remain-on-exit`).
    pub dead: bool,
    /// For a dead pane: the exit code, 128 + signal, or 124 if it was expired. `None` while
    /// the pane runs, and also for a dead pane whose exit status tmux has not collected
    /// yet (see [`tmux_sweep`]).
    pub dead_status: Option<i32>,
    /// The pane's process id (also its process group id), while it runs.
    pub pid: Option<u32>,
    /// Why Warden ended it, when it did (a timeout, its output limit): the exit report's
    /// `--reason`.
    pub why: Option<String>,
    /// Its output limit (`limits.session_log_mib`) and the log's length when it started:
    /// what [`tmux_end_floods`] holds it to, whichever process started it.
    pub log_limit: Option<(u64, u64)>,
}

/// The tmux session name of one agent session: `warden-<session id>`, with `.` written as
/// `+` because tmux does not allow `.` in session names (ids never contain `+`). One name
/// per session, so a reviewer never waits for the name of its task's worker.
pub fn tmux_session_name(session_id: &str) -> String {
    format!("warden-{}", session_id.replace('.', "+"))
}

/// A target for a session's (only) window and pane; `=` asks for an exact name match,
/// where tmux would otherwise accept a prefix.
pub(crate) fn target(name: &str) -> String {
    format!("={name}:")
}

pub(crate) fn tmux_command(program: &OsStr, socket: &Path) -> Command {
    let mut c = Command::new(program);
    // `-f /dev/null`: Warden's server never reads the person's ~/.tmux.conf.
    c.arg("-f").arg("/dev/null").arg("-S").arg(socket);
    // The server's global environment, which every pane would inherit, is the
    // environment of the client that starts it: keep it to what tmux itself needs (its
    // run-shell hooks find `sh` on PATH; the locale tells it the terminal speaks UTF-8).
    // Each pane is given exactly its session's variables with `-e`.
    c.env_clear().stdin(Stdio::null());
    for (k, v) in std::env::vars_os() {
        let keep = k.to_str().is_some_and(|k| {
            matches!(
                k,
                "PATH" | "HOME" | "LANG" | "LC_ALL" | "LC_CTYPE" | "TMPDIR"
            )
        });
        if keep {
            c.env(k, v);
        }
    }
    c
}

/// Escapes a path for an argument tmux expands as a format (`new-session -c`): `#`
/// starts every format sequence, so doubling it leaves the path as it is.
pub(crate) fn format_escape_os(s: &OsStr) -> OsString {
    let mut v = Vec::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b == b'#' {
            v.push(b'#');
        }
        v.push(b);
    }
    OsString::from_vec(v)
}

/// Runs one tmux command line (possibly several commands joined by `;`), returning stdout;
/// `path` replaces the client's `PATH`.
pub(crate) fn run_tmux_with(
    program: &OsStr,
    socket: &Path,
    action: &'static str,
    args: &[OsString],
    path: Option<&OsStr>,
) -> Result<String, SessionError> {
    let mut cmd = tmux_command(program, socket);
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    let out = cmd.args(args).output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => SessionError::TmuxMissing,
        _ => SessionError::Tmux {
            action,
            message: e.to_string(),
            socket: socket.display().to_string(),
        },
    })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(SessionError::Tmux {
        action,
        message: stderr.trim().lines().last().unwrap_or("").to_owned(),
        socket: socket.display().to_string(),
    })
}

pub(crate) fn run_tmux(
    socket: &Path,
    action: &'static str,
    args: &[&str],
) -> Result<String, SessionError> {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    run_tmux_with(OsStr::new("tmux"), socket, action, &args, None)
}

/// tmux found no server, or reached one that was exiting because its last session went
/// ("server exited unexpectedly", or "no current target" from a server with no sessions).
pub(crate) fn no_server(e: &SessionError) -> bool {
    matches!(e, SessionError::Tmux { message, .. }
        if message.contains("no server running")
            || message.contains("error connecting")
            || message.contains("server exited unexpectedly")
            || message.contains("no current target"))
}

/// Protects an argument from tmux's command-line splitting, which treats any argument
/// ending in `;` as a command separator: `x;` is passed as `x\;`, which tmux turns back
/// into `x;`.
pub(crate) fn tmux_arg(s: impl AsRef<OsStr>) -> OsString {
    let b = s.as_ref().as_bytes();
    if b.last() == Some(&b';') {
        let mut v = b[..b.len() - 1].to_vec();
        v.extend_from_slice(b"\\;");
        OsString::from_vec(v)
    } else {
        s.as_ref().to_owned()
    }
}

/// Quotes a word for `sh`: single quotes, with `'` written as `'\''`.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Escapes text for a tmux format (`run-shell` and `pipe-pane` expand formats): `#`
/// starts every format sequence, so doubling it leaves the text literal.
pub(crate) fn format_escape(s: &str) -> String {
    s.replace('#', "##")
}

/// Quotes a string for tmux's command parser with double quotes, inside which `\`, `"`
/// and `$` (environment variables) are special.
pub(crate) fn tmux_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if matches!(c, '\\' | '"' | '$') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

pub(crate) fn utf8(p: &Path) -> Result<&str, SessionError> {
    p.to_str()
        .ok_or_else(|| SessionError::NonUtf8Path(p.to_path_buf()))
}

/// A shell word that survives tmux's format expansion and then `sh`.
pub(crate) fn shell_word(s: &str) -> String {
    format_escape(&sh_quote(s))
}

/// The `pane-died` hook: a tmux command that runs the exit report in the background with
/// the pane's exit code (124 if it was expired, 128 + signal if it was killed).
pub(crate) fn pane_died_hook(spec: &SessionSpec) -> Result<String, SessionError> {
    let log = shell_word(utf8(&spec.log_path)?);
    let script = format!(
        "c=#{{?@warden_timed_out,{TIMEOUT_EXIT_CODE},#{{pane_dead_status}}}}; \
         [ -n \"$c\" ] || c=$((128 + #{{?pane_dead_signal,#{{pane_dead_signal}},0}})); \
         s={sid}; w=\"#{{@warden_why}}\"; set --; [ -z \"$w\" ] || set -- --reason \"$w\"; \
         [ -z \"$(tail -c {before} {log} | head -c 1)\" ] || printf '\\n' >> {log}; \
         printf '%s\\n' \"--- session $s exited with code $c ---\" >> {log}; \
         n=0; while :; do \
         WARDEN_DIR={root} WARDEN_ACTOR=runner {creds}{exe} task exited {task} --session \"$s\" --exit-code \"$c\" \"$@\" \
         > /dev/null 2>> {log}; r=$?; [ $r -eq 4 ] && [ $n -lt 40 ] || break; n=$((n + 1)); sleep 1; done; \
         [ $r -eq 0 ] || printf '%s\\n' \"--- exit report failed with code $r ---\" >> {log}",
        sid = shell_word(&spec.session_id),
        // The byte before the pane's end marker: a line the output left open is ended
        // before the exit line (`$(…)` drops a newline, so a newline reads as empty).
        before = END_MARKER_OSC.len() + end_marker(&spec.session_id).len() + 2,
        root = shell_word(utf8(&spec.project_root)?),
        exe = shell_word(utf8(&spec.warden_exe)?),
        task = shell_word(&spec.task_id),
        creds = match spec.env.iter().rev().find(|(k, _)| k == CREDENTIALS_VAR) {
            Some((k, v)) => format!("{k}={} ", shell_word(v)),
            None => String::new(),
        },
    );
    Ok(format!("run-shell -b {}", tmux_quote(&script)))
}

/// What a pane runs: first the directory that says the session started (its spec's
/// `started_file`, when it names one: `mkdir`, which makes nothing else and follows no
/// link an agent may have planted there, where `> file` would truncate the link's
/// target), then, when its `stop_file` exists (the session was stopped before it
/// started), ends with 143 without the program, then forgets which tmux server it is in (`TMUX`, `TMUX_PANE`: an agent's own
/// `tmux` commands, a dev server started in a session or a `tmux kill-server` to clean
/// up, go to its user's server, not to Warden's, whose other panes are other tasks'
/// agents), then the program (its input redirected from a
/// file when there is one), then, before the pane ends, a wait until everything the program printed is in the log.
/// tmux 3.3 discards what a pane printed but tmux had not yet read when the pane's process
/// exits, so a program that printed its last lines and exited at once lost them from the
/// log (and from `peek`) on a loaded machine. The script prints an end marker (an OSC
/// sequence terminals and Warden's views ignore) after the program's output and exits
/// once the marker is in the log, or after 2 s, or at once when the pane is gone. It
/// catches HUP, INT and TERM (a handler, not an ignore, so the program keeps the default
/// actions): a TERM to the pane's group reaches the program, and the pane lives until
/// the program has ended, as when the program was the pane's process. The exit code is
/// the program's; one killed by signal N ends with 128 + N, the code Warden records for
/// a signal anyway.
const PANE_SCRIPT: &str = "trap : HUP INT TERM; l=$1 m=$2 i=$3 s=$4 k=$5; shift 5; \
    [ -z \"$s\" ] || mkdir \"$s\" 2>/dev/null; [ -n \"$k\" ] && [ -e \"$k\" ] && exit 143; \
    unset TMUX TMUX_PANE; if [ -n \"$i\" ]; then \"$@\" < \"$i\"; else \"$@\"; fi; c=$?; \
    printf '\\033]6973;%s\\007' \"$m\" || exit $c; n=0; \
    while [ $n -lt 200 ] && ! tail -c 512 \"$l\" 2>/dev/null | grep -qF \"$m\"; do \
    sleep 0.01; n=$((n + 1)); done; exit $c";

/// The variable only the pane's process is given (by `env`, before the pane's script),
/// not the tmux session: tmux gives a session's environment to every job it runs for the
/// session too (the `pane-died` hook's report, the output pipe, a window a person opens
/// in it), and what carries the session's id at its end is what the session left
/// running. Given to the hook's report, it had the supervisor's own report of the same
/// end stop the tmux server's process group (the hook's), and with it every other task's
/// pane.
const PANE_ONLY_VAR: &str = "WARDEN_SESSION";

/// The text a pane prints after its program's output (see [`PANE_SCRIPT`]).
fn end_marker(session_id: &str) -> String {
    format!("warden:output-ends:{session_id}")
}

/// Starts `spec.argv` in a detached tmux session named [`tmux_session_name`] on the private
/// `socket`, with `spec.cwd`, `spec.env` and `PATH` (the directory of `warden_exe` first).
/// The session keeps its dead pane (`remain-on-exit`), pipes its output to `spec.log_path`,
/// and reports its end from the `pane-died` hook. A dead session of the same name is
/// removed first; a live one is an error. The timeout is enforced by a detached thread
/// that calls [`tmux_expire`]. Returns the tmux session name.
pub fn start_tmux(socket: &Path, spec: &SessionSpec) -> Result<String, SessionError> {
    check_ids(spec)?;
    let spec = absolutize(spec);
    let socket = std::path::absolute(socket).unwrap_or_else(|_| socket.to_path_buf());
    let name = tmux_session_name(&spec.session_id);
    let sock_str = || socket.display().to_string();
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).map_err(|e| SessionError::Tmux {
            action: "socket directory",
            message: e.to_string(),
            socket: sock_str(),
        })?;
    }
    if let Some(old) = tmux_list(&socket)?.into_iter().find(|p| p.name == name) {
        if !old.dead {
            return Err(SessionError::TmuxSessionAlive {
                name,
                socket: sock_str(),
            });
        }
        tmux_remove(&socket, &name)?;
    }
    let hook = pane_died_hook(&spec)?;
    let pipe = format!("exec cat >> {}", shell_word(utf8(&spec.log_path)?));
    let mut log = append_log(&spec.log_path)?;
    writeln!(log, "{}", header(&spec)).map_err(|source| SessionError::Log {
        path: spec.log_path.clone(),
        source,
    })?;
    drop(log);
    let log_base = std::fs::metadata(&spec.log_path).map_or(0, |m| m.len());

    // One tmux invocation, commands joined by `;`: the server runs them back to back
    // before it handles the child's exit or reads its output, so even an instant exit
    // finds remain-on-exit, the hook and the output pipe in place.
    let t = target(&name);
    let mut args: Vec<OsString> = ["new-session", "-d", "-s", &name, "-x", "200", "-y", "50"]
        .iter()
        .map(OsString::from)
        .collect();
    args.push("-c".into());
    // tmux expands formats in -c: a `#{…}` in the path would name another directory
    // (the person's checkout, when it expands to nothing).
    args.push(tmux_arg(format_escape_os(spec.cwd.as_os_str())));
    let mut env_arg = |k: &str, v: &OsStr| {
        let mut kv = OsString::from(k);
        kv.push("=");
        kv.push(v);
        args.push("-e".into());
        args.push(tmux_arg(kv));
    };
    let mut pane_only = OsString::new();
    for (k, v) in spec.inherited_env() {
        if k == PANE_ONLY_VAR {
            pane_only = v;
        } else if k != "PATH"
            && k.to_str()
                .is_some_and(|k| !spec.env.iter().any(|(e, _)| e == k))
        {
            env_arg(&k.to_string_lossy(), &v);
        }
    }
    for (k, v) in &spec.env {
        if k == PANE_ONLY_VAR {
            pane_only = v.into();
        } else if k != "PATH" {
            env_arg(k, OsStr::new(v));
        }
    }
    env_arg("PATH", &session_path(&spec));
    // The pane runs a fixed script (see PANE_SCRIPT) with the log, the end marker, the
    // input file, the file it creates as it starts and the stop file as its first words
    // and the program as `"$@"`, so nothing of the program is parsed by a shell.
    args.push("--".into());
    if !pane_only.is_empty() {
        let mut kv = OsString::from(format!("{PANE_ONLY_VAR}="));
        kv.push(&pane_only);
        args.extend(["env".into(), tmux_arg(kv)]);
    }
    args.extend(["sh", "-c", PANE_SCRIPT, "sh"].map(OsString::from));
    args.push(tmux_arg(&spec.log_path));
    args.push(end_marker(&spec.session_id).into());
    args.push(spec.stdin.as_ref().map_or_else(OsString::new, tmux_arg));
    args.push(
        spec.started_file
            .as_ref()
            .map_or_else(OsString::new, tmux_arg),
    );
    args.push(spec.stop_file.as_ref().map_or_else(OsString::new, tmux_arg));
    args.extend(spec.argv.iter().map(tmux_arg));
    let (base, max) = (
        log_base.to_string(),
        spec.max_log_bytes
            .map(|m| m.to_string())
            .unwrap_or_default(),
    );
    for cmd in [
        vec!["set-option", "-t", &t, "remain-on-exit", "on"],
        vec!["set-option", "-t", &t, "@warden_task", &spec.task_id],
        vec!["set-option", "-t", &t, "@warden_session", &spec.session_id],
        // Kept on the pane, so a supervisor that adopts it holds it to the same limit.
        vec!["set-option", "-t", &t, "@warden_log_base", &base],
        vec!["set-option", "-t", &t, "@warden_log_max", &max],
        vec!["set-hook", "-t", &t, "pane-died", &hook],
        vec!["pipe-pane", "-o", "-t", &t, &pipe],
    ] {
        args.push(";".into());
        args.extend(cmd.into_iter().map(tmux_arg));
    }
    // tmux gives a new pane the PATH of the client that created it, whatever `-e` says.
    let path = session_path(&spec);
    let mut tries = 0;
    loop {
        match run_tmux_with(
            OsStr::new("tmux"),
            &socket,
            "new-session",
            &args,
            Some(&path),
        ) {
            // A server exiting as its last session went runs no command; the next try
            // starts a fresh one.
            Err(e) if no_server(&e) && tries < 3 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            other => break other.map(drop)?,
        };
    }

    // Durations this long mean "no timeout"; without a log limit, no thread is needed.
    let endless = spec.timeout >= Duration::from_secs(100 * 365 * 24 * 3600);
    if !endless || spec.max_log_bytes.is_some() {
        let (socket, name2) = (socket.clone(), name.clone());
        let _ = std::thread::Builder::new()
            .name(format!("warden-tmux-timer-{}", spec.session_id))
            .spawn(move || {
                let current = || {
                    tmux_list(&socket).ok().is_some_and(|ps| {
                        ps.into_iter().any(|p| {
                            p.name == name2
                                && !p.dead
                                && p.session_id.as_deref() == Some(&spec.session_id)
                        })
                    })
                };
                // Nothing tells this thread of the pane's end (its hook runs in tmux):
                // it watches for the timeout and the log, with a channel that never fires.
                let (_never, quiet) = std::sync::mpsc::channel::<()>();
                // The pane's process, whose end ends the watch (none found: the watch
                // runs to the timeout, as before).
                let pane = tmux_list(&socket).ok().and_then(|ps| {
                    ps.into_iter().find(|p| {
                        p.name == name2 && p.session_id.as_deref() == Some(&spec.session_id)
                    })
                });
                let ended = match pane.as_ref().and_then(|p| p.pid.filter(|_| !p.dead)) {
                    Some(pid) => match rustix::process::Pid::from_raw(pid as i32).map(|p| {
                        rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
                    }) {
                        Some(Ok(fd)) => Some(fd),
                        // Over before it was looked at: nothing to watch.
                        Some(Err(rustix::io::Errno::SRCH)) => return,
                        _ => None,
                    },
                    None if pane.is_some() => return,
                    None => None,
                };
                match watch(
                    &quiet,
                    spec.timeout,
                    &spec.log_path,
                    spec.max_log_bytes,
                    ended.as_ref(),
                ) {
                    Watched::TimedOut => {
                        if current() && tmux_expire(&socket, &name2, spec.timeout).is_ok() {
                            note(&spec.log_path, &timed_out_note(&spec));
                        }
                    }
                    Watched::LogFull => {
                        if current() && tmux_end(&socket, &name2, &log_full_reason(&spec)).is_ok() {
                            note(&spec.log_path, &log_full_note(&spec));
                        }
                    }
                    Watched::Exited => {}
                }
            });
    }
    Ok(name)
}

pub(crate) const LIST_FORMAT: &str = "#{session_name}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}\t#{@warden_timed_out}\t#{@warden_task}\t#{@warden_session}\t#{@warden_swept}\t#{pane_pid}\t#{@warden_log_base}\t#{@warden_log_max}\t#{@warden_why}";

/// A listed pane and whether [`tmux_sweep`] already reported it.
pub(crate) fn list_panes(socket: &Path) -> Result<Vec<(TmuxPane, bool)>, SessionError> {
    let out = match run_tmux(
        socket,
        "list-panes",
        &["list-panes", "-a", "-F", LIST_FORMAT],
    ) {
        Ok(out) => out,
        Err(e) if no_server(&e) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Ok(out
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let [
                name,
                dead,
                status,
                signal,
                timed_out,
                task,
                session,
                swept,
                pid,
                log_base,
                log_max,
                why,
            ] = f[..]
            else {
                return None;
            };
            let dead = dead == "1";
            let collected = !status.is_empty() || !signal.is_empty();
            let dead_status = (dead && collected).then(|| {
                if !timed_out.is_empty() {
                    TIMEOUT_EXIT_CODE
                } else if let Ok(c) = status.parse() {
                    c
                } else {
                    128 + signal.parse::<i32>().unwrap_or(0)
                }
            });
            let pane = TmuxPane {
                name: name.to_owned(),
                task_id: some(task),
                session_id: some(session),
                dead,
                dead_status,
                pid: if dead { None } else { pid.parse().ok() },
                why: some(why),
                log_limit: log_max.parse().ok().zip(log_base.parse().ok()),
            };
            Some((pane, !swept.is_empty()))
        })
        .collect())
}

/// Ends every running pane of `panes` (as [`tmux_list`] gave them) whose session wrote
/// more than its output limit to its log (`log_of(task, session)`), as the timer thread
/// of the process that started it does: a supervisor that restarted has no such thread
/// for the panes it adopted. Returns the names of the panes it ended.
pub fn tmux_end_floods(
    socket: &Path,
    panes: &[TmuxPane],
    log_of: impl Fn(&str, &str) -> Option<PathBuf>,
) -> Vec<String> {
    let mut ended = Vec::new();
    for pane in panes {
        // A pane Warden already ends (its `@warden_why` is set) is left to that.
        let (Some((max, base)), Some(task), Some(session), false, None) = (
            pane.log_limit,
            &pane.task_id,
            &pane.session_id,
            pane.dead,
            &pane.why,
        ) else {
            continue;
        };
        let Some(log) = log_of(task, session) else {
            continue;
        };
        let len = std::fs::metadata(&log).map_or(0, |m| m.len());
        if len.saturating_sub(base) > max
            && tmux_end(socket, &pane.name, &log_full_reason_of(max)).is_ok()
        {
            note(&log, &log_full_note_of(session, max));
            ended.push(pane.name.clone());
        }
    }
    ended
}

/// Every pane on the server, sorted by session name. No server running means no panes.
pub fn tmux_list(socket: &Path) -> Result<Vec<TmuxPane>, SessionError> {
    let mut panes: Vec<TmuxPane> = list_panes(socket)?.into_iter().map(|(p, _)| p).collect();
    panes.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(panes)
}

/// The last `lines` lines of a session's screen and scrollback (works on a dead pane too),
/// without trailing blank lines.
pub fn tmux_capture(socket: &Path, name: &str, lines: usize) -> Result<String, SessionError> {
    let start = format!("-{lines}");
    let out = run_tmux(
        socket,
        "capture-pane",
        &[
            "capture-pane",
            "-p",
            "-J",
            "-t",
            &target(name),
            "-S",
            &start,
        ],
    )?;
    Ok(out.trim_end().to_owned())
}

/// Kills a live session's processes (its pane's process group) with SIGKILL. The pane
/// stays, dead, so the hook reports the end (137) and [`tmux_capture`] still works; a
/// session that is already dead or gone is left alone.
pub fn tmux_kill(socket: &Path, name: &str) -> Result<(), SessionError> {
    if let Some(pid) = tmux_list(socket)?
        .into_iter()
        .find(|p| p.name == name)
        .and_then(|p| p.pid)
    {
        // tmux starts each pane as a session leader, so its pid is its process group; the
        // pane itself is killed too in case it has not reached setsid yet.
        kill_group(pid);
        if let Some(p) = Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
    Ok(())
}

/// Asks a live session to stop: SIGTERM to its pane's process group. The pane stays,
/// dead, and the hook reports the end (143); [`tmux_kill`] follows if it does not end.
pub fn tmux_terminate(socket: &Path, name: &str) -> Result<(), SessionError> {
    if let Some(pid) = tmux_list(socket)?
        .into_iter()
        .find(|p| p.name == name)
        .and_then(|p| p.pid)
    {
        crate::check::term_group(pid);
    }
    Ok(())
}

/// Ends a live session for running past its timeout: marks it so its exit is reported as
/// 124, then kills it like [`tmux_kill`].
pub fn tmux_expire(socket: &Path, name: &str, timeout: Duration) -> Result<(), SessionError> {
    run_tmux(
        socket,
        "set-option",
        &["set-option", "-t", &target(name), "@warden_timed_out", "1"],
    )?;
    tmux_end(socket, name, &timed_out_reason(timeout))
}

/// Kills a live session like [`tmux_kill`], after naming `why` for its exit report (the
/// pane-died hook passes it as `--reason`; it must not hold `"`, `$`, `` ` `` or `\`).
pub(crate) fn tmux_end(socket: &Path, name: &str, why: &str) -> Result<(), SessionError> {
    run_tmux(
        socket,
        "set-option",
        &["set-option", "-t", &target(name), "@warden_why", why],
    )?;
    tmux_kill(socket, name)
}

/// Removes a session from the server (`kill-session`), dead or alive. No exit is reported
/// for it: use it for dead sessions, or after [`tmux_kill`] has been reported. A session
/// that does not exist is not an error.
pub fn tmux_remove(socket: &Path, name: &str) -> Result<(), SessionError> {
    match run_tmux(
        socket,
        "kill-session",
        &["kill-session", "-t", &target(name)],
    ) {
        Err(e) if no_server(&e) => Ok(()),
        Err(SessionError::Tmux { message, .. })
            if message.contains("can't find") || message.contains("no such") =>
        {
            Ok(())
        }
        other => other.map(|_| ()),
    }
}

/// Ends Warden's tmux server (with whatever panes it still has).
pub fn tmux_kill_server(socket: &Path) -> Result<(), SessionError> {
    match run_tmux(socket, "kill-server", &["kill-server"]) {
        Err(e) if no_server(&e) => Ok(()),
        other => other.map(|_| ()),
    }
}

/// The safety net for `pane-died` hooks; the supervisor calls it every ~250 ms in tmux mode.
///
/// tmux 3.3a sometimes sees a pane's terminal close but misses the SIGCHLD of its process:
/// the pane shows as dead with no exit status, and the hook does not fire until some other
/// child of the server exits. When any dead pane lacks its status, the sweep makes the
/// server run `true`; that child's exit makes tmux collect every pending status, and the
/// hooks fire as usual.
///
/// Then it calls `report` for every dead pane with a status that the sweep has not reported
/// yet, sorted by name, and marks the pane when `report` returns true (false retries on the
/// next sweep). This covers hooks that never ran (a failed report, a tmux restart). The
/// receiving side is idempotent, so also reporting a pane whose hook did fire is harmless;
/// [`report_exit`] is the usual `report`. Returns how many panes were reported.
pub fn tmux_sweep(
    socket: &Path,
    mut report: impl FnMut(&TmuxPane) -> bool,
) -> Result<usize, SessionError> {
    let mut panes = list_panes(socket)?;
    if panes.iter().any(|(p, _)| p.dead && p.dead_status.is_none()) {
        run_tmux(socket, "run-shell", &["run-shell", "true"])?;
        panes = list_panes(socket)?;
    }
    panes.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    let mut reported = 0;
    for (pane, swept) in panes {
        if pane.dead_status.is_none() || swept || !report(&pane) {
            continue;
        }
        run_tmux(
            socket,
            "set-option",
            &[
                "set-option",
                "-t",
                &target(&pane.name),
                "@warden_swept",
                "1",
            ],
        )?;
        reported += 1;
    }
    Ok(reported)
}
