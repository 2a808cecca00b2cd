//! The workspace: a `.warden/` directory at a project root, found like `.git` by
//! walking up from the current directory (`--dir` or `WARDEN_DIR` override).
//!
//! Paths of every file Warden keeps are computed here, from validated ids only.

use std::path::{Path, PathBuf};

use warden_core::model::TaskId;

use crate::config::{Config, DEFAULT_TOML};
use crate::files;

/// The name of the workspace directory.
pub const DIR_NAME: &str = ".warden";

/// A located workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workspace {
    /// The project root (the directory that holds `.warden/`).
    pub root: PathBuf,
    /// `root/.warden`.
    pub dir: PathBuf,
}

/// Why a workspace could not be found or created.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// No `.warden/` here or above (exit 2).
    #[error(
        "no Warden workspace in {0} or any parent directory; run `warden init` in your project root first"
    )]
    NotFound(String),
    /// `--dir`/`WARDEN_DIR` names a directory without `.warden/` (exit 2).
    #[error("{0} has no .warden directory; run `warden init --dir {0}` first")]
    NotAWorkspace(String),
    /// `init` where a workspace exists (exit 1).
    #[error("{0} already exists; Warden will not overwrite it (remove it first to start over)")]
    Exists(String),
    /// The project path is not UTF-8 (exit 2).
    #[error(
        "the project path {0} is not valid UTF-8; Warden (like git worktrees, tmux and the agents it runs) needs a UTF-8 path: rename the directory"
    )]
    NotUtf8(String),
    /// A file-system error (exit 5).
    #[error("{0}")]
    Io(String),
}

impl From<WorkspaceError> for warden_core::failure::Failure {
    fn from(e: WorkspaceError) -> Self {
        use warden_core::failure::{ExitCode, Failure};
        let code = match e {
            WorkspaceError::NotFound(_)
            | WorkspaceError::NotAWorkspace(_)
            | WorkspaceError::NotUtf8(_) => ExitCode::Usage,
            WorkspaceError::Exists(_) => ExitCode::Refused,
            WorkspaceError::Io(_) => ExitCode::Internal,
        };
        // Exit 1 is a refusal, said as one (`refused: …`, `"refused": true`).
        if code == ExitCode::Refused {
            return Failure::refusal(code, e.to_string());
        }
        Failure::new(code, e.to_string())
    }
}

impl Workspace {
    fn at(root: &Path) -> Workspace {
        Workspace {
            root: root.to_path_buf(),
            dir: root.join(DIR_NAME),
        }
    }

    /// Finds the workspace: `explicit` (from `--dir` or `WARDEN_DIR`) names the project
    /// root; otherwise walk up from `start`.
    pub fn find(start: &Path, explicit: Option<&Path>) -> Result<Workspace, WorkspaceError> {
        if let Some(root) = explicit {
            let root = absolute(root);
            if root.join(DIR_NAME).is_dir() {
                utf8(&root)?;
                return Ok(Workspace::at(&root));
            }
            return Err(WorkspaceError::NotAWorkspace(root.display().to_string()));
        }
        let start = absolute(start);
        let mut cur = Some(start.as_path());
        while let Some(d) = cur {
            // Any file there marks the workspace (its configuration says what is wrong
            // with it, rather than "no workspace … run `warden init`", which refuses).
            if std::fs::symlink_metadata(d.join(DIR_NAME).join("warden.toml")).is_ok() {
                utf8(d)?;
                return Ok(Workspace::at(d));
            }
            cur = d.parent();
        }
        Err(WorkspaceError::NotFound(start.display().to_string()))
    }

