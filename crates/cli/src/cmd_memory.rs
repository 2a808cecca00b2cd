//! `warden memory …`: per-task structured memory (seed 003). Merges are one transaction
//! each, fenced by the task version, so concurrent merges never lose an item.

use clap::Subcommand;
use serde_json::json;
use warden_app::Result;
use warden_app::scope::Request;
use warden_core::failure::Failure;
use warden_core::memory;

use crate::ctx::{Global, id_or_env};
use crate::out;

#[derive(Subcommand, Debug)]
pub enum MemoryCmd {
    /// Show a task's memory (`--json`: the seven fields).
    #[command(after_help = "Example:\n  warden --json memory show api")]
    Show {
        /// Task id (default: $WARDEN_TASK_ID).
        id: Option<String>,
    },
    /// Merge a JSON delta: lists are appended, a non-empty next_focus replaces; caps apply.
    #[command(
        after_help = "Examples:\n  warden memory merge api delta.json\n  echo '{\"decisions\": [\"use sqlx\"], \"next_focus\": \"tests\"}' | warden memory merge api -"
    )]
    Merge {
        /// Task id (default: $WARDEN_TASK_ID). With one argument, it is the FILE.
        #[arg(num_args = 1..=2, value_names = ["ID", "FILE"], required = true)]
        args: Vec<String>,
        /// An idempotency key: a merge repeated with the same key (after a lost answer)
        /// is applied once.
        #[arg(long, value_name = "KEY")]
        request_id: Option<String>,
    },
    /// Print the memory as it is embedded in prompts.
    #[command(after_help = "Example:\n  warden memory dump api")]
    Dump {
        /// Task id (default: $WARDEN_TASK_ID).
        id: Option<String>,
    },
}

impl MemoryCmd {
    /// The command's name and what it asks of an agent session's scope.
    pub fn agent_request(&self) -> (&'static str, Request) {
        match self {
            MemoryCmd::Show { .. } => ("warden memory show", Request::Free),
            MemoryCmd::Dump { .. } => ("warden memory dump", Request::Free),
            MemoryCmd::Merge { args, .. } => (
                "warden memory merge",
                Request::Change {
                    id: (args.len() == 2).then(|| args[0].clone()),
                },
            ),
        }
    }
}

pub fn run(g: &Global, cmd: MemoryCmd) -> Result<()> {
    let app = g.open()?;
    match cmd {
        MemoryCmd::Show { id } => {
            let m = app.memory(&id_or_env(id)?)?;
            if g.json {
                out::json(&m);
            } else {
                let r = memory::render(&m);
                out::line(if r.is_empty() { "(no memory yet)" } else { &r });
            }
            Ok(())
        }
        MemoryCmd::Dump { id } => {
            let id = id_or_env(id)?;
            let block = app.memory_block(&id)?;
            if g.json {
                out::json(&json!({"id": id, "block": block}));
            } else {
                out::line(&block);
            }
            Ok(())
        }
        MemoryCmd::Merge { args, request_id } => {
            let (id, file) = match args.as_slice() {
                [file] => {
                    // `memory merge api` with the delta on stdin reads `api` as the file:
                    // said so, with how to give both (inside a session too, where the
                    // id comes from WARDEN_TASK_ID and the error was "cannot read the
                    // memory delta api").
                    if file != "-"
                        && !std::path::Path::new(file).exists()
                        && warden_core::model::TaskId::new(file).is_ok()
                    {
                        return Err(Failure::usage(format!(
                            "one argument is the delta FILE, and there is no file {file:?}; to merge into task {file}, name the delta too: `warden memory merge {file} FILE` (or `-` for standard input)"
                        )));
                    }
                    (id_or_env(None)?, file.clone())
                }
                [id, file] => (id_or_env(Some(id.clone()))?, file.clone()),
                _ => return Err(Failure::usage("usage: warden memory merge [ID] FILE|-")),
            };
            let delta = warden_app::memory::read_delta(std::path::Path::new(&file))?;
            let m = app.merge_memory(&id, &delta, request_id.as_deref())?;
            if g.json {
                // The memory as it is now: this merge and any that landed since.
                out::json(&m);
            } else {
                out::line(&format!("{id}: memory merged"));
            }
            Ok(())
        }
    }
}
