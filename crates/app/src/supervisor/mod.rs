//! The supervisor (`warden run`): schedules ready tasks over the dependency DAG, takes a
//! lease on each, gives it a git worktree, runs the phases Warden runs itself, starts
//! agent sessions on every entry into `working` or `agent-review`, and respawns what
//! DESIGN 2.2 says it respawns. Session ends arrive through `warden task exited`, the
//! same path as every other report; the supervisor only reacts to the stored state.
//!
//! The loop lives here; [`leases`] claims and renews tasks, [`step`] runs one step of one
//! task on its own thread (each with its own store connection, so the loop never blocks),
//! and [`host`] is the `warden session-run` process that hosts a process session.

mod host;
mod leases;
mod step;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use warden_core::event::Actor;
use warden_core::model::{Task, TaskId};
use warden_core::tree::TreeIndex;
use warden_runner::git::Repo;
use warden_runner::{pipeline, session};
use warden_store::config;
use warden_store::{Engine, EngineError, Fence, StoreError, Workspace};

pub use host::{UNKNOWN_EXIT, session_run};
pub use leases::owner_id;
pub use step::{Action, next_action};

use host::{pid_file_alive, read_pid_file, starting};
use step::Step;

/// How sessions run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Child process groups; exit seen by a waiter the moment it happens.
    Process,
    /// tmux on a private socket under `.warden/`; exit reported by a pane-died hook.
    Tmux,
}

/// `warden run` options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Tasks worked on at once.
    pub max_parallel: usize,
    /// Return when nothing is runnable and no session is alive.
    pub until_idle: bool,
    /// Session mode.
    pub mode: Mode,
    /// The `warden` binary sessions report through (and find on their PATH).
    pub warden_exe: PathBuf,
    /// Lease lifetime; renewed at a third of it.
    pub lease_ttl: Duration,
}

/// What the supervisor tells its front end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEvent {
    /// A line for the log.
    Log(String),
    /// The set of tasks being worked on changed: `(id, status, what, since)`.
    Active(Vec<(String, String, String, Instant)>),
}

/// Step threads at once (each holds its own store connection).
const MAX_STEP_THREADS: usize = 8;

/// A step running on its own thread: its handle, what it does, and since when.
type Job = (JoinHandle<Result<(), EngineError>>, String, Instant);

/// A running supervisor.
pub struct Supervisor {
    eng: Engine,
    opts: Options,
    owner: String,
    repo: Option<Repo>,
    base: Option<String>,
    /// Per-task threads running phases.
    jobs: BTreeMap<TaskId, Job>,
    /// Tasks whose lease we hold, with its epoch (the fence of every write).
    leased: BTreeMap<TaskId, u64>,
    last_renew: Instant,
    stop: Arc<AtomicBool>,
    /// The 0600 file holding the store's secrets for Warden's calls from sessions.
    credentials: Option<PathBuf>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("owner", &self.owner)
            .finish()
    }
}

fn tmux_socket(ws: &Workspace) -> PathBuf {
    ws.dir.join("tmux.sock")
}

impl Supervisor {
    /// Opens the workspace for supervising. `stop` ends the loop when set.
    pub fn new(
        ws: Workspace,
        opts: Options,
        stop: Arc<AtomicBool>,
    ) -> Result<Supervisor, EngineError> {
        let eng = Engine::open(ws, Actor::Runner)?;
        // Sessions never see the store's secrets; Warden's calls from inside one read
        // them from this file instead (see `config::SECRET_VARS`).
        let credentials = config::write_credentials(&eng.ws.dir.join("credentials"))?;
        let repo = Repo::discover(&eng.ws.root).ok().flatten();
        let base = repo.as_ref().and_then(pipeline::base_branch);
        Ok(Supervisor {
            eng,
            opts,
            owner: owner_id(),
            repo,
            base,
            jobs: BTreeMap::new(),
            leased: BTreeMap::new(),
            last_renew: Instant::now(),
            stop,
            credentials,
        })
    }

