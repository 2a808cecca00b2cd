//! Exit monitoring (seed 001, DESIGN 2.2): what a session's end means for its task.
//!
//! [`decide`] is one pure function from (task, artifacts, exit report, limits) to a
//! decision; [`crate::ops::exited`] turns the decision into events.

use crate::artifact::{Artifacts, Verdict};
use crate::event::Disposition;
use crate::model::{Limits, Role, Status, Task, WorkflowKind};

/// A session-end report (`warden task exited ID [--exit-code N] [--session S]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExitReport {
    /// The session that ended, if the reporter names it.
    pub session: Option<String>,
    /// Its exit code, if known.
    pub exit_code: Option<i32>,
    /// Why it ended, if the reporter says (a harness's session-end hook).
    pub reason: Option<String>,
    /// The role of the session that ended, as its environment says (`WARDEN_ROLE`): a
    /// session a person started has no record to say it. A report of a role the task's
    /// status no longer calls for (a worker's end after its hand-off) is only recorded.
    pub role: Option<Role>,
}

/// What the end of a session leads to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitAction {
    /// Move on evidence; `spawn` names the session to start for the new status.
    Advance {
        /// The new status.
        to: Status,
        /// Why, for `auto.advanced`.
        reason: String,
        /// Run the guard (postchecks) inside the transition.
        guard: bool,
        /// The session to start after the transition.
        spawn: Option<Role>,
    },
    /// The session ended without its artifact.
    Crash {
        /// The new crash count.
        crash_count: u32,
        /// At the threshold: the runner moves the task to `stuck`.
        escalate: bool,
        /// Below the threshold, the session the runner restarts by itself (the reviewer).
        respawn: Option<Role>,
        /// What was missing.
        reason: String,
    },
    /// A `direct` task's work session ended: the work phase succeeded or failed, and the
    /// supervisor carries on with the pipeline.
    WorkEnded {
        /// Exit code 0 (or unknown).
        success: bool,
    },
    /// No advance; the task shows a dead session (clarification, reviewing, stuck).
    MarkDead,
    /// A heal session ended: no crash; the healed phase runs again.
    HealEnded {
        /// The phase it was to fix.
        phase: crate::model::Phase,
    },
    /// Nothing to do (stale or duplicate report, or a status without sessions).
    Nothing,
}

/// The decision for one report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitDecision {
    /// How the report was classified.
    pub disposition: Disposition,
    /// What follows.
    pub action: ExitAction,
}

/// Classifies a report against the sessions Warden started (DESIGN 2.2, "Which session
/// ended matters"): each real end counts exactly once, whoever reports it (the session's
/// host, tmux's hook, the agent harness's hook, the supervisor's sweep).
///
/// - one of Warden's sessions whose end was reported already: a duplicate;
/// - one started for an earlier status entry: stale (it ends that session, nothing else);
/// - one of the current entry: the current session;
/// - a session Warden did not start (a harness's own id, never reported before): the
///   current session — a person's own agent, started by hand once Warden's had ended,
///   ends with it (the harness hook reports only sessions Warden did not start);
/// - no session named: the current session — unless the current entry's sessions have
///   all ended already, which makes it a second report of the same end (a duplicate).
pub fn disposition(task: &Task, report: &ExitReport) -> Disposition {
    let known = report
        .session
        .as_deref()
        .and_then(|s| task.runner.sessions.iter().rev().find(|r| r.id == s));
    match known {
        Some(rec) if rec.ended => Disposition::Duplicate,
        Some(rec) if rec.entry < task.runner.entry => Disposition::Stale,
        Some(_) => Disposition::Current,
        None if report
            .session
            .as_deref()
            .is_some_and(|s| task.runner.reported.iter().any(|r| r == s)) =>
        {
            Disposition::Duplicate
        }
        // A session with no record of its own (started by hand) whose role the task's
        // status does not call for: a worker's end after its hand-off, which DESIGN 2.2
        // only records. It was taken for the reviewer's end: a crash (two made the task
        // stuck), or, with a Review the worker wrote itself, a pass of its own review.
        None if report
            .role
            .is_some_and(|r| crate::ops::role_for(task.status()) != Some(r)) =>
        {
            Disposition::Stale
        }
        None if report.session.is_some() => Disposition::Current,
        None => {
            let mut current = task
                .runner
                .sessions
                .iter()
                .filter(|r| r.entry == task.runner.entry)
                .peekable();
            if current.peek().is_some() && current.all(|r| r.ended) {
                Disposition::Duplicate
            } else {
                Disposition::Current
            }
        }
    }
}

