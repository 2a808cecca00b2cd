//! The simulated world: a store (tasks and the event log, committed change by change),
//! the worktrees and TASK.md files as far as decisions see them, session processes with
//! agent behaviours, exit reports in flight, people, runners that can die, and a clock.
//!
//! Everything that decides is Warden's own code: `schedule::next` picks the runner's
//! actions, the `schedule::react_*` functions and `ops` decide what results mean. The
//! world only plays the parts Warden does not control — what an agent does, when a
//! process ends, whether a check passes, whether git conflicts — drawn from the seeded
//! generator, and checks the invariants after every step.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use warden_core::artifact::{Artifacts, Evidence, Verdict};
use warden_core::event::{Actor, Disposition, Event, EventKind};
use warden_core::exit::{self, ExitAction, ExitReport};
use warden_core::model::{
    Limits, Phase, PhaseStatus, Role, Status, Task, TaskId, TaskSpec, WorkSpec, WorkflowKind,
};
use warden_core::ops::{self, Change, Ctx, GuardOutcome, Initial, Needs, TransitionInput};
use warden_core::retry::RetryRequest;
use warden_core::schedule::{self, Action, Liveness, StopReason, View};
use warden_core::tree::TreeIndex;

use crate::rng::Rng;

/// How a run is set up.
#[derive(Clone, Debug)]
pub struct Options {
    /// Steps before the run drains (each advances the clock a little).
    pub steps: usize,
    /// Runners supervising the same store.
    pub runners: usize,
    /// Agents succeed eventually and people help (respawn, retry, approve) but never
    /// cancel: every task must end `done`.
    pub liveness: bool,
    /// Print every step.
    pub trace: bool,
    /// Some seeds put tasks under groups, with dependencies on groups (off: the flat
    /// plans of the simulator's first version, whose seeds replay as they were found).
    pub groups: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            steps: 250,
            runners: 2,
            liveness: false,
            trace: false,
            groups: true,
        }
    }
}

/// An invariant that broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The seed that breaks it.
    pub seed: u64,
    /// The step it broke at.
    pub step: usize,
    /// Which invariant.
    pub invariant: &'static str,
    /// What was seen.
    pub detail: String,
    /// The seed ran with flat plans only (`--flat`).
    pub flat: bool,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} broke \"{}\" at step {}: {}\nreplay: scripts/sim --seed {}{}",
            self.seed,
            self.invariant,
            self.step,
            self.detail,
            self.seed,
            if self.flat { " --flat" } else { "" }
        )
    }
}

/// What a run did, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Steps taken (with the drain).
    pub steps: usize,
    /// Events written.
    pub events: usize,
    /// Sessions started.
    pub sessions: usize,
    /// Tasks done at the end.
    pub done: usize,
    /// Tasks at the start.
    pub tasks: usize,
    /// Runner kills.
    pub kills: usize,
    /// Sessions ended as never started (their runner was killed before starting them).
    pub unstarted: usize,
    /// Tasks with children at the start.
    pub groups: usize,
    /// `depends_on` entries at the start that name a group or belong to one.
    pub group_deps: usize,
}

/// What an agent does in its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Behaviour {
    /// Writes work and `## Handoff`, runs `task complete`, then ends after `linger` ms
    /// (writing once more on the way when `late_edit`), or never (`None`).
    Good {
        linger: Option<u64>,
        late_edit: bool,
    },
    /// Writes `## Handoff` and exits; exit monitoring advances it.
    ExitOnly,
    /// Exits 1 without its artifact.
    Crash,
    /// Never ends on its own.
    Hang,
    /// Asks a question (clarification) and exits.
    Clarify,
    /// A reviewer: writes a verdict and asks for the transition (`via_exit`: only exits).
    Review { pass: bool, via_exit: bool },
    /// A reviewer that exits without a verdict.
    Silent,
    /// Shell or process work ending with this code.
    Shell { code: i32 },
    /// A heal session; `fixes` the cause or not.
    Heal { fixes: bool },
}

/// A session process.
#[derive(Clone, Debug)]
struct Proc {
    task: TaskId,
    session: String,
    behaviour: Behaviour,
    stage: u8,
    next_at: Timestamp,
    alive: bool,
    /// Its host (`warden session-run`) is alive to report its end.
    host: bool,
    /// TERM received at (the host KILLs it `kill_after_s` later).
    term_at: Option<Timestamp>,
    /// Ignores TERM (ends only on KILL).
    stubborn: bool,
    /// When it started (its host ends it at `phase_timeout_s`).
    started: Timestamp,
    /// Times `task complete` was refused by a failed guard.
    guard_tries: u8,
}

/// The world of one task outside the store: its files and its git branch.
#[derive(Clone, Debug, Default)]
struct Outside {
    handoff: bool,
    verdict: Option<Verdict>,
    /// `## Handoff` and `## Review` sections written so far: agents append, so each
    /// session's is a new one (an earlier round's moves nothing).
    handoffs: u32,
    reviews: u32,
    /// Uncommitted edits in the worktree, since when.
    dirty: Option<Timestamp>,
    /// The branch holds committed work.
    branch_work: bool,
    /// The branch's work reached the base branch.
    merged: bool,
    /// The prechecks fail until a heal (or a retry) fixes them.
    prechecks_broken: bool,
    /// The worktree exists.
    worktree: bool,
    /// Agents of this task behave well from now on (liveness mode, after a few tries).
    tamed: bool,
    /// Sessions started, for taming.
    sessions: u32,
}

/// An exit report in flight.
#[derive(Clone, Debug)]
struct Pending {
    task: TaskId,
    session: Option<String>,
    code: i32,
    due: Timestamp,
}

/// A step a runner performs.
#[derive(Clone, Debug)]
struct Job {
    task: TaskId,
    action: Action,
    /// 0: the I/O (or, for a session, recording it); 1: starting the process.
    stage: u8,
    due: Timestamp,
}

#[derive(Clone, Debug)]
struct Runner {
    alive: bool,
    up_since: Timestamp,
    restart_at: Option<Timestamp>,
    jobs: Vec<Job>,
}

