//! Warden's storage: the [`Store`] trait and its SQLite backend, the workspace layout and
//! configuration, and safe reads and atomic writes of the files agents share with Warden.
//!
//! A write is one [`Batch`] of core [`Change`]s committed in one transaction, fenced by
//! the task versions the changes were computed from: a concurrent writer gets
//! [`StoreError::Conflict`] and nothing is written.

pub mod config;
pub mod engine;
pub mod files;
#[doc(hidden)]
pub mod fuzzing;
pub mod sqlite;
pub mod taskfile;
pub mod workspace;

use warden_core::event::Event;
use warden_core::memory::Memory;
use warden_core::model::{Task, TaskId};
use warden_core::ops::Change;

pub use config::Config;
pub use engine::{Decision, Engine, EngineError, Written};
pub use workspace::Workspace;

/// One transaction: task changes, memory rows, and an idempotency key.
#[derive(Debug, Default)]
pub struct Batch {
    /// Task changes, each fenced by its `before` version.
    pub changes: Vec<Change>,
    /// Memory rows to store (the merged result).
    pub memory: Vec<(TaskId, Memory)>,
    /// `--request-id`: the key and the response to replay for a repeated request.
    pub request: Option<(String, String)>,
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
    /// Commits a batch atomically; returns its events with their sequence numbers.
    fn commit(&self, batch: Batch) -> Result<Vec<Event>, StoreError>;
    /// A number that changes whenever any process commits (cheap change detection).
    fn data_version(&self) -> Result<u64, StoreError>;
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
}

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
        "the store {path} is damaged ({detail}); run `warden check` to see what is readable, and restore from a backup"
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
    /// Any other database error.
    #[error("storage error: {0}")]
    Db(String),
    /// A file-system error.
    #[error("{0}")]
    Io(String),
}

impl StoreError {
    /// The documented exit code (DESIGN 4): 4 conflict or busy, 5 storage.
    pub fn exit_code(&self) -> i32 {
        match self {
            StoreError::Conflict { .. } | StoreError::Busy => 4,
            StoreError::Duplicate(_) => 0,
            _ => 5,
        }
    }
}

/// Opens the store a workspace is configured for.
pub fn open(ws: &Workspace, config: &Config) -> Result<Box<dyn Store>, OpenError> {
    let url = config.store_url();
    match StoreUrl::parse(&url, &ws.root)? {
        StoreUrl::Sqlite(path) => {
            let s = sqlite::SqliteStore::open(&path, config.store.busy_timeout_ms)?;
            Ok(Box::new(s))
        }
        StoreUrl::Postgres(_) => Err(OpenError::Unsupported(
            "the PostgreSQL store is not available in this build yet; use store.url = \"sqlite:.warden/warden.db\"".into(),
        )),
    }
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
            Ok(StoreUrl::Postgres(url.to_owned()))
        } else {
            Err(OpenError::BadUrl(format!(
                "store url {:?} is not understood; use sqlite:PATH or postgres://…",
                redact_url(url)
            )))
        }
    }
}

/// Replaces a password in a URL by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://")
        && let Some((userinfo, host)) = rest.split_once('@')
        && let Some((user, _)) = userinfo.split_once(':')
    {
        return format!("{scheme}://{user}:***@{host}");
    }
    url.to_owned()
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

impl OpenError {
    /// The documented exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            OpenError::BadUrl(_) | OpenError::Unsupported(_) => 2,
            OpenError::Store(e) => e.exit_code(),
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
    }
}
