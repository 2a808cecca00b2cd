//! The open workspace a command works on: the shared [`Engine`] plus the output mode.
//! The write path itself lives in `warden_store::engine`, shared with the supervisor.

use std::ops::Deref;

use warden_core::event::Actor;
use warden_core::model::{Task, TaskId};
use warden_store::{Engine, Workspace};

use crate::error::CliError;
use crate::out;

pub use warden_store::{Decision, Written};

/// Options every command shares.
#[derive(Debug)]
pub struct Global {
    pub dir: Option<std::path::PathBuf>,
    pub json: bool,
}

/// An open workspace.
pub struct App {
    pub engine: Engine,
    pub json: bool,
}

impl Deref for App {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

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
    let engine = Engine::open(ws, Actor::Person)?;
    if g.json {
        out::json(&serde_json::json!({
            "root": engine.ws.root.display().to_string(),
            "dir": engine.ws.dir.display().to_string(),
            "store": warden_store::redact_url(&engine.config.store_url()),
        }));
    } else {
        out::line(&format!(
            "Initialised a Warden workspace in {}\nNext: warden task create ID --title \"…\"  (or warden plan import plan.json)",
            engine.ws.dir.display()
        ));
    }
    Ok(())
}

/// The actor of this process: an agent inside a session (`WARDEN_ROLE` set), else a person.
pub fn actor() -> Actor {
    if std::env::var_os("WARDEN_ROLE").is_some_and(|r| !r.is_empty()) {
        Actor::Agent
    } else {
        Actor::Person
    }
}

/// Finds the workspace from `--dir`/`WARDEN_DIR` or the current directory.
pub fn find_workspace(g: &Global) -> Result<Workspace, CliError> {
    let cwd = std::env::current_dir().map_err(|e| CliError::internal(e.to_string()))?;
    Ok(Workspace::find(&cwd, g.dir.as_deref())?)
}

impl App {
    /// Finds and opens the workspace.
    pub fn open(g: &Global) -> Result<App, CliError> {
        let ws = find_workspace(g)?;
        Ok(App {
            engine: Engine::open(ws, actor())?,
            json: g.json,
        })
    }

    /// One task, or exit 3.
    pub fn get(&self, id: &TaskId) -> Result<Task, CliError> {
        Ok(self.engine.get(id)?)
    }

    /// Every task.
    pub fn tasks(&self) -> Result<Vec<Task>, CliError> {
        Ok(self.engine.tasks()?)
    }

    /// Path relative to the project root.
    pub fn shown(&self, p: &std::path::Path) -> String {
        self.ws.display(p)
    }
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
