//! Deterministic simulation of Warden's supervisor, in the manner of FoundationDB's
//! simulator and TigerBeetle's VOPR: the scheduler (`warden_core::schedule`) and the
//! runner's reactions (`schedule::react_*`, `ops`) driven by a simulated clock,
//! simulated sessions (agents that succeed, crash, hang, linger after their hand-off,
//! forget their artifacts; exit reports that come late, twice, from a harness hook, or
//! never), simulated people (approve, retry, respawn, cancel, answer, edit TASK.md) and
//! faults (runners killed and restarted, leases lapsing, session hosts killed, git
//! conflicts, guards that cannot start). A seeded generator picks the interleaving, so a
//! failing seed replays exactly: `scripts/sim --seed N`.
//!
//! After every step the invariants of DESIGN 6 are checked (see `World::check`).

pub mod rng;
mod world;

pub use world::{Options, Report, Violation, World, run_seed};
