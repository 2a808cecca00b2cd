//! Warden's storage: the [`Store`] trait and its SQLite backend, the workspace layout and
//! configuration, and safe reads and atomic writes of the files agents share with Warden.
//!
//! A write is one [`Batch`] of core [`Change`]s committed in one transaction, fenced by
//! the task versions the changes were computed from: a concurrent writer gets
//! [`StoreError::Conflict`] and nothing is written.
// Stderr is written through `say!`, which a closed stderr cannot panic.
#![cfg_attr(not(test), deny(clippy::print_stderr))]

pub mod config;
pub mod engine;
#[doc(hidden)]
pub mod failpoint;
pub mod files;
#[cfg(feature = "testing")]
pub mod fuzzing;
mod memory_rows;
pub mod near;
mod planning;
pub mod postgres;
pub mod sqlite;
pub mod taskfile;
pub mod workspace;

/// `eprintln!` that cannot panic: a line for stderr that a closed stderr (`warden … 2>&1
/// | head`, a parent that went away) loses instead of ending the process with a panic's
/// exit 101, which said nothing true, and came after a commit as easily as before one.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say_line(&format!($($arg)*))
    };
}

/// See [`say!`].
pub fn say_line(s: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err
        .write_all(s.as_bytes())
        .and_then(|()| err.write_all(b"\n"));
}

use warden_core::event::Event;
use warden_core::failure::{ExitCode, Failure};
use warden_core::head::TaskHead;
use warden_core::memory::{Memory, MemoryAppend};
use warden_core::model::{Status, Task, TaskId};
use warden_core::ops::Change;

pub use config::Config;
pub use engine::{Decision, Engine, EngineError, Written, check_deadlock, check_depth};
pub use workspace::Workspace;

/// One transaction: task changes, memory rows, and an idempotency key.
#[derive(Debug, Default)]
pub struct Batch {
    /// Task changes, each fenced by its `before` version.
    pub changes: Vec<Change>,
    /// Memory merges: what each appends to the task's stored memory (creating it).
    pub memory: Vec<(TaskId, MemoryAppend)>,
    /// `--request-id`: the key and the response to replay for a repeated request.
    pub request: Option<(String, String)>,
    /// The lease the writer holds, checked inside the transaction: unless `owner` still
    /// holds the lease on `task` at `epoch`, nothing is written and the commit fails with
    /// [`StoreError::LeaseLost`]. The supervisor fences every write its steps make.
    pub fence: Option<Fence>,
}

/// A writer's claim to a task, checked by [`Store::commit`] (a fencing token).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The task.
    pub task: TaskId,
    /// The runner that took the lease.
    pub owner: String,
    /// The epoch it got.
    pub epoch: u64,
}

impl Lease {
    /// The fencing token of this lease.
    pub fn fence(&self) -> Fence {
        Fence {
            task: self.task.clone(),
            owner: self.owner.clone(),
            epoch: self.epoch,
        }
    }
}