/// The simulated world.
#[derive(Debug)]
pub struct World {
    seed: u64,
    rng: Rng,
    now: Timestamp,
    limits: Limits,
    opts: Options,
    tasks: BTreeMap<TaskId, Task>,
    log: Vec<Event>,
    outside: BTreeMap<TaskId, Outside>,
    procs: BTreeMap<String, Proc>,
    pending: Vec<Pending>,
    runners: Vec<Runner>,
    leases: BTreeMap<TaskId, (usize, Timestamp)>,
    /// Sessions whose process really ended, or that never started.
    ended: BTreeSet<String>,
    /// Sessions asked to stop before their host started: the stop marker
    /// (`sessions/<id>.stop`) a host finds before it starts the program.
    stop_marks: BTreeSet<String>,
    /// When a live session stopped belonging to its task's current entry.
    astray_since: BTreeMap<String, Timestamp>,
    /// Until when a killed runner's lease kept other runners off a task.
    blocked_until: BTreeMap<TaskId, Timestamp>,
    step: usize,
    report: Report,
    /// An invariant a commit broke (checked where only the commit can see it).
    broken: Option<(&'static str, String)>,
}

const TTL_MS: i64 = 30_000;
/// The owner of a lease whose runner was killed: it lapses at its expiry.
const DEAD: usize = usize::MAX;
const MAX_PARALLEL: usize = 3;
/// Slack for a runner's ticks and steps on top of the contract's own delays.
const SLACK_MS: i64 = 15_000;

fn ms(n: i64) -> SignedDuration {
    SignedDuration::from_millis(n)
}

fn tid(s: &str) -> TaskId {
    TaskId::new(s).unwrap_or_else(|_| unreachable!("simulator ids are valid"))
}

impl World {
    /// A world for `seed`: a few tasks of every kind.
    pub fn new(seed: u64, opts: Options) -> World {
        let mut rng = Rng::new(seed);
        let limits = Limits {
            handoff_grace_s: rng.range(1, 10),
            kill_after_s: rng.range(1, 5),
            retry_backoff_s: rng.range(0, 3),
            retry_backoff_max_s: 20,
            phase_timeout_s: rng.range(30, 240),
            ..Limits::default()
        };
        let now = Timestamp::from_second(1_700_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let runners = (0..opts.runners.max(1))
            .map(|_| Runner {
                alive: true,
                up_since: now,
                restart_at: None,
                jobs: Vec::new(),
            })
            .collect();
        let mut w = World {
            seed,
            rng,
            now,
            limits,
            opts,
            tasks: BTreeMap::new(),
            log: Vec::new(),
            outside: BTreeMap::new(),
            procs: BTreeMap::new(),
            pending: Vec::new(),
            runners,
            leases: BTreeMap::new(),
            ended: BTreeSet::new(),
            stop_marks: BTreeSet::new(),
            astray_since: BTreeMap::new(),
            blocked_until: BTreeMap::new(),
            step: 0,
            report: Report::default(),
            broken: None,
        };
        let n = w.rng.range(2, 5);
        // The tree's shape comes from a stream of its own, so that every other draw of a
        // seed is the one it made before groups (tests/seeds.rs replays the seeds that
        // found bugs with `groups` off).
        let mut shape = Rng::new(seed.rotate_left(29) ^ 0x6772_6f75_7073);
        let groups = if w.opts.groups {
            shape.range(0, 2) as usize
        } else {
            0
        };
        let mut gids: Vec<TaskId> = Vec::new();
        for g in 0..groups {
            let id = tid(&format!("g{g}"));
            let mut spec = TaskSpec::new(id.clone(), WorkflowKind::Review, 1);
            if !gids.is_empty() && shape.chance(0.3) {
                spec.parent = Some(gids[shape.pick(gids.len())].clone());
            } else if !gids.is_empty() && shape.chance(0.6) {
                spec.depends_on.push(gids[shape.pick(gids.len())].clone());
            }
            if let Ok(ch) = ops::create(spec, Initial::NEW, &w.ctx(Actor::Person)) {
                w.commit(ch);
            }
            w.outside.insert(id.clone(), Outside::default());
            gids.push(id);
        }
        let mut ids: Vec<TaskId> = Vec::new();
        for i in 0..n {
            let id = tid(&format!("t{i}"));
            let kind = w.rng.pick(4);
            let mut spec =
                TaskSpec::new(id.clone(), WorkflowKind::Review, w.rng.range(1, 3) as u32);
            match kind {
                0 | 1 => {
                    if w.rng.chance(0.5) {
                        spec.spec.postchecks = Some(WorkSpec::Shell("check".into()));
                    }
                    if w.rng.chance(0.3) {
                        spec.spec.prechecks = Some(WorkSpec::Shell("pre".into()));
                    }
                }
                2 => {
                    spec.workflow = WorkflowKind::Direct;
                    spec.spec.work = Some(WorkSpec::Shell("make".into()));
                    if w.rng.chance(0.7) {
                        spec.spec.postchecks = Some(WorkSpec::Shell("check".into()));
                    }
                }
                _ => {
                    spec.workflow = WorkflowKind::Direct;
                    spec.spec.work = Some(WorkSpec::Agent("do it".into()));
                    spec.spec.postchecks = Some(WorkSpec::Shell("check".into()));
                    if w.rng.chance(0.4) {
                        spec.spec.prechecks = Some(WorkSpec::Shell("pre".into()));
                    }
                }
            }
            if !ids.is_empty() && w.rng.chance(0.4) {
                let d = ids[w.rng.pick(ids.len())].clone();
                spec.depends_on.push(d);
            }
            if !gids.is_empty() {
                if shape.chance(0.7) {
                    spec.parent = Some(gids[shape.pick(gids.len())].clone());
                }
                if shape.chance(0.3) {
                    spec.depends_on.push(gids[shape.pick(gids.len())].clone());
                }
                // What could never be met is dropped, as validation would refuse it.
                while !spec.depends_on.is_empty() && w.deadlocked_with(&spec) {
                    spec.depends_on.pop();
                }
            }
            let ch = ops::create(spec, Initial::NEW, &w.ctx(Actor::Person));
            if let Ok(ch) = ch {
                w.commit(ch);
            }
            let broken = w.rng.chance(0.3);
            w.outside.insert(
                id.clone(),
                Outside {
                    prechecks_broken: broken,
                    ..Outside::default()
                },
            );
            ids.push(id);
        }
        w.report.tasks = w.tasks.len();
        let is_group = |id: &TaskId| w.tasks.values().any(|t| t.spec.parent.as_ref() == Some(id));
        w.report.groups = w.tasks.keys().filter(|id| is_group(id)).count();
        w.report.group_deps = w
            .tasks
            .values()
            .flat_map(|t| t.spec.depends_on.iter().map(move |d| (t.id(), d)))
            .filter(|(t, d)| is_group(t) || is_group(d))
            .count();
        w
    }

    fn ctx(&self, actor: Actor) -> Ctx<'static> {
        Ctx {
            now: self.now,
            actor,
            limits: self.limits,
            task_file: "TASK.md",
        }
    }

    fn trace(&self, what: &str) {
        if self.opts.trace {
            // The trace is the simulator's output, asked for with --trace.
            #[allow(clippy::print_stdout)]
            {
                println!("[{:>4} {}] {what}", self.step, self.now);
            }
        }
    }

    fn violation(&self, invariant: &'static str, detail: String) -> Violation {
        Violation {
            seed: self.seed,
            step: self.step,
            invariant,
            detail,
            flat: !self.opts.groups,
        }
    }

    /// Would the stored tasks with `spec` added wait on each other for ever?
    fn deadlocked_with(&self, spec: &TaskSpec) -> bool {
        let tasks: Vec<(&TaskId, Option<&TaskId>, &[TaskId])> = self
            .tasks
            .values()
            .map(|t| &t.spec)
            .chain([spec])
            .map(|s| (&s.id, s.parent.as_ref(), &s.depends_on[..]))
            .collect();
        !warden_core::tree::deadlocks(&tasks).is_empty()
    }

