//! What every command shares: the global options, opening the workspace through the
//! application layer, and the task id argument that defaults to `$WARDEN_TASK_ID`.

use warden_app::{App, Result};
use warden_core::failure::Failure;
use warden_core::model::TaskId;

/// Options every command shares.
#[derive(Debug)]
pub struct Global {
    /// `--dir` / `WARDEN_DIR`: the project root.
    pub dir: Option<std::path::PathBuf>,
    /// `--json`: machine output on stdout, errors as JSON on stderr.
    pub json: bool,
}

impl Global {
    /// Finds and opens the workspace for this process's actor (an agent inside a
    /// session, else a person).
    pub fn open(&self) -> Result<App> {
        App::find(self.dir.as_deref(), warden_app::actor_from_env())
    }

    /// The workspace without opening the store.
    pub fn workspace(&self) -> Result<warden_store::Workspace> {
        warden_app::find_workspace(self.dir.as_deref())
    }
}

/// The task id argument, or `$WARDEN_TASK_ID`, or a usage error.
pub fn id_or_env(id: Option<String>) -> Result<TaskId> {
    match id {
        Some(s) => warden_app::task_id(&s),
        None => match std::env::var("WARDEN_TASK_ID") {
            Ok(s) if !s.is_empty() => warden_app::task_id(&s),
            _ => Err(Failure::usage(
                "no task id given and WARDEN_TASK_ID is not set; pass the task id",
            )),
        },
    }
}
