//! Per-task structured memory (seed 003): read it, merge a delta into it in one
//! transaction, render the block prompts embed.

use warden_core::failure::Failure;
use warden_core::memory::{self, Memory, MemoryDelta};
use warden_core::model::TaskId;
use warden_store::files;

use crate::{App, Result};

/// Parses a memory delta (JSON with the seven fields; unknown keys refused).
pub fn delta_from_json(text: &str, shown: &str) -> Result<MemoryDelta> {
    // An array is not a delta: serde maps one onto the fields by position
    // (`[["g"], ["c"]]` set goals and constraints), and `[]` merged nothing but an event.
    if !text.trim_start().starts_with('{') {
        return Err(Failure::refused(format!(
            "the memory delta in {shown} is not a JSON object; send a JSON object with goals, constraints, decisions, hypotheses, history, open_issues (lists of strings) and next_focus (a string)"
        )));
    }
    serde_json::from_str(text).map_err(|e| {
        Failure::refused(format!(
            "the memory delta in {shown} is not valid: {e}; send a JSON object with goals, constraints, decisions, hypotheses, history, open_issues (lists of strings) and next_focus (a string)"
        ))
    })
}

/// Reads a memory delta from a file or `-` (standard input), at most 1 MiB.
pub fn read_delta(path: &std::path::Path) -> Result<MemoryDelta> {
    let text = crate::input::read_text(path, files::MAX_FILE_BYTES, "the memory delta")?;
    let shown = if path == std::path::Path::new("-") {
        "stdin".to_owned()
    } else {
        path.display().to_string()
    };
    // As a plan file: a byte order mark from a Windows editor is not part of the JSON.
    delta_from_json(text.strip_prefix('\u{feff}').unwrap_or(&text), &shown)
}

impl App {
    /// A task's memory (empty when nothing was merged yet).
    pub fn memory(&self, id: &TaskId) -> Result<Memory> {
        self.get(id)?;
        Ok(self.eng.store.memory(id)?.unwrap_or_default())
    }

    /// Merges a delta: one write that records `memory.merged` and appends the capped
    /// delta. Returns the memory read after the merge (which may hold a concurrent merge
    /// too). With a request id, a merge repeated after an unknown outcome (a lost
    /// connection, a killed process) is applied once; the repeat answers with the memory
    /// as it is. A merge that landed but whose memory cannot be read back says so rather
    /// than fail: merging it again would add its items twice.
    pub fn merge_memory(
        &self,
        id: &TaskId,
        delta: &MemoryDelta,
        request_id: Option<&str>,
    ) -> Result<Memory> {
        if let Some(k) = request_id {
            crate::task::check_request_id(k)?;
        }
        let respond =
            |ch: &warden_core::ops::Change| {
                Ok(serde_json::json!({"id": id, "version": ch.after.as_ref().map(|t| t.version())})
                .to_string())
            };
        let key = request_id.map(|k| warden_store::engine::RequestKey {
            key: k,
            // Bound to this delta: the same key with other items is refused.
            fingerprint: format!(
                "memory merge {id} (delta {})",
                &warden_core::artifact::sha256_hex(
                    serde_json::to_string(delta).unwrap_or_default().as_bytes()
                )[..16]
            ),
            respond: &respond,
        });
        self.eng.merge_memory(id, delta, key.as_ref())?;
        self.memory(id).map_err(|e| {
            Failure::internal(format!(
                "{id}'s memory merge was saved, but the memory could not be read back ({}); do not merge it again: see it with `warden memory show {id}`",
                e.message
            ))
        })
    }

    /// The memory as prompts embed it: `<state>…</state>`.
    pub fn memory_block(&self, id: &TaskId) -> Result<String> {
        Ok(memory::block(&self.memory(id)?))
    }
}
