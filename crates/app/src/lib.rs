//! Warden's application layer: every operation a person or an agent can ask for, once,
//! taking typed requests and returning typed results ([`view`]), with every failure a
//! [`Failure`] carrying its documented exit code. The CLI, the MCP server, the terminal
//! dashboard and the supervisor are adapters over it: they parse input and format output,
//! and nothing else decides anything.
//!
//! Writes go through the engine's two write paths (`Engine::write_task` for one task,
//! `Engine::write_batch` for many), which hold the per-task locks and retry conflicts;
//! rules come from `warden-core`; processes (checks, git, sessions) from `warden-runner`.
// Stderr is written through `warden_store::say!`, which a closed stderr cannot panic.
#![cfg_attr(not(test), deny(clippy::print_stderr))]

pub mod agent;
pub mod edit;
pub mod gsd_read;
pub mod hooks;
pub mod input;
pub mod memory;
mod nearby;
pub mod person;
pub mod plan;
pub mod query;
pub mod scope;
pub mod status;
pub mod supervisor;
pub mod task;
pub mod view;

use std::path::Path;

use warden_core::event::Actor;
use warden_core::failure::Failure;
use warden_core::model::{Task, TaskId};
use warden_core::ops::Ctx;
use warden_core::tree::TreeIndex;
use warden_store::{Engine, Workspace};

pub use warden_core::failure::ExitCode;
pub use warden_store::Engine as StoreEngine;

use crate::view::{Children, TaskView};

/// What every operation returns.
pub type Result<T, E = Failure> = std::result::Result<T, E>;

/// An open workspace and who acts in it.
#[derive(Debug)]
pub struct App {
    /// The engine: configuration, store and the write paths.
    pub eng: Engine,
}

impl App {
    /// Opens a located workspace for `actor`.
    pub fn open(ws: Workspace, actor: Actor) -> Result<App> {
        Ok(App {
            eng: Engine::open(ws, actor)?,
        })
    }

    /// Finds the workspace (`explicit` names the project root, else walk up from the
    /// current directory) and opens it.
    pub fn find(explicit: Option<&Path>, actor: Actor) -> Result<App> {
        App::open(find_workspace(explicit)?, actor)
    }

    /// The workspace.
    pub fn ws(&self) -> &Workspace {
        &self.eng.ws
    }

    /// One task, or not found (exit 3).
    pub fn get(&self, id: &TaskId) -> Result<Task> {
        Ok(self.eng.get(id)?)
    }

    /// Every task, sorted by id.
    pub fn tasks(&self) -> Result<Vec<Task>> {
        Ok(self.eng.tasks()?)
    }

    /// The view of one task (exit 3 when it does not exist).
    pub fn task(&self, id: &TaskId) -> Result<TaskView> {
        let t = self.get(id)?;
        self.view(&t)
    }

    /// Every task (or those in one status), in tree order: depth-first, siblings by
    /// `(order, id)`, as the plan reads. One status reads only the tasks stored in it and
    /// the groups whose derived status it is (from the store's tally), not every task,
    /// and the groups' children only when they are [`Children::Listed`]. (The whole
    /// tree has every child at hand and always lists them.)
    pub fn list(
        &self,
        status: Option<warden_core::model::Status>,
        children: Children,
    ) -> Result<Vec<TaskView>> {
        let Some(status) = status else {
            return self.list_where(|_, _| true);
        };
        let groups = self.groups()?;
        let mut tasks: Vec<Task> = self
            .eng
            .store
            .with_status(status)?
            .into_iter()
            .filter(|t| !groups.has(t.id()))
            .collect();
        let shown: Vec<TaskId> = groups
            .derived
            .iter()
            .filter(|(_, d)| d.0 == status)
            .map(|(id, _)| id.clone())
            .collect();
        tasks.extend(self.eng.store.get_many(&shown)?);
        let tasks = self.in_tree_order(tasks)?;
        self.views_of(&tasks, &groups, children)
    }

    /// The tasks that wait for a person (a review, a question, stuck, a dead session, a
    /// cancelled dependency), in tree order. Only tasks that are not at rest can, but
    /// for the last, so only those are read, and the dependents of cancelled tasks.
    pub fn list_needs_you(&self, children: Children) -> Result<Vec<TaskView>> {
        let groups = self.groups()?;
        let mut tasks: Vec<Task> = self
            .eng
            .store
            .active()?
            .into_iter()
            .filter(|t| !groups.has(t.id()) && self.needs_you(t).is_some())
            .collect();
        // And those blocked for ever by a cancelled dependency (at rest, so not above).
        let blocked: Vec<TaskId> = self
            .blocked_for_ever()?
            .into_iter()
            .map(|n| n.id)
            .filter(|id| tasks.iter().all(|t| t.id() != id))
            .collect();
        tasks.extend(self.eng.store.get_many(&blocked)?);
        let tasks = self.in_tree_order(tasks)?;
        self.views_of(&tasks, &groups, children)
    }

