//! `warden memory …`: per-task structured memory (seed 003). Merges are one transaction
//! each, fenced by the task version, so concurrent merges never lose an item.

use std::io::Read;

use clap::Subcommand;
use serde_json::json;
use warden_core::memory::{self, MemoryDelta};

use crate::app::{App, Global, Written, id_or_env};
use crate::error::CliError;
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
    },
    /// Print the memory as it is embedded in prompts.
    Dump {
        /// Task id (default: $WARDEN_TASK_ID).
        id: Option<String>,
    },
}

pub fn run(g: &Global, cmd: MemoryCmd) -> Result<(), CliError> {
    let app = App::open(g)?;
    match cmd {
        MemoryCmd::Show { id } => {
            let id = id_or_env(id)?;
            app.get(&id)?;
            let m = app.store.memory(&id)?.unwrap_or_default();
            if app.json {
                out::json(&json!(m));
            } else {
                let r = memory::render(&m);
                out::line(if r.is_empty() { "(no memory yet)" } else { &r });
            }
            Ok(())
        }
        MemoryCmd::Dump { id } => {
            let id = id_or_env(id)?;
            app.get(&id)?;
            let m = app.store.memory(&id)?.unwrap_or_default();
            if app.json {
                out::json(&json!({"id": id, "block": memory::block(&m)}));
            } else {
                out::line(&memory::block(&m));
            }
            Ok(())
        }
        MemoryCmd::Merge { args } => {
            let (id, file) = match args.as_slice() {
                [file] => (id_or_env(None)?, file.clone()),
                [id, file] => (id_or_env(Some(id.clone()))?, file.clone()),
                _ => return Err(CliError::usage("usage: warden memory merge [ID] FILE|-")),
            };
            merge(&app, &id, &file)
        }
    }
}

fn read_delta(file: &str) -> Result<MemoryDelta, CliError> {
    let mut text = String::new();
    let limit = warden_store::files::MAX_FILE_BYTES;
    let shown = if file == "-" { "stdin" } else { file };
    let read = if file == "-" {
        std::io::stdin().take(limit + 1).read_to_string(&mut text)
    } else {
        std::fs::File::open(file).and_then(|f| f.take(limit + 1).read_to_string(&mut text))
    };
    read.map_err(|e| CliError::usage(format!("cannot read the memory delta from {shown}: {e}")))?;
    if text.len() as u64 > limit {
        return Err(CliError::refused(format!(
            "refused: the memory delta in {shown} is over 1 MiB; send a smaller delta"
        )));
    }
    serde_json::from_str(&text).map_err(|e| {
        CliError::refused(format!(
            "refused: the memory delta in {shown} is not valid: {e}; send a JSON object with goals, constraints, decisions, hypotheses, history, open_issues (lists of strings) and next_focus (a string)"
        ))
    })
}

fn merge(app: &App, id: &warden_core::model::TaskId, file: &str) -> Result<(), CliError> {
    let delta = read_delta(file)?;
    if let Written::Done(..) = app.merge_memory(id, &delta)? {
        if app.json {
            // The memory as it is now: this merge and any that landed since.
            let m = app.store.memory(id)?.unwrap_or_default();
            out::json(&json!(m));
        } else {
            out::line(&format!("{id}: memory merged"));
        }
    }
    Ok(())
}
