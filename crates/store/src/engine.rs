//! The engine: an open workspace (configuration + store) and the one write path every
//! front end shares — the CLI, the supervisor and the MCP server. A write reads the task
//! and its TASK.md, lets the caller decide through the core, commits the change fenced by
//! version (deciding again after a conflict), then mirrors the result into the files.

use jiff::Timestamp;
use serde_json::{Value, json};
use warden_core::event::Actor;
use warden_core::event::EventKind;
use warden_core::memory::{self, MemoryAppend, MemoryCaps, MemoryDelta};
use warden_core::model::{Status, Task, TaskId};
use warden_core::ops::{self, Change, Ctx, Outcome, Refusal};
use warden_core::{history, progress, prompt, state_md, tree};

use crate::config::ConfigError;
use crate::files::{self, FileError};
use crate::taskfile::{self, Doc};
use crate::workspace::WorkspaceError;
use crate::{Batch, Config, Fence, OpenError, Store, StoreError, Workspace};

/// How many times a write is decided again after a version conflict before giving up
/// with exit 4.
const CONFLICT_RETRIES: usize = 50;

/// Anything that can stop an engine operation, with its documented exit code.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The request was refused by the rules (exit 1 or 5, see [`Refusal::exit_code`]).
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
    /// Anything else, with its exit code and one-line message.
    #[error("{message}")]
    Other {
        /// Exit code.
        code: i32,
        /// Message.
        message: String,
    },
}

impl EngineError {
    /// The documented exit code (DESIGN 4).
    pub fn exit_code(&self) -> i32 {
        match self {
            EngineError::Refused(r) => r.exit_code(),
            EngineError::NotFound(_) => 3,
            EngineError::Store(e) => e.exit_code(),
            EngineError::File(e) => e.exit_code(),
            EngineError::Open(e) => e.exit_code(),
            EngineError::Workspace(e) => e.exit_code(),
            EngineError::Config(_) => 2,
            EngineError::Other { code, .. } => *code,
        }
    }

