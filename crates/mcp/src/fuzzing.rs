//! The fuzz target of what an MCP client sends (`fuzz/fuzz_targets/mcp_message.rs` and
//! `tests/fuzz_corpus.rs`): behind the `testing` feature, never in the binary.

use serde_json::Value;

use crate::framing;
use crate::params::*;

/// One message as the server meets it. The bytes are a line of stdin: the bounded reader
/// (with a small limit, so the stand-in path runs too) passes it on or replaces it with a
/// stand-in whose id is a number or a string; whatever comes out parses as JSON-RPC or is
/// refused without a panic; a `tools/call`'s arguments go through every tool's
/// parameter type the way rmcp decodes them.
pub fn message(data: &[u8]) {
    // The id scan over any prefix.
    let text = String::from_utf8_lossy(data);
    if let Some(id) = framing::top_level_id(&text) {
        assert!(id.is_number() || id.is_string(), "{id}");
    }
    // The bounded reader, with a limit below the input's length half the time.
    let limit = if data.len() > 64 && data[0].is_multiple_of(2) {
        data.len() / 2
    } else {
        usize::MAX
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut input = data.to_vec();
    input.push(b'\n');
    let out = rt.block_on(async {
        use tokio::io::AsyncReadExt;
        let mut out = Vec::new();
        framing::bounded(std::io::Cursor::new(input), limit)
            .read_to_end(&mut out)
            .await
            .expect("the bounded reader never fails on a cursor");
        out
    });
    for line in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        if line.len() > limit {
            // Only a stand-in may be longer than the limit (a small limit, here).
            let v: Value = serde_json::from_slice(line).expect("a stand-in is JSON");
            assert_eq!(
                v["method"],
                framing::OVERSIZED_METHOD,
                "a line over the limit came through"
            );
        }
        let Ok(msg) = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(line) else {
            continue;
        };
        let v = serde_json::to_value(&msg).expect("a parsed message serializes");
        if v["method"] == "tools/call"
            && let Some(args) = v["params"].get("arguments")
        {
            arguments(args);
        }
    }
}

/// Every tool's parameter type from the same arguments: each decodes or refuses.
fn arguments(args: &Value) {
    fn try_as<T: serde::de::DeserializeOwned>(v: &Value) {
        let _ = serde_json::from_value::<T>(v.clone());
    }
    try_as::<IdParam>(args);
    try_as::<OwnIdParam>(args);
    try_as::<ListParams>(args);
    try_as::<HistoryParams>(args);
    try_as::<CreateParams>(args);
    try_as::<UpdateParams>(args);
    try_as::<AgentUpdateParams>(args);
    try_as::<CompleteParams>(args);
    try_as::<CancelParams>(args);
    try_as::<ApproveParams>(args);
    try_as::<RejectParams>(args);
    try_as::<RetryParams>(args);
    try_as::<ImportParams>(args);
    try_as::<ApplyParams>(args);
}
