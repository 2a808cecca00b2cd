//! The embedded SQLite store: WAL, `synchronous=FULL`, `busy_timeout`, and
//! `BEGIN IMMEDIATE` for every write, so many processes share one file safely.
//!
//! Task rows hold the task as JSON plus indexed columns; events are append-only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use warden_core::event::{Event, EventKind};
use warden_core::head::TaskHead;
use warden_core::memory::{Memory, MemoryAppend};
use warden_core::model::{Status, Task, TaskId};

use crate::Migration;
use crate::memory_rows::{AllMemory, push_item};
use crate::{
    Batch, HEAD_COLUMNS, HeadColumns, Lease, Store, StoreError, Tally, decode_head, failpoint,
};

/// WAL length (of its current frames) above which closing a connection checkpoints the
/// WAL and starts it again from its beginning.
const WAL_RESTART_BYTES: u64 = 256 << 10;

/// WAL file size above which closing a connection checkpoints the WAL and truncates the
/// file (after a big import, say), where a restart would keep the file at that size.
const WAL_TRUNCATE_BYTES: u64 = 2 << 20;

/// The bytes of one WAL frame: its header and a page (SQLite's default 4 KiB pages).
const WAL_FRAME_BYTES: u64 = 24 + 4096;

/// The WAL frames after which a commit checkpoints, as SQLite's default WAL hook does
/// (`wal_autocheckpoint`), which [`after_commit`] replaces.
const AUTOCHECKPOINT_FRAMES: i32 = 1000;

thread_local! {
    /// The frames in the WAL after the last commit on this thread, as SQLite's WAL hook
    /// (which runs on the committing thread) reported them. A store's `Drop` takes it: a
    /// CLI call and each supervisor step commit on one thread, and a commit to another
    /// database on the same thread only moves a close's checkpoint earlier or later.
    static WAL_FRAMES: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
}

/// SQLite's WAL hook: runs after every commit, with the number of frames in the WAL.
/// It records them for [`SqliteStore`]'s `Drop` and checkpoints a long WAL as SQLite's
/// default hook does.
fn after_commit(wal: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.with(|f| f.set(frames));
    if frames >= AUTOCHECKPOINT_FRAMES {
        // As SQLite's own hook: a checkpoint that cannot run now is left to a later one.
        let _ = wal.checkpoint();
    }
    Ok(())
}

/// Schema migrations, applied in order; `PRAGMA user_version` is the number applied.
const MIGRATIONS: &[Migration] = &[
    // 1: tasks, events, memory, idempotency keys, leases.
    Migration::Sql(
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
    ),
    // 2: events without AUTOINCREMENT. Events are never deleted, so `seq` = the largest
    // rowid + 1 is just as monotonic, and a commit no longer rewrites the
    // `sqlite_sequence` page: one WAL page (about 4 KiB to fsync) less per write.
    Migration::Sql(
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
    ),
    // 3: memory as one row per item instead of one JSON row per task. A merge used to
    // rewrite the whole memory (a long one spans overflow pages, each another WAL page
    // to write and fsync); now it inserts its items into one leaf page, whatever the
    // memory's length. `memory_focus` has a row for every task that has memory.
    Migration::Sql(
        "CREATE TABLE memory_items (
        task TEXT NOT NULL,
        list INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        text TEXT NOT NULL,
        PRIMARY KEY (task, list, seq)
    ) STRICT, WITHOUT ROWID;
    CREATE TABLE memory_focus (
        task TEXT PRIMARY KEY,
        text TEXT NOT NULL
    ) STRICT, WITHOUT ROWID;
    INSERT INTO memory_items (task, list, seq, text)
        SELECT m.task, l.list, j.key, j.value
        FROM memory m
        JOIN (SELECT 0 AS list, 'goals' AS name UNION ALL SELECT 1, 'constraints'
              UNION ALL SELECT 2, 'decisions' UNION ALL SELECT 3, 'hypotheses'
              UNION ALL SELECT 4, 'history' UNION ALL SELECT 5, 'open_issues') l
        JOIN json_each(m.body, '$.' || l.name) j;
    INSERT INTO memory_focus (task, text)
        SELECT task, coalesce(json_extract(body, '$.next_focus'), '') FROM memory;
    DROP TABLE memory;",
    ),
    // 4: the rows rebuilt from the log, because the fold changed (sessions stay recorded
    // until their end is reported; passes describes the current attempt; new fields of
    // runner state). The rows are a materialised view of the log, so this is exact.
    Migration::Refold,
    // 5: the head columns beside each task (`HeadColumns`): `warden status`, lists,
    // STATE.md and the tree around one task read them from indexes instead of decoding
    // every task (at 100,000 tasks a decode of all of them took 0.4 s).
    Migration::Sql(
        "ALTER TABLE tasks ADD COLUMN parent TEXT;
    ALTER TABLE tasks ADD COLUMN ord INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN passes INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN title TEXT NOT NULL DEFAULT '';
    ALTER TABLE tasks ADD COLUMN deps TEXT NOT NULL DEFAULT '';
    ALTER TABLE tasks ADD COLUMN active INTEGER NOT NULL DEFAULT 0;",
    ),
    // 6: filled from every stored task.
    Migration::Heads,
    // 7: their indexes, an index of the log by event type (the last activity without
    // reading the log), and the tally: how many children each parent has in each stored
    // (status, passes), kept by triggers on every write of a task row, so counts by
    // status and the statuses of groups need no scan. `''` stands for no parent.
    Migration::Sql(
        "CREATE INDEX tasks_tree ON tasks (parent, ord, id, status, passes);
    CREATE INDEX tasks_by_status ON tasks (status, id);
    CREATE INDEX tasks_active ON tasks (id) WHERE active = 1;
    CREATE INDEX tasks_heads ON tasks
        (id, parent, ord, status, passes, attempts, max_attempts, title, deps, active);
    CREATE INDEX events_by_type ON events (type, seq);
    CREATE TABLE tally (
        parent TEXT NOT NULL,
        status TEXT NOT NULL,
        passes INTEGER NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (parent, status, passes)
    ) STRICT, WITHOUT ROWID;
    INSERT INTO tally (parent, status, passes, n)
        SELECT coalesce(parent, ''), status, passes, count(*) FROM tasks GROUP BY 1, 2, 3;
    CREATE TRIGGER tally_insert AFTER INSERT ON tasks BEGIN
        INSERT INTO tally (parent, status, passes, n)
            VALUES (coalesce(NEW.parent, ''), NEW.status, NEW.passes, 1)
            ON CONFLICT (parent, status, passes) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER tally_delete AFTER DELETE ON tasks BEGIN
        UPDATE tally SET n = n - 1
            WHERE parent = coalesce(OLD.parent, '') AND status = OLD.status AND passes = OLD.passes;
        DELETE FROM tally WHERE n = 0
            AND parent = coalesce(OLD.parent, '') AND status = OLD.status AND passes = OLD.passes;
    END;
    CREATE TRIGGER tally_update AFTER UPDATE OF parent, status, passes ON tasks
        WHEN OLD.parent IS NOT NEW.parent OR OLD.status <> NEW.status OR OLD.passes <> NEW.passes
    BEGIN
        UPDATE tally SET n = n - 1
            WHERE parent = coalesce(OLD.parent, '') AND status = OLD.status AND passes = OLD.passes;
        DELETE FROM tally WHERE n = 0
            AND parent = coalesce(OLD.parent, '') AND status = OLD.status AND passes = OLD.passes;
        INSERT INTO tally (parent, status, passes, n)
            VALUES (coalesce(NEW.parent, ''), NEW.status, NEW.passes, 1)
            ON CONFLICT (parent, status, passes) DO UPDATE SET n = n + 1;
    END;",
    ),
    // 8: the tally kept by `commit` instead of triggers. Every process parsed the three
    // triggers with the schema on its first statement, about 0.15 ms of each CLI call
    // that opens the store; `commit` knows each row's old and new counts anyway.
    Migration::Sql(
        "DROP TRIGGER tally_insert;
    DROP TRIGGER tally_delete;
    DROP TRIGGER tally_update;",
    ),
    // 9: the dependencies the other way round, kept by `commit`: which tasks name a
    // task in their `depends_on`. `warden status` finds the tasks a cancelled one holds
    // back for ever from it, without reading every task.
    Migration::Sql(
        "CREATE TABLE dependents (
        task TEXT NOT NULL,
        dep TEXT NOT NULL,
        PRIMARY KEY (task, dep)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX dependents_of ON dependents (dep, task);
    INSERT OR IGNORE INTO dependents (dep, task)
        SELECT j.value, t.id FROM tasks t, json_each(t.body, '$.spec.depends_on') j;",
    ),
];