/// A storage backend. Every method is one transaction.
pub trait Store {
    /// `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    /// One task.
    fn get(&self, id: &TaskId) -> Result<Option<Task>, StoreError>;
    /// Every task, sorted by id.
    fn list(&self) -> Result<Vec<Task>, StoreError>;
    /// The event log (of one task, or all), oldest first.
    fn events(&self, task: Option<&TaskId>) -> Result<Vec<Event>, StoreError>;
    /// A task's memory.
    fn memory(&self, id: &TaskId) -> Result<Option<Memory>, StoreError>;
    /// Every stored memory row, sorted by task id.
    fn all_memory(&self) -> Result<Vec<(TaskId, Memory)>, StoreError>;
    /// The stored response of an earlier request with this key.
    fn request(&self, key: &str) -> Result<Option<String>, StoreError>;
    /// The tasks with these ids that exist, sorted by id.
    fn get_many(&self, ids: &[TaskId]) -> Result<Vec<Task>, StoreError>;
    /// Up to `limit` tasks with ids after `after` (all when `None`), sorted by id: every
    /// task, a page at a time, for a reader that must look at each once but need not
    /// hold them all.
    fn page(&self, after: Option<&TaskId>, limit: usize) -> Result<Vec<Task>, StoreError>;
    /// The tasks stored in `status`, sorted by id (an index range, not a scan).
    fn with_status(&self, status: Status) -> Result<Vec<Task>, StoreError>;
    /// Every task that is not at rest ([`TaskHead::active`]), sorted by id: what the
    /// supervisor and `warden status` read in full.
    fn active(&self) -> Result<Vec<Task>, StoreError>;
    /// The heads of the tasks with these ids that exist, sorted by id.
    fn heads(&self, ids: &[TaskId]) -> Result<Vec<TaskHead>, StoreError>;
    /// The heads of the tasks whose `depends_on` names one of `ids`, sorted by id, from
    /// the store's index of dependencies the other way round (no scan).
    fn dependents(&self, ids: &[TaskId]) -> Result<Vec<TaskHead>, StoreError>;
    /// The head of every task, sorted by id, read from an index (no task is decoded).
    fn all_heads(&self) -> Result<Vec<TaskHead>, StoreError>;
    /// The heads of a task's children, in `(order, id)` order.
    fn children(&self, id: &TaskId) -> Result<Vec<TaskHead>, StoreError>;
    /// The ids of a task's children, in `(order, id)` order: what a view lists, read
    /// from the tree index alone.
    fn child_ids(&self, id: &TaskId) -> Result<Vec<TaskId>, StoreError>;
    /// The heads of every task below `id` (its children, theirs, …), sorted by id.
    fn descendants(&self, id: &TaskId) -> Result<Vec<TaskHead>, StoreError>;
    /// How many children each parent has in each stored `(status, passes)`, kept by
    /// the store as tasks change (`None` counts the tasks without a parent).
    fn tally(&self) -> Result<Vec<Tally>, StoreError>;
    /// The tally computed again from the task rows (for `warden check`).
    fn recount(&self) -> Result<Vec<Tally>, StoreError>;
    /// The leaves (tasks without children) counted by stored `(status, passes)`, every
    /// row's `parent` `None`: the tally's sums less the groups' own rows, counted by the
    /// store without a group read.
    fn leaf_tally(&self) -> Result<Vec<Tally>, StoreError>;
    /// Which of `ids` have children (sorted), from the tally.
    fn groups_among(&self, ids: &[TaskId]) -> Result<Vec<TaskId>, StoreError>;
    /// The events whose type is one of `types`, oldest first; with `status`, only those
    /// of tasks now in that status.
    fn events_of(&self, types: &[&str], status: Option<Status>) -> Result<Vec<Event>, StoreError>;
    /// The newest event whose type is one of `types` and that `keep` accepts, reading
    /// the log backwards from its end.
    fn last_event_where(
        &self,
        types: &[&str],
        keep: &dyn Fn(&Event) -> bool,
    ) -> Result<Option<Event>, StoreError>;
    /// The sequence number of the newest event (0 for an empty log).
    fn last_seq(&self) -> Result<u64, StoreError>;
    /// The oldest event's sequence number and time (`None` for an empty log): it names
    /// this log, so that what a reader kept from one store (STATE.md's kept rendering)
    /// is not taken for another's, and `changed_since` is asked only of the log it
    /// came from.
    fn origin(&self) -> Result<Option<String>, StoreError>;
    /// The tasks with an event after `seq` (sorted, each once) and the newest event's
    /// sequence number: what changed since a reader last looked.
    fn changed_since(&self, seq: u64) -> Result<(Vec<TaskId>, u64), StoreError>;
    /// Commits a batch atomically and durably; returns its events with their sequence
    /// numbers.
    fn commit(&self, batch: Batch) -> Result<Vec<Event>, StoreError>;
    /// Commits a batch atomically, visible to every reader at once, but possibly not yet
    /// durable: the caller must call [`Store::sync`] before it reports the write done.
    /// Releasing the task's lock between the two lets several processes' commits share
    /// one flush of the disk (group commit). A backend whose commit is always durable
    /// (PostgreSQL) just commits.
    fn commit_unsynced(&self, batch: Batch) -> Result<Vec<Event>, StoreError> {
        self.commit(batch)
    }
    /// Makes every commit this handle made with [`Store::commit_unsynced`] durable, and
    /// with it every commit any process made before them. A no-op when none is pending.
    fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// A number that changes whenever any process commits (cheap change detection).
    fn data_version(&self) -> Result<u64, StoreError>;
    /// Is the store this handle opened gone for good (its file removed or replaced)?
    /// Nothing this process does brings it back: a long-running process ends instead of
    /// trying again.
    fn gone(&self) -> bool {
        false
    }
    /// Takes (or renews) the lease on a task for `owner` until `now + ttl`. Returns the
    /// lease epoch, or `None` while another owner holds an unexpired lease. A lease taken
    /// over from another owner gets a new epoch.
    fn acquire_lease(
        &self,
        task: &TaskId,
        owner: &str,
        now: jiff::Timestamp,
        ttl: std::time::Duration,
    ) -> Result<Option<Lease>, StoreError>;
    /// Gives a lease up (only if `owner` holds it).
    fn release_lease(&self, task: &TaskId, owner: &str) -> Result<(), StoreError>;
    /// Every lease, sorted by task.
    fn leases(&self) -> Result<Vec<Lease>, StoreError>;
    /// The columns stored beside each task's body, as stored (for `warden check`).
    fn task_columns(&self) -> Result<Vec<TaskColumns>, StoreError>;
    /// Every row of the index of dependents as stored, `(task, dependency)`, sorted (for
    /// `warden check`).
    fn dependent_rows(&self) -> Result<Vec<(String, String)>, StoreError>;
    /// The `type` column of every event, by sequence number (for `warden check`).
    fn event_types(&self) -> Result<Vec<(u64, String)>, StoreError>;
    /// The lease on one task, if any (expired or not).
    fn lease(&self, task: &TaskId) -> Result<Option<Lease>, StoreError> {
        Ok(self.leases()?.into_iter().find(|l| &l.task == task))
    }
    /// Claims up to `max` of `candidates` (stored tasks, in their order; others are
    /// skipped) that no other owner holds unexpired, as [`Store::acquire_lease`] would one by one. Several runners claiming
    /// at once never get the same task; PostgreSQL skips the tasks another claimer is
    /// deciding on (`FOR UPDATE SKIP LOCKED`) instead of waiting for it.
    fn claim(
        &self,
        candidates: &[TaskId],
        owner: &str,
        now: jiff::Timestamp,
        ttl: std::time::Duration,
        max: usize,
    ) -> Result<Vec<Lease>, StoreError> {
        let mut out = Vec::new();
        for id in candidates {
            if out.len() >= max {
                break;
            }
            if self.get(id)?.is_none() {
                continue;
            }
            if let Some(l) = self.acquire_lease(id, owner, now, ttl)? {
                out.push(l);
            }
        }
        Ok(out)
    }
    /// Waits until [`Store::data_version`] differs from `seen` or `timeout` passes, and
    /// returns the current version. PostgreSQL sleeps on `LISTEN`; SQLite polls.
    fn wait_for_change(&self, seen: u64, timeout: std::time::Duration) -> Result<u64, StoreError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let v = self.data_version()?;
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if v != seen || left.is_zero() {
                return Ok(v);
            }
            std::thread::sleep(left.min(std::time::Duration::from_millis(20)));
        }
    }
}

