//! The scheduler's table: every rule of the supervisor's contract as a row, from tasks
//! built through the real operations (so each state is one the fold can reach).

use super::*;
use crate::artifact::{Artifacts, Evidence, Verdict};
use crate::event::Disposition;
use crate::exit::ExitAction;
use crate::model::{TaskId, TaskSpec};
use crate::ops::Initial;
use std::collections::BTreeSet;

const T0: i64 = 1_700_000_000;

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(T0 + s).unwrap()
}

fn ctx(s: i64, actor: Actor) -> Ctx<'static> {
    Ctx {
        now: at(s),
        ..Ctx::fixed(actor)
    }
}

fn limits() -> Limits {
    Limits::default()
}

fn art(handoff: bool, verdict: Option<Verdict>) -> Artifacts {
    let ev = |name: &str| Evidence {
        nth: 1,
        section: name.into(),
        digest: "d".into(),
    };
    Artifacts {
        handoff: handoff.then(|| ev("Handoff")),
        review: verdict.map(|_| ev("Review")),
        verdict,
        ..Default::default()
    }
}

/// A task built step by step through the operations, at chosen times.
struct B(Task);

impl B {
    fn new(work: Option<WorkSpec>, workflow: WorkflowKind, postchecks: bool) -> B {
        let mut spec = TaskSpec::new(TaskId::new("t").unwrap(), workflow, 3);
        spec.spec.work = work;
        if postchecks {
            spec.spec.postchecks = Some(WorkSpec::Shell("make test".into()));
        }
        B(ops::create(spec, Initial::NEW, &ctx(0, Actor::Person))
            .unwrap()
            .after
            .unwrap())
    }
    fn review() -> B {
        B::new(None, WorkflowKind::Review, false)
    }
    fn shell() -> B {
        B::new(
            Some(WorkSpec::Shell("make".into())),
            WorkflowKind::Direct,
            true,
        )
    }
    fn direct_agent() -> B {
        B::new(
            Some(WorkSpec::Agent("do it".into())),
            WorkflowKind::Direct,
            true,
        )
    }
    fn apply(self, ch: Result<Change, Refusal>) -> B {
        B(ch.unwrap().after.unwrap())
    }
    fn start(self, s: i64) -> B {
        let t = self.0.clone();
        self.apply(react_start(&t, &ctx(s, Actor::Runner)))
    }
    fn phase(self, p: Phase, st: PhaseStatus, s: i64) -> B {
        let t = self.0.clone();
        self.apply(react_phase(&t, p, st, None, &ctx(s, Actor::Runner)))
    }
    fn spawn(self, id: &str, role: Role, heal: Option<Phase>, s: i64) -> B {
        let t = self.0.clone();
        self.apply(react_spawn(
            &t,
            id,
            role,
            heal,
            None,
            &ctx(s, Actor::Runner),
        ))
    }
    fn to(self, to: Status, a: Artifacts, actor: Actor, s: i64) -> B {
        let t = self.0.clone();
        let input = TransitionInput {
            artifacts: a,
            guard: Some(GuardOutcome::Pass),
            ..Default::default()
        };
        self.apply(ops::transition(&t, to, &input, &ctx(s, actor)))
    }
    fn exit(self, session: Option<&str>, code: i32, a: Artifacts, s: i64) -> B {
        let t = self.0.clone();
        let report = ExitReport {
            role: None,
            session: session.map(str::to_owned),
            exit_code: Some(code),
            reason: None,
        };
        let input = TransitionInput {
            artifacts: a,
            guard: Some(GuardOutcome::Pass),
            ..Default::default()
        };
        self.apply(ops::exited(&t, &report, &input, &ctx(s, Actor::Runner)))
    }
    fn stop(self, session: &str, s: i64) -> B {
        let t = self.0.clone();
        let reason = StopReason::HandOff { to: t.status() };
        self.apply(react_stop(&t, session, &reason, &ctx(s, Actor::Runner)))
    }
    fn respawn(self, s: i64) -> B {
        let t = self.0.clone();
        self.apply(ops::request_respawn(&t, &ctx(s, Actor::Person)))
    }
    /// A working review task whose worker `w1` is running (merge-fi and prechecks done).
    fn review_working(s: i64) -> B {
        B::review()
            .start(s)
            .phase(Phase::MergeFi, PhaseStatus::Skipped, s)
            .phase(Phase::Prechecks, PhaseStatus::Skipped, s)
            .spawn("w1", Role::Worker, None, s)
    }
    /// A review task waiting for a person: its worker `w1` handed off, its reviewer
    /// `r1` passed it.
    fn reviewing() -> B {
        B::review_working(1)
            .to(Status::AgentReview, art(true, None), Actor::Agent, 2)
            .exit(Some("w1"), 0, art(true, None), 3)
            .spawn("r1", Role::Reviewer, None, 4)
            .exit(Some("r1"), 0, art(true, Some(Verdict::Pass)), 5)
    }
}

