//! The supervisor (`warden run`): the loop that asks the scheduler
//! (`warden_core::schedule::next`, the supervisor's whole contract) what each task needs,
//! and performs it. It observes what the store cannot know — which sessions are alive
//! (their host process, their tmux pane), whether a worktree exists — takes a lease on a
//! task before acting on it, runs each action on a thread of its own (each with its own
//! store connection, so the loop never blocks), and sleeps until the store changes, a
//! step ends, or a grace period or backoff the scheduler named is due.
//!
//! [`leases`] claims and renews tasks, [`step`] performs one action, [`host`] is the
//! `warden session-run` process that hosts a process session.

mod board;
mod host;
mod leases;
mod step;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use warden_core::event::Actor;
use warden_core::failure::{ExitCode, Failure};
use warden_core::model::{Status, Task, TaskId};
use warden_core::schedule::{self, Action, Liveness, View};
use warden_runner::git::Repo;
use warden_runner::{pipeline, session};
use warden_store::{EngineError, Fence, StoreError, Workspace, config, files};

use crate::App;

pub use host::{SessionFiles, session_run};
pub use leases::owner_id;
pub(crate) use leases::{pid_alive, this_host};
pub use step::stop_session;

use board::{Board, Changes, Seen};
use step::Step;

/// How sessions run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Child process groups under `warden session-run` hosts; an exit is seen the moment
    /// it happens.
    Process,
    /// tmux on a private socket under `.warden/`; an exit is reported by a pane-died hook.
    Tmux,
}

/// `warden run` options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Tasks worked on at once.
    pub max_parallel: usize,
    /// Return when nothing is runnable, nothing is due and no session is alive.
    pub until_idle: bool,
    /// Session mode.
    pub mode: Mode,
    /// The `warden` binary sessions report through (and find on their PATH).
    pub warden_exe: PathBuf,
    /// Lease lifetime; renewed at a third of it.
    pub lease_ttl: Duration,
}

/// A task being worked on, for the live display.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Active {
    /// The task.
    pub id: TaskId,
    /// Its status.
    pub status: Status,
    /// What runs: a step, or a session's role.
    pub what: String,
    /// Since when.
    pub since: Timestamp,
}

/// Something that happened to a task that a person may want to act on: the run log's
/// outcome lines (and `--json`'s outcome events).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The task is done; `merged` when its work reached the base branch.
    Done {
        /// The task.
        task: TaskId,
        /// merge-ri succeeded (not skipped).
        merged: bool,
    },
    /// A group's children are all done.
    GroupDone {
        /// The group.
        task: TaskId,
    },
    /// The task was cancelled.
    Cancelled {
        /// The task.
        task: TaskId,
    },
    /// The task needs a person: attempts used up, reviews failed, crashes.
    Stuck {
        /// The task.
        task: TaskId,
        /// Why.
        reason: Option<String>,
    },
    /// The agent review passed: a person approves or rejects.
    NeedsReview {
        /// The task.
        task: TaskId,
    },
    /// The worker asked a question.
    Question {
        /// The task.
        task: TaskId,
    },
    /// The work went back to the worker (a FAIL review, or a person's reject).
    BackToWorker {
        /// The task.
        task: TaskId,
        /// Why.
        reason: Option<String>,
    },
    /// A session ended without its artifact.
    Crashed {
        /// The task.
        task: TaskId,
        /// Crashes in this status.
        crash_count: u32,
        /// At this many it is stuck.
        threshold: u32,
        /// A worker waits for `task respawn`; a reviewer is restarted by itself.
        waits_for_respawn: bool,
    },
    /// An attempt failed (a guard, a phase): charged, run again after a backoff.
    AttemptFailed {
        /// The task.
        task: TaskId,
        /// Attempts used.
        attempt: u32,
        /// Attempts allowed.
        max: u32,
        /// Why.
        reason: Option<String>,
    },
    /// A failed phase gets its one automatic heal: the agent is started to fix it.
    Healing {
        /// The task.
        task: TaskId,
        /// The phase.
        phase: warden_core::model::Phase,
    },
    /// A session could not start (Warden's side, not the agent's crash).
    SessionFailed {
        /// The task.
        task: TaskId,
        /// Why.
        error: Option<String>,
    },
}

/// How a run ended (`--until-idle`): what is left and the exit code a script acts on.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Idle {
    /// 0 every leaf is done (or cancelled); 6 some wait for a person (a review to
    /// approve, a question in clarification); 7 some are stuck, dead or blocked, or
    /// their steps kept failing.
    pub code: ExitCode,
    /// Leaves that pass.
    pub done: usize,
    /// Countable leaves.
    pub total: usize,
    /// Leaves waiting for a person.
    pub needs_person: Vec<TaskId>,
    /// Leaves stuck, or with a dead session.
    pub stuck_or_dead: Vec<TaskId>,
    /// Pending leaves that cannot start (a dependency is not done and nothing runs).
    pub blocked: Vec<TaskId>,
    /// What holds each of `blocked` back, in the same order.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub blocked_by: Vec<BlockedBy>,
    /// Tasks whose steps failed on Warden's side, in a row, until the run gave up
    /// waiting for them (their cause needs a person: a repository git cannot use, a
    /// full disk).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<StepFailure>,
}

/// What holds a blocked leaf back: the first dependency (its own, or one of its
/// groups') that is not done.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlockedBy {
    /// The blocked leaf.
    pub task: TaskId,
    /// The dependency it waits for.
    pub waits_for: TaskId,
    /// That dependency's status as every view shows it (a group's derived); `None`
    /// when no such task exists.
    pub status: Option<Status>,
    /// The group above `task` whose `depends_on` names it, when not `task` itself:
    /// where `warden task edit` drops it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needed_by: Option<TaskId>,
}

impl BlockedBy {
    /// The task whose `depends_on` names the dependency.
    pub fn named_by(&self) -> &TaskId {
        self.needed_by.as_ref().unwrap_or(&self.task)
    }

    /// Can the dependency never be done (cancelled, or no such task)? Then only a
    /// person's edit moves the blocked task on.
    pub fn never(&self) -> bool {
        matches!(self.status, None | Some(Status::Cancelled))
    }
}

/// A task the run could not step, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepFailure {
    /// The task.
    pub task: TaskId,
    /// Its steps that failed in a row.
    pub tries: u32,
    /// The last failure's message.
    pub error: String,
}