    /// Is the task finished as a dependency: a leaf done, a group with every leaf
    /// under it done or cancelled and at least one done (the derived status, worked out
    /// here from the tasks themselves, not through `TreeIndex`).
    fn finished(&self, id: &TaskId) -> bool {
        let mut leaves = Vec::new();
        let mut todo = vec![id.clone()];
        while let Some(at) = todo.pop() {
            // What lies under a group a person cancelled is cancelled with it.
            if self
                .tasks
                .get(&at)
                .is_some_and(|t| t.status() == Status::Cancelled)
            {
                leaves.push(Status::Cancelled);
                continue;
            }
            let kids: Vec<TaskId> = self
                .tasks
                .values()
                .filter(|t| t.spec.parent.as_ref() == Some(&at))
                .map(|t| t.id().clone())
                .collect();
            if kids.is_empty() {
                leaves.extend(self.tasks.get(&at).map(|t| t.status()));
            }
            todo.extend(kids);
        }
        leaves.contains(&Status::Done)
            && leaves
                .iter()
                .all(|&s| matches!(s, Status::Done | Status::Cancelled))
    }

    /// A dependency of the task or of one of its groups that is not finished.
    fn waiting_on(&self, id: &TaskId) -> Option<TaskId> {
        let mut at = self.tasks.get(id);
        while let Some(t) = at {
            if let Some(d) = t.spec.depends_on.iter().find(|d| !self.finished(d)) {
                return Some(d.clone());
            }
            at = t.spec.parent.as_ref().and_then(|p| self.tasks.get(p));
        }
        None
    }

    // -----------------------------------------------------------------------------------
    // The store

    /// Commits a decided change, fenced by version as the stores do.
    fn commit(&mut self, ch: Change) -> bool {
        let id = match (&ch.before, &ch.after) {
            (Some(t), _) | (None, Some(t)) => t.id().clone(),
            (None, None) => return false,
        };
        let stored = self.tasks.get(&id).map_or(0, |t| t.version());
        if stored != ch.before.as_ref().map_or(0, |t| t.version()) {
            return false;
        }
        // A runner starts a task only once its dependencies and its groups' are done.
        if let (Some(b), Some(a)) = (&ch.before, &ch.after)
            && b.status() == Status::Pending
            && a.status() == Status::Working
            && ch.events.iter().all(|e| e.actor == Actor::Runner)
            && let Some(d) = self.waiting_on(&id)
            && self.broken.is_none()
        {
            self.broken = Some((
                "a task starts only when its dependencies and its groups' are done",
                format!("{id} started while {d} was not done"),
            ));
        }
        for mut ev in ch.events {
            ev.seq = self.log.len() as u64 + 1;
            self.trace(&format!("  {} {}", ev.task, describe(&ev.kind)));
            self.log.push(ev);
        }
        match ch.after {
            Some(t) => {
                self.tasks.insert(id, t);
            }
            None => {
                self.tasks.remove(&id);
            }
        }
        true
    }

    fn task(&self, id: &TaskId) -> Option<Task> {
        self.tasks.get(id).cloned()
    }

    fn artifacts(&self, id: &TaskId) -> Artifacts {
        let o = self.outside.get(id).cloned().unwrap_or_default();
        let ev = |name: &str, nth: u32| Evidence {
            nth,
            section: name.into(),
            digest: "sim".into(),
        };
        Artifacts {
            handoff: o.handoff.then(|| ev("Handoff", o.handoffs)),
            review: o.verdict.map(|_| ev("Review", o.reviews)),
            verdict: o.verdict,
            ..Default::default()
        }
    }

    fn outside(&mut self, id: &TaskId) -> &mut Outside {
        self.outside.entry(id.clone()).or_default()
    }

    /// What `pipeline::prepare_transition` does, against the simulated worktree: commit,
    /// the guard, merge-ri.
    fn prepare(&mut self, t: &Task, needs: Needs, input: &mut TransitionInput) {
        let id = t.id().clone();
        if needs.commit {
            let committed = self.outside(&id).dirty.take().is_some();
            if committed {
                self.outside(&id).branch_work = true;
            }
            input.phases.push((
                Phase::Commit,
                if committed {
                    PhaseStatus::Success
                } else {
                    PhaseStatus::Skipped
                },
                None,
            ));
            if t.status() == Status::Working && t.phases().get(Phase::Work) != PhaseStatus::Success
            {
                input
                    .phases
                    .insert(0, (Phase::Work, PhaseStatus::Success, None));
            }
        }
        if needs.guard {
            let tamed = self.outside(&id).tamed;
            let g = if self.rng.chance(0.03) && !tamed {
                GuardOutcome::Error("sh: check: not found".into())
            } else if self.rng.chance(if tamed { 0.1 } else { 0.35 }) {
                GuardOutcome::Fail("1 test failed".into())
            } else {
                GuardOutcome::Pass
            };
            match &g {
                GuardOutcome::Pass => {
                    input
                        .phases
                        .push((Phase::Postchecks, PhaseStatus::Success, None))
                }
                GuardOutcome::Fail(tail) => {
                    input
                        .phases
                        .push((Phase::Postchecks, PhaseStatus::Failed, Some(tail.clone())))
                }
                GuardOutcome::Error(_) => {}
            }
            input.guard = Some(g);
        } else if needs.commit {
            input
                .phases
                .push((Phase::Postchecks, PhaseStatus::Skipped, None));
        }
        if needs.merge_ri
            && !matches!(
                input.guard,
                Some(GuardOutcome::Fail(_) | GuardOutcome::Error(_))
            )
        {
            let o = self.outside(&id).clone();
            let status = if o.branch_work && self.rng.chance(0.05) && !o.tamed {
                PhaseStatus::Failed
            } else if o.branch_work {
                self.outside(&id).merged = true;
                PhaseStatus::Success
            } else {
                PhaseStatus::Skipped
            };
            let detail = (status == PhaseStatus::Failed).then(|| "conflict in lib.rs".to_owned());
            input.phases.push((Phase::MergeRi, status, detail));
        }
    }

    /// A transition asked for by an agent or a person, as `App::transition` decides it.
    fn transition(&mut self, id: &TaskId, to: Status, actor: Actor) -> bool {
        let Some(t) = self.task(id) else { return false };
        let arts = self.artifacts(id);
        let ctx = self.ctx(actor);
        let Ok((needs, _)) = ops::check_transition(&t, to, &arts, &ctx) else {
            return false;
        };
        let mut input = TransitionInput {
            artifacts: arts,
            ..Default::default()
        };
        self.prepare(&t, needs, &mut input);
        let Ok(ch) = ops::transition(&t, to, &input, &ctx) else {
            return false;
        };
        let failed = matches!(ch.outcome, ops::Outcome::GuardFailed { .. });
        let ok = self.commit(ch) && !failed;
        if actor == Actor::Person {
            self.stop_astray(id);
        }
        ok
    }

    /// A session-end report, as `App::exited` decides it.
    fn exited(&mut self, id: &TaskId, report: &ExitReport) {
        let Some(t) = self.task(id) else { return };
        let arts = self.artifacts(id);
        let ctx = self.ctx(Actor::Runner);
        let d = exit::decide(&t, &arts, report, &self.limits);
        let mut input = TransitionInput {
            artifacts: arts.clone(),
            ..Default::default()
        };
        if let ExitAction::Advance {
            to, guard: true, ..
        } = &d.action
            && let Ok((needs, _)) = ops::check_transition(&t, *to, &arts, &ctx)
        {
            self.prepare(&t, needs, &mut input);
        }
        if let Ok(ch) = ops::exited(&t, report, &input, &ctx) {
            self.commit(ch);
        }
    }

