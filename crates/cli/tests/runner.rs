//! The CLI's integration tests, in one test binary (as jj does): one link instead of
//! one per file, and one place that lists them. Each module drives the real `warden`
//! binary against real SQLite, git, tmux and PostgreSQL.

mod agent_presets;
mod cli_memory_state;
mod cli_plan;
mod cli_task;
mod common;
mod concurrency;
mod crash_matrix;
mod dashboard;
mod front_ends;
mod gsd_e2e;
mod gsd_sync;
mod hostile;
mod mcp;
mod person;
mod pg_runners;
mod run_e2e;
mod storage_faults;
mod supervisor;
