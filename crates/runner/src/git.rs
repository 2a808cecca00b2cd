//! The git side of the phase pipeline (DESIGN 2, 2.4): task worktrees on `warden/<id>`
//! branches, the `.warden/TASK.md` link, `commit`, `merge-fi` and the safe `merge-ri`.
//!
//! Everything runs the real `git` binary by argv (never a shell) in the C locale. Nothing
//! here ever stashes, resets or checks out in the person's own checkout: the only command
//! run there is `git merge --ff-only`, which git itself refuses when it would overwrite
//! local changes.
//!
//! Decisions where DESIGN.md is silent:
//! - Identity: `-c user.name=Warden` / `-c user.email=warden@localhost` are passed to
//!   `commit` and `merge` only for the keys `git config` does not already set, so a
//!   configured identity (and `GIT_AUTHOR_*`/`GIT_COMMITTER_*` variables, which beat
//!   config) is always kept.
//! - Every command clears `GIT_DIR`, `GIT_WORK_TREE`, `GIT_INDEX_FILE` and friends (Warden
//!   may be started from a git hook), sets `LC_ALL=C`, never prompts, and passes the
//!   options that config could otherwise change (`--ff`, `--commit`, `--no-squash`,
//!   `--no-autostash`: `merge.autoStash` would stash the person's changes).
//! - The functions that take a `worktree` refuse any path that is not the top of a
//!   *linked* worktree ([`GitError::NotATaskWorktree`]), so a wrong path can never make
//!   them commit, merge or reset in the person's main checkout.
//! - `merge-fi` is all-or-nothing: when the second of two branches conflicts, the first
//!   merge is undone too (`reset --keep` inside the task worktree).
//! - Hooks run as usual (`pre-commit`, `post-merge`): they are the project's rules.
//! - Needs git 2.36 or newer (`worktree list -z`, `rev-parse --path-format`).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The identity used for commits and merges when git has none configured.
pub const FALLBACK_NAME: &str = "Warden";
/// See [`FALLBACK_NAME`].
pub const FALLBACK_EMAIL: &str = "warden@localhost";

/// How many times `merge-ri` starts over when the base branch moves under it.
const MERGE_RI_ROUNDS: usize = 3;

/// Everything that can go wrong talking to git.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The `git` binary could not be started.
    #[error("cannot run git ({source}); install git 2.36 or newer and put it on PATH")]
    GitMissing {
        /// Why the process could not start.
        source: std::io::Error,
    },
    /// A git command exited non-zero where that is not an expected outcome.
    #[error("`{argv}` failed in {} ({status}): {stderr}; fix the repository and retry", .dir.display())]
    Failed {
        /// The command line, for the person to run again by hand.
        argv: String,
        /// Where it ran.
        dir: PathBuf,
        /// `exit N` or `killed by a signal`.
        status: String,
        /// The last lines of its stderr, joined with ` | `.
        stderr: String,
    },
    /// The directory is not inside a git repository.
    #[error("{} is not inside a git repository; run `git init` there or pick another directory", .dir.display())]
    NotARepository {
        /// The directory that was looked at.
        dir: PathBuf,
    },
    /// A path handed in as a task worktree is not the top of a linked worktree.
    #[error("{} is not a task worktree ({reason}); Warden only changes its own worktrees under .warden/worktrees/", .path.display())]
    NotATaskWorktree {
        /// The path handed in.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A task worktree is on another branch than the task's, one that does not continue
    /// it.
    #[error("worktree {} is on {found}, not {expected}, and what it holds does not continue {expected}; check {expected} out there (`git -C {} switch {expected}`) or remove the worktree with `git worktree remove`", .path.display(), .path.display())]
    WrongBranch {
        /// The worktree.
        path: PathBuf,
        /// The task's branch.
        expected: String,
        /// What it is on (`a detached HEAD` when none).
        found: String,
    },
    /// The branch is already checked out in another worktree.
    #[error("branch {branch} is checked out in {}; switch that worktree to another branch first", .path.display())]
    BranchInUse {
        /// The branch.
        branch: String,
        /// The worktree holding it.
        path: PathBuf,
    },
    /// The task worktree has uncommitted changes to tracked files, so a merge could lose them.
    #[error("task worktree {} has uncommitted changes ({}); commit them or retry with --clear-worktree", .path.display(), .paths.join(", "))]
    Dirty {
        /// The worktree.
        path: PathBuf,
        /// The changed paths.
        paths: Vec<String>,
    },
    /// A branch or revision name git would not accept (or could read as an option).
    #[error(
        "{name:?} is not a valid {what}; use letters, digits, `/`, `.`, `_` and `-`, not starting with `-`"
    )]
    InvalidName {
        /// The name.
        name: String,
        /// `branch name` or `revision`.
        what: &'static str,
    },
    /// The base branch is in the middle of a rebase somewhere, so moving it would be lost.
    #[error("branch {branch} is being rebased in {}; finish or abort that rebase, then retry", .path.display())]
    BaseBeingRebased {
        /// The base branch.
        branch: String,
        /// The worktree where the rebase runs.
        path: PathBuf,
    },
    /// The base branch kept moving while `merge-ri` ran.
    #[error("branch {branch} kept moving during the merge; retry when nothing else commits to it")]
    BaseKeepsMoving {
        /// The base branch.
        branch: String,
    },
    /// A filesystem operation outside git failed.
    #[error("cannot {action} {}: {source}; check the permissions and retry", .path.display())]
    Io {
        /// What was being done (`create`, `link`, ...).
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// What a merge did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeOutcome {
    /// New commits arrived (fast-forward or merge commit).
    Merged,
    /// Nothing to merge.
    UpToDate,
    /// The merge could not be made; nothing was changed. The paths are the conflicting
    /// files, or the task worktree's own untracked files that are in the way.
    Conflict(Vec<String>),
    /// merge-ri's fast-forward of a base branch checked out in `checkout` (the person's
    /// own, usually) was refused: these uncommitted or untracked files there are in the
    /// way. Nothing was changed, and nothing conflicts.
    InTheWay {
        /// The checkout of the base branch.
        checkout: PathBuf,
        /// Its files in the way.
        paths: Vec<String>,
    },
}

/// A git repository, by the top of the working tree that was discovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// `git rev-parse --show-toplevel` of the discovered directory.
    pub top: PathBuf,
}

impl Repo {
    /// The repository containing `dir`, or `None` when `dir` is in none.
    ///
    /// From inside a task worktree this is that worktree's top, not the main checkout.
    pub fn discover(dir: &Path) -> Result<Option<Repo>, GitError> {
        let out = run(dir, &[], ["rev-parse", "--show-toplevel"])?;
        if out.ok() {
            return Ok(Some(Repo {
                top: path_from(first_line(&out.stdout)),
            }));
        }
        if out.stderr.contains("not a git repository") {
            return Ok(None);
        }
        Err(out.failure())
    }

    /// The branch checked out at `top`, or `None` on a detached HEAD.
    pub fn current_branch(&self) -> Result<Option<String>, GitError> {
        branch_at(&self.top)
    }

    /// Whether the branch `branch` has a commit: a new repository's branch has none
    /// until its first commit, and nothing can branch from it.
    pub fn branch_has_commit(&self, branch: &str) -> Result<bool, GitError> {
        check_rev(branch)?;
        let rev = format!("refs/heads/{branch}^{{commit}}");
        let out = run(&self.top, &[], ["rev-parse", "--verify", "--quiet", &rev])?;
        match out.code {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(out.failure()),
        }
    }

    /// Makes sure `path` is a worktree on `branch`; returns whether it had to be made.
    ///
    /// A new branch starts at `base`. After a crash, an existing worktree on `branch` is
    /// kept (`Ok(false)`); an existing branch without a worktree is attached; a worktree
    /// whose directory was deleted is made again on its branch.
    pub fn ensure_worktree(&self, path: &Path, branch: &str, base: &str) -> Result<bool, GitError> {
        check_branch_name(&self.top, branch)?;
        check_rev(base)?;
        let path = absolute(path)?;
        // One at a time per repository, across processes: `git worktree add` beside
        // another reads the worktree that one is still writing and fails ("failed to
        // read .git/worktrees/…/commondir"). Held until the worktree is made.
        let _lock = self.worktree_lock()?;
        let branch_ref = format!("refs/heads/{branch}");
        let list = worktrees(&self.top)?;
        let mut force = false;
        if let Some(wt) = list.iter().find(|w| same_path(&w.path, &path)) {
            if wt.branch.as_deref() != Some(branch_ref.as_str()) {
                if path.is_dir() {
                    self.repair_worktree(&path)?;
                    onto_task_branch(&path, branch)?;
                    return Ok(false);
                }
                return Err(GitError::WrongBranch {
                    path,
                    expected: branch.to_owned(),
                    found: describe_branch(wt.branch.as_deref()),
                });
            }
            if path.is_dir() {
                self.repair_worktree(&path)?;
                return Ok(false);
            }
            // Registered but deleted by hand: git needs --force to reuse the path.
            force = true;
        } else if let Some(wt) = list
            .iter()
            .find(|w| w.branch.as_deref() == Some(branch_ref.as_str()))
        {
            return Err(GitError::BranchInUse {
                branch: branch.to_owned(),
                path: wt.path.clone(),
            });
        }
        let mut args: Vec<OsString> = vec!["worktree".into(), "add".into(), "--quiet".into()];
        if force {
            args.push("--force".into());
        }
        if ref_exists(&self.top, &branch_ref)? {
            args.extend([path.into_os_string(), branch.into()]);
        } else {
            args.extend(["--no-track".into(), "-b".into(), branch.into()]);
            args.extend([path.into_os_string(), base.into()]);
            run(&self.top, &[], &args)?.check()?;
            // The branch merges back where it started, whatever the person checks out
            // meanwhile; git drops the key with the branch.
            run(&self.top, &[], ["config", &base_key(branch), base])?.check()?;
            return Ok(true);
        }
        run(&self.top, &[], &args)?.check()?;
        Ok(true)
    }

