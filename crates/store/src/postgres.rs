//! The PostgreSQL store, for runners on many machines sharing one database. The same
//! schema and semantics as SQLite: a commit is one transaction that locks its task rows
//! (`FOR UPDATE`, in id order), checks their versions and the writer's lease, appends the
//! events, bumps a change counter and `NOTIFY`s listeners; claims skip the task rows
//! another claimer is deciding on (`FOR UPDATE SKIP LOCKED`).
//!
//! Lock order, everywhere: task rows, then the lease row, then the change counter. The
//! counter is taken last and held to the commit, so event sequence numbers are handed
//! out in commit order and a reader never sees a gap that fills later.

use std::cell::{Cell, RefCell, RefMut};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, GenericClient, NoTls, Statement};
use warden_core::event::Event;
use warden_core::head::TaskHead;
use warden_core::memory::Memory;
use warden_core::model::{Status, Task, TaskId};

use crate::Migration;
use crate::memory_rows::{AllMemory, push_item};
use crate::{Batch, HeadColumns, Lease, Store, StoreError, Tally, decode_head, redact_url};

/// Schema migrations, applied in order; `warden_schema` holds the numbers applied.
const MIGRATIONS: &[Migration] = &[
    // 1: tasks, events, memory, idempotency keys, leases, and the change counter.
    // Text keys use the "C" collation so rows sort by bytes, as SQLite sorts them.
    Migration::Sql(
        "CREATE TABLE tasks (
        id text COLLATE \"C\" PRIMARY KEY,
        status text NOT NULL,
        version bigint NOT NULL,
        body text NOT NULL
    );
    CREATE TABLE events (
        seq bigserial PRIMARY KEY,
        at text NOT NULL,
        task text COLLATE \"C\" NOT NULL,
        version bigint NOT NULL,
        actor text NOT NULL,
        type text NOT NULL,
        body text NOT NULL
    );
    CREATE INDEX events_by_task ON events (task, seq);
    CREATE TABLE memory (
        task text COLLATE \"C\" PRIMARY KEY,
        body text NOT NULL
    );
    CREATE TABLE requests (
        key text PRIMARY KEY,
        at text NOT NULL,
        response text NOT NULL
    );
    CREATE TABLE leases (
        task text COLLATE \"C\" PRIMARY KEY,
        owner text NOT NULL,
        epoch bigint NOT NULL,
        expires_us bigint NOT NULL
    );
    CREATE TABLE changes (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        version bigint NOT NULL
    );
    INSERT INTO changes (version) VALUES (0);",
    ),
    // 2: memory as one row per item (as SQLite's migration 3): a merge inserts its
    // items instead of rewriting the whole memory.
    Migration::Sql(
        "CREATE TABLE memory_items (
        task text COLLATE \"C\" NOT NULL,
        list integer NOT NULL,
        seq bigint NOT NULL,
        text text NOT NULL,
        PRIMARY KEY (task, list, seq)
    );
    CREATE TABLE memory_focus (
        task text COLLATE \"C\" PRIMARY KEY,
        text text NOT NULL
    );
    INSERT INTO memory_items (task, list, seq, text)
        SELECT m.task, l.list, j.ord - 1, j.value
        FROM memory m
        CROSS JOIN (VALUES (0, 'goals'), (1, 'constraints'), (2, 'decisions'),
                           (3, 'hypotheses'), (4, 'history'), (5, 'open_issues')) AS l (list, name)
        CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(m.body::jsonb -> l.name, '[]'::jsonb))
            WITH ORDINALITY AS j (value, ord);
    INSERT INTO memory_focus (task, text)
        SELECT task, coalesce(body::jsonb ->> 'next_focus', '') FROM memory;
    DROP TABLE memory;",
    ),
    // 3: the rows rebuilt from the log because the fold changed (as SQLite's 4).
    Migration::Refold,
    // 4-6: the head columns, filled, their indexes and the tally (as SQLite's 5-7; the
    // tally is kept by one trigger function; it is written only under the change
    // counter's lock, which every commit holds, so its rows never deadlock).
    Migration::Sql(
        "ALTER TABLE tasks
        ADD COLUMN parent text COLLATE \"C\",
        ADD COLUMN ord bigint NOT NULL DEFAULT 0,
        ADD COLUMN passes boolean NOT NULL DEFAULT false,
        ADD COLUMN attempts bigint NOT NULL DEFAULT 0,
        ADD COLUMN max_attempts bigint NOT NULL DEFAULT 0,
        ADD COLUMN title text NOT NULL DEFAULT '',
        ADD COLUMN deps text NOT NULL DEFAULT '',
        ADD COLUMN active boolean NOT NULL DEFAULT false;",
    ),
    Migration::Heads,
    Migration::Sql(
        "CREATE INDEX tasks_tree ON tasks (parent, ord, id) INCLUDE (status, passes);
    CREATE INDEX tasks_by_status ON tasks (status, id);
    CREATE INDEX tasks_active ON tasks (id) WHERE active;
    CREATE INDEX events_by_type ON events (type, seq);
    CREATE TABLE tally (
        parent text COLLATE \"C\" NOT NULL,
        status text NOT NULL,
        passes boolean NOT NULL,
        n bigint NOT NULL,
        PRIMARY KEY (parent, status, passes)
    );
    INSERT INTO tally (parent, status, passes, n)
        SELECT coalesce(parent, ''), status, passes, count(*) FROM tasks GROUP BY 1, 2, 3;
    CREATE FUNCTION warden_tally() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            UPDATE tally SET n = n - 1
                WHERE parent = coalesce(OLD.parent, '') AND status = OLD.status
                  AND passes = OLD.passes;
            DELETE FROM tally WHERE n = 0 AND parent = coalesce(OLD.parent, '')
                AND status = OLD.status AND passes = OLD.passes;
        END IF;
        IF TG_OP IN ('UPDATE', 'INSERT') THEN
            INSERT INTO tally (parent, status, passes, n)
                VALUES (coalesce(NEW.parent, ''), NEW.status, NEW.passes, 1)
                ON CONFLICT (parent, status, passes) DO UPDATE SET n = tally.n + 1;
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER tally_rows AFTER INSERT OR DELETE ON tasks
        FOR EACH ROW EXECUTE FUNCTION warden_tally();
    CREATE TRIGGER tally_update AFTER UPDATE OF parent, status, passes ON tasks
        FOR EACH ROW WHEN (OLD.parent IS DISTINCT FROM NEW.parent
            OR OLD.status <> NEW.status OR OLD.passes <> NEW.passes)
        EXECUTE FUNCTION warden_tally();",
    ),
    // 7: the dependencies the other way round (as SQLite's 9), kept by a trigger: which
    // tasks name a task in their `depends_on`.
    Migration::Sql(
        "CREATE TABLE dependents (
        task text COLLATE \"C\" NOT NULL,
        dep text COLLATE \"C\" NOT NULL,
        PRIMARY KEY (task, dep)
    );
    CREATE INDEX dependents_of ON dependents (dep, task);
    INSERT INTO dependents (dep, task)
        SELECT DISTINCT d, id FROM tasks, unnest(string_to_array(deps, ' ')) AS d
        WHERE d <> '';
    CREATE FUNCTION warden_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'UPDATE' AND OLD.deps = NEW.deps THEN
            RETURN NULL;
        END IF;
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            DELETE FROM dependents WHERE task = OLD.id;
        END IF;
        IF TG_OP IN ('UPDATE', 'INSERT') THEN
            INSERT INTO dependents (dep, task)
                SELECT DISTINCT d, NEW.id FROM unnest(string_to_array(NEW.deps, ' ')) AS d
                WHERE d <> ''
                ON CONFLICT DO NOTHING;
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER dependents_rows AFTER INSERT OR DELETE OR UPDATE OF deps ON tasks
        FOR EACH ROW EXECUTE FUNCTION warden_dependents();",
    ),
    // 8: new rows counted once per statement. A row trigger added 1 to the same tally
    // row for every task a plan import created, each a new version of that row in one
    // transaction, and each update walked the versions before it: 100,000 tasks took
    // minutes, growing with the square of the count.
    Migration::Sql(
        "DROP TRIGGER tally_rows ON tasks;
    CREATE TRIGGER tally_rows AFTER DELETE ON tasks
        FOR EACH ROW EXECUTE FUNCTION warden_tally();
    CREATE FUNCTION warden_tally_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO tally (parent, status, passes, n)
            SELECT coalesce(parent, ''), status, passes, count(*) FROM new_rows
            GROUP BY 1, 2, 3
            ON CONFLICT (parent, status, passes) DO UPDATE SET n = tally.n + EXCLUDED.n;
        RETURN NULL;
    END $$;
    CREATE TRIGGER tally_inserted AFTER INSERT ON tasks
        REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION warden_tally_inserted();",
    ),
];