    /// Creates `.warden/` with the default configuration under `root`; refuses to
    /// overwrite. In a git repository, `/.warden/` is added to `info/exclude`.
    pub fn init(root: &Path, store_url: Option<&str>) -> Result<Workspace, WorkspaceError> {
        let root = absolute(root);
        utf8(&root)?;
        let ws = Workspace::at(&root);
        let io = |e: std::io::Error, what: &Path| {
            WorkspaceError::Io(format!("cannot create {}: {e}", what.display()))
        };
        if ws.dir.exists() {
            // An earlier Warden killed inside `init` could leave `.warden/` with only an
            // empty `tasks/`: nothing of anyone's, so it is replaced.
            if !leftover_of_init(&ws.dir) {
                return Err(WorkspaceError::Exists(ws.dir.display().to_string()));
            }
            std::fs::remove_dir_all(&ws.dir).map_err(|e| io(e, &ws.dir))?;
        }
        std::fs::create_dir_all(&root).map_err(|e| io(e, &root))?;
        remove_dead_staging(&root);
        // Everything is made in a staging folder and renamed into place in one step, so
        // an `init` killed at any point leaves either no `.warden/` or a whole one.
        let staging = root.join(format!("{DIR_NAME}.init-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        let made = (|| {
            std::fs::create_dir(&staging).map_err(|e| io(e, &staging))?;
            std::fs::create_dir(staging.join("tasks")).map_err(|e| io(e, &staging))?;
            let mut toml = DEFAULT_TOML.to_owned();
            if let Some(url) = store_url {
                toml = toml.replace(
                    "url = \"sqlite:.warden/warden.db\"",
                    &format!("url = {}", toml_string(url)),
                );
            }
            let cfg = staging.join("warden.toml");
            files::write_atomic(&cfg, toml.as_bytes())
                .map_err(|e| WorkspaceError::Io(e.to_string()))?;
            if store_url.is_some_and(|u| crate::redact_url(u) != u) {
                // The URL holds a password: only the owner may read the file.
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| io(e, &cfg))?;
            }
            // rename(2) refuses to replace a non-empty directory: a `.warden/` made by
            // another `init` meanwhile is never overwritten.
            std::fs::rename(&staging, &ws.dir).map_err(|e| match e.kind() {
                std::io::ErrorKind::DirectoryNotEmpty | std::io::ErrorKind::AlreadyExists => {
                    WorkspaceError::Exists(ws.dir.display().to_string())
                }
                _ => io(e, &ws.dir),
            })?;
            let _ = files::sync_dir(&root);
            Ok(())
        })();
        if let Err(e) = made {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
        if let Some((exclude, top)) = git_exclude_file(&root) {
            add_exclude(&exclude, &top, &root).map_err(|e| io(e, &exclude))?;
        }
        Ok(ws)
    }

    /// `.warden/warden.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("warden.toml")
    }

    /// Loads the configuration.
    pub fn config(&self) -> Result<Config, crate::config::ConfigError> {
        let path = self.config_path();
        let shown = self.display(&path);
        // Never opened unless a regular file: reading a FIFO put there waited for ever.
        if let Ok(meta) = std::fs::metadata(&path)
            && !meta.is_file()
        {
            return Err(crate::config::ConfigError {
                path: shown,
                message: "is not a regular file (a directory, FIFO or device is there) but must hold the configuration".into(),
            });
        }
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            // A link to nothing is not an absent file: its defaults would be taken
            // silently for the configuration it was meant to point at.
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && std::fs::symlink_metadata(&path).is_err() =>
            {
                String::new()
            }
            Err(e) => {
                return Err(crate::config::ConfigError {
                    path: shown,
                    message: format!("cannot be read ({e})"),
                });
            }
        };
        Config::parse(&text, &shown)
    }

    /// `.warden/tasks/<id>/`.
    pub fn task_dir(&self, id: &TaskId) -> PathBuf {
        self.dir.join("tasks").join(id.as_str())
    }

    /// `.warden/tasks/<id>/TASK.md`.
    pub fn task_file(&self, id: &TaskId) -> PathBuf {
        self.task_dir(id).join("TASK.md")
    }

    /// `.warden/tasks/<id>/check.pid`: the check running for the task, while it runs
    /// ("HOLDER GROUP START": the process that runs it, its process group, and the
    /// group leader's start time).
    pub fn check_note(&self, id: &TaskId) -> PathBuf {
        self.task_dir(id).join("check.pid")
    }

    /// `.warden/tasks/<id>/merge-ri`: the commit a `merge-ri` put into the base branch
    /// and the task version it was decided on ("COMMIT VERSION BASE"), so that a
    /// transition whose commit then failed is not contradicted by a reject or cancel.
    pub fn merge_note(&self, id: &TaskId) -> PathBuf {
        self.task_dir(id).join("merge-ri")
    }

    /// `.warden/tasks/<id>/output.log`.
    pub fn output_log(&self, id: &TaskId) -> PathBuf {
        self.task_dir(id).join("output.log")
    }

    /// `.warden/worktrees/<id>/`.
    pub fn worktree(&self, id: &TaskId) -> PathBuf {
        self.dir.join("worktrees").join(id.as_str())
    }

    /// The project root's place inside task `id`'s worktree, where its work runs, its
    /// TASK.md is linked and its evidence files are read: the worktree itself when the
    /// project is its repository's top, `<worktree>/<sub/dir>` when `warden init` ran in
    /// a subdirectory (a package of a monorepo). Git works on the whole worktree.
    pub fn worktree_project(&self, id: &TaskId) -> PathBuf {
        let wt = self.worktree(id);
        match self.repo_prefix() {
            Some(sub) if !sub.as_os_str().is_empty() => wt.join(sub),
            _ => wt,
        }
    }

    /// The project root relative to the top of the git working tree it is in (empty at
    /// the top; `None` outside git). Read from the file system, no git process.
    pub fn repo_prefix(&self) -> Option<PathBuf> {
        let (_, top) = git_exclude_file(&self.root)?;
        self.root.strip_prefix(&top).ok().map(Path::to_path_buf)
    }

    /// `.warden/STATE.md`.
    pub fn state_md(&self) -> PathBuf {
        self.dir.join("STATE.md")
    }

    /// `.warden/cache/state-md`: STATE.md's kept rendering (a cache; deleting it costs
    /// one render from every task).
    pub fn state_cache(&self) -> PathBuf {
        self.dir.join("cache").join("state-md")
    }

    /// `.warden/cache/state-md.text`: the last STATE.md rendered from the kept rendering,
    /// with the event it reflects (a cache, as `state_cache`).
    pub fn state_text_cache(&self) -> PathBuf {
        self.dir.join("cache").join("state-md.text")
    }

    /// `.warden/continue.md`.
    pub fn continue_md(&self) -> PathBuf {
        self.dir.join("continue.md")
    }

    /// `.warden/prompts/<name>.md`.
    pub fn prompt_override(&self, name: &str) -> PathBuf {
        self.dir.join("prompts").join(format!("{name}.md"))
    }

    /// A path relative to the project root, for messages.
    pub fn display(&self, p: &Path) -> String {
        p.strip_prefix(&self.root)
            .unwrap_or(p)
            .display()
            .to_string()
    }
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The `info/exclude` file of the repository containing `root`, and the top of its
/// working tree, if any. Reads `.git` directly (a directory, or a `gitdir:` file in a
/// linked worktree) — no git process.
pub fn git_exclude_file(root: &Path) -> Option<(PathBuf, PathBuf)> {
    let mut cur = Some(root);
    while let Some(d) = cur {
        let dotgit = d.join(".git");
        if dotgit.is_dir() {
            return Some((dotgit.join("info").join("exclude"), d.to_path_buf()));
        }
        if dotgit.is_file() {
            let text = std::fs::read_to_string(&dotgit).ok()?;
            let gitdir = text.trim().strip_prefix("gitdir:")?.trim();
            let gitdir = d.join(gitdir);
            let common = std::fs::read_to_string(gitdir.join("commondir"))
                .map(|c| gitdir.join(c.trim()))
                .unwrap_or(gitdir);
            return Some((common.join("info").join("exclude"), d.to_path_buf()));
        }
        cur = d.parent();
    }
    None
}

