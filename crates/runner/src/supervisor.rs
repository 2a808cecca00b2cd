//! The supervisor (`warden run`): schedules ready tasks over the dependency DAG, takes a
//! lease on each, gives it a git worktree, runs the phases Warden runs itself, starts
//! agent sessions on every entry into `working` or `agent-review`, and respawns what
//! DESIGN 2.2 says it respawns. Session ends arrive through `warden task exited`, the
//! same path as every other report; the supervisor only reacts to the stored state.
//!
//! Long steps (phases, checks, merges) run on one thread per task, each with its own
//! engine (its own store connection); the main loop never blocks on them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use warden_core::event::Actor;
use warden_core::model::{Phase, PhaseStatus, Role, Status, Task, TaskId, WorkSpec, WorkflowKind};
use warden_core::ops::{self, TransitionInput};
use warden_core::tree::TreeIndex;
use warden_store::config;
use warden_store::engine::deps_done;
use warden_store::{Decision, Engine, EngineError, Fence, StoreError, Workspace, Written};

use crate::git::{self, Repo};
use crate::pipeline::{self, PhaseResult};
use crate::session::{self, SessionSpec};

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

/// This runner's name in leases: `host:pid:start`, the start time (in microseconds)
/// telling apart runners on machines (containers) that share a host name and pid.
pub fn owner_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into());
    let start = jiff::Timestamp::now().as_microsecond();
    format!("{host}:{}:{start:x}", std::process::id())
}