    /// The branch `branch` started from, as [`Repo::ensure_worktree`] recorded it when it
    /// made the branch: `None` for a branch made otherwise (or by an older Warden), and
    /// when the recorded branch no longer exists (renamed or deleted since), so the
    /// caller falls back to the branch checked out.
    pub fn recorded_base(&self, branch: &str) -> Result<Option<String>, GitError> {
        check_rev(branch)?;
        let out = run(&self.top, &[], ["config", "--get", &base_key(branch)])?;
        let base = match out.code {
            Some(0) => Some(text(&out.stdout)).filter(|b| check_rev(b).is_ok()),
            Some(1) => None,
            _ => return Err(out.failure()),
        };
        match base {
            Some(b) if self.branch_has_commit(&b)? => Ok(Some(b)),
            _ => Ok(None),
        }
    }
}

impl Repo {
    /// Restores the `.git` file of the task worktree at `path` when its work deleted it
    /// (`rm -rf .git`): without it, git run there finds the person's checkout above.
    /// A worktree whose `.git` file is there is left alone, without a git process: every
    /// step of the supervisor asks.
    pub fn repair_worktree(&self, path: &Path) -> Result<(), GitError> {
        let dot_git = path.join(".git");
        match std::fs::symlink_metadata(&dot_git) {
            Ok(m) if m.is_file() => return Ok(()),
            Ok(_) => {}
            Err(_) => {
                // Exits 1 even when it repaired; what counts is the worktree afterwards.
                run(
                    &self.top,
                    &[],
                    [OsStr::new("worktree"), "repair".as_ref(), path.as_os_str()],
                )?;
            }
        }
        if !dot_git.is_file() {
            return Err(GitError::NotATaskWorktree {
                path: path.to_path_buf(),
                reason: "its .git is gone or not a file, and `git worktree repair` cannot restore it (did the work run `git init` there?)".into(),
            });
        }
        require_task_worktree(path)
    }
}

/// The git configuration key that holds the branch a task branch started from.
fn base_key(branch: &str) -> String {
    format!("branch.{branch}.wardenBase")
}

impl Repo {
    /// An exclusive lock on `<git common dir>/warden-worktree.lock`, released on drop.
    fn worktree_lock(&self) -> Result<std::fs::File, GitError> {
        self.lock("warden-worktree.lock")
    }

    /// An exclusive lock on `<git common dir>/NAME`, released on drop.
    fn lock(&self, name: &str) -> Result<std::fs::File, GitError> {
        let out = run(&self.top, &[], ["rev-parse", "--git-common-dir"])?;
        if !out.ok() {
            return Err(out.failure());
        }
        let dir = path_from(first_line(&out.stdout));
        let path = self.top.join(dir).join(name);
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| GitError::Io {
                action,
                path,
                source,
            }
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("open", &path))?;
        file.lock().map_err(io("lock", &path))?;
        Ok(file)
    }
}

/// Links `<worktree>/.warden/TASK.md` to the absolute path of `task_file` (idempotent;
/// a link to another target, or a file in its place, is replaced).
///
/// The link stays out of git through the `/.warden/` line `warden init` puts in the
/// repository's `info/exclude`, which every worktree shares.
pub fn link_task_file(worktree: &Path, task_file: &Path) -> Result<(), GitError> {
    let target = absolute(task_file)?;
    let dir = worktree.join(".warden");
    std::fs::create_dir_all(&dir).map_err(|source| GitError::Io {
        action: "create",
        path: dir.clone(),
        source,
    })?;
    let link = dir.join("TASK.md");
    if std::fs::read_link(&link).is_ok_and(|t| t == target) {
        return Ok(());
    }
    // A regular file in the link's place is an agent's text written by replacing the
    // link (an editor that saves through a rename): kept beside it, not overwritten.
    if std::fs::symlink_metadata(&link).is_ok_and(|m| m.is_file()) {
        let kept = dir.join("TASK.md.replaced-link");
        std::fs::rename(&link, &kept).map_err(|source| GitError::Io {
            action: "keep",
            path: link.clone(),
            source,
        })?;
        warden_store::say!(
            "warning: {} was a file, not the link to {}: kept as {}",
            link.display(),
            target.display(),
            kept.display()
        );
    }
    // Make the new link beside the old one and rename it over, so the link is never
    // missing for an agent that reads it meanwhile.
    let tmp = dir.join(format!(".TASK.md.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&target, &tmp).map_err(|source| GitError::Io {
        action: "link",
        path: tmp.clone(),
        source,
    })?;
    std::fs::rename(&tmp, &link).map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        GitError::Io {
            action: "replace",
            path: link,
            source,
        }
    })
}

/// The `commit` phase: `git add -A` and commit in the task worktree. `Ok(None)` when
/// there was nothing to commit; otherwise the new commit's sha.
pub fn commit_all(worktree: &Path, message: &str) -> Result<Option<String>, GitError> {
    require_task_worktree(worktree)?;
    run(worktree, &[], ["add", "--all"])?.check()?;
    let staged = run(worktree, &[], ["diff", "--cached", "--quiet"])?;
    match staged.code {
        Some(0) => return Ok(None),
        Some(1) => {}
        _ => return Err(staged.failure()),
    }
    let id = identity_args(worktree)?;
    // `-m` takes the message as one argv element: nothing in it is ever interpreted.
    run(worktree, &id, ["commit", "--quiet", "-m", message])?.check()?;
    Ok(Some(rev_parse(worktree, "HEAD")?))
}

/// Makes sure the task worktree `worktree` is on `branch`, keeping what its work did
/// when the work left it (`git switch -c`, a detached checkout): where the worktree's
/// commit continues `branch` (descends from its tip), the branch is moved there
/// (compare-and-swap) and the worktree's HEAD names it again. Files and index are not
/// touched (both name the same commit), and the branch the work made is left as it is.
/// Otherwise, or when `branch` is checked out in another worktree, nothing changes and
/// the answer is [`GitError::WrongBranch`].
pub fn onto_task_branch(worktree: &Path, branch: &str) -> Result<(), GitError> {
    check_rev(branch)?;
    let on = branch_at(worktree)?;
    if on.as_deref() == Some(branch) {
        return Ok(());
    }
    let wrong = || GitError::WrongBranch {
        path: worktree.to_path_buf(),
        expected: branch.to_owned(),
        found: describe_branch(on.as_deref()),
    };
    let branch_ref = format!("refs/heads/{branch}");
    if !ref_exists(worktree, &branch_ref)?
        || worktrees(worktree)?
            .iter()
            .any(|w| w.branch.as_deref() == Some(branch_ref.as_str()))
    {
        return Err(wrong());
    }
    let tip = rev_parse(worktree, &branch_ref)?;
    let Ok(head) = rev_parse(worktree, "HEAD^{commit}") else {
        return Err(wrong());
    };
    let msg = format!(
        "warden: {branch} takes what its work did on {}",
        describe_branch(on.as_deref())
    );
    if head != tip {
        let ancestor = run(worktree, &[], ["merge-base", "--is-ancestor", &tip, &head])?;
        match ancestor.code {
            Some(0) => {}
            Some(1) => return Err(wrong()),
            _ => return Err(ancestor.failure()),
        }
        run(
            worktree,
            &[],
            ["update-ref", "-m", &msg, &branch_ref, &head, &tip],
        )?
        .check()?;
    }
    run(
        worktree,
        &[],
        ["symbolic-ref", "-m", &msg, "HEAD", &branch_ref],
    )?
    .check()
}

/// The `merge-fi` phase: merges `branches` (the done dependencies' branches) into the
/// task branch checked out in `worktree`, one by one.
///
/// All or nothing: on a conflict every merge of this call is undone, the worktree is
/// clean again and the conflicting paths are returned.
pub fn merge_branches(worktree: &Path, branches: &[String]) -> Result<MergeOutcome, GitError> {
    require_task_worktree(worktree)?;
    for b in branches {
        check_rev(b)?;
    }
    if branches.is_empty() {
        return Ok(MergeOutcome::UpToDate);
    }
    require_clean(worktree)?;
    let start = rev_parse(worktree, "HEAD")?;
    for b in branches {
        if let MergeOutcome::Conflict(paths) = merge_one(worktree, &format!("refs/heads/{b}"))? {
            let head = rev_parse(worktree, "HEAD")?;
            if head != start {
                // Only the task worktree's own branch moves back; untracked files stay.
                run(
                    worktree,
                    &[],
                    ["reset", "--quiet", "--keep", start.as_str()],
                )?
                .check()?;
            }
            return Ok(MergeOutcome::Conflict(paths));
        }
    }
    Ok(if rev_parse(worktree, "HEAD")? == start {
        MergeOutcome::UpToDate
    } else {
        MergeOutcome::Merged
    })
}

/// The `merge-ri` phase, DESIGN 2.4's safe method: merge the current `base` into
/// `task_branch` inside the task worktree, then fast-forward `base` to it.
///
/// Where `base` is checked out (the person's checkout or any worktree), the fast-forward
/// is `git merge --ff-only` run there, which git refuses when it would overwrite local
/// changes: that is `Conflict(paths in the way)`, and `base` and those files are left as
/// they were (the task branch keeps the merge of base, so it merges again later).
/// Elsewhere `refs/heads/<base>` is moved with a compare-and-swap `update-ref`.
pub fn merge_into_base(
    repo: &Repo,
    worktree: &Path,
    task_branch: &str,
    base: &str,
) -> Result<MergeOutcome, GitError> {
    merge_into_base_noting(repo, worktree, task_branch, base, &mut |_| {})
}