/// What the supervisor tells its front end (`--json`: one JSON line each, `"event"`
/// naming the variant).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    /// The run started.
    Started {
        /// The project root.
        root: PathBuf,
        /// The git top and base branch, when the project is a repository.
        git: Option<(PathBuf, String)>,
        /// Why a project in a repository runs without git (a detached HEAD).
        #[serde(skip_serializing_if = "Option::is_none")]
        without_git: Option<String>,
        /// Tasks worked on at once.
        max_parallel: usize,
        /// The resume file an abnormal stop left, if any.
        resumed: Option<String>,
    },
    /// A step of a task began.
    Step {
        /// The task.
        task: TaskId,
        /// What it does.
        what: String,
    },
    /// A step ended with something to say.
    Stepped {
        /// The task.
        task: TaskId,
        /// What happened.
        what: String,
    },
    /// A step failed: Warden's own error (not a task's outcome).
    StepFailed {
        /// The task.
        task: TaskId,
        /// What failed.
        failure: Failure,
        /// The task's steps wait this long before the next try (none after a lost
        /// lease: the task is another runner's).
        #[serde(skip_serializing_if = "Option::is_none")]
        retry_in_s: Option<u64>,
    },
    /// The store could not be read or written (the server restarted, the disk is
    /// full): the run tries again after `retry_in_s`, and gives up (exit 5) when it has
    /// failed for five minutes in a row. Sessions go on meanwhile.
    StoreFailed {
        /// What failed.
        failure: Failure,
        /// The next try is this far off.
        retry_in_s: u64,
    },
    /// Something happened that a person may act on.
    Outcome(Outcome),
    /// The tasks being worked on changed.
    Active {
        /// Every task a step or a session works on now.
        tasks: Vec<Active>,
    },
    /// The run stops on a signal; sessions keep running and are adopted by the next run.
    Stopping,
    /// `--until-idle`: nothing is runnable, nothing is due, no session is alive.
    Idle(Idle),
}

/// Step threads at once (each holds its own store connection).
const MAX_STEP_THREADS: usize = 8;

/// How often tmux panes are swept for exits their hooks missed.
const SWEEP: Duration = Duration::from_millis(500);

/// How often, while process sessions are open, a pass looks at them even though nothing
/// was committed: a host whose report of the end failed (a broken `warden.toml`, a store
/// it could not write) or that was killed leaves no commit behind, and the session's end
/// would otherwise be seen only at its phase timeout.
const LOOK_AT_SESSIONS: Duration = Duration::from_secs(2);

/// How often, at most, a run whose steps finished hands the memory they freed back to
/// the operating system. glibc keeps free pages inside its heaps, and a supervisor
/// running thousands of sessions crept by about 0.75 KB per task without this; a trim
/// costs well under a millisecond at this size. The tops of the step threads' arenas,
/// which a trim never touches, go back as they are freed
/// ([`warden_sys::return_freed_memory_promptly`], at the start of a run).
const TRIM_EVERY: Duration = Duration::from_secs(10);

/// … and at most this often when no step is running (the run may be going idle).
const TRIM_IDLE: Duration = Duration::from_secs(1);

/// The wait after a task's first failed step; it doubles with each failure in a row, up
/// to [`STEP_BACKOFF_MAX`]. A step fails on Warden's side (git cannot make the worktree,
/// the disk is full), and the scheduler, seeing the task unchanged, would ask for the
/// same step at once: without a wait, the run retried hundreds of times a second.
const STEP_BACKOFF_FIRST: Duration = Duration::from_secs(1);

/// The longest wait between a failing task's steps: a fixed cause is picked up within it.
const STEP_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// Failed steps in a row after which a task no longer keeps `--until-idle` running: the
/// run ends and names it, for a person to fix the cause (a long-running `warden run`
/// goes on trying).
const STEP_GIVE_UP: u32 = 3;

/// A task whose steps failed, in a row.
#[derive(Debug, Clone)]
struct Failing {
    /// Failed steps in a row.
    count: u32,
    /// No step before this.
    retry_at: Instant,
    /// The last failure's message.
    error: String,
}

impl Failing {
    /// As a person sees it.
    fn shown(&self, task: &TaskId) -> StepFailure {
        StepFailure {
            task: task.clone(),
            tries: self.count,
            error: self.error.clone(),
        }
    }

    /// The wait after the `count`-th failure in a row.
    fn backoff(count: u32) -> Duration {
        STEP_BACKOFF_FIRST
            .saturating_mul(1 << count.saturating_sub(1).min(16))
            .min(STEP_BACKOFF_MAX)
    }
}

/// A step running on its own thread: its handle, what it does, and since when.
struct Job {
    handle: JoinHandle<Result<step::Done, EngineError>>,
    what: String,
    since: Instant,
}

/// A running supervisor.
pub struct Supervisor {
    app: App,
    opts: Options,
    owner: String,
    repo: Option<Repo>,
    base: Option<String>,
    /// Per-task threads running a step.
    jobs: BTreeMap<TaskId, Job>,
    /// Tasks whose lease we hold, with its epoch (the fence of every write).
    leased: BTreeMap<TaskId, u64>,
    last_renew: Instant,
    /// When the run last handed freed memory back (see [`TRIM_EVERY`]), and whether a
    /// step finished since.
    last_trim: Instant,
    untrimmed: bool,
    stop: Arc<AtomicBool>,
    /// The 0600 file holding the store's secrets for Warden's calls from sessions.
    credentials: Option<PathBuf>,
    /// What the supervisor keeps of the store between passes (built when the run
    /// starts).
    board: Board,
    /// Tasks at rest with a session whose end is recorded but whose program was seen
    /// running: looked at every pass until it is gone.
    watch: BTreeSet<TaskId>,
    /// When each open session was first seen, for the display.
    since: BTreeMap<String, Timestamp>,
    /// The in-flight set last written to continue.md.
    in_flight: Option<Vec<String>>,
    /// Tasks whose last steps failed: not stepped again before their time.
    failing: BTreeMap<TaskId, Failing>,
    /// This supervisor's announcement in `.warden/runners/` (`warden status`).
    presence: crate::status::Announced,
    /// The sweep's reports of dead panes still running, by session id (see
    /// [`Supervisor::sweep_tmux`]).
    sweeping: std::sync::Mutex<BTreeMap<String, std::thread::JoinHandle<bool>>>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("owner", &self.owner)
            .finish()
    }
}

pub(crate) fn tmux_socket(ws: &Workspace) -> PathBuf {
    ws.dir.join("tmux.sock")
}

/// What one pass over the tasks found.
struct Pass {
    /// Something runs, is wanted, or is due.
    busy: bool,
    /// The earliest time the scheduler asked to look again.
    wake: Option<Timestamp>,
    /// The tasks the pass looked at, in full, in tree order.
    looked: Vec<Task>,
    /// Tasks whose steps failed [`STEP_GIVE_UP`] times in a row, waiting to try again.
    gave_up: Vec<TaskId>,
}

/// What the run's loop carries from one turn to the next.
struct Turns {
    /// The store's data version at the last pass.
    last_version: u64,
    /// The tasks worked on at the last pass (to tell the front end only of changes).
    last_active: Vec<(TaskId, Status, String)>,
    /// The last tmux sweep.
    last_sweep: Instant,
    /// The last pass.
    last_pass: Instant,
    /// The last pass saw an open session.
    sessions_open: bool,
    /// The earliest time the scheduler asked to look again.
    wake: Option<Timestamp>,
}