/// The host and pid of a lease owner named by [`owner_id`] (or the older `host:pid`).
fn owner_host_pid(owner: &str) -> Option<(&str, u32)> {
    let parts: Vec<&str> = owner.split(':').collect();
    match parts[..] {
        [h, p] | [h, p, _] => Some((h, p.parse().ok()?)),
        _ => None,
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
                    Ok(Err(e)) => on_event(RunEvent::Log(format!("{id}: {what}: {}", e.message()))),
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

    fn renew(&mut self) {
        self.last_renew = Instant::now();
        let now = self.eng.now();
        for id in self.leased.keys().cloned().collect::<Vec<_>>() {
            match self
                .eng
                .store
                .acquire_lease(&id, &self.owner, now, self.opts.lease_ttl)
            {
                // Another runner took it over: drop the task (its step's next write is
                // refused by the fence).
                Ok(None) => {
                    self.leased.remove(&id);
                }
                Ok(Some(l)) => {
                    self.leased.insert(id, l.epoch);
                }
                Err(_) => {}
            }
        }
    }

    fn release_all(&mut self) {
        for id in std::mem::take(&mut self.leased).into_keys() {
            let _ = self.eng.store.release_lease(&id, &self.owner);
        }
        self.release_abandoned();
    }

    /// Releases the leases other runners left behind: held by a runner on this host whose
    /// process is gone, or lapsed. A runner killed between finishing a task and releasing
    /// its lease would otherwise hold that lease for ever, since a finished task is never
    /// claimed again. Each release names the holder, so a lease renewed or taken over
    /// meanwhile is left alone.
    fn release_abandoned(&self) {
        let now = self.eng.now();
        let Ok(leases) = self.eng.store.leases() else {
            return;
        };
        for l in leases {
            if l.owner != self.owner && (self.dead_here(&l.owner) || l.expires_at <= now) {
                let _ = self.eng.store.release_lease(&l.task, &l.owner);
            }
        }
    }

    /// Is this lease owner a runner on this host whose process is gone? It will never
    /// renew, so its tasks are taken over at once instead of after the expiry.
    fn dead_here(&self, owner: &str) -> bool {
        let host = owner_host_pid(&self.owner).map(|(h, _)| h);
        matches!(owner_host_pid(owner), Some((h, pid)) if Some(h) == host && !alive(pid))
    }

    /// Claims leases on up to `max` of `wanted` (in order) that nobody else holds. Tasks
    /// already ours come first; the rest are claimed in one store call (`FOR UPDATE SKIP
    /// LOCKED` on PostgreSQL, so runners never wait on each other's candidates); then
    /// tasks held by a dead runner on this host are taken over.
    fn claim(&mut self, wanted: &[TaskId], max: usize) -> Result<Vec<TaskId>, EngineError> {
        let mut got: Vec<TaskId> = wanted
            .iter()
            .filter(|id| self.leased.contains_key(*id))
            .take(max)
            .cloned()
            .collect();
        let rest: Vec<TaskId> = wanted
            .iter()
            .filter(|id| !self.leased.contains_key(*id))
            .cloned()
            .collect();
        if got.len() >= max || rest.is_empty() {
            return Ok(got);
        }
        let now = self.eng.now();
        let ttl = self.opts.lease_ttl;
        let claimed = self
            .eng
            .store
            .claim(&rest, &self.owner, now, ttl, max - got.len())?;
        for l in claimed {
            self.leased.insert(l.task.clone(), l.epoch);
            got.push(l.task);
        }
        if got.len() < max {
            let held: BTreeMap<TaskId, String> = self
                .eng
                .store
                .leases()?
                .into_iter()
                .map(|l| (l.task, l.owner))
                .collect();
            for id in &rest {
                if got.len() >= max {
                    break;
                }
                if got.contains(id) {
                    continue;
                }
                if let Some(o) = held.get(id)
                    && o != &self.owner
                    && self.dead_here(o)
                {
                    self.eng.store.release_lease(id, o)?;
                    if let Some(l) = self.eng.store.acquire_lease(id, &self.owner, now, ttl)? {
                        self.leased.insert(id.clone(), l.epoch);
                        got.push(id.clone());
                    }
                }
            }
        }
        // Back in the scheduling order.
        Ok(wanted
            .iter()
            .filter(|id| got.contains(id))
            .cloned()
            .collect())
    }

    fn release(&mut self, id: &TaskId) {
        if self.leased.remove(id).is_some() {
            let _ = self.eng.store.release_lease(id, &self.owner);
        }
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
            let action = next_action(t, tasks, &self.eng.config.limits);
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
            let mut eng = Engine::open(ws, Actor::Runner)?;
            // Every write of this step is fenced by the lease it was started under.
            eng.fence = fence;
            let mut step = Step {
                eng: &eng,
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

/// What the supervisor does next for a task, decided from its stored state alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `pending → working` and the pipeline.
    Start,
    /// Run the pipeline on from the first phase that has not succeeded.
    Resume,
    /// Start a session for the current status entry.
    Session(Role),
}

impl Action {
    fn describe(&self) -> String {
        match self {
            Action::Start => "starting".into(),
            Action::Resume => "running phases".into(),
            Action::Session(r) => format!("starting the {r}"),
        }
    }
}

/// Has the current status entry had a session already?
fn had_session(t: &Task) -> bool {
    t.sessions().iter().any(|s| s.entry == t.entry())
}

/// The scheduling rules (DESIGN 2.2 and 2.4) as one function of the stored state.
pub fn next_action(t: &Task, all: &[Task], limits: &warden_core::model::Limits) -> Option<Action> {
    match t.status() {
        Status::Pending if deps_done(t, all) => Some(Action::Start),
        Status::Pending => None,
        // A direct task without a session is always resumed: after a retry, a finished
        // work session, a charged failure, or a runner crash.
        Status::Working if t.spec.workflow == WorkflowKind::Direct => Some(Action::Resume),
        Status::Working => {
            if t.respawn_requested() {
                Some(Action::Session(Role::Worker))
            } else if had_session(t) {
                // A crashed worker waits for `task respawn`.
                None
            } else {
                Some(Action::Resume)
            }
        }
        Status::AgentReview => {
            let crashed_below =
                t.is_dead() && t.crash_count() > 0 && t.crash_count() < limits.crash_threshold;
            if t.respawn_requested() || !had_session(t) || crashed_below {
                Some(Action::Session(Role::Reviewer))
            } else {
                None
            }
        }
        Status::Clarification | Status::Stuck if t.respawn_requested() => {
            Some(Action::Session(Role::Worker))
        }
        _ => None,
    }
}

/// One step of one task, on its own thread.
struct Step<'a> {
    eng: &'a Engine,
    repo: Option<&'a Repo>,
    base: Option<&'a str>,
    opts: &'a Options,
    credentials: Option<&'a std::path::Path>,
}

impl Step<'_> {
    fn shown(&self, id: &TaskId) -> String {
        self.eng.task_file_shown(id)
    }

    fn write(
        &self,
        id: &TaskId,
        decide: impl FnMut(&Task, &warden_store::taskfile::Doc) -> Result<Decision, EngineError>,
    ) -> Result<Option<Task>, EngineError> {
        match self.eng.write_task(id, None, decide)? {
            Written::Done(c, _) => Ok(c.after.clone()),
            Written::Replayed(_) => Ok(None),
        }
    }

    fn record_phase(&self, id: &TaskId, r: &PhaseResult) -> Result<Task, EngineError> {
        let shown = self.shown(id);
        let t = self.write(id, |t, _| {
            Ok(Decision::retryable(ops::phase(
                t,
                r.phase,
                r.status,
                r.detail.clone(),
                &self.eng.ctx(&shown),
            )?))
        })?;
        t.ok_or_else(|| EngineError::NotFound(id.clone()))
    }

    fn perform(&mut self, id: &TaskId, action: Action) -> Result<(), EngineError> {
        let shown = self.shown(id);
        if action == Action::Start {
            self.write(id, |t, doc| {
                let input = TransitionInput {
                    artifacts: doc.artifacts.clone(),
                    reason: Some("scheduled".into()),
                    ..Default::default()
                };
                Ok(Decision::retryable(ops::transition(
                    t,
                    Status::Working,
                    &input,
                    &self.eng.ctx(&shown),
                )?))
            })?;
        }
        let t = self.eng.get(id)?;
        if t.status().is_terminal() {
            return Ok(());
        }
        self.ensure_worktree(&t)?;
        match action {
            Action::Session(role) => self.spawn(&t, role, None, None),
            Action::Start | Action::Resume => self.pipeline(id),
        }
    }

    /// Creates the task's worktree (on `warden/<id>` from the base branch) and links
    /// TASK.md into it. Outside git, work runs in the project directory.
    fn ensure_worktree(&self, t: &Task) -> Result<(), EngineError> {
        let (Some(repo), Some(base)) = (self.repo, self.base) else {
            return Ok(());
        };
        let wt = self.eng.ws.worktree(t.id());
        let other = |e: git::GitError| EngineError::Other {
            code: 5,
            message: format!("{}: cannot prepare the worktree: {e}", t.id()),
        };
        repo.ensure_worktree(&wt, &t.branch(), base)
            .map_err(other)?;
        git::link_task_file(&wt, &self.eng.ws.task_file(t.id())).map_err(other)?;
        Ok(())
    }

    /// Runs the phases Warden runs itself, from the first that has not succeeded, and
    /// starts the agent session when the work is an agent.
    fn pipeline(&mut self, id: &TaskId) -> Result<(), EngineError> {
        loop {
            let t = self.eng.get(id)?;
            if t.status() != Status::Working {
                return Ok(());
            }
            let done = |p: Phase| {
                matches!(
                    t.phases().get(p),
                    PhaseStatus::Success | PhaseStatus::Skipped
                )
            };
            let next = if t.spec.workflow == WorkflowKind::Review {
                // The worker is the rest of a review task's pipeline: it commits and runs
                // the postchecks through `task complete`; merge-ri comes with `done`.
                [Phase::MergeFi, Phase::Prechecks]
                    .into_iter()
                    .find(|p| !done(*p))
                    .or(Some(Phase::Work))
            } else {
                Phase::ALL.iter().copied().find(|p| !done(*p))
            };
            let Some(phase) = next else {
                return self.finish(&t);
            };
            let result = match phase {
                Phase::MergeFi => pipeline::merge_fi(self.eng, &t),
                Phase::Prechecks => pipeline::prechecks(self.eng, &t),
                // The work is a session — the agent, or the shell or process command — whose
                // end arrives through `task exited`; the next pass continues from there.
                Phase::Work => {
                    let argv = match &t.spec.spec.work {
                        Some(WorkSpec::Shell(line)) => {
                            Some(vec!["sh".to_owned(), "-c".to_owned(), line.clone()])
                        }
                        Some(WorkSpec::Process(argv)) => Some(argv.clone()),
                        _ => None,
                    };
                    return self.spawn(&t, Role::Worker, None, argv);
                }
                // Commit, postchecks and merge-ri run inside the transition to done.
                Phase::Commit | Phase::Postchecks | Phase::MergeRi => return self.finish(&t),
            };
            if result.status == PhaseStatus::Failed {
                return self.failed(&t, result);
            }
            self.record_phase(id, &result)?;
        }
    }

    /// A phase failed: one automatic heal for agent work, else an attempt is charged and
    /// the next pass runs again from the failed phase (or the task is stuck).
    fn failed(&mut self, t: &Task, r: PhaseResult) -> Result<(), EngineError> {
        let shown = self.shown(t.id());
        let detail = r.detail.clone().unwrap_or_default();
        if t.work_is_agent() && !t.auto_heal().contains(&r.phase) {
            let healed = self.write(t.id(), |t, _| {
                let ctx = self.eng.ctx(&shown);
                let Some(heal) = ops::auto_heal(t, r.phase, &ctx)? else {
                    return Err(EngineError::Other {
                        code: 1,
                        message: "heal already used".into(),
                    });
                };
                let kinds: Vec<_> = heal.events.into_iter().map(|e| e.kind).collect();
                let mut all = vec![warden_core::event::EventKind::PhaseChanged {
                    phase: r.phase,
                    status: PhaseStatus::Pending,
                    detail: r.detail.clone(),
                }];
                all.extend(kinds);
                Ok(Decision::retryable(ops::record(t, all, &ctx)?))
            })?;
            if let Some(t) = healed {
                let note = format!(
                    "The {} phase failed. Fix the cause, then finish the task as usual. Its output ended with:\n{}",
                    r.phase,
                    crate::check::tail(&detail, crate::check::TAIL_CHARS)
                );
                return self.spawn(&t, Role::Worker, Some(&note), None);
            }
            return Ok(());
        }
        self.write(t.id(), |t, _| {
            Ok(Decision::retryable(ops::attempt_failed(
                t,
                r.phase,
                &detail,
                &self.eng.ctx(&shown),
            )?))
        })?;
        Ok(())
    }

    /// The end of a `direct` task's pipeline: commit, postchecks and merge-ri inside the
    /// transition to done. A review task's worker finishes with `task complete` instead.
    fn finish(&mut self, t: &Task) -> Result<(), EngineError> {
        if t.spec.workflow != WorkflowKind::Direct {
            return Ok(());
        }
        let shown = self.shown(t.id());
        let mut outcome = None;
        self.write(t.id(), |t, doc| {
            let ctx = self.eng.ctx(&shown);
            let (needs, _) = ops::check_transition(t, Status::Done, &doc.artifacts, &ctx)?;
            let mut input = TransitionInput {
                artifacts: doc.artifacts.clone(),
                reason: Some("guard".into()),
                ..Default::default()
            };
            let ran = pipeline::prepare_transition(self.eng, t, needs, &mut input);
            let change = ops::transition(t, Status::Done, &input, &ctx);
            if let Err(ops::Refusal::PhaseFailed { phase, detail, .. }) = &change {
                outcome = Some((*phase, detail.clone()));
                return Err(EngineError::Other {
                    code: 1,
                    message: detail.clone(),
                });
            }
            Ok(Decision {
                change: change?,
                retryable: !ran,
                memory: None,
            })
        })
        .or_else(|e| match &outcome {
            // A failed commit or merge is a failed attempt of that phase.
            Some((phase, detail)) => {
                let t = self.eng.get(t.id())?;
                self.failed(
                    &t,
                    PhaseResult {
                        phase: *phase,
                        status: PhaseStatus::Failed,
                        detail: Some(detail.clone()),
                    },
                )
                .map(|_| None)
            }
            None => Err(e),
        })?;
        Ok(())
    }

    /// Starts an agent session for the task's current status entry and records it.
    fn spawn(
        &mut self,
        t: &Task,
        role: Role,
        extra: Option<&str>,
        command: Option<Vec<String>>,
    ) -> Result<(), EngineError> {
        let shown = self.shown(t.id());
        let session_id = format!("{}-{}-{}", t.id(), role, t.sessions().len() + 1);
        let dir = self.eng.ws.task_dir(t.id());
        let cwd = pipeline::task_cwd(self.eng, t);
        let argv: Vec<String> = match command {
            // A shell or process work phase runs as it is, never through a template.
            Some(argv) => argv,
            None => {
                let prompt = self.eng.prompt(t, extra)?;
                let prompt_file = dir.join(format!("prompt-{role}.md"));
                warden_store::files::write_atomic(&prompt_file, prompt.as_bytes())?;
                self.eng
                    .config
                    .agent
                    .command
                    .iter()
                    .map(|a| {
                        a.replace("{prompt_file}", &prompt_file.display().to_string())
                            .replace("{task_id}", t.id().as_str())
                            .replace("{worktree}", &cwd.display().to_string())
                            .replace("{role}", role.as_str())
                            .replace("{prompt}", &prompt)
                    })
                    .collect()
            }
        };
        let mut env: Vec<(String, String)> = pipeline::task_env(self.eng, t)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        env.push(("WARDEN_ROLE".into(), role.as_str().into()));
        env.push(("WARDEN_SESSION".into(), session_id.clone()));
        if let Some(file) = self.credentials {
            env.push((config::CREDENTIALS_VAR.into(), file.display().to_string()));
        }
        let spec = SessionSpec {
            task_id: t.id().to_string(),
            session_id: session_id.clone(),
            argv,
            cwd,
            env,
            log_path: self.eng.ws.output_log(t.id()),
            warden_exe: self.opts.warden_exe.clone(),
            project_root: self.eng.ws.root.clone(),
            timeout: Duration::from_secs(self.eng.config.limits.phase_timeout_s),
        };
        // Record the session before it can end, so its report is never "unknown".
        let recorded = self.write(t.id(), |t, _| {
            let ctx = self.eng.ctx(&shown);
            let mut kinds = Vec::new();
            if t.spec.workflow == WorkflowKind::Direct
                || t.phases().get(Phase::Work) == PhaseStatus::Pending
            {
                kinds.push(warden_core::event::EventKind::PhaseChanged {
                    phase: Phase::Work,
                    status: PhaseStatus::Running,
                    detail: None,
                });
            }
            let ch = ops::spawned(t, &session_id, role, &ctx)?;
            Ok(Decision::retryable(ch.prepend(kinds, &ctx)?))
        })?;
        if recorded.is_none() {
            return Ok(());
        }
        let started = match self.opts.mode {
            Mode::Process => self.start_wrapped(&dir, &spec),
            Mode::Tmux => session::start_tmux(&tmux_socket(&self.eng.ws), &spec)
                .map(|_| ())
                .map_err(|e| e.to_string()),
        };
        if let Err(e) = started {
            // The session never started: report its end at once (a crash by the table).
            let report = warden_core::exit::ExitReport {
                session: Some(session_id.clone()),
                exit_code: Some(127),
            };
            self.write(t.id(), |t, doc| {
                let input = TransitionInput {
                    artifacts: doc.artifacts.clone(),
                    ..Default::default()
                };
                Ok(Decision::retryable(ops::exited(
                    t,
                    &report,
                    &input,
                    &self.eng.ctx(&shown),
                )?))
            })?;
            return Err(EngineError::Other {
                code: 5,
                message: format!("{}: the {role} session could not start: {e}", t.id()),
            });
        }
        Ok(())
    }

    /// Process mode: the session runs under `warden session-run`, a small process of its
    /// own that waits for the session and reports its end. It outlives this supervisor,
    /// so a session's end is reported even if the supervisor is killed; its pid file
    /// lets a restarted supervisor see the session is still alive.
    fn start_wrapped(&self, dir: &std::path::Path, spec: &SessionSpec) -> Result<(), String> {
        let file = dir.join("session.json");
        let json =
            serde_json::to_vec_pretty(&WrappedSpec::from(spec)).map_err(|e| e.to_string())?;
        warden_store::files::write_atomic(&file, &json).map_err(|e| e.to_string())?;
        let mut cmd = std::process::Command::new(&self.opts.warden_exe);
        for k in config::SECRET_VARS {
            cmd.env_remove(k);
        }
        if let Some(creds) = self.credentials {
            cmd.env(config::CREDENTIALS_VAR, creds);
        }
        cmd.arg("session-run")
            .arg(&file)
            .env("WARDEN_DIR", &self.eng.ws.root)
            .env_remove("WARDEN_ROLE")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.opts.warden_exe.display()))?;
        write_pid_file(dir, &spec.session_id, child.id());
        // Reap the wrapper when it ends, so it never lingers as a zombie.
        std::thread::spawn(move || child.wait());
        Ok(())
    }
}

