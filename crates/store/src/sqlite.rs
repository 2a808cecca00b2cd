//! The embedded SQLite store: WAL, `synchronous=FULL`, `busy_timeout`, and
//! `BEGIN IMMEDIATE` for every write, so many processes share one file safely.
//!
//! Task rows hold the task as JSON plus indexed columns; events are append-only.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use warden_core::event::{Event, EventKind};
use warden_core::memory::Memory;
use warden_core::model::{Task, TaskId};

use crate::{Batch, Lease, Store, StoreError, failpoint};

/// WAL size above which closing a connection checkpoints the WAL and truncates it.
const WAL_TRUNCATE_BYTES: u64 = 256 << 10;

/// Schema migrations, applied in order; `PRAGMA user_version` is the number applied.
const MIGRATIONS: &[&str] = &[
    // 1: tasks, events, memory, idempotency keys, leases.
    "CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        version INTEGER NOT NULL,
        body TEXT NOT NULL
    ) STRICT;
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        task TEXT NOT NULL,
        version INTEGER NOT NULL,
        actor TEXT NOT NULL,
        type TEXT NOT NULL,
        body TEXT NOT NULL
    ) STRICT;
    CREATE INDEX events_by_task ON events (task, seq);
    CREATE TABLE memory (
        task TEXT PRIMARY KEY,
        body TEXT NOT NULL
    ) STRICT;
    CREATE TABLE requests (
        key TEXT PRIMARY KEY,
        at TEXT NOT NULL,
        response TEXT NOT NULL
    ) STRICT;
    CREATE TABLE leases (
        task TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        expires_at TEXT NOT NULL
    ) STRICT;",
    // 2: events without AUTOINCREMENT. Events are never deleted, so `seq` = the largest
    // rowid + 1 is just as monotonic, and a commit no longer rewrites the
    // `sqlite_sequence` page: one WAL page (about 4 KiB to fsync) less per write.
    "CREATE TABLE events_v2 (
        seq INTEGER PRIMARY KEY,
        at TEXT NOT NULL,
        task TEXT NOT NULL,
        version INTEGER NOT NULL,
        actor TEXT NOT NULL,
        type TEXT NOT NULL,
        body TEXT NOT NULL
    ) STRICT;
    INSERT INTO events_v2 (seq, at, task, version, actor, type, body)
        SELECT seq, at, task, version, actor, type, body FROM events ORDER BY seq;
    DROP TABLE events;
    ALTER TABLE events_v2 RENAME TO events;
    CREATE INDEX events_by_task ON events (task, seq);
    DELETE FROM sqlite_sequence WHERE name = 'events';",
];

/// A SQLite-backed [`Store`].
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
}

/// The WAL file of the database at `path`.
fn wal_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-wal");
    PathBuf::from(p)
}

/// Keeps the WAL short across short processes. The first connection of a process
/// rebuilds SQLite's WAL index by reading and checksumming the whole WAL, and forgets
/// what earlier checkpoints copied, so the WAL is never restarted and grows for ever:
/// after a few hundred CLI calls that read was most of the cost of a `warden task
/// update`. So a connection that leaves more than [`WAL_TRUNCATE_BYTES`] behind
/// checkpoints it into the database and truncates it (without waiting: if another
/// connection is busy, a later close does it).
impl Drop for SqliteStore {
    fn drop(&mut self) {
        if std::fs::metadata(wal_path(&self.path)).is_ok_and(|m| m.len() > WAL_TRUNCATE_BYTES) {
            let _ = self.conn.busy_timeout(Duration::ZERO);
            let _ = self
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
    }
}

impl SqliteStore {
    /// Opens (creating and migrating if needed) the database at `path`.
    pub fn open(path: &Path, busy_timeout_ms: u64) -> Result<SqliteStore, StoreError> {
        let created = !path.exists() || !wal_path(path).exists();
        let conn = Connection::open(path).map_err(|e| map_err(e, path))?;
        let store = SqliteStore {
            conn,
            path: path.to_path_buf(),
        };
        store
            .conn
            .busy_timeout(Duration::from_millis(busy_timeout_ms))
            .map_err(|e| store.err(e))?;
        // WAL lets readers run beside the one writer; FULL syncs the WAL on every commit
        // so a committed transition survives power loss.
        store
            .conn
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| store.err(e))?;
        store
            .conn
            .pragma_update(None, "synchronous", "FULL")
            .map_err(|e| store.err(e))?;
        // A small page cache per connection: the supervisor opens one per task step, and
        // a workspace's hot rows are few.
        store
            .conn
            .pragma_update(None, "cache_size", -512)
            .map_err(|e| store.err(e))?;
        // Closing the last connection would checkpoint the WAL into the database and
        // delete it (two more fsyncs, and a directory fsync to create it again on the
        // next open). Every CLI call is a short process, so leave the WAL in place; see
        // `Drop` for how it is kept short.
        store
            .conn
            .set_db_config(
                rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
                true,
            )
            .map_err(|e| store.err(e))?;
        store.migrate()?;
        // SQLite is built without its per-connection directory sync (see
        // `.cargo/config.toml`): make the new files' directory entries durable once.
        if created {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            crate::files::sync_dir(dir.unwrap_or(Path::new(".")))
                .map_err(|e| StoreError::Io(e.to_string()))?;
        }
        Ok(store)
    }