/// How a turn of the run's loop ended.
enum Turn {
    /// Go on.
    Again,
    /// The run ends: on a signal (`None`), or idle with `--until-idle`.
    End(Option<Idle>),
}

/// How long the store may fail in a row before the run gives up (exit 5): a
/// PostgreSQL restart or failover takes seconds to a minute.
const STORE_GIVE_UP: Duration = Duration::from_secs(300);

/// The longest wait between tries while the store fails.
const STORE_RETRY_MAX: Duration = Duration::from_secs(30);

/// Pending tasks offered as spares per free slot, for starts another runner takes first.
const SPARES_PER_SLOT: usize = 2;

/// The steps a pass runs, from what it wants (tasks under way first, then starts, each
/// group in tree order): every quick step, and heavy steps (a start, a phase, a session,
/// a finish, a reset) up to `slots`; at most `threads` in all. Beside them, the next
/// starts that did not fit (at most [`SPARES_PER_SLOT`] per slot), to claim instead of
/// chosen starts another runner claims first.
fn choose(
    wanted: Vec<(TaskId, Action)>,
    slots: usize,
    threads: usize,
) -> (Vec<(TaskId, Action)>, Vec<TaskId>) {
    let mut heavy = 0usize;
    let mut chosen: Vec<(TaskId, Action)> = Vec::new();
    let mut spares: Vec<TaskId> = Vec::new();
    for (id, action) in wanted {
        let heavy_step = matches!(
            action,
            Action::Start
                | Action::RunPhase(_)
                | Action::StartSession { .. }
                | Action::Finish
                | Action::ResetWorktree
        );
        if heavy_step {
            if heavy >= slots {
                if action == Action::Start && spares.len() < slots * SPARES_PER_SLOT {
                    spares.push(id);
                }
                continue;
            }
            heavy += 1;
        }
        if chosen.len() >= threads {
            break;
        }
        chosen.push((id, action));
    }
    (chosen, spares)
}

impl Supervisor {
    /// Opens the workspace for supervising. `stop` ends the loop when set.
    pub fn new(ws: Workspace, opts: Options, stop: Arc<AtomicBool>) -> Result<Supervisor, Failure> {
        let app = App::open(ws, Actor::Runner)?;
        // Sessions never see the store's secrets; Warden's calls from inside one read
        // them from this file instead (see `config::SECRET_VARS`).
        let credentials = config::write_credentials(&app.ws().dir.join("credentials"))
            .map_err(EngineError::from)?;
        let repo = Repo::discover(&app.ws().root).ok().flatten();
        let base = repo.as_ref().and_then(pipeline::base_branch);
        let owner = owner_id();
        let presence = crate::status::Presence::announce(app.ws(), &owner, app.eng.now());
        Ok(Supervisor {
            app,
            opts,
            owner,
            repo,
            base,
            jobs: BTreeMap::new(),
            leased: BTreeMap::new(),
            last_renew: Instant::now(),
            last_trim: Instant::now(),
            untrimmed: false,
            stop,
            credentials,
            board: Board::default(),
            watch: BTreeSet::new(),
            since: BTreeMap::new(),
            in_flight: None,
            failing: BTreeMap::new(),
            sweeping: std::sync::Mutex::default(),
            presence,
        })
    }