/// Where [`Migration::Heads`] sits: a refold after it writes the head columns too.
fn heads_at() -> usize {
    MIGRATIONS
        .iter()
        .position(|m| matches!(m, Migration::Heads))
        .unwrap_or(usize::MAX)
}

/// The `LISTEN`/`NOTIFY` channel every commit signals.
pub const CHANNEL: &str = "warden_changes";

/// The advisory lock that serialises migrations between processes ("WARDEN").
const MIGRATION_LOCK: i64 = 0x5741_5244_454e;

/// A PostgreSQL-backed [`Store`]: one connection, used by one thread.
pub struct PgStore {
    client: RefCell<Client>,
    config: postgres::Config,
    lock_timeout_ms: u64,
    /// The URL with its password replaced, for messages.
    shown: String,
    /// The password, scrubbed from every message.
    password: Option<String>,
    listening: Cell<bool>,
    statements: RefCell<HashMap<&'static str, Statement>>,
    /// When the connection was last asked for.
    last_used: Cell<Instant>,
    /// A connection unused this long is checked before its next use.
    idle_check: Duration,
}

/// A connection unused this long is checked before its next use (see `PgStore::client`):
/// a process that works keeps its connection busy and never pays for the check.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// How long that check waits for the server's answer.
const VALID_TIMEOUT: Duration = Duration::from_secs(5);

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("url", &self.shown).finish()
    }
}

/// Parses a `postgres://` or `postgresql://` URL (libpq forms, including
/// `?host=/socket/dir`), filling what libpq would take from the environment: the user
/// (`PGUSER`, `USER`), the password (`PGPASSWORD`) and the host (`PGHOST`, else the
/// Debian socket directory).
pub fn parse_url(url: &str) -> Result<postgres::Config, String> {
    let mut config: postgres::Config = url.parse().map_err(|e: postgres::Error| {
        format!(
            "store url {} is not a PostgreSQL URL ({}); use postgres://USER[:PASSWORD]@HOST[:PORT]/DB or postgresql://USER@/DB?host=/socket/dir",
            redact_url(url),
            scrub(&e.to_string(), password_of(url).as_deref())
        )
    })?;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if config.get_user().is_none() {
        let user = env("PGUSER")
            .or_else(|| env("USER"))
            .unwrap_or_else(|| "postgres".into());
        config.user(&user);
    }
    if config.get_password().is_none()
        && let Some(pw) = crate::config::credential("PGPASSWORD")
    {
        config.password(pw);
    }
    if config.get_hosts().is_empty() {
        let host = env("PGHOST").unwrap_or_else(|| "/var/run/postgresql".into());
        config.host(&host);
    }
    config.application_name("warden");
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    Ok(config)
}

/// The password a URL carries (user info or `password=`), to scrub from messages.
fn password_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
    let from_userinfo = main
        .rsplit_once('@')
        .and_then(|(ui, _)| ui.split_once(':'))
        .map(|(_, pw)| pw.to_owned());
    from_userinfo.or_else(|| {
        query.split('&').find_map(|kv| {
            kv.split_once('=')
                .filter(|(k, _)| k.eq_ignore_ascii_case("password"))
                .map(|(_, v)| v.to_owned())
        })
    })
}

/// Removes a password from a message.
fn scrub(msg: &str, password: Option<&str>) -> String {
    match password {
        Some(pw) if !pw.is_empty() => msg.replace(pw, "***"),
        _ => msg.to_owned(),
    }
}

fn micros(t: jiff::Timestamp) -> i64 {
    t.as_microsecond()
}

fn from_micros(us: i64, what: &str) -> Result<jiff::Timestamp, StoreError> {
    jiff::Timestamp::from_microsecond(us).map_err(|e| StoreError::Decode {
        what: what.to_owned(),
        detail: e.to_string(),
    })
}

fn json<T: serde::Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Db(e.to_string()))
}

impl PgStore {
    /// Connects (creating and migrating the schema if needed). `lock_timeout_ms` bounds
    /// how long a write waits for a row another process holds (then exit 4, as SQLite's
    /// busy timeout).
    pub fn open(url: &str, lock_timeout_ms: u64) -> Result<PgStore, StoreError> {
        let password = password_of(url);
        let shown = redact_url(url);
        let config = parse_url(url).map_err(StoreError::Db)?;
        let client = connect(&config, lock_timeout_ms, &shown, password.as_deref())?;
        let store = PgStore {
            client: RefCell::new(client),
            config,
            lock_timeout_ms,
            shown,
            password,
            listening: Cell::new(false),
            statements: RefCell::new(HashMap::new()),
            last_used: Cell::new(Instant::now()),
            idle_check: IDLE_CHECK,
        };
        store.migrate()?;
        Ok(store)
    }

