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

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};

/// The largest message Warden reads from an MCP client.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// How much of an oversized message is kept to find its id.
const PREFIX_BYTES: usize = 64 * 1024;

/// The method of the request that stands for an oversized message.
pub const OVERSIZED_METHOD: &str = "warden/oversized";

/// The method of the request that stands for a message rmcp would drop, or answer
/// without its id: one that is not JSON (or nested past what a parser takes), or whose
/// envelope is wrong (`jsonrpc` not "2.0", `params` not an object, `tools/call`
/// arguments not an object). Its params carry the JSON-RPC error code and message.
pub const INVALID_METHOD: &str = "warden/invalid";

/// What the server owes its client: the requests read and the messages written, so that
/// the end of stdin waits for the answers still being worked out. rmcp gives its
/// handlers 5 s after the input ends and then drops what they answer: a client that
/// sent a `task_complete` whose postchecks take a minute, and closed its stdin, lost
/// the answer to a change that was made.
#[derive(Debug, Default)]
pub struct Replies {
    asked: AtomicUsize,
    answered: AtomicUsize,
    /// Calls running now (see `WardenServer::exec`).
    working: AtomicUsize,
    /// Stdout failed: nobody reads the answers.
    broken: AtomicBool,
    /// Told when any of the above moves.
    moved: tokio::sync::Notify,
}

impl Replies {
    fn add(&self, n: &AtomicUsize, by: usize) {
        n.fetch_add(by, Ordering::SeqCst);
        // A stored permit: a waiter that looks after this still wakes.
        self.moved.notify_one();
    }

    /// A call starts running (see `WardenServer::exec`).
    pub(crate) fn call_started(&self) {
        self.add(&self.working, 1);
    }

    /// A call has ended.
    pub(crate) fn call_ended(&self) {
        self.working.fetch_sub(1, Ordering::SeqCst);
        self.moved.notify_one();
    }

    /// Waits until every request read has its answer written, stdout failed, or nothing
    /// has run and no count has moved for a second (a request rmcp never answers, such
    /// as a batch, must not hold the process for ever).
    async fn settled(&self) {
        const QUIET: Duration = Duration::from_secs(1);
        let counts = || {
            (
                self.asked.load(Ordering::SeqCst),
                self.answered.load(Ordering::SeqCst),
                self.working.load(Ordering::SeqCst),
            )
        };
        let mut last = counts();
        let mut quiet_since = Instant::now();
        loop {
            let now = counts();
            if now.1 >= now.0 || self.broken.load(Ordering::SeqCst) {
                return;
            }
            if now != last {
                last = now;
                quiet_since = Instant::now();
            }
            if now.2 > 0 {
                // A call runs: its end (or an answer) is what to wait for.
                self.moved.notified().await;
            } else {
                let left = QUIET.saturating_sub(quiet_since.elapsed());
                if left.is_zero() {
                    return;
                }
                let _ = tokio::time::timeout(left, self.moved.notified()).await;
            }
        }
    }
}

/// Stdout, counting the messages written (each ends with a newline) as answers.
pub struct Counted<W> {
    inner: W,
    replies: Arc<Replies>,
}