    /// Runs until stopped, or until idle with `until_idle` (then it says how it ended).
    pub fn run(&mut self, on_event: &mut dyn FnMut(RunEvent)) -> Result<Option<Idle>, Failure> {
        // Before any step thread: their arenas give back what they free (the soak).
        warden_sys::return_freed_memory_promptly();
        let ws = self.app.ws().clone();
        // The resume file of a run that ended; a supervisor still running beside this
        // one keeps its own there, which is no stop at all.
        let another_alive = self
            .app
            .supervisors()
            .unwrap_or_default()
            .iter()
            .any(|s| s.owner != self.owner && s.alive != Some(false));
        let resumed = files::read_text(&ws.dir, &ws.continue_md())
            .ok()
            .filter(|_| !another_alive)
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("Stopped"))
                    .map(str::to_owned)
            });
        on_event(RunEvent::Started {
            root: ws.root.clone(),
            git: match (&self.repo, &self.base) {
                (Some(r), Some(b)) => Some((r.top.clone(), b.clone())),
                _ => None,
            },
            without_git: match (&self.repo, &self.base) {
                (Some(r), None) => Some(format!(
                    "the repository {} is on a detached HEAD: tasks work in the project directory and the git phases are skipped; check out a branch to give each task a worktree",
                    r.top.display()
                )),
                _ => None,
            },
            max_parallel: self.opts.max_parallel,
            resumed,
        });
        // Every task read once, a page at a time; from here on only what changes.
        let running_panes = self.running_panes();
        let mut watch = BTreeSet::new();
        self.board = Board::build(&*self.app.eng.store, |t| {
            if t.waits_for_change() && !self.ghosts(t, &running_panes).is_empty() {
                watch.insert(t.id().clone());
            }
        })
        .map_err(Failure::from)?;
        self.watch = watch;
        let mut t = Turns {
            last_version: u64::MAX,
            last_active: Vec::new(),
            last_sweep: Instant::now() - SWEEP,
            last_pass: Instant::now(),
            sessions_open: false,
            wake: None,
        };
        // A store that cannot be reached (a PostgreSQL restart or failover, a disk that
        // filled) stops the run only if it stays so for STORE_GIVE_UP: the run says so
        // and tries again, its sessions go on meanwhile, and their ends are looked at
        // once the store answers.
        let mut outage: Option<(Instant, u32)> = None;
        loop {
            match self.turn(&mut t, on_event) {
                Ok(Turn::Again) => outage = None,
                Ok(Turn::End(idle)) => return Ok(idle),
                // A store file removed or replaced under the run does not come back for
                // this process (it would write into the old file): end now (exit 5),
                // not after five minutes of trying.
                Err(f) if f.code == ExitCode::Internal && !self.app.eng.store.gone() => {
                    let (since, tries) = outage.get_or_insert((Instant::now(), 0));
                    *tries += 1;
                    if since.elapsed() >= STORE_GIVE_UP {
                        return Err(f);
                    }
                    let wait = Failing::backoff(*tries).min(STORE_RETRY_MAX);
                    on_event(RunEvent::StoreFailed {
                        failure: f,
                        retry_in_s: wait.as_secs(),
                    });
                    // Everything is looked at again once the store answers.
                    t.last_version = u64::MAX;
                    let until = Instant::now() + wait;
                    while Instant::now() < until && !self.stop.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
                Err(f) => return Err(f),
            }
        }
    }

    /// One turn of the run's loop: collects finished steps, and when anything changed
    /// or is due runs a pass; then sleeps until the next change or due time.
    fn turn(&mut self, t: &mut Turns, on_event: &mut dyn FnMut(RunEvent)) -> Result<Turn, Failure> {
        if self.stop.load(Ordering::SeqCst) {
            // Sessions go on, to be adopted; a check of this process would run on as an
            // orphan whose outcome nobody records (and `status` showed its phase
            // running under no supervisor): stopped, it runs again from the start with
            // the next run, as the step of a killed runner does.
            let grace = Duration::from_secs(self.app.eng.config.limits.kill_after_s);
            warden_runner::check::stop_running_checks(grace);
            self.release_all();
            let looked = self.in_flight_tasks();
            self.write_continue(&looked, "interrupted by a signal");
            on_event(RunEvent::Stopping);
            return Ok(Turn::End(None));
        }
        let finished = self.reap(on_event);
        let version = self.app.eng.store.data_version().map_err(Failure::from)?;
        let due = t.wake.is_some_and(|w| Timestamp::now() >= w);
        let sweep_due = self.opts.mode == Mode::Tmux && t.last_sweep.elapsed() >= SWEEP;
        let look_due = self.opts.mode == Mode::Process
            && t.sessions_open
            && t.last_pass.elapsed() >= LOOK_AT_SESSIONS;
        if version != t.last_version || finished || due || sweep_due || look_due {
            t.last_version = version;
            t.last_pass = Instant::now();
            if sweep_due {
                t.last_sweep = Instant::now();
                self.sweep_tmux();
            }
            let changes = self
                .board
                .update(&*self.app.eng.store)
                .map_err(Failure::from)?;
            self.report_moves(changes, on_event);
            let pass = self.pass(on_event)?;
            t.wake = pass.wake;
            t.sessions_open = pass
                .looked
                .iter()
                .any(|task| task.open_sessions().next().is_some());
            let active = self.active(&pass.looked);
            let key: Vec<(TaskId, Status, String)> = active
                .iter()
                .map(|a| (a.id.clone(), a.status, a.what.clone()))
                .collect();
            if key != t.last_active {
                t.last_active = key;
                self.write_continue(
                    &pass.looked,
                    "the run was killed (kill -9, a crash or a lost machine)",
                );
                on_event(RunEvent::Active { tasks: active });
            }
            if self.opts.until_idle && !pass.busy && self.jobs.is_empty() {
                self.release_all();
                self.end_tmux();
                if std::fs::remove_file(self.app.ws().continue_md()).is_ok() {
                    // STATE.md names the resume file while there is one.
                    self.app.eng.sync_state_md();
                }
                let failing: Vec<StepFailure> = pass
                    .gave_up
                    .iter()
                    .filter_map(|id| self.failing.get(id).map(|f| f.shown(id)))
                    .collect();
                let idle = idle_summary(&self.board, failing);
                on_event(RunEvent::Idle(idle.clone()));
                return Ok(Turn::End(Some(idle)));
            }
        }
        if self.last_renew.elapsed() >= self.opts.lease_ttl / 3 {
            self.renew();
        }
        self.untrimmed |= finished;
        let since = self.last_trim.elapsed();
        if self.untrimmed && (since >= TRIM_EVERY || self.jobs.is_empty() && since >= TRIM_IDLE) {
            warden_sys::release_free_memory();
            self.last_trim = Instant::now();
            self.untrimmed = false;
        }
        // Sleep until another process commits (LISTEN/NOTIFY on PostgreSQL, a cheap
        // poll on SQLite), a step may have finished, or something the scheduler
        // named is due.
        let mut timeout = if self.jobs.is_empty() {
            Duration::from_millis(500)
        } else {
            Duration::from_millis(50)
        };
        timeout = timeout.min((self.opts.lease_ttl / 3).saturating_sub(self.last_renew.elapsed()));
        if self.opts.mode == Mode::Tmux {
            timeout = timeout.min(SWEEP.saturating_sub(t.last_sweep.elapsed()));
        }
        if self.opts.mode == Mode::Process && t.sessions_open {
            timeout = timeout.min(LOOK_AT_SESSIONS.saturating_sub(t.last_pass.elapsed()));
        }
        if let Some(w) = t.wake {
            let left = Timestamp::now().duration_until(w);
            let left = Duration::try_from(left).unwrap_or_default();
            timeout = timeout.min(left);
        }
        self.app
            .eng
            .store
            .wait_for_change(version, timeout.max(Duration::from_millis(5)))
            .map_err(Failure::from)?;
        Ok(Turn::Again)
    }

    /// Collects finished steps; returns whether any finished.
    fn reap(&mut self, on_event: &mut dyn FnMut(RunEvent)) -> bool {
        let done: Vec<TaskId> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.handle.is_finished())
            .map(|(id, _)| id.clone())
            .collect();
        for id in &done {
            let Some(job) = self.jobs.remove(id) else {
                continue;
            };
            let failure = match job.handle.join() {
                Ok(Ok(what)) => {
                    self.failing.remove(id);
                    if let Some(what) = what {
                        on_event(RunEvent::Stepped {
                            task: id.clone(),
                            what,
                        });
                    }
                    continue;
                }
                Ok(Err(EngineError::Store(e @ StoreError::LeaseLost { .. }))) => {
                    // Not ours any more: forget it without releasing the new holder's.
                    self.leased.remove(id);
                    self.failing.remove(id);
                    on_event(RunEvent::StepFailed {
                        task: id.clone(),
                        failure: e.into(),
                        retry_in_s: None,
                    });
                    continue;
                }
                Ok(Err(e)) => Failure::from(e),
                Err(_) => Failure::internal(format!(
                    "{}: the step panicked; this is a Warden bug, please report it",
                    job.what
                )),
            };
            let count = self.failing.get(id).map_or(0, |f| f.count) + 1;
            let wait = Failing::backoff(count);
            self.failing.insert(
                id.clone(),
                Failing {
                    count,
                    retry_at: Instant::now() + wait,
                    error: failure.message.clone(),
                },
            );
            on_event(RunEvent::StepFailed {
                task: id.clone(),
                failure,
                retry_in_s: Some(wait.as_secs()),
            });
        }
        if !done.is_empty() {
            self.announce_failing();
        }
        !done.is_empty()
    }

    /// Tells `warden status` which tasks' steps keep failing (in this run's announcement).
    fn announce_failing(&mut self) {
        let shown: Vec<StepFailure> = self.failing.iter().map(|(id, f)| f.shown(id)).collect();
        self.presence.set_failing(shown);
    }

    /// Says what happened to each task since the last look, as outcomes.
    fn report_moves(&mut self, changes: Changes, on_event: &mut dyn FnMut(RunEvent)) {
        let limits = self.app.eng.config.limits;
        let running_panes = self.running_panes();
        for m in changes.moved {
            let Some(t) = m.task else { continue };
            // A task waiting for a change (at rest, or for a person) whose recorded-ended
            // session still runs is looked at every pass until it is gone.
            if t.waits_for_change() && !self.ghosts(&t, &running_panes).is_empty() {
                self.watch.insert(t.id().clone());
            }
            let Some(before) = m.before else { continue };
            if !m.leaf {
                continue;
            }
            for o in outcomes(&t, &before, &Seen::of(&t), &limits) {
                on_event(RunEvent::Outcome(o));
            }
        }
        for task in changes.groups_done {
            on_event(RunEvent::Outcome(Outcome::GroupDone { task }));
        }
    }

    /// The tmux panes whose program runs (none outside tmux mode).
    fn running_panes(&self) -> BTreeSet<String> {
        let socket = tmux_socket(self.app.ws());
        if !socket.exists() {
            return BTreeSet::new();
        }
        session::tmux_list(&socket)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| !p.dead)
            .map(|p| p.name)
            .collect()
    }

    /// The last two sessions of `t` whose end is recorded, if one's program still runs.
    fn ghosts(&self, t: &Task, running_panes: &BTreeSet<String>) -> Vec<String> {
        t.sessions()
            .iter()
            .rev()
            .take(2)
            .filter(|r| {
                r.ended
                    && (running_panes.contains(&session::tmux_session_name(&r.id))
                        || host::group_alive(&SessionFiles::of(self.app.ws(), t.id(), &r.id)))
            })
            .map(|r| r.id.clone())
            .collect()
    }

    /// What the runner sees of one open session.
    fn liveness(&self, id: &TaskId, session: &str, panes: &BTreeSet<String>) -> Liveness {
        if panes.contains(&session::tmux_session_name(session)) {
            return Liveness::Alive;
        }
        if host::process_alive(&SessionFiles::of(self.app.ws(), id, session)) {
            return Liveness::Alive;
        }
        Liveness::Gone
    }

    /// One pass: asks the scheduler about every task that can need something — those
    /// not waiting for a change (at rest, or for a person), those with a step running,
    /// leased or watched, done ones whose worktree is still there, and the first pending
    /// leaves ready to start, in tree order — claims leases and starts steps. Every other
    /// task waits with nothing to do, and is not read.
    fn pass(&mut self, on_event: &mut dyn FnMut(RunEvent)) -> Result<Pass, Failure> {
        let now = Timestamp::now();
        let limits = self.app.eng.config.limits;
        let socket = tmux_socket(self.app.ws());
        let listed = if socket.exists() {
            session::tmux_list(&socket).unwrap_or_default()
        } else {
            Vec::new()
        };
        // A pane counts as the session alive while it runs, and while it is dead but tmux
        // has not collected its exit status; a dead pane with its status is gone, and is
        // reported with that status (its hook's report failed, or is on its way).
        let panes: BTreeSet<String> = listed
            .iter()
            .filter(|p| !p.dead || p.dead_status.is_none())
            .map(|p| p.name.clone())
            .collect();
        let running_panes: BTreeSet<String> = listed
            .iter()
            .filter(|p| !p.dead)
            .map(|p| p.name.clone())
            .collect();
        // Tasks another live runner holds are that runner's to watch (it may run on
        // another machine); an expired lease, or a dead runner's on this host, is not.
        // Each is looked at again when its lease would lapse (a runner elsewhere that
        // died renews it no more), or, held on this host, every LOOK_AT_SESSIONS (its
        // runner's death is seen at once): otherwise a quiet store would leave a dead
        // runner's task waiting for ever.
        let lease_now = self.app.eng.now();
        let here = leases::owner_host_pid(&self.owner).map(|(h, _)| h.to_owned());
        let look_again = jiff::SignedDuration::try_from(LOOK_AT_SESSIONS).unwrap_or_default();
        let others: BTreeMap<TaskId, Timestamp> = self
            .app
            .eng
            .store
            .leases()
            .map_err(Failure::from)?
            .into_iter()
            .filter(|l| {
                l.owner != self.owner && l.expires_at > lease_now && !self.dead_here(&l.owner)
            })
            .map(|l| {
                let on_this_host =
                    leases::owner_host_pid(&l.owner).map(|(h, _)| h) == here.as_deref();
                let again = match now.checked_add(look_again) {
                    Ok(soon) if on_this_host => soon.min(l.expires_at),
                    _ => l.expires_at,
                };
                (l.task, again)
            })
            .collect();
        let wake_for = |pass: &mut Pass, id: &TaskId| {
            if let Some(&at) = others.get(id) {
                pass.wake = Some(pass.wake.map_or(at, |w: Timestamp| w.min(at)));
            }
        };
        // A failing task deleted, done or cancelled since (by a person, another runner),
        // or now another live runner's, has nothing left for this one to retry, and is no
        // longer shown.
        let failing = self.failing.len();
        self.failing.retain(|id, _| {
            !others.contains_key(id)
                && self
                    .board
                    .shown(id)
                    .is_some_and(|(s, _)| !matches!(s, Status::Done | Status::Cancelled))
        });
        if self.failing.len() != failing {
            self.announce_failing();
        }
        // The tasks that can need something, in full.
        let mut ids: BTreeSet<TaskId> = self.board.active().keys().cloned().collect();
        ids.extend(self.jobs.keys().cloned());
        // A task whose steps kept failing is looked at until a pass finds nothing to do
        // for it (a person moved it on, say to review), which settles it.
        ids.extend(self.failing.keys().cloned());
        ids.extend(self.leased.keys().cloned());
        ids.extend(self.watch.iter().cloned());
        if self.repo.is_some() {
            ids.extend(
                board::dir_ids(&self.app.ws().dir.join("worktrees"))
                    .into_iter()
                    .filter(|id| self.board.shown(id).is_some_and(|(s, _)| s == Status::Done)),
            );
        }
        let mut looked: Vec<Task> = Vec::with_capacity(ids.len());
        let mut fetch: Vec<TaskId> = Vec::new();
        for id in &ids {
            match self.board.active().get(id) {
                Some(t) => looked.push(t.clone()),
                None => fetch.push(id.clone()),
            }
        }
        looked.extend(self.app.eng.store.get_many(&fetch).map_err(Failure::from)?);
        // A task held but no longer stored (a `plan apply` removed it between steps):
        // nothing is left to do for it, so its lease goes instead of being renewed for
        // as long as the run lasts.
        let vanished: Vec<TaskId> = self
            .leased
            .keys()
            .filter(|id| !self.jobs.contains_key(*id) && !looked.iter().any(|t| t.id() == *id))
            .cloned()
            .collect();
        for id in &vanished {
            self.release(id);
        }
        // The pending leaves that may start: the first in tree order that nobody works on.
        let threads = MAX_STEP_THREADS.saturating_sub(self.jobs.len());
        let ready = self.board.ready(threads.max(1), |id| {
            ids.contains(id) || others.contains_key(id)
        });
        let others_ready: Vec<&TaskId> = others
            .keys()
            .filter(|id| {
                self.board.is_leaf(id)
                    && self
                        .board
                        .shown(id)
                        .is_some_and(|(s, _)| s == Status::Pending)
                    && self.board.deps_done(id)
            })
            .collect();
        looked.extend(self.app.eng.store.get_many(&ready).map_err(Failure::from)?);
        let rank = |t: &Task| self.board.rank_of(t.id());
        looked.sort_by_key(rank);
        let mut pass = Pass {
            busy: !others_ready.is_empty(),
            wake: None,
            looked: Vec::new(),
            gave_up: Vec::new(),
        };
        for id in others_ready {
            wake_for(&mut pass, id);
        }
        let mut running = 0usize;
        let mut wanted: Vec<(TaskId, Action)> = Vec::new();
        let mut release = Vec::new();
        let mut settled = Vec::new();
        let mut watch = BTreeSet::new();
        for t in &looked {
            let id = t.id();
            if self.jobs.contains_key(id) {
                pass.busy = true;
                running += 1;
                continue;
            }
            let live = |sid: &str| self.liveness(id, sid, &panes);
            let ghosts = self.ghosts(t, &running_panes);
            if t.waits_for_change() && !ghosts.is_empty() {
                watch.insert(id.clone());
            }
            let view = View {
                task: t,
                now,
                deps_done: self.board.deps_done(id),
                leaf: self.board.is_leaf(id),
                worktree: self.repo.is_some() && self.app.ws().worktree(id).is_dir(),
                live: &live,
                ghosts: &ghosts,
            };
            let action = schedule::next(&view, &limits);
            if others.contains_key(id) {
                // Another runner's to do (or to wait for); this run is not idle while
                // there is anything to do, whoever does it.
                if action != Action::Idle {
                    pass.busy = true;
                    wake_for(&mut pass, id);
                }
                continue;
            }
            match action {
                Action::Idle => {
                    if self.leased.contains_key(id) {
                        release.push(id.clone());
                    }
                    if self.failing.contains_key(id) {
                        // A person moved it on (cancelled it, say): nothing to retry.
                        settled.push(id.clone());
                    }
                }
                Action::Busy => {
                    pass.busy = true;
                    running += 1;
                }
                Action::Wait { until } => {
                    pass.busy = true;
                    pass.wake = Some(pass.wake.map_or(until, |w| w.min(until)));
                    if t.open_sessions().next().is_some() {
                        running += 1;
                    }
                }
                action => {
                    if let Some(f) = self.failing.get(id) {
                        let left = f.retry_at.saturating_duration_since(Instant::now());
                        if !left.is_zero() {
                            // Its last steps failed: it waits out its backoff, and after
                            // STEP_GIVE_UP failures in a row no longer keeps the run busy.
                            if f.count < STEP_GIVE_UP {
                                pass.busy = true;
                            } else {
                                pass.gave_up.push(id.clone());
                                // Another runner (another machine, where the cause may
                                // not hold) may take it meanwhile; this one claims it
                                // again for its next try if it is still free.
                                if self.leased.contains_key(id) {
                                    release.push(id.clone());
                                }
                            }
                            let due = now.checked_add(left).unwrap_or(now);
                            pass.wake = Some(pass.wake.map_or(due, |w| w.min(due)));
                            continue;
                        }
                    }
                    pass.busy = true;
                    wanted.push((id.clone(), action));
                }
            }
        }
        self.watch = watch;
        for id in release {
            self.release(&id);
        }
        if !settled.is_empty() {
            for id in &settled {
                self.failing.remove(id);
            }
            self.announce_failing();
        }
        // Tasks under way first, then starts: a start takes a slot of --max-parallel
        // like the steps that run work, so a run never has more tasks in flight than
        // that (with 100,000 pending tasks it starts only what it can run). Quick steps
        // (a stop, a report, a cleanup) always run.
        wanted.sort_by_key(|(_, a)| *a == Action::Start);
        let slots = self.opts.max_parallel.saturating_sub(running);
        let (chosen, spares) = choose(wanted, slots, threads);
        if !chosen.is_empty() {
            let ids: Vec<TaskId> = chosen.iter().map(|(id, _)| id.clone()).collect();
            let claimed = self.claim(&ids, ids.len()).map_err(Failure::from)?;
            // Starts another runner took first (runners sharing a store all reach for
            // the first pending tasks in tree order): their slots go to the next pending
            // tasks now, not a pass later.
            let lost = chosen
                .iter()
                .filter(|(id, a)| *a == Action::Start && !claimed.contains(id))
                .count();
            let mut started: Vec<(TaskId, Action)> = chosen
                .into_iter()
                .filter(|(id, _)| claimed.contains(id))
                .collect();
            if lost > 0 && !spares.is_empty() {
                let got = self.claim(&spares, lost).map_err(Failure::from)?;
                started.extend(got.into_iter().map(|id| (id, Action::Start)));
            }
            for (id, action) in started {
                on_event(RunEvent::Step {
                    task: id.clone(),
                    what: action.describe(),
                });
                self.start(id, action);
            }
        }
        pass.looked = looked;
        Ok(pass)
    }

    /// Starts a step on its own thread, fenced by the task's lease.
    fn start(&mut self, id: TaskId, action: Action) {
        let ws = self.app.ws().clone();
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
        let task = id.clone();
        let handle = std::thread::spawn(move || -> Result<step::Done, EngineError> {
            let mut app = App::open(ws, Actor::Runner).map_err(EngineError::from)?;
            // A check a dead runner left running (kill -9 while it ran a phase) would
            // run on beside this step, its result never recorded: this runner holds the
            // task's lease now, so it is stopped first.
            let grace = Duration::from_secs(app.eng.config.limits.kill_after_s);
            warden_runner::check::stop_orphaned_check(&app.ws().check_note(&task), grace);
            // Every write of this step is fenced by the lease it was started under.
            app.eng.fence = fence;
            let mut step = Step {
                app: &app,
                repo: repo.as_ref(),
                base: base.as_deref(),
                opts: &opts,
                credentials: credentials.as_deref(),
            };
            step.perform(&task, &action)
        });
        self.jobs.insert(
            id,
            Job {
                handle,
                what,
                since: Instant::now(),
            },
        );
    }

    /// Tasks being worked on now: a step, or a live session (every such task is among
    /// those a pass looks at).
    fn active(&mut self, looked: &[Task]) -> Vec<Active> {
        let mut out = Vec::new();
        let mut seen_sessions = BTreeSet::new();
        for t in looked {
            if let Some(job) = self.jobs.get(t.id()) {
                let age = jiff::SignedDuration::try_from(job.since.elapsed()).unwrap_or_default();
                out.push(Active {
                    id: t.id().clone(),
                    status: t.status(),
                    what: job.what.clone(),
                    since: Timestamp::now()
                        .checked_sub(age)
                        .unwrap_or_else(|_| Timestamp::now()),
                });
            } else if let Some(s) = t.open_sessions().last() {
                seen_sessions.insert(s.id.clone());
                let since = *self
                    .since
                    .entry(s.id.clone())
                    .or_insert_with(|| s.started_at.unwrap_or_else(Timestamp::now));
                out.push(Active {
                    id: t.id().clone(),
                    status: t.status(),
                    what: match s.heal {
                        Some(p) => format!("{} session (fixing {p})", s.role),
                        None => format!("{} session", s.role),
                    },
                    since,
                });
            }
        }
        self.since.retain(|s, _| seen_sessions.contains(s));
        out
    }

    /// The tasks in flight now (not waiting for a change, or with a step running), in
    /// full.
    fn in_flight_tasks(&self) -> Vec<Task> {
        let mut out: Vec<Task> = self.board.active().values().cloned().collect();
        let rest: Vec<TaskId> = self
            .jobs
            .keys()
            .filter(|id| !self.board.active().contains_key(*id))
            .cloned()
            .collect();
        out.extend(self.app.eng.store.get_many(&rest).unwrap_or_default());
        out.sort_by_key(|t| self.board.rank_of(t.id()));
        out
    }

    /// tmux mode's safety net: ends panes past their output limit (the timer thread that
    /// watches a pane's log lives in the process that started it, which may be a run
    /// before this one), reports dead panes whose hook did not, and removes the panes of
    /// sessions whose end is recorded.
    fn sweep_tmux(&self) {
        let socket = tmux_socket(self.app.ws());
        if !socket.exists() {
            return;
        }
        // One listing serves the output limits and, after the sweep's reports, the
        // removal of dead panes (a pane that dies meanwhile is removed next time).
        let panes = session::tmux_list(&socket).unwrap_or_default();
        let ws = self.app.ws();
        session::tmux_end_floods(&socket, &panes, |task, _| {
            TaskId::new(task).ok().map(|id| ws.output_log(&id))
        });
        let exe = self.opts.warden_exe.clone();
        let root = self.app.ws().root.clone();
        // A task whose reports keep failing (a broken `warden.toml`) waits out its
        // backoff: the pass's own report of the pane says why, and is retried with it.
        let waits = |t: &str| {
            TaskId::new(t).ok().is_some_and(|id| {
                self.failing
                    .get(&id)
                    .is_some_and(|f| f.retry_at > Instant::now())
            })
        };
        // Each report runs on a thread of its own, looked at again by the next sweeps:
        // a report stops what its session left running first, up to `kill_after_s`
        // for a process that ignores TERM, and the run went still meanwhile (every
        // other task's next step waited).
        let mut sweeping = self.sweeping.lock().unwrap_or_else(|e| e.into_inner());
        let _ = session::tmux_sweep(&socket, |p| {
            match (&p.task_id, &p.session_id, p.dead_status) {
                (Some(t), Some(s), Some(code)) if !waits(t) => match sweeping.get(s) {
                    Some(h) if !h.is_finished() => false,
                    Some(_) => sweeping
                        .remove(s)
                        .is_some_and(|h| h.join().unwrap_or(false)),
                    None => {
                        let (exe, root) = (exe.clone(), root.clone());
                        let (task, sid, why) = (t.clone(), s.clone(), p.why.clone());
                        let report = move || {
                            session::report_exit_why(&exe, &root, &task, &sid, code, why.as_deref())
                                .is_ok()
                        };
                        match std::thread::Builder::new()
                            .name(format!("warden-sweep-{s}"))
                            .spawn(report)
                        {
                            Ok(h) => {
                                sweeping.insert(s.clone(), h);
                            }
                            Err(_) => {
                                // No thread to be had: reported here, as before.
                                let (exe, root) = (&self.opts.warden_exe, &self.app.ws().root);
                                return session::report_exit_why(
                                    exe,
                                    root,
                                    t,
                                    s,
                                    code,
                                    p.why.as_deref(),
                                )
                                .is_ok();
                            }
                        }
                        false
                    }
                },
                _ => false,
            }
        });
        drop(sweeping);
        // Dead panes whose end is recorded are removed, so the server ends with its last
        // session instead of keeping their scrollback for ever.
        for p in &panes {
            let (Some(t), Some(s)) = (&p.task_id, &p.session_id) else {
                continue;
            };
            if !p.dead {
                continue;
            }
            // A task that is gone has nothing to report; a store that cannot be read
            // says nothing, and the pane stays until it can (removed unreported, its end
            // would be recorded later with an unknown code).
            let ended = TaskId::new(t)
                .ok()
                .is_none_or(|id| match self.app.eng.store.get(&id) {
                    Ok(Some(task)) => task.sessions().iter().any(|r| &r.id == s && r.ended),
                    Ok(None) => true,
                    Err(_) => false,
                });
            if ended {
                let _ = session::tmux_remove(&socket, &p.name);
                if let Ok(id) = TaskId::new(t) {
                    SessionFiles::of(ws, &id, s).remove();
                }
            }
        }
    }

    /// At the end of a run: dead panes removed, and the tmux server with them when no
    /// session is left on it.
    fn end_tmux(&self) {
        if self.opts.mode != Mode::Tmux && !tmux_socket(self.app.ws()).exists() {
            return;
        }
        self.sweep_tmux();
        // The sweep's reports still running finish before the run does.
        let running: Vec<_> =
            std::mem::take(&mut *self.sweeping.lock().unwrap_or_else(|e| e.into_inner()))
                .into_values()
                .collect();
        for h in running {
            let _ = h.join();
        }
        let socket = tmux_socket(self.app.ws());
        if socket.exists() && session::tmux_list(&socket).is_ok_and(|p| p.is_empty()) {
            let _ = session::tmux_kill_server(&socket);
        }
    }

    /// Writes `.warden/continue.md`: what was in flight, and what to do next. Written
    /// whenever the in-flight set changes, so it is there whatever ends the run (a
    /// kill -9 included); removed when a run ends idle.
    fn write_continue(&mut self, looked: &[Task], why: &str) {
        let active: Vec<&Task> = looked
            .iter()
            .filter(|t| {
                self.jobs.contains_key(t.id())
                    || t.open_sessions().next().is_some()
                    || matches!(t.status(), Status::Working | Status::AgentReview)
            })
            .collect();
        let key: Vec<String> = active
            .iter()
            .map(|t| format!("{}:{}:{}", t.id(), t.status(), t.version()))
            .collect();
        if self.in_flight.as_ref() == Some(&key) && why.starts_with("the run was killed") {
            return;
        }
        self.in_flight = Some(key);
        let mut s = format!(
            "# Resume\n\nStopped {} — {why}\n\n## In flight\n\n",
            Timestamp::now()
        );
        if active.is_empty() {
            s.push_str("- nothing\n");
        }
        for t in &active {
            let phases: Vec<String> = t
                .phases()
                .iter()
                .map(|(p, st)| format!("{p}={st}"))
                .collect();
            let sessions: Vec<&str> = t.open_sessions().map(|r| r.id.as_str()).collect();
            s.push_str(&format!(
                "- {} ({}): {}{}\n",
                t.id(),
                t.status(),
                phases.join(" "),
                if sessions.is_empty() {
                    String::new()
                } else {
                    format!("; session {} may still be running", sessions.join(", "))
                }
            ));
        }
        s.push_str("\n## Next steps\n\n- Run `warden run` again: live sessions are adopted, gone ones are reported, and no succeeded phase runs again.\n- `warden task list --status stuck` shows what needs a person.\n");
        let ws = self.app.ws();
        let existed = ws.continue_md().exists();
        let _ = files::write_atomic(&ws.continue_md(), s.as_bytes());
        if !existed {
            self.app.eng.sync_state_md();
        }
    }
}