/// Fills `dependents` again from every task's dependencies (after a migration that
/// rewrites the rows).
const REFILL_DEPENDENTS: &str = "DELETE FROM dependents;
    INSERT OR IGNORE INTO dependents (dep, task)
        SELECT j.value, t.id FROM tasks t, json_each(t.body, '$.spec.depends_on') j;";

/// A row of the tally: (parent or `''`, status, passes).
type TallyKey = (String, String, i64);

/// The columns of a task row besides its id, version and body, in [`head_values`]'s
/// order: the status and the [`HeadColumns`].
const HEAD_COLS: [&str; 9] = [
    "status",
    "parent",
    "ord",
    "passes",
    "attempts",
    "max_attempts",
    "title",
    "deps",
    "active",
];

/// Where `deps` is in [`HEAD_COLS`].
const DEPS_COL: usize = 7;

/// A stored row's version, then its [`HEAD_COLS`].
const STORED_ROW: &str = "SELECT version, status, parent, ord, passes, attempts, max_attempts,
    title, deps, active FROM tasks WHERE id = ?1";

/// The values of [`HEAD_COLS`] for `t`, as SQLite stores them.
fn head_values(t: &Task) -> [Value; HEAD_COLS.len()] {
    let h = HeadColumns::of(t);
    [
        Value::Text(t.status().as_str().to_owned()),
        h.parent.map_or(Value::Null, Value::Text),
        Value::Integer(h.order),
        Value::Integer(i64::from(h.passes)),
        Value::Integer(h.attempts),
        Value::Integer(h.max_attempts),
        Value::Text(h.title),
        Value::Text(h.deps),
        Value::Integer(i64::from(h.active)),
    ]
}

/// The tally row a task with these [`HEAD_COLS`] is counted in.
fn tally_key(cols: &[Value; HEAD_COLS.len()]) -> TallyKey {
    let text = |v: &Value| match v {
        Value::Text(s) => s.clone(),
        _ => String::new(),
    };
    let passes = match cols[3] {
        Value::Integer(n) => n,
        _ => 0,
    };
    (text(&cols[1]), text(&cols[0]), passes)
}

/// Where [`Migration::Heads`] sits: a refold after it writes the head columns too.
fn heads_at() -> usize {
    MIGRATIONS
        .iter()
        .position(|m| matches!(m, Migration::Heads))
        .unwrap_or(usize::MAX)
}

/// A SQLite-backed [`Store`].
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    /// The file opened (device, inode): a long-running process (a console, a
    /// supervisor) whose file was removed or replaced under it would write into the
    /// old one, and every such write would be lost.
    file: Option<(u64, u64)>,
    /// A commit made by [`Store::commit_unsynced`] waits for [`Store::sync`].
    unsynced: std::cell::Cell<bool>,
}

/// The device and inode of the file at `path`.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The WAL file of the database at `path`.
fn wal_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-wal");
    PathBuf::from(p)
}

/// Keeps the WAL short across short processes, and written in place. The first
/// connection of a process rebuilds SQLite's WAL index by reading the WAL's frames, and
/// forgets what earlier checkpoints copied, so SQLite never starts the WAL again by
/// itself and it grows for ever: after a few hundred CLI calls that read was most of the
/// cost of a `warden task update`. So a connection whose commits left more than
/// [`WAL_RESTART_BYTES`] of frames checkpoints them all into the database and then
/// commits once more (the schema version, unchanged): that commit starts the WAL again
/// from its beginning, and the next process reads only the frames written since. The
/// file keeps its size, so the commits after it overwrite blocks the file already has,
/// and their fdatasync need not write the file's size and new blocks (0.11–0.14 ms
/// against 0.19–0.25 ms for an append on the benchmark machine). A WAL file bigger than
/// [`WAL_TRUNCATE_BYTES`] is truncated instead. Neither waits: if another connection is
/// busy, a later close does it.
impl Drop for SqliteStore {
    fn drop(&mut self) {
        // A caller that forgot `sync` (or returned early on an error) still leaves its
        // commits durable.
        if let Err(e) = self.sync_wal() {
            crate::say!("warning: {e}");
        }
        let frames = WAL_FRAMES.with(|f| f.replace(0)).max(0) as u64;
        let size = std::fs::metadata(wal_path(&self.path)).map_or(0, |m| m.len());
        if size > WAL_TRUNCATE_BYTES {
            let _ = self.conn.busy_timeout(Duration::ZERO);
            let _ = self
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        } else if frames * WAL_FRAME_BYTES > WAL_RESTART_BYTES {
            let _ = self.conn.busy_timeout(Duration::ZERO);
            let _ = self.restart_wal();
        }
    }
}