/// The scheduler's answer for `task` at time `s` with these sessions alive.
fn next_at(task: &Task, s: i64, alive: &[&str]) -> Action {
    next_with(task, s, alive, true, true, false)
}

fn next_with(
    task: &Task,
    s: i64,
    alive: &[&str],
    deps_done: bool,
    leaf: bool,
    worktree: bool,
) -> Action {
    let alive: Vec<String> = alive.iter().map(|s| s.to_string()).collect();
    let live = move |id: &str| {
        if alive.iter().any(|a| a == id) {
            Liveness::Alive
        } else {
            Liveness::Gone
        }
    };
    next(
        &View {
            task,
            now: at(s),
            deps_done,
            leaf,
            worktree,
            live: &live,
            ghosts: &[],
        },
        &limits(),
    )
}

fn session(role: Role) -> Action {
    Action::StartSession { role, heal: None }
}

fn stop(session: &str, reason: StopReason, kill: bool) -> Action {
    Action::Stop {
        session: session.into(),
        reason,
        kill,
    }
}

/// Rule 1: a worker that keeps running after its hand-off gets `handoff_grace_s`, then
/// TERM, then KILL; the reviewer starts only after its end, which commits late work.
#[test]
fn the_reviewer_waits_for_the_worker_after_its_hand_off() {
    let t = B::review_working(10)
        .to(Status::AgentReview, art(true, None), Actor::Agent, 100)
        .0;
    let handoff = StopReason::HandOff {
        to: Status::AgentReview,
    };
    assert_eq!(next_at(&t, 110, &["w1"]), Action::Wait { until: at(130) });
    assert_eq!(
        next_at(&t, 130, &["w1"]),
        stop("w1", handoff.clone(), false)
    );
    let stopped = B(t.clone()).stop("w1", 130).0;
    assert_eq!(
        next_at(&stopped, 133, &["w1"]),
        Action::Wait { until: at(135) }
    );
    assert_eq!(next_at(&stopped, 135, &["w1"]), stop("w1", handoff, true));
    // Gone without a report: reported; ended (stale): the reviewer starts.
    assert_eq!(
        next_at(&stopped, 136, &[]),
        Action::ReportGone {
            session: "w1".into()
        }
    );
    let ended = B(stopped).exit(Some("w1"), 143, art(true, None), 136).0;
    assert!(ended.sessions()[0].ended, "the stale end is counted once");
    assert!(
        !ended.is_dead(),
        "a worker ending after its hand-off is not a crash"
    );
    assert_eq!(next_at(&ended, 136, &[]), session(Role::Reviewer));
    // A worker that ends on its own within the grace lets the reviewer start at once.
    let t = B::review_working(10)
        .to(Status::AgentReview, art(true, None), Actor::Agent, 100)
        .exit(Some("w1"), 0, art(true, None), 103)
        .0;
    assert_eq!(next_at(&t, 103, &[]), session(Role::Reviewer));
}

