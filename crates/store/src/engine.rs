//! The engine: an open workspace (configuration + store) and the one write path every
//! front end shares — the CLI, the supervisor and the MCP server. A write reads the task
//! and its TASK.md, lets the caller decide through the core, commits the change fenced by
//! version (deciding again after a conflict), then mirrors the result into the files.

use jiff::Timestamp;
use warden_core::artifact;
use warden_core::event::Actor;
use warden_core::event::Event;
use warden_core::event::EventKind;
use warden_core::failure::{ExitCode, Failure};
use warden_core::memory::{self, MemoryAppend, MemoryCaps, MemoryDelta};
use warden_core::model::{Status, Task, TaskId};
use warden_core::ops::{self, Change, Ctx, Refusal};
use warden_core::{history, prompt, state_md};

use crate::config::ConfigError;
use crate::files::{self, FileError};
use crate::taskfile::{self, Doc};
use crate::workspace::WorkspaceError;
use crate::{Batch, Config, Fence, OpenError, Store, StoreError, Workspace};

/// How many times a write is decided again after a version conflict before giving up
/// with exit 4.
const CONFLICT_RETRIES: usize = 50;

/// The `conflict-once` failpoint has fired in this process.
static CONFLICTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Anything that can stop an engine operation. Every variant becomes a [`Failure`] (with
/// its documented exit code) in one place: `From<EngineError> for Failure`.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The request was refused by the rules.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// A task does not exist (exit 3).
    #[error("no task {0}; list tasks with `warden task list`")]
    NotFound(TaskId),
    /// Storage failure, conflict or busy store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A file could not be read or written safely.
    #[error("{0}")]
    File(#[from] FileError),
    /// The store could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// No workspace, or `init` refused.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// A bad `warden.toml`.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A failure decided above the store (a refused template, a failed merge).
    #[error("{0}")]
    Failed(#[from] Failure),
    /// A decision taken near one task ([`crate::near::Near`]) needs the whole tree: the
    /// write path decides it again over every task, so no user ever sees this.
    #[error("internal: a decision near one task needed the whole tree; this is a Warden bug")]
    WholeTree,
}

impl EngineError {
    /// The documented exit code (DESIGN 4).
    pub fn code(&self) -> ExitCode {
        match self {
            EngineError::NotFound(_) => ExitCode::NotFound,
            EngineError::Store(e) => e.code(),
            EngineError::Config(_) => ExitCode::Usage,
            EngineError::Failed(f) => f.code,
            EngineError::Refused(r) => Failure::from(r.clone()).code,
            EngineError::File(FileError::Io { .. }) => ExitCode::Internal,
            EngineError::File(FileError::Missing(_)) => ExitCode::NotFound,
            EngineError::File(_) => ExitCode::Refused,
            EngineError::Open(OpenError::Store(e)) => e.code(),
            EngineError::Open(_) => ExitCode::Usage,
            EngineError::Workspace(WorkspaceError::Exists(_)) => ExitCode::Refused,
            EngineError::Workspace(WorkspaceError::Io(_)) => ExitCode::Internal,
            EngineError::Workspace(_) => ExitCode::Usage,
            EngineError::WholeTree => ExitCode::Internal,
        }
    }
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Failure {
        match e {
            EngineError::Refused(r) => r.into(),
            EngineError::NotFound(_) => Failure::not_found(e.to_string()),
            EngineError::Store(e) => e.into(),
            EngineError::File(e) => e.into(),
            EngineError::Open(e) => e.into(),
            EngineError::Workspace(e) => e.into(),
            EngineError::Config(e) => Failure::usage(e.to_string()),
            EngineError::Failed(f) => f,
            EngineError::WholeTree => Failure::internal(e.to_string()),
        }
    }
}

/// An open workspace.
pub struct Engine {
    /// Where it is.
    pub ws: Workspace,
    /// Its configuration.
    pub config: Config,
    /// Its store.
    pub store: Box<dyn Store>,
    /// Who this process acts for.
    pub actor: Actor,
    /// The lease a runner's step holds on the task it works on: every write of that task
    /// through [`Engine::write_task`] is checked against it before deciding and fenced by
    /// it in the commit ([`StoreError::LeaseLost`], exit 4). `None` for people and agents.
    pub fence: Option<Fence>,
    /// The `warden` binary prompts tell agents to run (by absolute path: an agent's shell
    /// may not have it on `PATH`). `None`: the running binary, looked up when a prompt
    /// is rendered (not on every open: a `readlink` of `/proc/self/exe` per command).
    pub warden_exe: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("ws", &self.ws)
            .field("store", &self.store.backend())
            .field("actor", &self.actor)
            .finish()
    }
}

/// What a write's `decide` returns.
#[derive(Debug)]
pub struct Decision {
    /// The change.
    pub change: Change,
    /// Safe to decide again after a conflict (nothing irreversible was run).
    pub retryable: bool,
    /// A memory merge written in the same transaction.
    pub memory: Option<(TaskId, MemoryAppend)>,
}

impl Decision {
    /// A change decided from stored state alone.
    pub fn retryable(change: Change) -> Decision {
        Decision {
            change,
            retryable: true,
            memory: None,
        }
    }
}

/// The result of a write.
#[derive(Debug)]
pub enum Written {
    /// Committed now.
    Done(Box<Change>),
    /// An earlier request with the same `--request-id` was already applied: the
    /// response stored with it.
    Replayed(String),
}

/// An idempotency key (`--request-id`) and how to answer it. The key is bound to the
/// request it was first used for: the same key with another request is refused.
pub struct RequestKey<'a> {
    /// The key.
    pub key: &'a str,
    /// What was asked (e.g. `task update api --status done`): the binding.
    pub fingerprint: String,
    /// The response stored with the key, computed from the committed change.
    pub respond: &'a dyn Fn(&Change) -> Result<String, EngineError>,
}

impl std::fmt::Debug for RequestKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestKey")
            .field("key", &self.key)
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

/// A stored request: the fingerprint it was made for and the response.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredRequest {
    request: String,
    response: serde_json::Value,
}