    /// Runs until stopped (or idle, with `until_idle`).
    pub fn run(&mut self, on_event: &mut dyn FnMut(RunEvent)) -> Result<(), EngineError> {
        on_event(RunEvent::Log(match (&self.repo, &self.base) {
            (Some(r), Some(b)) => format!(
                "supervising {} (git: {}, base branch {b}; {} session(s) at once)",
                self.eng.ws.root.display(),
                r.top.display(),
                self.opts.max_parallel
            ),
            _ => format!(
                "supervising {} (no git repository: git phases are skipped)",
                self.eng.ws.root.display()
            ),
        }));
        let mut last_version = u64::MAX;
        let mut last_active: Vec<(String, String, String)> = Vec::new();
        let mut last_sweep = Instant::now();
        let mut sessions_alive = true;
        loop {
            if self.stop.load(Ordering::SeqCst) {
                on_event(RunEvent::Log(
                    "stopping: sessions keep running and are adopted by the next `warden run`"
                        .into(),
                ));
                self.release_all();
                return Ok(());
            }
            let finished = self.reap(on_event);
            let version = self.eng.store.data_version()?;
            // The sweep matters only while sessions run.
            let sweep_due = sessions_alive && last_sweep.elapsed() >= Duration::from_millis(250);
            if version != last_version || finished || sweep_due {
                last_version = version;
                // One read of the tasks per pass, shared by the sweep, the scheduler and
                // the display.
                let tasks = self.eng.tasks()?;
                if sweep_due {
                    last_sweep = Instant::now();
                    self.sweep(&tasks)?;
                }
                sessions_alive = tasks.iter().any(|t| t.live_session().is_some());
                let busy = self.tick(&tasks, on_event)?;
                let active: Vec<(String, String, String, Instant)> = self.active(&tasks);
                let key: Vec<(String, String, String)> = active
                    .iter()
                    .map(|(a, b, c, _)| (a.clone(), b.clone(), c.clone()))
                    .collect();
                if key != last_active {
                    last_active = key;
                    on_event(RunEvent::Active(active));
                }
                if self.opts.until_idle && !busy {
                    on_event(RunEvent::Log(
                        "idle: nothing runnable and no session alive".into(),
                    ));
                    self.release_all();
                    return Ok(());
                }
            }
            if self.last_renew.elapsed() >= self.opts.lease_ttl / 3 {
                self.renew();
            }
            // Sleep until another process commits (LISTEN/NOTIFY on PostgreSQL, a cheap
            // poll on SQLite), a step may have finished, or a sweep or renewal is due.
            let cap = if self.jobs.is_empty() {
                Duration::from_millis(500)
            } else {
                Duration::from_millis(50)
            };
            let timeout = cap
                .min((self.opts.lease_ttl / 3).saturating_sub(self.last_renew.elapsed()))
                .min(Duration::from_secs(2).saturating_sub(last_sweep.elapsed()))
                .max(Duration::from_millis(5));
            self.eng.store.wait_for_change(version, timeout)?;
        }
    }

    /// Tasks being worked on now, for the progress display.
    fn active(&self, tasks: &[Task]) -> Vec<(String, String, String, Instant)> {
        let mut out = Vec::new();
        for t in tasks {
            if let Some((_, what, since)) = self.jobs.get(t.id()) {
                out.push((
                    t.id().to_string(),
                    t.status().to_string(),
                    what.clone(),
                    *since,
                ));
            } else if let Some(s) = t.live_session() {
                let role = t
                    .sessions()
                    .iter()
                    .rev()
                    .find(|r| r.id == s)
                    .map(|r| r.role.to_string())
                    .unwrap_or_default();
                out.push((
                    t.id().to_string(),
                    t.status().to_string(),
                    format!("{role} session"),
                    self.session_since(t),
                ));
            }
        }
        out
    }

    /// Collects finished jobs and sessions; returns whether anything finished.
    fn reap(&mut self, on_event: &mut dyn FnMut(RunEvent)) -> bool {
        let mut any = false;
        let done: Vec<TaskId> = self
            .jobs
            .iter()
            .filter(|(_, (h, _, _))| h.is_finished())
            .map(|(id, _)| id.clone())
            .collect();
        for id in done {
            if let Some((h, what, _)) = self.jobs.remove(&id) {
                any = true;
                match h.join() {
                    Ok(Ok(())) => {}
                    Ok(Err(EngineError::Store(e @ StoreError::LeaseLost { .. }))) => {
                        // Not ours any more: forget it without releasing the new holder's.
                        self.leased.remove(&id);
                        on_event(RunEvent::Log(format!("{id}: {what}: {e}")));
                    }
                    Ok(Err(e)) => on_event(RunEvent::Log(format!(
                        "{id}: {what}: {}",
                        warden_core::failure::Failure::from(e).text()
                    ))),
                    Err(_) => on_event(RunEvent::Log(format!("{id}: {what}: the step panicked"))),
                }
            }
        }
        any
    }

    /// When the task's current session started, as far as this process knows.
    fn session_since(&self, t: &Task) -> Instant {
        let age = jiff::Timestamp::now().duration_since(t.updated_at());
        let age = Duration::try_from(age).unwrap_or_default();
        Instant::now().checked_sub(age).unwrap_or_else(Instant::now)
    }

