//! The phases Warden runs itself (DESIGN 2.4): merge-fi, prechecks, shell or process
//! work, commit, postchecks (the guard) and merge-ri. Each returns a phase status and a
//! detail; the core decides what the result means.

use std::path::PathBuf;
use std::time::Duration;

use warden_core::model::{Phase, PhaseStatus, Status, Task, WorkSpec};
use warden_core::ops::{GuardOutcome, Needs, TransitionInput};
use warden_core::prompt::shell_word;
use warden_store::Engine;

use crate::check::{self, TAIL_CHARS};
use crate::git::{self, MergeOutcome, Repo};

/// The result of one phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseResult {
    /// The phase.
    pub phase: Phase,
    /// success, failed or skipped.
    pub status: PhaseStatus,
    /// Why it failed or was skipped (conflicting paths, the check's output tail).
    pub detail: Option<String>,
}

impl PhaseResult {
    fn new(phase: Phase, status: PhaseStatus, detail: Option<String>) -> PhaseResult {
        PhaseResult {
            phase,
            status,
            detail,
        }
    }
}

/// The directory a task's commands run in: the project's place in its worktree when it
/// has one (the worktree's top, or the subdirectory the project is in), else the project
/// root (outside git, or before the supervisor created the worktree).
pub fn task_cwd(eng: &Engine, t: &Task) -> PathBuf {
    let dir = eng.ws.worktree_project(t.id());
    if dir.is_dir() {
        dir
    } else {
        eng.ws.root.clone()
    }
}

/// The environment of every command Warden runs for a task.
pub fn task_env(eng: &Engine, t: &Task) -> Vec<(&'static str, String)> {
    vec![
        ("WARDEN_DIR", eng.ws.root.display().to_string()),
        ("WARDEN_TASK_ID", t.id().to_string()),
        (
            "WARDEN_TASK_FILE",
            eng.ws.task_file(t.id()).display().to_string(),
        ),
    ]
}

fn timeout(eng: &Engine) -> Duration {
    Duration::from_secs(eng.config.limits.phase_timeout_s)
}

/// Runs a check spec (`phase`: prechecks or postchecks) for a task.
pub fn run_spec(eng: &Engine, t: &Task, spec: &WorkSpec, phase: Phase) -> check::CheckRun {
    // Named while it runs: a person's cancel stops it instead of waiting behind the
    // task's lock (see `Workspace::check_note`).
    let note = eng.ws.check_note(t.id());
    // A check of this task whose holder died (a `task complete` killed while its guard
    // ran) would run beside this one, its result never recorded: stopped first.
    let grace = Duration::from_secs(eng.config.limits.kill_after_s);
    check::stop_orphaned_check(&note, grace);
    check::run_check_noted(
        spec,
        &task_cwd(eng, t),
        &task_env(eng, t),
        timeout(eng),
        Some((&note, phase.as_str())),
    )
}

/// The postchecks as the guard: pass when the task has none.
pub fn run_guard(eng: &Engine, t: &Task) -> GuardOutcome {
    match &t.spec.spec.postchecks {
        Some(spec) => run_spec(eng, t, spec, Phase::Postchecks).outcome,
        None => GuardOutcome::Pass,
    }
}

fn has_worktree(eng: &Engine, t: &Task) -> bool {
    eng.ws.worktree(t.id()).join(".git").exists()
}

/// Whether the task has a worktree to commit or merge, its `.git` file restored when its
/// work deleted it (which read as "no worktree": the work was neither committed nor
/// merged, and the task went to done without it). `Err` names what cannot be repaired.
fn worktree_ready(eng: &Engine, t: &Task) -> Result<bool, String> {
    let wt = eng.ws.worktree(t.id());
    if has_worktree(eng, t) {
        return Ok(true);
    }
    if !wt.is_dir() {
        return Ok(false);
    }
    match Repo::discover(&eng.ws.root) {
        Ok(Some(repo)) => repo
            .repair_worktree(&wt)
            .map(|()| true)
            .map_err(|e| e.to_string()),
        _ => Ok(false),
    }
}

/// The `commit` phase: commits the task's worktree if anything changed.
pub fn commit(eng: &Engine, t: &Task) -> PhaseResult {
    match worktree_ready(eng, t) {
        Ok(true) => {}
        Ok(false) => {
            return PhaseResult::new(
                Phase::Commit,
                PhaseStatus::Skipped,
                Some("no worktree".into()),
            );
        }
        Err(e) => return PhaseResult::new(Phase::Commit, PhaseStatus::Failed, Some(e)),
    }
    let msg = format!("warden: {} — {}", t.id(), t.spec.title);
    let wt = eng.ws.worktree(t.id());
    // Work that moved the worktree to a branch of its own has its commits and changes
    // taken back onto the task's branch (or fails here, naming the branch).
    match git::onto_task_branch(&wt, &t.branch()).and_then(|()| git::commit_all(&wt, &msg)) {
        Ok(Some(_)) => PhaseResult::new(Phase::Commit, PhaseStatus::Success, None),
        Ok(None) => PhaseResult::new(
            Phase::Commit,
            PhaseStatus::Skipped,
            Some("nothing to commit".into()),
        ),
        Err(e) => PhaseResult::new(Phase::Commit, PhaseStatus::Failed, Some(e.to_string())),
    }
}