impl<W> Counted<W> {
    /// `inner`, counted into `replies`.
    pub fn new(inner: W, replies: Arc<Replies>) -> Counted<W> {
        Counted { inner, replies }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counted<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        match &r {
            Poll::Ready(Ok(n)) => {
                let lines = buf[..*n].iter().filter(|b| **b == b'\n').count();
                self.replies.add(&self.replies.answered, lines);
            }
            Poll::Ready(Err(_)) => {
                self.replies.broken.store(true, Ordering::SeqCst);
                self.replies.moved.notify_one();
            }
            Poll::Pending => {}
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What a line passed on to rmcp asks of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A request: one answer is owed.
    Request,
    /// `notifications/cancelled`: the request it names is answered by nobody.
    Cancel,
    /// Anything else (a notification, a client's response, a batch).
    Other,
}

fn kind(v: &serde_json::Value) -> Kind {
    let id = v.get("id").is_some_and(|i| i.is_number() || i.is_string());
    match v.get("method").and_then(|m| m.as_str()) {
        Some(_) if id => Kind::Request,
        Some("notifications/cancelled") => Kind::Cancel,
        _ => Kind::Other,
    }
}

/// A reader of `input` whose lines are at most `limit` bytes, each longer one replaced
/// as described in the module documentation (the fuzz target's and tests' reader: the
/// server's waits for its answers, see [`bounded_answering`]).
#[cfg(any(test, feature = "testing"))]
pub fn bounded<R: AsyncRead + Unpin + Send + 'static>(input: R, limit: usize) -> DuplexStream {
    bounded_answering(input, limit, None)
}

/// [`bounded`], whose end of input waits until `replies` says every request read has
/// been answered (see [`Replies`]).
pub fn bounded_answering<R: AsyncRead + Unpin + Send + 'static>(
    input: R,
    limit: usize,
    replies: Option<Arc<Replies>>,
) -> DuplexStream {
    let (mut tx, rx) = tokio::io::duplex(256 * 1024);
    tokio::spawn(async move {
        let mut r = BufReader::with_capacity(64 * 1024, input);
        let mut line: Vec<u8> = Vec::new();
        let mut seen: usize = 0;
        let mut oversized = false;
        while let Ok(buf) = r.fill_buf().await {
            if buf.is_empty() {
                // EOF: a last line without a newline is a line too (rmcp dropped it).
                if !oversized && !line.iter().all(u8::is_ascii_whitespace) {
                    line.push(b'\n');
                    if let Some((out, k)) = checked(std::mem::take(&mut line)) {
                        count(&replies, k);
                        let _ = tx.write_all(&out).await;
                    }
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
                stand_in(&line, seen).map(|o| (o, Kind::Request))
            } else {
                checked(std::mem::take(&mut line))
            };
            if let Some((out, k)) = out {
                count(&replies, k);
                if tx.write_all(&out).await.is_err() {
                    break;
                }
            }
            line.clear();
            seen = 0;
            oversized = false;
        }
        if let Some(r) = &replies {
            r.settled().await;
        }
        let _ = tx.shutdown().await;
    });
    rx
}

fn count(replies: &Option<Arc<Replies>>, k: Kind) {
    if let Some(r) = replies {
        match k {
            Kind::Request => r.add(&r.asked, 1),
            Kind::Cancel => r.add(&r.answered, 1),
            Kind::Other => {}
        }
    }
}

/// `line` as rmcp should see it: itself when rmcp answers it properly, else a stand-in
/// request with the same id that the server answers with the error (see
/// [`INVALID_METHOD`]); `None` (with a line on stderr) when it has no id to answer.
fn checked(line: Vec<u8>) -> Option<(Vec<u8>, Kind)> {
    let invalid = |id: serde_json::Value, code: i32, message: String| {
        let msg = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": INVALID_METHOD,
            "params": {"code": code, "message": message},
        });
        let mut out = msg.to_string().into_bytes();
        out.push(b'\n');
        Some((out, Kind::Request))
    };
    if line.iter().all(u8::is_ascii_whitespace) {
        return Some((line, Kind::Other));
    }
    let v: serde_json::Value = match serde_json::from_slice(&line) {
        Ok(v) => v,
        Err(e) => {
            let text = String::from_utf8_lossy(&line);
            return match top_level_id(&text) {
                Some(id) => invalid(id, -32700, format!("the message is not valid JSON: {e}")),
                None => {
                    warden_store::say!(
                        "warden mcp: dropped a message that is not valid JSON and names no id ({e})"
                    );
                    None
                }
            };
        }
    };
    // A notification (no id) is answered by nobody; an array (a batch) is rmcp's.
    let k = kind(&v);
    let Some(id) = v
        .get("id")
        .filter(|i| i.is_number() || i.is_string())
        .cloned()
    else {
        return Some((line, k));
    };
    if v.get("jsonrpc").and_then(|j| j.as_str()) != Some("2.0") {
        return invalid(id, -32600, "\"jsonrpc\" must be \"2.0\"".to_owned());
    }
    // A request without a method name (no "method", or not a string) was answered
    // "Invalid request" without its id: the client could not tell which one failed. A
    // response (the client answering the server) has none and is rmcp's.
    let response = v.get("result").is_some() || v.get("error").is_some();
    if !response && !v.get("method").is_some_and(|m| m.is_string()) {
        return invalid(
            id,
            -32600,
            "a request needs \"method\", the method's name as a string".to_owned(),
        );
    }
    match v.get("params") {
        None | Some(serde_json::Value::Object(_)) => {}
        Some(_) => return invalid(id, -32602, "\"params\" must be an object".to_owned()),
    }
    if v.get("method").and_then(|m| m.as_str()) == Some("tools/call")
        && v["params"]
            .get("arguments")
            .is_some_and(|a| !a.is_object() && !a.is_null())
    {
        return invalid(
            id,
            -32602,
            "the arguments of tools/call must be an object (the tool's parameters by name)"
                .to_owned(),
        );
    }
    Some((line, k))
}