/// The outcomes between two looks at a task.
fn outcomes(
    t: &Task,
    before: &Seen,
    cur: &Seen,
    limits: &warden_core::model::Limits,
) -> Vec<Outcome> {
    let task = t.id().clone();
    let mut out = Vec::new();
    if cur.attempts > before.attempts {
        out.push(Outcome::AttemptFailed {
            task: task.clone(),
            attempt: cur.attempts,
            max: t.spec.max_attempts,
            reason: t.last_failure().map(str::to_owned),
        });
    }
    if cur.healing.is_some()
        && cur.healing != before.healing
        && let Some(phase) = cur.healing
    {
        out.push(Outcome::Healing {
            task: task.clone(),
            phase,
        });
    }
    if cur.crash_count > before.crash_count {
        out.push(Outcome::Crashed {
            task: task.clone(),
            crash_count: cur.crash_count,
            threshold: limits.crash_threshold,
            waits_for_respawn: cur.status == Status::Working
                && t.spec.workflow == warden_core::model::WorkflowKind::Review,
        });
    } else if cur.dead
        && !before.dead
        && cur.status == before.status
        && t.last_failure()
            .is_some_and(|f| f.starts_with("the session could not start"))
    {
        out.push(Outcome::SessionFailed {
            task: task.clone(),
            error: t.last_failure().map(str::to_owned),
        });
    }
    if cur.status != before.status {
        match cur.status {
            Status::Done => out.push(Outcome::Done {
                task,
                merged: t.phases().get(warden_core::model::Phase::MergeRi)
                    == warden_core::model::PhaseStatus::Success,
            }),
            Status::Cancelled => out.push(Outcome::Cancelled { task }),
            Status::Stuck => out.push(Outcome::Stuck {
                task,
                reason: t.last_failure().map(str::to_owned),
            }),
            Status::Reviewing => out.push(Outcome::NeedsReview { task }),
            Status::Clarification => out.push(Outcome::Question { task }),
            Status::Working if matches!(before.status, Status::AgentReview | Status::Reviewing) => {
                out.push(Outcome::BackToWorker {
                    task,
                    reason: t.feedback().map(str::to_owned),
                })
            }
            _ => {}
        }
    }
    out
}