/// The base branch new tasks start from: the branch checked out in the person's checkout.
pub fn base_branch(repo: &Repo) -> Option<String> {
    repo.current_branch().ok().flatten()
}

/// The branch a task merges back into and is reset to: the one its branch started from,
/// even when the person has checked out another since; for a branch Warden did not
/// record (an older Warden made it), the branch checked out now.
pub fn task_base(repo: &Repo, branch: &str) -> Option<String> {
    repo.recorded_base(branch)
        .ok()
        .flatten()
        .or_else(|| base_branch(repo))
}

/// The `merge-ri` phase: the task branch into the base branch, never touching the
/// person's working tree (see `git::merge_into_base`).
pub fn merge_ri(eng: &Engine, t: &Task) -> PhaseResult {
    let skipped =
        |why: &str| PhaseResult::new(Phase::MergeRi, PhaseStatus::Skipped, Some(why.to_owned()));
    match worktree_ready(eng, t) {
        Ok(true) => {}
        Ok(false) => return skipped("the task never had a branch"),
        Err(e) => return PhaseResult::new(Phase::MergeRi, PhaseStatus::Failed, Some(e)),
    }
    let repo = match Repo::discover(&eng.ws.root) {
        Ok(Some(r)) => r,
        _ => return skipped("not in a git repository"),
    };
    let Some(base) = task_base(&repo, &t.branch()) else {
        return PhaseResult::new(
            Phase::MergeRi,
            PhaseStatus::Failed,
            Some("the project checkout is on a detached HEAD; check out the base branch".into()),
        );
    };
    let worktree = eng.ws.worktree(t.id());
    // The note is written before the base branch moves: a kill between the move and the
    // transition's commit leaves it, and the merge is not contradicted later.
    let mut landing = |commit: &str| note_merge(eng, t, commit, &base);
    match git::merge_into_base_noting(&repo, &worktree, &t.branch(), &base, &mut landing) {
        Ok(MergeOutcome::Merged) => PhaseResult::new(Phase::MergeRi, PhaseStatus::Success, None),
        Ok(MergeOutcome::UpToDate) => {
            // The base held the work already (a merge whose record never landed, moved
            // on since): noted as well.
            match git::commit_of(&worktree, "HEAD") {
                Ok(c) => note_merge(eng, t, &c, &base),
                Err(e) => {
                    warden_store::say!("warning: {}: {e}", eng.ws.merge_note(t.id()).display())
                }
            }
            PhaseResult::new(Phase::MergeRi, PhaseStatus::Success, None)
        }
        Ok(MergeOutcome::Conflict(paths)) => PhaseResult::new(
            Phase::MergeRi,
            PhaseStatus::Failed,
            Some(format!(
                "merging {} into {base} conflicts in: {}; resolve it in the task's worktree (cd {} && git merge {base}, fix, git commit) and run this again{}",
                t.branch(),
                paths.join(", "),
                shell_word(&worktree.display().to_string()),
                send_back(t),
            )),
        ),
        Err(git::GitError::Dirty { path, paths }) if t.status() == Status::Reviewing => {
            PhaseResult::new(
                Phase::MergeRi,
                PhaseStatus::Failed,
                Some(format!(
                    "task worktree {} has changes nobody reviewed, made after the work was committed for review ({}); set them aside with `git -C {} stash` and run this again{}",
                    path.display(),
                    paths.join(", "),
                    shell_word(&path.display().to_string()),
                    send_back(t),
                )),
            )
        }
        Ok(MergeOutcome::InTheWay { checkout, paths }) => PhaseResult::new(
            Phase::MergeRi,
            PhaseStatus::Failed,
            Some(format!(
                "merging {} into {base} would overwrite uncommitted changes in {}: {}; commit or stash them there, then retry",
                t.branch(),
                checkout.display(),
                paths.join(", ")
            )),
        ),
        Err(e) => PhaseResult::new(Phase::MergeRi, PhaseStatus::Failed, Some(e.to_string())),
    }
}

/// The other way on from a merge that cannot land at approve: the work goes back to
/// its worker, who sees why.
fn send_back(t: &Task) -> String {
    if t.status() == Status::Reviewing {
        format!(
            ", or send the work back with `warden task reject {} --reason \"...\"`",
            t.id()
        )
    } else {
        String::new()
    }
}

/// Notes the commit a `merge-ri` puts into the base branch, before the branch moves and
/// so before the transition it is part of is committed (see [`merged_unrecorded`]). A
/// note that cannot be written is a warning: it only guards against a later
/// contradiction.
fn note_merge(eng: &Engine, t: &Task, commit: &str, base: &str) {
    let note = eng.ws.merge_note(t.id());
    let text = format!("{commit} {} {base}\n", t.version());
    let written = std::fs::File::create(&note).and_then(|mut f| {
        std::io::Write::write_all(&mut f, text.as_bytes())?;
        f.sync_all()
    });
    if let Err(e) = written {
        warden_store::say!("warning: {}: {e}", note.display());
    }
}

