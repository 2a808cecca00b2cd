//! Retry of a stuck task (seed 004 with its proposed smart reset, DESIGN 2.4).
//!
//! [`plan`] decides where the pipeline resumes and which phases run again; the fold of
//! `retry.requested` applies it.

use serde::Serialize;

use crate::event::SpecChange;
use crate::model::{Phase, PhaseStatus, Status, Task, WorkSpec, WorkflowKind};

/// What a person asks for (`warden task retry`, MCP `task_retry`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetryRequest {
    /// `--work` / `--agent`: replace the work.
    pub work: Option<WorkSpec>,
    /// `--prechecks CMD` / `--no-prechecks`.
    pub prechecks: SpecChange,
    /// `--postchecks CMD` / `--no-postchecks`.
    pub postchecks: SpecChange,
    /// `--clear-worktree`: reset the worktree to its base and every phase.
    pub clear_worktree: bool,
}

/// Where a retry resumes and what it keeps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RetryPlan {
    /// The first phase that runs again.
    pub resume_from_phase: Phase,
    /// Phases that run again, in order.
    pub rerun: Vec<Phase>,
    /// Earlier phases kept as they are (succeeded or skipped), not run again.
    pub kept: Vec<Phase>,
    /// Phases whose automatic heal budget is reset.
    pub heal_reset: Vec<Phase>,
    /// The specs that change (`work`, `prechecks`, `postchecks`).
    pub changed: Vec<Phase>,
}

/// Why a retry was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RetryError {
    /// Only stuck tasks can be retried.
    #[error("task {id} is {status}; only a stuck task can be retried")]
    NotStuck {
        /// The task.
        id: String,
        /// Its status.
        status: Status,
    },
}