/// How a run that went idle ended (see [`Idle`]).
fn idle_summary(board: &Board, failing: Vec<StepFailure>) -> Idle {
    let mut idle = Idle {
        code: ExitCode::Ok,
        done: 0,
        total: 0,
        needs_person: Vec::new(),
        stuck_or_dead: Vec::new(),
        blocked: Vec::new(),
        blocked_by: Vec::new(),
        failing,
    };
    for (id, status) in board.leaves() {
        let failed = idle.failing.iter().any(|f| f.task == *id);
        match status {
            Status::Cancelled => continue,
            Status::Done => idle.done += 1,
            _ if failed => {}
            Status::Reviewing | Status::Clarification => idle.needs_person.push(id.clone()),
            Status::Pending => {
                idle.blocked.push(id.clone());
                if let Some((waits_for, status, by)) = board.unmet(id) {
                    idle.blocked_by.push(BlockedBy {
                        task: id.clone(),
                        waits_for,
                        status,
                        needed_by: (by != id).then(|| by.clone()),
                    });
                }
            }
            Status::Stuck | Status::Working | Status::AgentReview => {
                idle.stuck_or_dead.push(id.clone())
            }
        }
        idle.total += 1;
    }
    // Blocked tasks wait for whatever blocks them: a person's review is a person's
    // wait; with nothing else left they are blocked for ever.
    idle.code = if !idle.stuck_or_dead.is_empty() || !idle.failing.is_empty() {
        ExitCode::StuckOrDead
    } else if !idle.needs_person.is_empty() {
        ExitCode::NeedsPerson
    } else if !idle.blocked.is_empty() {
        ExitCode::StuckOrDead
    } else {
        ExitCode::Ok
    };
    idle
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_core::model::Phase;

    #[test]
    fn a_failing_task_waits_longer_after_each_failure_up_to_a_minute() {
        let secs: Vec<u64> = [1, 2, 3, 4, 6, 7, 40, u32::MAX]
            .map(|n| Failing::backoff(n).as_secs())
            .into();
        assert_eq!(secs, [1, 2, 4, 8, 32, 60, 60, 60]);
    }

    fn id(s: &str) -> TaskId {
        TaskId::new(s).unwrap()
    }

    fn ids(v: &[(TaskId, Action)]) -> Vec<&str> {
        v.iter().map(|(i, _)| i.as_str()).collect()
    }

    #[test]
    fn a_pass_runs_quick_steps_and_heavy_ones_up_to_its_slots_with_spare_starts() {
        let wanted = vec![
            (id("w"), Action::RunPhase(Phase::Prechecks)),
            (
                id("gone"),
                Action::ReportGone {
                    session: "s".into(),
                },
            ),
            (id("a"), Action::Start),
            (id("b"), Action::Start),
            (id("c"), Action::Start),
            (id("d"), Action::Start),
            (id("e"), Action::Start),
            (id("f"), Action::Start),
            (id("g"), Action::Start),
        ];
        // Two slots: the phase and one start, the quick step beside them; the next starts
        // (two per slot) are spares.
        let (chosen, spares) = choose(wanted.clone(), 2, 16);
        assert_eq!(ids(&chosen), ["w", "gone", "a"]);
        assert_eq!(spares, [id("b"), id("c"), id("d"), id("e")]);
        // No slot: quick steps only, and nothing to spare.
        let (chosen, spares) = choose(wanted.clone(), 0, 16);
        assert_eq!(ids(&chosen), ["gone"]);
        assert!(spares.is_empty());
        // The thread limit bounds what runs at once.
        let (chosen, _) = choose(wanted, 8, 2);
        assert_eq!(ids(&chosen), ["w", "gone"]);
    }
}