impl SqliteStore {
    /// Opens (creating and migrating if needed) the database at `path`.
    pub fn open(path: &Path, busy_timeout_ms: u64) -> Result<SqliteStore, StoreError> {
        // The store and its WAL are Warden's own files: a link would send every write
        // somewhere else (another project's store, a file of the person's).
        let shm = {
            let mut p = path.as_os_str().to_owned();
            p.push("-shm");
            std::path::PathBuf::from(p)
        };
        for p in [path.to_path_buf(), wal_path(path), shm] {
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(StoreError::Io(format!(
                    "the store file {} is a symbolic link; Warden opens only its own regular file there: remove the link (or point store.url at the real file)",
                    p.display()
                )));
            }
        }
        let created = !path.exists() || !wal_path(path).exists();
        let conn = Connection::open(path).map_err(|e| map_err(e, path))?;
        let store = SqliteStore {
            conn,
            path: path.to_path_buf(),
            file: file_id(path),
            unsynced: std::cell::Cell::new(false),
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
        store.conn.wal_hook(Some(after_commit));
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

    /// Refuses to go on with a store file that is not the one this process opened (it
    /// was removed, or another file was put in its place): what it wrote would go into
    /// the old file and be lost, and what it read would be the old file's.
    fn same_file(&self) -> Result<(), StoreError> {
        match (self.file, file_id(&self.path)) {
            (Some(opened), Some(now)) if opened == now => Ok(()),
            (None, _) => Ok(()),
            (Some(_), now) => Err(StoreError::Io(format!(
                "the store {} was {} since this process opened it; nothing was written: start this `warden` process again (a console, a supervisor, a dashboard) to use the store that is there now",
                self.path.display(),
                if now.is_none() { "removed" } else { "replaced" }
            ))),
        }
    }

    /// Checkpoints the whole WAL and, when nothing was left behind, commits an unchanged
    /// schema version: the first commit after a complete checkpoint writes the WAL from
    /// its beginning again (see `Drop`).
    fn restart_wal(&self) -> rusqlite::Result<()> {
        let (busy, log, done): (i64, i64, i64) =
            self.conn
                .query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?;
        if busy != 0 || log != done {
            return Ok(());
        }
        let version: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?;
        self.conn.pragma_update(None, "user_version", version)
    }

    /// Flushes the WAL to the disk if a commit of this handle is waiting for it. One
    /// fdatasync of the WAL makes every frame in it durable, so this commit and every
    /// commit before it in any process (the WAL is appended in commit order, and
    /// recovery keeps its longest valid prefix). A WAL that is gone was checkpointed
    /// into the database and deleted, and a checkpoint syncs the database first; the
    /// database is synced anyway, which is cheap when nothing is dirty.
    fn sync_wal(&self) -> Result<(), StoreError> {
        if !self.unsynced.get() {
            return Ok(());
        }
        let wal = wal_path(&self.path);
        let synced = match std::fs::File::open(&wal) {
            Ok(f) => f.sync_data(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::File::open(&self.path).and_then(|f| f.sync_data())
            }
            Err(e) => Err(e),
        };
        synced.map_err(|e| {
            StoreError::Io(format!(
                "the change was committed but flushing {} to the disk failed: {e}; check the disk, then `warden task show` the task",
                wal.display()
            ))
        })?;
        self.unsynced.set(false);
        Ok(())
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
        for (i, m) in MIGRATIONS.iter().enumerate().skip(current as usize) {
            match m {
                Migration::Sql(sql) => tx.execute_batch(sql).map_err(|e| self.err(e))?,
                Migration::Refold => {
                    let events = self.read_events(
                        "SELECT seq, at, task, version, actor, body FROM events ORDER BY seq",
                        &[],
                    )?;
                    for t in crate::refolded(&events) {
                        let body =
                            serde_json::to_string(&t).map_err(|e| StoreError::Db(e.to_string()))?;
                        tx.execute(
                            "UPDATE tasks SET status = ?2, version = ?3, body = ?4 WHERE id = ?1",
                            params![
                                t.id().as_str(),
                                t.status().as_str(),
                                t.version() as i64,
                                body
                            ],
                        )
                        .map_err(|e| self.err(e))?;
                        if i > heads_at() {
                            self.write_heads(&tx, &t)?;
                        }
                    }
                }
                Migration::Heads => {
                    let rows: Vec<(String, String)> = tx
                        .prepare("SELECT id, body FROM tasks")
                        .and_then(|mut st| {
                            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                                .collect::<Result<_, _>>()
                        })
                        .map_err(|e| self.err(e))?;
                    for (id, body) in rows {
                        let t = self.decode_task(&id, &body)?;
                        self.write_heads(&tx, &t)?;
                    }
                }
            }
            // A migration that rewrites rows after the tally (or the dependents) exists
            // counts it again.
            let exists = |table: &str| {
                tx.query_row(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                    [table],
                    |r| r.get::<_, i64>(0),
                )
                .map(|n| n > 0)
            };
            let rewrites = matches!(m, Migration::Refold | Migration::Heads);
            if rewrites && exists("dependents").map_err(|e| self.err(e))? {
                tx.execute_batch(REFILL_DEPENDENTS)
                    .map_err(|e| self.err(e))?;
            }
            if rewrites && exists("tally").map_err(|e| self.err(e))? {
                tx.execute_batch(
                    "DELETE FROM tally;
                     INSERT INTO tally (parent, status, passes, n)
                         SELECT coalesce(parent, ''), status, passes, count(*) FROM tasks
                         GROUP BY 1, 2, 3;",
                )
                .map_err(|e| self.err(e))?;
            }
            tx.pragma_update(None, "user_version", (i + 1) as i64)
                .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))
    }