impl RequestKey<'_> {
    /// The stored response of an earlier use of this key, or a refusal when the key was
    /// used for another request. Rows stored before keys were bound hold the bare
    /// response, which is taken as it is.
    fn replay(&self, stored: String) -> Result<String, EngineError> {
        match serde_json::from_str::<StoredRequest>(&stored) {
            Ok(r) if r.request == self.fingerprint => Ok(r.response.to_string()),
            Ok(r) => Err(Failure::usage(format!(
                "request id {:?} was already used for another request ({}); give this request a new --request-id",
                self.key, r.request
            ))
            .into()),
            Err(_) => Ok(stored),
        }
    }

    fn store(&self, change: &Change) -> Result<String, EngineError> {
        let response = (self.respond)(change)?;
        let response =
            serde_json::from_str(&response).unwrap_or(serde_json::Value::String(response));
        Ok(serde_json::to_string(&StoredRequest {
            request: self.fingerprint.clone(),
            response,
        })
        .unwrap_or_default())
    }
}

impl Engine {
    /// Opens a located workspace.
    pub fn open(ws: Workspace, actor: Actor) -> Result<Engine, EngineError> {
        let config = ws.config()?;
        let store = crate::open(&ws, &config)?;
        Ok(Engine {
            ws,
            config,
            store,
            actor,
            fence: None,
            warden_exe: None,
        })
    }

    /// The `warden` binary prompts name (see [`Engine::warden_exe`]).
    pub fn warden_exe(&self) -> std::path::PathBuf {
        match &self.warden_exe {
            Some(exe) => exe.clone(),
            None => std::env::current_exe().unwrap_or_else(|_| "warden".into()),
        }
    }