/// Rule 1: a person's change stops a live session at once (cancel, retry, done…).
#[test]
fn a_persons_change_stops_the_session_at_once() {
    for to in [Status::Cancelled, Status::Stuck, Status::Clarification] {
        let t = B::review_working(10)
            .to(to, art(false, None), Actor::Person, 50)
            .0;
        let reason = StopReason::Moved {
            to,
            by: Actor::Person,
        };
        assert_eq!(next_at(&t, 50, &["w1"]), stop("w1", reason, false), "{to}");
    }
    // The reviewer of a task a person approved early.
    let t = B::review_working(10)
        .to(Status::AgentReview, art(true, None), Actor::Agent, 20)
        .exit(Some("w1"), 0, art(true, None), 21)
        .spawn("r1", Role::Reviewer, None, 22)
        .to(Status::Cancelled, art(false, None), Actor::Person, 30)
        .0;
    assert!(matches!(
        next_at(&t, 30, &["r1"]),
        Action::Stop { kill: false, .. }
    ));
}

/// Rule 1: the current session is waited for; gone ones are reported.
#[test]
fn sessions_that_belong_are_waited_for_and_gone_ones_reported() {
    let t = B::review_working(10).0;
    // A running session is waited for, until its timeout (phase_timeout_s, then the
    // host's kill twice over) is due: then the supervisor ends it, as its host did not.
    let due = 10 + 3600 + 2 * 5;
    assert_eq!(next_at(&t, 11, &["w1"]), Action::Wait { until: at(due) });
    assert_eq!(
        next_at(&t, due, &["w1"]),
        stop("w1", StopReason::Timeout, false)
    );
    assert_eq!(
        next_at(&t, 11, &[]),
        Action::ReportGone {
            session: "w1".into()
        }
    );
}

/// Rules 2-3: terminal tasks start nothing; a merged done task loses its worktree;
/// groups are never scheduled.
#[test]
fn terminal_tasks_and_groups() {
    let done = B::review()
        .to(Status::Working, art(false, None), Actor::Person, 1)
        .phase(Phase::MergeRi, PhaseStatus::Success, 2)
        .to(Status::AgentReview, art(true, None), Actor::Agent, 3)
        .to(
            Status::Reviewing,
            art(true, Some(Verdict::Pass)),
            Actor::Agent,
            4,
        )
        .0;
    let mut input = TransitionInput {
        artifacts: art(true, Some(Verdict::Pass)),
        ..Default::default()
    };
    input
        .phases
        .push((Phase::MergeRi, PhaseStatus::Success, None));
    let done = ops::transition(&done, Status::Done, &input, &ctx(5, Actor::Person))
        .unwrap()
        .after
        .unwrap();
    assert_eq!(
        next_with(&done, 6, &[], true, true, true),
        Action::RemoveWorktree
    );
    assert_eq!(next_with(&done, 6, &[], true, true, false), Action::Idle);
    let cancelled = B::review()
        .to(Status::Cancelled, art(false, None), Actor::Person, 1)
        .0;
    assert_eq!(
        next_with(&cancelled, 2, &[], true, true, true),
        Action::Idle
    );
    let group = B::review().0;
    assert_eq!(next_with(&group, 1, &[], true, false, false), Action::Idle);
}

/// Rule 4: pending tasks start when their dependencies are done.
#[test]
fn pending_waits_for_its_dependencies() {
    let t = B::review().0;
    assert_eq!(next_with(&t, 1, &[], false, true, false), Action::Idle);
    assert_eq!(next_with(&t, 1, &[], true, true, false), Action::Start);
}

