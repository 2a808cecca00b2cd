//! The open workspace a command works on, and the one write path every changing command
//! goes through: read the task and its TASK.md, decide through the core, commit with the
//! version fence (retrying a conflict), then mirror the result into the files.

use std::path::Path;

use jiff::Timestamp;
use serde_json::Value;
use warden_core::event::Actor;
use warden_core::model::{Task, TaskId};
use warden_core::ops::{Change, Ctx};
use warden_store::{Batch, Config, Store, StoreError, Workspace};

use crate::error::CliError;
use crate::{out, taskfile};

/// Options every command shares.
#[derive(Debug)]
pub struct Global {
    pub dir: Option<std::path::PathBuf>,
    pub json: bool,
}

/// An open workspace.
pub struct App {
    pub ws: Workspace,
    pub config: Config,
    pub store: Box<dyn Store>,
    pub json: bool,
    pub actor: Actor,
}

/// How many times a write is decided again after a version conflict before giving up
/// with exit 4.
const CONFLICT_RETRIES: usize = 50;

/// `warden init`.
pub fn init(g: &Global, store: Option<&str>) -> Result<(), CliError> {
    let root = match &g.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir().map_err(|e| CliError::internal(e.to_string()))?,
    };
    if let Some(url) = store {
        warden_store::StoreUrl::parse(url, &root).map_err(|e| CliError::usage(e.to_string()))?;
    }
    let ws = Workspace::init(&root, store)?;
    // Open the store once so the database and its schema exist from the start.
    let config = ws.config()?;
    warden_store::open(&ws, &config)?;
    if g.json {
        out::json(&serde_json::json!({
            "root": ws.root.display().to_string(),
            "dir": ws.dir.display().to_string(),
            "store": warden_store::redact_url(&config.store_url()),
        }));
    } else {
        out::line(&format!(
            "Initialised a Warden workspace in {}\nNext: warden task create ID --title \"…\"  (or warden plan import plan.json)",
            ws.dir.display()
        ));
    }
    Ok(())
}

impl App {
    /// Finds and opens the workspace.
    pub fn open(g: &Global) -> Result<App, CliError> {
        let cwd = std::env::current_dir().map_err(|e| CliError::internal(e.to_string()))?;
        let ws = Workspace::find(&cwd, g.dir.as_deref())?;
        let config = ws.config()?;
        let store = warden_store::open(&ws, &config)?;
        let actor = if std::env::var_os("WARDEN_ROLE").is_some_and(|r| !r.is_empty()) {
            Actor::Agent
        } else {
            Actor::Person
        };
        Ok(App {
            ws,
            config,
            store,
            json: g.json,
            actor,
        })
    }

    /// The current time: the only place the CLI reads the clock for the core.
    pub fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    /// The context of a core operation on `id`.
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

    /// One task, or exit 3.
    pub fn get(&self, id: &TaskId) -> Result<Task, CliError> {
        self.store.get(id)?.ok_or_else(|| {
            CliError::not_found(format!("no task {id}; list tasks with `warden task list`"))
        })
    }

    /// Every task.
    pub fn tasks(&self) -> Result<Vec<Task>, CliError> {
        Ok(self.store.list()?)
    }

    /// Returns the stored response of an earlier request with this id, if any.
    pub fn replayed(&self, request: Option<&str>) -> Result<Option<String>, CliError> {
        match request {
            Some(k) => Ok(self.store.request(k)?),
            None => Ok(None),
        }
    }

