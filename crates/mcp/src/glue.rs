//! What a transition needs run before the core decides it (the guard, the git phases),
//! done exactly as the CLI does it. One function with the signature of
//! `warden_runner::pipeline::prepare_transition`, so it can be swapped for that one.

use std::time::Duration;

use warden_core::model::{Phase, PhaseStatus, Task};
use warden_core::ops::{GuardOutcome, Needs, TransitionInput};
use warden_store::Engine;

/// The working directory of a task's checks: its worktree when it has one, else the
/// project root.
fn task_cwd(eng: &Engine, t: &Task) -> std::path::PathBuf {
    let wt = eng.ws.worktree(t.id());
    if wt.is_dir() { wt } else { eng.ws.root.clone() }
}

/// Runs the postchecks of a task as the guard.
fn run_guard(eng: &Engine, t: &Task) -> GuardOutcome {
    let Some(spec) = &t.spec.spec.postchecks else {
        return GuardOutcome::Pass;
    };
    let env = [
        ("WARDEN_DIR", eng.ws.root.display().to_string()),
        ("WARDEN_TASK_ID", t.id().to_string()),
        (
            "WARDEN_TASK_FILE",
            eng.ws.task_file(t.id()).display().to_string(),
        ),
    ];
    warden_runner::check::run_check(
        spec,
        &task_cwd(eng, t),
        &env,
        Duration::from_secs(eng.config.limits.phase_timeout_s),
    )
    .outcome
}

/// Fills `input` with what the transition needs (the guard's result; the git phases are
/// skipped while the task has no worktree). Returns whether something ran that must not
/// run twice (the write is then not decided again after a conflict).
pub fn prepare_transition(
    eng: &Engine,
    t: &Task,
    needs: Needs,
    input: &mut TransitionInput,
) -> bool {
    let has_worktree = eng.ws.worktree(t.id()).is_dir();
    if needs.commit && !has_worktree {
        input
            .phases
            .push((Phase::Commit, PhaseStatus::Skipped, None));
    }
    let mut ran = false;
    if needs.guard {
        let g = run_guard(eng, t);
        ran = true;
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
    if needs.merge_ri && !has_worktree {
        input
            .phases
            .push((Phase::MergeRi, PhaseStatus::Skipped, None));
    }
    ran
}