    /// Safety net: reports dead tmux panes and dead process sessions this runner does not
    /// own (adopted after a restart); the receiving side is idempotent.
    fn sweep(&mut self, tasks: &[Task]) -> Result<(), EngineError> {
        let lease_now = self.eng.now();
        // A session under another runner's unexpired lease is that runner's to watch
        // (it may run on another machine); an expired lease, or one held by a dead
        // runner on this host, means the session is adopted here.
        let others: BTreeMap<TaskId, String> = self
            .eng
            .store
            .leases()?
            .into_iter()
            .filter(|l| l.owner != self.owner && l.expires_at > lease_now)
            .map(|l| (l.task, l.owner))
            .collect();
        let socket = tmux_socket(&self.eng.ws);
        let panes = if socket.exists() {
            // tmux 3.3 sometimes misses a pane's exit until another child of the server
            // exits; the sweep nudges it and reports what its hook may have missed.
            let exe = self.opts.warden_exe.clone();
            let root = self.eng.ws.root.clone();
            let _ = session::tmux_sweep(&socket, |p| {
                match (&p.task_id, &p.session_id, p.dead_status) {
                    (Some(t), Some(s), Some(code)) => {
                        session::report_exit(&exe, &root, t, s, code).is_ok()
                    }
                    _ => false,
                }
            });
            session::tmux_list(&socket).unwrap_or_default()
        } else {
            Vec::new()
        };
        let now = jiff::Timestamp::now();
        for t in tasks {
            let Some(s) = t.live_session() else { continue };
            // A session is recorded just before it starts: give it time to appear.
            let age = now.duration_since(t.updated_at());
            if age < jiff::SignedDuration::from_secs(3) {
                continue;
            }
            if let Some(o) = others.get(t.id())
                && !self.dead_here(o)
            {
                continue;
            }
            let dir = self.eng.ws.task_dir(t.id());
            let in_tmux = panes.iter().any(|p| p.session_id.as_deref() == Some(s));
            let process = matches!(read_pid_file(&dir), Some((ps, _, _)) if ps == s);
            if in_tmux || (process && pid_file_alive(&dir, s)) || starting(&dir, s) {
                continue;
            }
            // Neither a pane nor a live host process: the session ended unreported (its
            // host was killed, or the tmux server went away). Its outcome is unknown, so
            // it is not a success: the exit table counts it as a crash (or failed work).
            self.report_exit(t.id(), s, Some(UNKNOWN_EXIT));
        }
        Ok(())
    }

    fn report_exit(&self, id: &TaskId, session: &str, code: Option<i32>) {
        let mut cmd = std::process::Command::new(&self.opts.warden_exe);
        cmd.args(["task", "exited", id.as_str(), "--session", session])
            .env("WARDEN_DIR", &self.eng.ws.root)
            .env_remove("WARDEN_ROLE")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if let Some(c) = code {
            cmd.arg("--exit-code").arg(c.to_string());
        }
        let _ = cmd.status();
    }

    /// One scheduling pass. Returns whether anything is running or could still run.
    fn tick(
        &mut self,
        tasks: &[Task],
        on_event: &mut dyn FnMut(RunEvent),
    ) -> Result<bool, EngineError> {
        let idx = TreeIndex::new(tasks);
        let order: Vec<&Task> = idx.depth_first();
        let live = tasks.iter().filter(|t| t.live_session().is_some()).count();
        let mut busy = !self.jobs.is_empty() || live > 0;
        let slots = self
            .opts
            .max_parallel
            .saturating_sub(self.jobs.len() + live);
        let mut wanted: Vec<(&Task, Action)> = Vec::new();
        for t in order {
            if !idx.is_leaf(t.id()) {
                continue;
            }
            let id = t.id().clone();
            if t.status().is_terminal() {
                self.release(&id);
                continue;
            }
            if self.jobs.contains_key(&id) {
                continue;
            }
            if t.live_session().is_some() {
                // A session started by another process (or adopted): alive until reported.
                busy = true;
                continue;
            }
            let action = next_action(t, &idx, &self.eng.config.limits);
            let Some(action) = action else { continue };
            busy = true;
            wanted.push((t, action));
        }
        // Steps are short (a phase, a session start); a few threads at a time keep the
        // supervisor's memory flat however many sessions run.
        let slots = slots.min(MAX_STEP_THREADS.saturating_sub(self.jobs.len()));
        if slots == 0 || wanted.is_empty() {
            return Ok(busy);
        }
        let ids: Vec<TaskId> = wanted.iter().map(|(t, _)| t.id().clone()).collect();
        let claimed = self.claim(&ids, slots)?;
        for (t, action) in wanted {
            if !claimed.contains(t.id()) {
                continue;
            }
            on_event(RunEvent::Log(format!("{}: {}", t.id(), action.describe())));
            self.start(t, action)?;
        }
        Ok(busy)
    }

    fn start(&mut self, t: &Task, action: Action) -> Result<(), EngineError> {
        let id = t.id().clone();
        let ws = self.eng.ws.clone();
        let repo = self.repo.clone();
        let base = self.base.clone();
        let opts = self.opts.clone();
        let credentials = self.credentials.clone();
        let what = action.describe();
        let fence = self.leased.get(&id).map(|&epoch| Fence {
            task: id.clone(),
            owner: self.owner.clone(),
            epoch,
        });
        let handle = std::thread::spawn(move || -> Result<(), EngineError> {
            let mut app = crate::App::open(ws, Actor::Runner).map_err(EngineError::from)?;
            // Every write of this step is fenced by the lease it was started under.
            app.eng.fence = fence;
            let mut step = Step {
                app: &app,
                eng: &app.eng,
                repo: repo.as_ref(),
                base: base.as_deref(),
                opts: &opts,
                credentials: credentials.as_deref(),
            };
            step.perform(&id, action)
        });
        self.jobs
            .insert(t.id().clone(), (handle, what, Instant::now()));
        Ok(())
    }
}
