//! Tests of the operations: seed 001's gates and exit rules driven through `ops`, and the
//! invariants every sequence of operations must keep (proptest).

use super::*;
use crate::artifact::{Artifacts, Evidence, Verdict};
use crate::event::{Event, replay};
use crate::model::{TaskId, WorkSpec, WorkflowKind};
use proptest::prelude::*;

fn ctx() -> Ctx<'static> {
    Ctx {
        task_file: ".warden/tasks/t1/TASK.md",
        ..Ctx::fixed(Actor::Person)
    }
}

fn new_task(workflow: WorkflowKind, postchecks: bool) -> (Task, Vec<Event>) {
    let mut spec = TaskSpec::new(TaskId::new("t1").unwrap(), workflow, 3);
    if postchecks {
        spec.spec.postchecks = Some(WorkSpec::Shell("cargo test".into()));
    }
    let ch = create(spec, Initial::NEW, &ctx()).unwrap();
    (ch.after.clone().unwrap(), ch.events)
}

fn art(handoff: bool, verdict: Option<Verdict>) -> Artifacts {
    art_in(1, handoff, verdict)
}

/// Evidence as round `round` writes it: each round appends its own sections (the n-th
/// of their name), so a later round's are new.
fn art_in(round: u32, handoff: bool, verdict: Option<Verdict>) -> Artifacts {
    let ev = |name: &str| Evidence {
        nth: round,
        section: name.into(),
        digest: format!("digest-of-{name}"),
    };
    Artifacts {
        handoff: handoff.then(|| ev("Handoff")),
        review: verdict.map(|_| ev("Review")),
        verdict,
        ..Default::default()
    }
}

fn input(a: Artifacts, guard: Option<GuardOutcome>) -> TransitionInput {
    TransitionInput {
        artifacts: a,
        guard,
        ..Default::default()
    }
}

/// Moves a fresh review task to `status` through legal, evidenced transitions.
fn at(status: Status, round: u32) -> Task {
    let (mut t, _) = new_task(WorkflowKind::Review, false);
    let step = |t: &Task, to, a| {
        transition(t, to, &input(a, None), &ctx())
            .unwrap()
            .after
            .unwrap()
    };
    t = step(&t, Status::Working, art(false, None));
    if status == Status::Working && round == 0 {
        return t;
    }
    let last = round.max(1);
    for r in 1..=last {
        t = step(&t, Status::AgentReview, art_in(r, true, None));
        if r < last {
            t = step(&t, Status::Working, art_in(r, true, Some(Verdict::Fail)));
        }
    }
    match status {
        Status::AgentReview => t,
        Status::Working => step(&t, Status::Working, art_in(last, true, Some(Verdict::Fail))),
        Status::Reviewing => step(
            &t,
            Status::Reviewing,
            art_in(last, true, Some(Verdict::Pass)),
        ),
        Status::Stuck => {
            let w = step(&t, Status::Working, art_in(last, true, Some(Verdict::Fail)));
            step(&w, Status::Stuck, art(false, None))
        }
        other => panic!("no path to {other} here"),
    }
}

/// Seed 001's artifact-gate table, row by row, with and without the artifact.
#[test]
fn artifact_gates() {
    use Status::*;
    // (from, round, to, artifacts, Ok?)
    let cases: Vec<(Status, u32, Status, Artifacts, bool)> = vec![
        (Working, 0, AgentReview, art(true, None), true),
        (Working, 0, AgentReview, art(false, None), false),
        (
            AgentReview,
            1,
            Reviewing,
            art(true, Some(Verdict::Pass)),
            true,
        ),
        (
            AgentReview,
            1,
            Reviewing,
            art(true, Some(Verdict::Fail)),
            false,
        ),
        (AgentReview, 1, Reviewing, art(true, None), false),
        (
            AgentReview,
            1,
            Working,
            art(true, Some(Verdict::Fail)),
            true,
        ),
        (
            AgentReview,
            1,
            Working,
            art(true, Some(Verdict::Pass)),
            false,
        ),
        (
            AgentReview,
            2,
            Working,
            art(true, Some(Verdict::Fail)),
            false,
        ),
        (AgentReview, 2, Stuck, art(true, Some(Verdict::Fail)), true),
        (AgentReview, 1, Stuck, art(true, Some(Verdict::Fail)), false),
        (AgentReview, 2, Stuck, art(true, None), false),
        // Ungated transitions need nothing.
        (Working, 0, Clarification, art(false, None), true),
        (Working, 0, Stuck, art(false, None), true),
        (AgentReview, 1, Cancelled, art(false, None), true),
        (Reviewing, 1, Done, art(false, None), true),
    ];
    for (from, round, to, a, ok) in cases {
        // What the current round wrote (its own sections).
        let now = |e: Option<Evidence>| {
            e.map(|mut e| {
                e.nth = round.max(1);
                e
            })
        };
        let a = Artifacts {
            handoff: now(a.handoff),
            review: now(a.review),
            ..a
        };
        let t = at(from, round);
        assert_eq!(t.status(), from);
        assert_eq!(t.review_round(), round, "setup of {from} round {round}");
        let r = transition(&t, to, &input(a, None), &ctx());
        assert_eq!(r.is_ok(), ok, "{from} (round {round}) → {to}: {r:?}");
    }
}

