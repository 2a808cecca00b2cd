//! `warden dashboard`: a terminal UI over a workspace — project progress, every task in
//! tree order with its state, the selected task's detail — that follows changes made by
//! any process and lets a person respawn, retry and cancel tasks.
//!
//! The state ([`App`]) and the drawing ([`render`]) are pure so they can be tested with
//! ratatui's `TestBackend`; [`run`] owns the terminal and the store.

pub mod app;
pub mod load;
pub mod term;
pub mod view;

#[cfg(test)]
mod tests;

pub use app::{App, Command, Detail, Message, Mode};
pub use term::run;
pub use view::render;

use warden_store::EngineError;

/// Why the dashboard could not run.
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    /// Standard input or output is not a terminal (a pipe, a file, CI).
    #[error(
        "warden dashboard needs an interactive terminal; run it in one, or use `warden task list` or `warden state` in scripts"
    )]
    NoTerminal,
    /// The workspace or its store failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The terminal could not be set up or drawn to.
    #[error("terminal error: {0}; check that TERM is set and the terminal is still open")]
    Terminal(#[from] std::io::Error),
}

impl DashboardError {
    /// The documented exit code: 2 without a terminal, the engine's own code for store
    /// errors, 5 for terminal failures.
    pub fn exit_code(&self) -> i32 {
        match self {
            DashboardError::NoTerminal => 2,
            DashboardError::Engine(e) => e.exit_code(),
            DashboardError::Terminal(_) => 5,
        }
    }

    /// The one-line message (as `EngineError::message` for store errors).
    pub fn message(&self) -> String {
        match self {
            DashboardError::Engine(e) => e.message(),
            e => e.to_string(),
        }
    }
}
