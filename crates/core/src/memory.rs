//! TEMPORARY stub, replaced by the memory module.
use serde::{Deserialize, Serialize};
/// A memory delta.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryDelta {
    /// Goals.
    #[serde(default)]
    pub goals: Vec<String>,
}
/// Memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// Goals.
    pub goals: Vec<String>,
    /// Next focus.
    pub next_focus: String,
}