    /// The one-line message, prefixed `refused:` for content refusals.
    pub fn message(&self) -> String {
        let m = self.to_string();
        match self {
            EngineError::File(e) if e.exit_code() == 1 => format!("refused: {m}"),
            _ => m,
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
    /// Committed now; the JSON of the task after it when a request id was given (else
    /// `null`: compute it with [`Engine::response_for`] when needed).
    Done(Box<Change>, Value),
    /// An earlier request with the same id was already applied: its response.
    Replayed(String),
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
        })
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
        }
    }

    /// Merges a delta into a task's memory (`memory merge`, MCP `memory_merge`): one
    /// write that records `memory.merged` and appends the capped delta in the same
    /// transaction. It never reads the stored memory, so a merge costs the same however
    /// long the memory is, and concurrent merges never lose an item.
    pub fn merge_memory(&self, id: &TaskId, delta: &MemoryDelta) -> Result<Written, EngineError> {
        let append = memory::append_of(delta, &self.memory_caps());
        let shown = self.task_file_shown(id);
        self.write_task(id, None, |t, _doc| {
            let change = ops::record(
                t,
                vec![EventKind::MemoryMerged {
                    delta: delta.clone(),
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
    /// something that must not run twice (then exit 4: safe to retry).
    pub fn write_task(
        &self,
        id: &TaskId,
        request: Option<&str>,
        mut decide: impl FnMut(&Task, &Doc) -> Result<Decision, EngineError>,
    ) -> Result<Written, EngineError> {
        if let Some(k) = request
            && let Some(resp) = self.store.request(k)?
        {
            return Ok(Written::Replayed(resp));
        }
        let shown = self.task_file_shown(id);
        // One writer of a task at a time from read to mirror: otherwise a second writer
        // could read TASK.md between the first one's commit and its frontmatter rewrite,
        // and take the stale mirror for an agent's tampering.
        let lock = self.lock_task(id)?;
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
            let mut doc = taskfile::read(&self.ws, &task)?;
            let Decision {
                change,
                retryable,
                memory,
            } = decide(&task, &doc)?;
            let change = change.prepend(doc.tamper.clone(), &self.ctx(&shown))?;
            // The response is stored only for a request id; others compute it on demand
            // (`response_for`), so a plain write never lists the whole project.
            let response = match request {
                Some(_) => self.response_for(&change)?,
                None => Value::Null,
            };
            let batch = Batch {
                changes: vec![change.clone()],
                memory: memory.into_iter().collect(),
                request: request.map(|k| (k.to_owned(), response.to_string())),
                fence: fence.clone(),
            };
            match self.store.commit_unsynced(batch) {
                Ok(_) => {
                    crate::failpoint::hit("after-commit");
                    crate::failpoint::hit("after-commit-exit");
                    self.finish_write(lock, &change, &mut doc)?;
                    return Ok(Written::Done(Box::new(change), response));
                }
                Err(StoreError::Conflict { .. }) if retryable => continue,
                Err(StoreError::Duplicate(resp)) => return Ok(Written::Replayed(resp)),
                Err(e) => return Err(e.into()),
            }
        }
        Err(EngineError::Other {
            code: 4,
            message: format!(
                "conflict: task {id} kept changing while this request was decided; run the command again"
            ),
        })
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
        self.sync_state_md();
        drop(lock);
        crate::failpoint::hit("before-sync");
        Ok(self.store.sync()?)
    }

    /// Takes the task's write lock (`.warden/tasks/<id>/.lock`), released on drop. The
    /// folder is checked for links once; the lock file is opened without following one.
    fn lock_task(&self, id: &TaskId) -> Result<std::fs::File, EngineError> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = self.ws.task_dir(id);
        files::check_no_links(&self.ws.dir, &dir)?;
        let path = dir.join(".lock");
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(&path)
        };
        let opened = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                files::create_dir(&self.ws.dir, &dir)?;
                open()
            }
            r => r,
        };
        let f = opened.map_err(|e| match e.raw_os_error() {
            Some(code) if code == rustix::io::Errno::LOOP.raw_os_error() => {
                FileError::Symlink(path.display().to_string())
            }
            _ => FileError::Io {
                path: path.display().to_string(),
                source: e,
            },
        })?;
        f.lock().map_err(|e| FileError::Io {
            path: path.display().to_string(),
            source: e,
        })?;
        Ok(f)
    }

    /// The JSON a write prints (and stores for `--request-id`): the task after it, and
    /// under `error` the failure a stored outcome means (a failed guard), so a repeated
    /// request gets the same answer.
    pub fn response_for(&self, change: &Change) -> Result<Value, EngineError> {
        let Some(t) = &change.after else {
            return Ok(Value::Null);
        };
        let mut all: Vec<Task> = self
            .tasks()?
            .into_iter()
            .filter(|x| x.id() != t.id())
            .collect();
        all.push(t.clone());
        let mut v = task_json(t, &all);
        if let Outcome::GuardFailed { tail, stuck } = &change.outcome {
            let message = if *stuck {
                format!(
                    "refused: the postchecks of {} failed and its {} attempts are used up; the task is now stuck (a person can `warden task retry {}`)",
                    t.id(),
                    t.spec.max_attempts,
                    t.id()
                )
            } else {
                format!(
                    "refused: the postchecks of {} failed (attempt {} of {}); fix the problem and run `warden task complete` again",
                    t.id(),
                    t.attempts(),
                    t.spec.max_attempts
                )
            };
            v["error"] = json!({"code": 1, "message": message, "detail": tail});
        }
        Ok(v)
    }

    /// Commits a batch of changes decided elsewhere (plan import, apply, sync).
    pub fn commit_batch(&self, batch: Batch) -> Result<(), EngineError> {
        let changes = batch.changes.clone();
        self.store.commit(batch)?;
        self.after_commit(&changes);
        Ok(())
    }

    /// Mirrors committed changes into the files: TASK.md frontmatter, and STATE.md when
    /// it is kept (it exists because `state --write` was used). The store is the truth;
    /// a file that cannot be written is a warning on stderr, never a failure.
    pub fn after_commit(&self, changes: &[Change]) {
        for t in changes.iter().filter_map(|ch| ch.after.as_ref()) {
            self.mirror(t, None);
        }
        self.sync_state_md();
    }

    /// Restores a task's TASK.md mirror (see [`taskfile::sync`]); a failure is a warning,
    /// never a lost commit.
    fn mirror(&self, t: &Task, read: Option<String>) {
        if let Err(e) = taskfile::sync(&self.ws, t, read) {
            eprintln!("warning: {}: {e}", self.task_file_shown(t.id()));
        }
    }

    /// Rewrites STATE.md from the store when the project keeps one.
    fn sync_state_md(&self) {
        if self.ws.state_md().exists()
            && let Err(e) = self.write_state_md()
        {
            eprintln!("warning: STATE.md not updated: {e}");
        }
    }

    /// Renders STATE.md from the store.
    pub fn render_state(&self) -> Result<String, EngineError> {
        let tasks = self.tasks()?;
        let events = self.store.events(None)?;
        Ok(state_md::render(&self.state_input(&tasks, &events)))
    }

    /// Everything STATE.md is derived from.
    pub fn state_input<'a>(
        &self,
        tasks: &'a [Task],
        events: &[warden_core::event::Event],
    ) -> state_md::StateInput<'a> {
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
        history::state_input(project, tasks, events, resume)
    }

    /// The prompt for a task's current status and role: `.warden/prompts/<name>.md` when
    /// a person has overridden it, else the built-in template. `extra` is appended to the
    /// instructions (the failure tail of an automatic heal).
    pub fn prompt(&self, t: &Task, extra: Option<&str>) -> Result<String, EngineError> {
        let Some(kind) = prompt::prompt_kind(t) else {
            return Err(EngineError::Other {
                code: 1,
                message: format!(
                    "refused: task {} is {}; prompts exist for working, agent-review, clarification and stuck tasks",
                    t.id(),
                    t.status()
                ),
            });
        };
        let override_path = self.ws.prompt_override(kind.as_str());
        let template = match files::read_text(&self.ws.dir, &override_path) {
            Ok(text) => text,
            Err(FileError::Missing(_)) => prompt::default_template(kind).to_owned(),
            Err(e) => return Err(e.into()),
        };
        let mem = self.store.memory(t.id())?.unwrap_or_default();
        let mut instructions = prompt::default_instructions(t);
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
        };
        prompt::render(&template, &input).map_err(|e| EngineError::Other {
            code: 2,
            message: format!(
                "{}: {e}; fix the template or delete it to use the built-in one",
                self.ws.display(&override_path)
            ),
        })
    }

    /// Writes .warden/STATE.md atomically.
    pub fn write_state_md(&self) -> Result<(), EngineError> {
        let text = self.render_state()?;
        files::write_view(&self.ws.state_md(), text.as_bytes())?;
        Ok(())
    }
}