/// The base branch that already holds the work of `t` from a `merge-ri` whose
/// transition was never recorded (the store refused the commit after the merge, or
/// the process was killed between them): the note names the version `t` still has, and
/// the base still contains the commit. `None` otherwise.
pub fn merged_unrecorded(eng: &Engine, t: &Task) -> Option<String> {
    let text = std::fs::read_to_string(eng.ws.merge_note(t.id())).ok()?;
    let mut f = text.split_whitespace();
    let (commit, version, base) = (f.next()?, f.next()?, f.next()?);
    if version.parse::<u64>().ok()? != t.version() {
        return None;
    }
    let repo = Repo::discover(&eng.ws.root).ok()??;
    git::branch_contains(&repo, base, commit)
        .ok()
        .filter(|&c| c)
        .map(|_| base.to_owned())
}

/// The `merge-fi` phase: the branches of done dependencies into the task's worktree.
pub fn merge_fi(eng: &Engine, t: &Task) -> PhaseResult {
    if !has_worktree(eng, t) || t.spec.depends_on.is_empty() {
        return PhaseResult::new(Phase::MergeFi, PhaseStatus::Skipped, None);
    }
    let branches: Vec<String> = t
        .spec
        .depends_on
        .iter()
        .filter_map(|d| eng.store.get(d).ok().flatten())
        .filter(|d| d.status() == Status::Done && has_worktree(eng, d))
        .map(|d| d.branch())
        .collect();
    if branches.is_empty() {
        return PhaseResult::new(Phase::MergeFi, PhaseStatus::Skipped, None);
    }
    match git::merge_branches(&eng.ws.worktree(t.id()), &branches) {
        Ok(MergeOutcome::Merged | MergeOutcome::UpToDate) => {
            PhaseResult::new(Phase::MergeFi, PhaseStatus::Success, None)
        }
        // merge-fi moves no checkout but the task's own: nothing else is in the way.
        Ok(MergeOutcome::Conflict(paths) | MergeOutcome::InTheWay { paths, .. }) => {
            PhaseResult::new(
                Phase::MergeFi,
                PhaseStatus::Failed,
                Some(format!(
                    "dependency branches conflict in: {}",
                    paths.join(", ")
                )),
            )
        }
        Err(e) => PhaseResult::new(Phase::MergeFi, PhaseStatus::Failed, Some(e.to_string())),
    }
}

/// The `prechecks` phase.
pub fn prechecks(eng: &Engine, t: &Task) -> PhaseResult {
    match &t.spec.spec.prechecks {
        None => PhaseResult::new(Phase::Prechecks, PhaseStatus::Skipped, None),
        Some(spec) => outcome_result(Phase::Prechecks, run_spec(eng, t, spec, Phase::Prechecks)),
    }
}

fn outcome_result(phase: Phase, run: check::CheckRun) -> PhaseResult {
    match run.outcome {
        GuardOutcome::Pass => PhaseResult::new(phase, PhaseStatus::Success, None),
        GuardOutcome::Fail(tail) => PhaseResult::new(phase, PhaseStatus::Failed, Some(tail)),
        GuardOutcome::Error(e) => PhaseResult::new(
            phase,
            PhaseStatus::Failed,
            Some(check::tail(&e, TAIL_CHARS)),
        ),
    }
}

/// Runs what a transition needs (commit, the guard, merge-ri) and fills `input` with the
/// results, for every transition of every front end and of the supervisor. Returns
/// whether the guard ran: the one thing that must not run twice for one request (a
/// second run could charge a second attempt). Commit and merge-ri are idempotent — a
/// second commit finds nothing to commit, a second merge finds the base up to date — so
/// a write whose commit conflicts after them decides again safely, and a failed commit
/// of the new status never leaves the base branch holding work of a task that is not
/// done for long (the next decision finishes it).
pub fn prepare_transition(
    eng: &Engine,
    t: &Task,
    needs: Needs,
    input: &mut TransitionInput,
) -> bool {
    let mut guard_ran = false;
    if needs.commit {
        let c = commit(eng, t);
        input.phases.push((c.phase, c.status, c.detail));
        if t.status() == Status::Working && t.phases().get(Phase::Work) != PhaseStatus::Success {
            input
                .phases
                .insert(0, (Phase::Work, PhaseStatus::Success, None));
        }
    }
    if needs.guard {
        let g = run_guard(eng, t);
        guard_ran = true;
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
            Some(GuardOutcome::Fail(_)) | Some(GuardOutcome::Error(_))
        )
    {
        let m = merge_ri(eng, t);
        input.phases.push((m.phase, m.status, m.detail));
    }
    guard_ran
}
