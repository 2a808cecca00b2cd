//! The read side of the stdio transport, with a size limit that answers.
//!
//! rmcp drops a line over its own cap without a word, so a client that sent a 30 MB
//! `tools/call` waits for ever. Here every line from stdin passes through a task that
//! bounds it: a line over [`MAX_MESSAGE_BYTES`] is not buffered (only its first bytes
//! are kept), and rmcp receives in its place a small request with the same JSON-RPC id
//! and the method [`OVERSIZED_METHOD`], which the server answers with an error saying
//! what happened. A message whose id cannot be found in its first bytes (a notification,
//! or an id after a huge `params`) has nobody waiting for an answer and is dropped, with
//! a line on stderr.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader, DuplexStream};

/// The largest message Warden reads from an MCP client.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// How much of an oversized message is kept to find its id.
const PREFIX_BYTES: usize = 64 * 1024;

/// The method of the request that stands for an oversized message.
pub const OVERSIZED_METHOD: &str = "warden/oversized";

/// A reader of `input` whose lines are at most `limit` bytes, each longer one replaced
/// as described in the module documentation.
pub fn bounded<R: AsyncRead + Unpin + Send + 'static>(input: R, limit: usize) -> DuplexStream {
    let (mut tx, rx) = tokio::io::duplex(256 * 1024);
    tokio::spawn(async move {
        let mut r = BufReader::with_capacity(64 * 1024, input);
        let mut line: Vec<u8> = Vec::new();
        let mut seen: usize = 0;
        let mut oversized = false;
        while let Ok(buf) = r.fill_buf().await {
            if buf.is_empty() {
                // EOF: a last line without a newline is passed on as it is.
                if !oversized && !line.is_empty() {
                    let _ = tx.write_all(&line).await;
                }
                break;
            }
            let (take, end) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            seen += take;
            if seen > limit && !oversized {
                oversized = true;
            }
            let keep = if oversized {
                PREFIX_BYTES.saturating_sub(line.len()).min(take)
            } else {
                take
            };
            line.extend_from_slice(&buf[..keep]);
            r.consume(take);
            if !end {
                continue;
            }
            let out = if oversized {
                stand_in(&line, seen)
            } else {
                Some(std::mem::take(&mut line))
            };
            if let Some(out) = out
                && tx.write_all(&out).await.is_err()
            {
                break;
            }
            line.clear();
            seen = 0;
            oversized = false;
        }
        let _ = tx.shutdown().await;
    });
    rx
}

/// The request that stands for an oversized message, or `None` when its id is not in
/// the kept prefix.
fn stand_in(prefix: &[u8], bytes: usize) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(prefix);
    let Some(id) = top_level_id(&text) else {
        eprintln!(
            "warden mcp: dropped a message of {bytes} bytes (over the {} MiB limit) whose id is not in its first {} KiB",
            MAX_MESSAGE_BYTES / (1024 * 1024),
            PREFIX_BYTES / 1024
        );
        return None;
    };
    let method = top_level_string(&text, "method").unwrap_or_default();
    let msg = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": OVERSIZED_METHOD,
        "params": {"bytes": bytes, "limit": MAX_MESSAGE_BYTES, "method": method},
    });
    let mut out = msg.to_string().into_bytes();
    out.push(b'\n');
    Some(out)
}

/// The value of `"id"` in the outermost object of a JSON text's beginning (a number or
/// a string), found by a scan that tracks strings and nesting, so an `"id"` inside
/// `params` is never taken for it.
fn top_level_id(text: &str) -> Option<serde_json::Value> {
    let raw = top_level_raw(text, "id")?;
    serde_json::from_str::<serde_json::Value>(raw)
        .ok()
        .filter(|v| v.is_number() || v.is_string())
}

fn top_level_string(text: &str, key: &str) -> Option<String> {
    serde_json::from_str::<String>(top_level_raw(text, key)?).ok()
}

/// The raw text of the value of `key` at depth 1 (a string or a scalar; not an object or
/// array).
fn top_level_raw<'t>(text: &'t str, key: &str) -> Option<&'t str> {
    let b = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0usize;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let end = string_end(b, i)?;
                // A key at depth 1 is a string followed by ':'.
                let mut j = end + 1;
                while j < b.len() && b[j].is_ascii_whitespace() {
                    j += 1;
                }
                if depth == 1 && b.get(j) == Some(&b':') && &text[i + 1..end] == key {
                    j += 1;
                    while j < b.len() && b[j].is_ascii_whitespace() {
                        j += 1;
                    }
                    let start = j;
                    let stop = if b.get(j) == Some(&b'"') {
                        string_end(b, j)? + 1
                    } else {
                        let mut k = j;
                        while k < b.len()
                            && !matches!(b[k], b',' | b'}' | b']')
                            && !b[k].is_ascii_whitespace()
                        {
                            k += 1;
                        }
                        k
                    };
                    return text.get(start..stop);
                }
                i = end + 1;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index of the quote that closes the string opening at `start`.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn finds_the_outer_id_not_one_in_params() {
        let t = r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"task_get","arguments":{"id":"api"}},"id":7}"#;
        assert_eq!(top_level_id(t), Some(serde_json::json!(7)));
        let t = r#"{ "id" : "req-\"1\"", "method": "x", "params": {"id": 3"#;
        assert_eq!(top_level_id(t), Some(serde_json::json!("req-\"1\"")));
        assert_eq!(top_level_string(t, "method").as_deref(), Some("x"));
        let t = r#"{"jsonrpc":"2.0","method":"notifications/x","params":{"id":1,"#;
        assert_eq!(top_level_id(t), None);
        assert_eq!(top_level_id(r#"{"id":{"a":1}}"#), None);
    }

    #[tokio::test]
    async fn an_oversized_line_becomes_a_stand_in_and_the_next_line_passes() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"tools/call\",\"params\":{{\"x\":\"{}\"}}}}\n",
            "a".repeat(300)
        );
        let input = format!("{{\"a\":1}}\n{big}{{\"b\":2}}\n{{\"c\":3}}");
        let mut out = String::new();
        bounded(std::io::Cursor::new(input.into_bytes()), 100)
            .read_to_string(&mut out)
            .await
            .unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert_eq!(lines[0], "{\"a\":1}");
        let stand: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(stand["id"], 42);
        assert_eq!(stand["method"], OVERSIZED_METHOD);
        assert_eq!(stand["params"]["bytes"], big.len());
        assert_eq!(stand["params"]["method"], "tools/call");
        assert_eq!(lines[2], "{\"b\":2}");
        assert_eq!(lines[3], "{\"c\":3}");
    }
}