/// [`merge_into_base`], calling `landing` with the commit the base branch is about to
/// move to, before each move: a note written there survives a kill between the move and
/// the caller's record of it (`pipeline::merged_unrecorded`); a note of a move that
/// never happened names a commit the base does not contain, which reads as no merge.
pub fn merge_into_base_noting(
    repo: &Repo,
    worktree: &Path,
    task_branch: &str,
    base: &str,
    landing: &mut dyn FnMut(&str),
) -> Result<MergeOutcome, GitError> {
    check_rev(task_branch)?;
    check_rev(base)?;
    if task_branch == base {
        return Err(GitError::InvalidName {
            name: base.to_owned(),
            what: "base branch (it is the task's own branch)",
        });
    }
    require_task_worktree(worktree)?;
    onto_task_branch(worktree, task_branch)?;
    require_clean(worktree)?;
    let base_ref = format!("refs/heads/{base}");
    // One merge-ri at a time per repository, across processes: two fast-forwards in one
    // checkout meet git's index.lock, and each moves the base under the other.
    let _lock = repo.lock("warden-merge.lock")?;
    for _ in 0..MERGE_RI_ROUNDS {
        let old = rev_parse(&repo.top, &base_ref)?;
        if let MergeOutcome::Conflict(paths) = merge_one(worktree, &base_ref)? {
            return Ok(MergeOutcome::Conflict(paths));
        }
        let new = rev_parse(worktree, "HEAD")?;
        if new == old {
            return Ok(MergeOutcome::UpToDate);
        }
        landing(&new);
        let out = match base_checkout(repo, &base_ref)? {
            Some(checkout) => {
                let out = run(
                    &checkout,
                    &[],
                    [
                        "merge",
                        "--quiet",
                        "--ff-only",
                        "--no-squash",
                        "--no-autostash",
                        new.as_str(),
                    ],
                )?;
                let in_the_way = paths_in_the_way(&out.stderr);
                if !out.ok() && !in_the_way.is_empty() {
                    return Ok(MergeOutcome::InTheWay {
                        checkout,
                        paths: in_the_way,
                    });
                }
                out
            }
            None => {
                let msg = format!("warden merge-ri: fast-forward to {task_branch}");
                let args = ["update-ref", "-m", &msg, &base_ref, &new, &old];
                run(&repo.top, &[], args)?
            }
        };
        if out.ok() {
            return Ok(MergeOutcome::Merged);
        }
        if rev_parse(&repo.top, &base_ref)? == old {
            return Err(out.failure());
        }
        // Someone committed to base meanwhile: merge the new base and try again.
    }
    Err(GitError::BaseKeepsMoving {
        branch: base.to_owned(),
    })
}

/// `--clear-worktree`: `git reset --hard <base>` and `git clean -fd` inside the task
/// worktree only (ignored files, and so `.warden/`, are kept).
pub fn reset_worktree(worktree: &Path, base: &str) -> Result<(), GitError> {
    check_rev(base)?;
    require_task_worktree(worktree)?;
    let commit = rev_parse(worktree, &format!("{base}^{{commit}}"))?;
    run(
        worktree,
        &[],
        ["reset", "--quiet", "--hard", commit.as_str()],
    )?
    .check()?;
    run(
        worktree,
        &[],
        ["clean", "--quiet", "-f", "-d", "-e", "/.warden/"],
    )?
    .check()
}

/// Removes the worktree at `path` (with `--force`: whatever is not committed on its
/// branch is gone) and keeps its branch. Nothing to do when it is not registered.
pub fn remove_worktree(repo: &Repo, path: &Path) -> Result<(), GitError> {
    let path = absolute(path)?;
    let _lock = repo.worktree_lock()?;
    let registered = worktrees(&repo.top)?
        .into_iter()
        .any(|w| same_path(&w.path, &path));
    if !registered {
        return Ok(());
    }
    if path.is_dir() {
        // git refuses to remove a worktree whose `.git` file is gone (best effort: what
        // cannot be repaired is git's to refuse).
        let _ = repo.repair_worktree(&path);
    }
    let mut args: Vec<OsString> = vec!["worktree".into(), "remove".into(), "--force".into()];
    args.push(path.into_os_string());
    run(&repo.top, &[], &args)?.check()
}

// ---------------------------------------------------------------------------------------
// Running git

/// One finished git command.
#[derive(Debug)]
struct Output {
    argv: String,
    dir: PathBuf,
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

impl Output {
    fn ok(&self) -> bool {
        self.code == Some(0)
    }

    fn check(self) -> Result<(), GitError> {
        if self.ok() {
            Ok(())
        } else {
            Err(self.failure())
        }
    }

    fn failure(&self) -> GitError {
        GitError::Failed {
            argv: self.argv.clone(),
            dir: self.dir.clone(),
            status: match self.code {
                Some(c) => format!("exit {c}"),
                None => "killed by a signal".to_owned(),
            },
            stderr: stderr_tail(&self.stderr),
        }
    }
}

/// Variables that would point git at another repository than `-C dir`.
const REPO_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
];

#[cfg(test)]
thread_local! {
    /// Extra environment for every git command of the current test thread, so tests
    /// never read the machine's own git config (edition 2024 makes `set_var` unsafe).
    /// `None` removes the variable.
    static TEST_ENV: std::cell::RefCell<Vec<(String, Option<String>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `git <pre> <args>` in `dir`; any exit status is returned, only a git that cannot
/// start is an error.
fn run<I, S>(dir: &Path, pre: &[String], args: I) -> Result<Output, GitError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir).args(pre).args(&args);
    for k in REPO_ENV {
        cmd.env_remove(k);
    }
    cmd.env("LC_ALL", "C")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_EDITOR", "true")
        .stdin(Stdio::null());
    #[cfg(test)]
    TEST_ENV.with(|e| {
        for (k, v) in e.borrow().iter() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
    });
    // Read as git writes, and not past its exit for long: a hook of the person's repo
    // may leave a process holding git's output pipe (`.output()` waited for it).
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| GitError::GitMissing { source })?;
    let out = crate::check::collect(&mut child, None, None, false);
    let argv = std::iter::once(OsStr::new("git"))
        .chain(pre.iter().map(OsStr::new))
        .chain(args.iter().map(OsString::as_os_str))
        .map(show_arg)
        .collect::<Vec<_>>()
        .join(" ");
    Ok(Output {
        argv,
        dir: dir.to_path_buf(),
        code: out.status.and_then(|s| s.code()),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// One argv element as the person could type it back (quoted when it has to be).
fn show_arg(a: &OsStr) -> String {
    let s = a.to_string_lossy();
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@^{}+,%".contains(c));
    if plain {
        s.into_owned()
    } else {
        format!("{s:?}")
    }
}

/// The last three non-empty lines of stderr on one line.
fn stderr_tail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
    if tail.is_empty() {
        "no error output".to_owned()
    } else {
        tail
    }
}

fn first_line(b: &[u8]) -> &[u8] {
    b.split(|&c| c == b'\n').next().unwrap_or_default()
}

fn path_from(b: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(b))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).trim_end_matches('\n').to_owned()
}

fn absolute(p: &Path) -> Result<PathBuf, GitError> {
    std::path::absolute(p).map_err(|source| GitError::Io {
        action: "resolve",
        path: p.to_path_buf(),
        source,
    })
}