/// One row of the tally ([`Store::tally`]): `n` children of `parent` (`None`: tasks
/// without a parent) are stored in `status` with `passes`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tally {
    /// The parent named by the children (it may not exist as a task).
    pub parent: Option<TaskId>,
    /// Their stored status.
    pub status: Status,
    /// Their stored `passes`.
    pub passes: bool,
    /// How many.
    pub n: u64,
}

/// The columns kept beside a task, as both backends write them: the parent, the order,
/// the stored `passes`, attempts and `max_attempts`, the title, the dependencies
/// (space-separated ids) and whether the task is active.
pub(crate) struct HeadColumns {
    pub(crate) parent: Option<String>,
    pub(crate) order: i64,
    pub(crate) passes: bool,
    pub(crate) attempts: i64,
    pub(crate) max_attempts: i64,
    pub(crate) title: String,
    pub(crate) deps: String,
    pub(crate) active: bool,
}

impl HeadColumns {
    pub(crate) fn of(t: &Task) -> HeadColumns {
        let h = t.head();
        HeadColumns {
            parent: h.parent.map(|p| p.as_str().to_owned()),
            order: h.order,
            passes: h.passes,
            attempts: i64::from(h.attempts),
            max_attempts: i64::from(h.max_attempts),
            title: h.title,
            deps: h
                .depends_on
                .iter()
                .map(|d| d.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            active: h.active,
        }
    }
}

/// A head read back from its columns (in the order [`HEAD_COLUMNS`] lists them).
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode_head(
    id: &str,
    parent: Option<&str>,
    order: i64,
    status: &str,
    passes: bool,
    attempts: i64,
    max_attempts: i64,
    title: String,
    deps: &str,
    active: bool,
) -> Result<TaskHead, StoreError> {
    let bad = |detail: String| StoreError::Decode {
        what: format!("the head columns of task {id}"),
        detail,
    };
    let tid = |s: &str| TaskId::new(s).map_err(|e| bad(e.to_string()));
    Ok(TaskHead {
        id: tid(id)?,
        parent: parent.map(tid).transpose()?,
        order,
        status: Status::parse(status).ok_or_else(|| bad(format!("status {status:?}")))?,
        passes,
        attempts: u32::try_from(attempts).map_err(|e| bad(e.to_string()))?,
        max_attempts: u32::try_from(max_attempts).map_err(|e| bad(e.to_string()))?,
        title,
        depends_on: deps
            .split(' ')
            .filter(|d| !d.is_empty())
            .map(tid)
            .collect::<Result<_, _>>()?,
        active,
    })
}

/// A tally row read back (`''` is no parent).
pub(crate) fn tally_row(
    parent: &str,
    status: &str,
    passes: bool,
    n: i64,
) -> Result<Tally, StoreError> {
    let bad = |detail: String| StoreError::Decode {
        what: format!("the tally of {parent:?}"),
        detail,
    };
    Ok(Tally {
        parent: match parent {
            "" => None,
            p => Some(TaskId::new(p).map_err(|e| bad(e.to_string()))?),
        },
        status: Status::parse(status).ok_or_else(|| bad(format!("status {status:?}")))?,
        passes,
        n: u64::try_from(n).map_err(|e| bad(e.to_string()))?,
    })
}

/// A task id read back from the store.
pub(crate) fn stored_id(id: &str) -> Result<TaskId, StoreError> {
    TaskId::new(id).map_err(|e| StoreError::Decode {
        what: format!("task id {id:?}"),
        detail: e.to_string(),
    })
}

/// A task decoded from its stored body.
pub fn decode_task(id: &str, body: &str) -> Result<Task, StoreError> {
    serde_json::from_str(body).map_err(|e| StoreError::Decode {
        what: format!("task {id}"),
        detail: e.to_string(),
    })
}

/// The head columns, as every head query selects them.
pub(crate) const HEAD_COLUMNS: &str =
    "id, parent, ord, status, passes, attempts, max_attempts, title, deps, active";

/// The event types that can move a task's status or create it, for readers of the log
/// that need only those (STATE.md's durations).
pub const LIFECYCLE_EVENTS: &[&str] = &["task.created", "status.changed", "auto.advanced"];

/// A runner's claim on a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The task.
    pub task: TaskId,
    /// The runner holding it.
    pub owner: String,
    /// Incremented whenever the lease changes hands.
    pub epoch: u64,
    /// When it lapses unless renewed.
    pub expires_at: jiff::Timestamp,
    /// The previous owner, when this acquisition took the lease over from another.
    pub taken_from: Option<String>,
}