/// Are all of a task's dependencies done?
pub fn deps_done(t: &Task, all: &[Task]) -> bool {
    t.spec.depends_on.iter().all(|d| {
        all.iter()
            .find(|x| x.id() == d)
            .is_some_and(|x| x.status() == Status::Done)
    })
}

/// The JSON of one task (`task show --json`, MCP `task_get`): DESIGN 4's fields plus the
/// session and failure details. For many tasks, build one [`tree::TreeIndex`] and call
/// [`task_json_indexed`].
pub fn task_json(t: &Task, all: &[Task]) -> Value {
    task_json_indexed(t, &tree::TreeIndex::new(all))
}

/// [`task_json`] with the tree already indexed (linear for a whole list).
pub fn task_json_indexed(t: &Task, idx: &tree::TreeIndex<'_>) -> Value {
    let children: Vec<&str> = idx
        .children(t.id())
        .iter()
        .map(|c| c.id().as_str())
        .collect();
    let deps_done = t
        .spec
        .depends_on
        .iter()
        .all(|d| idx.get(d).is_some_and(|x| x.status() == Status::Done));
    let phases: serde_json::Map<String, Value> = t
        .phases()
        .iter()
        .map(|(p, s)| (p.to_string(), json!(s.as_str())))
        .collect();
    json!({
        "id": t.id(),
        "title": t.spec.title,
        "body": t.spec.body,
        "parent": t.spec.parent,
        "order": t.spec.order,
        "children": children,
        "depends_on": t.spec.depends_on,
        "workflow": t.spec.workflow.as_str(),
        "status": t.status().as_str(),
        "passes": t.passes(),
        "attempts": t.attempts(),
        "max_attempts": t.spec.max_attempts,
        "crash_count": t.crash_count(),
        "review_round": t.review_round(),
        "gate": progress::gate_status(t, deps_done).map(|g| g.as_str()),
        "phases": phases,
        "resume_from_phase": t.resume_from_phase().map(|p| p.as_str()),
        "auto_heal": t.auto_heal().iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "spec": t.spec.spec,
        "branch": t.branch(),
        "session": t.live_session(),
        "dead": t.is_dead(),
        "respawn_requested": t.respawn_requested(),
        "last_failure": t.last_failure(),
        "version": t.version(),
        "created_at": t.created_at().to_string(),
        "updated_at": t.updated_at().to_string(),
    })
}