    /// The current time: the one place a front end reads the clock for the core.
    pub fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    /// The context of a core operation.
    pub fn ctx<'a>(&self, task_file: &'a str) -> Ctx<'a> {
        Ctx {
            now: self.now(),
            actor: self.actor,
            limits: self.config.limits,
            task_file,
        }
    }

    /// TASK.md of a task, as shown in messages (relative to the project root).
    pub fn task_file_shown(&self, id: &TaskId) -> String {
        self.ws.display(&self.ws.task_file(id))
    }

    /// One task, or [`EngineError::NotFound`].
    pub fn get(&self, id: &TaskId) -> Result<Task, EngineError> {
        self.store
            .get(id)?
            .ok_or_else(|| EngineError::NotFound(id.clone()))
    }

    /// Every task, sorted by id.
    pub fn tasks(&self) -> Result<Vec<Task>, EngineError> {
        Ok(self.store.list()?)
    }

    /// The memory caps from configuration.
    pub fn memory_caps(&self) -> MemoryCaps {
        MemoryCaps {
            max_history: self.config.memory.max_history,
            max_text_len: self.config.memory.max_text_len,
            max_items: self.config.memory.max_items,
        }
    }

    /// Merges a delta into a task's memory (`memory merge`, MCP `memory_merge`): one
    /// write that records `memory.merged` and appends the capped delta in the same
    /// transaction. It never reads the stored memory, so a merge costs the same however
    /// long the memory is, and concurrent merges never lose an item.
    pub fn merge_memory(
        &self,
        id: &TaskId,
        delta: &MemoryDelta,
        request: Option<&RequestKey<'_>>,
    ) -> Result<Written, EngineError> {
        if let Some(problem) = delta.problem() {
            return Err(Refusal::InvalidMemory(problem).into());
        }
        let append = memory::append_of(delta, &self.memory_caps());
        let shown = self.task_file_shown(id);
        self.write_task(id, request, |t, _doc| {
            let change = ops::record(
                t,
                vec![EventKind::MemoryMerged {
                    delta: delta.clone(),
                    caps: Some(self.memory_caps()),
                }],
                &self.ctx(&shown),
            )?;
            Ok(Decision {
                change,
                retryable: true,
                memory: Some((t.id().clone(), append.clone())),
            })
        })
    }

    /// The write path of every single-task operation. `decide` sees the task and its
    /// TASK.md (artifacts and tamper notes) and returns the change; tamper notes land in
    /// the same transaction. A conflict re-reads and decides again, unless `decide` ran
    /// something that must not run twice (then exit 4: safe to retry). A request key is
    /// looked up under the task's lock, so a repeated request waiting behind its first
    /// use gets the first answer, never a refusal of the second.
    pub fn write_task(
        &self,
        id: &TaskId,
        request: Option<&RequestKey<'_>>,
        mut decide: impl FnMut(&Task, &Doc) -> Result<Decision, EngineError>,
    ) -> Result<Written, EngineError> {
        let shown = self.task_file_shown(id);
        // One writer of a task at a time from read to mirror: otherwise a second writer
        // could read TASK.md between the first one's commit and its frontmatter rewrite,
        // and take the stale mirror for an agent's tampering.
        let lock = self.lock_task(id)?;
        // A pending task's first move (a leaf starting, a question, a cancel) is decided
        // under the tree's lock too, so no batch places a child under it meanwhile (a task
        // never goes back to pending: one that was not pending here is not later). Taken
        // after the task's: a batch holding the tree only tries task locks, so neither
        // waits on the other for ever.
        let pending = self
            .store
            .heads(std::slice::from_ref(id))?
            .first()
            .is_some_and(|h| h.status == Status::Pending);
        let tree = if pending {
            Some(self.lock_tree()?)
        } else {
            None
        };
        if let Some(r) = request
            && let Some(stored) = self.store.request(r.key)?
        {
            return Ok(Written::Replayed(r.replay(stored)?));
        }
        let fence = self.fence.clone().filter(|f| &f.task == id);
        for _ in 0..CONFLICT_RETRIES {
            // A runner that lost its lease stops before deciding (deciding may run checks
            // or merges); the commit checks the lease again.
            if let Some(f) = &fence {
                let held = self.store.lease(id)?;
                if held.is_none_or(|l| l.owner != f.owner || l.epoch != f.epoch) {
                    return Err(StoreError::LeaseLost {
                        task: id.to_string(),
                        owner: f.owner.clone(),
                        epoch: f.epoch,
                    }
                    .into());
                }
            }
            let task = self.get(id)?;
            let mut doc = taskfile::read_for_write(&self.ws, &task)?;
            let Decision {
                change,
                retryable,
                memory,
            } = decide(&task, &doc)?;
            let change = change.prepend(doc.tamper.clone(), &self.ctx(&shown))?;
            // Under the tree's lock: a task placed under this one since its writer looked
            // made it a group, whose status comes from its tasks (only a cancel moves it).
            if pending
                && change
                    .after
                    .as_ref()
                    .is_some_and(|a| !matches!(a.status(), Status::Pending | Status::Cancelled))
                && !self.store.child_ids(id)?.is_empty()
            {
                return Err(Failure::refused(format!(
                    "{id} is a group now (a task was placed under it meanwhile): its status comes from the tasks in it; move those instead"
                ))
                .into());
            }
            if change.events.is_empty() && memory.is_none() && request.is_none() {
                // Nothing to record (e.g. a second report of a session's end).
                drop(lock);
                return Ok(Written::Done(Box::new(change)));
            }
            let request_row = match request {
                Some(r) => Some((r.key.to_owned(), r.store(&change)?)),
                None => None,
            };
            let batch = Batch {
                changes: vec![change.clone()],
                memory: memory.into_iter().collect(),
                request: request_row,
                fence: fence.clone(),
            };
            // The crash matrix's stand-in for a concurrent writer: the first commit of
            // this process loses a race (debug builds only).
            let committed = if crate::failpoint::armed("conflict-once")
                && !CONFLICTED.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                Err(StoreError::Conflict {
                    task: id.to_string(),
                    expected: task.version(),
                    found: task.version() + 1,
                })
            } else {
                self.store.commit_unsynced(batch)
            };
            match committed {
                Ok(_) => {
                    drop(tree);
                    crate::failpoint::hit("after-commit");
                    crate::failpoint::hit("after-commit-exit");
                    self.finish_write(lock, &change, &mut doc)?;
                    return Ok(Written::Done(Box::new(change)));
                }
                Err(StoreError::Conflict { .. }) if retryable => continue,
                Err(StoreError::Duplicate(resp)) => match request {
                    Some(r) => return Ok(Written::Replayed(r.replay(resp)?)),
                    None => return Ok(Written::Replayed(resp)),
                },
                Err(e) => return Err(e.into()),
            }
        }
        Err(Failure::conflict(format!(
            "conflict: task {id} kept changing while this request was decided; run the command again"
        ))
        .into())
    }

    /// After a write's commit: rewrites the views (TASK.md from the text the write read
    /// under the lock, so a write that leaves the frontmatter as it was, such as a memory
    /// merge, touches no file; the text is read again only before replacing the file),
    /// releases the task's lock, and flushes the commit.
    /// Nothing reports the write done before the flush returns; releasing the lock first
    /// lets the next writer commit meanwhile, and one flush can then cover both (group
    /// commit).
    fn finish_write(
        &self,
        lock: std::fs::File,
        change: &Change,
        doc: &mut Doc,
    ) -> Result<(), EngineError> {
        if let Some(t) = &change.after {
            self.mirror(t, doc.text.take());
        }
        crate::planning::write_back(self, std::slice::from_ref(change));
        self.sync_state_md();
        drop(lock);
        crate::failpoint::hit("before-sync");
        Ok(self.store.sync()?)
    }

    /// The write path of every operation that changes many tasks at once (create,
    /// plan import, apply and sync): `decide` sees every stored task and returns the
    /// batch; the batch is committed, fenced by version, under the locks of the existing
    /// tasks whose TASK.md mirror it changes (taken in id order, so two batches never
    /// wait on each other), and decided again after a conflict. New tasks get no TASK.md
    /// here: it is written at their first write (see [`Engine::mirror_new`] for `task
    /// create`). Returns the committed changes.
    pub fn write_batch(
        &self,
        mut decide: impl FnMut(&[Task]) -> Result<Batch, EngineError>,
    ) -> Result<Vec<Change>, EngineError> {
        self.write_decided(
            || self.tasks(),
            |prev| {
                let batch = decide(&prev)?;
                check_depth(
                    prev.iter().map(|t| (t.id(), t.spec.parent.as_ref())),
                    &batch,
                )?;
                check_deadlock(
                    prev.iter()
                        .map(|t| (t.id(), t.spec.parent.as_ref(), &t.spec.depends_on[..])),
                    &batch,
                )?;
                Ok(batch)
            },
        )
    }

    /// [`Engine::write_batch`] for a decision that reads every stored task but decodes
    /// few of them (`plan apply`, see [`warden_core::tree::StoredRows`]): `decide` is
    /// given the rows as stored, in id order, and decodes what it reads (and may drop
    /// the rows wherever it likes). It must refuse a batch that puts a task too deep
    /// itself, with [`check_depth`] over the tree it decided.
    pub fn write_batch_rows(
        &self,
        decide: impl FnMut(Vec<crate::TaskColumns>) -> Result<Batch, EngineError>,
    ) -> Result<Vec<Change>, EngineError> {
        self.write_decided(|| Ok(self.store.task_columns()?), decide)
    }

    /// [`Engine::write_batch`] for a batch that places one task (`task create`, `task
    /// edit`): `decide` is given the tree near it first ([`crate::near::Near`], a few
    /// indexed reads), and the batch is committed when the depth and deadlock checks
    /// settle there too. When anything needs more of the tree than that
    /// ([`EngineError::WholeTree`]), it is decided again over every stored task, with
    /// the whole-tree checks of [`Engine::write_batch`].
    pub fn write_around(
        &self,
        mut decide: impl FnMut(&mut dyn crate::near::Around) -> Result<Batch, EngineError>,
    ) -> Result<Vec<Change>, EngineError> {
        use crate::near::{Near, Whole, settle_deadlock, settle_depth};
        let near = self.write_decided(
            || Ok(()),
            |()| {
                let mut tree = Near::new(&*self.store);
                let batch = decide(&mut tree)?;
                settle_depth(&mut tree, &batch)?;
                settle_deadlock(&mut tree, &batch)?;
                Ok(batch)
            },
        );
        match near {
            Err(EngineError::WholeTree) => self.write_batch(|prev| decide(&mut Whole::new(prev))),
            done => done,
        }
    }

    /// The write path of both: read, decide, commit; decided again after a conflict.
    fn write_decided<R>(
        &self,
        read: impl Fn() -> Result<R, EngineError>,
        mut decide: impl FnMut(R) -> Result<Batch, EngineError>,
    ) -> Result<Vec<Change>, EngineError> {
        let mut tree = None;
        for _ in 0..CONFLICT_RETRIES {
            if tree.is_none() {
                tree = Some(self.lock_tree()?);
            }
            let batch = decide(read()?)?;
            let mut locked: Vec<&TaskId> = batch
                .changes
                .iter()
                .filter_map(|ch| match (&ch.before, &ch.after) {
                    (Some(b), Some(a)) if artifact::mirror(b) != artifact::mirror(a) => {
                        Some(a.id())
                    }
                    _ => None,
                })
                .collect();
            locked.sort();
            locked.dedup();
            // Under the tree's lock a task's lock is only tried: its holder may be a check
            // that runs for as long as it runs (a guard, postchecks), and every placement
            // in the project waited behind the tree's lock meanwhile (a create failed with
            // exit 4). Held: the tree is let go, that task waited for alone, and the
            // batch decided again.
            let mut locks = Vec::with_capacity(locked.len());
            let mut held = None;
            for id in &locked {
                match self.lock_task_if(id, false)? {
                    Some(f) => locks.push(f),
                    None => {
                        held = Some(*id);
                        break;
                    }
                }
            }
            if let Some(id) = held {
                drop(locks);
                tree = None;
                drop(self.lock_task(id)?);
                continue;
            }
            let changes = batch.changes.clone();
            match self.store.commit(batch) {
                Ok(_) => {}
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
            drop(tree.take());
            // A task the batch creates gets no file now: its TASK.md is written at its
            // first write (`write_task` creates a missing one after its commit), which for
            // a task the supervisor runs is its start, before any session is given the
            // path. A plan of 100,000 tasks is imported in seconds instead of a minute of
            // directories, lock files and TASK.md files (see ARCHITECTURE.md).
            for ch in &changes {
                if let (Some(_), Some(t)) = (&ch.before, &ch.after) {
                    self.mirror(t, None);
                }
            }
            drop(locks);
            crate::planning::write_back(self, &changes);
            self.sync_state_md();
            return Ok(changes);
        }
        Err(Failure::conflict(
            "conflict: the tasks kept changing while this request was decided; run the command again",
        )
        .into())
    }

    /// Writes the TASK.md of a task a batch created (`task create` writes it at once),
    /// under its lock and from the task as stored now, so a writer that got to it first
    /// is never overwritten with an older version.
    pub fn mirror_new(&self, id: &TaskId) {
        let lock = self.lock_task(id);
        match self.store.get(id) {
            Ok(Some(t)) => self.mirror(&t, None),
            Ok(None) => {}
            Err(e) => crate::say!("warning: {}: {e}", self.task_file_shown(id)),
        }
        drop(lock);
    }

    /// Takes the task's write lock (`.warden/tasks/<id>/.lock`), released on drop. The
    /// folder is checked for links once; the lock file is opened without following one.
    /// A holder that keeps it longer than the store's busy timeout makes this a conflict
    /// (exit 4: safe to retry) instead of a wait without end.
    fn lock_task(&self, id: &TaskId) -> Result<std::fs::File, EngineError> {
        self.lock_task_if(id, true)
            .map(|f| f.expect("a lock waited for is taken"))
    }

    /// [`Engine::lock_task`] without waiting when `wait` is false: `None` when another
    /// holds it.
    fn lock_task_if(&self, id: &TaskId, wait: bool) -> Result<Option<std::fs::File>, EngineError> {
        let dir = self.ws.task_dir(id);
        files::check_no_links(&self.ws.dir, &dir)?;
        let path = dir.join(".lock");
        let open = || open_lock_file(&path);
        let opened = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A task's folder is made at its first write; a request naming no task
                // leaves nothing behind (a typo or a hostile caller would otherwise leave
                // a folder per id it tried).
                self.get(id)?;
                // A store moved away under a running console or supervisor still
                // answers from its open file: making the folder would leave a skeleton
                // `.warden/` that `warden init` refuses and a moved-back copy nests in.
                if !self.ws.dir.is_dir() {
                    return Err(Failure::internal(format!(
                        "{} was removed since this process opened it; nothing was written: start this `warden` process again in a project that has it",
                        self.ws.dir.display()
                    ))
                    .into());
                }
                files::create_dir(&self.ws.dir, &dir)?;
                open()
            }
            r => r,
        };
        let f = opened.map_err(|e| lock_open_error(&path, e))?;
        if !wait {
            return match f.try_lock() {
                Ok(()) => Ok(Some(f)),
                Err(std::fs::TryLockError::WouldBlock) => Ok(None),
                Err(std::fs::TryLockError::Error(e)) => Err(FileError::Io {
                    path: path.display().to_string(),
                    source: e,
                }
                .into()),
            };
        }
        let timeout = std::time::Duration::from_millis(self.config.store.busy_timeout_ms);
        let busy = move || {
            // A check that runs under the lock says so: "try again" would fail for as
            // long as it runs (up to phase_timeout_s). The note is "HOLDER GROUP START";
            // the group is the check's own process.
            let check = std::fs::read_to_string(self.ws.check_note(id))
                .ok()
                .and_then(|t| t.split_whitespace().nth(1).map(str::to_owned));
            EngineError::from(Failure::conflict(match check {
                Some(group) => format!(
                    "task {id} is being changed by another process: its checks are running (process {group}); wait for them to end and try again, or cancel the task (that stops them)"
                ),
                None => format!(
                    "task {id} is being changed by another process (its lock was held longer than busy_timeout_ms = {} ms); try again",
                    timeout.as_millis()
                ),
            }))
        };
        self.wait_for_lock(f, &path, busy).map(Some)
    }

    /// Takes `.warden/tree.lock`, released on drop: held by every write that places
    /// tasks or moves a pending one (a batch from its decision to its commit: create,
    /// edit, plan import, apply and sync; a write to a pending task, whose first move
    /// makes it a leaf under way). Each decides against the tree as it is; two of them
    /// deciding at once could each pass the tree rules and together break them (parents
    /// in a cycle, a child under a working leaf, an open task under a cancelled group).
    /// Taken before any task's lock, never after one.
    pub fn lock_tree(&self) -> Result<std::fs::File, EngineError> {
        let path = self.ws.dir.join("tree.lock");
        let f = open_lock_file(&path).map_err(|e| lock_open_error(&path, e))?;
        let ms = self.config.store.busy_timeout_ms;
        self.wait_for_lock(f, &path, move || {
            Failure::conflict(format!(
                "the task tree is being changed by another process (its lock was held longer than busy_timeout_ms = {ms} ms); try again"
            ))
            .into()
        })
    }

    /// Takes the lock of the open lock file `f` (at `path`), waiting at most the store's
    /// busy timeout; past it, `busy()` is the error.
    fn wait_for_lock(
        &self,
        f: std::fs::File,
        path: &std::path::Path,
        busy: impl FnOnce() -> EngineError,
    ) -> Result<std::fs::File, EngineError> {
        let timeout = std::time::Duration::from_millis(self.config.store.busy_timeout_ms);
        let io = |e: std::io::Error| {
            EngineError::from(FileError::Io {
                path: path.display().to_string(),
                source: e,
            })
        };
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        // Held: wait in the kernel, which hands the lock over the moment its holder lets
        // go (writers of one task follow each other within microseconds; polling with
        // sleeps of a millisecond and more cut four processes merging into one task from
        // 8 k/s to 3.5 k/s). The wait runs on a thread so that it can time out. The lock
        // belongs to the open file, which both handles share: taken through the thread's
        // handle, it is held by `f`; after a timeout, `f` is closed and the thread's
        // handle, closed when its wait ends, lets go of anything it took (a holder that
        // never lets go keeps that thread waiting until the process ends).
        let waiter = f.try_clone().map_err(io)?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("task-lock".into())
            .spawn(move || {
                let _ = tx.send(waiter.lock());
            })
            .map_err(io)?;
        match rx.recv_timeout(timeout) {
            Ok(Ok(())) => Ok(f),
            Ok(Err(e)) => Err(io(e)),
            Err(_) => Err(busy()),
        }
    }

    /// Restores a task's TASK.md mirror (see [`taskfile::sync`]); a failure is a warning,
    /// never a lost commit.
    fn mirror(&self, t: &Task, read: Option<String>) {
        if let Err(e) = taskfile::sync(&self.ws, t, read) {
            crate::say!("warning: {}: {e}", self.task_file_shown(t.id()));
        }
    }

    /// Rewrites STATE.md from the store when the project keeps one.
    /// Rewrites STATE.md when it is kept (after `state --write`); a failure is a warning.
    pub fn sync_state_md(&self) {
        if self.ws.state_md().exists()
            && let Err(e) = self.write_state_md()
        {
            crate::say!("warning: STATE.md not updated: {e}");
        }
    }

    /// Renders STATE.md from the store: the text kept in `.warden/cache/state-md.text`
    /// when no event was written since it was rendered (for this store, project name and
    /// resume file); else from the rendering kept in `.warden/cache/state-md` when it was
    /// read from this store, brought up to date with the tasks changed since (see
    /// [`state_md::Model`]); else from every task, and then kept. Either way the text is
    /// what a render from every task gives (`warden state verify` compares with that).
    pub fn render_state(&self) -> Result<String, EngineError> {
        let origin = self.store.origin()?;
        let (project, resume) = self.state_names();
        let cache = self.ws.state_cache();
        let text_cache = self.ws.state_text_cache();
        // STATE.md is a function of the log: the same last event, the same text. At
        // 100,000 tasks reading it back takes a fifth of following the kept rendering.
        let text_key = |seq: u64| {
            let key = serde_json::json!([origin, seq, project, resume]).to_string();
            format!("{}\t{key}\n", state_md::encoded_text_header())
        };
        // The newest event, read once: the kept text's key, and what a render from every
        // task reflects at least.
        let last = self.store.last_seq()?;
        if origin.is_some() {
            // Read as an agent-writable file is; anything else renders.
            if let Ok(Some(kept)) =
                files::read_text_after(&self.ws.dir, &text_cache, STATE_CACHE_MAX, &text_key(last))
            {
                return Ok(kept);
            }
        }
        let keep_text = |text: &str, seq: u64| {
            keep_file(
                &text_cache,
                Some(&[text_key(seq).as_bytes(), text.as_bytes()]),
            );
        };
        if let Some(origin) = &origin
            // Read as an agent-writable file is (no link followed, no FIFO or device
            // waited on): anything but the file Warden wrote is a full render.
            && let Ok(kept) = files::read_text_up_to(&self.ws.dir, &cache, STATE_CACHE_MAX)
            && let Some((mut model, seq)) = state_md::Model::decode(&kept, origin)
            && let Some((now, changed)) = self.follow_state(&mut model, seq)?
        {
            let last = self
                .store
                .last_event_where(history::ACTIVITY_TYPES, &history::is_activity)?;
            let activity = history::activity(last.as_slice());
            let text = model.render(&project, activity.last(), resume.as_deref());
            // Rewriting the kept model (8.7 MB at 100,000 tasks) costs more than
            // following a few tasks again: it is rewritten once enough has changed.
            if changed >= REWRITE_AFTER_TASKS || now - seq >= REWRITE_AFTER_EVENTS {
                keep_state(&cache, &model, origin, now);
            }
            keep_text(&text, now);
            return Ok(text);
        }
        let seq = last;
        let (tasks, events) = self.state_sources()?;
        let input = history::state_input(project.clone(), &tasks, &events, resume.clone());
        let model = state_md::Model::build(&input);
        let text = model.render(
            &input.project,
            input.activity.last(),
            input.resume_file.as_deref(),
        );
        // Kept only where the rendering is (a project too big to draw its graph): a small
        // one renders in about a millisecond.
        match &origin {
            Some(origin) if keep_state(&cache, &model, origin, seq) => keep_text(&text, seq),
            _ => keep_file(&text_cache, None),
        }
        Ok(text)
    }

    /// Brings a kept STATE.md model up to date with the tasks changed after event `seq`;
    /// returns the newest event it now reflects and how many tasks changed, or `None`
    /// when it cannot follow (more changes than are worth following one by one, or a
    /// change of the tree's shape other than a new task under a group or at the top:
    /// see [`state_md::Model::update`]) and STATE.md is rendered from every task instead.
    fn follow_state(
        &self,
        model: &mut state_md::Model,
        seq: u64,
    ) -> Result<Option<(u64, usize)>, EngineError> {
        /// Beyond this many changed tasks a render from every task is as cheap.
        const FOLLOW_MAX: usize = 500;
        let (changed, now) = self.store.changed_since(seq)?;
        if changed.is_empty() {
            return Ok(Some((now, 0)));
        }
        if changed.len() > FOLLOW_MAX {
            return Ok(None);
        }
        let names: std::collections::BTreeSet<&str> = changed.iter().map(|c| c.as_str()).collect();
        let mut read = model.dependents(&names);
        read.extend(changed.iter().cloned());
        read.sort();
        read.dedup();
        let tasks = self.store.get_many(&read)?;
        let mut deps: Vec<TaskId> = tasks
            .iter()
            .flat_map(|t| t.spec.depends_on.iter().cloned())
            .collect();
        deps.sort();
        deps.dedup();
        let statuses: std::collections::BTreeMap<TaskId, Status> = self
            .store
            .heads(&deps)?
            .into_iter()
            .map(|h| (h.id, h.status))
            .collect();
        // A done leaf's duration, from its own lifecycle events, as the full render
        // takes it from every done task's.
        let mut durations = std::collections::BTreeMap::new();
        for t in tasks.iter().filter(|t| t.status() == Status::Done) {
            let mut events = self.store.events(Some(t.id()))?;
            events.retain(|e| crate::LIFECYCLE_EVENTS.contains(&e.kind.type_name()));
            if let Some((_, d)) = history::durations(&events, std::slice::from_ref(t)).pop() {
                durations.insert(t.id().clone(), d);
            }
        }
        let followed = model.update(&changed, &tasks, &|d| statuses.get(d).copied(), &|t| {
            durations.get(t.id()).copied()
        });
        Ok(followed.then_some((now, changed.len())))
    }

    /// What STATE.md is rendered from, read without decoding every task or the whole
    /// log: a task at rest from its head (everything STATE.md shows of it), the others
    /// in full; of the log, the lifecycle events of done tasks (their durations) and the
    /// newest activity entry (the only one shown). The render is the same as from every
    /// task and every event (a core test checks it).
    pub fn state_sources(&self) -> Result<(Vec<Task>, Vec<Event>), EngineError> {
        let tasks = self.tasks_at_rest_from_heads()?;
        let mut events = self
            .store
            .events_of(crate::LIFECYCLE_EVENTS, Some(Status::Done))?;
        if let Some(last) = self
            .store
            .last_event_where(history::ACTIVITY_TYPES, &history::is_activity)?
            && let Err(at) = events.binary_search_by_key(&last.seq, |e| e.seq)
        {
            events.insert(at, last);
        }
        Ok((tasks, events))
    }

    /// Every task, in id order, for a view of them all: a task at rest as its head
    /// shows it (see [`Task::from_head`]), the others read in full. The views of the
    /// whole tree read nothing else of a task at rest, so this is what they see of the
    /// tasks in full, without decoding most of them.
    pub fn tasks_at_rest_from_heads(&self) -> Result<Vec<Task>, EngineError> {
        let heads = self.store.all_heads()?;
        let mut active: std::collections::BTreeMap<TaskId, Task> = self
            .store
            .active()?
            .into_iter()
            .map(|t| (t.id().clone(), t))
            .collect();
        let mut tasks = Vec::with_capacity(heads.len());
        for h in heads {
            match active.remove(&h.id) {
                Some(t) => tasks.push(t),
                // Became active between the two reads: read it as it is now.
                None if h.active => match self.store.get(&h.id)? {
                    Some(t) => tasks.push(t),
                    None => tasks.push(Task::from_head(h)),
                },
                None => tasks.push(Task::from_head(h)),
            }
        }
        // Created between the two reads.
        tasks.extend(active.into_values());
        tasks.sort_by(|a, b| a.id().cmp(b.id()));
        Ok(tasks)
    }

    /// Everything STATE.md is derived from.
    pub fn state_input<'a>(
        &self,
        tasks: &'a [Task],
        events: &[warden_core::event::Event],
    ) -> state_md::StateInput<'a> {
        let (project, resume) = self.state_names();
        history::state_input(project, tasks, events, resume)
    }

    /// STATE.md's title (the project folder's name) and the continue file to resume
    /// from, if there is one.
    fn state_names(&self) -> (String, Option<String>) {
        let resume = self
            .ws
            .continue_md()
            .exists()
            .then(|| self.ws.display(&self.ws.continue_md()));
        let project = self
            .ws
            .root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "project".into());
        (project, resume)
    }

    /// The prompt for a task's current status and role: `.warden/prompts/<name>.md` when
    /// a person has overridden it, else the built-in template. `extra` is appended to the
    /// instructions (the failure tail of an automatic heal).
    pub fn prompt(&self, t: &Task, extra: Option<&str>) -> Result<String, EngineError> {
        let Some(kind) = prompt::prompt_kind(t) else {
            return Err(Failure::refused(format!(
                "task {} is {}; prompts exist for working, agent-review, clarification and stuck tasks",
                t.id(),
                t.status()
            ))
            .into());
        };
        let override_path = self.ws.prompt_override(kind.as_str());
        let template = match files::read_text(&self.ws.dir, &override_path) {
            Ok(text) => text,
            Err(FileError::Missing(_)) => prompt::default_template(kind).to_owned(),
            Err(e) => return Err(e.into()),
        };
        let mem = self.store.memory(t.id())?.unwrap_or_default();
        let mut instructions = prompt::default_instructions(t);
        if let Some(f) = t.feedback() {
            instructions.push_str("\n\nA person sent the work back after reviewing it: ");
            instructions.push_str(f);
        }
        if let Some(x) = extra {
            instructions.push_str("\n\n");
            instructions.push_str(x);
        }
        let task_file = self.ws.task_file(t.id()).display().to_string();
        let input = prompt::PromptInput {
            task: t,
            memory: &mem,
            task_file: &task_file,
            max_review_rounds: self.config.limits.max_review_rounds,
            instructions,
            warden: &prompt::shell_word(&self.warden_exe().to_string_lossy()),
        };
        prompt::render(&template, &input).map_err(|e| {
            Failure::usage(format!(
                "{}: {e}; fix the template or delete it to use the built-in one",
                self.ws.display(&override_path)
            ))
            .into()
        })
    }

    /// Writes .warden/STATE.md atomically.
    pub fn write_state_md(&self) -> Result<(), EngineError> {
        self.write_state_md_text(false).map(|_| ())
    }

    /// Renders STATE.md and writes it (synced when `durable`: `state --write`), under
    /// `.warden/state.lock`: writers that committed at once each render after taking
    /// it, so the last file written reflects every commit before it (rendered outside
    /// it, an older text could be renamed over a newer one and stay until the next
    /// write). Temporary files a killed writer left beside STATE.md are removed.
    pub fn write_state_md_text(&self, durable: bool) -> Result<String, EngineError> {
        let path = self.ws.dir.join("state.lock");
        let lock = open_lock_file(&path)
            .and_then(|f| f.lock().map(|()| f))
            .map_err(|e| lock_open_error(&path, e))?;
        let text = self.render_state()?;
        let state_md = self.ws.state_md();
        if durable {
            files::write_atomic(&state_md, text.as_bytes())?;
        } else {
            files::write_view(&state_md, text.as_bytes())?;
        }
        files::remove_stale_temps(&state_md);
        drop(lock);
        Ok(text)
    }
}