    fn err(&self, e: rusqlite::Error) -> StoreError {
        map_err(e, &self.path)
    }

    fn migrate(&self) -> Result<(), StoreError> {
        let known = MIGRATIONS.len() as i64;
        let current: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if current == known {
            return Ok(());
        }
        if current > known {
            return Err(StoreError::TooNew {
                found: current,
                known,
            });
        }
        let tx = rusqlite::Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        // Another process may have migrated while we waited for the lock.
        let current: i64 = tx
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| self.err(e))?;
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
            tx.execute_batch(sql).map_err(|e| self.err(e))?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)
                .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))
    }

    fn decode_task(&self, id: &str, body: &str) -> Result<Task, StoreError> {
        serde_json::from_str(body).map_err(|e| StoreError::Decode {
            what: format!("task {id}"),
            detail: e.to_string(),
        })
    }

    fn read_events(&self, sql: &str, p: &[&dyn rusqlite::ToSql]) -> Result<Vec<Event>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(p, |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, at, task, version, actor, body) = row.map_err(|e| self.err(e))?;
            out.push(decode_event(seq, &at, &task, version, &actor, &body)?);
        }
        Ok(out)
    }
}

pub(crate) fn decode_event(
    seq: i64,
    at: &str,
    task: &str,
    version: i64,
    actor: &str,
    body: &str,
) -> Result<Event, StoreError> {
    let bad = |detail: String| StoreError::Decode {
        what: format!("event {seq}"),
        detail,
    };
    Ok(Event {
        seq: seq as u64,
        at: at.parse().map_err(|e: jiff::Error| bad(e.to_string()))?,
        task: TaskId::new(task).map_err(|e| bad(e.to_string()))?,
        version: version as u64,
        actor: serde_json::from_value(serde_json::Value::String(actor.to_owned()))
            .map_err(|e| bad(e.to_string()))?,
        kind: serde_json::from_str::<EventKind>(body).map_err(|e| bad(e.to_string()))?,
    })
}

/// Maps SQLite errors onto the documented kinds: busy → 4, damaged → 5.
fn map_err(e: rusqlite::Error, path: &Path) -> StoreError {
    if let rusqlite::Error::SqliteFailure(f, msg) = &e {
        match f.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => return StoreError::Busy,
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
                return StoreError::Corrupt {
                    path: path.display().to_string(),
                    detail: msg.clone().unwrap_or_else(|| f.to_string()),
                };
            }
            ErrorCode::CannotOpen => {
                return StoreError::Io(format!(
                    "cannot open the store {}: {}; check that the directory exists and is writable",
                    path.display(),
                    msg.clone().unwrap_or_else(|| f.to_string())
                ));
            }
            ErrorCode::DiskFull => {
                return StoreError::Io(format!(
                    "the disk holding {} is full; nothing was written — free space and try again",
                    path.display()
                ));
            }
            _ => {}
        }
    }
    StoreError::Db(e.to_string())
}

impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn get(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT body FROM tasks WHERE id = ?1")
            .map_err(|e| self.err(e))?;
        let body: Option<String> = stmt
            .query_row([id.as_str()], |r| r.get(0))
            .optional()
            .map_err(|e| self.err(e))?;
        body.map(|b| self.decode_task(id.as_str(), &b)).transpose()
    }

    fn list(&self) -> Result<Vec<Task>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id, body FROM tasks ORDER BY id")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, body) = row.map_err(|e| self.err(e))?;
            out.push(self.decode_task(&id, &body)?);
        }
        Ok(out)
    }

    fn events(&self, task: Option<&TaskId>) -> Result<Vec<Event>, StoreError> {
        const COLS: &str = "SELECT seq, at, task, version, actor, body FROM events";
        match task {
            Some(id) => self.read_events(
                &format!("{COLS} WHERE task = ?1 ORDER BY seq"),
                &[&id.as_str()],
            ),
            None => self.read_events(&format!("{COLS} ORDER BY seq"), &[]),
        }
    }

    fn memory(&self, id: &TaskId) -> Result<Option<Memory>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT body FROM memory WHERE task = ?1")
            .map_err(|e| self.err(e))?;
        let body: Option<String> = stmt
            .query_row([id.as_str()], |r| r.get(0))
            .optional()
            .map_err(|e| self.err(e))?;
        body.map(|b| {
            serde_json::from_str(&b).map_err(|e| StoreError::Decode {
                what: format!("memory of {id}"),
                detail: e.to_string(),
            })
        })
        .transpose()
    }

    fn all_memory(&self) -> Result<Vec<(TaskId, Memory)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT task, body FROM memory ORDER BY task")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, body) = row.map_err(|e| self.err(e))?;
            let bad = |detail: String| StoreError::Decode {
                what: format!("memory of {id}"),
                detail,
            };
            let tid = TaskId::new(&id).map_err(|e| bad(e.to_string()))?;
            let m = serde_json::from_str(&body).map_err(|e| bad(e.to_string()))?;
            out.push((tid, m));
        }
        Ok(out)
    }

    fn request(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached("SELECT response FROM requests WHERE key = ?1")
            .map_err(|e| self.err(e))?
            .query_row([key], |r| r.get(0))
            .optional()
            .map_err(|e| self.err(e))
    }

    fn commit(&self, batch: Batch) -> Result<Vec<Event>, StoreError> {
        let tx = rusqlite::Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        failpoint::hit("after-begin");
        if let Some((key, _)) = &batch.request {
            let prior: Option<String> = tx
                .query_row("SELECT response FROM requests WHERE key = ?1", [key], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(|e| self.err(e))?;
            if let Some(resp) = prior {
                return Err(StoreError::Duplicate(resp));
            }
        }
        if let Some(f) = &batch.fence {
            let held: Option<(String, i64)> = tx
                .query_row(
                    "SELECT owner, epoch FROM leases WHERE task = ?1",
                    [f.task.as_str()],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(|e| self.err(e))?;
            if held != Some((f.owner.clone(), f.epoch as i64)) {
                return Err(StoreError::LeaseLost {
                    task: f.task.to_string(),
                    owner: f.owner.clone(),
                    epoch: f.epoch,
                });
            }
        }
        let mut out = Vec::new();
        for ch in &batch.changes {
            let id = match (&ch.before, &ch.after) {
                (Some(t), _) | (None, Some(t)) => t.id().clone(),
                (None, None) => continue,
            };
            let stored: Option<i64> = tx
                .prepare_cached("SELECT version FROM tasks WHERE id = ?1")
                .map_err(|e| self.err(e))?
                .query_row([id.as_str()], |r| r.get(0))
                .optional()
                .map_err(|e| self.err(e))?;
            let expected = ch.before.as_ref().map_or(0, |t| t.version());
            let found = stored.map_or(0, |v| v as u64);
            if expected != found || (ch.before.is_none() && stored.is_some()) {
                return Err(StoreError::Conflict {
                    task: id.to_string(),
                    expected,
                    found,
                });
            }
            for ev in &ch.events {
                let body =
                    serde_json::to_string(&ev.kind).map_err(|e| StoreError::Db(e.to_string()))?;
                tx.prepare_cached(
                    "INSERT INTO events (at, task, version, actor, type, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(|e| self.err(e))?
                .execute(params![
                    ev.at.to_string(),
                    ev.task.as_str(),
                    ev.version as i64,
                    ev.actor.as_str(),
                    ev.kind.type_name(),
                    body
                ])
                .map_err(|e| self.err(e))?;
                let mut ev = ev.clone();
                ev.seq = tx.last_insert_rowid() as u64;
                out.push(ev);
            }
            failpoint::hit("after-events");
            match &ch.after {
                Some(t) => {
                    let body =
                        serde_json::to_string(t).map_err(|e| StoreError::Db(e.to_string()))?;
                    tx.prepare_cached(
                        "INSERT INTO tasks (id, status, version, body) VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT (id) DO UPDATE SET status = excluded.status,
                           version = excluded.version, body = excluded.body",
                    )
                    .map_err(|e| self.err(e))?
                    .execute(params![
                        t.id().as_str(),
                        t.status().as_str(),
                        t.version() as i64,
                        body
                    ])
                    .map_err(|e| self.err(e))?;
                }
                None => {
                    tx.execute("DELETE FROM tasks WHERE id = ?1", [id.as_str()])
                        .map_err(|e| self.err(e))?;
                    tx.execute("DELETE FROM memory WHERE task = ?1", [id.as_str()])
                        .map_err(|e| self.err(e))?;
                }
            }
            failpoint::hit("after-row");
        }
        for (id, m) in &batch.memory {
            let body = serde_json::to_string(m).map_err(|e| StoreError::Db(e.to_string()))?;
            tx.prepare_cached(
                "INSERT INTO memory (task, body) VALUES (?1, ?2)
                 ON CONFLICT (task) DO UPDATE SET body = excluded.body",
            )
            .map_err(|e| self.err(e))?
            .execute(params![id.as_str(), body])
            .map_err(|e| self.err(e))?;
        }
        if let Some((key, resp)) = &batch.request {
            let at = out.first().map(|e| e.at.to_string()).unwrap_or_default();
            tx.execute(
                "INSERT INTO requests (key, at, response) VALUES (?1, ?2, ?3)",
                params![key, at, resp],
            )
            .map_err(|e| self.err(e))?;
        }
        failpoint::hit("before-commit");
        tx.commit().map_err(|e| self.err(e))?;
        Ok(out)
    }

    fn acquire_lease(
        &self,
        task: &TaskId,
        owner: &str,
        now: jiff::Timestamp,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let tx = rusqlite::Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let cur: Option<(String, i64, String)> = tx
            .query_row(
                "SELECT owner, epoch, expires_at FROM leases WHERE task = ?1",
                [task.as_str()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let expires_at = now
            .checked_add(jiff::SignedDuration::try_from(ttl).unwrap_or(jiff::SignedDuration::MAX))
            .unwrap_or(now);
        let (epoch, taken_from) = match &cur {
            None => (1, None),
            Some((o, e, _)) if o == owner => (*e as u64, None),
            // Released: a new holder, a new epoch.
            Some((o, e, _)) if o.is_empty() => (*e as u64 + 1, None),
            Some((o, e, exp)) => {
                let exp: jiff::Timestamp =
                    exp.parse().map_err(|e: jiff::Error| StoreError::Decode {
                        what: format!("lease of {task}"),
                        detail: e.to_string(),
                    })?;
                if exp > now {
                    return Ok(None);
                }
                (*e as u64 + 1, Some(o.clone()))
            }
        };
        tx.execute(
            "INSERT INTO leases (task, owner, epoch, expires_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (task) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch,
               expires_at = excluded.expires_at",
            params![task.as_str(), owner, epoch as i64, expires_at.to_string()],
        )
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(Some(Lease {
            task: task.clone(),
            owner: owner.to_owned(),
            epoch,
            expires_at,
            taken_from,
        }))
    }

    fn release_lease(&self, task: &TaskId, owner: &str) -> Result<(), StoreError> {
        // The row stays (owner '') so the next holder's epoch is higher than every
        // earlier one: a stale writer's fence never matches again.
        self.conn
            .execute(
                "UPDATE leases SET owner = '', expires_at = ?3 WHERE task = ?1 AND owner = ?2",
                params![
                    task.as_str(),
                    owner,
                    jiff::Timestamp::UNIX_EPOCH.to_string()
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    fn leases(&self) -> Result<Vec<Lease>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT task, owner, epoch, expires_at FROM leases WHERE owner <> '' ORDER BY task",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (task, owner, epoch, exp) = row.map_err(|e| self.err(e))?;
            let bad = |detail: String| StoreError::Decode {
                what: format!("lease of {task}"),
                detail,
            };
            out.push(Lease {
                task: TaskId::new(&task).map_err(|e| bad(e.to_string()))?,
                owner,
                epoch: epoch as u64,
                expires_at: exp.parse().map_err(|e: jiff::Error| bad(e.to_string()))?,
                taken_from: None,
            });
        }
        Ok(out)
    }

    fn data_version(&self) -> Result<u64, StoreError> {
        let v: i64 = self
            .conn
            .pragma_query_value(None, "data_version", |r| r.get(0))
            .map_err(|e| self.err(e))?;
        Ok(v as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;
    use warden_core::event::Actor;
    use warden_core::model::{Limits, Status, TaskSpec, WorkflowKind};
    use warden_core::ops::{self, Ctx, Initial, TransitionInput};

    fn ctx() -> Ctx<'static> {
        Ctx {
            now: Timestamp::from_second(1_700_000_000).unwrap(),
            actor: Actor::Person,
            limits: Limits::default(),
            task_file: "TASK.md",
        }
    }

    fn temp_db() -> (PathBuf, SqliteStore) {
        let dir = std::env::temp_dir().join(format!(
            "warden-sqlite-test-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("warden.db");
        let s = SqliteStore::open(&path, 5000).unwrap();
        (dir, s)
    }

    fn created(id: &str) -> ops::Change {
        let spec = TaskSpec::new(TaskId::new(id).unwrap(), WorkflowKind::Review, 3);
        ops::create(
            spec,
            Initial {
                passes: false,
                attempts: 0,
            },
            &ctx(),
        )
        .unwrap()
    }

    /// Each short-lived connection leaves the WAL to the next, and SQLite never restarts
    /// it across processes: closing a connection that leaves a long WAL truncates it, so
    /// the next open does not read it all back. Nothing committed is lost on the way.
    #[test]
    fn a_long_wal_is_truncated_on_close() {
        let (dir, s) = temp_db();
        let path = dir.join("warden.db");
        let mut n = 0;
        while std::fs::metadata(wal_path(&path)).unwrap().len() <= WAL_TRUNCATE_BYTES {
            let ch = created(&format!("t{n}"));
            s.commit(Batch {
                changes: vec![ch],
                ..Default::default()
            })
            .unwrap();
            n += 1;
        }
        drop(s);
        assert_eq!(std::fs::metadata(wal_path(&path)).unwrap().len(), 0);
        let s = SqliteStore::open(&path, 5000).unwrap();
        assert_eq!(s.list().unwrap().len(), n);
        drop(s);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A database written by the first schema (events with AUTOINCREMENT) upgrades in
    /// place: every event kept with its number, new events numbered after them, and a
    /// commit no longer touches `sqlite_sequence`.
    #[test]
    fn version_1_database_upgrades_keeping_every_event() {
        let (dir, s) = temp_db();
        let path = dir.join("warden.db");
        drop(s);
        std::fs::remove_file(&path).unwrap();
        let _ = std::fs::remove_file(wal_path(&path));
        // A version-1 database with two events written the old way.
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(MIGRATIONS[0]).unwrap();
            c.pragma_update(None, "user_version", 1).unwrap();
            drop(c);
            let s1 = SqliteStore {
                conn: Connection::open(&path).unwrap(),
                path: path.clone(),
            };
            for id in ["a", "b"] {
                s1.commit(Batch {
                    changes: vec![created(id)],
                    ..Default::default()
                })
                .unwrap();
            }
            let v: i64 = s1
                .conn
                .pragma_query_value(None, "user_version", |r| r.get(0))
                .unwrap();
            assert_eq!(v, 1, "the test must write through the old schema");
        }
        let s = SqliteStore::open(&path, 5000).unwrap();
        let v: i64 = s
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, MIGRATIONS.len() as i64);
        let before = s.events(None).unwrap();
        assert_eq!(before.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
        let evs = s
            .commit(Batch {
                changes: vec![created("c")],
                ..Default::default()
            })
            .unwrap();
        assert_eq!(evs[0].seq, 3);
        let seqs: i64 = s
            .conn
            .query_row("SELECT count(*) FROM sqlite_sequence", [], |r| r.get(0))
            .unwrap();
        assert_eq!(seqs, 0, "no AUTOINCREMENT counter is kept any more");
        let sql: String = s
            .conn
            .query_row(
                "SELECT sql FROM sqlite_master WHERE name = 'events'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(!sql.contains("AUTOINCREMENT"), "{sql}");
        assert_eq!(s.events(Some(&TaskId::new("a").unwrap())).unwrap().len(), 1);
        drop(s);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn round_trip_and_fencing() {
        let (dir, s) = temp_db();
        let ch = created("a");
        let evs = s
            .commit(Batch {
                changes: vec![ch.clone()],
                ..Default::default()
            })
            .unwrap();
        assert_eq!(evs.len(), 1);
        assert!(evs[0].seq > 0);
        let t = s.get(&TaskId::new("a").unwrap()).unwrap().unwrap();
        assert_eq!(Some(&t), ch.after.as_ref());
        // Creating again conflicts.
        let e = s
            .commit(Batch {
                changes: vec![created("a")],
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(e.exit_code(), 4);
        // A change computed from a stale version conflicts and writes nothing.
        let w = ops::transition(&t, Status::Working, &TransitionInput::default(), &ctx()).unwrap();
        s.commit(Batch {
            changes: vec![w.clone()],
            ..Default::default()
        })
        .unwrap();
        let e = s
            .commit(Batch {
                changes: vec![w],
                ..Default::default()
            })
            .unwrap_err();
        assert!(
            matches!(
                e,
                StoreError::Conflict {
                    expected: 1,
                    found: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(s.events(None).unwrap().len(), 2);
        // Replaying the log reproduces the rows.
        let rebuilt = warden_core::event::replay(&s.events(None).unwrap()).unwrap();
        assert_eq!(
            rebuilt.values().cloned().collect::<Vec<_>>(),
            s.list().unwrap()
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn request_ids_apply_once() {
        let (dir, s) = temp_db();
        let b = |id: &str| Batch {
            changes: vec![created(id)],
            request: Some(("k1".into(), "{\"ok\":true}".into())),
            ..Default::default()
        };
        s.commit(b("a")).unwrap();
        match s.commit(b("b")).unwrap_err() {
            StoreError::Duplicate(r) => assert_eq!(r, "{\"ok\":true}"),
            e => panic!("{e}"),
        }
        assert!(s.get(&TaskId::new("b").unwrap()).unwrap().is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn leases_expire_and_change_hands() {
        let (dir, s) = temp_db();
        let id = TaskId::new("a").unwrap();
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let ttl = Duration::from_secs(30);
        let l = s.acquire_lease(&id, "r1", t0, ttl).unwrap().unwrap();
        assert_eq!(l.epoch, 1);
        assert!(
            s.acquire_lease(&id, "r2", t0, ttl).unwrap().is_none(),
            "held"
        );
        let renewed = s.acquire_lease(&id, "r1", t0, ttl).unwrap().unwrap();
        assert_eq!(renewed.epoch, 1, "renewal keeps the epoch");
        let later = Timestamp::from_second(1_700_000_031).unwrap();
        let taken = s.acquire_lease(&id, "r2", later, ttl).unwrap().unwrap();
        assert_eq!((taken.epoch, taken.taken_from.as_deref()), (2, Some("r1")));
        s.release_lease(&id, "r1").unwrap();
        assert_eq!(s.leases().unwrap().len(), 1, "only the owner releases");
        s.release_lease(&id, "r2").unwrap();
        assert!(s.leases().unwrap().is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn not_a_database() {
        let dir = std::env::temp_dir().join(format!("warden-notadb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("warden.db");
        std::fs::write(&path, vec![0x42u8; 8192]).unwrap();
        let e = SqliteStore::open(&path, 100).unwrap_err();
        assert_eq!(e.exit_code(), 5, "{e}");
        assert!(e.to_string().contains("damaged"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
