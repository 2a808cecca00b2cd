//! Warden's pure rules: the task model, workflows, TASK.md parsing, gates, exit
//! decisions, tree reconcile, phases and retry, memory, progress and prompts.
//! No I/O, no clock, no processes: time and file contents are passed in.

pub mod artifact;
pub mod event;
pub mod exit;
pub mod failure;
pub mod graph;
pub mod gsd;
pub mod head;
pub mod history;
pub mod hook;
pub mod memory;
pub mod model;
pub mod ops;
pub mod plan_ops;
pub mod progress;
pub mod prompt;
pub mod retry;
pub mod schedule;
pub mod state_md;
pub mod tree;
pub mod workflow;