/// Opens (making it) a lock file, never through a link planted where it goes.
/// Nor through a FIFO or a device planted there: opened without blocking (a FIFO with
/// no reader held every writer of the task, or of every task for `state.lock`, for
/// ever, before any busy timeout could apply), and refused unless a regular file.
fn open_lock_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    files::open_file_only(
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true),
        path,
        "not a regular file (a FIFO, socket or device was put where Warden keeps a lock); remove it and run the command again",
    )
}

/// A lock file that could not be opened, as a file error (a link planted there is
/// named as one).
fn lock_open_error(path: &std::path::Path, e: std::io::Error) -> FileError {
    match e.raw_os_error() {
        Some(code) if code == rustix::io::Errno::LOOP.raw_os_error() => {
            FileError::Symlink(path.display().to_string())
        }
        _ => FileError::Io {
            path: path.display().to_string(),
            source: e,
        },
    }
}

/// The largest kept STATE.md model read (one of 100,000 tasks is about 9 MB).
const STATE_CACHE_MAX: u64 = 256 << 20;

/// A followed STATE.md model is kept again once this many tasks changed since it was
/// written…
const REWRITE_AFTER_TASKS: usize = 64;
/// … or this many events were written since.
const REWRITE_AFTER_EVENTS: u64 = 1_000;