    /// The connection, reconnected first when the server closed it. A connection idle
    /// for [`IDLE_CHECK`] is asked first whether it still works (an empty query, one
    /// round trip): a server that restarted, failed over or ended this session
    /// (`pg_terminate_backend`) meanwhile said so on a socket nobody read, and a
    /// long-lived process (`warden run`, the console) reconnects here instead of failing
    /// its next request with the closed connection's error.
    fn client(&self) -> Result<RefMut<'_, Client>, StoreError> {
        let mut c = self.client.borrow_mut();
        let idle = self.last_used.replace(Instant::now()).elapsed() >= self.idle_check;
        if c.is_closed() || idle && c.is_valid(VALID_TIMEOUT).is_err() {
            *c = connect(
                &self.config,
                self.lock_timeout_ms,
                &self.shown,
                self.password.as_deref(),
            )?;
            self.statements.borrow_mut().clear();
            self.listening.set(false);
        }
        Ok(c)
    }

    /// Checks the connection before every use, idle or not (tests of the reconnection,
    /// which then need not wait out [`IDLE_CHECK`]).
    #[cfg(feature = "testing")]
    pub fn check_before_every_use(&mut self) {
        self.idle_check = Duration::ZERO;
    }

    /// A prepared statement, prepared once per connection.
    fn stmt<C: GenericClient>(
        &self,
        c: &mut C,
        sql: &'static str,
    ) -> Result<Statement, StoreError> {
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let s = c.prepare(sql).map_err(|e| self.err(e))?;
        self.statements.borrow_mut().insert(sql, s.clone());
        Ok(s)
    }

    fn err(&self, e: postgres::Error) -> StoreError {
        map_err(e, &self.shown, self.password.as_deref())
    }

    fn migrate(&self) -> Result<(), StoreError> {
        let known = MIGRATIONS.len() as i64;
        let mut c = self.client()?;
        // The quick path: already current (a failed query outside a transaction is harmless).
        if let Ok(row) = c.query_one("SELECT max(version) FROM warden_schema", &[])
            && row.get::<_, Option<i32>>(0).map(i64::from) == Some(known)
        {
            return Ok(());
        }
        let mut tx = c.transaction().map_err(|e| self.err(e))?;
        tx.query("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .map_err(|e| self.err(e))?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS warden_schema (version integer PRIMARY KEY)")
            .map_err(|e| self.err(e))?;
        let current: i64 = tx
            .query_one("SELECT max(version) FROM warden_schema", &[])
            .map_err(|e| self.err(e))?
            .get::<_, Option<i32>>(0)
            .map_or(0, i64::from);
        if current > known {
            return Err(StoreError::TooNew {
                found: current,
                known,
            });
        }
        for (i, m) in MIGRATIONS.iter().enumerate().skip(current as usize) {
            match m {
                // A first migration that meets a table of its name is in a database
                // another program uses (Warden's own always has its version rows).
                Migration::Sql(sql) => tx.batch_execute(sql).map_err(|e| {
                    if current == 0 && e.code() == Some(&SqlState::DUPLICATE_TABLE) {
                        StoreError::Db(format!(
                            "the PostgreSQL store {} already has tables of another program ({}); give Warden a database of its own, or a schema of its own (CREATE SCHEMA warden, then add options=-csearch_path%3Dwarden to the URL's query)",
                            self.shown,
                            error_text(&e)
                        ))
                    } else {
                        self.err(e)
                    }
                })?,
                Migration::Refold => {
                    let rows = tx
                        .query(
                            "SELECT seq, at, task, version, actor, body FROM events ORDER BY seq",
                            &[],
                        )
                        .map_err(|e| self.err(e))?;
                    let events = rows
                        .iter()
                        .map(|r| {
                            crate::sqlite::decode_event(
                                r.get(0),
                                r.get(1),
                                r.get(2),
                                r.get(3),
                                r.get(4),
                                r.get(5),
                            )
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    for t in crate::refolded(&events) {
                        let body =
                            serde_json::to_string(&t).map_err(|e| StoreError::Db(e.to_string()))?;
                        tx.execute(
                            "UPDATE tasks SET status = $2, version = $3, body = $4 WHERE id = $1",
                            &[
                                &t.id().as_str(),
                                &t.status().as_str(),
                                &(t.version() as i64),
                                &body,
                            ],
                        )
                        .map_err(|e| self.err(e))?;
                        if i > heads_at() {
                            self.write_heads(&mut tx, &t)?;
                        }
                    }
                }
                Migration::Heads => {
                    let rows = tx
                        .query("SELECT id, body FROM tasks", &[])
                        .map_err(|e| self.err(e))?;
                    for r in rows {
                        let t = self.decode_task(r.get(0), r.get(1))?;
                        self.write_heads(&mut tx, &t)?;
                    }
                }
            }
            tx.execute(
                "INSERT INTO warden_schema (version) VALUES ($1)",
                &[&(i as i32 + 1)],
            )
            .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))
    }

    /// Writes a task's head columns (see [`HeadColumns`]) into its row.
    /// The events and rows of `changes`, every one a new task (see `commit`): each
    /// table in one statement over arrays. The events' sequence numbers are handed out
    /// in the arrays' order (`ORDER BY n`), so the returned ones, sorted, are theirs. A
    /// task some other commit created meanwhile is a conflict, as on the one-by-one path.
    fn create_all(
        &self,
        tx: &mut postgres::Transaction<'_>,
        changes: &[warden_core::ops::Change],
    ) -> Result<Vec<Event>, StoreError> {
        let events: Vec<&Event> = changes.iter().flat_map(|ch| &ch.events).collect();
        let col = |f: &dyn Fn(&Event) -> String| events.iter().map(|e| f(e)).collect::<Vec<_>>();
        let bodies = events
            .iter()
            .map(|e| json(&e.kind))
            .collect::<Result<Vec<_>, _>>()?;
        let mut seqs: Vec<i64> = tx
            .query(
                "INSERT INTO events (at, task, version, actor, type, body)
                 SELECT a, t, v, ac, ty, b
                 FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::text[],
                             $6::text[]) WITH ORDINALITY AS u(a, t, v, ac, ty, b, n)
                 ORDER BY n
                 RETURNING seq",
                &[
                    &col(&|e| e.at.to_string()),
                    &col(&|e| e.task.to_string()),
                    &events.iter().map(|e| e.version as i64).collect::<Vec<_>>(),
                    &col(&|e| e.actor.as_str().to_owned()),
                    &col(&|e| e.kind.type_name().to_owned()),
                    &bodies,
                ],
            )
            .map_err(|e| self.err(e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        seqs.sort_unstable();
        let tasks: Vec<&Task> = changes.iter().filter_map(|ch| ch.after.as_ref()).collect();
        let heads: Vec<HeadColumns> = tasks.iter().map(|t| HeadColumns::of(t)).collect();
        let rows = tasks
            .iter()
            .map(|t| json(*t))
            .collect::<Result<Vec<_>, _>>()?;
        let inserted: std::collections::HashSet<String> = tx
            .query(
                "INSERT INTO tasks (id, status, version, body, parent, ord, passes, attempts,
                   max_attempts, title, deps, active)
                 SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[],
                   $5::text[], $6::int8[], $7::bool[], $8::int8[], $9::int8[], $10::text[],
                   $11::text[], $12::bool[])
                 ON CONFLICT (id) DO NOTHING
                 RETURNING id",
                &[
                    &tasks.iter().map(|t| t.id().to_string()).collect::<Vec<_>>(),
                    &tasks
                        .iter()
                        .map(|t| t.status().as_str())
                        .collect::<Vec<_>>(),
                    &tasks.iter().map(|t| t.version() as i64).collect::<Vec<_>>(),
                    &rows,
                    &heads.iter().map(|h| h.parent.clone()).collect::<Vec<_>>(),
                    &heads.iter().map(|h| h.order).collect::<Vec<_>>(),
                    &heads.iter().map(|h| h.passes).collect::<Vec<_>>(),
                    &heads.iter().map(|h| h.attempts).collect::<Vec<_>>(),
                    &heads.iter().map(|h| h.max_attempts).collect::<Vec<_>>(),
                    &heads.iter().map(|h| h.title.clone()).collect::<Vec<_>>(),
                    &heads.iter().map(|h| h.deps.clone()).collect::<Vec<_>>(),
                    &heads.iter().map(|h| h.active).collect::<Vec<_>>(),
                ],
            )
            .map_err(|e| self.err(e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        // One created by a concurrent batch that committed meanwhile.
        if let Some(t) = tasks.iter().find(|t| !inserted.contains(t.id().as_str())) {
            let found: i64 = tx
                .query_one(
                    "SELECT version FROM tasks WHERE id = $1",
                    &[&t.id().as_str()],
                )
                .map_err(|e| self.err(e))?
                .get(0);
            return Err(StoreError::Conflict {
                task: t.id().to_string(),
                expected: 0,
                found: found as u64,
            });
        }
        Ok(events
            .into_iter()
            .zip(seqs)
            .map(|(e, seq)| Event {
                seq: seq as u64,
                ..e.clone()
            })
            .collect())
    }

    fn write_heads(&self, tx: &mut postgres::Transaction<'_>, t: &Task) -> Result<(), StoreError> {
        let h = HeadColumns::of(t);
        tx.execute(
            "UPDATE tasks SET parent = $2, ord = $3, passes = $4, attempts = $5,
               max_attempts = $6, title = $7, deps = $8, active = $9 WHERE id = $1",
            &[
                &t.id().as_str(),
                &h.parent,
                &h.order,
                &h.passes,
                &h.attempts,
                &h.max_attempts,
                &h.title,
                &h.deps,
                &h.active,
            ],
        )
        .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Tasks decoded from `(id, body)` rows of a prepared query.
    fn query_tasks(
        &self,
        sql: &'static str,
        p: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Task>, StoreError> {
        let mut c = self.client()?;
        let q = self.stmt(&mut *c, sql)?;
        let rows = c.query(&q, p).map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| crate::decode_task(r.get(0), r.get(1)))
            .collect()
    }

    /// Heads from rows of a prepared query that selects [`HEAD_COLUMNS`].
    fn query_heads(
        &self,
        sql: &'static str,
        p: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<TaskHead>, StoreError> {
        let mut c = self.client()?;
        let q = self.stmt(&mut *c, sql)?;
        let rows = c.query(&q, p).map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| {
                decode_head(
                    r.get(0),
                    r.get(1),
                    r.get(2),
                    r.get(3),
                    r.get(4),
                    r.get(5),
                    r.get(6),
                    r.get(7),
                    r.get(8),
                    r.get(9),
                )
            })
            .collect()
    }

    fn query_tally(&self, sql: &'static str) -> Result<Vec<Tally>, StoreError> {
        let mut c = self.client()?;
        let q = self.stmt(&mut *c, sql)?;
        let rows = c.query(&q, &[]).map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| crate::tally_row(r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect()
    }

    fn query_events(
        &self,
        sql: &'static str,
        p: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Event>, StoreError> {
        let mut c = self.client()?;
        let q = self.stmt(&mut *c, sql)?;
        let rows = c.query(&q, p).map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| {
                crate::sqlite::decode_event(
                    r.get(0),
                    r.get(1),
                    r.get(2),
                    r.get(3),
                    r.get(4),
                    r.get(5),
                )
            })
            .collect()
    }

    fn decode_task(&self, id: &str, body: &str) -> Result<Task, StoreError> {
        serde_json::from_str(body).map_err(|e| StoreError::Decode {
            what: format!("task {id}"),
            detail: e.to_string(),
        })
    }

    /// Takes or renews a lease inside a transaction, locking its row.
    fn acquire_in(
        &self,
        tx: &mut postgres::Transaction<'_>,
        task: &TaskId,
        owner: &str,
        now: jiff::Timestamp,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let expires_at = now
            .checked_add(jiff::SignedDuration::try_from(ttl).unwrap_or(jiff::SignedDuration::MAX))
            .unwrap_or(now);
        let exp_us = micros(expires_at);
        let sel = self.stmt(
            tx,
            "SELECT owner, epoch, expires_us FROM leases WHERE task = $1 FOR UPDATE",
        )?;
        let cur = tx
            .query_opt(&sel, &[&task.as_str()])
            .map_err(|e| self.err(e))?;
        let (epoch, taken_from) = match cur {
            None => {
                let ins = self.stmt(
                    tx,
                    "INSERT INTO leases (task, owner, epoch, expires_us) VALUES ($1, $2, 1, $3)
                     ON CONFLICT (task) DO NOTHING",
                )?;
                let n = tx
                    .execute(&ins, &[&task.as_str(), &owner, &exp_us])
                    .map_err(|e| self.err(e))?;
                if n == 0 {
                    // Another runner inserted it first.
                    return Ok(None);
                }
                return Ok(Some(Lease {
                    task: task.clone(),
                    owner: owner.to_owned(),
                    epoch: 1,
                    expires_at: from_micros(exp_us, "lease")?,
                    taken_from: None,
                }));
            }
            Some(row) => {
                let (o, e, exp): (String, i64, i64) = (row.get(0), row.get(1), row.get(2));
                if o == owner {
                    (e, None)
                } else if o.is_empty() {
                    // Released: a new holder, a new epoch.
                    (e + 1, None)
                } else if exp > micros(now) {
                    return Ok(None);
                } else {
                    (e + 1, Some(o))
                }
            }
        };
        let upd = self.stmt(
            tx,
            "UPDATE leases SET owner = $2, epoch = $3, expires_us = $4 WHERE task = $1",
        )?;
        tx.execute(&upd, &[&task.as_str(), &owner, &epoch, &exp_us])
            .map_err(|e| self.err(e))?;
        Ok(Some(Lease {
            task: task.clone(),
            owner: owner.to_owned(),
            epoch: epoch as u64,
            expires_at: from_micros(exp_us, "lease")?,
            taken_from,
        }))
    }

    /// Bumps the change counter and signals listeners (delivered at commit).
    fn changed(&self, tx: &mut postgres::Transaction<'_>) -> Result<(), StoreError> {
        let bump = self.stmt(tx, "UPDATE changes SET version = version + 1")?;
        tx.execute(&bump, &[]).map_err(|e| self.err(e))?;
        tx.batch_execute(&format!("NOTIFY {CHANNEL}"))
            .map_err(|e| self.err(e))
    }

    fn current_version(&self, c: &mut Client) -> Result<u64, StoreError> {
        let q = self.stmt(c, "SELECT version FROM changes")?;
        let row = c.query_one(&q, &[]).map_err(|e| self.err(e))?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    fn read_events(&self, task: Option<&TaskId>) -> Result<Vec<Event>, StoreError> {
        let mut c = self.client()?;
        let rows = match task {
            Some(id) => {
                let q = self.stmt(
                    &mut *c,
                    "SELECT seq, at, task, version, actor, body FROM events WHERE task = $1 ORDER BY seq",
                )?;
                c.query(&q, &[&id.as_str()])
            }
            None => {
                let q = self.stmt(
                    &mut *c,
                    "SELECT seq, at, task, version, actor, body FROM events ORDER BY seq",
                )?;
                c.query(&q, &[])
            }
        }
        .map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| {
                crate::sqlite::decode_event(
                    r.get(0),
                    r.get(1),
                    r.get(2),
                    r.get(3),
                    r.get(4),
                    r.get(5),
                )
            })
            .collect()
    }
}

fn connect(
    config: &postgres::Config,
    lock_timeout_ms: u64,
    shown: &str,
    password: Option<&str>,
) -> Result<Client, StoreError> {
    let mut client = config.connect(NoTls).map_err(|e| {
        StoreError::Db(format!(
            "cannot connect to the PostgreSQL store {shown}: {}; check that the server is running and that the URL, user and password are right",
            scrub(&error_text(&e), password)
        ))
    })?;
    client
        .batch_execute(&format!(
            "SET lock_timeout = {}; SET TIME ZONE 'UTC'",
            lock_timeout_ms.max(1)
        ))
        .map_err(|e| map_err(e, shown, password))?;
    Ok(client)
}

/// The message of an error with its causes (the server's own words for database errors).
fn error_text(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

/// Maps PostgreSQL errors onto the documented kinds: lock waits, deadlocks and
/// serialisation failures are "busy" (exit 4, safe to retry); the rest exit 5.
/// How many new tasks in one commit take the bulk path (`PgStore::create_all`).
const BULK_CREATE: usize = 64;

fn map_err(e: postgres::Error, shown: &str, password: Option<&str>) -> StoreError {
    if let Some(code) = e.code()
        && [
            SqlState::LOCK_NOT_AVAILABLE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::QUERY_CANCELED,
        ]
        .contains(code)
    {
        return StoreError::Busy;
    }
    let text = scrub(&error_text(&e), password);
    // The server ended the session (an administrator's pg_terminate_backend, a restart,
    // a crash) or the link failed: the same as a closed connection to the person.
    let ended = e.code().is_some_and(|c| {
        c.code().starts_with("08")
            || [
                SqlState::ADMIN_SHUTDOWN,
                SqlState::CRASH_SHUTDOWN,
                SqlState::CANNOT_CONNECT_NOW,
            ]
            .contains(c)
    });
    if e.is_closed() || ended {
        return StoreError::Db(format!(
            "the connection to the PostgreSQL store {shown} was lost ({text}); check the server and run the command again"
        ));
    }
    StoreError::Db(format!("PostgreSQL store {shown}: {text}"))
}

impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn get(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        let mut c = self.client()?;
        let q = self.stmt(&mut *c, "SELECT body FROM tasks WHERE id = $1")?;
        let row = c.query_opt(&q, &[&id.as_str()]).map_err(|e| self.err(e))?;
        row.map(|r| self.decode_task(id.as_str(), r.get(0)))
            .transpose()
    }

    fn list(&self) -> Result<Vec<Task>, StoreError> {
        self.query_tasks("SELECT id, body FROM tasks ORDER BY id", &[])
    }

    fn events(&self, task: Option<&TaskId>) -> Result<Vec<Event>, StoreError> {
        self.read_events(task)
    }

    fn task_columns(&self) -> Result<Vec<crate::TaskColumns>, StoreError> {
        let mut c = self.client()?;
        let rows = c
            .query(
                "SELECT id, status, version, body FROM tasks ORDER BY id",
                &[],
            )
            .map_err(|e| self.err(e))?;
        Ok(rows
            .iter()
            .map(|r| crate::TaskColumns {
                id: r.get(0),
                status: r.get(1),
                version: r.get(2),
                body: r.get(3),
            })
            .collect())
    }

    fn dependent_rows(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut c = self.client()?;
        let rows = c
            .query("SELECT task, dep FROM dependents ORDER BY task, dep", &[])
            .map_err(|e| self.err(e))?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect())
    }

    fn event_types(&self) -> Result<Vec<(u64, String)>, StoreError> {
        let mut c = self.client()?;
        let rows = c
            .query("SELECT seq, type FROM events ORDER BY seq", &[])
            .map_err(|e| self.err(e))?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, String>(1)))
            .collect())
    }

    fn memory(&self, id: &TaskId) -> Result<Option<Memory>, StoreError> {
        let mut c = self.client()?;
        let q = self.stmt(&mut *c, "SELECT text FROM memory_focus WHERE task = $1")?;
        let Some(row) = c.query_opt(&q, &[&id.as_str()]).map_err(|e| self.err(e))? else {
            return Ok(None);
        };
        let mut m = Memory {
            next_focus: row.get(0),
            ..Memory::default()
        };
        let q = self.stmt(
            &mut *c,
            "SELECT list, text FROM memory_items WHERE task = $1 ORDER BY list, seq",
        )?;
        for r in c.query(&q, &[&id.as_str()]).map_err(|e| self.err(e))? {
            push_item(&mut m, id.as_str(), i64::from(r.get::<_, i32>(0)), r.get(1))?;
        }
        Ok(Some(m))
    }

    fn all_memory(&self) -> Result<Vec<(TaskId, Memory)>, StoreError> {
        let mut c = self.client()?;
        let mut out = AllMemory::default();
        let q = self.stmt(&mut *c, "SELECT task, text FROM memory_focus")?;
        for r in c.query(&q, &[]).map_err(|e| self.err(e))? {
            out.focus(r.get(0), r.get(1));
        }
        let q = self.stmt(
            &mut *c,
            "SELECT task, list, text FROM memory_items ORDER BY task, list, seq",
        )?;
        for r in c.query(&q, &[]).map_err(|e| self.err(e))? {
            out.item(r.get(0), i64::from(r.get::<_, i32>(1)), r.get(2))?;
        }
        out.finish()
    }

    fn request(&self, key: &str) -> Result<Option<String>, StoreError> {
        let mut c = self.client()?;
        let q = self.stmt(&mut *c, "SELECT response FROM requests WHERE key = $1")?;
        let row = c.query_opt(&q, &[&key]).map_err(|e| self.err(e))?;
        Ok(row.map(|r| r.get(0)))
    }

    fn get_many(&self, ids: &[TaskId]) -> Result<Vec<Task>, StoreError> {
        let ids: Vec<&str> = ids.iter().map(|i| i.as_str()).collect();
        self.query_tasks(
            "SELECT id, body FROM tasks WHERE id = ANY($1) ORDER BY id",
            &[&ids],
        )
    }

    fn page(&self, after: Option<&TaskId>, limit: usize) -> Result<Vec<Task>, StoreError> {
        self.query_tasks(
            "SELECT id, body FROM tasks WHERE $1::text IS NULL OR id > $1 ORDER BY id LIMIT $2",
            &[&after.map(|a| a.as_str()), &(limit as i64)],
        )
    }

    fn with_status(&self, status: Status) -> Result<Vec<Task>, StoreError> {
        self.query_tasks(
            "SELECT id, body FROM tasks WHERE status = $1 ORDER BY id",
            &[&status.as_str()],
        )
    }

    fn active(&self) -> Result<Vec<Task>, StoreError> {
        self.query_tasks("SELECT id, body FROM tasks WHERE active ORDER BY id", &[])
    }

    fn heads(&self, ids: &[TaskId]) -> Result<Vec<TaskHead>, StoreError> {
        let ids: Vec<&str> = ids.iter().map(|i| i.as_str()).collect();
        self.query_heads(
            "SELECT id, parent, ord, status, passes, attempts, max_attempts, title, deps, active
             FROM tasks WHERE id = ANY($1) ORDER BY id",
            &[&ids],
        )
    }

    fn dependents(&self, ids: &[TaskId]) -> Result<Vec<TaskHead>, StoreError> {
        let ids: Vec<&str> = ids.iter().map(|i| i.as_str()).collect();
        self.query_heads(
            "SELECT id, parent, ord, status, passes, attempts, max_attempts, title, deps, active
             FROM tasks WHERE id IN (SELECT task FROM dependents WHERE dep = ANY($1))
             ORDER BY id",
            &[&ids],
        )
    }

    fn all_heads(&self) -> Result<Vec<TaskHead>, StoreError> {
        self.query_heads(
            "SELECT id, parent, ord, status, passes, attempts, max_attempts, title, deps, active
             FROM tasks ORDER BY id",
            &[],
        )
    }

    fn children(&self, id: &TaskId) -> Result<Vec<TaskHead>, StoreError> {
        self.query_heads(
            "SELECT id, parent, ord, status, passes, attempts, max_attempts, title, deps, active
             FROM tasks WHERE parent = $1 ORDER BY ord, id",
            &[&id.as_str()],
        )
    }

    fn child_ids(&self, id: &TaskId) -> Result<Vec<TaskId>, StoreError> {
        let mut c = self.client()?;
        let q = self.stmt(
            &mut *c,
            "SELECT id FROM tasks WHERE parent = $1 ORDER BY ord, id",
        )?;
        let rows = c.query(&q, &[&id.as_str()]).map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| crate::stored_id(r.get::<_, &str>(0)))
            .collect()
    }

    fn descendants(&self, id: &TaskId) -> Result<Vec<TaskHead>, StoreError> {
        self.query_heads(
            "WITH RECURSIVE below(id) AS (
               SELECT id FROM tasks WHERE parent = $1
               UNION SELECT t.id FROM tasks t JOIN below b ON t.parent = b.id)
             SELECT id, parent, ord, status, passes, attempts, max_attempts, title, deps, active
             FROM tasks WHERE id IN (SELECT id FROM below) ORDER BY id",
            &[&id.as_str()],
        )
    }

    fn tally(&self) -> Result<Vec<Tally>, StoreError> {
        self.query_tally("SELECT parent, status, passes, n FROM tally ORDER BY 1, 2, 3")
    }

    fn leaf_tally(&self) -> Result<Vec<Tally>, StoreError> {
        self.query_tally(
            "SELECT ''::text, status, passes, sum(n)::bigint FROM (
               SELECT status, passes, n FROM tally
               UNION ALL
               SELECT status, passes, -count(*) FROM tasks
               WHERE id IN (SELECT parent FROM tally) GROUP BY 1, 2) AS t
             GROUP BY 2, 3 HAVING sum(n) > 0 ORDER BY 2, 3",
        )
    }

    fn groups_among(&self, ids: &[TaskId]) -> Result<Vec<TaskId>, StoreError> {
        let mut c = self.client()?;
        let q = self.stmt(
            &mut *c,
            "SELECT DISTINCT parent FROM tally WHERE parent = ANY($1) ORDER BY 1",
        )?;
        let ids: Vec<&str> = ids.iter().map(|i| i.as_str()).collect();
        let rows = c.query(&q, &[&ids]).map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| crate::stored_id(r.get::<_, &str>(0)))
            .collect()
    }

    fn recount(&self) -> Result<Vec<Tally>, StoreError> {
        self.query_tally(
            "SELECT coalesce(parent, ''), status, passes, count(*) FROM tasks
             GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        )
    }

    fn events_of(&self, types: &[&str], status: Option<Status>) -> Result<Vec<Event>, StoreError> {
        match status {
            Some(st) => self.query_events(
                "SELECT e.seq, e.at, e.task, e.version, e.actor, e.body
                 FROM tasks t JOIN events e ON e.task = t.id
                 WHERE t.status = $2 AND e.type = ANY($1) ORDER BY e.seq",
                &[&types, &st.as_str()],
            ),
            None => self.query_events(
                "SELECT seq, at, task, version, actor, body FROM events
                 WHERE type = ANY($1) ORDER BY seq",
                &[&types],
            ),
        }
    }

    fn last_event_where(
        &self,
        types: &[&str],
        keep: &dyn Fn(&Event) -> bool,
    ) -> Result<Option<Event>, StoreError> {
        // Each type read backwards through its index, a page of rows at a time, until
        // one is kept: the newest of those is the answer.
        let mut best: Option<Event> = None;
        for ty in types {
            let mut before = i64::MAX;
            'pages: loop {
                let after = best.as_ref().map_or(0, |e| e.seq as i64);
                let page = self.query_events(
                    "SELECT seq, at, task, version, actor, body FROM events
                     WHERE type = $1 AND seq > $2 AND seq < $3 ORDER BY seq DESC LIMIT 64",
                    &[ty, &after, &before],
                )?;
                let Some(last) = page.last() else { break };
                before = last.seq as i64;
                for ev in page {
                    if keep(&ev) {
                        best = Some(ev);
                        break 'pages;
                    }
                }
            }
        }
        Ok(best)
    }

    fn last_seq(&self) -> Result<u64, StoreError> {
        let mut c = self.client()?;
        let q = self.stmt(&mut *c, "SELECT coalesce(max(seq), 0) FROM events")?;
        let row = c.query_one(&q, &[]).map_err(|e| self.err(e))?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    fn origin(&self) -> Result<Option<String>, StoreError> {
        let mut c = self.client()?;
        let q = self.stmt(&mut *c, "SELECT seq, at FROM events ORDER BY seq LIMIT 1")?;
        let row = c.query_opt(&q, &[]).map_err(|e| self.err(e))?;
        Ok(row.map(|r| format!("{} {}", r.get::<_, i64>(0), r.get::<_, String>(1))))
    }

    fn changed_since(&self, seq: u64) -> Result<(Vec<TaskId>, u64), StoreError> {
        let mut c = self.client()?;
        let q = self.stmt(
            &mut *c,
            "SELECT coalesce(max(seq), $1), coalesce(array_agg(DISTINCT task), '{}')
             FROM events WHERE seq > $1",
        )?;
        let row = c.query_one(&q, &[&(seq as i64)]).map_err(|e| self.err(e))?;
        let last: i64 = row.get(0);
        let tasks: Vec<String> = row.get(1);
        let ids = tasks
            .iter()
            .map(|t| {
                TaskId::new(t).map_err(|e| StoreError::Decode {
                    what: format!("event of task {t}"),
                    detail: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((ids, last as u64))
    }

    fn commit(&self, batch: Batch) -> Result<Vec<Event>, StoreError> {
        let mut c = self.client()?;
        let mut tx = c.transaction().map_err(|e| self.err(e))?;
        if let Some((key, _)) = &batch.request {
            let q = self.stmt(&mut tx, "SELECT response FROM requests WHERE key = $1")?;
            if let Some(row) = tx.query_opt(&q, &[key]).map_err(|e| self.err(e))? {
                return Err(StoreError::Duplicate(row.get(0)));
            }
        }
        // 1. Lock every task row the batch touches, in id order (no deadlocks between
        //    batches), and read their versions.
        let mut ids: Vec<String> = batch
            .changes
            .iter()
            .filter_map(|ch| match (&ch.before, &ch.after) {
                (Some(t), _) | (None, Some(t)) => Some(t.id().to_string()),
                (None, None) => None,
            })
            .collect();
        ids.sort();
        ids.dedup();
        let lock = self.stmt(
            &mut tx,
            "SELECT id, version FROM tasks WHERE id = ANY($1) ORDER BY id FOR UPDATE",
        )?;
        let mut stored: BTreeMap<String, i64> = tx
            .query(&lock, &[&ids])
            .map_err(|e| self.err(e))?
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
            .collect();
        // 2. The writer's lease (a takeover waits for this commit, or wins before it).
        if let Some(f) = &batch.fence {
            let q = self.stmt(
                &mut tx,
                "SELECT owner, epoch FROM leases WHERE task = $1 FOR SHARE",
            )?;
            let held = tx
                .query_opt(&q, &[&f.task.as_str()])
                .map_err(|e| self.err(e))?
                .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)));
            if held != Some((f.owner.clone(), f.epoch as i64)) {
                return Err(StoreError::LeaseLost {
                    task: f.task.to_string(),
                    owner: f.owner.clone(),
                    epoch: f.epoch,
                });
            }
        }
        // 3. The change counter, held to the commit: sequence numbers in commit order.
        self.changed(&mut tx)?;
        let insert_event = self.stmt(
            &mut tx,
            "INSERT INTO events (at, task, version, actor, type, body)
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING seq",
        )?;
        let insert_task = self.stmt(
            &mut tx,
            "INSERT INTO tasks (id, status, version, body, parent, ord, passes, attempts,
               max_attempts, title, deps, active)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT (id) DO NOTHING",
        )?;
        let update_task = self.stmt(
            &mut tx,
            "UPDATE tasks SET status = $2, version = $3, body = $4, parent = $5, ord = $6,
               passes = $7, attempts = $8, max_attempts = $9, title = $10, deps = $11,
               active = $12
             WHERE id = $1",
        )?;
        let mut out = Vec::new();
        // Many new tasks at once (a plan import): two statements in all, not two round
        // trips per task (100,000 tasks took minutes).
        let bulk = batch.changes.len() >= BULK_CREATE
            && stored.is_empty()
            && batch
                .changes
                .iter()
                .all(|ch| ch.before.is_none() && ch.after.is_some());
        if bulk {
            out = self.create_all(&mut tx, &batch.changes)?;
        }
        for ch in batch.changes.iter().filter(|_| !bulk) {
            let id = match (&ch.before, &ch.after) {
                (Some(t), _) | (None, Some(t)) => t.id().clone(),
                (None, None) => continue,
            };
            let found = stored.get(id.as_str()).copied();
            let expected = ch.before.as_ref().map_or(0, |t| t.version());
            let conflict = |found: u64| StoreError::Conflict {
                task: id.to_string(),
                expected,
                found,
            };
            if expected != found.map_or(0, |v| v as u64) {
                return Err(conflict(found.map_or(0, |v| v as u64)));
            }
            for ev in &ch.events {
                let row = tx
                    .query_one(
                        &insert_event,
                        &[
                            &ev.at.to_string(),
                            &ev.task.as_str(),
                            &(ev.version as i64),
                            &ev.actor.as_str(),
                            &ev.kind.type_name(),
                            &json(&ev.kind)?,
                        ],
                    )
                    .map_err(|e| self.err(e))?;
                let mut ev = ev.clone();
                ev.seq = row.get::<_, i64>(0) as u64;
                out.push(ev);
            }
            match &ch.after {
                Some(t) => {
                    let h = HeadColumns::of(t);
                    let params: [&(dyn postgres::types::ToSql + Sync); 12] = [
                        &t.id().as_str(),
                        &t.status().as_str(),
                        &(t.version() as i64),
                        &json(t)?,
                        &h.parent,
                        &h.order,
                        &h.passes,
                        &h.attempts,
                        &h.max_attempts,
                        &h.title,
                        &h.deps,
                        &h.active,
                    ];
                    if found.is_none() {
                        let n = tx.execute(&insert_task, &params).map_err(|e| self.err(e))?;
                        if n == 0 {
                            // Created by a concurrent batch that committed meanwhile.
                            let v = tx
                                .query_one(
                                    "SELECT version FROM tasks WHERE id = $1",
                                    &[&id.as_str()],
                                )
                                .map_err(|e| self.err(e))?
                                .get::<_, i64>(0);
                            return Err(conflict(v as u64));
                        }
                    } else {
                        tx.execute(&update_task, &params).map_err(|e| self.err(e))?;
                    }
                    stored.insert(id.to_string(), t.version() as i64);
                }
                None => {
                    tx.execute("DELETE FROM tasks WHERE id = $1", &[&id.as_str()])
                        .map_err(|e| self.err(e))?;
                    tx.execute("DELETE FROM memory_items WHERE task = $1", &[&id.as_str()])
                        .map_err(|e| self.err(e))?;
                    tx.execute("DELETE FROM memory_focus WHERE task = $1", &[&id.as_str()])
                        .map_err(|e| self.err(e))?;
                    stored.remove(id.as_str());
                }
            }
        }
        // Memory merges (every commit holds the change counter, so no other merge into
        // the same task runs between reading a list's last seq and inserting after it).
        for (id, append) in &batch.memory {
            let task = id.as_str();
            match &append.items.next_focus {
                Some(f) => tx.execute(
                    "INSERT INTO memory_focus (task, text) VALUES ($1, $2)
                     ON CONFLICT (task) DO UPDATE SET text = excluded.text",
                    &[&task, f],
                ),
                None => tx.execute(
                    "INSERT INTO memory_focus (task, text) VALUES ($1, '')
                     ON CONFLICT (task) DO NOTHING",
                    &[&task],
                ),
            }
            .map_err(|e| self.err(e))?;
            for (list, items) in append.items.lists().into_iter().enumerate() {
                if items.is_empty() {
                    continue;
                }
                let list = list as i32;
                let next: i64 = tx
                    .query_one(
                        "SELECT coalesce(max(seq) + 1, 0) FROM memory_items WHERE task = $1 AND list = $2",
                        &[&task, &list],
                    )
                    .map_err(|e| self.err(e))?
                    .get(0);
                for (k, text) in items.iter().enumerate() {
                    tx.execute(
                        "INSERT INTO memory_items (task, list, seq, text) VALUES ($1, $2, $3, $4)",
                        &[&task, &list, &(next + k as i64), text],
                    )
                    .map_err(|e| self.err(e))?;
                }
            }
            // As in SQLite: each list that grew cut to its last `keep` entries.
            for (list, items) in append.items.lists().into_iter().enumerate() {
                if items.is_empty() {
                    continue;
                }
                tx.execute(
                    "DELETE FROM memory_items WHERE task = $1 AND list = $2 AND seq <=
                        (SELECT max(seq) FROM memory_items WHERE task = $1 AND list = $2) - $3",
                    &[
                        &task,
                        &(list as i32),
                        &i64::try_from(append.keep(list)).unwrap_or(i64::MAX),
                    ],
                )
                .map_err(|e| self.err(e))?;
            }
        }
        if let Some((key, resp)) = &batch.request {
            let at = out.first().map(|e| e.at.to_string()).unwrap_or_default();
            let n = tx
                .execute(
                    "INSERT INTO requests (key, at, response) VALUES ($1, $2, $3)
                     ON CONFLICT (key) DO NOTHING",
                    &[key, &at, resp],
                )
                .map_err(|e| self.err(e))?;
            if n == 0 {
                // The same request committed meanwhile by another process.
                drop(tx);
                drop(c);
                let resp = self.request(key)?.unwrap_or_default();
                return Err(StoreError::Duplicate(resp));
            }
        }
        tx.commit().map_err(|e| self.err(e))?;
        Ok(out)
    }

    fn data_version(&self) -> Result<u64, StoreError> {
        let mut c = self.client()?;
        self.current_version(&mut c)
    }

    fn acquire_lease(
        &self,
        task: &TaskId,
        owner: &str,
        now: jiff::Timestamp,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let mut c = self.client()?;
        let mut tx = c.transaction().map_err(|e| self.err(e))?;
        let got = self.acquire_in(&mut tx, task, owner, now, ttl)?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(got)
    }

    fn release_lease(&self, task: &TaskId, owner: &str) -> Result<(), StoreError> {
        let mut c = self.client()?;
        let mut tx = c.transaction().map_err(|e| self.err(e))?;
        // The row stays (owner '') so the next holder's epoch is higher than every
        // earlier one: a stale writer's fence never matches again.
        let n = tx
            .execute(
                "UPDATE leases SET owner = '', expires_us = 0 WHERE task = $1 AND owner = $2",
                &[&task.as_str(), &owner],
            )
            .map_err(|e| self.err(e))?;
        if n > 0 {
            // A released task may be claimed now: wake the other runners.
            self.changed(&mut tx)?;
        }
        tx.commit().map_err(|e| self.err(e))
    }

    fn leases(&self) -> Result<Vec<Lease>, StoreError> {
        let mut c = self.client()?;
        let q = self.stmt(
            &mut *c,
            "SELECT task, owner, epoch, expires_us FROM leases WHERE owner <> '' ORDER BY task",
        )?;
        let rows = c.query(&q, &[]).map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| {
                let task: &str = r.get(0);
                let what = format!("lease of {task}");
                Ok(Lease {
                    task: TaskId::new(task).map_err(|e| StoreError::Decode {
                        what: what.clone(),
                        detail: e.to_string(),
                    })?,
                    owner: r.get(1),
                    epoch: r.get::<_, i64>(2) as u64,
                    expires_at: from_micros(r.get(3), &what)?,
                    taken_from: None,
                })
            })
            .collect()
    }

    fn claim(
        &self,
        candidates: &[TaskId],
        owner: &str,
        now: jiff::Timestamp,
        ttl: Duration,
        max: usize,
    ) -> Result<Vec<Lease>, StoreError> {
        if candidates.is_empty() || max == 0 {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = candidates.iter().map(|t| t.as_str()).collect();
        let mut c = self.client()?;
        let mut tx = c.transaction().map_err(|e| self.err(e))?;
        // Lock the free candidates' task rows; rows another claimer (or a commit) holds
        // right now are skipped instead of waited for.
        let q = self.stmt(
            &mut tx,
            "SELECT t.id FROM unnest($1::text[]) WITH ORDINALITY AS c(id, ord)
             JOIN tasks t ON t.id = c.id COLLATE \"C\"
             LEFT JOIN leases l ON l.task = t.id
             WHERE l.task IS NULL OR l.owner = '' OR l.owner = $2 OR l.expires_us <= $3
             ORDER BY c.ord
             LIMIT $4
             FOR UPDATE OF t SKIP LOCKED",
        )?;
        let rows = tx
            .query(&q, &[&ids, &owner, &micros(now), &(max as i64)])
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for r in rows {
            let id: &str = r.get(0);
            let id = TaskId::new(id).map_err(|e| StoreError::Decode {
                what: format!("task {id}"),
                detail: e.to_string(),
            })?;
            // The lease row itself is decided under its own lock, as `acquire_lease` does.
            if let Some(l) = self.acquire_in(&mut tx, &id, owner, now, ttl)? {
                out.push(l);
            }
        }
        tx.commit().map_err(|e| self.err(e))?;
        Ok(out)
    }

    fn wait_for_change(&self, seen: u64, timeout: Duration) -> Result<u64, StoreError> {
        let mut c = self.client()?;
        if !self.listening.get() {
            c.batch_execute(&format!("LISTEN {CHANNEL}"))
                .map_err(|e| self.err(e))?;
            self.listening.set(true);
        }
        // Notifications that arrived before this read are reflected in it.
        while c
            .notifications()
            .iter()
            .next()
            .map_err(|e| self.err(e))?
            .is_some()
        {}
        let v = self.current_version(&mut c)?;
        if v != seen {
            return Ok(v);
        }
        let woke = c
            .notifications()
            .timeout_iter(timeout)
            .next()
            .map_err(|e| self.err(e))?;
        if woke.is_none() {
            return Ok(v);
        }
        self.current_version(&mut c)
    }
}