/// A [`SessionSpec`] as the `session-run` wrapper reads it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct WrappedSpec {
    /// The task.
    pub task_id: String,
    /// The session.
    pub session_id: String,
    /// What runs.
    pub argv: Vec<String>,
    /// Where.
    pub cwd: PathBuf,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// output.log.
    pub log_path: PathBuf,
    /// The binary that reports the end.
    pub warden_exe: PathBuf,
    /// WARDEN_DIR.
    pub project_root: PathBuf,
    /// The phase timeout, in seconds.
    pub timeout_s: u64,
}

impl From<&SessionSpec> for WrappedSpec {
    fn from(s: &SessionSpec) -> Self {
        WrappedSpec {
            task_id: s.task_id.clone(),
            session_id: s.session_id.clone(),
            argv: s.argv.clone(),
            cwd: s.cwd.clone(),
            env: s.env.clone(),
            log_path: s.log_path.clone(),
            warden_exe: s.warden_exe.clone(),
            project_root: s.project_root.clone(),
            timeout_s: s.timeout.as_secs(),
        }
    }
}

impl From<WrappedSpec> for SessionSpec {
    fn from(s: WrappedSpec) -> Self {
        SessionSpec {
            task_id: s.task_id,
            session_id: s.session_id,
            argv: s.argv,
            cwd: s.cwd,
            env: s.env,
            log_path: s.log_path,
            warden_exe: s.warden_exe,
            project_root: s.project_root,
            timeout: Duration::from_secs(s.timeout_s),
        }
    }
}

