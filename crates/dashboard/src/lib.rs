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

use warden_core::failure::Failure;

/// Why the dashboard could not run; every case becomes a [`Failure`] with its exit code.
#[derive(Debug)]
pub enum DashboardError {
    /// Standard input or output is not a terminal (a pipe, a file, CI): exit 2.
    NoTerminal,
    /// The workspace or its store failed.
    Failed(Failure),
    /// The terminal could not be set up or drawn to: exit 5.
    Terminal(std::io::Error),
}

impl From<Failure> for DashboardError {
    fn from(f: Failure) -> Self {
        DashboardError::Failed(f)
    }
}

impl From<std::io::Error> for DashboardError {
    fn from(e: std::io::Error) -> Self {
        DashboardError::Terminal(e)
    }
}

impl From<DashboardError> for Failure {
    fn from(e: DashboardError) -> Failure {
        match e {
            DashboardError::NoTerminal => Failure::usage(
                "warden dashboard needs an interactive terminal; run it in one, or use `warden task list` or `warden state` in scripts",
            ),
            DashboardError::Failed(f) => f,
            DashboardError::Terminal(e) => Failure::internal(format!(
                "terminal error: {e}; check that TERM is set and the terminal is still open"
            )),
        }
    }
}