/// Whether two paths name the same place (through symlinks where they exist).
fn same_path(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

// ---------------------------------------------------------------------------------------
// Small git queries

/// The commit `rev` names in the repository at `dir`.
pub fn commit_of(dir: &Path, rev: &str) -> Result<String, GitError> {
    check_rev(rev)?;
    rev_parse(dir, rev)
}

/// Does the branch `branch` contain the commit `commit` (an ancestor of its tip, or
/// the tip)? `false` for a branch or commit that does not exist.
pub fn branch_contains(repo: &Repo, branch: &str, commit: &str) -> Result<bool, GitError> {
    check_rev(branch)?;
    check_rev(commit)?;
    let tip = format!("refs/heads/{branch}");
    let out = run(
        &repo.top,
        &[],
        ["merge-base", "--is-ancestor", commit, tip.as_str()],
    )?;
    match out.code {
        Some(0) => Ok(true),
        Some(1) | Some(128) => Ok(false),
        _ => Err(out.failure()),
    }
}

fn rev_parse(dir: &Path, rev: &str) -> Result<String, GitError> {
    let out = run(dir, &[], ["rev-parse", "--verify", "--quiet", rev])?;
    if !out.ok() {
        return Err(out.failure());
    }
    Ok(text(&out.stdout))
}

fn ref_exists(dir: &Path, full_ref: &str) -> Result<bool, GitError> {
    let out = run(dir, &[], ["rev-parse", "--verify", "--quiet", full_ref])?;
    match out.code {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => Err(out.failure()),
    }
}

fn branch_at(dir: &Path) -> Result<Option<String>, GitError> {
    let out = run(dir, &[], ["symbolic-ref", "--quiet", "HEAD"])?;
    match out.code {
        Some(0) => {
            let full = text(&out.stdout);
            Ok(Some(
                full.strip_prefix("refs/heads/")
                    .map_or(full.clone(), str::to_owned),
            ))
        }
        Some(1) => Ok(None),
        _ => Err(out.failure()),
    }
}

fn describe_branch(b: Option<&str>) -> String {
    match b {
        Some(b) => b.strip_prefix("refs/heads/").unwrap_or(b).to_owned(),
        None => "a detached HEAD".to_owned(),
    }
}

/// Branch names must be valid refs and must not read as options.
fn check_branch_name(dir: &Path, branch: &str) -> Result<(), GitError> {
    check_rev(branch)?;
    let out = run(
        dir,
        &[],
        ["check-ref-format", &format!("refs/heads/{branch}")],
    )?;
    if out.ok() {
        Ok(())
    } else {
        Err(GitError::InvalidName {
            name: branch.to_owned(),
            what: "branch name",
        })
    }
}

/// Revisions are passed as arguments; one starting with `-` would be read as an option.
fn check_rev(rev: &str) -> Result<(), GitError> {
    if rev.is_empty() || rev.starts_with('-') || rev.contains(['\0', '\n']) {
        return Err(GitError::InvalidName {
            name: rev.to_owned(),
            what: "revision",
        });
    }
    Ok(())
}

/// `-c user.name=…`/`-c user.email=…` for the keys git has no value for.
fn identity_args(dir: &Path) -> Result<Vec<String>, GitError> {
    let out = run(
        dir,
        &[],
        ["config", "--get-regexp", r"^user\.(name|email)$"],
    )?;
    if !matches!(out.code, Some(0 | 1)) {
        return Err(out.failure());
    }
    let set = text(&out.stdout);
    let has = |key: &str| set.lines().any(|l| l.split(' ').next() == Some(key));
    let mut args = Vec::new();
    if !has("user.name") {
        args.extend(["-c".to_owned(), format!("user.name={FALLBACK_NAME}")]);
    }
    if !has("user.email") {
        args.extend(["-c".to_owned(), format!("user.email={FALLBACK_EMAIL}")]);
    }
    Ok(args)
}

/// Refuses any path that is not the top of a linked worktree (never the main checkout).
fn require_task_worktree(path: &Path) -> Result<(), GitError> {
    let not = |reason: &str| GitError::NotATaskWorktree {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    if !path.is_dir() {
        return Err(not("no such directory"));
    }
    let out = run(
        path,
        &[],
        [
            "rev-parse",
            "--path-format=absolute",
            "--show-toplevel",
            "--git-dir",
            "--git-common-dir",
        ],
    )?;
    if !out.ok() {
        return Err(not("not inside a git worktree"));
    }
    let lines: Vec<PathBuf> = out
        .stdout
        .split(|&c| c == b'\n')
        .filter(|l| !l.is_empty())
        .map(path_from)
        .collect();
    let [top, git_dir, common] = lines.as_slice() else {
        return Err(out.failure());
    };
    if !same_path(top, path) {
        return Err(not("not the top of its worktree"));
    }
    if same_path(git_dir, common) {
        return Err(not("it is a main checkout, not a linked worktree"));
    }
    Ok(())
}

/// Refuses a worktree with changes to tracked files (untracked files are safe: a merge
/// never overwrites them and `merge --abort` leaves them alone).
fn require_clean(worktree: &Path) -> Result<(), GitError> {
    let out = run(worktree, &[], ["diff", "HEAD", "--name-only", "-z"])?;
    if !out.ok() {
        return Err(out.failure());
    }
    let paths = split_z(&out.stdout);
    if paths.is_empty() {
        Ok(())
    } else {
        Err(GitError::Dirty {
            path: worktree.to_path_buf(),
            paths,
        })
    }
}

fn split_z(b: &[u8]) -> Vec<String> {
    b.split(|&c| c == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// Merges `rev` into the branch checked out in `worktree`. On a conflict the merge is
/// aborted and the conflicting paths (or the untracked files in the way) returned.
fn merge_one(worktree: &Path, rev: &str) -> Result<MergeOutcome, GitError> {
    let before = rev_parse(worktree, "HEAD")?;
    let id = identity_args(worktree)?;
    let out = run(
        worktree,
        &id,
        [
            "merge",
            "--quiet",
            "--no-edit",
            "--ff",
            "--commit",
            "--no-squash",
            "--no-autostash",
            rev,
        ],
    )?;
    if out.ok() {
        return Ok(if rev_parse(worktree, "HEAD")? == before {
            MergeOutcome::UpToDate
        } else {
            MergeOutcome::Merged
        });
    }
    if ref_exists(worktree, "MERGE_HEAD")? {
        let unmerged = run(
            worktree,
            &[],
            ["diff", "--name-only", "--diff-filter=U", "-z"],
        )?;
        let paths = split_z(&unmerged.stdout);
        run(worktree, &[], ["merge", "--abort"])?.check()?;
        if paths.is_empty() {
            // Stopped for another reason (a failing hook): say what git said.
            return Err(out.failure());
        }
        return Ok(MergeOutcome::Conflict(paths));
    }
    let in_the_way = paths_in_the_way(&out.stderr);
    if in_the_way.is_empty() {
        Err(out.failure())
    } else {
        Ok(MergeOutcome::Conflict(in_the_way))
    }
}

/// The files git names when it refuses a merge that would overwrite local files
/// (C locale messages of `unpack-trees.c`), sorted and deduplicated.
fn paths_in_the_way(stderr: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut in_list = false;
    for line in stderr.lines() {
        if let Some(p) = line.strip_prefix('\t') {
            if in_list {
                paths.push(p.to_owned());
            }
            continue;
        }
        in_list = line.contains("would be overwritten by")
            || line.contains("would be removed by")
            || line.contains("would lose untracked files");
        // The one-line form: "error: Entry 'f' would be overwritten by merge. Cannot merge."
        if let Some(rest) = line.split_once("Entry '").map(|(_, r)| r) {
            if let Some((p, _)) = rest.rsplit_once("' ") {
                paths.push(p.to_owned());
            }
            in_list = false;
        }
    }
    paths.sort();
    paths.dedup();
    paths
}

/// One entry of `git worktree list --porcelain -z`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Worktree {
    path: PathBuf,
    /// The full ref (`refs/heads/x`), `None` when detached or bare.
    branch: Option<String>,
    detached: bool,
}

fn worktrees(dir: &Path) -> Result<Vec<Worktree>, GitError> {
    let out = run(dir, &[], ["worktree", "list", "--porcelain", "-z"])?;
    if !out.ok() {
        return Err(out.failure());
    }
    Ok(parse_worktrees(&out.stdout))
}

fn parse_worktrees(b: &[u8]) -> Vec<Worktree> {
    let mut list = Vec::new();
    let mut cur: Option<Worktree> = None;
    for field in b.split(|&c| c == 0) {
        if field.is_empty() {
            list.extend(cur.take());
            continue;
        }
        let (key, value) = match field.iter().position(|&c| c == b' ') {
            Some(i) => (&field[..i], &field[i + 1..]),
            None => (field, &b""[..]),
        };
        match key {
            b"worktree" => {
                list.extend(cur.take());
                cur = Some(Worktree {
                    path: path_from(value),
                    ..Worktree::default()
                });
            }
            b"branch" => {
                if let Some(w) = cur.as_mut() {
                    w.branch = Some(String::from_utf8_lossy(value).into_owned());
                }
            }
            b"detached" => {
                if let Some(w) = cur.as_mut() {
                    w.detached = true;
                }
            }
            _ => {}
        }
    }
    list.extend(cur);
    list
}

/// Where `base_ref` is checked out, if anywhere. A worktree that is rebasing it (git
/// shows it detached) is an error: a moved ref would be overwritten when the rebase ends.
fn base_checkout(repo: &Repo, base_ref: &str) -> Result<Option<PathBuf>, GitError> {
    // Listed while no worktree is being added or removed: git fails a listing that meets
    // one half made ("failed to read .git/worktrees/…/commondir").
    let list = {
        let _lock = repo.worktree_lock()?;
        worktrees(&repo.top)?
    };
    if let Some(w) = list.iter().find(|w| w.branch.as_deref() == Some(base_ref)) {
        if !w.path.is_dir() {
            return Err(GitError::NotATaskWorktree {
                path: w.path.clone(),
                reason: format!(
                    "{} is checked out there but the directory is missing; run `git worktree prune`",
                    describe_branch(Some(base_ref))
                ),
            });
        }
        return Ok(Some(w.path.clone()));
    }
    for w in list.iter().filter(|w| w.detached && w.path.is_dir()) {
        let out = run(
            &w.path,
            &[],
            ["rev-parse", "--path-format=absolute", "--git-dir"],
        )?;
        if !out.ok() {
            continue;
        }
        let git_dir = path_from(first_line(&out.stdout));
        for state in ["rebase-merge", "rebase-apply"] {
            let head_name = std::fs::read(git_dir.join(state).join("head-name")).ok();
            if head_name.is_some_and(|h| text(&h) == base_ref) {
                return Err(GitError::BaseBeingRebased {
                    branch: describe_branch(Some(base_ref)),
                    path: w.path.clone(),
                });
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    //! Real git in throwaway repositories under the system temp dir, isolated from the
    //! machine's git config (no global or system config, no identity).

    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static COUNTER: AtomicUsize = AtomicUsize::new(0);

    /// A temp dir holding `repo/` (on `main`, one commit, `/.warden/` excluded as
    /// `warden init` does) and `home/`; removed on drop.
    struct Fixture {
        root: PathBuf,
        repo: Repo,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    fn fixture() -> Fixture {
        let root = std::env::temp_dir().join(format!(
            "warden-git-test-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&root);
        let home = root.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let root = root.canonicalize().unwrap();
        let set = |k: &str, v: Option<&Path>| (k.to_owned(), v.map(|p| p.display().to_string()));
        TEST_ENV.with(|e| {
            *e.borrow_mut() = vec![
                set("HOME", Some(&root.join("home"))),
                set("XDG_CONFIG_HOME", Some(&root.join("home"))),
                set("GIT_CONFIG_GLOBAL", Some(&root.join("home/gitconfig"))),
                set("GIT_CONFIG_NOSYSTEM", Some(Path::new("1"))),
                set("GIT_CEILING_DIRECTORIES", root.parent()),
                set("GIT_AUTHOR_NAME", None),
                set("GIT_AUTHOR_EMAIL", None),
                set("GIT_COMMITTER_NAME", None),
                set("GIT_COMMITTER_EMAIL", None),
                set("EMAIL", None),
            ];
        });
        let top = root.join("repo");
        std::fs::create_dir_all(&top).unwrap();
        git_ok(&top, ["init", "--quiet", "-b", "main"]);
        write(&top.join("README.md"), "hello\n");
        write(&top.join("shared.txt"), "one\ntwo\nthree\n");
        person_commit(&top, "initial");
        let exclude = top.join(".git/info/exclude");
        let mut text = std::fs::read_to_string(&exclude).unwrap_or_default();
        text.push_str("/.warden/\n");
        write(&exclude, &text);
        Fixture {
            root,
            repo: Repo { top },
        }
    }

    impl Fixture {
        /// Creates task `id`'s worktree on `warden/<id>` from main and links its TASK.md.
        fn task(&self, id: &str) -> PathBuf {
            let top = &self.repo.top;
            let wt = top.join(".warden/worktrees").join(id);
            let task_file = top.join(".warden/tasks").join(id).join("TASK.md");
            write(&task_file, "---\nid: x\n---\n");
            assert!(
                self.repo
                    .ensure_worktree(&wt, &format!("warden/{id}"), "main")
                    .unwrap()
            );
            link_task_file(&wt, &task_file).unwrap();
            wt
        }
    }

    fn write(path: &Path, content: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn read(path: &Path) -> Vec<u8> {
        std::fs::read(path).unwrap()
    }

    /// Runs git and returns its stdout, failing the test when git fails.
    fn git_ok<const N: usize>(dir: &Path, args: [&str; N]) -> String {
        let out = run(dir, &[], args).unwrap();
        assert!(out.ok(), "{}", out.failure());
        text(&out.stdout)
    }

    /// The person commits everything in `dir` with their own identity.
    fn person_commit(dir: &Path, message: &str) -> String {
        git_ok(dir, ["add", "--all"]);
        let id = [
            "-c",
            "user.name=Person",
            "-c",
            "user.email=person@example.org",
        ]
        .map(String::from);
        let out = run(dir, &id, ["commit", "--quiet", "-m", message]).unwrap();
        assert!(out.ok(), "{}", out.failure());
        rev_parse(dir, "HEAD").unwrap()
    }

    fn status(dir: &Path) -> String {
        git_ok(dir, ["status", "--porcelain", "--untracked-files=all"])
    }

    fn sha(dir: &Path, rev: &str) -> String {
        rev_parse(dir, rev).unwrap()
    }

    /// A dependency's branch with one commit writing `file`, made in its own worktree.
    fn dep_branch(f: &Fixture, id: &str, file: &str, content: &str) {
        let wt = f.task(id);
        write(&wt.join(file), content);
        commit_all(&wt, &format!("{id} work")).unwrap().unwrap();
    }

    #[test]
    fn discover_finds_the_top_and_nothing_outside() {
        let f = fixture();
        let sub = f.repo.top.join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(Repo::discover(&sub).unwrap(), Some(f.repo.clone()));
        let outside = f.root.join("home");
        assert_eq!(Repo::discover(&outside).unwrap(), None);
        assert!(matches!(
            Repo::discover(&f.root.join("missing")),
            Err(GitError::Failed { .. })
        ));
    }

    #[test]
    fn current_branch_is_none_on_a_detached_head() {
        let f = fixture();
        assert_eq!(f.repo.current_branch().unwrap().as_deref(), Some("main"));
        git_ok(&f.repo.top, ["checkout", "--quiet", "--detach"]);
        assert_eq!(f.repo.current_branch().unwrap(), None);
    }

    #[test]
    fn a_task_branch_remembers_where_it_started_until_it_is_deleted() {
        let f = fixture();
        git_ok(&f.repo.top, ["branch", "--quiet", "other"]);
        let wt = f.repo.top.join(".warden/worktrees/t");
        assert!(f.repo.ensure_worktree(&wt, "warden/t", "other").unwrap());
        assert_eq!(
            f.repo.recorded_base("warden/t").unwrap().as_deref(),
            Some("other")
        );
        // Made again after its directory was deleted: the record stays.
        std::fs::remove_dir_all(&wt).unwrap();
        assert!(f.repo.ensure_worktree(&wt, "warden/t", "main").unwrap());
        assert_eq!(
            f.repo.recorded_base("warden/t").unwrap().as_deref(),
            Some("other")
        );
        assert_eq!(f.repo.recorded_base("main").unwrap(), None);
        // A base renamed since is no longer named: the caller takes the checked-out one.
        git_ok(&f.repo.top, ["branch", "--quiet", "-m", "other", "renamed"]);
        assert_eq!(f.repo.recorded_base("warden/t").unwrap(), None);
        remove_worktree(&f.repo, &wt).unwrap();
        git_ok(&f.repo.top, ["branch", "--quiet", "-D", "warden/t"]);
        assert_eq!(f.repo.recorded_base("warden/t").unwrap(), None);
    }

    /// Agents make branches of their own (`git switch -c feature`) or detach HEAD: what
    /// they committed and what they left uncommitted are taken back onto the task's
    /// branch, which the commit, merge-ri and every later step work on.
    #[test]
    fn work_done_on_a_branch_of_its_own_is_taken_back_onto_the_task_branch() {
        let f = fixture();
        let wt = f.task("a");
        git_ok(&wt, ["switch", "--quiet", "-c", "feature"]);
        write(&wt.join("one.txt"), "1\n");
        let one = commit_all(&wt, "one").unwrap().unwrap();
        write(&wt.join("two.txt"), "2\n");
        assert!(!f.repo.ensure_worktree(&wt, "warden/a", "main").unwrap());
        assert_eq!(branch_at(&wt).unwrap().as_deref(), Some("warden/a"));
        assert_eq!(sha(&wt, "refs/heads/warden/a"), one);
        assert_eq!(
            sha(&wt, "refs/heads/feature"),
            one,
            "its own branch is left"
        );
        assert_eq!(status(&wt), "?? two.txt", "uncommitted work stays");
        let two = commit_all(&wt, "two").unwrap().unwrap();
        // A detached HEAD with a commit on it, taken back by merge-ri itself.
        git_ok(&wt, ["switch", "--quiet", "--detach"]);
        write(&wt.join("three.txt"), "3\n");
        let three = commit_all(&wt, "three").unwrap().unwrap();
        assert_eq!(
            merge_into_base(&f.repo, &wt, "warden/a", "main").unwrap(),
            MergeOutcome::Merged
        );
        assert_eq!(branch_at(&wt).unwrap().as_deref(), Some("warden/a"));
        assert_eq!(sha(&f.repo.top, "refs/heads/main"), three);
        assert!(git_ok(&f.repo.top, ["log", "--format=%H", "main"]).contains(&two));
    }

    /// A branch that does not continue the task's (started again from main) is not
    /// taken: nothing moves, and the error says how to put it right.
    #[test]
    fn a_worktree_moved_to_a_branch_that_does_not_continue_the_task_is_refused() {
        let f = fixture();
        let wt = f.task("a");
        write(&wt.join("a.txt"), "a\n");
        let work = commit_all(&wt, "a").unwrap().unwrap();
        git_ok(&wt, ["switch", "--quiet", "-c", "fresh", "main"]);
        let e = f.repo.ensure_worktree(&wt, "warden/a", "main").unwrap_err();
        assert!(matches!(e, GitError::WrongBranch { .. }), "{e}");
        assert!(e.to_string().contains("switch warden/a"), "{e}");
        assert_eq!(sha(&wt, "refs/heads/warden/a"), work);
        assert_eq!(branch_at(&wt).unwrap().as_deref(), Some("fresh"));
        assert!(matches!(
            onto_task_branch(&wt, "warden/a"),
            Err(GitError::WrongBranch { .. })
        ));
    }

    /// Work that deletes its worktree's `.git` file: git run there would find the
    /// person's checkout above it. The file is restored before anything else; a `.git`
    /// directory (`git init` in the worktree) cannot be, and is refused.
    #[test]
    fn a_worktree_whose_git_file_was_deleted_is_repaired() {
        let f = fixture();
        let wt = f.task("a");
        std::fs::remove_file(wt.join(".git")).unwrap();
        write(&wt.join("y.txt"), "y\n");
        assert!(!f.repo.ensure_worktree(&wt, "warden/a", "main").unwrap());
        assert!(wt.join(".git").is_file());
        let work = commit_all(&wt, "y").unwrap().unwrap();
        assert_eq!(sha(&f.repo.top, "refs/heads/warden/a"), work);
        assert_eq!(
            status(&f.repo.top),
            "",
            "the person's checkout is untouched"
        );
        std::fs::remove_file(wt.join(".git")).unwrap();
        std::fs::create_dir(wt.join(".git")).unwrap();
        let e = f.repo.repair_worktree(&wt).unwrap_err();
        assert!(e.to_string().contains("git init"), "{e}");
        // Removing it still works once the `.git` file is back.
        std::fs::remove_dir(wt.join(".git")).unwrap();
        remove_worktree(&f.repo, &wt).unwrap();
        assert!(!wt.exists());
    }

    #[test]
    fn a_new_branch_has_no_commit_until_its_first() {
        let f = fixture();
        assert!(f.repo.branch_has_commit("main").unwrap());
        git_ok(&f.repo.top, ["checkout", "--quiet", "--orphan", "fresh"]);
        assert_eq!(f.repo.current_branch().unwrap().as_deref(), Some("fresh"));
        assert!(!f.repo.branch_has_commit("fresh").unwrap());
        assert!(!f.repo.branch_has_commit("no-such-branch").unwrap());
        assert!(f.repo.branch_has_commit("--all").is_err());
    }

    /// Sessions start at once: `git worktree add` run side by side in one repository
    /// fails now and then ("failed to read .git/worktrees/w2/commondir"), as git reads
    /// the worktree another `add` is still writing.
    #[test]
    fn worktrees_added_side_by_side_all_succeed() {
        let f = fixture();
        let env = TEST_ENV.with(|e| e.borrow().clone());
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..24)
                .map(|i| {
                    let repo = &f.repo;
                    let env = env.clone();
                    s.spawn(move || {
                        TEST_ENV.with(|e| *e.borrow_mut() = env);
                        let wt = repo.top.join(format!(".warden/worktrees/w{i}"));
                        repo.ensure_worktree(&wt, &format!("warden/w{i}"), "main")
                    })
                })
                .collect();
            for (i, h) in handles.into_iter().enumerate() {
                let r = h.join().unwrap();
                assert!(matches!(r, Ok(true)), "worktree w{i}: {r:?}");
            }
        });
        assert_eq!(worktrees(&f.repo.top).unwrap().len(), 25);
    }

    #[test]
    fn ensure_worktree_is_idempotent_and_recovers_after_a_crash() {
        let f = fixture();
        let wt = f.task("a");
        let base = sha(&f.repo.top, "main");
        assert_eq!(sha(&wt, "HEAD"), base);
        assert_eq!(branch_at(&wt).unwrap().as_deref(), Some("warden/a"));
        // A restart finds it as it is.
        assert!(!f.repo.ensure_worktree(&wt, "warden/a", "main").unwrap());
        // Work committed on the branch survives losing the worktree.
        write(&wt.join("a.txt"), "a\n");
        let work = commit_all(&wt, "a").unwrap().unwrap();
        remove_worktree(&f.repo, &wt).unwrap();
        assert!(!wt.exists());
        assert!(f.repo.ensure_worktree(&wt, "warden/a", "main").unwrap());
        assert_eq!(sha(&wt, "HEAD"), work);
        // A worktree directory deleted by hand is made again on its branch.
        std::fs::remove_dir_all(&wt).unwrap();
        assert!(f.repo.ensure_worktree(&wt, "warden/a", "main").unwrap());
        assert_eq!(sha(&wt, "HEAD"), work);
        // The path taken by another branch, or the branch taken by another path: refused.
        assert!(matches!(
            f.repo.ensure_worktree(&wt, "warden/b", "main"),
            Err(GitError::WrongBranch { .. })
        ));
        let other = f.repo.top.join(".warden/worktrees/other");
        assert!(matches!(
            f.repo.ensure_worktree(&other, "warden/a", "main"),
            Err(GitError::BranchInUse { .. })
        ));
        assert!(matches!(
            f.repo.ensure_worktree(&other, "-b", "main"),
            Err(GitError::InvalidName { .. })
        ));
        assert!(matches!(
            f.repo.ensure_worktree(&other, "warden/c", "--orphan"),
            Err(GitError::InvalidName { .. })
        ));
        // The person's checkout never changed.
        assert_eq!(status(&f.repo.top), "");
        assert_eq!(sha(&f.repo.top, "HEAD"), base);
    }

    #[test]
    fn the_task_file_link_stays_out_of_git_even_beside_project_task_files() {
        let f = fixture();
        // The project tracks files named TASK.md of its own.
        write(&f.repo.top.join("TASK.md"), "project task\n");
        write(&f.repo.top.join("docs/TASK.md"), "docs task\n");
        person_commit(&f.repo.top, "project task files");
        let wt = f.task("a");
        let link = wt.join(".warden/TASK.md");
        let target = f.repo.top.join(".warden/tasks/a/TASK.md");
        assert_eq!(std::fs::read_link(&link).unwrap(), target);
        assert_eq!(status(&wt), "");
        assert_eq!(status(&f.repo.top), "");
        // Idempotent, and a stale link is re-pointed.
        link_task_file(&wt, &target).unwrap();
        let moved = f.root.join("elsewhere/TASK.md");
        link_task_file(&wt, &moved).unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap(), moved);
        link_task_file(&wt, &target).unwrap();
        assert_eq!(read(&link), b"---\nid: x\n---\n");
        // A file written in the link's place is kept beside the new link, not lost.
        std::fs::remove_file(&link).unwrap();
        write(&link, "## Handoff\nwritten through a rename\n");
        link_task_file(&wt, &target).unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap(), target);
        assert_eq!(
            read(&wt.join(".warden/TASK.md.replaced-link")),
            b"## Handoff\nwritten through a rename\n"
        );
        // The project's own TASK.md files are committed; the link never is.
        write(&wt.join("TASK.md"), "changed by the agent\n");
        write(&wt.join("docs/TASK.md"), "changed too\n");
        write(
            &wt.join("sub/.warden/TASK.md"),
            "a project file in a nested .warden\n",
        );
        commit_all(&wt, "work").unwrap().unwrap();
        let files = git_ok(&wt, ["ls-tree", "-r", "--name-only", "HEAD"]);
        assert_eq!(
            files.lines().collect::<Vec<_>>(),
            [
                "README.md",
                "TASK.md",
                "docs/TASK.md",
                "shared.txt",
                "sub/.warden/TASK.md"
            ]
        );
        assert_eq!(status(&wt), "");
        assert!(link.exists());
    }

    #[test]
    fn commit_all_commits_changes_only_and_falls_back_to_the_warden_identity() {
        fn check(local_identity: Option<(&str, &str)>, expected_author: &str) {
            let f = fixture();
            let wt = f.task("a");
            if let Some((name, email)) = local_identity {
                git_ok(&f.repo.top, ["config", "user.name", name]);
                git_ok(&f.repo.top, ["config", "user.email", email]);
            }
            let before = sha(&wt, "HEAD");
            assert_eq!(commit_all(&wt, "nothing").unwrap(), None);
            assert_eq!(sha(&wt, "HEAD"), before);
            write(&wt.join("new.txt"), "new\n");
            write(&wt.join("README.md"), "changed\n");
            std::fs::remove_file(wt.join("shared.txt")).unwrap();
            let commit = commit_all(&wt, "the work").unwrap().unwrap();
            assert_eq!(commit, sha(&wt, "HEAD"));
            assert_eq!(status(&wt), "");
            let show = git_ok(
                &wt,
                ["show", "-s", "--format=%an <%ae>|%cn <%ce>|%s", "HEAD"],
            );
            assert_eq!(
                show,
                format!("{expected_author}|{expected_author}|the work")
            );
            let changed = git_ok(&wt, ["diff", "--name-status", "HEAD~1", "HEAD"]);
            assert_eq!(changed, "M\tREADME.md\nA\tnew.txt\nD\tshared.txt");
            assert_eq!(commit_all(&wt, "again").unwrap(), None);
        }
        check(None, "Warden <warden@localhost>");
        check(Some(("Ada", "ada@example.org")), "Ada <ada@example.org>");
    }

    /// A hook of the person's repo that leaves a process behind (holding the output pipe
    /// git gave it) does not hold up Warden's commit: git's output is read until git
    /// exits and for a moment after, not until the last holder closes it.
    #[test]
    fn a_hook_that_leaves_a_process_behind_does_not_hold_up_a_commit() {
        let f = fixture();
        let wt = f.task("a");
        let pid_file = f.root.join("hook.pid");
        let hook = f.repo.top.join(".git/hooks/post-commit");
        write(
            &hook,
            &format!(
                "#!/bin/sh\nsleep 100000 &\necho $! > {}\n",
                pid_file.display()
            ),
        );
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        write(&wt.join("new.txt"), "new\n");
        let env = TEST_ENV.with(|e| e.borrow().clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let dir = wt.clone();
        std::thread::spawn(move || {
            TEST_ENV.with(|e| *e.borrow_mut() = env);
            let _ = tx.send(commit_all(&dir, "the work").map(|c| c.is_some()));
        });
        let committed = rx.recv_timeout(std::time::Duration::from_secs(60));
        // The person's process is theirs to keep: stop it only now.
        if let Ok(pid) = std::fs::read_to_string(&pid_file) {
            let _ = std::process::Command::new("kill").arg(pid.trim()).status();
        }
        assert!(
            matches!(committed, Ok(Ok(true))),
            "the commit waited on the hook's leftover: {committed:?}"
        );
        assert_eq!(status(&wt), "");
    }

    #[test]
    fn the_worktree_functions_refuse_the_persons_checkout() {
        let f = fixture();
        let wt = f.task("a");
        write(&f.repo.top.join("README.md"), "the person's edit\n");
        write(&f.repo.top.join("untracked.txt"), "mine\n");
        let sub = f.repo.top.join("docs");
        std::fs::create_dir_all(&sub).unwrap();
        for dir in [
            f.repo.top.as_path(),
            sub.as_path(),
            &f.root.join("home"),
            &wt.join("nope"),
        ] {
            let refused = |r: Result<(), GitError>| {
                assert!(
                    matches!(r, Err(GitError::NotATaskWorktree { .. })),
                    "{dir:?}: {r:?}"
                )
            };
            refused(commit_all(dir, "x").map(drop));
            refused(reset_worktree(dir, "main"));
            refused(merge_branches(dir, &["warden/a".into()]).map(drop));
            refused(merge_into_base(&f.repo, dir, "warden/a", "main").map(drop));
        }
        assert_eq!(status(&f.repo.top), " M README.md\n?? untracked.txt");
        assert_eq!(read(&f.repo.top.join("README.md")), b"the person's edit\n");
    }

    #[test]
    fn merge_fi_merges_two_dependency_branches() {
        let f = fixture();
        dep_branch(&f, "a", "a.txt", "from a\n");
        dep_branch(&f, "b", "b.txt", "from b\n");
        let wt = f.task("c");
        let deps = ["warden/a".to_owned(), "warden/b".to_owned()];
        assert_eq!(merge_branches(&wt, &[]).unwrap(), MergeOutcome::UpToDate);
        assert_eq!(merge_branches(&wt, &deps).unwrap(), MergeOutcome::Merged);
        assert_eq!(read(&wt.join("a.txt")), b"from a\n");
        assert_eq!(read(&wt.join("b.txt")), b"from b\n");
        assert_eq!(status(&wt), "");
        git_ok(&wt, ["merge-base", "--is-ancestor", "warden/a", "HEAD"]);
        git_ok(&wt, ["merge-base", "--is-ancestor", "warden/b", "HEAD"]);
        assert_eq!(merge_branches(&wt, &deps).unwrap(), MergeOutcome::UpToDate);
        // The person's checkout is untouched.
        assert_eq!(status(&f.repo.top), "");
        assert!(!f.repo.top.join("a.txt").exists());
    }

    #[test]
    fn merge_fi_conflict_names_the_paths_and_undoes_everything() {
        let f = fixture();
        dep_branch(&f, "a", "shared.txt", "one\nTWO from a\nthree\n");
        dep_branch(&f, "b", "shared.txt", "one\nTWO from b\nthree\n");
        dep_branch(&f, "d", "d.txt", "d\n");
        let wt = f.task("c");
        write(&wt.join("scratch.txt"), "untracked, kept\n");
        let before = sha(&wt, "HEAD");
        let deps = ["warden/d", "warden/a", "warden/b"].map(String::from);
        assert_eq!(
            merge_branches(&wt, &deps).unwrap(),
            MergeOutcome::Conflict(vec!["shared.txt".into()])
        );
        assert_eq!(status(&wt), "?? scratch.txt");
        assert_eq!(sha(&wt, "HEAD"), before);
        assert!(!wt.join("d.txt").exists());
        assert_eq!(read(&wt.join("scratch.txt")), b"untracked, kept\n");
        // Uncommitted tracked changes are refused before any merge starts.
        write(&wt.join("README.md"), "dirty\n");
        assert!(matches!(
            merge_branches(&wt, &deps),
            Err(GitError::Dirty { paths, .. }) if paths == ["README.md"]
        ));
    }

    /// The person's checkout on `main` with local changes that do not touch the task's
    /// files: a modified file, a staged file, untracked files.
    fn persons_local_changes(f: &Fixture) -> Vec<(PathBuf, Vec<u8>)> {
        let top = &f.repo.top;
        write(&top.join("README.md"), "the person's unsaved edit\n");
        write(&top.join("staged.txt"), "staged by the person\n");
        git_ok(top, ["add", "staged.txt"]);
        write(
            &top.join("notes/untracked.txt"),
            "untracked \u{e9}\0bytes\n",
        );
        ["README.md", "staged.txt", "notes/untracked.txt"]
            .iter()
            .map(|p| (top.join(p), read(&top.join(p))))
            .collect()
    }

    /// Two tasks finish at once (a supervisor's and a person's approval): their merge-ri
    /// runs side by side, and the fast-forwards in the person's checkout met git's
    /// `index.lock` ("Another git process seems to be running").
    #[test]
    fn merge_ri_side_by_side_all_merge() {
        let f = fixture();
        let n = 8;
        let wts: Vec<PathBuf> = (0..n).map(|i| f.task(&format!("m{i}"))).collect();
        for (i, wt) in wts.iter().enumerate() {
            write(&wt.join(format!("file{i}.txt")), "work\n");
            commit_all(wt, "work").unwrap().unwrap();
        }
        let env = TEST_ENV.with(|e| e.borrow().clone());
        std::thread::scope(|s| {
            let handles: Vec<_> = wts
                .iter()
                .enumerate()
                .map(|(i, wt)| {
                    let (repo, env) = (&f.repo, env.clone());
                    s.spawn(move || {
                        TEST_ENV.with(|e| *e.borrow_mut() = env);
                        merge_into_base(repo, wt, &format!("warden/m{i}"), "main")
                    })
                })
                .collect();
            for (i, h) in handles.into_iter().enumerate() {
                let r = h.join().unwrap();
                assert!(matches!(r, Ok(MergeOutcome::Merged)), "m{i}: {r:?}");
            }
        });
        for i in 0..n {
            assert_eq!(read(&f.repo.top.join(format!("file{i}.txt"))), b"work\n");
        }
    }

    /// merge-ri lists the worktrees to find the base's checkout; a listing that met a
    /// worktree half made by `git worktree add` (its `gitdir` written, `commondir` still
    /// empty) failed with "failed to read .git/worktrees/…/commondir" — the soak run's
    /// approvals beside the supervisor's starts. It must wait for the add to finish.
    #[test]
    fn merge_ri_lists_worktrees_only_when_none_is_half_made() {
        use std::os::unix::fs::MetadataExt;
        let f = fixture();
        // An add in progress: its lock held, its admin directory half written.
        let lock = f.repo.worktree_lock().unwrap();
        let half = f.repo.top.join(".git/worktrees/half");
        write(&half.join("commondir"), "");
        write(
            &half.join("gitdir"),
            &format!("{}\n", f.repo.top.join("h/.git").display()),
        );
        let ino = lock.metadata().unwrap().ino();
        // A request blocked on the lock file, as /proc/locks shows it ("-> FLOCK …").
        let waiting = || {
            std::fs::read_to_string("/proc/locks")
                .unwrap()
                .lines()
                .any(|l| {
                    l.contains("->")
                        && l.split_whitespace()
                            .any(|w| w.ends_with(&format!(":{ino}")))
                })
        };
        let env = TEST_ENV.with(|e| e.borrow().clone());
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                TEST_ENV.with(|e| *e.borrow_mut() = env);
                base_checkout(&f.repo, "refs/heads/main")
            });
            // Until the listing has run, or is waiting for the add.
            while !h.is_finished() && !waiting() {
                std::thread::yield_now();
            }
            std::fs::remove_dir_all(&half).unwrap();
            drop(lock);
            let r = h.join().unwrap();
            assert!(matches!(&r, Ok(Some(p)) if *p == f.repo.top), "{r:?}");
        });
    }

    #[test]
    fn merge_ri_fast_forwards_the_persons_checkout_and_keeps_their_changes() {
        let f = fixture();
        let wt = f.task("a");
        write(&wt.join("feature.txt"), "feature\n");
        write(&wt.join("shared.txt"), "one\ntwo\nthree\nfour\n");
        commit_all(&wt, "feature").unwrap().unwrap();
        let local = persons_local_changes(&f);
        let status_before = status(&f.repo.top);
        assert_eq!(
            merge_into_base(&f.repo, &wt, "warden/a", "main").unwrap(),
            MergeOutcome::Merged
        );
        assert_eq!(sha(&f.repo.top, "main"), sha(&wt, "HEAD"));
        assert_eq!(f.repo.current_branch().unwrap().as_deref(), Some("main"));
        for (path, bytes) in &local {
            assert_eq!(&read(path), bytes, "{path:?}");
        }
        assert_eq!(status(&f.repo.top), status_before);
        assert_eq!(
            git_ok(&f.repo.top, ["diff", "--cached", "--name-only"]),
            "staged.txt"
        );
        assert_eq!(read(&f.repo.top.join("feature.txt")), b"feature\n");
        assert_eq!(
            read(&f.repo.top.join("shared.txt")),
            b"one\ntwo\nthree\nfour\n"
        );
        assert_eq!(
            merge_into_base(&f.repo, &wt, "warden/a", "main").unwrap(),
            MergeOutcome::UpToDate
        );
    }

    #[test]
    fn merge_ri_is_refused_when_the_persons_files_are_in_the_way() {
        fn check(in_the_way: &str, local: Option<&str>, expected: &[&str]) {
            let f = fixture();
            let wt = f.task("a");
            write(&wt.join("shared.txt"), "one\ntwo by the task\nthree\n");
            write(&wt.join("added.txt"), "added by the task\n");
            commit_all(&wt, "task").unwrap().unwrap();
            let top = &f.repo.top;
            // With autostash git would stash the person's change and re-apply it.
            git_ok(top, ["config", "merge.autoStash", "true"]);
            let main_before = sha(top, "main");
            let person_file = top.join(in_the_way);
            if let Some(content) = local {
                write(&person_file, content);
            }
            let bytes = read(&person_file);
            let status_before = status(top);
            let expected = MergeOutcome::InTheWay {
                checkout: top.clone(),
                paths: expected.iter().map(|p| p.to_string()).collect(),
            };
            assert_eq!(
                merge_into_base(&f.repo, &wt, "warden/a", "main").unwrap(),
                expected
            );
            assert_eq!(sha(top, "main"), main_before);
            assert_eq!(read(&person_file), bytes);
            assert_eq!(status(top), status_before);
            assert_eq!(status(&wt), "");
            // The person settles their change; the task still merges.
            std::fs::remove_file(&person_file).unwrap();
            git_ok(top, ["checkout", "--quiet", "--", "."]);
            assert_eq!(
                merge_into_base(&f.repo, &wt, "warden/a", "main").unwrap(),
                MergeOutcome::Merged
            );
            assert_eq!(sha(top, "main"), sha(&wt, "HEAD"));
            assert_eq!(status(top), "");
        }
        check(
            "shared.txt",
            Some("one\ntwo\nthree\nlocal edit\n"),
            &["shared.txt"],
        );
        check(
            "added.txt",
            Some("the person's own new file\n"),
            &["added.txt"],
        );
    }

    #[test]
    fn merge_ri_moves_the_ref_when_base_is_not_checked_out() {
        let f = fixture();
        let top = &f.repo.top;
        // Config that would refuse the merge of main into the task without `--ff`.
        git_ok(top, ["config", "merge.ff", "only"]);
        git_ok(top, ["checkout", "--quiet", "-b", "dev"]);
        write(&top.join("dev.txt"), "dev\n");
        write(&top.join("README.md"), "uncommitted on dev\n");
        let wt = f.task("a");
        write(&wt.join("feature.txt"), "feature\n");
        commit_all(&wt, "feature").unwrap().unwrap();
        // Meanwhile main moved on (not conflicting): it is merged into the task first.
        let scratch = f.task("scratch");
        git_ok(&scratch, ["checkout", "--quiet", "--detach", "main"]);
        write(&scratch.join("other.txt"), "other\n");
        let moved = person_commit(&scratch, "main moved");
        git_ok(&scratch, ["update-ref", "refs/heads/main", &moved]);
        assert_eq!(
            merge_into_base(&f.repo, &wt, "warden/a", "main").unwrap(),
            MergeOutcome::Merged
        );
        let tip = sha(&wt, "HEAD");
        assert_eq!(sha(top, "main"), tip);
        git_ok(top, ["merge-base", "--is-ancestor", &moved, "main"]);
        assert_eq!(read(&wt.join("other.txt")), b"other\n");
        // The person's checkout on dev is untouched.
        assert_eq!(f.repo.current_branch().unwrap().as_deref(), Some("dev"));
        assert_eq!(status(top), " M README.md\n?? dev.txt");
        assert!(!top.join("feature.txt").exists());
        let reflog = git_ok(top, ["reflog", "-1", "--format=%gs", "main"]);
        assert_eq!(reflog, "warden merge-ri: fast-forward to warden/a");
    }

    #[test]
    fn merge_ri_starts_over_when_base_moves_meanwhile() {
        /// A `post-merge` hook moves main `races` times, each time right after the merge
        /// of main into the task branch, before the fast-forward.
        fn check(races: usize, expect_merged: bool) {
            let f = fixture();
            let top = &f.repo.top;
            git_ok(top, ["checkout", "--quiet", "-b", "dev"]);
            let wt = f.task("a");
            write(&wt.join("feature.txt"), "feature\n");
            commit_all(&wt, "feature").unwrap().unwrap();
            // main moves once first, so the first merge into the task is a real one.
            git_ok(top, ["checkout", "--quiet", "main"]);
            write(&top.join("first.txt"), "first\n");
            person_commit(top, "first");
            git_ok(top, ["checkout", "--quiet", "dev"]);
            let counter = f.root.join("races");
            write(&counter, &format!("{races}\n"));
            let hook = top.join(".git/hooks/post-merge");
            let script = format!(
                "#!/bin/sh\nn=$(cat '{c}')\n[ \"$n\" -gt 0 ] || exit 0\necho $((n - 1)) > '{c}'\n\
                 t=$(git rev-parse main^{{tree}})\n\
                 c=$(git -c user.name=R -c user.email=r@x commit-tree -p main -m race \"$t\")\n\
                 git update-ref refs/heads/main \"$c\"\n",
                c = counter.display()
            );
            write(&hook, &script);
            std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            let got = merge_into_base(&f.repo, &wt, "warden/a", "main");
            let races_left = std::fs::read_to_string(&counter).unwrap();
            if expect_merged {
                assert_eq!(got.unwrap(), MergeOutcome::Merged);
                assert_eq!(races_left.trim(), "0");
                assert_eq!(sha(top, "main"), sha(&wt, "HEAD"));
                let subjects = git_ok(top, ["log", "--format=%s", "main"]);
                assert_eq!(subjects.matches("race").count(), races, "{subjects}");
            } else {
                assert!(
                    matches!(got, Err(GitError::BaseKeepsMoving { .. })),
                    "{got:?}"
                );
                let main_tip = sha(top, "main");
                assert_eq!(git_ok(top, ["log", "-1", "--format=%s", &main_tip]), "race");
            }
            assert_eq!(status(&wt), "");
        }
        check(0, true);
        check(1, true);
        check(2, true);
        check(MERGE_RI_ROUNDS, false);
    }

    #[test]
    fn merge_ri_conflict_with_base_changes_nothing() {
        let f = fixture();
        let wt = f.task("a");
        write(&wt.join("shared.txt"), "one\ntask\nthree\n");
        let task_tip = commit_all(&wt, "task").unwrap().unwrap();
        write(&f.repo.top.join("shared.txt"), "one\nperson\nthree\n");
        let main_before = person_commit(&f.repo.top, "person");
        assert_eq!(
            merge_into_base(&f.repo, &wt, "warden/a", "main").unwrap(),
            MergeOutcome::Conflict(vec!["shared.txt".into()])
        );
        assert_eq!(sha(&f.repo.top, "main"), main_before);
        assert_eq!(sha(&wt, "HEAD"), task_tip);
        assert_eq!(status(&wt), "");
        assert_eq!(status(&f.repo.top), "");
    }

    #[test]
    fn merge_ri_refuses_a_base_being_rebased() {
        let f = fixture();
        let top = &f.repo.top;
        let wt = f.task("a");
        write(&wt.join("feature.txt"), "feature\n");
        commit_all(&wt, "feature").unwrap().unwrap();
        // The person rebases main onto a branch that conflicts with it.
        git_ok(top, ["checkout", "--quiet", "-b", "other", "main"]);
        write(&top.join("shared.txt"), "other\n");
        person_commit(top, "other");
        git_ok(top, ["checkout", "--quiet", "main"]);
        write(&top.join("shared.txt"), "main\n");
        let main_before = person_commit(top, "main");
        let id = ["-c", "user.name=P", "-c", "user.email=p@x"].map(String::from);
        assert!(!run(top, &id, ["rebase", "other"]).unwrap().ok());
        assert!(matches!(
            merge_into_base(&f.repo, &wt, "warden/a", "main"),
            Err(GitError::BaseBeingRebased { .. })
        ));
        assert_eq!(sha(top, "refs/heads/main"), main_before);
    }

    #[test]
    fn reset_worktree_clears_the_task_and_keeps_the_link() {
        let f = fixture();
        let wt = f.task("a");
        write(&wt.join("work.txt"), "work\n");
        commit_all(&wt, "work").unwrap().unwrap();
        write(&wt.join("README.md"), "dirty\n");
        write(&wt.join("junk/deep.txt"), "junk\n");
        write(&f.repo.top.join("persons.txt"), "untracked, the person's\n");
        reset_worktree(&wt, "main").unwrap();
        assert_eq!(sha(&wt, "HEAD"), sha(&f.repo.top, "main"));
        assert_eq!(branch_at(&wt).unwrap().as_deref(), Some("warden/a"));
        assert_eq!(status(&wt), "");
        assert!(!wt.join("junk").exists());
        assert!(!wt.join("work.txt").exists());
        assert_eq!(read(&wt.join(".warden/TASK.md")), b"---\nid: x\n---\n");
        assert_eq!(status(&f.repo.top), "?? persons.txt");
    }

    #[test]
    fn remove_worktree_keeps_the_branch_and_is_idempotent() {
        let f = fixture();
        let wt = f.task("a");
        write(&wt.join("uncommitted.txt"), "x\n");
        remove_worktree(&f.repo, &wt).unwrap();
        assert!(!wt.exists());
        remove_worktree(&f.repo, &wt).unwrap();
        assert!(ref_exists(&f.repo.top, "refs/heads/warden/a").unwrap());
        assert_eq!(worktrees(&f.repo.top).unwrap().len(), 1);
    }

    #[test]
    fn shell_metacharacters_are_never_interpreted() {
        let f = fixture();
        let hostile = [
            "warden/$(touch${IFS}pwned1)",
            "warden/x;touch${IFS}pwned2",
            "warden/`touch${IFS}pwned3`|touch${IFS}pwned4&&x",
        ];
        let message = "$(touch pwned5); rm -rf ./README.md `touch pwned6` && touch pwned7\n'\"";
        let mut tips = Vec::new();
        for (i, branch) in hostile.iter().enumerate() {
            let wt = f.repo.top.join(format!(".warden/worktrees/t{i}"));
            assert!(f.repo.ensure_worktree(&wt, branch, "main").unwrap());
            assert_eq!(branch_at(&wt).unwrap().as_deref(), Some(*branch));
            write(&wt.join(format!("$(touch pwned8){i};.txt")), "x\n");
            commit_all(&wt, message).unwrap().unwrap();
            let body = git_ok(&wt, ["show", "-s", "--format=%B", "HEAD"]);
            assert_eq!(body.trim_end(), message.trim_end());
            assert_eq!(
                merge_into_base(&f.repo, &wt, branch, "main").unwrap(),
                MergeOutcome::Merged
            );
            tips.push(sha(&f.repo.top, "main"));
        }
        let downstream = f.task("down");
        let deps: Vec<String> = hostile.iter().map(|b| b.to_string()).collect();
        assert_eq!(
            merge_branches(&downstream, &deps).unwrap(),
            MergeOutcome::UpToDate
        );
        // Invalid names are refused before anything runs.
        for bad in [
            "warden/$(touch pwned9)",
            "; rm -rf ~",
            "--exec=touch pwned10",
        ] {
            let wt = f.repo.top.join(".warden/worktrees/bad");
            assert!(matches!(
                f.repo.ensure_worktree(&wt, bad, "main"),
                Err(GitError::InvalidName { .. })
            ));
        }
        assert_eq!(read(&f.repo.top.join("README.md")), b"hello\n");
        fn find_pwned(dir: &Path, found: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                let p = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("pwned") {
                    found.push(p.clone());
                }
                if e.file_type().unwrap().is_dir() && name != ".git" {
                    find_pwned(&p, found);
                }
            }
        }
        let mut found = Vec::new();
        find_pwned(&f.root, &mut found);
        find_pwned(Path::new(env!("CARGO_MANIFEST_DIR")), &mut found);
        assert_eq!(found, Vec::<PathBuf>::new());
    }

    #[test]
    fn paths_in_the_way_are_read_from_gits_messages() {
        fn check(stderr: &str, expected: &[&str]) {
            assert_eq!(paths_in_the_way(stderr), expected, "{stderr}");
        }
        check("", &[]);
        check("fatal: Not possible to fast-forward, aborting.\n", &[]);
        check(
            "error: Your local changes to the following files would be overwritten by merge:\n\tb.txt\n\ta b.txt\nPlease commit your changes or stash them before you merge.\nAborting\n",
            &["a b.txt", "b.txt"],
        );
        check(
            "error: The following untracked working tree files would be overwritten by merge:\n\tnew.txt\nPlease move or remove them before you merge.\nAborting\n",
            &["new.txt"],
        );
        check(
            "error: The following untracked working tree files would be removed by merge:\n\tgone.txt\nAborting\n",
            &["gone.txt"],
        );
        check(
            "error: Updating the following directories would lose untracked files in them:\n\tdir\n\nAborting\n",
            &["dir"],
        );
        check(
            "error: Entry 'it's.txt' would be overwritten by merge. Cannot merge.\n",
            &["it's.txt"],
        );
        check("error: Entry 'x' not uptodate. Cannot merge.\n", &["x"]);
        check("hint: something\n\tnot a path\n", &[]);
    }

    #[test]
    fn worktree_lists_are_parsed() {
        fn check(input: &[u8], expected: &[(&str, Option<&str>, bool)]) {
            let got: Vec<_> = parse_worktrees(input)
                .into_iter()
                .map(|w| (w.path.display().to_string(), w.branch, w.detached))
                .collect();
            let expected: Vec<_> = expected
                .iter()
                .map(|(p, b, d)| (p.to_string(), b.map(str::to_owned), *d))
                .collect();
            assert_eq!(got, expected);
        }
        check(b"", &[]);
        check(
            b"worktree /r\0HEAD 1\0branch refs/heads/main\0\0worktree /r/.warden/worktrees/a b\0HEAD 2\0detached\0\0",
            &[("/r", Some("refs/heads/main"), false), ("/r/.warden/worktrees/a b", None, true)],
        );
        check(b"worktree /bare\0bare\0\0", &[("/bare", None, false)]);
        check(
            b"worktree /gone\0HEAD 3\0branch refs/heads/x\0prunable gitdir file points to non-existent location\0\0",
            &[("/gone", Some("refs/heads/x"), false)],
        );
    }

    #[test]
    fn errors_are_one_line_and_show_argv_as_typed() {
        fn check(args: &[&str], expected: &str) {
            let shown: Vec<String> = args.iter().map(|a| show_arg(OsStr::new(a))).collect();
            assert_eq!(shown.join(" "), expected);
        }
        check(
            &["merge", "--ff-only", "refs/heads/warden/a"],
            "merge --ff-only refs/heads/warden/a",
        );
        check(&["commit", "-m", "two\nlines"], r#"commit -m "two\nlines""#);
        check(&["$(x)", ""], r#""$(x)" """#);
        assert_eq!(stderr_tail(""), "no error output");
        assert_eq!(stderr_tail("a\n\nb\nc\nd\n"), "b | c | d");
        let f = fixture();
        let err = rev_parse(&f.repo.top, "no-such-branch")
            .unwrap_err()
            .to_string();
        assert!(!err.contains('\n'), "{err}");
        assert!(
            err.starts_with("`git rev-parse --verify --quiet no-such-branch` failed in "),
            "{err}"
        );
    }
}