/// A `tasks` row's columns, read without decoding: `warden check` compares them with the
/// body they index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskColumns {
    /// The `id` column.
    pub id: String,
    /// The `status` column.
    pub status: String,
    /// The `version` column.
    pub version: i64,
    /// The body (the task as JSON).
    pub body: String,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The task changed since it was read (or already exists): safe to retry.
    #[error(
        "conflict: task {task} changed while this request was being decided (expected version {expected}, found {found}); run the command again"
    )]
    Conflict {
        /// The task.
        task: String,
        /// The version the change was computed from (0 = absent).
        expected: u64,
        /// The stored version (0 = absent).
        found: u64,
    },
    /// The request id was already used: its stored response.
    #[error("request already applied")]
    Duplicate(String),
    /// Another process held the write lock for longer than `busy_timeout`.
    #[error("the store is busy: another process held it longer than the busy timeout; try again")]
    Busy,
    /// The database file is damaged or not a database.
    #[error(
        "the store {path} is damaged ({detail}) and Warden cannot open it; restore it from a backup, or rebuild what is readable with the sqlite3 program (`sqlite3 {path} .recover | sqlite3 {path}.recovered`, then move that file in its place)"
    )]
    Corrupt {
        /// The database path.
        path: String,
        /// SQLite's message.
        detail: String,
    },
    /// The database was written by a newer Warden.
    #[error(
        "the store has schema version {found}, newer than this Warden understands ({known}); upgrade warden"
    )]
    TooNew {
        /// Stored schema version.
        found: i64,
        /// Newest known.
        known: i64,
    },
    /// A stored row does not decode.
    #[error(
        "stored row {what} does not decode: {detail}; the store is damaged, run `warden check`"
    )]
    Decode {
        /// Which row.
        what: String,
        /// Why.
        detail: String,
    },
    /// The writer's lease on the task was taken over (or released): nothing was written.
    #[error(
        "lease lost: {owner} no longer holds the lease on task {task} (epoch {epoch}); another runner took it over, so this write was dropped"
    )]
    LeaseLost {
        /// The task.
        task: String,
        /// The runner that wrote.
        owner: String,
        /// The epoch it held.
        epoch: u64,
    },
    /// Any other database error.
    #[error("storage error: {0}")]
    Db(String),
    /// A file-system error.
    #[error("{0}")]
    Io(String),
}