    /// Writes one merge into the open transaction: the items appended after the list's
    /// last, the focus replaced when set, each list that grew cut to its cap. Only the
    /// pages that receive the new items change (plus the focus row when it is set).
    fn append_memory(
        &self,
        tx: &Connection,
        id: &TaskId,
        append: &MemoryAppend,
    ) -> Result<(), StoreError> {
        let task = id.as_str();
        match &append.items.next_focus {
            Some(f) => tx
                .prepare_cached(
                    "INSERT INTO memory_focus (task, text) VALUES (?1, ?2)
                     ON CONFLICT (task) DO UPDATE SET text = excluded.text",
                )
                .and_then(|mut st| st.execute(params![task, f])),
            None => tx
                .prepare_cached("INSERT OR IGNORE INTO memory_focus (task, text) VALUES (?1, '')")
                .and_then(|mut st| st.execute([task])),
        }
        .map_err(|e| self.err(e))?;
        for (list, items) in append.items.lists().into_iter().enumerate() {
            if items.is_empty() {
                continue;
            }
            let next: i64 = tx
                .prepare_cached(
                    "SELECT coalesce(max(seq) + 1, 0) FROM memory_items WHERE task = ?1 AND list = ?2",
                )
                .and_then(|mut st| st.query_row(params![task, list as i64], |r| r.get(0)))
                .map_err(|e| self.err(e))?;
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO memory_items (task, list, seq, text) VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(|e| self.err(e))?;
            for (k, text) in items.iter().enumerate() {
                insert
                    .execute(params![task, list as i64, next + k as i64, text])
                    .map_err(|e| self.err(e))?;
            }
        }
        // Seqs of a list are consecutive (only a list's oldest entries are ever
        // deleted), so the last `keep` are those above max - keep. Only a list that
        // grew can be over its cap.
        for (list, items) in append.items.lists().into_iter().enumerate() {
            if items.is_empty() {
                continue;
            }
            tx.prepare_cached(
                "DELETE FROM memory_items WHERE task = ?1 AND list = ?2 AND seq <=
                    (SELECT max(seq) FROM memory_items WHERE task = ?1 AND list = ?2) - ?3",
            )
            .and_then(|mut st| {
                st.execute(params![
                    task,
                    list as i64,
                    i64::try_from(append.keep(list)).unwrap_or(i64::MAX)
                ])
            })
            .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Adds each key's change in this batch to the tally; a count that reaches zero is
    /// deleted, so the tally has a row only for the (parent, status, passes) that exist.
    fn write_tally(
        &self,
        tx: &Connection,
        tally: &BTreeMap<TallyKey, i64>,
    ) -> Result<(), StoreError> {
        for ((parent, status, passes), &n) in tally {
            if n > 0 {
                tx.prepare_cached(
                    "INSERT INTO tally (parent, status, passes, n) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (parent, status, passes) DO UPDATE SET n = n + excluded.n",
                )
                .and_then(|mut st| st.execute(params![parent, status, passes, n]))
                .map_err(|e| self.err(e))?;
            } else if n < 0 {
                tx.prepare_cached(
                    "UPDATE tally SET n = n + ?4 WHERE parent = ?1 AND status = ?2 AND passes = ?3",
                )
                .and_then(|mut st| st.execute(params![parent, status, passes, n]))
                .map_err(|e| self.err(e))?;
                tx.prepare_cached(
                    "DELETE FROM tally WHERE parent = ?1 AND status = ?2 AND passes = ?3 AND n = 0",
                )
                .and_then(|mut st| st.execute(params![parent, status, passes]))
                .map_err(|e| self.err(e))?;
            }
        }
        Ok(())
    }

    /// Replaces the rows of `dependents` that say what `task` depends on (a new task,
    /// `stored` false, has none to delete: a plan import pays one insert per entry).
    fn write_dependents(
        &self,
        tx: &Connection,
        task: &TaskId,
        stored: bool,
        deps: &[TaskId],
    ) -> Result<(), StoreError> {
        if stored {
            tx.prepare_cached("DELETE FROM dependents WHERE task = ?1")
                .and_then(|mut st| st.execute([task.as_str()]))
                .map_err(|e| self.err(e))?;
        }
        for d in deps {
            tx.prepare_cached("INSERT OR IGNORE INTO dependents (dep, task) VALUES (?1, ?2)")
                .and_then(|mut st| st.execute([d.as_str(), task.as_str()]))
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Writes a task's head columns (see [`HeadColumns`]) into its row.
    fn write_heads(&self, tx: &Connection, t: &Task) -> Result<(), StoreError> {
        let h = HeadColumns::of(t);
        tx.prepare_cached(
            "UPDATE tasks SET parent = ?2, ord = ?3, passes = ?4, attempts = ?5,
               max_attempts = ?6, title = ?7, deps = ?8, active = ?9 WHERE id = ?1",
        )
        .and_then(|mut st| {
            st.execute(params![
                t.id().as_str(),
                h.parent,
                h.order,
                h.passes,
                h.attempts,
                h.max_attempts,
                h.title,
                h.deps,
                h.active
            ])
        })
        .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Tasks decoded from `(id, body)` rows of `sql`, each straight from SQLite's copy of
    /// the row: at 100,000 tasks, copying the bodies out first cost more page faults
    /// (80 MB) than decoding them on a second thread saved.
    fn read_tasks(&self, sql: &str, p: &[&dyn rusqlite::ToSql]) -> Result<Vec<Task>, StoreError> {
        let mut out = Vec::new();
        self.read_tasks_into(sql, p, &mut out)?;
        Ok(out)
    }

    /// [`SqliteStore::read_tasks`] into `out`.
    fn read_tasks_into(
        &self,
        sql: &str,
        p: &[&dyn rusqlite::ToSql],
        out: &mut Vec<Task>,
    ) -> Result<(), StoreError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query(p).map_err(|e| self.err(e))?;
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let text = |i: usize| {
                r.get_ref(i)
                    .and_then(|v| Ok(v.as_str()?))
                    .map_err(|e| self.err(e))
            };
            out.push(crate::decode_task(text(0)?, text(1)?)?);
        }
        Ok(())
    }

    /// Heads read from rows of `sql`, which selects [`HEAD_COLUMNS`].
    fn read_heads(
        &self,
        sql: &str,
        p: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<TaskHead>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query(p).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let get = |e: rusqlite::Error| self.err(e);
            out.push(decode_head(
                r.get_ref(0).and_then(|v| Ok(v.as_str()?)).map_err(get)?,
                r.get_ref(1)
                    .and_then(|v| Ok(v.as_str_or_null()?))
                    .map_err(get)?,
                r.get(2).map_err(get)?,
                r.get_ref(3).and_then(|v| Ok(v.as_str()?)).map_err(get)?,
                r.get(4).map_err(get)?,
                r.get(5).map_err(get)?,
                r.get(6).map_err(get)?,
                r.get(7).map_err(get)?,
                r.get_ref(8).and_then(|v| Ok(v.as_str()?)).map_err(get)?,
                r.get(9).map_err(get)?,
            )?);
        }
        Ok(out)
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

/// Ids as a JSON array, for `json_each` (one parameter however many ids).
fn id_array(ids: &[TaskId]) -> String {
    serde_json::to_string(&ids.iter().map(|i| i.as_str()).collect::<Vec<_>>()).unwrap_or_default()
}

impl SqliteStore {
    fn read_tally(&self, sql: &str) -> Result<Vec<Tally>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, bool>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (parent, status, passes, n) = row.map_err(|e| self.err(e))?;
            out.push(crate::tally_row(&parent, &status, passes, n)?);
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
            ErrorCode::SystemIoFailure => {
                return StoreError::Io(format!(
                    "could not write the store {}: {}; check free space, the file-size limit (`ulimit -f`) and the disk; nothing was changed",
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
            ErrorCode::ReadOnly => {
                return StoreError::Io(format!(
                    "the store {} cannot be written (read-only: its permissions, an immutable flag, a read-only mount, or its directory's permissions); nothing was written — give the user running warden write access to it and its directory",
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
        // Sized from the tally (a few rows): a vector grown by doubling would hold the
        // old and the new buffer at once, 100 MB at 100,000 tasks, and keep a third of
        // it unused.
        let n: i64 = self
            .conn
            .prepare_cached("SELECT coalesce(sum(n), 0) FROM tally")
            .and_then(|mut st| st.query_row([], |r| r.get(0)))
            .map_err(|e| self.err(e))?;
        let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
        self.read_tasks_into("SELECT id, body FROM tasks ORDER BY id", &[], &mut out)?;
        Ok(out)
    }

    fn task_columns(&self) -> Result<Vec<crate::TaskColumns>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, status, version, body FROM tasks ORDER BY id")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(crate::TaskColumns {
                    id: r.get(0)?,
                    status: r.get(1)?,
                    version: r.get(2)?,
                    body: r.get(3)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.map(|r| r.map_err(|e| self.err(e))).collect()
    }

    fn dependent_rows(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT task, dep FROM dependents ORDER BY task, dep")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.err(e))?;
        rows.map(|r| r.map_err(|e| self.err(e))).collect()
    }

    fn event_types(&self) -> Result<Vec<(u64, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT seq, type FROM events ORDER BY seq")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?))
            })
            .map_err(|e| self.err(e))?;
        rows.map(|r| r.map_err(|e| self.err(e))).collect()
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
        let focus: Option<String> = self
            .conn
            .prepare_cached("SELECT text FROM memory_focus WHERE task = ?1")
            .map_err(|e| self.err(e))?
            .query_row([id.as_str()], |r| r.get(0))
            .optional()
            .map_err(|e| self.err(e))?;
        let Some(next_focus) = focus else {
            return Ok(None);
        };
        let mut m = Memory {
            next_focus,
            ..Memory::default()
        };
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT list, text FROM memory_items WHERE task = ?1 ORDER BY list, seq",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([id.as_str()], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(|e| self.err(e))?;
        for row in rows {
            let (list, text) = row.map_err(|e| self.err(e))?;
            push_item(&mut m, id.as_str(), list, text)?;
        }
        Ok(Some(m))
    }

    fn all_memory(&self) -> Result<Vec<(TaskId, Memory)>, StoreError> {
        let mut out = AllMemory::default();
        let mut stmt = self
            .conn
            .prepare_cached("SELECT task, text FROM memory_focus")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.err(e))?;
        for row in rows {
            let (id, next_focus) = row.map_err(|e| self.err(e))?;
            out.focus(id, next_focus);
        }
        let mut stmt = self
            .conn
            .prepare_cached("SELECT task, list, text FROM memory_items ORDER BY task, list, seq")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        for row in rows {
            let (id, list, text) = row.map_err(|e| self.err(e))?;
            out.item(&id, list, text)?;
        }
        out.finish()
    }

    fn request(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached("SELECT response FROM requests WHERE key = ?1")
            .map_err(|e| self.err(e))?
            .query_row([key], |r| r.get(0))
            .optional()
            .map_err(|e| self.err(e))
    }

    fn get_many(&self, ids: &[TaskId]) -> Result<Vec<Task>, StoreError> {
        self.read_tasks(
            "SELECT id, body FROM tasks WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id",
            &[&id_array(ids)],
        )
    }

    fn page(&self, after: Option<&TaskId>, limit: usize) -> Result<Vec<Task>, StoreError> {
        self.read_tasks(
            "SELECT id, body FROM tasks WHERE ?1 IS NULL OR id > ?1 ORDER BY id LIMIT ?2",
            &[&after.map(|a| a.as_str()), &(limit as i64)],
        )
    }

    fn with_status(&self, status: Status) -> Result<Vec<Task>, StoreError> {
        self.read_tasks(
            "SELECT id, body FROM tasks WHERE status = ?1 ORDER BY id",
            &[&status.as_str()],
        )
    }

    fn active(&self) -> Result<Vec<Task>, StoreError> {
        self.read_tasks(
            "SELECT id, body FROM tasks WHERE active = 1 ORDER BY id",
            &[],
        )
    }

    fn heads(&self, ids: &[TaskId]) -> Result<Vec<TaskHead>, StoreError> {
        self.read_heads(
            &format!(
                "SELECT {HEAD_COLUMNS} FROM tasks INDEXED BY tasks_heads
                 WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id"
            ),
            &[&id_array(ids)],
        )
    }

    fn dependents(&self, ids: &[TaskId]) -> Result<Vec<TaskHead>, StoreError> {
        self.read_heads(
            &format!(
                "SELECT {HEAD_COLUMNS} FROM tasks INDEXED BY tasks_heads
                 WHERE id IN (SELECT task FROM dependents
                              WHERE dep IN (SELECT value FROM json_each(?1)))
                 ORDER BY id"
            ),
            &[&id_array(ids)],
        )
    }

    fn all_heads(&self) -> Result<Vec<TaskHead>, StoreError> {
        self.read_heads(
            &format!("SELECT {HEAD_COLUMNS} FROM tasks INDEXED BY tasks_heads ORDER BY id"),
            &[],
        )
    }

    fn children(&self, id: &TaskId) -> Result<Vec<TaskHead>, StoreError> {
        self.read_heads(
            &format!("SELECT {HEAD_COLUMNS} FROM tasks WHERE parent = ?1 ORDER BY ord, id"),
            &[&id.as_str()],
        )
    }

    fn child_ids(&self, id: &TaskId) -> Result<Vec<TaskId>, StoreError> {
        // Covered by `tasks_tree (parent, ord, id, …)`: no row of the table is read.
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id FROM tasks WHERE parent = ?1 ORDER BY ord, id")
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([id.as_str()]).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let raw = r.get_ref(0).map_err(|e| self.err(e))?;
            let text = raw.as_str().map_err(|e| StoreError::Decode {
                what: format!("a child id of {id}"),
                detail: e.to_string(),
            })?;
            out.push(crate::stored_id(text)?);
        }
        Ok(out)
    }

    fn descendants(&self, id: &TaskId) -> Result<Vec<TaskHead>, StoreError> {
        // UNION, not UNION ALL: a parent cycle (never stored) would end, not loop.
        self.read_heads(
            &format!(
                "WITH RECURSIVE below(id) AS (
                   SELECT id FROM tasks WHERE parent = ?1
                   UNION SELECT t.id FROM tasks t JOIN below b ON t.parent = b.id)
                 SELECT {HEAD_COLUMNS} FROM tasks WHERE id IN (SELECT id FROM below) ORDER BY id"
            ),
            &[&id.as_str()],
        )
    }

    fn tally(&self) -> Result<Vec<Tally>, StoreError> {
        self.read_tally("SELECT parent, status, passes, n FROM tally ORDER BY 1, 2, 3")
    }

    fn leaf_tally(&self) -> Result<Vec<Tally>, StoreError> {
        // The groups' own rows: one lookup per group in the covering `tasks_heads`.
        self.read_tally(
            "SELECT '', status, passes, sum(n) FROM (
               SELECT status, passes, n FROM tally
               UNION ALL
               SELECT status, passes, -count(*) FROM tasks INDEXED BY tasks_heads
               WHERE id IN (SELECT parent FROM tally) GROUP BY 1, 2)
             GROUP BY 2, 3 HAVING sum(n) > 0 ORDER BY 2, 3",
        )
    }

    fn groups_among(&self, ids: &[TaskId]) -> Result<Vec<TaskId>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT parent FROM tally
                 WHERE parent IN (SELECT value FROM json_each(?1)) ORDER BY 1",
            )
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([id_array(ids)]).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let text = r
                .get_ref(0)
                .and_then(|v| Ok(v.as_str()?))
                .map_err(|e| self.err(e))?;
            out.push(crate::stored_id(text)?);
        }
        Ok(out)
    }

    fn recount(&self) -> Result<Vec<Tally>, StoreError> {
        self.read_tally(
            "SELECT coalesce(parent, ''), status, passes, count(*) FROM tasks
             GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        )
    }

    fn events_of(&self, types: &[&str], status: Option<Status>) -> Result<Vec<Event>, StoreError> {
        let types = serde_json::to_string(types).unwrap_or_default();
        match status {
            // Through the tasks in that status and each one's events (an index range each).
            Some(st) => self.read_events(
                "SELECT e.seq, e.at, e.task, e.version, e.actor, e.body
                 FROM tasks t JOIN events e ON e.task = t.id
                 WHERE t.status = ?2 AND e.type IN (SELECT value FROM json_each(?1))
                 ORDER BY e.seq",
                &[&types, &st.as_str()],
            ),
            None => self.read_events(
                "SELECT seq, at, task, version, actor, body FROM events
                 WHERE type IN (SELECT value FROM json_each(?1)) ORDER BY seq",
                &[&types],
            ),
        }
    }

    fn last_event_where(
        &self,
        types: &[&str],
        keep: &dyn Fn(&Event) -> bool,
    ) -> Result<Option<Event>, StoreError> {
        // Each type read backwards through its index until one is kept: the newest of
        // those is the answer.
        let mut best: Option<Event> = None;
        for ty in types {
            let mut stmt = self
                .conn
                .prepare_cached(
                    "SELECT seq, at, task, version, actor, body FROM events
                     WHERE type = ?1 AND seq > ?2 ORDER BY seq DESC",
                )
                .map_err(|e| self.err(e))?;
            let after = best.as_ref().map_or(0, |e| e.seq as i64);
            let mut rows = stmt.query(params![ty, after]).map_err(|e| self.err(e))?;
            while let Some(r) = rows.next().map_err(|e| self.err(e))? {
                let get = |e: rusqlite::Error| self.err(e);
                let ev = decode_event(
                    r.get(0).map_err(get)?,
                    &r.get::<_, String>(1).map_err(get)?,
                    &r.get::<_, String>(2).map_err(get)?,
                    r.get(3).map_err(get)?,
                    &r.get::<_, String>(4).map_err(get)?,
                    &r.get::<_, String>(5).map_err(get)?,
                )?;
                if keep(&ev) {
                    best = Some(ev);
                    break;
                }
            }
        }
        Ok(best)
    }

    fn last_seq(&self) -> Result<u64, StoreError> {
        self.conn
            .prepare_cached("SELECT coalesce(max(seq), 0) FROM events")
            .and_then(|mut st| st.query_row([], |r| r.get::<_, i64>(0)))
            .map(|v| v as u64)
            .map_err(|e| self.err(e))
    }

    fn origin(&self) -> Result<Option<String>, StoreError> {
        self.conn
            .prepare_cached("SELECT seq, at FROM events ORDER BY seq LIMIT 1")
            .and_then(|mut st| {
                st.query_row([], |r| {
                    Ok(format!(
                        "{} {}",
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?
                    ))
                })
                .optional()
            })
            .map_err(|e| self.err(e))
    }

    fn changed_since(&self, seq: u64) -> Result<(Vec<TaskId>, u64), StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT seq, task FROM events WHERE seq > ?1 ORDER BY seq")
            .map_err(|e| self.err(e))?;
        let mut rows = stmt.query([seq as i64]).map_err(|e| self.err(e))?;
        let mut last = seq;
        let mut ids = std::collections::BTreeSet::new();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            last = r.get::<_, i64>(0).map_err(|e| self.err(e))? as u64;
            let task: String = r.get(1).map_err(|e| self.err(e))?;
            ids.insert(task);
        }
        let ids = ids
            .into_iter()
            .map(|t| {
                TaskId::new(&t).map_err(|e| StoreError::Decode {
                    what: format!("event of task {t}"),
                    detail: e.to_string(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok((ids, last))
    }

    fn commit(&self, batch: Batch) -> Result<Vec<Event>, StoreError> {
        self.same_file()?;
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
        // How many rows each tally key gains or loses in this batch.
        let mut tally: BTreeMap<TallyKey, i64> = BTreeMap::new();
        for ch in &batch.changes {
            let id = match (&ch.before, &ch.after) {
                (Some(t), _) | (None, Some(t)) => t.id().clone(),
                (None, None) => continue,
            };
            // The stored row's version and head columns.
            let stored: Option<(i64, [Value; HEAD_COLS.len()])> = tx
                .prepare_cached(STORED_ROW)
                .map_err(|e| self.err(e))?
                .query_row([id.as_str()], |r| {
                    let mut cols = [const { Value::Null }; HEAD_COLS.len()];
                    for (i, c) in cols.iter_mut().enumerate() {
                        *c = r.get(i + 1)?;
                    }
                    Ok((r.get(0)?, cols))
                })
                .optional()
                .map_err(|e| self.err(e))?;
            let expected = ch.before.as_ref().map_or(0, |t| t.version());
            let found = stored.as_ref().map_or(0, |(v, _)| *v as u64);
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
            if let Some((_, old)) = &stored {
                *tally.entry(tally_key(old)).or_insert(0) -= 1;
            }
            // The dependents index, when the dependencies change (index 7 of HEAD_COLS).
            let old_deps = stored.as_ref().map(|(_, old)| &old[DEPS_COL]);
            let new_deps = ch.after.as_ref().map(|t| &t.spec.depends_on);
            let same = match (old_deps, new_deps) {
                (Some(Value::Text(o)), Some(n)) => o
                    .split(' ')
                    .filter(|d| !d.is_empty())
                    .eq(n.iter().map(|d| d.as_str())),
                (None, Some(n)) => n.is_empty(),
                _ => false,
            };
            if !same {
                let deps = new_deps.map_or(&[][..], |d| &d[..]);
                self.write_dependents(&tx, &id, stored.is_some(), deps)?;
            }
            match &ch.after {
                Some(t) => {
                    let body =
                        serde_json::to_string(t).map_err(|e| StoreError::Db(e.to_string()))?;
                    let new = head_values(t);
                    *tally.entry(tally_key(&new)).or_insert(0) += 1;
                    match &stored {
                        None => tx
                            .prepare_cached(
                                "INSERT INTO tasks (id, version, body, status, parent, ord, passes,
                                   attempts, max_attempts, title, deps, active)
                                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                            )
                            .and_then(|mut st| {
                                let [a, b, c, d, e, f, g, h, i] = &new;
                                st.execute(params![
                                    t.id().as_str(),
                                    t.version() as i64,
                                    body,
                                    a,
                                    b,
                                    c,
                                    d,
                                    e,
                                    f,
                                    g,
                                    h,
                                    i
                                ])
                            }),
                        // Only the columns that change: an index none of whose columns
                        // is set is not rewritten (one WAL page fewer each).
                        Some((_, old)) => {
                            let mut sql = String::from("UPDATE tasks SET version = ?2, body = ?3");
                            let mut args: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(12);
                            let (id, version) = (t.id().as_str(), t.version() as i64);
                            args.extend([&id as &dyn rusqlite::ToSql, &version, &body]);
                            for ((col, o), n) in HEAD_COLS.iter().zip(old).zip(&new) {
                                if o != n {
                                    args.push(n);
                                    sql.push_str(&format!(", {col} = ?{}", args.len()));
                                }
                            }
                            sql.push_str(" WHERE id = ?1");
                            tx.prepare_cached(&sql)
                                .and_then(|mut st| st.execute(args.as_slice()))
                        }
                    }
                    .map_err(|e| self.err(e))?;
                }
                None => {
                    tx.execute("DELETE FROM tasks WHERE id = ?1", [id.as_str()])
                        .map_err(|e| self.err(e))?;
                    tx.execute("DELETE FROM memory_items WHERE task = ?1", [id.as_str()])
                        .map_err(|e| self.err(e))?;
                    tx.execute("DELETE FROM memory_focus WHERE task = ?1", [id.as_str()])
                        .map_err(|e| self.err(e))?;
                }
            }
            failpoint::hit("after-row");
        }
        self.write_tally(&tx, &tally)?;
        for (id, append) in &batch.memory {
            self.append_memory(&tx, id, append)?;
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

    /// The same transaction as [`SqliteStore::commit`] with `synchronous=NORMAL`: SQLite
    /// appends the WAL frames without fsyncing them, and [`Store::sync`] flushes them.
    /// Everything else (a checkpoint, a restarted WAL's header) is still synced by
    /// SQLite in that mode, so the WAL stays consistent either way.
    fn commit_unsynced(&self, batch: Batch) -> Result<Vec<Event>, StoreError> {
        self.conn
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| self.err(e))?;
        let out = self.commit(batch);
        let restored = self.conn.pragma_update(None, "synchronous", "FULL");
        if out.is_ok() {
            self.unsynced.set(true);
        }
        restored.map_err(|e| self.err(e))?;
        out
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.sync_wal()
    }

    fn acquire_lease(
        &self,
        task: &TaskId,
        owner: &str,
        now: jiff::Timestamp,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        self.same_file()?;
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

    fn gone(&self) -> bool {
        self.same_file().is_err()
    }

    fn data_version(&self) -> Result<u64, StoreError> {
        // The long-running views poll this: a replaced file is said, not shown stale.
        self.same_file()?;
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
    use warden_core::model::{Status, TaskSpec, WorkflowKind};
    use warden_core::ops::{self, Ctx, Initial, TransitionInput};

    fn ctx() -> Ctx<'static> {
        Ctx::fixed(Actor::Person)
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
        ops::create(spec, Initial::NEW, &ctx()).unwrap()
    }

    /// A store file removed or replaced under a long-running process (a console, a
    /// supervisor) is said at its next write or poll: before, the writes went into the
    /// old file, the console showed it for good, and an approve merged in git while its
    /// record was lost.
    #[test]
    fn a_store_file_removed_or_replaced_under_it_is_refused() {
        let (dir, s) = temp_db();
        s.commit(Batch {
            changes: vec![created("a")],
            ..Default::default()
        })
        .unwrap();
        let path = dir.join("warden.db");
        let other = dir.join("other.db");
        drop(SqliteStore::open(&other, 5000).unwrap());
        std::fs::rename(&other, &path).unwrap();
        let write = || {
            s.commit(Batch {
                changes: vec![created("b")],
                ..Default::default()
            })
        };
        let e = write().unwrap_err().to_string();
        assert!(
            e.contains("was replaced since this process opened it"),
            "{e}"
        );
        let e = s.data_version().unwrap_err().to_string();
        assert!(e.contains("was replaced"), "{e}");
        std::fs::remove_file(&path).unwrap();
        let e = write().unwrap_err().to_string();
        assert!(
            e.contains("was removed since this process opened it"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The row read before a write names the head columns in [`HEAD_COLS`]'s order,
    /// which `tally_key` and the column-only update rely on.
    #[test]
    fn the_stored_row_reads_the_head_columns_in_order() {
        let query = STORED_ROW.split_whitespace().collect::<Vec<_>>().join(" ");
        let cols = format!("SELECT version, {} FROM tasks", HEAD_COLS.join(", "));
        assert!(query.starts_with(&cols), "{query}");
    }

    /// A batch of one change.
    fn one(change: ops::Change) -> Batch {
        Batch {
            changes: vec![change],
            ..Default::default()
        }
    }

    /// Writes a change as Warden did before the head columns (for upgrade tests).
    fn old_commit(conn: &Connection, ch: &ops::Change) {
        let t = ch.after.as_ref().unwrap();
        for ev in &ch.events {
            conn.execute(
                "INSERT INTO events (at, task, version, actor, type, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    ev.at.to_string(),
                    ev.task.as_str(),
                    ev.version as i64,
                    ev.actor.as_str(),
                    ev.kind.type_name(),
                    serde_json::to_string(&ev.kind).unwrap()
                ],
            )
            .unwrap();
        }
        conn.execute(
            "INSERT INTO tasks (id, status, version, body) VALUES (?1, ?2, ?3, ?4)",
            params![
                t.id().as_str(),
                t.status().as_str(),
                t.version() as i64,
                serde_json::to_string(t).unwrap()
            ],
        )
        .unwrap();
    }

    /// Commits batches of `batch` new tasks (`t{from}`, `t{from+1}`, …) until `done`
    /// says stop; returns how many tasks.
    fn create_until(
        s: &SqliteStore,
        from: usize,
        batch: usize,
        mut done: impl FnMut() -> bool,
    ) -> usize {
        let mut n = 0;
        while !done() {
            s.commit_unsynced(Batch {
                changes: (n..n + batch)
                    .map(|i| created(&format!("t{}", from + i)))
                    .collect(),
                ..Default::default()
            })
            .unwrap();
            n += batch;
        }
        n
    }

    /// The frames of the WAL's current run, as the next open reads them back: those after
    /// the header whose salts are the header's (a restarted WAL's header has new ones).
    fn frames_on_open(path: &Path) -> u64 {
        let wal = std::fs::read(wal_path(path)).unwrap();
        let Some(salts) = wal.get(16..24) else {
            return 0;
        };
        wal[32..]
            .chunks_exact(WAL_FRAME_BYTES as usize)
            .take_while(|f| &f[8..16] == salts)
            .count() as u64
    }

    /// Each short-lived connection leaves the WAL to the next, and SQLite never restarts
    /// it across processes: closing a connection whose commits left a long WAL checkpoints
    /// it and starts it again from its beginning, so the next open reads back only what
    /// was written since, and the file keeps its blocks for the next commits to
    /// overwrite. Nothing committed is lost on the way.
    #[test]
    fn a_long_wal_is_started_again_on_close() {
        let (dir, s) = temp_db();
        let path = dir.join("warden.db");
        let wal_len = || std::fs::metadata(wal_path(&path)).unwrap().len();
        let n = create_until(&s, 0, 1, || wal_len() > WAL_RESTART_BYTES);
        let before = frames_on_open(&path);
        assert!(before * WAL_FRAME_BYTES > WAL_RESTART_BYTES, "{before}");
        let len = wal_len();
        drop(s);
        assert_eq!(
            frames_on_open(&path),
            1,
            "only the commit that restarted it"
        );
        assert_eq!(wal_len(), len, "the file keeps its size");
        // A short WAL is left as it is.
        let s = SqliteStore::open(&path, 5000).unwrap();
        assert_eq!(s.list().unwrap().len(), n);
        create_until(&s, n, 1, || frames_on_open(&path) > 5);
        let frames = frames_on_open(&path);
        drop(s);
        assert_eq!(frames_on_open(&path), frames);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A WAL file grown big (by an import, say) is truncated on close rather than kept
    /// at that size; a long-lived connection checkpoints as it goes, as SQLite's own WAL
    /// hook (which Warden's replaces) would, so its WAL stays bounded.
    #[test]
    fn a_big_wal_is_truncated_and_a_long_lived_one_checkpointed() {
        let (dir, s) = temp_db();
        let path = dir.join("warden.db");
        let wal_len = || std::fs::metadata(wal_path(&path)).unwrap().len();
        // Commits until the hook has checkpointed twice (the next commit then writes the
        // WAL from its beginning, so its frame count falls) and the file is big.
        let (mut last, mut restarts, mut commits) = (0, 0, 0);
        let n = create_until(&s, 0, 20, || {
            let frames = WAL_FRAMES.with(|f| f.get());
            restarts += usize::from(frames < last);
            last = frames;
            commits += 1;
            (restarts >= 2 && wal_len() > WAL_TRUNCATE_BYTES) || commits > 2_000
        });
        assert!(
            restarts >= 2,
            "the WAL was never checkpointed in {commits} commits"
        );
        let bound = (AUTOCHECKPOINT_FRAMES as u64 + 64) * WAL_FRAME_BYTES;
        assert!(wal_len() < bound, "{} bytes after {n} commits", wal_len());
        drop(s);
        assert_eq!(wal_len(), 0);
        let s = SqliteStore::open(&path, 5000).unwrap();
        assert_eq!(s.list().unwrap().len(), n);
        drop(s);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A write that changes none of a task's head columns rewrites none of the task
    /// table's indexes: the WAL gets the task's row and the event with its two indexes.
    #[test]
    fn a_write_that_changes_no_head_column_rewrites_no_task_index() {
        let (dir, s) = temp_db();
        let path = dir.join("warden.db");
        s.commit(one(created("a"))).unwrap();
        let frames = || (std::fs::metadata(wal_path(&path)).unwrap().len() - 32) / (24 + 4096);
        let t = s.get(&TaskId::new("a").unwrap()).unwrap().unwrap();
        let before = frames();
        let ch = ops::record(&t, vec![EventKind::WorktreeReset], &ctx()).unwrap();
        assert_eq!(ch.after.as_ref().unwrap().head(), t.head());
        s.commit(one(ch)).unwrap();
        assert_eq!(
            frames() - before,
            4,
            "the row, the event and its two indexes"
        );
        assert_eq!(s.tally().unwrap(), s.recount().unwrap());
        drop(s);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// An unsynced commit is visible to other connections at once, waits for `sync` to
    /// be flushed, and leaves later commits fully synced.
    #[test]
    fn an_unsynced_commit_is_visible_at_once_and_flushed_by_sync() {
        let (dir, s) = temp_db();
        let synchronous = |s: &SqliteStore| -> i64 {
            s.conn
                .pragma_query_value(None, "synchronous", |r| r.get(0))
                .unwrap()
        };
        s.commit_unsynced(one(created("a"))).unwrap();
        assert!(s.unsynced.get(), "the flush is pending");
        assert_eq!(synchronous(&s), 2, "later commits are FULL again");
        // Other connections see it before the flush: the next writer need not wait.
        let other = SqliteStore::open(&dir.join("warden.db"), 5000).unwrap();
        assert!(other.get(&TaskId::new("a").unwrap()).unwrap().is_some());
        s.sync().unwrap();
        assert!(!s.unsynced.get());
        // A refused commit leaves nothing pending and FULL restored.
        let err = s.commit_unsynced(one(created("a")));
        assert!(matches!(err, Err(StoreError::Conflict { .. })), "{err:?}");
        assert!(!s.unsynced.get());
        assert_eq!(synchronous(&s), 2);
        drop((s, other));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn version_2_memory_rows_become_items_in_order() {
        let (dir, s) = temp_db();
        let path = dir.join("warden.db");
        drop(s);
        std::fs::remove_file(&path).unwrap();
        let _ = std::fs::remove_file(wal_path(&path));
        let old = crate::memory_rows::migration_sample();
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(MIGRATIONS[0].sql()).unwrap();
            c.execute_batch(MIGRATIONS[1].sql()).unwrap();
            c.pragma_update(None, "user_version", 2).unwrap();
            let body = serde_json::to_string(&old).unwrap();
            c.execute(
                "INSERT INTO memory (task, body) VALUES ('a', ?1), ('b', ?2)",
                params![body, serde_json::to_string(&Memory::default()).unwrap()],
            )
            .unwrap();
        }
        let s = SqliteStore::open(&path, 5000).unwrap();
        crate::memory_rows::check_migrated(&s);
        drop(s);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn version_3_rows_are_rebuilt_from_the_log() {
        let (dir, s) = temp_db();
        let path = dir.join("warden.db");
        drop(s);
        std::fs::remove_file(&path).unwrap();
        let _ = std::fs::remove_file(wal_path(&path));
        {
            let c = Connection::open(&path).unwrap();
            for m in &MIGRATIONS[..3] {
                c.execute_batch(m.sql()).unwrap();
            }
            c.pragma_update(None, "user_version", 3).unwrap();
            drop(c);
            let s3 = SqliteStore {
                conn: Connection::open(&path).unwrap(),
                path: path.clone(),
                unsynced: std::cell::Cell::new(false),
                file: None,
            };
            old_commit(&s3.conn, &created("a"));
            // A row the old fold wrote differently from today's.
            s3.conn
                .execute(
                    "UPDATE tasks SET body = replace(body, '\"status\":\"pending\"', '\"status\":\"pending\",\"passes\":true')",
                    [],
                )
                .unwrap();
            assert!(
                s3.get(&TaskId::new("a").unwrap())
                    .unwrap()
                    .unwrap()
                    .passes()
            );
        }
        let s = SqliteStore::open(&path, 5000).unwrap();
        let t = s.get(&TaskId::new("a").unwrap()).unwrap().unwrap();
        let replayed = warden_core::event::replay(&s.events(None).unwrap()).unwrap();
        assert_eq!(
            Some(&t),
            replayed.get(t.id()),
            "the row is the log's fold again"
        );
        assert!(!t.passes());
        drop(s);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A database from before the head columns gets them, their indexes, the tally and
    /// the dependents, all computed from the stored tasks.
    #[test]
    fn version_4_rows_get_their_heads_and_tally() {
        let (dir, s) = temp_db();
        let path = dir.join("warden.db");
        drop(s);
        std::fs::remove_file(&path).unwrap();
        let _ = std::fs::remove_file(wal_path(&path));
        {
            let c = Connection::open(&path).unwrap();
            for m in &MIGRATIONS[..3] {
                c.execute_batch(m.sql()).unwrap();
            }
            c.pragma_update(None, "user_version", 4).unwrap();
            let mut g = TaskSpec::new(TaskId::new("g").unwrap(), WorkflowKind::Review, 3);
            g.title = "A group".into();
            old_commit(&c, &ops::create(g, Initial::NEW, &ctx()).unwrap());
            for (id, deps) in [("a", vec![]), ("b", vec!["a"])] {
                let mut spec = TaskSpec::new(TaskId::new(id).unwrap(), WorkflowKind::Review, 5);
                spec.parent = Some(TaskId::new("g").unwrap());
                spec.order = 7;
                spec.depends_on = deps.into_iter().map(|d| TaskId::new(d).unwrap()).collect();
                old_commit(&c, &ops::create(spec, Initial::NEW, &ctx()).unwrap());
            }
        }
        let s = SqliteStore::open(&path, 5000).unwrap();
        let tasks = s.list().unwrap();
        assert_eq!(
            s.all_heads().unwrap(),
            tasks.iter().map(|t| t.head()).collect::<Vec<_>>()
        );
        assert_eq!(s.tally().unwrap(), s.recount().unwrap());
        assert_eq!(s.tally().unwrap().len(), 2, "the root and g's children");
        assert_eq!(s.children(&TaskId::new("g").unwrap()).unwrap().len(), 2);
        // …and the index of dependents, filled from the stored dependencies.
        let of_a: Vec<TaskId> = s
            .dependents(&[TaskId::new("a").unwrap()])
            .unwrap()
            .into_iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(of_a, [TaskId::new("b").unwrap()]);
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
            c.execute_batch(MIGRATIONS[0].sql()).unwrap();
            c.pragma_update(None, "user_version", 1).unwrap();
            drop(c);
            let s1 = SqliteStore {
                conn: Connection::open(&path).unwrap(),
                path: path.clone(),
                unsynced: std::cell::Cell::new(false),
                file: None,
            };
            for id in ["a", "b"] {
                old_commit(&s1.conn, &created(id));
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
        let evs = s.commit(one(created("c"))).unwrap();
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
        let evs = s.commit(one(ch.clone())).unwrap();
        assert_eq!(evs.len(), 1);
        assert!(evs[0].seq > 0);
        let t = s.get(&TaskId::new("a").unwrap()).unwrap().unwrap();
        assert_eq!(Some(&t), ch.after.as_ref());
        // Creating again conflicts.
        let e = s.commit(one(created("a"))).unwrap_err();
        assert_eq!(e.code(), warden_core::failure::ExitCode::Conflict);
        // A change computed from a stale version conflicts and writes nothing.
        let w = ops::transition(&t, Status::Working, &TransitionInput::default(), &ctx()).unwrap();
        s.commit(one(w.clone())).unwrap();
        let e = s.commit(one(w)).unwrap_err();
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
        assert_eq!(e.code(), warden_core::failure::ExitCode::Internal, "{e}");
        assert!(e.to_string().contains("damaged"), "{e}");
        // `warden check` opens the store too: the way on is outside Warden.
        assert!(
            !e.to_string().contains("warden check") && e.to_string().contains(".recover"),
            "{e}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