    /// The write path of every single-task command. `decide` sees the task and its
    /// TASK.md (artifacts and tamper notes) and returns the change; tamper notes land in
    /// the same transaction. A conflict re-reads and decides again, unless `decide` ran
    /// something that must not run twice (then exit 4: safe to retry).
    pub fn write_task(
        &self,
        id: &TaskId,
        request: Option<&str>,
        mut decide: impl FnMut(&Task, &taskfile::Doc) -> Result<Decision, CliError>,
    ) -> Result<Written, CliError> {
        if let Some(resp) = self.replayed(request)? {
            return Ok(Written::Replayed(resp));
        }
        let shown = self.task_file_shown(id);
        for _ in 0..CONFLICT_RETRIES {
            let task = self.get(id)?;
            let doc = taskfile::read(&self.ws, &task)?;
            let Decision {
                change,
                retryable,
                memory,
            } = decide(&task, &doc)?;
            let change = change.prepend(doc.tamper.clone(), &self.ctx(&shown))?;
            let response = self.response_for(&change)?;
            let batch = Batch {
                changes: vec![change.clone()],
                memory: memory.into_iter().collect(),
                request: request.map(|k| (k.to_owned(), response.to_string())),
            };
            match self.store.commit(batch) {
                Ok(_) => {
                    self.after_commit(std::slice::from_ref(&change));
                    return Ok(Written::Done(Box::new(change), response));
                }
                Err(StoreError::Conflict { .. }) if retryable => continue,
                Err(StoreError::Duplicate(resp)) => return Ok(Written::Replayed(resp)),
                Err(e) => return Err(e.into()),
            }
        }
        Err(CliError::new(
            4,
            format!(
                "conflict: task {id} kept changing while this request was decided; run the command again"
            ),
        ))
    }

    /// The JSON a write prints (and stores for `--request-id`): the task after it.
    fn response_for(&self, change: &Change) -> Result<Value, CliError> {
        Ok(match &change.after {
            Some(t) => {
                let all = self.tasks()?;
                let mut all: Vec<Task> = all.into_iter().filter(|x| x.id() != t.id()).collect();
                all.push(t.clone());
                out::task_json(t, &all)
            }
            None => Value::Null,
        })
    }

    /// Mirrors committed changes into the files: TASK.md frontmatter, and STATE.md when
    /// it is kept (it exists because `state --write` was used). The store is the truth;
    /// a file that cannot be written is a warning, not a failure.
    pub fn after_commit(&self, changes: &[Change]) {
        for ch in changes {
            if let Some(t) = &ch.after
                && let Err(e) = taskfile::sync(&self.ws, t)
            {
                eprintln!("warning: {}: {}", self.task_file_shown(t.id()), e.message);
            }
        }
        if self.ws.state_md().exists()
            && let Err(e) = crate::cmd_state::write_state_md(self)
        {
            eprintln!("warning: STATE.md not updated: {}", e.message);
        }
    }

    /// Commits a batch of changes computed elsewhere (plan import/apply/sync).
    pub fn commit_batch(&self, batch: Batch) -> Result<(), CliError> {
        let changes = batch.changes.clone();
        self.store.commit(batch)?;
        self.after_commit(&changes);
        Ok(())
    }

    /// Path relative to the project root.
    pub fn shown(&self, p: &Path) -> String {
        self.ws.display(p)
    }
}

/// What `decide` returns.
pub struct Decision {
    pub change: Change,
    /// Safe to decide again after a conflict (nothing was run).
    pub retryable: bool,
    /// A memory row written in the same transaction.
    pub memory: Option<(TaskId, warden_core::memory::Memory)>,
}

impl Decision {
    pub fn retryable(change: Change) -> Decision {
        Decision {
            change,
            retryable: true,
            memory: None,
        }
    }
}

/// The result of a write.
pub enum Written {
    /// Committed now.
    Done(Box<Change>, Value),
    /// An earlier request with the same id was already applied: its response.
    Replayed(String),
}

/// Parses a task id from the command line (exit 2 on a bad id).
pub fn task_id(s: &str) -> Result<TaskId, CliError> {
    Ok(TaskId::new(s)?)
}

/// The task id argument, or `$WARDEN_TASK_ID`, or a usage error.
pub fn id_or_env(id: Option<String>) -> Result<TaskId, CliError> {
    match id {
        Some(s) => task_id(&s),
        None => match std::env::var("WARDEN_TASK_ID") {
            Ok(s) if !s.is_empty() => task_id(&s),
            _ => Err(CliError::usage(
                "no task id given and WARDEN_TASK_ID is not set; pass the task id",
            )),
        },
    }
}