/// Computes the retry plan: `resume_from_phase` is the earliest of the failed phase (a
/// failed `commit` counts as `work`), `prechecks` if prechecks changed, `work` if work
/// changed, `postchecks` if postchecks changed; `--clear-worktree` starts from `merge-fi`.
/// A phase before that point that never succeeded (pending, running, failed) pulls the
/// resume point back to itself, so nothing unfinished is skipped.
pub fn plan(task: &Task, req: &RetryRequest) -> Result<RetryPlan, RetryError> {
    if task.status() != Status::Stuck {
        return Err(RetryError::NotStuck {
            id: task.id().to_string(),
            status: task.status(),
        });
    }
    let specs = &task.spec.spec;
    let work_change = match &req.work {
        Some(w) => SpecChange::Set(w.clone()),
        None => SpecChange::Keep,
    };
    let mut changed = Vec::new();
    if req.prechecks.changes(&specs.prechecks) {
        changed.push(Phase::Prechecks);
    }
    if work_change.changes(&specs.work) {
        changed.push(Phase::Work);
    }
    if req.postchecks.changes(&specs.postchecks) {
        changed.push(Phase::Postchecks);
    }
    let phases = task.phases();
    let resume = if req.clear_worktree {
        Phase::MergeFi
    } else {
        let failed = phases.first_failed().map(|p| match p {
            Phase::Commit => Phase::Work,
            p => p,
        });
        let candidates = failed.into_iter().chain(changed.iter().copied());
        // A task stuck without a failed phase (crashes, failed reviews) resumes at work.
        let wanted = candidates.min().unwrap_or(Phase::Work);
        // In the review workflow the agent session is the work, and a retried task is
        // `working`: its worker starts again whatever the failed phase, and commits
        // when it hands off. The plan says so (it said "kept: work, commit" while a new
        // worker ran).
        let wanted = if task.spec.workflow == WorkflowKind::Review {
            wanted.min(Phase::Work)
        } else {
            wanted
        };
        let unfinished = phases
            .iter()
            .find(|(_, s)| !matches!(s, PhaseStatus::Success | PhaseStatus::Skipped))
            .map(|(p, _)| p);
        match unfinished {
            Some(u) if u < wanted => u,
            _ => wanted,
        }
    };
    let rerun: Vec<Phase> = Phase::ALL
        .iter()
        .copied()
        .filter(|p| *p >= resume)
        .collect();
    let kept: Vec<Phase> = Phase::ALL.iter().copied().filter(|p| *p < resume).collect();
    let heal_reset = if req.clear_worktree {
        Phase::ALL.to_vec()
    } else {
        changed.clone()
    };
    Ok(RetryPlan {
        resume_from_phase: resume,
        rerun,
        kept,
        heal_reset,
        changed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RunnerState, TaskId, TaskSpec, WorkflowKind};
    use PhaseStatus::*;

    fn stuck(phases: [PhaseStatus; 6], pre: bool, post: bool) -> Task {
        let mut spec = TaskSpec::new(TaskId::new("t").unwrap(), WorkflowKind::Direct, 3);
        spec.spec.work = Some(WorkSpec::Shell("make".into()));
        spec.spec.prechecks = pre.then(|| WorkSpec::Shell("lint".into()));
        spec.spec.postchecks = post.then(|| WorkSpec::Shell("test".into()));
        let mut runner = RunnerState::new(Status::Stuck, false, 3, jiff::Timestamp::UNIX_EPOCH);
        for (p, s) in Phase::ALL.iter().zip(phases) {
            runner.phases.set(*p, s);
        }
        Task { spec, runner }
    }

    fn req(work: bool, pre: SpecChange, post: SpecChange, clear: bool) -> RetryRequest {
        RetryRequest {
            work: work.then(|| WorkSpec::Shell("make fixed".into())),
            prechecks: pre,
            postchecks: post,
            clear_worktree: clear,
        }
    }

    fn set(s: &str) -> SpecChange {
        SpecChange::Set(WorkSpec::Shell(s.into()))
    }

    fn check(task: &Task, r: RetryRequest, resume: Phase) {
        let p = plan(task, &r).unwrap();
        assert_eq!(p.resume_from_phase, resume, "{r:?}");
        assert!(p.rerun.iter().all(|x| *x >= resume));
        assert_eq!(p.kept.len() + p.rerun.len(), 6);
    }

    const FAILED_AT_POSTCHECKS: [PhaseStatus; 6] =
        [Success, Success, Success, Success, Failed, Pending];
    const FAILED_AT_WORK: [PhaseStatus; 6] = [Success, Success, Failed, Pending, Pending, Pending];
    const FAILED_AT_COMMIT: [PhaseStatus; 6] =
        [Success, Success, Success, Failed, Pending, Pending];
    const FAILED_AT_PRECHECKS: [PhaseStatus; 6] =
        [Success, Failed, Pending, Pending, Pending, Pending];

    /// In the review workflow a retried task's worker starts again, so its plan runs the
    /// work again even when the failure came later; a direct task resumes where it
    /// failed.
    #[test]
    fn a_review_tasks_retry_runs_its_worker_again() {
        let keep = || SpecChange::Keep;
        let mut review = stuck(FAILED_AT_POSTCHECKS, false, true);
        review.spec.workflow = WorkflowKind::Review;
        review.spec.spec.work = None;
        check(
            &review,
            req(false, keep(), SpecChange::Remove, false),
            Phase::Work,
        );
        let p = plan(&review, &req(false, keep(), keep(), false)).unwrap();
        assert_eq!(p.kept, vec![Phase::MergeFi, Phase::Prechecks]);
        let direct = stuck(FAILED_AT_POSTCHECKS, false, true);
        check(
            &direct,
            req(false, keep(), SpecChange::Remove, false),
            Phase::Postchecks,
        );
    }

    /// Seed 004's retry scenario table, under DESIGN 2.4's earliest-phase rule.
    #[test]
    fn seed_004_scenarios() {
        use Phase::*;
        let keep = SpecChange::Keep;
        let post = stuck(FAILED_AT_POSTCHECKS, true, true);
        // newWork only (failed at postchecks): reset to work, keep merge-fi and prechecks.
        check(&post, req(true, keep.clone(), keep.clone(), false), Work);
        // newPrechecks only: reset to prechecks.
        check(
            &post,
            req(false, set("lint2"), keep.clone(), false),
            Prechecks,
        );
        // newPostchecks only, failed at postchecks: resume from postchecks.
        check(
            &post,
            req(false, keep.clone(), set("test2"), false),
            Postchecks,
        );
        // newPostchecks only, failed at work: earliest is work.
        let work = stuck(FAILED_AT_WORK, true, true);
        check(&work, req(false, keep.clone(), set("test2"), false), Work);
        // No changes: resume from the failed phase.
        check(
            &post,
            req(false, keep.clone(), keep.clone(), false),
            Postchecks,
        );
        check(&work, req(false, keep.clone(), keep.clone(), false), Work);
        let pre = stuck(FAILED_AT_PRECHECKS, true, true);
        check(
            &pre,
            req(false, keep.clone(), keep.clone(), false),
            Prechecks,
        );
        // A failed commit counts as work.
        let commit = stuck(FAILED_AT_COMMIT, true, true);
        check(&commit, req(false, keep.clone(), keep.clone(), false), Work);
        // clearWorktree: full reset.
        check(&post, req(false, keep.clone(), keep.clone(), true), MergeFi);
        // Combined: work + postchecks → earliest, work.
        check(&post, req(true, keep.clone(), set("t3"), false), Work);
        // Removing postchecks counts as a postchecks change.
        check(
            &post,
            req(false, keep.clone(), SpecChange::Remove, false),
            Postchecks,
        );
        // Removing prechecks that do not exist changes nothing: resume from the failure.
        let no_pre = stuck(FAILED_AT_POSTCHECKS, false, true);
        check(
            &no_pre,
            req(false, SpecChange::Remove, keep.clone(), false),
            Postchecks,
        );
        // Setting the same postchecks is no change.
        check(
            &post,
            req(false, keep.clone(), set("test"), false),
            Postchecks,
        );
    }

    #[test]
    fn kept_and_heal_reset() {
        let post = stuck(FAILED_AT_POSTCHECKS, true, true);
        let p = plan(&post, &req(true, SpecChange::Keep, set("x"), false)).unwrap();
        assert_eq!(p.kept, vec![Phase::MergeFi, Phase::Prechecks]);
        assert_eq!(
            p.rerun,
            vec![
                Phase::Work,
                Phase::Commit,
                Phase::Postchecks,
                Phase::MergeRi
            ]
        );
        assert_eq!(p.heal_reset, vec![Phase::Work, Phase::Postchecks]);
        let p = plan(&post, &req(false, SpecChange::Keep, SpecChange::Keep, true)).unwrap();
        assert_eq!(p.heal_reset, Phase::ALL.to_vec());
        assert!(p.kept.is_empty());
    }

    #[test]
    fn unfinished_earlier_phase_pulls_resume_back() {
        // Stuck by crashes before prechecks ever ran: a new postcheck must not skip them.
        let t = stuck(
            [Success, Pending, Pending, Pending, Pending, Pending],
            true,
            true,
        );
        check(
            &t,
            req(false, SpecChange::Keep, set("x"), false),
            Phase::Prechecks,
        );
    }

    #[test]
    fn refuses_unless_stuck() {
        for s in Status::ALL.iter().filter(|s| **s != Status::Stuck) {
            let mut t = stuck(FAILED_AT_WORK, false, false);
            t.runner.status = *s;
            let err = plan(&t, &RetryRequest::default()).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("task t is {s}; only a stuck task can be retried")
            );
        }
    }
}