/// Keeps a STATE.md model for the next render (see [`Engine::render_state`]), and says
/// whether it did. It is a cache: not synced, and a failure to write it costs the next
/// render its speed only.
fn keep_state(path: &std::path::Path, model: &state_md::Model, origin: &str, seq: u64) -> bool {
    // Too small to keep (its graph is drawn): a rendering kept while the project was
    // bigger would only be read and refused on every render.
    let text = model.encode(origin, seq);
    match &text {
        Some(t) => keep_file(path, Some(&[t.as_bytes()])),
        None => keep_file(path, None),
    }
    text.is_some()
}

/// Writes a cache file (`parts` one after another), or removes it for `None`. A failure
/// costs the next reader only its speed.
fn keep_file(path: &std::path::Path, parts: Option<&[&[u8]]>) {
    let Some(parts) = parts else {
        let _ = std::fs::remove_file(path);
        return;
    };
    // Never into a linked directory: the cache is not written where a link points.
    if let Some(dir) = path.parent()
        && !std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink())
        && std::fs::create_dir_all(dir).is_ok()
    {
        let _ = files::write_cache(path, parts);
    }
}

/// What `prev` says of each stored task (`of` a task), with the batch's changes laid
/// over it: a changed or new task as it will be, a removed one gone.
fn overlaid<'a, V>(
    prev: impl Iterator<Item = (&'a TaskId, V)>,
    batch: &'a Batch,
    of: impl Fn(&'a Task) -> V,
) -> std::collections::HashMap<&'a TaskId, V> {
    let mut tasks: std::collections::HashMap<&TaskId, V> = prev.collect();
    for ch in &batch.changes {
        match (&ch.before, &ch.after) {
            (_, Some(t)) => {
                tasks.insert(t.id(), of(t));
            }
            (Some(t), None) => {
                tasks.remove(t.id());
            }
            (None, None) => {}
        }
    }
    tasks
}