#[test]
fn refusal_messages_say_what_to_do() {
    let t = at(Status::Working, 0);
    let e = transition(
        &t,
        Status::AgentReview,
        &input(art(false, None), None),
        &ctx(),
    )
    .unwrap_err();
    assert_eq!(
        Failure::from(e.clone()).text(),
        "refused: working → agent-review needs a non-empty \"## Handoff\" section in .warden/tasks/t1/TASK.md"
    );
    assert_eq!(code(&e), 1);
    let e = transition(&t, Status::Done, &input(art(true, None), None), &ctx()).unwrap_err();
    assert_eq!(
        Failure::from(e.clone()).text(),
        "refused: working → done is not allowed in the review workflow; from working the task can go to: clarification, agent-review, stuck, cancelled"
    );
    let t = at(Status::AgentReview, 2);
    let e = transition(
        &t,
        Status::Working,
        &input(art_in(2, true, Some(Verdict::Fail)), None),
        &ctx(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("goes to stuck"), "{e}");
}

#[test]
fn every_pair_follows_the_map() {
    // With every artifact present, only the map (and round rules) decide.
    for from in [
        Status::Working,
        Status::AgentReview,
        Status::Reviewing,
        Status::Stuck,
    ] {
        for to in Status::ALL {
            let t = at(from, 1);
            let verdict = if *to == Status::Reviewing {
                Verdict::Pass
            } else {
                Verdict::Fail
            };
            let a = art(true, Some(verdict));
            let ok = transition(&t, *to, &input(a, None), &ctx()).is_ok();
            let legal = Workflow::builtin(WorkflowKind::Review).allows(from, *to);
            if !legal {
                assert!(!ok, "{from} → {to} must be refused");
            }
        }
    }
}

#[test]
fn crash_count_resets_on_success_and_review_round_counts() {
    let (t, _) = new_task(WorkflowKind::Review, false);
    let t = transition(&t, Status::Working, &input(art(false, None), None), &ctx())
        .unwrap()
        .after
        .unwrap();
    let ch = exited(
        &t,
        &ExitReport::default(),
        &input(art(false, None), None),
        &ctx(),
    )
    .unwrap();
    let t = ch.after.unwrap();
    assert_eq!(t.crash_count(), 1);
    assert!(t.is_dead());
    assert_eq!(t.status(), Status::Working);
    let t = transition(
        &t,
        Status::AgentReview,
        &input(art(true, None), None),
        &ctx(),
    )
    .unwrap()
    .after
    .unwrap();
    assert_eq!(
        t.crash_count(),
        0,
        "a successful transition resets crash_count"
    );
    assert_eq!(t.review_round(), 1);
    assert!(!t.is_dead());
}

/// What an earlier round left in TASK.md never moves the task again (DESIGN 6): a
/// round-1 Handoff after a FAIL, a round-1 PASS after a person's reject. Before, a
/// reviewer that wrote nothing in round 2 sent the task to the person with round 1's
/// PASS, and a worker that did nothing handed round 1's work off again.
#[test]
fn an_earlier_rounds_evidence_moves_nothing() {
    let at_review = at(Status::AgentReview, 1);
    // Round 1's PASS moved it; a person sends it back; round 2's worker hands off anew.
    let reviewing = transition(
        &at_review,
        Status::Reviewing,
        &input(art_in(1, true, Some(Verdict::Pass)), None),
        &ctx(),
    )
    .unwrap()
    .after
    .unwrap();
    let back = transition(
        &reviewing,
        Status::Working,
        &input(art(false, None), None),
        &ctx(),
    )
    .unwrap()
    .after
    .unwrap();
    let old = art_in(1, true, Some(Verdict::Pass));
    let e = transition(
        &back,
        Status::AgentReview,
        &input(old.clone(), None),
        &ctx(),
    )
    .unwrap_err();
    assert_eq!(
        Failure::from(e).text(),
        "refused: working → agent-review needs a new \"## Handoff\" in .warden/tasks/t1/TASK.md: the one there was handed off already, by an earlier round; append one saying what this round did"
    );
    // A worker session that ends on the old Handoff crashed: nothing was handed off.
    let ch = exited(
        &back,
        &ExitReport::default(),
        &input(old.clone(), None),
        &ctx(),
    )
    .unwrap();
    assert!(
        matches!(&ch.outcome, Outcome::Exit(d) if matches!(&d.action, exit::ExitAction::Crash { reason, .. } if reason.contains("without a new ## Handoff"))),
        "{:?}",
        ch.outcome
    );
    // Round 2's Handoff moves it; round 1's PASS does not pass round 2.
    let round2 = transition(
        &back,
        Status::AgentReview,
        &input(art_in(2, true, None), None),
        &ctx(),
    )
    .unwrap()
    .after
    .unwrap();
    let e = transition(
        &round2,
        Status::Reviewing,
        &input(old.clone(), None),
        &ctx(),
    )
    .unwrap_err();
    assert!(matches!(e, Refusal::StaleVerdict { .. }), "{e}");
    let ch = exited(&round2, &ExitReport::default(), &input(old, None), &ctx()).unwrap();
    let t = ch.after.unwrap();
    assert_eq!(
        t.status(),
        Status::AgentReview,
        "no verdict: the reviewer crashed"
    );
    assert_eq!(t.crash_count(), 1);
    assert!(
        transition(
            &t,
            Status::Reviewing,
            &input(art_in(2, true, Some(Verdict::Pass)), None),
            &ctx()
        )
        .is_ok()
    );
}

/// A worker that writes "## Review PASS" beside its hand-off does not pass its own
/// review: a Review already in the file when the task enters agent-review is judged with
/// the hand-off, by `task complete` and by exit monitoring alike. Before, a silent
/// reviewer let the worker's PASS reach the person as "review says PASS".
#[test]
fn a_review_written_before_the_round_is_not_its_verdict() {
    let forged = art(true, Some(Verdict::Pass));
    let working = at(Status::Working, 0);
    let by_complete = transition(
        &working,
        Status::AgentReview,
        &input(forged.clone(), None),
        &ctx(),
    )
    .unwrap()
    .after
    .unwrap();
    let w = spawned(&working, "w1", Role::Worker, None, &ctx())
        .unwrap()
        .after
        .unwrap();
    let report = ExitReport {
        role: None,
        session: Some("w1".into()),
        exit_code: Some(0),
        reason: None,
    };
    let by_exit = exited(&w, &report, &input(forged.clone(), None), &ctx())
        .unwrap()
        .after
        .unwrap();
    for t in [by_complete, by_exit] {
        assert_eq!(t.status(), Status::AgentReview);
        let e =
            transition(&t, Status::Reviewing, &input(forged.clone(), None), &ctx()).unwrap_err();
        assert!(matches!(e, Refusal::StaleVerdict { .. }), "{e}");
        let t = spawned(&t, "r1", Role::Reviewer, None, &ctx())
            .unwrap()
            .after
            .unwrap();
        let report = ExitReport {
            role: None,
            session: Some("r1".into()),
            exit_code: Some(0),
            reason: None,
        };
        let after = exited(&t, &report, &input(forged.clone(), None), &ctx())
            .unwrap()
            .after
            .unwrap();
        assert_eq!(
            after.status(),
            Status::AgentReview,
            "the reviewer wrote nothing"
        );
        assert_eq!(after.crash_count(), 1);
        // The reviewer's own verdict, appended after the worker's, counts.
        let own = art_in(2, true, Some(Verdict::Pass));
        let own = Artifacts {
            handoff: forged.handoff.clone(),
            ..own
        };
        assert!(transition(&after, Status::Reviewing, &input(own, None), &ctx()).is_ok());
    }
}

/// A hand-off its guard refused costs one attempt. `task complete` may hand it off
/// again (on code fixed since: a new attempt), but a session that ends on it is not
/// judged and charged a second time; it waits for a person, as after a guard that fails
/// at the session's end. Before, one refused hand-off then an exit cost two attempts.
#[test]
fn a_refused_hand_off_is_charged_once() {
    let (t, _) = new_task(WorkflowKind::Review, true);
    let t = transition(&t, Status::Working, &input(art(false, None), None), &ctx())
        .unwrap()
        .after
        .unwrap();
    let fail = || {
        input(
            art(true, None),
            Some(GuardOutcome::Fail("1 test failed".into())),
        )
    };
    let t = transition(&t, Status::AgentReview, &fail(), &ctx())
        .unwrap()
        .after
        .unwrap();
    assert_eq!((t.status(), t.attempts()), (Status::Working, 1));
    let ch = exited(&t, &ExitReport::default(), &fail(), &ctx()).unwrap();
    let after = ch.after.unwrap();
    assert_eq!(after.attempts(), 1, "not charged again");
    assert_eq!(after.crash_count(), 0, "not a crash either");
    assert!(after.is_dead(), "it waits for a person's respawn");
    // An explicit hand-off of the same text runs the guard again: a new attempt.
    let again = transition(&t, Status::AgentReview, &fail(), &ctx())
        .unwrap()
        .after
        .unwrap();
    assert_eq!(again.attempts(), 2);
}

#[test]
fn double_crash_escalates_and_keeps_crash_count() {
    let t = at(Status::Working, 0);
    let no = input(art(false, None), None);
    let t = exited(&t, &ExitReport::default(), &no, &ctx())
        .unwrap()
        .after
        .unwrap();
    let ch = exited(&t, &ExitReport::default(), &no, &ctx()).unwrap();
    let t = ch.after.unwrap();
    assert_eq!(t.status(), Status::Stuck);
    assert_eq!(t.crash_count(), 2, "a crash escalation keeps crash_count");
    let kinds: Vec<&str> = ch.events.iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(kinds, ["session.exited", "agent.crashed", "auto.advanced"]);
    assert_eq!(
        ch.events[2].kind.reason().as_deref(),
        Some(REASON_CRASH_THRESHOLD)
    );
}

#[test]
fn guard_fail_charges_an_attempt_and_saturates_to_stuck() {
    let (t, _) = new_task(WorkflowKind::Review, true);
    let mut t = transition(&t, Status::Working, &input(art(false, None), None), &ctx())
        .unwrap()
        .after
        .unwrap();
    for n in 1..=3 {
        let ch = transition(
            &t,
            Status::AgentReview,
            &input(
                art(true, None),
                Some(GuardOutcome::Fail("3 tests failed".into())),
            ),
            &ctx(),
        )
        .unwrap();
        t = ch.after.unwrap();
        assert_eq!(t.attempts(), n);
        let stuck = n == 3;
        assert_eq!(
            ch.outcome,
            Outcome::GuardFailed {
                tail: "3 tests failed".into(),
                stuck
            }
        );
        assert_eq!(
            t.status(),
            if stuck {
                Status::Stuck
            } else {
                Status::Working
            }
        );
    }
    assert!(!t.passes());
}

#[test]
fn guard_pass_sets_passes_and_error_refuses_without_charge() {
    let (t, _) = new_task(WorkflowKind::Review, true);
    let t = transition(&t, Status::Working, &input(art(false, None), None), &ctx())
        .unwrap()
        .after
        .unwrap();
    let e = transition(
        &t,
        Status::AgentReview,
        &input(
            art(true, None),
            Some(GuardOutcome::Error("sh: not found".into())),
        ),
        &ctx(),
    )
    .unwrap_err();
    assert_eq!(code(&e), 5);
    let e = transition(
        &t,
        Status::AgentReview,
        &input(art(true, None), None),
        &ctx(),
    )
    .unwrap_err();
    assert_eq!(code(&e), 5, "a guard that was needed but not run is a bug");
    let ch = transition(
        &t,
        Status::AgentReview,
        &input(art(true, None), Some(GuardOutcome::Pass)),
        &ctx(),
    )
    .unwrap();
    let after = ch.after.unwrap();
    assert!(after.passes());
    assert_eq!(after.status(), Status::AgentReview);
    match &ch.events.last().unwrap().kind {
        EventKind::StatusChanged { evidence, .. } => {
            assert_eq!(evidence.as_ref().unwrap().digest, "digest-of-Handoff")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn direct_workflow_guard_alone() {
    let (t, _) = new_task(WorkflowKind::Direct, true);
    let t = transition(&t, Status::Working, &input(art(false, None), None), &ctx())
        .unwrap()
        .after
        .unwrap();
    let (needs, _) = check_transition(&t, Status::Done, &art(false, None), &ctx()).unwrap();
    assert_eq!(
        needs,
        Needs {
            commit: true,
            guard: true,
            merge_ri: true
        }
    );
    let done = transition(
        &t,
        Status::Done,
        &input(art(false, None), Some(GuardOutcome::Pass)),
        &ctx(),
    )
    .unwrap()
    .after
    .unwrap();
    assert_eq!(done.status(), Status::Done);
    assert!(done.passes());
    // A failed merge refuses and leaves the task where it was.
    let mut inp = input(art(false, None), Some(GuardOutcome::Pass));
    inp.phases = vec![(
        Phase::MergeRi,
        PhaseStatus::Failed,
        Some("conflict in src/a.rs".into()),
    )];
    let e = transition(&t, Status::Done, &inp, &ctx()).unwrap_err();
    assert!(e.to_string().contains("src/a.rs"), "{e}");
}

/// A direct task's work session that Warden's host ended says why in the failure a
/// person reads, not only its exit code.
#[test]
fn a_failed_work_session_says_why_it_ended() {
    let mut spec = TaskSpec::new(TaskId::new("t1").unwrap(), WorkflowKind::Direct, 3);
    spec.spec.work = Some(WorkSpec::Shell("yes".into()));
    let t = create(spec, Initial::NEW, &ctx()).unwrap().after.unwrap();
    let t = transition(&t, Status::Working, &input(art(false, None), None), &ctx())
        .unwrap()
        .after
        .unwrap();
    let t = spawned(&t, "w1", Role::Worker, None, &ctx())
        .unwrap()
        .after
        .unwrap();
    let report = |reason: Option<&str>| ExitReport {
        role: None,
        session: Some("w1".into()),
        exit_code: Some(137),
        reason: reason.map(str::to_owned),
    };
    let failure = |r: &ExitReport| {
        let ch = exited(&t, r, &input(art(false, None), None), &ctx()).unwrap();
        ch.after.unwrap().last_failure().map(str::to_owned)
    };
    let why = "killed: its output passed limits.session_log_mib, 1 MiB";
    assert_eq!(
        failure(&report(Some(why))).as_deref(),
        Some(
            "work failed: the work session ended with exit code 137 (killed: its output passed limits.session_log_mib, 1 MiB)"
        )
    );
    assert_eq!(
        failure(&report(None)).as_deref(),
        Some("work failed: the work session ended with exit code 137")
    );
}

#[test]
fn terminal_statuses_never_change() {
    let t = at(Status::Reviewing, 1);
    let done = transition(&t, Status::Done, &input(art(false, None), None), &ctx())
        .unwrap()
        .after
        .unwrap();
    for to in Status::ALL {
        let e = transition(
            &done,
            *to,
            &input(art(true, Some(Verdict::Pass)), None),
            &ctx(),
        );
        assert!(matches!(e, Err(Refusal::Terminal { .. })), "done → {to}");
    }
}

#[test]
fn stale_and_duplicate_exit_reports() {
    let t = at(Status::Working, 0);
    let t = spawned(&t, "w1", Role::Worker, None, &ctx())
        .unwrap()
        .after
        .unwrap();
    assert_eq!(t.live_session(), Some("w1"));
    // The worker hands over; the reviewer starts.
    let t = transition(
        &t,
        Status::AgentReview,
        &input(art(true, None), None),
        &ctx(),
    )
    .unwrap()
    .after
    .unwrap();
    let t = spawned(&t, "r1", Role::Reviewer, None, &ctx())
        .unwrap()
        .after
        .unwrap();
    // The worker's exit arrives late: stale, recorded only.
    let report = ExitReport {
        role: None,
        session: Some("w1".into()),
        exit_code: Some(0),
        reason: None,
    };
    let ch = exited(&t, &report, &input(art(true, None), None), &ctx()).unwrap();
    let after = ch.after.clone().unwrap();
    assert_eq!(after.status(), Status::AgentReview);
    assert_eq!(after.live_session(), Some("r1"));
    assert_eq!(after.crash_count(), 0);
    assert_eq!(ch.events.len(), 1);
    // The reviewer ends with PASS: advance.
    let report = ExitReport {
        role: None,
        session: Some("r1".into()),
        exit_code: Some(0),
        reason: None,
    };
    let ch = exited(
        &after,
        &report,
        &input(art(true, Some(Verdict::Pass)), None),
        &ctx(),
    )
    .unwrap();
    let after = ch.after.unwrap();
    assert_eq!(after.status(), Status::Reviewing);
    // The same report again: nothing changes.
    let ch = exited(&after, &report, &input(art(true, None), None), &ctx()).unwrap();
    assert_eq!(ch.after.as_ref().unwrap().status(), Status::Reviewing);
    assert!(!ch.after.unwrap().is_dead());
}

#[test]
fn retry_resets_attempts_and_phases() {
    let (t, _) = new_task(WorkflowKind::Direct, true);
    let mut t = transition(&t, Status::Working, &input(art(false, None), None), &ctx())
        .unwrap()
        .after
        .unwrap();
    for p in [Phase::MergeFi, Phase::Prechecks, Phase::Work, Phase::Commit] {
        t = phase(&t, p, PhaseStatus::Success, None, &ctx())
            .unwrap()
            .after
            .unwrap();
    }
    for _ in 0..3 {
        t = attempt_failed(&t, Phase::Postchecks, "boom", &ctx())
            .unwrap()
            .after
            .unwrap();
    }
    assert_eq!(t.status(), Status::Stuck);
    assert_eq!(t.attempts(), 3);
    let req = RetryRequest {
        postchecks: SpecChange::Remove,
        ..Default::default()
    };
    let ch = retry(&t, &req, &ctx()).unwrap();
    let t = ch.after.unwrap();
    assert_eq!(t.status(), Status::Working);
    assert_eq!(t.attempts(), 0);
    assert_eq!(t.resume_from_phase(), Some(Phase::Postchecks));
    assert_eq!(t.phases().get(Phase::Work), PhaseStatus::Success, "kept");
    assert_eq!(t.phases().get(Phase::Postchecks), PhaseStatus::Pending);
    assert_eq!(t.spec.spec.postchecks, None);
    let e = retry(&t, &req, &ctx()).unwrap_err();
    assert_eq!(
        Failure::from(e.clone()).text(),
        "refused: task t1 is working; only a stuck task can be retried"
    );
}

#[test]
fn respawn_rules() {
    let t = at(Status::Working, 0);
    let t = spawned(&t, "w1", Role::Worker, None, &ctx())
        .unwrap()
        .after
        .unwrap();
    assert!(request_respawn(&t, &ctx()).is_err(), "live session");
    let t = exited(
        &t,
        &ExitReport::default(),
        &input(art(false, None), None),
        &ctx(),
    )
    .unwrap()
    .after
    .unwrap();
    let t = request_respawn(&t, &ctx()).unwrap().after.unwrap();
    assert!(t.respawn_requested());
    // One request stands until a session starts: a second is refused, not recorded.
    let again = request_respawn(&t, &ctx()).unwrap_err().to_string();
    assert!(again.contains("has a respawn requested already"), "{again}");
    assert!(
        spawned(&t, "r", Role::Reviewer, None, &ctx()).is_err(),
        "wrong role"
    );
    let (p, _) = new_task(WorkflowKind::Review, false);
    assert!(
        request_respawn(&p, &ctx()).is_err(),
        "pending has no session"
    );
}

#[test]
fn prepend_lands_in_one_write() {
    let t = at(Status::Working, 0);
    let ch = transition(
        &t,
        Status::Clarification,
        &input(art(false, None), None),
        &ctx(),
    )
    .unwrap();
    let ch = ch
        .prepend(
            vec![EventKind::TamperIgnored {
                field: "attempts".into(),
                agent_value: Some("0".into()),
                true_value: "1".into(),
            }],
            &ctx(),
        )
        .unwrap();
    assert_eq!(ch.events.len(), 2);
    assert!(ch.events.iter().all(|e| e.version == t.version() + 1));
    assert_eq!(ch.after.unwrap().version(), t.version() + 1);
}

// ---------------------------------------------------------------------------------
// Invariants over arbitrary sequences of operations.

#[derive(Clone, Debug)]
enum Op {
    Update(Status, bool, Option<Verdict>),
    GuardFail,
    Exited(Option<u8>, bool, Option<Verdict>),
    Spawn(Role, u8),
    Retry(bool, bool),
    Respawn,
    Phase(Phase, PhaseStatus),
    AttemptFailed(Phase),
}

fn status() -> impl Strategy<Value = Status> {
    prop::sample::select(Status::ALL.to_vec())
}

fn verdict() -> impl Strategy<Value = Option<Verdict>> {
    prop::option::of(prop::sample::select(vec![Verdict::Pass, Verdict::Fail]))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (status(), any::<bool>(), verdict()).prop_map(|(s, h, v)| Op::Update(s, h, v)),
        1 => Just(Op::GuardFail),
        2 => (prop::option::of(0u8..4), any::<bool>(), verdict()).prop_map(|(s, h, v)| Op::Exited(s, h, v)),
        2 => (prop::sample::select(vec![Role::Worker, Role::Reviewer]), 0u8..4).prop_map(|(r, n)| Op::Spawn(r, n)),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(w, c)| Op::Retry(w, c)),
        1 => Just(Op::Respawn),
        1 => (prop::sample::select(Phase::ALL.to_vec()), prop::sample::select(PhaseStatus::ALL.to_vec())).prop_map(|(p, s)| Op::Phase(p, s)),
        1 => prop::sample::select(Phase::ALL.to_vec()).prop_map(Op::AttemptFailed),
    ]
}

fn run(t: &Task, op: &Op) -> Result<Change, Refusal> {
    let c = ctx();
    match op {
        Op::Update(to, h, v) => {
            let guard = t.spec.spec.postchecks.as_ref().map(|_| GuardOutcome::Pass);
            transition(t, *to, &input(art(*h, *v), guard), &c)
        }
        Op::GuardFail => transition(
            t,
            Status::AgentReview,
            &input(art(true, None), Some(GuardOutcome::Fail("x".into()))),
            &c,
        ),
        Op::Exited(s, h, v) => {
            let report = ExitReport {
                role: None,
                session: s.map(|n| format!("s{n}")),
                exit_code: Some(0),
                reason: None,
            };
            exited(
                t,
                &report,
                &input(art(*h, *v), Some(GuardOutcome::Pass)),
                &c,
            )
        }
        Op::Spawn(role, n) => spawned(t, &format!("s{n}"), *role, None, &c),
        Op::Retry(w, clear) => retry(
            t,
            &RetryRequest {
                work: w.then(|| WorkSpec::Agent("again".into())),
                clear_worktree: *clear,
                ..Default::default()
            },
            &c,
        ),
        Op::Respawn => request_respawn(t, &c),
        Op::Phase(p, s) => phase(t, *p, *s, None, &c),
        Op::AttemptFailed(p) => attempt_failed(t, *p, "failed", &c),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// attempts ≤ max_attempts always; a terminal status never changes; a refused
    /// operation changes nothing; replaying the events rebuilds the task exactly.
    #[test]
    fn operation_sequences_keep_invariants(
        postchecks in any::<bool>(),
        direct in any::<bool>(),
        ops in prop::collection::vec(op(), 0..40),
    ) {
        let wf = if direct { WorkflowKind::Direct } else { WorkflowKind::Review };
        let (mut t, mut log) = new_task(wf, postchecks);
        for op in &ops {
            let before = t.clone();
            match run(&t, op) {
                Ok(ch) => {
                    prop_assert_eq!(ch.before.as_ref(), Some(&before));
                    let after = ch.after.clone().unwrap();
                    if ch.events.is_empty() {
                        // Nothing recorded (a second report of a session's end): no change.
                        prop_assert_eq!(&after, &before);
                    } else {
                        prop_assert_eq!(after.version(), before.version() + 1);
                    }
                    if before.status().is_terminal() {
                        prop_assert_eq!(after.status(), before.status());
                    }
                    log.extend(ch.events);
                    t = after;
                }
                Err(_) => prop_assert_eq!(&t, &before),
            }
            prop_assert!(t.attempts() <= t.spec.max_attempts);
            if t.status() == Status::Done {
                prop_assert!(t.passes());
            }
        }
        for (i, e) in log.iter_mut().enumerate() {
            e.seq = i as u64 + 1;
        }
        let rebuilt = replay(&log).unwrap();
        prop_assert_eq!(rebuilt.get(t.id()), Some(&t));
    }

    /// The same inputs give byte-identical events.
    #[test]
    fn operations_are_deterministic(ops in prop::collection::vec(op(), 0..20)) {
        let go = || {
            let (mut t, mut log) = new_task(WorkflowKind::Review, true);
            for op in &ops {
                if let Ok(ch) = run(&t, op) {
                    log.extend(ch.events);
                    t = ch.after.unwrap();
                }
            }
            format!("{log:?}")
        };
        prop_assert_eq!(go(), go());
    }
}

#[test]
fn stuck_to_agent_review_needs_handoff_and_guard() {
    let (t, _) = new_task(WorkflowKind::Review, true);
    let t = transition(&t, Status::Working, &input(art(false, None), None), &ctx())
        .unwrap()
        .after
        .unwrap();
    let t = transition(&t, Status::Stuck, &input(art(false, None), None), &ctx())
        .unwrap()
        .after
        .unwrap();
    let e = transition(
        &t,
        Status::AgentReview,
        &input(art(false, None), None),
        &ctx(),
    )
    .unwrap_err();
    assert!(matches!(e, Refusal::NeedsHandoff { .. }), "{e}");
    let e = transition(
        &t,
        Status::AgentReview,
        &input(art(true, None), None),
        &ctx(),
    )
    .unwrap_err();
    assert_eq!(code(&e), 5, "the guard must run: {e}");
    let ch = transition(
        &t,
        Status::AgentReview,
        &input(art(true, None), Some(GuardOutcome::Fail("x".into()))),
        &ctx(),
    )
    .unwrap();
    assert_eq!(ch.after.unwrap().status(), Status::Stuck);
}

/// The exit code a refusal leads to.
fn code(e: &Refusal) -> u8 {
    Failure::from(e.clone()).code.code()
}

/// A task with an evidence file (`TaskSpec::evidence`): the file's content counts as the
/// `## Handoff` at `working → agent-review` and in exit monitoring, its digest is the
/// recorded evidence, and without it the refusal names both places.
#[test]
fn an_evidence_file_counts_as_the_handoff() {
    let summary = ".planning/phases/01-a/01-01-SUMMARY.md";
    let mut spec = TaskSpec::new(TaskId::new("t1").unwrap(), WorkflowKind::Review, 3);
    spec.evidence = Some(summary.into());
    let t = create(spec, Initial::NEW, &ctx()).unwrap().after.unwrap();
    let t = transition(&t, Status::Working, &input(art(false, None), None), &ctx())
        .unwrap()
        .after
        .unwrap();
    // Nothing written: refused, naming TASK.md and the evidence file.
    let err = transition(
        &t,
        Status::AgentReview,
        &input(art(false, None), None),
        &ctx(),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        format!(
            "working → agent-review needs a non-empty \"## Handoff\" section in .warden/tasks/t1/TASK.md or content in its evidence file {summary}"
        )
    );
    // A frontmatter-only or empty file is no evidence; a file with content is.
    assert_eq!(
        crate::artifact::file_evidence(summary, "---\nphase: 1\n---\n \n"),
        None
    );
    assert_eq!(
        crate::artifact::file_evidence(summary, "<!-- todo -->\n"),
        None
    );
    let ev = crate::artifact::file_evidence(summary, "---\nphase: 1\n---\nDone.\n").unwrap();
    assert_eq!(ev.section, summary);
    let a = Artifacts {
        handoff: Some(ev.clone()),
        ..Default::default()
    };
    let ch = transition(&t, Status::AgentReview, &input(a.clone(), None), &ctx()).unwrap();
    assert_eq!(ch.after.as_ref().unwrap().status(), Status::AgentReview);
    let recorded = ch.events.iter().find_map(|e| match &e.kind {
        EventKind::StatusChanged { evidence, .. } => evidence.clone(),
        _ => None,
    });
    assert_eq!(recorded.map(|e| e.digest), Some(ev.digest.clone()));
    // Exit monitoring reads the same artifacts.
    let d = crate::exit::decide(&t, &a, &crate::exit::ExitReport::default(), &ctx().limits);
    assert!(
        matches!(
            d.action,
            crate::exit::ExitAction::Advance {
                to: Status::AgentReview,
                ..
            }
        ),
        "{d:?}"
    );
}

#[test]
fn an_evidence_file_must_stay_inside_the_project() {
    for (path, ok) in [
        (".planning/phases/01-a/01-01-SUMMARY.md", true),
        ("SUMMARY.md", true),
        ("../outside.md", false),
        ("/etc/passwd", false),
        (".planning/../../x.md", false),
        ("a//b.md", false),
        ("./a.md", false),
        ("", false),
        ("a\\..\\b", false),
    ] {
        let mut spec = TaskSpec::new(TaskId::new("t1").unwrap(), WorkflowKind::Review, 3);
        spec.evidence = Some(path.into());
        assert_eq!(validate_spec(&spec).is_ok(), ok, "{path:?}");
    }
}

#[test]
fn a_check_that_runs_nothing_is_refused() {
    for (cmd, ok) in [
        ("make test", true),
        ("# build\nmake", true),
        ("make # and test", true),
        ("", false),
        ("  \n ", false),
        ("# make test", false),
        ("  # one\n\n# two\n", false),
    ] {
        let mut spec = TaskSpec::new(TaskId::new("t1").unwrap(), WorkflowKind::Direct, 3);
        spec.spec.postchecks = Some(WorkSpec::Shell(cmd.into()));
        assert_eq!(validate_spec(&spec).is_ok(), ok, "{cmd:?}");
    }
}

/// A worker that leaves an HTML comment or a code fence open after its own "## Review
/// PASS" would have the reviewer's appended "## Review FAIL" read as the text of its
/// PASS (and an open one before a reviewer's PASS would hide it). Such a file passes no
/// gate: the refusal names the line and what to close. A heading quoted inside a closed
/// fence is text, as before, and hides nothing.
#[test]
fn a_section_swallowed_by_an_open_comment_or_fence_passes_no_gate() {
    let t = at(Status::AgentReview, 1);
    for open in ["<!--", "```"] {
        let text = format!(
            "# T\n\n## Handoff\nDone.\n\n## Review\nPASS\n{open}\n\n## Review\nFAIL: no tests\n"
        );
        let a = crate::artifact::artifacts(&text);
        assert_eq!((a.review.as_ref(), a.verdict), (None, None), "{open}");
        let e = transition(&t, Status::Reviewing, &input(a.clone(), None), &ctx()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "agent-review → reviewing cannot read .warden/tasks/t1/TASK.md: line 10 \"## Review\" is not a section: the {} opened on line 8 is never closed, so everything after it is its text; close it, then run this again",
                if open == "```" {
                    "code fence"
                } else {
                    "HTML comment"
                }
            )
        );
        assert!(transition(&t, Status::Working, &input(a, None), &ctx()).is_err());
    }
    let quoted =
        "# T\n\n## Handoff\nDone.\n\n```\n## Review\nPASS\n```\n\n## Review\nFAIL: no tests\n";
    let a = crate::artifact::artifacts(quoted);
    assert_eq!(a.hidden, None);
    assert_eq!(a.verdict, Some(Verdict::Fail));
}
