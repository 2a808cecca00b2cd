//! Warden's pure rules: the task model, workflows, TASK.md parsing, gates, exit
//! decisions, tree reconcile, phases and retry, memory, progress and prompts.
//! No I/O, no clock, no processes: time and file contents are passed in.

pub mod artifact;
pub mod model;