    fn list_where(&self, keep: impl Fn(&Task, &TreeIndex<'_>) -> bool) -> Result<Vec<TaskView>> {
        let all = self.tasks()?;
        let idx = TreeIndex::new(&all);
        Ok(idx
            .depth_first()
            .into_iter()
            .filter(|t| keep(t, &idx))
            .map(|t| TaskView::of(t, &idx))
            .collect())
    }

    /// The view of a task as it is given (e.g. the task after a write), its children
    /// and dependencies read from the store (never every task).
    pub fn view(&self, t: &Task) -> Result<TaskView> {
        // Groups' statuses are derived from the whole tally; a leaf whose dependencies
        // are leaves (what most writes answer with) needs none of them.
        let mut group_near = !self.eng.store.child_ids(t.id())?.is_empty();
        for d in &t.spec.depends_on {
            if group_near {
                break;
            }
            group_near = !self.eng.store.child_ids(d)?.is_empty();
        }
        // An ancestor's dependencies hold the task back too; they are read from the
        // groups' heads, so an ancestor with any makes the groups needed.
        let mut up = t.spec.parent.clone();
        for _ in 0..=warden_core::tree::MAX_DEPTH {
            let Some(p) = up.take().filter(|_| !group_near) else {
                break;
            };
            if let Some(h) = self.eng.store.heads(std::slice::from_ref(&p))?.pop() {
                group_near = !h.depends_on.is_empty();
                up = h.parent.filter(|q| *q != h.id);
            }
        }
        let groups = if group_near {
            self.groups()?
        } else {
            nearby::Groups::default()
        };
        let mut views = self.views_of(std::slice::from_ref(t), &groups, Children::Listed)?;
        views
            .pop()
            .ok_or_else(|| Failure::internal("a task without a view; this is a Warden bug"))
    }

    /// TASK.md of a task as messages show it (relative to the project root).
    pub fn task_file_shown(&self, id: &TaskId) -> String {
        self.eng.task_file_shown(id)
    }

    /// The context of a core operation on `task_file`.
    pub(crate) fn ctx<'a>(&self, task_file: &'a str) -> Ctx<'a> {
        self.eng.ctx(task_file)
    }
}

/// Finds the workspace from `explicit` (`--dir`, `WARDEN_DIR`) or the current directory.
pub fn find_workspace(explicit: Option<&Path>) -> Result<Workspace> {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::internal(format!("cannot read the current directory: {e}")))?;
    Ok(Workspace::find(&cwd, explicit)?)
}

/// The actor of this process: an agent inside a session (`WARDEN_ROLE` set), else a
/// person.
pub fn actor_from_env() -> Actor {
    if std::env::var(warden_runner::session::ACTOR_VAR).is_ok_and(|a| a == "runner") {
        // A session host or a tmux hook reporting a session's end for Warden.
        Actor::Runner
    } else if std::env::var_os("WARDEN_ROLE").is_some_and(|r| !r.is_empty()) {
        Actor::Agent
    } else {
        Actor::Person
    }
}

/// Parses a task id (a bad id is a usage error, exit 2).
pub fn task_id(s: &str) -> Result<TaskId> {
    Ok(TaskId::new(s)?)
}

/// Parses a status (an unknown one is a usage error, exit 2).
pub fn status(s: &str) -> Result<warden_core::model::Status> {
    s.parse().map_err(Failure::usage)
}

/// What `warden init` reports.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Initialised {
    /// The project root.
    pub root: String,
    /// `.warden/`.
    pub dir: String,
    /// The store URL, password hidden.
    pub store: String,
}

/// `warden init`: creates `.warden/` in `root` (refuses to overwrite) and the store.
pub fn init(root: &Path, store: Option<&str>) -> Result<Initialised> {
    if let Some(url) = store
        && let warden_store::StoreUrl::Sqlite(path) = warden_store::StoreUrl::parse(url, root)?
    {
        // A file that is there already must be a SQLite database (another workspace's
        // store, say): anything else would be reported as a damaged store.
        let mut head = [0u8; 16];
        let read = std::fs::File::open(&path)
            .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
            .unwrap_or(0);
        if read > 0 && head[..read] != b"SQLite format 3\0"[..read] {
            return Err(Failure::usage(format!(
                "{} is not a SQLite database; give --store a new file, or the store of a Warden workspace",
                path.display()
            )));
        }
    }
    let ws = Workspace::init(root, store)?;
    let made = ws.dir.clone();
    // Open the store once so the database and its schema exist from the start. A store
    // that cannot be opened (a file that is not a database, a server that refuses)
    // leaves no workspace behind pointing at it: `.warden/` was made just now, by this
    // call (`Workspace::init` refuses one that exists), and goes again.
    let app = match App::open(ws, Actor::Person) {
        Ok(app) => app,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&made);
            return Err(e);
        }
    };
    Ok(Initialised {
        root: app.ws().root.display().to_string(),
        dir: app.ws().dir.display().to_string(),
        store: warden_store::redact_url(&app.eng.config.store_url()),
    })
}