/// `warden session-run SPEC.json`: runs one process session to its end and reports it.
/// Returns the session's exit code.
pub fn session_run(spec_file: &std::path::Path) -> Result<i32, String> {
    let text = std::fs::read(spec_file).map_err(|e| format!("{}: {e}", spec_file.display()))?;
    let w: WrappedSpec =
        serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", spec_file.display()))?;
    // The wrapper names itself at once, so a sweep never takes a session whose
    // supervisor died right after starting it for one that never started.
    if let Some(dir) = spec_file.parent() {
        write_pid_file_of(
            dir,
            &w.session_id,
            std::process::id(),
            std::os::unix::process::parent_id(),
        );
    }
    let spec = SessionSpec::from(w);
    let s = session::start_process(&spec).map_err(|e| e.to_string())?;
    Ok(s.join().unwrap_or(128))
}

/// The exit code reported for a session whose end was not seen (its wrapper is gone).
pub const UNKNOWN_EXIT: i32 = 128;

/// How long a recorded session may take to write its pid file before a sweep takes it
/// for one that never started.
const START_GRACE: Duration = Duration::from_secs(10);

/// Is this session being started right now: its spec was written moments ago, and its
/// wrapper has not written its pid file yet?
fn starting(dir: &std::path::Path, session: &str) -> bool {
    let file = dir.join("session.json");
    let fresh = std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().unwrap_or_default() < START_GRACE);
    fresh
        && std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<WrappedSpec>(&b).ok())
            .is_some_and(|w| w.session_id == session)
}

/// `session.pid` beside TASK.md: `<session> <pid> <supervisor pid>`.
fn pid_file(dir: &std::path::Path) -> PathBuf {
    dir.join("session.pid")
}

fn write_pid_file(dir: &std::path::Path, session: &str, pid: u32) {
    write_pid_file_of(dir, session, pid, std::process::id());
}

fn write_pid_file_of(dir: &std::path::Path, session: &str, pid: u32, supervisor: u32) {
    let text = format!("{session} {pid} {supervisor}\n");
    let _ = warden_store::files::write_atomic(&pid_file(dir), text.as_bytes());
}

fn read_pid_file(dir: &std::path::Path) -> Option<(String, u32, u32)> {
    let text = std::fs::read_to_string(pid_file(dir)).ok()?;
    let mut it = text.split_whitespace();
    Some((
        it.next()?.to_owned(),
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    ))
}

fn alive(pid: u32) -> bool {
    rustix::process::Pid::from_raw(pid as i32)
        .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
}

/// Is the process hosting a session (its `warden session-run`) still running?
fn pid_file_alive(dir: &std::path::Path, session: &str) -> bool {
    matches!(read_pid_file(dir), Some((s, pid, _)) if s == session && alive(pid))
}
