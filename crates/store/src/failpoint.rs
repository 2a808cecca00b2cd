//! Failpoints for the crash matrix (RELIABILITY.md): named places in the write path
//! where a debug build stops dead when `WARDEN_FAILPOINT` names them — as a kill -9
//! would, or (`after-commit-exit`) by exiting with an error after the commit. Release
//! builds compile them away.

/// Every failpoint, in the order a write passes them.
pub const ALL: &[&str] = &[
    "after-begin",
    "after-events",
    "after-row",
    "before-commit",
    "after-commit",
    "after-commit-exit",
    "mid-taskmd-write",
    "before-sync",
];

/// Failpoints of the supervisor: `session-recorded` stops `warden run` dead between
/// recording a session and starting it.
pub const SUPERVISOR: &[&str] = &["session-recorded"];

/// Failpoints that change what happens instead of stopping the process:
/// `conflict-once` makes the first commit of a write lose a race, as if another writer
/// had changed the task in between.
pub const BEHAVIOURS: &[&str] = &["conflict-once"];

/// Stops the process here if `WARDEN_FAILPOINT` names this point.
#[inline]
pub fn hit(name: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("WARDEN_FAILPOINT").is_ok_and(|v| v == name) {
        if name == "after-commit-exit" {
            // Written, but the caller is told it failed.
            crate::say!("error: failpoint {name}: exiting after the commit");
            std::process::exit(5);
        }
        std::process::abort();
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}

/// Is a failpoint armed (so a writer can make its crash land mid-write)?
#[inline]
pub fn armed(name: &str) -> bool {
    cfg!(debug_assertions) && std::env::var("WARDEN_FAILPOINT").is_ok_and(|v| v == name)
}
