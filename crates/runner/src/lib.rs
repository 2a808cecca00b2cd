//! Everything that starts a process: checks run as guards, git worktrees and merges,
//! agent sessions (child processes or tmux), and the phases Warden runs itself. The
//! supervisor loop that decides when to run them lives in `warden-app`.
// Stderr is written through `warden_store::say!`, which a closed stderr cannot panic.
#![cfg_attr(not(test), deny(clippy::print_stderr))]

pub mod check;
pub mod git;
pub mod pipeline;
pub mod session;