/// Refuses a batch whose tasks' dependencies could never all be met once laid over the
/// stored ones ([`warden_core::tree::deadlocks`]): a task made under a group it also
/// depends on, say, which a file's validation cannot see when the group is stored.
/// Only a batch that creates tasks or changes a parent or a `depends_on` pays for the
/// look at the whole tree.
pub fn check_deadlock<'a>(
    prev: impl Iterator<Item = (&'a TaskId, Option<&'a TaskId>, &'a [TaskId])>,
    batch: &'a Batch,
) -> Result<(), EngineError> {
    let shapes = batch
        .changes
        .iter()
        .any(|ch| match (&ch.before, &ch.after) {
            (None, Some(a)) => !a.spec.depends_on.is_empty(),
            (Some(b), Some(a)) => {
                b.spec.parent != a.spec.parent || b.spec.depends_on != a.spec.depends_on
            }
            _ => false,
        });
    if !shapes {
        return Ok(());
    }
    let tasks = overlaid(prev.map(|(id, p, d)| (id, (p, d))), batch, |t| {
        (t.spec.parent.as_ref(), &t.spec.depends_on[..])
    });
    let mut tasks: Vec<(&TaskId, Option<&TaskId>, &[TaskId])> =
        tasks.into_iter().map(|(id, (p, d))| (id, p, d)).collect();
    tasks.sort_unstable_by(|a, b| a.0.cmp(b.0));
    match warden_core::tree::deadlocks(&tasks).into_iter().next() {
        None => Ok(()),
        Some(steps) => Err(Failure::refused(
            warden_core::tree::PlanError::DependencyDeadlock(steps).to_string(),
        )
        .into()),
    }
}