/// The session a report ends, when it names one of Warden's.
pub fn reported_record<'t>(
    task: &'t Task,
    report: &ExitReport,
) -> Option<&'t crate::model::SessionRecord> {
    let s = report.session.as_deref()?;
    task.runner.sessions.iter().rev().find(|r| r.id == s)
}

/// The exit-monitoring table as one function.
pub fn decide(
    task: &Task,
    artifacts: &Artifacts,
    report: &ExitReport,
    limits: &Limits,
) -> ExitDecision {
    let disposition = disposition(task, report);
    if disposition != Disposition::Current {
        return ExitDecision {
            disposition,
            action: ExitAction::Nothing,
        };
    }
    let crash = |reason: &str, respawn: Option<Role>| {
        let crash_count = task.crash_count() + 1;
        let escalate = crash_count >= limits.crash_threshold;
        ExitAction::Crash {
            crash_count,
            escalate,
            respawn: if escalate { None } else { respawn },
            // With what the reporter said of the end (a timeout, an output limit, a
            // TASK.md that could not be read): the reason a person reads for the crash.
            reason: match report.reason.as_deref().filter(|r| !r.is_empty()) {
                Some(why) => format!("{reason} ({why})"),
                None => reason.to_owned(),
            },
        }
    };
    // A heal session (started to fix a failed phase, not to do the work) ends without
    // a verdict on the work: the phase runs again.
    if let Some(phase) = reported_record(task, report).and_then(|r| r.heal)
        && phase != crate::model::Phase::Work
    {
        return ExitDecision {
            disposition,
            action: ExitAction::HealEnded { phase },
        };
    }
    // Only what this round wrote counts: a Handoff or Review an earlier round left is
    // none (DESIGN 6).
    let fresh = task.fresh(artifacts);
    let action = match (task.spec.workflow, task.status()) {
        (WorkflowKind::Direct, Status::Working) => ExitAction::WorkEnded {
            success: report.exit_code.unwrap_or(0) == 0,
        },
        (WorkflowKind::Review, Status::Working) => {
            if artifacts
                .handoff
                .as_ref()
                .is_some_and(|h| task.refused_handoff(h))
            {
                // The session ends on the hand-off its guard refused: that attempt is
                // charged already, and nothing new was handed off. The task waits, as
                // after a guard that fails at the session's end.
                ExitAction::MarkDead
            } else if fresh.handoff.is_some() {
                ExitAction::Advance {
                    to: Status::AgentReview,
                    reason: "session ended with ## Handoff".to_owned(),
                    guard: true,
                    spawn: Some(Role::Reviewer),
                }
            } else if artifacts.handoff.is_some() {
                crash(
                    "process exited without a new ## Handoff (the one in TASK.md is an earlier round's)",
                    None,
                )
            } else {
                crash("process exited without ## Handoff", None)
            }
        }
        (WorkflowKind::Review, Status::AgentReview) => match fresh.verdict {
            Some(Verdict::Pass) => ExitAction::Advance {
                to: Status::Reviewing,
                reason: "review verdict PASS".to_owned(),
                guard: false,
                spawn: None,
            },
            Some(Verdict::Fail) if task.review_round() < limits.max_review_rounds => {
                ExitAction::Advance {
                    to: Status::Working,
                    reason: format!(
                        "review verdict FAIL in round {} of {}",
                        task.review_round(),
                        limits.max_review_rounds
                    ),
                    guard: false,
                    spawn: Some(Role::Worker),
                }
            }
            Some(Verdict::Fail) => ExitAction::Advance {
                to: Status::Stuck,
                reason: format!(
                    "review verdict FAIL in round {} of {}",
                    task.review_round(),
                    limits.max_review_rounds
                ),
                guard: false,
                spawn: None,
            },
            None if artifacts.verdict.is_some() => crash(
                "process exited without a new ## Review verdict (the one in TASK.md is an earlier round's)",
                Some(Role::Reviewer),
            ),
            None => crash(
                "process exited without a ## Review verdict",
                Some(Role::Reviewer),
            ),
        },
        (_, Status::Clarification | Status::Reviewing | Status::Stuck) => ExitAction::MarkDead,
        _ => ExitAction::Nothing,
    };
    ExitDecision {
        disposition,
        action,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::Evidence;
    use crate::model::{RunnerState, SessionRecord, TaskId, TaskSpec};

    fn task(status: Status, crash_count: u32, review_round: u32) -> Task {
        let mut runner = RunnerState::new(status, false, 0, jiff::Timestamp::UNIX_EPOCH);
        runner.crash_count = crash_count;
        runner.review_round = review_round;
        runner.entry = 5;
        runner.sessions = vec![
            record("done-before", 3, true),
            record("old", 4, false),
            record("cur", 5, false),
        ];
        Task {
            spec: TaskSpec::new(TaskId::new("t").unwrap(), WorkflowKind::Review, 3),
            runner,
        }
    }

    fn record(id: &str, entry: u32, ended: bool) -> SessionRecord {
        SessionRecord {
            id: id.into(),
            role: Role::Worker,
            entry,
            started_at: None,
            ended,
            unstarted: false,
            stop: None,
            heal: None,
            conversation: None,
        }
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

    fn check(status: Status, crashes: u32, round: u32, a: Artifacts, expected: ExitAction) {
        let t = task(status, crashes, round);
        let report = ExitReport {
            role: None,
            session: Some("cur".into()),
            exit_code: Some(0),
            reason: None,
        };
        let d = decide(&t, &a, &report, &Limits::default());
        assert_eq!(d.disposition, Disposition::Current);
        assert_eq!(
            d.action, expected,
            "{status} crashes={crashes} round={round}"
        );
    }

    fn crash(count: u32, escalate: bool, respawn: Option<Role>, reason: &str) -> ExitAction {
        ExitAction::Crash {
            crash_count: count,
            escalate,
            respawn,
            reason: reason.into(),
        }
    }

    /// DESIGN 2.2's table, row by row (seed 001 "Auto-Advance Rules").
    #[test]
    fn exit_table() {
        use Status::*;
        let advance = |to, guard, spawn, reason: &str| ExitAction::Advance {
            to,
            reason: reason.into(),
            guard,
            spawn,
        };
        // working + ## Handoff → agent-review, guard included, spawn reviewer.
        check(
            Working,
            0,
            0,
            art(true, None),
            advance(
                AgentReview,
                true,
                Some(Role::Reviewer),
                "session ended with ## Handoff",
            ),
        );
        // working, no evidence: crash; below threshold stays; at threshold → stuck.
        check(
            Working,
            0,
            0,
            art(false, None),
            crash(1, false, None, "process exited without ## Handoff"),
        );
        check(
            Working,
            1,
            0,
            art(false, None),
            crash(2, true, None, "process exited without ## Handoff"),
        );
        // agent-review PASS → reviewing.
        check(
            AgentReview,
            0,
            1,
            art(true, Some(Verdict::Pass)),
            advance(Reviewing, false, None, "review verdict PASS"),
        );
        // FAIL, round < 2 → working, respawn worker.
        check(
            AgentReview,
            0,
            1,
            art(true, Some(Verdict::Fail)),
            advance(
                Working,
                false,
                Some(Role::Worker),
                "review verdict FAIL in round 1 of 2",
            ),
        );
        // FAIL, round ≥ 2 → stuck.
        check(
            AgentReview,
            0,
            2,
            art(true, Some(Verdict::Fail)),
            advance(Stuck, false, None, "review verdict FAIL in round 2 of 2"),
        );
        // no verdict: crash; below threshold respawn the reviewer.
        check(
            AgentReview,
            0,
            1,
            art(true, None),
            crash(
                1,
                false,
                Some(Role::Reviewer),
                "process exited without a ## Review verdict",
            ),
        );
        check(
            AgentReview,
            1,
            1,
            art(true, None),
            crash(2, true, None, "process exited without a ## Review verdict"),
        );
        // clarification, reviewing, stuck: no advance; marked dead.
        for s in [Clarification, Reviewing, Stuck] {
            check(
                s,
                0,
                1,
                art(true, Some(Verdict::Pass)),
                ExitAction::MarkDead,
            );
        }
        check(Done, 0, 1, art(true, None), ExitAction::Nothing);
        check(Pending, 0, 0, art(false, None), ExitAction::Nothing);
    }

    /// A crash's reason carries what the reporter said of the end: a person reads why a
    /// session ended without its evidence (its timeout, a TASK.md that could not be read).
    #[test]
    fn a_crash_says_what_the_reporter_said() {
        let t = task(Status::Working, 0, 0);
        let report = |reason: Option<&str>| ExitReport {
            role: None,
            session: Some("cur".into()),
            exit_code: Some(124),
            reason: reason.map(str::to_owned),
        };
        let why = "killed: it ran past limits.phase_timeout_s, 3600s";
        let d = decide(
            &t,
            &art(false, None),
            &report(Some(why)),
            &Limits::default(),
        );
        assert_eq!(
            d.action,
            crash(
                1,
                false,
                None,
                "process exited without ## Handoff (killed: it ran past limits.phase_timeout_s, 3600s)"
            )
        );
        let d = decide(&t, &art(false, None), &report(Some("")), &Limits::default());
        assert_eq!(
            d.action,
            crash(1, false, None, "process exited without ## Handoff")
        );
    }

    #[test]
    fn which_session_ended() {
        let t = task(Status::Working, 0, 0);
        let check = |session: Option<&str>, expected: Disposition| {
            let r = ExitReport {
                role: None,
                session: session.map(str::to_owned),
                exit_code: None,
                reason: None,
            };
            assert_eq!(disposition(&t, &r), expected, "{session:?}");
        };
        check(Some("cur"), Disposition::Current);
        check(Some("old"), Disposition::Stale);
        check(Some("done-before"), Disposition::Duplicate);
        check(Some("harness-hook-123"), Disposition::Current);
        check(None, Disposition::Current);
    }

    #[test]
    fn stale_reports_change_nothing() {
        let t = task(Status::Working, 1, 0);
        let r = ExitReport {
            role: None,
            session: Some("old".into()),
            exit_code: Some(1),
            reason: None,
        };
        let d = decide(&t, &art(false, None), &r, &Limits::default());
        assert_eq!(d.action, ExitAction::Nothing);
    }

    #[test]
    fn direct_work_ended() {
        let mut t = task(Status::Working, 0, 0);
        t.spec.workflow = WorkflowKind::Direct;
        let check = |code, success| {
            let r = ExitReport {
                role: None,
                session: None,
                exit_code: code,
                reason: None,
            };
            assert_eq!(
                decide(&t, &art(false, None), &r, &Limits::default()).action,
                ExitAction::WorkEnded { success }
            );
        };
        check(Some(0), true);
        check(None, true);
        check(Some(2), false);
    }
}