impl StoreError {
    /// The documented exit code (DESIGN 4): 4 conflict or busy, 5 storage.
    pub fn code(&self) -> ExitCode {
        match self {
            StoreError::Conflict { .. } | StoreError::Busy | StoreError::LeaseLost { .. } => {
                ExitCode::Conflict
            }
            StoreError::Duplicate(_) => ExitCode::Ok,
            _ => ExitCode::Internal,
        }
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        Failure::new(e.code(), e.to_string())
    }
}

/// A schema migration of either backend.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Migration {
    /// SQL run as it is.
    Sql(&'static str),
    /// The task rows rebuilt from the event log, for a change of the fold
    /// (`warden_core::event::apply`): rows are a materialised view of the log, and
    /// `warden check` must keep finding them equal to it.
    Refold,
    /// The head columns ([`HeadColumns`]) written for every task from its stored body.
    Heads,
}

impl Migration {
    /// The SQL of an SQL migration (tests build old schemas from it).
    #[cfg(test)]
    pub(crate) fn sql(&self) -> &'static str {
        match self {
            Migration::Sql(s) => s,
            Migration::Refold | Migration::Heads => "",
        }
    }
}

/// The tasks a log folds into, for a refold migration; a log that does not fold (a
/// damaged store) leaves the rows as they are, for `warden check` to report.
pub(crate) fn refolded(events: &[Event]) -> Vec<Task> {
    match warden_core::event::replay(events) {
        Ok(tasks) => tasks.into_values().collect(),
        Err(_) => Vec::new(),
    }
}

/// Opens the store a workspace is configured for.
pub fn open(ws: &Workspace, config: &Config) -> Result<Box<dyn Store>, OpenError> {
    let url = config.store_url();
    match StoreUrl::parse(&url, &ws.root)? {
        StoreUrl::Sqlite(path) => {
            // A database file that is gone while the workspace has task folders was lost
            // (deleted, or left out of a restore): opening it would start an empty store
            // and answer as if the project had no tasks.
            // A `plan import` writes no task folder, but every placement of a task leaves
            // the tree's lock file (`Engine::lock_tree`): an imported plan's lost store
            // was started again empty, and answered "no tasks".
            let tree_lock = ws.dir.join("tree.lock");
            if !path.exists() && (has_task_folders(ws) || tree_lock.exists()) {
                return Err(StoreError::Io(format!(
                    "the store {} is missing, but tasks were stored in this workspace ({} holds task folders, or {} was left by a placement): restore the database file (Warden does not start an empty store over existing tasks), or remove {} and run `warden init` to start again",
                    ws.display(&path),
                    ws.display(&ws.dir.join("tasks")),
                    ws.display(&tree_lock),
                    ws.display(&ws.dir)
                ))
                .into());
            }
            let s = sqlite::SqliteStore::open(&path, config.store.busy_timeout_ms)?;
            Ok(Box::new(s))
        }
        StoreUrl::Postgres(url) => {
            let s = postgres::PgStore::open(&url, config.store.busy_timeout_ms)?;
            Ok(Box::new(s))
        }
    }
}