/// Why a batch may not be committed because it creates a task, or moves one, where it
/// can never run as the tree says, for `task create`, `task edit` and `plan import`
/// (`None` when it places nothing wrong):
///
/// - under a cancelled task (its own row cancelled: a group's cancel): nothing under a
///   cancelled task ever starts, so an open task there could never be done, and the
///   views would count it as open work (a finished one may sit there: an exported plan
///   imports as it was);
/// - under a leaf that is not `pending` (working, under review, waiting for an answer,
///   stuck or done): the new child would make it a group whose status comes from its
///   children, while its own session ran on unseen and its branch was never merged.
///   (`plan apply`'s decomposition of the task an agent works on is the way a task
///   under way gains children.)
///
/// `plan sync` keeps a `.planning/` tree's shape: what lands under a cancelled phase is
/// cancelled with it for `warden run` and `plan next`.
pub fn misplaced(prev: &[Task], batch: &Batch) -> Option<String> {
    // The whole tree answers every question without a store error.
    misplaced_in(&mut crate::near::Whole::new(prev), batch).unwrap_or_default()
}

/// [`misplaced`] over the tree as `tree` shows it: only the ancestors of what the batch
/// places are looked up (and whether a leaf parent has children), so a `task create`
/// pays no map of the whole tree.
pub fn misplaced_in(
    tree: &mut dyn crate::near::Around,
    batch: &Batch,
) -> Result<Option<String>, EngineError> {
    use warden_core::head::TaskHead;
    let placed: Vec<&Task> = batch
        .changes
        .iter()
        .filter_map(|ch| match (&ch.before, &ch.after) {
            (None, Some(a)) => Some(a),
            (Some(b), Some(a)) if b.spec.parent != a.spec.parent => Some(a),
            _ => None,
        })
        .filter(|a| a.spec.parent.is_some())
        .collect();
    if placed.is_empty() {
        return Ok(None);
    }
    // The batch's tasks as they will be (a removed one: gone), else the stored one.
    let batch_tasks = crate::near::batch_heads(batch);
    let find = |tree: &mut dyn crate::near::Around,
                id: &TaskId|
     -> Result<Option<TaskHead>, EngineError> {
        match batch_tasks.get(id) {
            Some(t) => Ok(t.map(Task::head)),
            None => tree.head(id),
        }
    };
    // A parent that is a stored leaf and is not pending.
    for t in &placed {
        let Some(p) = t
            .spec
            .parent
            .as_ref()
            .map(|p| find(tree, p))
            .transpose()?
            .flatten()
        else {
            continue;
        };
        if matches!(p.status, Status::Pending | Status::Cancelled)
            || !tree.child_ids(&p.id)?.is_empty()
        {
            continue;
        }
        // The words `plan apply` refuses the same placement with.
        let refusal = warden_core::tree::ApplyError::UnderBusyLeaf {
            id: t.id().clone(),
            parent: p.id,
            status: p.status,
        };
        return Ok(Some(refusal.to_string()));
    }
    for t in placed.into_iter().filter(|a| !a.status().is_terminal()) {
        let mut up = t.spec.parent.clone();
        for _ in 0..=warden_core::tree::MAX_DEPTH {
            let Some(a) = up.as_ref().map(|x| find(tree, x)).transpose()?.flatten() else {
                break;
            };
            if a.status == Status::Cancelled {
                // The words `plan apply` refuses the same placement with.
                let refusal = warden_core::tree::ApplyError::UnderCancelled {
                    id: t.id().clone(),
                    parent: t.spec.parent.clone().unwrap_or_else(|| a.id.clone()),
                    cancelled: a.id.clone(),
                };
                return Ok(Some(refusal.to_string()));
            }
            up = a.parent;
        }
    }
    Ok(None)
}