/// Helpers for tests that need a PostgreSQL server: `WARDEN_TEST_PG_URL` names one
/// (`./scripts/test` starts a throwaway cluster and sets it). Each test gets a database
/// of its own, dropped at the end. Built for tests only (the `testing` feature).
#[cfg(feature = "testing")]
pub mod testing {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use postgres::{Client, NoTls};

    /// The variable naming the test server.
    pub const ENV: &str = "WARDEN_TEST_PG_URL";

    /// A fresh database on the test server, dropped (with its connections) on drop.
    #[derive(Debug)]
    pub struct TestDb {
        admin: String,
        name: String,
        /// The URL of the new database.
        pub url: String,
    }

    static COUNTER: AtomicUsize = AtomicUsize::new(0);

    /// The test server's URL. Without it: under `CI=true` a panic that says how to start
    /// one; otherwise `None` after a notice on stderr (the caller skips its test).
    pub fn server(test: &str) -> Option<String> {
        match std::env::var(ENV) {
            Ok(u) if !u.trim().is_empty() => Some(u),
            _ => {
                let how = format!(
                    "{ENV} is not set, so the PostgreSQL tests cannot run: run ./scripts/test (it starts a throwaway cluster when initdb and pg_ctl are installed: apt-get install postgresql), or start a server and export {ENV}=postgresql://USER@/postgres?host=/socket/dir"
                );
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!("{test}: {how}");
                }
                crate::say!("SKIPPED {test}: {how}");
                None
            }
        }
    }

    /// Replaces the database name of a PostgreSQL URL.
    pub fn with_dbname(url: &str, db: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap_or(("postgresql", url));
        let (main, query) = match rest.split_once('?') {
            Some((m, q)) => (m, Some(q)),
            None => (rest, None),
        };
        // The path starts at the first `/` after the user info.
        let auth_end = main.rfind('@').map_or(0, |i| i + 1);
        let authority = match main[auth_end..].find('/') {
            Some(i) => &main[..auth_end + i],
            None => main,
        };
        match query {
            Some(q) => format!("{scheme}://{authority}/{db}?{q}"),
            None => format!("{scheme}://{authority}/{db}"),
        }
    }

    /// Creates a fresh database for one test, or `None` (see [`server`]).
    pub fn database(test: &str) -> Option<TestDb> {
        let admin = server(test)?;
        Some(create_database(&admin, test))
    }

    /// Creates a fresh database on the server `admin` names (panics when it cannot).
    pub fn create_database(admin: &str, test: &str) -> TestDb {
        let admin = admin.to_owned();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("warden_t_{}_{n}", std::process::id());
        let config = super::parse_url(&admin).unwrap_or_else(|e| panic!("{ENV}: {e}"));
        let mut c = config
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("{test}: cannot connect to {ENV}: {e}"));
        // One statement per call (CREATE DATABASE refuses an implicit transaction), and a
        // few tries: concurrent creations from template1 may collide.
        let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        let mut tries = 0;
        while let Err(e) = c.batch_execute(&format!("CREATE DATABASE {name}")) {
            tries += 1;
            if tries >= 20 {
                panic!(
                    "{test}: cannot create a database: {}",
                    super::error_text(&e)
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        TestDb {
            url: with_dbname(&admin, &name),
            admin,
            name,
        }
    }

    impl TestDb {
        /// A client on the server's own database, for what cannot be done from inside
        /// the test database (closing it to new connections, say).
        pub fn admin_client(&self) -> Client {
            super::parse_url(&self.admin)
                .expect("admin url")
                .connect(NoTls)
                .expect("connect to the test server")
        }

        /// The test database's name.
        pub fn name(&self) -> &str {
            &self.name
        }

        /// A plain client on the test database, for tests that poke at rows directly.
        pub fn client(&self) -> Client {
            super::parse_url(&self.url)
                .expect("test url")
                .connect(NoTls)
                .expect("connect to the test database")
        }
    }

    impl Drop for TestDb {
        fn drop(&mut self) {
            if let Ok(config) = super::parse_url(&self.admin)
                && let Ok(mut c) = config.connect(NoTls)
            {
                let _ = c.batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_passwords() {
        assert_eq!(
            testing::with_dbname("postgresql://postgres@/postgres?host=/tmp/x", "w1"),
            "postgresql://postgres@/w1?host=/tmp/x"
        );
        assert_eq!(
            testing::with_dbname("postgres://u:p@h:5432/db", "w2"),
            "postgres://u:p@h:5432/w2"
        );
        assert_eq!(
            testing::with_dbname("postgres://h", "w3"),
            "postgres://h/w3"
        );
        assert_eq!(
            password_of("postgres://u:s3cret@h/db").as_deref(),
            Some("s3cret")
        );
        assert_eq!(
            password_of("postgres://u@h/db?password=s3cret").as_deref(),
            Some("s3cret")
        );
        assert_eq!(password_of("postgres://u@h/db"), None);
        let c = parse_url("postgresql://alice@/db?host=/run/pg").unwrap();
        assert_eq!(c.get_user(), Some("alice"));
        assert_eq!(c.get_dbname(), Some("db"));
        assert!(matches!(
            c.get_hosts(),
            [postgres::config::Host::Unix(p)] if p == std::path::Path::new("/run/pg")
        ));
        let e = parse_url("postgres://u:s3cret@h:notaport/db").unwrap_err();
        assert!(!e.contains("s3cret"), "{e}");
        assert!(e.contains("u:***@"), "{e}");
    }

    #[test]
    fn version_1_memory_rows_become_items_in_order() {
        let Some(db) = testing::database("version_1_memory_rows_become_items_in_order") else {
            return;
        };
        let old = crate::memory_rows::migration_sample();
        {
            let mut c = Client::connect(&db.url, postgres::NoTls).unwrap();
            let mut tx = c.transaction().unwrap();
            tx.batch_execute(MIGRATIONS[0].sql()).unwrap();
            tx.batch_execute(
                "CREATE TABLE warden_schema (version integer PRIMARY KEY);
                 INSERT INTO warden_schema VALUES (1);",
            )
            .unwrap();
            tx.execute(
                "INSERT INTO memory (task, body) VALUES ('a', $1), ('b', $2)",
                &[
                    &serde_json::to_string(&old).unwrap(),
                    &serde_json::to_string(&Memory::default()).unwrap(),
                ],
            )
            .unwrap();
            tx.commit().unwrap();
        }
        let s = PgStore::open(&db.url, 5000).unwrap();
        crate::memory_rows::check_migrated(&s);
    }

    /// A database from before the head columns gets them and the tally, computed from
    /// the stored tasks (as SQLite's `version_4_rows_get_their_heads_and_tally`).
    #[test]
    fn version_3_rows_get_their_heads_and_tally() {
        use warden_core::model::{TaskSpec, WorkflowKind};
        use warden_core::ops::{self, Ctx, Initial};
        let Some(db) = testing::database("version_3_rows_get_their_heads_and_tally") else {
            return;
        };
        {
            let mut c = Client::connect(&db.url, postgres::NoTls).unwrap();
            let mut tx = c.transaction().unwrap();
            tx.batch_execute(MIGRATIONS[0].sql()).unwrap();
            tx.batch_execute(MIGRATIONS[1].sql()).unwrap();
            tx.batch_execute(
                "CREATE TABLE warden_schema (version integer PRIMARY KEY);
                 INSERT INTO warden_schema VALUES (1), (2), (3);",
            )
            .unwrap();
            let ctx = Ctx::fixed(warden_core::event::Actor::Person);
            for (id, parent) in [("g", None), ("a", Some("g")), ("b", Some("g"))] {
                let mut spec = TaskSpec::new(TaskId::new(id).unwrap(), WorkflowKind::Review, 3);
                spec.parent = parent.map(|p| TaskId::new(p).unwrap());
                if id == "b" {
                    spec.depends_on = vec![TaskId::new("a").unwrap()];
                }
                let t = ops::create(spec, Initial::NEW, &ctx)
                    .unwrap()
                    .after
                    .unwrap();
                tx.execute(
                    "INSERT INTO tasks (id, status, version, body) VALUES ($1, $2, $3, $4)",
                    &[
                        &t.id().as_str(),
                        &t.status().as_str(),
                        &(t.version() as i64),
                        &json(&t).unwrap(),
                    ],
                )
                .unwrap();
            }
            tx.commit().unwrap();
        }
        let s = PgStore::open(&db.url, 5000).unwrap();
        let tasks = s.list().unwrap();
        assert_eq!(
            s.all_heads().unwrap(),
            tasks.iter().map(|t| t.head()).collect::<Vec<_>>()
        );
        assert_eq!(s.tally().unwrap(), s.recount().unwrap());
        assert_eq!(s.children(&TaskId::new("g").unwrap()).unwrap().len(), 2);
        // …and the index of dependents, filled from the stored dependencies.
        let of_a: Vec<TaskId> = s
            .dependents(&[TaskId::new("a").unwrap()])
            .unwrap()
            .into_iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(of_a, [TaskId::new("b").unwrap()]);
    }

    #[test]
    fn connection_errors_never_show_the_password() {
        let dir = std::env::temp_dir().join(format!("warden-nopg-{}", std::process::id()));
        let url = format!(
            "postgresql://warden:hunter2secret@/db?host={}&connect_timeout=2",
            dir.display()
        );
        let e = PgStore::open(&url, 1000).unwrap_err().to_string();
        assert!(!e.contains("hunter2secret"), "{e}");
        assert!(e.contains("warden:***@"), "{e}");
        assert!(e.contains("cannot connect"), "{e}");
        assert_eq!(scrub("a hunter2 b", Some("hunter2")), "a *** b");
    }

    /// A database another program already keeps a `tasks` table in: opening it says so
    /// and how to give Warden a schema of its own, and that way works. Before, the
    /// driver's "relation \"tasks\" already exists" reached the person raw.
    #[test]
    fn a_database_with_another_programs_tables_says_so_and_a_schema_works() {
        let Some(db) = testing::database("another_programs_tables") else {
            return;
        };
        let mut c = Client::connect(&db.url, postgres::NoTls).unwrap();
        c.batch_execute("CREATE TABLE tasks (title text)").unwrap();
        let e = PgStore::open(&db.url, 5000).err().unwrap().to_string();
        assert!(
            e.contains("already has tables of another program") && e.contains("CREATE SCHEMA"),
            "{e}"
        );
        c.batch_execute("CREATE SCHEMA warden").unwrap();
        let url = format!("{}&options=-csearch_path%3Dwarden", db.url);
        let s = PgStore::open(&url, 5000).unwrap();
        assert!(s.list().unwrap().is_empty());
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'warden'",
                &[],
            )
            .unwrap()
            .get(0);
        assert!(n > 3, "Warden's tables are in its schema");
    }

    /// A connection the server ended (pg_terminate_backend, a restart) is named as lost,
    /// with what to do, not the driver's text alone.
    #[test]
    fn a_connection_the_server_ended_is_named_as_lost() {
        let Some(db) = testing::database("a_connection_the_server_ended") else {
            return;
        };
        let s = PgStore::open(&db.url, 5000).unwrap();
        assert!(s.list().unwrap().is_empty());
        let mut c = Client::connect(&db.url, postgres::NoTls).unwrap();
        c.batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .unwrap();
        let e = s.list().err().unwrap().to_string();
        assert!(
            e.contains("was lost") && e.contains("run the command again"),
            "{e}"
        );
    }

    /// Two plan imports that create the same task at once, both having found none of
    /// theirs stored: the second, on the bulk path (one statement for all its rows), is
    /// a conflict naming the task it lost, and stores nothing. The counter each commit
    /// holds is held here first, so both look before either lands.
    #[test]
    fn a_bulk_creation_that_lost_a_race_is_a_conflict() {
        use warden_core::model::{TaskSpec, WorkflowKind};
        use warden_core::ops::{self, Ctx, Initial};
        let Some(db) = testing::database("a_bulk_creation_that_lost_a_race") else {
            return;
        };
        PgStore::open(&db.url, 5000).unwrap();
        let mut holder = Client::connect(&db.url, postgres::NoTls).unwrap();
        let mut hold = holder.transaction().unwrap();
        hold.execute("UPDATE changes SET version = version", &[])
            .unwrap();
        let commit = |from: usize| {
            let url = db.url.clone();
            std::thread::spawn(move || {
                let s = PgStore::open(&url, 60_000).unwrap();
                let ctx = Ctx::fixed(warden_core::event::Actor::Person);
                let changes = (from..from + 100)
                    .map(|i| {
                        let id = TaskId::new(&format!("x{i:03}")).unwrap();
                        ops::create(
                            TaskSpec::new(id, WorkflowKind::Direct, 3),
                            Initial::NEW,
                            &ctx,
                        )
                        .unwrap()
                    })
                    .collect();
                s.commit(Batch {
                    changes,
                    ..Default::default()
                })
            })
        };
        let (a, b) = (commit(0), commit(50));
        // Both wait on the counter: they have looked and found nothing.
        let mut watch = Client::connect(&db.url, postgres::NoTls).unwrap();
        while watch
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .unwrap()
            .get::<_, i64>(0)
            < 2
        {
            std::thread::yield_now();
        }
        hold.rollback().unwrap();
        let results = [a.join().unwrap(), b.join().unwrap()];
        assert_eq!(
            results.iter().filter(|r| r.is_ok()).count(),
            1,
            "{results:?}"
        );
        let lost = results.iter().find_map(|r| r.as_ref().err()).unwrap();
        assert!(
            matches!(lost, StoreError::Conflict { task, expected: 0, found: 1 }
                if ("x050".."x100").contains(&task.as_str())),
            "{lost:?}"
        );
        let s = PgStore::open(&db.url, 5000).unwrap();
        assert_eq!(s.list().unwrap().len(), 100, "the loser stored nothing");
        assert_eq!(s.events(None).unwrap().len(), 100);
    }
}
