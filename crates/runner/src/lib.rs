//! Warden's supervisor side: everything that starts a process — checks run as guards,
//! git worktrees and merges, agent sessions (child processes or tmux), the phase
//! pipeline, and the supervisor loop of `warden run`.
//!
//! Only this crate spawns processes; the core decides, the store records.

pub mod check;
pub mod git;
pub mod pipeline;
pub mod session;
pub mod supervisor;