/// Whether `.warden/tasks/` has a folder in it (a task Warden has written).
fn has_task_folders(ws: &Workspace) -> bool {
    std::fs::read_dir(ws.dir.join("tasks"))
        .is_ok_and(|mut d| d.any(|e| e.is_ok_and(|e| e.file_type().is_ok_and(|t| t.is_dir()))))
}

/// A parsed `store.url`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// `sqlite:PATH` (relative to the project root).
    Sqlite(std::path::PathBuf),
    /// `postgres://…` or `postgresql://…`.
    Postgres(String),
}

impl StoreUrl {
    /// Parses a store URL; relative SQLite paths are taken from `root`.
    pub fn parse(url: &str, root: &std::path::Path) -> Result<StoreUrl, OpenError> {
        if let Some(p) = url.strip_prefix("sqlite:") {
            let p = p.strip_prefix("//").unwrap_or(p);
            if p.is_empty() {
                return Err(OpenError::BadUrl(format!(
                    "store url {url:?} has no path; use sqlite:.warden/warden.db"
                )));
            }
            let path = std::path::Path::new(p);
            Ok(StoreUrl::Sqlite(if path.is_absolute() {
                path.to_path_buf()
            } else {
                root.join(path)
            }))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            postgres::parse_url(url).map_err(OpenError::BadUrl)?;
            Ok(StoreUrl::Postgres(url.to_owned()))
        } else {
            Err(OpenError::BadUrl(format!(
                "store url {:?} is not understood; use sqlite:PATH or postgres://…",
                redact_url(url)
            )))
        }
    }
}

/// Replaces every password in a store URL by `***`, for anything shown or stored: the
/// user-info password (`postgres://user:PW@host/db`) and a `password=` query parameter
/// (`postgres://user@host/db?password=PW`).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (main, query) = match rest.split_once('?') {
        Some((m, q)) => (m, Some(q)),
        None => (rest, None),
    };
    // The user info ends at the last `@` of the authority (a password may hold `@` or `/`
    // when a person forgot to percent-encode it, so look for the last `@` before `?`).
    let main = match main.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => main.to_owned(),
    };
    let query = query.map(|q| {
        q.split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("&")
    });
    match query {
        Some(q) => format!("{scheme}://{main}?{q}"),
        None => format!("{scheme}://{main}"),
    }
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The URL is malformed (exit 2).
    #[error("{0}")]
    BadUrl(String),
    /// The backend is not available (exit 2).
    #[error("{0}")]
    Unsupported(String),
    /// The store failed to open (exit 4/5).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<OpenError> for Failure {
    fn from(e: OpenError) -> Failure {
        match e {
            OpenError::BadUrl(m) | OpenError::Unsupported(m) => Failure::usage(m),
            OpenError::Store(e) => e.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let root = std::path::Path::new("/proj");
        assert_eq!(
            StoreUrl::parse("sqlite:.warden/warden.db", root).unwrap(),
            StoreUrl::Sqlite("/proj/.warden/warden.db".into())
        );
        assert_eq!(
            StoreUrl::parse("sqlite:/tmp/x.db", root).unwrap(),
            StoreUrl::Sqlite("/tmp/x.db".into())
        );
        assert!(matches!(
            StoreUrl::parse("postgresql://u:p@h/db", root).unwrap(),
            StoreUrl::Postgres(_)
        ));
        let e = StoreUrl::parse("mysql://u:secret@h/db", root).unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
        assert_eq!(redact_url("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact_url("postgres://h/db"), "postgres://h/db");
        let check = |url: &str, shown: &str| assert_eq!(redact_url(url), shown, "{url}");
        check(
            "postgresql://u@/db?host=/run/pg",
            "postgresql://u@/db?host=/run/pg",
        );
        check(
            "postgresql://u:p%40ss@h:5432/db?sslmode=disable",
            "postgresql://u:***@h:5432/db?sslmode=disable",
        );
        check("postgres://u:a@b/c@h/db", "postgres://u:***@h/db");
        check(
            "postgres://u@h/db?host=/s&password=hunter2&x=1",
            "postgres://u@h/db?host=/s&password=***&x=1",
        );
        check(
            "postgres://u:pw@h/db?PASSWORD=pw2",
            "postgres://u:***@h/db?PASSWORD=***",
        );
        check("sqlite:.warden/warden.db", "sqlite:.warden/warden.db");
    }
}