/// [`misplaced_in`] as a refusal.
pub fn check_not_misplaced(
    tree: &mut dyn crate::near::Around,
    batch: &Batch,
) -> Result<(), EngineError> {
    match misplaced_in(tree, batch)? {
        None => Ok(()),
        Some(why) => Err(Failure::refused(why).into()),
    }
}

/// Refuses a batch that would put a task deeper than `tree::MAX_DEPTH` levels, so every
/// walk of the tree stays bounded: `prev` gives each stored task's id and parent, and the
/// batch's changes are laid over them. Only a batch that creates tasks or moves one pays
/// for the look at the whole tree.
pub fn check_depth<'a>(
    prev: impl Iterator<Item = (&'a TaskId, Option<&'a TaskId>)>,
    batch: &'a Batch,
) -> Result<(), EngineError> {
    let moves = batch
        .changes
        .iter()
        .any(|ch| match (&ch.before, &ch.after) {
            (None, Some(_)) => true,
            (Some(b), Some(a)) => b.spec.parent != a.spec.parent,
            _ => false,
        });
    if !moves {
        return Ok(());
    }
    let parents = overlaid(prev, batch, |t| t.spec.parent.as_ref());
    match warden_core::tree::too_deep(&parents) {
        None => Ok(()),
        Some((id, level)) => Err(Failure::refused(format!(
            "task {id} would sit {level} levels deep; Warden keeps plans to {} levels (a chain of parents that long is almost always a mistake): give it a parent higher up",
            warden_core::tree::MAX_DEPTH
        ))
        .into()),
    }
}
