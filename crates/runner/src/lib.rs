//! Warden's supervisor side: everything that starts a process. Today: running a check
//! (prechecks, postchecks) as the guard of a transition.
//!
//! Only this crate spawns processes; the core decides, the store records.

pub mod check;
pub mod git;