/// Rule 4: the review pipeline, a crashed worker waiting for a respawn, the reviewer.
#[test]
fn the_review_workflow() {
    let t = B::review().start(1).0;
    assert_eq!(next_at(&t, 1, &[]), Action::RunPhase(Phase::MergeFi));
    let t = B(t).phase(Phase::MergeFi, PhaseStatus::Success, 2).0;
    assert_eq!(next_at(&t, 2, &[]), Action::RunPhase(Phase::Prechecks));
    let t = B(t).phase(Phase::Prechecks, PhaseStatus::Skipped, 3).0;
    assert_eq!(next_at(&t, 3, &[]), session(Role::Worker));
    // The worker crashes: it waits for a person.
    let crashed = B(t)
        .spawn("w1", Role::Worker, None, 4)
        .exit(Some("w1"), 1, art(false, None), 5)
        .0;
    assert_eq!(crashed.crash_count(), 1);
    assert_eq!(next_at(&crashed, 6, &[]), Action::Idle);
    let respawn = B(crashed).respawn(7).0;
    assert_eq!(next_at(&respawn, 7, &[]), session(Role::Worker));
    // Agent review: the reviewer starts, and again after a crash below the threshold.
    let review = B::review_working(1)
        .exit(Some("w1"), 0, art(true, None), 2)
        .0;
    assert_eq!(review.status(), Status::AgentReview);
    assert_eq!(next_at(&review, 2, &[]), session(Role::Reviewer));
    let crashed = B(review)
        .spawn("r1", Role::Reviewer, None, 3)
        .exit(Some("r1"), 0, art(true, None), 4)
        .0;
    assert_eq!(crashed.crash_count(), 1);
    assert_eq!(next_at(&crashed, 4, &[]), session(Role::Reviewer));
    // Reviewing waits for a person.
    let reviewing = B::reviewing().0;
    assert_eq!(reviewing.status(), Status::Reviewing);
    assert_eq!(next_at(&reviewing, 5, &[]), Action::Idle);
}

/// Rule 4: stuck and clarification start a worker only on a respawn, and only for
/// agent work (a shell task has no session to respawn: `task retry`).
#[test]
fn stuck_and_clarification_wait_for_a_person() {
    let stuck = B::review_working(1)
        .to(Status::Stuck, art(false, None), Actor::Person, 2)
        .exit(Some("w1"), 0, art(false, None), 3)
        .0;
    assert_eq!(next_at(&stuck, 3, &[]), Action::Idle);
    let respawn = B(stuck).respawn(4).0;
    assert_eq!(next_at(&respawn, 4, &[]), session(Role::Worker));
    let shell = B::shell()
        .to(Status::Working, art(false, None), Actor::Person, 1)
        .to(Status::Stuck, art(false, None), Actor::Person, 2)
        .0;
    let e = ops::request_respawn(&shell, &ctx(3, Actor::Person)).unwrap_err();
    assert!(e.to_string().contains("warden task retry"), "{e}");
}