/// The request that stands for an oversized message, or `None` when its id is not in
/// the kept prefix.
fn stand_in(prefix: &[u8], bytes: usize) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(prefix);
    let Some(id) = top_level_id(&text) else {
        warden_store::say!(
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
pub(crate) fn top_level_id(text: &str) -> Option<serde_json::Value> {
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

    /// What rmcp would drop, or answer without its id, becomes a stand-in with the id
    /// and the JSON-RPC error; what rmcp answers well passes as it is. Before, a client
    /// that sent `{not json`, a request nested 200,000 deep, or `"params":"str"` waited
    /// for ever.
    #[test]
    fn a_message_rmcp_would_not_answer_becomes_a_stand_in_with_its_id() {
        let stand = |line: &str| -> Option<serde_json::Value> {
            checked(format!("{line}\n").into_bytes())
                .map(|(b, _)| serde_json::from_slice(&b).unwrap_or(serde_json::json!("passed")))
        };
        let error = |line: &str| {
            let v = stand(line).expect("answered");
            assert_eq!(v["method"], INVALID_METHOD, "{line}");
            (v["id"].clone(), v["params"]["code"].as_i64().unwrap())
        };
        let deep = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"x\":{}{}}}}}",
            "[".repeat(200_000),
            "]".repeat(200_000)
        );
        assert_eq!(error(&deep), (serde_json::json!(1), -32700));
        assert_eq!(
            error(r#"{"jsonrpc":"2.0","id":"a","method":"x","params":{"#),
            (serde_json::json!("a"), -32700)
        );
        assert_eq!(
            error(r#"{"jsonrpc":"2.0","id":55,"method":"tools/call","params":"str"}"#),
            (serde_json::json!(55), -32602)
        );
        assert_eq!(
            error(r#"{"jsonrpc":"1.0","id":52,"method":"ping"}"#),
            (serde_json::json!(52), -32600)
        );
        // No method, or one that is not a string: answered with the id (rmcp's
        // "Invalid request" had none).
        assert_eq!(
            error(r#"{"jsonrpc":"2.0","id":17}"#),
            (serde_json::json!(17), -32600)
        );
        assert_eq!(
            error(r#"{"jsonrpc":"2.0","id":19,"method":5}"#),
            (serde_json::json!(19), -32600)
        );
        // A client's response to the server has no method, and is rmcp's.
        assert_eq!(
            stand(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#),
            Some(serde_json::json!({"jsonrpc":"2.0","id":3,"result":{}}))
        );
        assert_eq!(
            error(
                r#"{"jsonrpc":"2.0","id":56,"method":"tools/call","params":{"name":"task_get","arguments":"str"}}"#
            ),
            (serde_json::json!(56), -32602)
        );
        // No id: nobody waits (stderr says so).
        assert_eq!(stand("{not json"), None);
        // What rmcp answers itself passes untouched.
        let ok = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"task_get","arguments":{"id":"a"}}}"#;
        assert_eq!(
            checked(format!("{ok}\n").into_bytes()),
            Some((format!("{ok}\n").into_bytes(), Kind::Request))
        );
        let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(
            checked(note.as_bytes().to_vec()),
            Some((note.as_bytes().to_vec(), Kind::Other))
        );
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
        assert_eq!(
            lines[3], "{\"c\":3}",
            "the last line, without its newline, passes"
        );
    }
}
