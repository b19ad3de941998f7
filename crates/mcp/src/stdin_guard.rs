//! The MCP server's stdin, one message (line) at a time and at most [`MAX_MESSAGE_BYTES`]
//! each. rmcp drops a longer line with nothing but a log line on stderr, so the client that
//! sent it waited for an answer forever (a 30 MB `run`: 10 minutes and more). A longer line
//! is read to its end without keeping it, and stands in its place as a small request,
//! [`OVERSIZED_METHOD`], with the same `id`, which the server answers with an error that
//! says the size and the limit. When the `id` cannot be read (it is neither among the
//! line's first nor its last bytes), the client is told by a log notification instead.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// Most bytes of one incoming message (rmcp's own limit: a shorter line passes unchanged).
pub const MAX_MESSAGE_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// The method an oversized request is replaced with (never sent by a client).
pub const OVERSIZED_METHOD: &str = "mozart/oversized-message";

/// Bytes kept of each end of an oversized line, to find its `id` in.
const EDGE_BYTES: usize = 4096;

/// An oversized message whose `id` could not be read: its size.
pub type Unanswerable = usize;

/// The guarded stdin (for rmcp), and the sizes of oversized messages without a readable id.
pub fn guarded_stdin() -> (
    impl AsyncRead + Send + Unpin + 'static,
    mpsc::UnboundedReceiver<Unanswerable>,
) {
    guard(tokio::io::stdin())
}

/// [`guarded_stdin`] of any reader.
pub fn guard<R: AsyncRead + Send + Unpin + 'static>(
    input: R,
) -> (
    impl AsyncRead + Send + Unpin + 'static,
    mpsc::UnboundedReceiver<Unanswerable>,
) {
    let (mut to_rmcp, from_guard) = tokio::io::duplex(64 * 1024);
    let (tell, told) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut input = BufReader::with_capacity(64 * 1024, input);
        let mut line: Vec<u8> = Vec::new();
        // Of an oversized line: its size so far, first and last bytes.
        let mut oversized: Option<(usize, Vec<u8>, Vec<u8>)> = None;
        loop {
            let (consumed, ended) = {
                let Ok(available) = input.fill_buf().await else {
                    break;
                };
                if available.is_empty() {
                    break;
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |i| i + 1);
                let chunk = &available[..take];
                match &mut oversized {
                    Some((size, _, tail)) => {
                        *size += take;
                        keep_tail(tail, chunk);
                    }
                    None if line.len() + take > MAX_MESSAGE_BYTES => {
                        let before = std::mem::take(&mut line);
                        let head: Vec<u8> = before
                            .iter()
                            .chain(chunk)
                            .take(EDGE_BYTES)
                            .copied()
                            .collect();
                        let mut tail = Vec::new();
                        keep_tail(
                            &mut tail,
                            &before[before.len().saturating_sub(EDGE_BYTES)..],
                        );
                        keep_tail(&mut tail, chunk);
                        oversized = Some((before.len() + take, head, tail));
                    }
                    None => line.extend_from_slice(chunk),
                }
                (take, newline.is_some())
            };
            input.consume(consumed);
            if !ended {
                continue;
            }
            let out = match oversized.take() {
                None => std::mem::take(&mut line),
                Some((size, head, tail)) => match request_id(&head, &tail) {
                    Some(id) => stand_in(&id, size),
                    None => {
                        let _ = tell.send(size);
                        continue;
                    }
                },
            };
            if to_rmcp.write_all(&out).await.is_err() {
                break;
            }
        }
        // A last line without its newline is passed on as it is (rmcp ignores it).
        if oversized.is_none() && !line.is_empty() {
            let _ = to_rmcp.write_all(&line).await;
        }
        let _ = to_rmcp.shutdown().await;
    });
    (from_guard, told)
}

/// Keep the last [`EDGE_BYTES`] of `tail` + `chunk` in `tail`.
fn keep_tail(tail: &mut Vec<u8>, chunk: &[u8]) {
    tail.extend_from_slice(chunk);
    if tail.len() > EDGE_BYTES {
        tail.drain(..tail.len() - EDGE_BYTES);
    }
}

/// The request in place of an oversized one: its `id`, the method the server refuses with
/// the size and the limit.
fn stand_in(id: &serde_json::Value, size: usize) -> Vec<u8> {
    let request = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": OVERSIZED_METHOD,
        "params": {"bytes": size, "limit": MAX_MESSAGE_BYTES},
    });
    let mut out = request.to_string().into_bytes();
    out.push(b'\n');
    out
}

/// The top-level `"id"` of a JSON-RPC message of which only `head` (its first bytes) and
/// `tail` (its last) are known: in `head` before its `"params"` (clients write `id` first,
/// and a key inside `params` is not the request's), else the last one in `tail` after the
/// end of its `params`.
fn request_id(head: &[u8], tail: &[u8]) -> Option<serde_json::Value> {
    let head = String::from_utf8_lossy(head);
    let before_params = head.split("\"params\"").next().unwrap_or_default();
    if let Some(id) = id_after(before_params, before_params.find("\"id\"")) {
        return Some(id);
    }
    let tail = String::from_utf8_lossy(tail);
    id_after(&tail, tail.rfind("\"id\""))
}

/// The value (a number or a string) after `"id"` at `at` in `text`, followed by `,` or `}`.
fn id_after(text: &str, at: Option<usize>) -> Option<serde_json::Value> {
    let rest = text
        .get(at? + 4..)?
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    let end = if let Some(quoted) = rest.strip_prefix('"') {
        quoted.find('"')? + 2
    } else {
        rest.find(|c: char| c == ',' || c == '}' || c.is_whitespace())?
    };
    let value: serde_json::Value = serde_json::from_str(rest.get(..end)?).ok()?;
    (value.is_number() || value.is_string()).then_some(value)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_read_where_clients_put_it() {
        let head = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"run","arguments":{"id":99,"yaml":"#;
        assert_eq!(request_id(head, b"xxxx\"}}}"), Some(serde_json::json!(7)));
        let head = br#"{"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "run", "arguments": {"id": 1, "yaml": "#;
        let tail = br#"aaaa"}}, "id": "req-3"}"#;
        assert_eq!(request_id(head, tail), Some(serde_json::json!("req-3")));
        assert_eq!(request_id(b"{\"params\": {", b"aaaa\"}}}"), None);
    }
}