/// Rule 4: a direct shell task's pipeline, its work as a session, and the backoff
/// between attempts (2 s, doubling).
#[test]
fn the_direct_pipeline_and_its_backoff() {
    let t = B::shell()
        .start(1)
        .phase(Phase::MergeFi, PhaseStatus::Skipped, 1)
        .phase(Phase::Prechecks, PhaseStatus::Skipped, 1)
        .0;
    assert_eq!(next_at(&t, 1, &[]), session(Role::Worker));
    let t = B(t)
        .spawn("s1", Role::Worker, None, 2)
        .exit(Some("s1"), 0, art(false, None), 3)
        .0;
    assert_eq!(t.phases().get(Phase::Work), PhaseStatus::Success);
    assert_eq!(next_at(&t, 3, &[]), Action::Finish);
    // The guard fails: attempt 1 charged; the next try waits 2 s, the one after 4 s.
    let input = TransitionInput {
        guard: Some(GuardOutcome::Fail("FAILED".into())),
        phases: vec![(Phase::Postchecks, PhaseStatus::Failed, None)],
        ..Default::default()
    };
    let failed = react_finish(&t, &input, &ctx(10, Actor::Runner))
        .unwrap()
        .after
        .unwrap();
    assert_eq!(failed.attempts(), 1);
    assert!(!failed.passes());
    assert_eq!(next_at(&failed, 11, &[]), Action::Wait { until: at(12) });
    assert_eq!(next_at(&failed, 12, &[]), Action::Finish);
    let again = react_finish(&failed, &input, &ctx(12, Actor::Runner))
        .unwrap()
        .after
        .unwrap();
    assert_eq!(again.attempts(), 2);
    assert_eq!(next_at(&again, 15, &[]), Action::Wait { until: at(16) });
    // The backoff doubles and is capped.
    let l = Limits::default();
    let b: Vec<i64> = (0..12).map(|n| backoff(n, &l).as_secs()).collect();
    assert_eq!(b, vec![0, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
    // Agent work has no backoff: its own session retries.
    let agent = B::direct_agent().start(1).0;
    assert_eq!(retry_at(&agent, &l), None);
}

/// DESIGN 2.4's automatic heal: prechecks of agent work, and prechecks, work and
/// postchecks of a direct agent task — once each; never merge-fi, commit or merge-ri.
#[test]
fn auto_heal_follows_design() {
    let review = B::review().start(1).0;
    let direct = B::direct_agent().start(1).0;
    let shell = B::shell().start(1).0;
    let rows: &[(&Task, Phase, bool)] = &[
        (&review, Phase::Prechecks, true),
        (&review, Phase::MergeFi, false),
        (&review, Phase::Work, false),
        (&review, Phase::Postchecks, false),
        (&review, Phase::Commit, false),
        (&review, Phase::MergeRi, false),
        (&direct, Phase::Prechecks, true),
        (&direct, Phase::Work, true),
        (&direct, Phase::Postchecks, true),
        (&direct, Phase::MergeFi, false),
        (&direct, Phase::Commit, false),
        (&direct, Phase::MergeRi, false),
        (&shell, Phase::Prechecks, false),
        (&shell, Phase::Postchecks, false),
    ];
    for (t, p, want) in rows {
        assert_eq!(heal_allowed(t, *p), *want, "{} {p}", t.spec.workflow);
    }
    // A review task's failed prechecks: a heal session, then the prechecks again, then
    // the worker.
    let t = B(review.clone())
        .phase(Phase::MergeFi, PhaseStatus::Skipped, 2)
        .phase(Phase::Prechecks, PhaseStatus::Failed, 3)
        .0;
    assert_eq!(t.attempts(), 0, "a heal is not an attempt");
    assert_eq!(
        next_at(&t, 3, &[]),
        Action::StartSession {
            role: Role::Worker,
            heal: Some(Phase::Prechecks)
        }
    );
    let healed = B(t)
        .spawn("h1", Role::Worker, Some(Phase::Prechecks), 4)
        .exit(Some("h1"), 0, art(false, None), 5)
        .0;
    assert_eq!(
        healed.crash_count(),
        0,
        "a heal session's end is not a crash"
    );
    assert!(!healed.is_dead());
    assert_eq!(next_at(&healed, 5, &[]), Action::RunPhase(Phase::Prechecks));
    // The second failure of the same phase is charged.
    let charged = B(healed).phase(Phase::Prechecks, PhaseStatus::Failed, 6).0;
    assert_eq!(charged.attempts(), 1);
    assert_eq!(
        next_at(&charged, 6, &[]),
        Action::RunPhase(Phase::Prechecks)
    );
    // merge-fi never heals.
    let mf = B(review).phase(Phase::MergeFi, PhaseStatus::Failed, 2).0;
    assert_eq!(mf.attempts(), 1);
    // A direct agent task's failed postchecks heal first.
    let t = B(direct)
        .phase(Phase::MergeFi, PhaseStatus::Skipped, 2)
        .phase(Phase::Prechecks, PhaseStatus::Skipped, 2)
        .spawn("w1", Role::Worker, None, 3)
        .exit(Some("w1"), 0, art(false, None), 4)
        .0;
    let input = TransitionInput {
        guard: Some(GuardOutcome::Fail("tests fail".into())),
        phases: vec![(Phase::Postchecks, PhaseStatus::Failed, None)],
        ..Default::default()
    };
    let healing = react_finish(&t, &input, &ctx(5, Actor::Runner))
        .unwrap()
        .after
        .unwrap();
    assert_eq!(healing.attempts(), 0);
    assert_eq!(
        next_at(&healing, 5, &[]),
        Action::StartSession {
            role: Role::Worker,
            heal: Some(Phase::Postchecks)
        }
    );
}

/// Rule 4: `--clear-worktree` resets the worktree before anything else runs.
#[test]
fn a_clear_worktree_retry_resets_first() {
    let stuck = B::shell()
        .to(Status::Working, art(false, None), Actor::Person, 1)
        .to(Status::Stuck, art(false, None), Actor::Person, 2)
        .0;
    let req = crate::retry::RetryRequest {
        clear_worktree: true,
        ..Default::default()
    };
    let t = ops::retry(&stuck, &req, &ctx(3, Actor::Person))
        .unwrap()
        .after
        .unwrap();
    assert_eq!(next_at(&t, 3, &[]), Action::ResetWorktree);
    let t = react_reset(&t, &ctx(4, Actor::Runner))
        .unwrap()
        .after
        .unwrap();
    assert_eq!(next_at(&t, 4, &[]), Action::RunPhase(Phase::MergeFi));
}

/// Every real session end counts exactly once, whoever reports it.
#[test]
fn every_end_counts_once() {
    let t = B::review_working(1).0;
    // The harness hook reports without a session id, then the host reports ours.
    let a = B(t.clone()).exit(None, 1, art(false, None), 2).0;
    assert_eq!(a.crash_count(), 1);
    let report = ExitReport {
        role: None,
        session: Some("w1".into()),
        exit_code: Some(1),
        reason: None,
    };
    let d = crate::exit::decide(&a, &art(false, None), &report, &limits());
    assert_eq!(d.disposition, Disposition::Duplicate);
    // The other way round.
    let b = B(t.clone()).exit(Some("w1"), 1, art(false, None), 2).0;
    let d = crate::exit::decide(&b, &art(false, None), &ExitReport::default(), &limits());
    assert_eq!(d.disposition, Disposition::Duplicate);
    assert_eq!(d.action, ExitAction::Nothing);
    // A person's own agent, started by hand after ours ended, reports its end under its
    // harness's id: that end counts (before, it was taken for ours reported again).
    let by_hand = ExitReport {
        role: None,
        session: Some("claude-5f0c".into()),
        exit_code: Some(0),
        reason: None,
    };
    let d = crate::exit::decide(&b, &art(false, None), &by_hand, &limits());
    assert_eq!(d.disposition, Disposition::Current);
    assert!(
        matches!(d.action, ExitAction::Crash { crash_count: 2, .. }),
        "{:?}",
        d.action
    );
    // Without any session of Warden's (a person's own agent), every report counts.
    let own = B::review()
        .to(Status::Working, art(false, None), Actor::Person, 1)
        .exit(None, 1, art(false, None), 2)
        .0;
    let d = crate::exit::decide(&own, &art(false, None), &ExitReport::default(), &limits());
    assert_eq!(d.disposition, Disposition::Current);
}

/// `passes` describes the current attempt only (DESIGN 6).
#[test]
fn passes_is_cleared_by_a_fail_a_retry_a_respawn_and_stuck() {
    let reviewed = B::new(None, WorkflowKind::Review, true)
        .start(1)
        .spawn("w1", Role::Worker, None, 1)
        .to(Status::AgentReview, art(true, None), Actor::Agent, 2)
        .exit(Some("w1"), 0, art(true, None), 2)
        .0;
    assert!(reviewed.passes(), "the guard passed in this attempt");
    let failed = B(reviewed.clone())
        .to(
            Status::Working,
            art(true, Some(Verdict::Fail)),
            Actor::Agent,
            3,
        )
        .0;
    assert!(!failed.passes());
    // A respawn of the crashed reviewer, and the escalation to stuck, clear it too.
    let crashed = B(reviewed)
        .spawn("r1", Role::Reviewer, None, 3)
        .exit(Some("r1"), 0, art(true, None), 4)
        .0;
    assert!(
        crashed.passes(),
        "a crash alone does not change the evidence"
    );
    let respawned = B(crashed.clone()).respawn(5).0;
    assert!(!respawned.passes());
    let stuck = B(crashed)
        .spawn("r2", Role::Reviewer, None, 5)
        .exit(Some("r2"), 0, art(true, None), 6)
        .0;
    assert_eq!(stuck.status(), Status::Stuck);
    assert!(!stuck.passes());
}

/// A session whose end was recorded but which still runs (an unnamed report ended the
/// wrong session) is stopped before anything else starts.
#[test]
fn a_ghost_is_stopped_before_a_new_session_starts() {
    let t = B::review_working(1)
        .to(Status::AgentReview, art(true, None), Actor::Agent, 2)
        .exit(Some("w1"), 0, art(true, None), 3)
        .spawn("r1", Role::Reviewer, None, 4)
        // The worker's harness hook reports without a session id: taken for r1's end.
        .exit(None, 0, art(true, None), 5)
        .0;
    assert_eq!(
        next_at(&t, 6, &[]),
        session(Role::Reviewer),
        "r1 looks ended"
    );
    let live = |_: &str| Liveness::Gone;
    let ghosts = vec!["r1".to_owned()];
    let v = View {
        task: &t,
        now: at(6),
        deps_done: true,
        leaf: true,
        worktree: false,
        live: &live,
        ghosts: &ghosts,
    };
    assert_eq!(next(&v, &limits()), stop("r1", StopReason::Ghost, false));
}

/// A task that waits for a change ([`Task::waits_for_change`]) needs nothing from the
/// supervisor, which therefore keeps no more of it than what it was: whatever else its
/// runner state holds, the table waits (a pending leaf may start and a done task's
/// worktree may go, which a pass finds without looking at every task).
#[test]
fn a_task_waiting_for_a_change_needs_nothing_from_the_supervisor() {
    // Bases reached through the operations: fresh, and under review after two sessions.
    let reviewing = B::reviewing().0;
    let bases = [B::review().0, B::shell().0, B::direct_agent().0, reviewing];
    let mut waiting = BTreeSet::new();
    for base in &bases {
        for status in Status::ALL {
            for bits in 0..128u32 {
                let mut t = base.clone();
                let r = &mut t.runner;
                r.status = *status;
                r.respawn_requested = bits & 1 != 0;
                r.dead = bits & 2 != 0;
                r.clear_worktree = bits & 4 != 0;
                r.healing = (bits & 8 != 0).then_some(Phase::Prechecks);
                r.live_session = (bits & 16 != 0).then(|| "r1".to_owned());
                if bits & 32 != 0 {
                    for s in &mut r.sessions {
                        s.ended = false;
                    }
                }
                if bits & 64 != 0 {
                    r.phases.set(Phase::Postchecks, PhaseStatus::Running);
                }
                if !t.waits_for_change() {
                    continue;
                }
                // Bit 32 changes nothing for a base without sessions.
                let changed = if base.runner.sessions.is_empty() {
                    bits & !32
                } else {
                    bits
                };
                waiting.insert((*status, changed));
                for (leaf, deps_done, worktree) in
                    (0..8).map(|i| (i & 1 != 0, i & 2 != 0, i & 4 != 0))
                {
                    let action = next_with(&t, 9, &[], deps_done, leaf, worktree);
                    let allowed = match status {
                        Status::Pending => matches!(action, Action::Idle | Action::Start),
                        Status::Done => matches!(action, Action::Idle | Action::RemoveWorktree),
                        _ => action == Action::Idle,
                    };
                    assert!(allowed, "{status} (bits {bits:07b}): {action:?}");
                }
            }
        }
    }
    // Only the states with nothing under way wait, and the person's three among them.
    assert!(waiting.iter().all(|(_, bits)| *bits == 0), "{waiting:?}");
    let statuses: BTreeSet<Status> = waiting.iter().map(|(s, _)| *s).collect();
    for s in [
        Status::Reviewing,
        Status::Clarification,
        Status::Stuck,
        Status::Pending,
    ] {
        assert!(statuses.contains(&s), "{s} never waits");
    }
    for s in [Status::Working, Status::AgentReview] {
        assert!(!statuses.contains(&s), "{s} waits");
    }
}

impl B {
    fn unstarted(self, session: &str, s: i64) -> B {
        let t = self.0.clone();
        self.apply(react_unstarted(&t, session, &ctx(s, Actor::Runner)).expect("it applies"))
    }
}

/// A session whose runner stopped between recording it and starting it is Warden's side:
/// it ends with no crash charged, and the session the runner meant to start is started
/// again (a worker, a reviewer, a respawn a person asked for, a heal). Only once per
/// status entry: a second is charged as the agent's crash, so nothing loops on it.
#[test]
fn a_session_that_never_started_is_started_again_once() {
    let t = B::review_working(1).unstarted("w1", 2).0;
    assert_eq!((t.crash_count(), t.is_dead()), (0, false));
    assert_eq!(t.live_session(), None);
    assert!(t.sessions()[0].ended && t.sessions()[0].unstarted);
    assert_eq!(next_at(&t, 2, &[]), session(Role::Worker));
    // The second of the same entry is reported gone as usual: the worker's crash.
    let again = B(t).spawn("w2", Role::Worker, None, 3).0;
    assert!(react_unstarted(&again, "w2", &ctx(4, Actor::Runner)).is_none());
    let crashed = B(again)
        .exit(Some("w2"), UNKNOWN_EXIT, art(false, None), 4)
        .0;
    assert_eq!((crashed.crash_count(), crashed.is_dead()), (1, true));
    assert_eq!(next_at(&crashed, 5, &[]), Action::Idle);
    // A reviewer, and a worker a person asked for in a stuck task.
    let review = B::review_working(1)
        .exit(Some("w1"), 0, art(true, None), 2)
        .spawn("r1", Role::Reviewer, None, 3)
        .unstarted("r1", 4)
        .0;
    assert_eq!(review.crash_count(), 0);
    assert_eq!(next_at(&review, 4, &[]), session(Role::Reviewer));
    let stuck = B::review_working(1)
        .to(Status::Stuck, art(false, None), Actor::Person, 2)
        .exit(Some("w1"), 0, art(false, None), 3)
        .respawn(4)
        .spawn("w2", Role::Worker, None, 5)
        .0;
    let stuck = B(stuck).unstarted("w2", 6).0;
    assert_eq!(next_at(&stuck, 6, &[]), session(Role::Worker));
    // A heal that never started is the heal still to run.
    let heal = B::review()
        .start(1)
        .phase(Phase::MergeFi, PhaseStatus::Skipped, 1)
        .phase(Phase::Prechecks, PhaseStatus::Failed, 2)
        .spawn("h1", Role::Worker, Some(Phase::Prechecks), 3)
        .unstarted("h1", 4)
        .0;
    assert_eq!(
        next_at(&heal, 4, &[]),
        Action::StartSession {
            role: Role::Worker,
            heal: Some(Phase::Prechecks)
        }
    );
    // A direct agent task's work session, and a session of an earlier entry (stale:
    // recorded as such, by the usual report).
    let direct = B::direct_agent()
        .start(1)
        .phase(Phase::MergeFi, PhaseStatus::Skipped, 1)
        .phase(Phase::Prechecks, PhaseStatus::Skipped, 1)
        .spawn("w1", Role::Worker, None, 2)
        .unstarted("w1", 3)
        .0;
    assert_eq!((direct.attempts(), direct.is_dead()), (0, false));
    assert_eq!(next_at(&direct, 3, &[]), session(Role::Worker));
    let moved = B::review_working(1)
        .to(Status::Stuck, art(false, None), Actor::Person, 2)
        .0;
    assert!(react_unstarted(&moved, "w1", &ctx(3, Actor::Runner)).is_none());
    assert!(react_unstarted(&moved, "no-such", &ctx(3, Actor::Runner)).is_none());
}