    /// A person's change stops the sessions that no longer belong, with or without a
    /// runner (`App::stop_stale_sessions`; the session's host KILLs after its grace).
    fn stop_astray(&mut self, id: &TaskId) {
        let Some(t) = self.task(id) else { return };
        let astray: Vec<String> = t
            .open_sessions()
            .filter(|r| {
                r.stop.is_none()
                    && !(r.entry == t.entry() && ops::role_for(t.status()) == Some(r.role))
            })
            .map(|r| r.id.clone())
            .collect();
        for sid in astray {
            self.signal(&sid, false);
            let reason = StopReason::Moved {
                to: t.status(),
                by: Actor::Person,
            };
            if let Some(t) = self.task(id)
                && let Ok(ch) = schedule::react_stop(&t, &sid, &reason, &self.ctx(Actor::Person))
            {
                self.commit(ch);
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Processes

    fn spawn_proc(&mut self, t: &Task, session: &str, role: Role, heal: Option<Phase>) {
        let id = t.id().clone();
        self.report.sessions += 1;
        let liveness = self.opts.liveness;
        let o = self.outside(&id);
        o.sessions += 1;
        if liveness && o.sessions > 3 {
            o.tamed = true;
        }
        let tamed = self.outside(&id).tamed;
        let r = &mut self.rng;
        let behaviour = if let Some(p) = heal
            && p != Phase::Work
        {
            Behaviour::Heal {
                fixes: tamed || r.chance(0.7),
            }
        } else if let Some(WorkSpec::Shell(_) | WorkSpec::Process(_)) = &t.spec.spec.work {
            Behaviour::Shell {
                code: if tamed || r.chance(0.7) { 0 } else { 1 },
            }
        } else if role == Role::Reviewer {
            let roll = r.range(0, 99);
            if tamed {
                Behaviour::Review {
                    pass: true,
                    via_exit: roll < 50,
                }
            } else {
                match roll {
                    0..=44 => Behaviour::Review {
                        pass: true,
                        via_exit: roll < 15,
                    },
                    45..=79 => Behaviour::Review {
                        pass: false,
                        via_exit: roll < 55,
                    },
                    80..=89 => Behaviour::Silent,
                    _ => Behaviour::Hang,
                }
            }
        } else if t.spec.workflow == WorkflowKind::Direct {
            // A direct task's agent works and exits; the guard decides.
            Behaviour::Shell {
                code: if tamed || r.chance(0.8) { 0 } else { 1 },
            }
        } else {
            let roll = r.range(0, 99);
            let linger = match r.range(0, 9) {
                0 => None,
                1..=3 => Some(r.range(0, 20_000)),
                _ => Some(r.range(0, 500)),
            };
            let late_edit = r.chance(0.4);
            if tamed {
                Behaviour::Good {
                    linger: Some(r.range(0, 3_000)),
                    late_edit,
                }
            } else {
                match roll {
                    0..=49 => Behaviour::Good { linger, late_edit },
                    50..=64 => Behaviour::ExitOnly,
                    65..=79 => Behaviour::Crash,
                    80..=87 => Behaviour::Clarify,
                    _ => Behaviour::Hang,
                }
            }
        };
        let stubborn = !tamed && self.rng.chance(0.1);
        let next_at = self.now + ms(self.rng.range(10, 3_000) as i64);
        self.trace(&format!("  process {session} ({role}) {behaviour:?}"));
        self.procs.insert(
            session.to_owned(),
            Proc {
                task: id,
                session: session.to_owned(),
                behaviour,
                stage: 0,
                next_at,
                alive: true,
                host: true,
                term_at: None,
                stubborn,
                started: self.now,
                guard_tries: 0,
            },
        );
    }

    /// TERM (or KILL) to a session's process group.
    fn signal(&mut self, session: &str, kill: bool) {
        let now = self.now;
        // The stop marker comes first (`stop_session`): a host that has not started yet
        // finds it and never starts the program.
        self.stop_marks.insert(session.to_owned());
        let Some(p) = self.procs.get_mut(session) else {
            return;
        };
        if !p.alive {
            return;
        }
        if kill {
            self.end_proc(session, 137);
            return;
        }
        if p.term_at.is_none() {
            p.term_at = Some(now);
            if !p.stubborn {
                p.next_at = now + ms(self.rng.range(0, 2_000) as i64);
                p.stage = 100;
            }
        }
    }

    /// A process ends: its host reports it (maybe twice, maybe late), unless the host
    /// is gone.
    fn end_proc(&mut self, session: &str, code: i32) {
        let Some(p) = self.procs.get_mut(session) else {
            return;
        };
        if !p.alive {
            return;
        }
        p.alive = false;
        let (task, host) = (p.task.clone(), p.host);
        self.ended.insert(session.to_owned());
        self.astray_since.remove(session);
        self.trace(&format!("  process {session} ended ({code})"));
        if host {
            let due = self.now + ms(self.rng.range(0, 800) as i64);
            self.pending.push(Pending {
                task: task.clone(),
                session: Some(session.to_owned()),
                code,
                due,
            });
            // A second report of the same end (a tmux hook and the sweep; a retry).
            if self.rng.chance(0.15) {
                let due = self.now + ms(self.rng.range(0, 5_000) as i64);
                self.pending.push(Pending {
                    task: task.clone(),
                    session: Some(session.to_owned()),
                    code,
                    due,
                });
            }
        }
        // The agent harness's own hook, without Warden's session id.
        if self.rng.chance(0.08) {
            let due = self.now + ms(self.rng.range(0, 1_500) as i64);
            self.pending.push(Pending {
                task,
                session: None,
                code,
                due,
            });
        }
    }

    /// One move of a live process's script.
    fn proc_move(&mut self, session: &str) {
        let Some(mut p) = self.procs.get(session).cloned() else {
            return;
        };
        if !p.alive {
            return;
        }
        if p.stage == 100 {
            self.end_proc(session, 143);
            return;
        }
        let later = |w: &mut World, p: &mut Proc, lo: u64, hi: u64| {
            p.next_at = w.now + ms(w.rng.range(lo, hi) as i64);
            p.stage += 1;
            w.procs.insert(p.session.clone(), p.clone());
        };
        let id = p.task.clone();
        match (p.behaviour, p.stage) {
            (Behaviour::Hang, _) => {
                p.next_at = self.now + ms(3_600_000);
                self.procs.insert(p.session.clone(), p);
            }
            (Behaviour::Crash, _) | (Behaviour::Silent, _) => {
                let code = if matches!(p.behaviour, Behaviour::Crash) {
                    1
                } else {
                    0
                };
                self.end_proc(session, code);
            }
            (Behaviour::Shell { code }, _) => {
                let now = self.now;
                self.outside(&id).dirty.get_or_insert(now);
                self.end_proc(session, code);
            }
            (Behaviour::Heal { fixes }, _) => {
                if fixes {
                    self.outside(&id).prechecks_broken = false;
                    self.outside(&id).tamed = true;
                }
                self.end_proc(session, 0);
            }
            (Behaviour::ExitOnly, _) => {
                let now = self.now;
                let o = self.outside(&id);
                o.dirty.get_or_insert(now);
                o.handoff = true;
                o.handoffs += 1;
                self.end_proc(session, 0);
            }
            (Behaviour::Clarify, _) => {
                self.transition(&id, Status::Clarification, Actor::Agent);
                self.end_proc(session, 0);
            }
            (Behaviour::Good { .. }, 0) => {
                let now = self.now;
                let o = self.outside(&id);
                o.dirty.get_or_insert(now);
                o.handoff = true;
                o.handoffs += 1;
                later(self, &mut p, 10, 1_000);
            }
            (Behaviour::Good { linger, .. }, 1) => {
                let ok = self.transition(&id, Status::AgentReview, Actor::Agent);
                if !ok
                    && p.guard_tries < 2
                    && self
                        .task(&id)
                        .is_some_and(|t| t.status() == Status::Working)
                {
                    // The guard failed: the agent fixes and tries again.
                    p.guard_tries += 1;
                    let now = self.now;
                    self.outside(&id).dirty.get_or_insert(now);
                    p.next_at = self.now + ms(self.rng.range(100, 2_000) as i64);
                    self.procs.insert(p.session.clone(), p);
                    return;
                }
                if !ok {
                    self.end_proc(session, 1);
                    return;
                }
                match linger {
                    None => {
                        p.stage = 3;
                        p.next_at = self.now + ms(3_600_000);
                        self.procs.insert(p.session.clone(), p);
                    }
                    Some(d) => {
                        p.stage = 2;
                        p.next_at = self.now + ms(d as i64);
                        self.procs.insert(p.session.clone(), p);
                    }
                }
            }
            (Behaviour::Good { late_edit, .. }, 2) => {
                if late_edit {
                    let now = self.now;
                    self.outside(&id).dirty.get_or_insert(now);
                }
                self.end_proc(session, 0);
            }
            (Behaviour::Good { .. }, _) => {
                p.next_at = self.now + ms(3_600_000);
                self.procs.insert(p.session.clone(), p);
            }
            (Behaviour::Review { pass, via_exit }, _) => {
                let o = self.outside(&id);
                o.verdict = Some(if pass { Verdict::Pass } else { Verdict::Fail });
                o.reviews += 1;
                if !via_exit {
                    let to = match self.task(&id) {
                        Some(t) if pass => {
                            let _ = t;
                            Status::Reviewing
                        }
                        Some(t) if t.review_round() >= self.limits.max_review_rounds => {
                            Status::Stuck
                        }
                        _ => Status::Working,
                    };
                    self.transition(&id, to, Actor::Agent);
                }
                self.end_proc(session, 0);
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Runners

    fn live(&self, session: &str) -> Liveness {
        match self.procs.get(session) {
            Some(p) if p.alive => Liveness::Alive,
            // Ended, with its host still reporting: the host process is alive.
            Some(p)
                if p.host
                    && self
                        .pending
                        .iter()
                        .any(|r| r.session.as_deref() == Some(session)) =>
            {
                Liveness::Alive
            }
            _ => Liveness::Gone,
        }
    }

    fn busy_tasks(&self) -> BTreeSet<TaskId> {
        self.runners
            .iter()
            .flat_map(|r| r.jobs.iter().map(|j| j.task.clone()))
            .collect()
    }

    /// One pass of runner `r`: renew, ask the scheduler, claim, start steps.
    fn tick(&mut self, r: usize) {
        if !self.runners[r].alive {
            return;
        }
        let now = self.now;
        for (_, (owner, expires)) in self.leases.iter_mut() {
            if *owner == r {
                *expires = now + ms(TTL_MS);
            }
        }
        let busy = self.busy_tasks();
        let tasks: Vec<Task> = self.tasks.values().cloned().collect();
        let idx = TreeIndex::new(&tasks);
        let mut running =
            self.procs.values().filter(|p| p.alive).count() + self.runners[r].jobs.len();
        for t in idx.depth_first() {
            let id = t.id().clone();
            if busy.contains(&id) {
                continue;
            }
            if let Some((owner, expires)) = self.leases.get(&id)
                && *owner != r
                && *expires > now
            {
                continue;
            }
            let worktree = self.outside.get(&id).is_some_and(|o| o.worktree);
            let live = |s: &str| self.live(s);
            let ghosts: Vec<String> = t
                .sessions()
                .iter()
                .rev()
                .take(2)
                .filter(|r| r.ended && self.procs.get(&r.id).is_some_and(|p| p.alive))
                .map(|r| r.id.clone())
                .collect();
            let view = View {
                task: t,
                now,
                deps_done: idx.deps_done(t),
                leaf: idx.is_leaf(&id),
                worktree,
                live: &live,
                ghosts: &ghosts,
            };
            let action = schedule::next(&view, &self.limits);
            match action {
                Action::Idle => {
                    if self.leases.get(&id).is_some_and(|(o, _)| *o == r) {
                        self.leases.remove(&id);
                    }
                    continue;
                }
                Action::Wait { .. } | Action::Busy => continue,
                _ => {}
            }
            let heavy = matches!(
                action,
                Action::RunPhase(_)
                    | Action::StartSession { .. }
                    | Action::Finish
                    | Action::ResetWorktree
            );
            if heavy && running >= MAX_PARALLEL {
                continue;
            }
            if heavy {
                running += 1;
            }
            self.leases.insert(id.clone(), (r, now + ms(TTL_MS)));
            let dur = match action {
                Action::Start | Action::Stop { .. } | Action::ReportGone { .. } => {
                    self.rng.range(1, 100)
                }
                Action::StartSession { .. } => self.rng.range(10, 300),
                _ => self.rng.range(50, 4_000),
            };
            self.trace(&format!("runner {r}: {id}: {}", action.describe()));
            self.runners[r].jobs.push(Job {
                task: id,
                action,
                stage: 0,
                due: now + ms(dur as i64),
            });
        }
    }

    /// A runner's step whose I/O is done: its reaction, committed (fenced by the lease).
    fn finish_job(&mut self, r: usize, job: Job) {
        let id = job.task.clone();
        // The fence: a runner that lost its lease writes nothing.
        if self.leases.get(&id).is_none_or(|(o, _)| *o != r) {
            self.trace(&format!("runner {r}: {id}: lease lost, step dropped"));
            return;
        }
        let Some(t) = self.task(&id) else { return };
        let ctx = self.ctx(Actor::Runner);
        match job.action {
            Action::Start => {
                if let Ok(ch) = schedule::react_start(&t, &ctx) {
                    self.commit(ch);
                }
            }
            Action::RunPhase(phase) => {
                self.outside(&id).worktree = true;
                let (status, detail) = match phase {
                    Phase::MergeFi if t.spec.depends_on.is_empty() => (PhaseStatus::Skipped, None),
                    Phase::MergeFi if self.rng.chance(0.05) => (
                        PhaseStatus::Failed,
                        Some("dependency branches conflict".into()),
                    ),
                    Phase::MergeFi => (PhaseStatus::Success, None),
                    _ if t.spec.spec.prechecks.is_none() => (PhaseStatus::Skipped, None),
                    _ if self.outside(&id).prechecks_broken => {
                        (PhaseStatus::Failed, Some("pre: 1 check failed".into()))
                    }
                    _ => (PhaseStatus::Success, None),
                };
                if let Ok(ch) = schedule::react_phase(&t, phase, status, detail, &ctx) {
                    self.commit(ch);
                }
            }
            Action::StartSession { role, heal } if job.stage == 0 => {
                self.outside(&id).worktree = true;
                // At most one live session per task: the runner checks under the lock.
                if t.open_sessions().next().is_some() {
                    return;
                }
                let late = if role == Role::Reviewer && self.outside(&id).dirty.take().is_some() {
                    self.outside(&id).branch_work = true;
                    Some((PhaseStatus::Success, None))
                } else {
                    None
                };
                let session = format!("{}-{}-{}", id, role, t.sessions().len() + 1);
                if let Ok(ch) = schedule::react_spawn(&t, &session, role, heal, late, &ctx)
                    && self.commit(ch)
                {
                    let due = self.now + ms(self.rng.range(1, 200) as i64);
                    self.runners[r].jobs.push(Job {
                        task: id,
                        action: Action::StartSession { role, heal },
                        stage: 1,
                        due,
                    });
                }
            }
            Action::StartSession { role, heal } => {
                let Some(rec) = t.open_sessions().last().cloned() else {
                    return;
                };
                if self.rng.chance(0.03) {
                    // The program could not start: Warden's side, not the agent's crash.
                    if let Ok(ch) = schedule::react_start_failed(&t, &rec.id, "No such file", &ctx)
                        && self.commit(ch)
                    {
                        self.ended.insert(rec.id.clone());
                    }
                    return;
                }
                if self.stop_marks.contains(&rec.id) {
                    // The host found the stop marker: no program, no trace of a start;
                    // a runner reports the session gone, as one never started.
                    self.trace(&format!("  host of {} found its stop marker", rec.id));
                    return;
                }
                self.spawn_proc(&t, &rec.id, role, heal);
            }
            Action::Finish => {
                let arts = self.artifacts(&id);
                let Ok((needs, _)) = ops::check_transition(&t, Status::Done, &arts, &ctx) else {
                    return;
                };
                let mut input = TransitionInput {
                    artifacts: arts,
                    reason: Some("guard".into()),
                    ..Default::default()
                };
                self.prepare(&t, needs, &mut input);
                if let Ok(ch) = schedule::react_finish(&t, &input, &ctx) {
                    self.commit(ch);
                }
            }
            Action::Stop {
                session,
                reason,
                kill,
            } => {
                self.signal(&session, kill);
                let stopped = t
                    .sessions()
                    .iter()
                    .any(|s| s.id == session && s.stop.is_some());
                if !kill
                    && !stopped
                    && let Ok(ch) = schedule::react_stop(&t, &session, &reason, &ctx)
                {
                    self.commit(ch);
                }
            }
            Action::ReportGone { session } => {
                // A session with no process never ran (its runner was killed between
                // recording it and starting it): the runner finds no trace of it.
                let never = (!self.procs.contains_key(&session))
                    .then(|| schedule::react_unstarted(&t, &session, &ctx))
                    .flatten();
                match never {
                    Some(ch) => {
                        if let Ok(ch) = ch
                            && self.commit(ch)
                        {
                            self.report.unstarted += 1;
                        }
                    }
                    None => self.exited(&id, &schedule::gone_report(&session)),
                }
                self.ended.insert(session);
            }
            Action::ResetWorktree => {
                let o = self.outside(&id);
                o.dirty = None;
                o.branch_work = false;
                if let Ok(ch) = schedule::react_reset(&t, &ctx) {
                    self.commit(ch);
                }
            }
            Action::RemoveWorktree => self.outside(&id).worktree = false,
            Action::Idle | Action::Wait { .. } | Action::Busy => {}
        }
    }

    // -----------------------------------------------------------------------------------
    // People and faults

    fn person(&mut self) {
        let tasks: Vec<Task> = self.tasks.values().cloned().collect();
        if tasks.is_empty() {
            return;
        }
        let t = &tasks[self.rng.pick(tasks.len())];
        let id = t.id().clone();
        let roll = self.rng.range(0, 9);
        let dead = t.is_dead() || (t.had_session() && t.live_session().is_none());
        if dead && roll <= 5 && !t.status().is_terminal() && t.status() != Status::Pending {
            self.trace(&format!("person: respawn {id}"));
            if let Ok(ch) = ops::request_respawn(t, &self.ctx(Actor::Person)) {
                self.commit(ch);
            }
            return;
        }
        let liveness = self.opts.liveness;
        match (t.status(), roll) {
            (Status::Reviewing, 0..=7) => {
                self.trace(&format!("person: approve {id}"));
                self.transition(&id, Status::Done, Actor::Person);
            }
            (Status::Stuck, 0..=6) => {
                self.trace(&format!("person: retry {id}"));
                let req = RetryRequest {
                    clear_worktree: self.rng.chance(0.3),
                    ..Default::default()
                };
                let o = self.outside(&id);
                o.prechecks_broken = false;
                if liveness {
                    o.tamed = true;
                }
                if let Ok(ch) = ops::retry(t, &req, &self.ctx(Actor::Person)) {
                    self.commit(ch);
                    self.stop_astray(&id);
                }
            }
            (Status::Clarification, 0..=7) => {
                self.trace(&format!("person: answers {id}"));
                self.transition(&id, Status::Working, Actor::Person);
            }
            (s, 9) if !s.is_terminal() && !self.opts.liveness => {
                self.trace(&format!("person: cancel {id}"));
                self.transition(&id, Status::Cancelled, Actor::Person);
            }
            (_, 8) => {
                // An edit of TASK.md: the hand-off appears or goes.
                let o = self.outside(&id);
                o.handoff = !o.handoff;
                if o.handoff {
                    // A section written by hand is a new one.
                    o.handoffs += 1;
                }
            }
            _ => {}
        }
    }

    fn fault(&mut self) {
        match self.rng.range(0, 9) {
            0..=3 => {
                let r = self.rng.pick(self.runners.len());
                if self.runners[r].alive && !(self.opts.liveness && self.step > self.opts.steps) {
                    self.trace(&format!("fault: runner {r} killed"));
                    self.report.kills += 1;
                    let restart = self.now + ms(self.rng.range(500, 40_000) as i64);
                    let runner = &mut self.runners[r];
                    runner.alive = false;
                    runner.jobs.clear();
                    runner.restart_at = Some(restart);
                    // Its leases stay until they lapse; a restarted runner is a new owner.
                    for (task, (owner, expires)) in self.leases.iter_mut() {
                        if *owner == r {
                            *owner = DEAD;
                            self.blocked_until.insert(task.clone(), *expires);
                        }
                    }
                }
            }
            4 => {
                // A session host killed: its session runs on, unreported.
                let live: Vec<String> = self
                    .procs
                    .values()
                    .filter(|p| p.alive && p.host)
                    .map(|p| p.session.clone())
                    .collect();
                if !live.is_empty() {
                    let s = live[self.rng.pick(live.len())].clone();
                    self.trace(&format!("fault: the host of {s} killed"));
                    if let Some(p) = self.procs.get_mut(&s) {
                        p.host = false;
                    }
                }
            }
            _ => {}
        }
    }

    // -----------------------------------------------------------------------------------
    // The loop

    /// One step: the clock moves, everything due happens in a random order, maybe a
    /// person or a fault, then every live runner looks.
    fn step(&mut self, calm: bool) {
        self.step += 1;
        self.report.steps += 1;
        let dt = self.rng.range(1, 2_500);
        self.now += ms(dt as i64);
        let now = self.now;
        // Restarts.
        for r in 0..self.runners.len() {
            if !self.runners[r].alive && self.runners[r].restart_at.is_some_and(|t| t <= now) {
                self.trace(&format!("runner {r} restarts"));
                self.runners[r].alive = true;
                self.runners[r].up_since = now;
                self.runners[r].restart_at = None;
            }
        }
        // The host KILLs a session that ignored its TERM.
        let kill_after = ms(self.limits.kill_after_s as i64 * 1_000);
        let overdue: Vec<String> = self
            .procs
            .values()
            .filter(|p| p.alive && p.host && p.term_at.is_some_and(|t| t + kill_after <= now))
            .map(|p| p.session.clone())
            .collect();
        for s in overdue {
            self.end_proc(&s, 137);
        }
        // The host's timer ends a session at phase_timeout_s (exit 124).
        let timeout = ms(self.limits.phase_timeout_s as i64 * 1_000);
        let expired: Vec<String> = self
            .procs
            .values()
            .filter(|p| p.alive && p.host && p.started + timeout <= now)
            .map(|p| p.session.clone())
            .collect();
        for s in expired {
            self.end_proc(&s, 124);
        }
        // Everything due, in a random order.
        #[derive(Clone)]
        enum Due {
            Proc(String),
            Report(usize),
            Job(usize, usize),
        }
        let mut due: Vec<Due> = Vec::new();
        for p in self.procs.values() {
            if p.alive && p.next_at <= now {
                due.push(Due::Proc(p.session.clone()));
            }
        }
        for (i, r) in self.pending.iter().enumerate() {
            if r.due <= now {
                due.push(Due::Report(i));
            }
        }
        for (ri, r) in self.runners.iter().enumerate() {
            if r.alive {
                for (ji, j) in r.jobs.iter().enumerate() {
                    if j.due <= now {
                        due.push(Due::Job(ri, ji));
                    }
                }
            }
        }
        // Shuffle.
        for i in (1..due.len()).rev() {
            let j = self.rng.pick(i + 1);
            due.swap(i, j);
        }
        let mut done_reports = BTreeSet::new();
        let mut done_jobs: BTreeSet<(usize, usize)> = BTreeSet::new();
        let mut finished: Vec<(usize, Job)> = Vec::new();
        for d in due {
            match d {
                Due::Proc(s) => self.proc_move(&s),
                Due::Report(i) => {
                    let r = self.pending[i].clone();
                    done_reports.insert(i);
                    let report = ExitReport {
                        role: None,
                        session: r.session.clone(),
                        exit_code: Some(r.code),
                        reason: None,
                    };
                    self.exited(&r.task, &report);
                }
                Due::Job(ri, ji) => {
                    if self.runners[ri].alive && ji < self.runners[ri].jobs.len() {
                        done_jobs.insert((ri, ji));
                        finished.push((ri, self.runners[ri].jobs[ji].clone()));
                    }
                }
            }
        }
        let mut i = 0;
        self.pending.retain(|_| {
            let keep = !done_reports.contains(&i);
            i += 1;
            keep
        });
        for (ri, runner) in self.runners.iter_mut().enumerate() {
            let mut j = 0;
            runner.jobs.retain(|_| {
                let keep = !done_jobs.contains(&(ri, j));
                j += 1;
                keep
            });
        }
        for (ri, job) in finished {
            if self.runners[ri].alive {
                self.finish_job(ri, job);
            }
        }
        if !calm {
            if self.rng.chance(0.25) {
                self.person();
            }
            if self.rng.chance(0.03) {
                self.fault();
            }
        } else if self.rng.chance(0.5) {
            // Draining: people keep approving, answering, retrying and respawning.
            self.person();
        }
        let order: Vec<usize> = (0..self.runners.len()).collect();
        for r in order {
            self.tick(r);
        }
    }

    /// Runs the seed: its steps, then a drain with every runner up and no faults until
    /// nothing is in flight. Checks the invariants after every step.
    pub fn run(mut self) -> Result<Report, Violation> {
        for _ in 0..self.opts.steps {
            self.step(false);
            self.check()?;
        }
        // Drain: runners up, people helpful, no faults.
        for r in &mut self.runners {
            if !r.alive {
                r.restart_at = Some(self.now);
            }
        }
        let drain = if self.opts.liveness { 4_000 } else { 600 };
        for _ in 0..drain {
            self.step(true);
            self.check()?;
            if self.quiet() {
                break;
            }
        }
        self.check_end()?;
        self.report.events = self.log.len();
        self.report.done = self
            .tasks
            .values()
            .filter(|t| t.status() == Status::Done)
            .count();
        Ok(self.report)
    }

    /// Nothing is in flight and nothing can move without a person.
    fn quiet(&self) -> bool {
        self.pending.is_empty()
            && self.runners.iter().all(|r| r.alive && r.jobs.is_empty())
            && self.procs.values().all(|p| !p.alive)
            && self.leases.values().all(|(owner, _)| *owner != DEAD)
            && self
                .tasks
                .values()
                .all(|t| t.open_sessions().next().is_none())
            && (!self.opts.liveness
                || self
                    .tasks
                    .values()
                    .all(|t| t.status().is_terminal() || self.is_group(t.id())))
    }

    /// Does the task have children (its stored status never moves; its own is derived)?
    fn is_group(&self, id: &TaskId) -> bool {
        self.tasks
            .values()
            .any(|t| t.spec.parent.as_ref() == Some(id))
    }

    // -----------------------------------------------------------------------------------
    // Invariants

    /// Did the task's last session end by exiting (not by failing to start)?
    fn last_end_exited(&self, id: &TaskId) -> bool {
        self.log
            .iter()
            .rev()
            .filter(|e| &e.task == id)
            .find_map(|e| match e.kind {
                EventKind::SessionExited { .. } => Some(true),
                EventKind::SessionFailed { .. } => Some(false),
                _ => None,
            })
            .unwrap_or(false)
    }

    fn check(&mut self) -> Result<(), Violation> {
        if let Some((invariant, detail)) = self.broken.take() {
            return Err(self.violation(invariant, detail));
        }
        // At most one live session per task.
        let mut per_task: BTreeMap<&TaskId, Vec<&str>> = BTreeMap::new();
        for p in self.procs.values().filter(|p| p.alive) {
            per_task.entry(&p.task).or_default().push(&p.session);
        }
        if let Some((t, s)) = per_task.iter().find(|(_, s)| s.len() > 1) {
            return Err(self.violation(
                "at most one live session per task",
                format!("task {t} has {s:?} alive"),
            ));
        }
        // No live session that does not belong, past its grace.
        let now = self.now;
        let runner_up = self
            .runners
            .iter()
            .filter(|r| r.alive)
            .map(|r| r.up_since)
            .min();
        let mut astray = Vec::new();
        for p in self.procs.values().filter(|p| p.alive) {
            let Some(t) = self.tasks.get(&p.task) else {
                continue;
            };
            let rec = t.sessions().iter().find(|r| r.id == p.session);
            let belongs = rec
                .is_some_and(|r| r.entry == t.entry() && ops::role_for(t.status()) == Some(r.role));
            if belongs {
                continue;
            }
            astray.push((p.session.clone(), t.clone(), p.host));
        }
        let live: BTreeSet<String> = astray.iter().map(|(s, _, _)| s.clone()).collect();
        self.astray_since.retain(|s, _| live.contains(s));
        for (s, t, host) in astray {
            // The deadline counts from the task's move to its current status (a later
            // move restarts it with its own grace).
            let since = t
                .entered_at()
                .max(*self.astray_since.entry(s.clone()).or_insert(now));
            let by_person = t.entered_by() == Actor::Person;
            let grace = if by_person {
                0
            } else {
                self.limits.handoff_grace_s as i64 * 1_000
            };
            let bound = grace + self.limits.kill_after_s as i64 * 1_000 + SLACK_MS;
            // A person's change stops a session even with no runner (its host KILLs it);
            // a hand-off needs a runner to stop a worker that does not end — one that is
            // up, and holds or can take the task's lease (a dead runner's lapses first).
            let from = if by_person && host {
                since
            } else {
                let lapsed = self.blocked_until.get(t.id()).copied();
                match runner_up {
                    Some(up) => since.max(up).max(lapsed.unwrap_or(since)),
                    None => continue,
                }
            };
            if now.duration_since(from).as_millis() as i64 > bound {
                return Err(self.violation(
                    "no live session past its grace in a status it does not belong to",
                    format!(
                        "session {s} of {} is alive {} ms after the task became {} (by the {})",
                        t.id(),
                        now.duration_since(from).as_millis(),
                        t.status(),
                        t.entered_by().as_str()
                    ),
                ));
            }
        }
        // Every end counted at most once; done means merged and passing; attempts bound.
        let mut counted: BTreeMap<&str, usize> = BTreeMap::new();
        for e in &self.log {
            if let EventKind::SessionExited {
                session: Some(s),
                disposition,
                ..
            } = &e.kind
                && *disposition != Disposition::Duplicate
            {
                *counted.entry(s).or_default() += 1;
            }
        }
        if let Some((s, n)) = counted.iter().find(|(_, n)| **n > 1) {
            return Err(self.violation(
                "every session end counted exactly once",
                format!("the end of {s} was counted {n} times"),
            ));
        }
        // A runner's death is not the agent's crash: a session that never ran ends as
        // never started, unless its status entry had one already (the second is charged,
        // so nothing loops on it).
        let mut had_unstarted: BTreeMap<&TaskId, bool> = BTreeMap::new();
        for e in &self.log {
            let seen = had_unstarted.entry(&e.task).or_default();
            if e.kind.transition().is_some() {
                *seen = false;
            }
            let EventKind::SessionExited {
                session: Some(s),
                disposition,
                ..
            } = &e.kind
            else {
                continue;
            };
            match disposition {
                Disposition::Unstarted => *seen = true,
                Disposition::Current if !self.procs.contains_key(s) && !*seen => {
                    return Err(self.violation(
                        "a session that never ran is not charged as a crash",
                        format!(
                            "{s} of {} never ran and ended as the current session",
                            e.task
                        ),
                    ));
                }
                _ => {}
            }
        }
        for t in self.tasks.values() {
            // The end of a direct task's work session is its work's result (the next
            // phase runs, or its heal starts): nothing for a person to respawn.
            // (A session that could not start is Warden's side: it waits for a person.)
            if t.spec.workflow == WorkflowKind::Direct
                && t.status() == Status::Working
                && t.is_dead()
                && matches!(
                    (t.phases().get(Phase::Work), t.healing()),
                    (PhaseStatus::Success, _) | (PhaseStatus::Pending, Some(Phase::Work))
                )
                && self.last_end_exited(t.id())
            {
                return Err(self.violation(
                    "a direct task's ended work is taken, never left dead for a person",
                    format!(
                        "{} is dead with work {} (healing {:?})",
                        t.id(),
                        t.phases().get(Phase::Work),
                        t.healing()
                    ),
                ));
            }
            if t.attempts() > t.spec.max_attempts {
                return Err(self.violation(
                    "attempts never exceed max_attempts",
                    format!("{} has {} of {}", t.id(), t.attempts(), t.spec.max_attempts),
                ));
            }
            if t.status() == Status::Done {
                let merge = t.phases().get(Phase::MergeRi);
                let o = self.outside.get(t.id()).cloned().unwrap_or_default();
                let merged = matches!(merge, PhaseStatus::Success | PhaseStatus::Skipped);
                if !merged || !t.passes() || (o.branch_work && !o.merged) {
                    return Err(self.violation(
                        "done means merged (or nothing to merge) and passes",
                        format!(
                            "{} is done with merge-ri {merge}, passes {}, branch work {} merged {}",
                            t.id(),
                            t.passes(),
                            o.branch_work,
                            o.merged
                        ),
                    ));
                }
                if let Some(since) = o.dirty
                    && since < t.entered_at()
                {
                    return Err(self.violation(
                        "work written before the end is committed, never lost",
                        format!("{} is done with edits from {since} uncommitted", t.id()),
                    ));
                }
            }
        }
        if self.step.is_multiple_of(25) {
            self.check_replay()?;
        }
        Ok(())
    }

    fn check_replay(&self) -> Result<(), Violation> {
        let replayed = warden_core::event::replay(&self.log)
            .map_err(|e| self.violation("the log replays to the rows", e.to_string()))?;
        if replayed != self.tasks {
            let differs: Vec<&TaskId> = self
                .tasks
                .iter()
                .filter(|(id, t)| replayed.get(*id) != Some(t))
                .map(|(id, _)| id)
                .collect();
            return Err(self.violation(
                "the log replays to the rows",
                format!("tasks {differs:?} differ from their replay"),
            ));
        }
        Ok(())
    }

    fn check_end(&self) -> Result<(), Violation> {
        self.check_replay()?;
        // Every real end counted: each session that ended (or never started) has exactly
        // one end in the log.
        for s in &self.ended {
            let recorded = self
                .tasks
                .values()
                .any(|t| t.sessions().iter().any(|r| &r.id == s));
            if !recorded {
                continue;
            }
            let open = self
                .tasks
                .values()
                .any(|t| t.open_sessions().any(|r| &r.id == s));
            if open {
                return Err(self.violation(
                    "every session end counted exactly once",
                    format!("the end of {s} was never counted"),
                ));
            }
        }
        if self.opts.liveness {
            // Every leaf (a group's stored status never moves: its status is derived).
            let open: Vec<String> = self
                .tasks
                .values()
                .filter(|t| !self.is_group(t.id()) && t.status() != Status::Done)
                .map(|t| format!("{} {}", t.id(), t.status()))
                .collect();
            if !open.is_empty() {
                return Err(self.violation(
                    "with agents that eventually succeed, every task ends done",
                    format!("still open after the drain: {open:?}"),
                ));
            }
        }
        Ok(())
    }
}

fn describe(k: &EventKind) -> String {
    match k.transition() {
        Some((f, t)) => format!("{} {f} → {t}", k.type_name()),
        None => match k.reason() {
            Some(r) => format!("{} ({r})", k.type_name()),
            None => k.type_name().to_owned(),
        },
    }
}

/// Runs one seed.
pub fn run_seed(seed: u64, opts: &Options) -> Result<Report, Violation> {
    World::new(seed, opts.clone()).run()
}