fn add_exclude(exclude: &Path, top: &Path, root: &Path) -> std::io::Result<()> {
    // The pattern is anchored at the working tree's top: `/.warden/` for a workspace at
    // the top, `/sub/dir/.warden/` for one deeper down.
    let rel = root
        .strip_prefix(top)
        .map(|r| r.display().to_string())
        .unwrap_or_default();
    let pattern = if rel.is_empty() {
        "/.warden/".to_owned()
    } else {
        format!("/{rel}/.warden/")
    };
    let existing = std::fs::read_to_string(exclude).unwrap_or_default();
    if existing.lines().any(|l| l.trim() == pattern) {
        return Ok(());
    }
    if let Some(dir) = exclude.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut text = existing;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&pattern);
    text.push('\n');
    files::write_atomic(exclude, text.as_bytes()).map_err(|e| std::io::Error::other(e.to_string()))
}

/// Is `dir` what an interrupted `init` of an earlier Warden left: nothing but an empty
/// `tasks/`?
fn leftover_of_init(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let names: Vec<_> = entries.flatten().map(|e| e.file_name()).collect();
    names.iter().all(|n| n == "tasks")
        && std::fs::read_dir(dir.join("tasks")).map_or(true, |mut t| t.next().is_none())
}

/// Removes staging folders of `init`s that were killed (their process is gone).
fn remove_dead_staging(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let prefix = format!("{DIR_NAME}.init-");
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Refuses a project path that is not UTF-8: the session specs, git's worktree paths,
/// tmux and the agents' environment all carry it as text.
fn utf8(root: &Path) -> Result<(), WorkspaceError> {
    match root.to_str() {
        Some(_) => Ok(()),
        None => Err(WorkspaceError::NotUtf8(format!(
            "{:?}",
            root.display().to_string()
        ))),
    }
}
