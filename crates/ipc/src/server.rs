//! The conductor side of the socket: our own framed listener driving jsonrpsee's
//! [`Methods::raw_json_request`] (jsonrpsee has no Unix-socket transport; architecture.md
//! "Two things already tried").

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use jsonrpsee::{Methods, RpcModule};
use serde_json::{Map, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::framing::{read_line, LineRead, MAX_MESSAGE_BYTES};
use crate::RpcError;

/// Knobs of the server (conductor.md §7.3).
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Longest request line accepted; longer ones get `-32700` and the connection closes.
    pub max_request_bytes: usize,
    /// Connections served at once; further ones wait in the kernel's accept queue.
    pub max_connections: usize,
    /// How long a connection may sit idle between requests.
    pub idle_timeout: Duration,
    /// How long one request line may take to arrive once it has started (slow-loris guard),
    /// and how long writing one response may take.
    pub line_timeout: Duration,
    /// Only peers with this uid are served (invariant 6); `None` serves everyone.
    pub allowed_uid: Option<u32>,
    /// Serve root as well as `allowed_uid`: root can read the owner's files and signal its
    /// processes anyway, so refusing it protects nothing and only stops an administrator
    /// from running `mozart status` against a user's conductor.
    pub allow_root: bool,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_request_bytes: MAX_MESSAGE_BYTES,
            max_connections: 64,
            idle_timeout: Duration::from_secs(300),
            line_timeout: Duration::from_secs(15),
            allowed_uid: Some(nix::unistd::geteuid().as_raw()),
            allow_root: true,
        }
    }
}

/// Serve `module` on `listener` until `shutdown` resolves, then drop every connection.
///
/// Each connection runs in its own task and handles its requests in order (§7.3); one
/// misbehaving client only ever occupies its own slot, for at most the timeouts above.
pub async fn serve<Ctx, F>(
    listener: UnixListener,
    module: RpcModule<Ctx>,
    limits: ServerLimits,
    shutdown: F,
) -> std::io::Result<()>
where
    Ctx: Send + Sync + 'static,
    F: Future<Output = ()> + Send,
{
    let methods: Methods = module.into();
    let limits = Arc::new(limits);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // Take a slot before accepting so excess clients queue in the kernel, not in memory.
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // EMFILE and friends are transient: back off instead of spinning.
                    tracing::warn!(error = %err, "ipc.accept_failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let methods = methods.clone();
        let limits = limits.clone();
        connections.spawn(async move {
            handle_connection(stream, methods, &limits).await;
            drop(permit);
        });
        // Reap finished connection tasks so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
    }
    connections.shutdown().await;
    Ok(())
}

async fn handle_connection(stream: UnixStream, methods: Methods, limits: &ServerLimits) {
    let peer = stream.peer_cred().map(|cred| cred.uid());
    let (read_half, mut write_half) = stream.into_split();
    if let Some(allowed) = limits.allowed_uid {
        if let Err(reason) = check_peer_uid(peer.ok(), allowed, limits.allow_root) {
            tracing::warn!(%reason, "ipc.peer_refused");
            let error = RpcError::invalid_request(reason);
            let _ = write_line(
                &mut write_half,
                error_response(&Value::Null, &error),
                limits,
            )
            .await;
            return;
        }
    }
    let mut reader = BufReader::new(read_half);
    let mut line = Vec::new();
    loop {
        // Idle wait for the first byte, then a bounded wait for the rest of the line.
        let started = tokio::time::timeout(limits.idle_timeout, async {
            tokio::io::AsyncBufReadExt::fill_buf(&mut reader)
                .await
                .map(|b| b.is_empty())
        })
        .await;
        match started {
            Ok(Ok(false)) => {}
            Ok(Ok(true)) | Ok(Err(_)) => return,
            Err(_) => {
                tracing::debug!("ipc.idle_timeout");
                return;
            }
        }
        let read = tokio::time::timeout(
            limits.line_timeout,
            read_line(&mut reader, &mut line, limits.max_request_bytes),
        )
        .await;
        let response = match read {
            Ok(Ok(LineRead::Line)) => match dispatch_line(&methods, &line).await {
                Dispatched::Reply(reply) => reply,
                Dispatched::Stream(notifications) => {
                    // A streaming subscription owns the connection until the client hangs up
                    // or the stream ends (§8.21); upstream reads no further requests either.
                    forward_stream(&mut reader, &mut write_half, notifications, limits).await;
                    return;
                }
            },
            Ok(Ok(LineRead::Eof)) | Ok(Err(_)) => return,
            Ok(Ok(LineRead::TooLarge)) => {
                tracing::warn!(limit = limits.max_request_bytes, "ipc.message_too_large");
                let error = RpcError::request_too_large(limits.max_request_bytes);
                let _ = write_line(
                    &mut write_half,
                    error_response(&Value::Null, &error),
                    limits,
                )
                .await;
                return;
            }
            Err(_) => {
                tracing::warn!("ipc.slow_request_line");
                return;
            }
        };
        if let Some(response) = response {
            if write_line(&mut write_half, response, limits).await.is_err() {
                return;
            }
        }
    }
}

/// Notifications queued per streaming subscriber; when full, new ones are dropped for that
/// subscriber (conductor.md §8.21).
pub const STREAM_BUFFER: usize = 100;

/// Forward a subscription's notifications to the client in upstream's shape
/// (`{"jsonrpc":"2.0","method":M,"params":<event>}`, §7.7) until it disconnects.
async fn forward_stream(
    reader: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: &mut tokio::net::unix::OwnedWriteHalf,
    mut notifications: tokio::sync::mpsc::Receiver<Box<serde_json::value::RawValue>>,
    limits: &ServerLimits,
) {
    let mut scratch = [0u8; 512];
    loop {
        tokio::select! {
            next = notifications.recv() => {
                let Some(raw) = next else { return };
                let Some(line) = upstream_notification(raw.get()) else { continue };
                if write_line(writer, line, limits).await.is_err() {
                    return;
                }
            }
            // Upstream notices a gone client only on its next write; watching the socket
            // frees the subscription at once. Anything the client sends is ignored.
            read = tokio::io::AsyncReadExt::read(reader, &mut scratch) => {
                if !matches!(read, Ok(n) if n > 0) {
                    return;
                }
            }
        }
    }
}

/// Rewrite jsonrpsee's subscription notification
/// (`{"method":M,"params":{"subscription":id,"result":E}}`) into upstream's (`params: E`).
pub fn upstream_notification(raw: &str) -> Option<String> {
    let mut value: Value = serde_json::from_str(raw).ok()?;
    let method = value.get("method")?.as_str()?.to_string();
    let params = value.get_mut("params")?.get_mut("result")?.take();
    Some(serde_json::json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string())
}

/// Refuse a peer whose uid is unknown or differs from `allowed` (invariant 6), unless it is
/// root and `allow_root`. The reason names both users, so the refused side learns why.
pub fn check_peer_uid(peer_uid: Option<u32>, allowed: u32, allow_root: bool) -> Result<(), String> {
    match peer_uid {
        Some(uid) if uid == allowed || (allow_root && uid == 0) => Ok(()),
        Some(uid) => Err(format!(
            "permission denied: this conductor belongs to {} and serves only that user{}; you are {}",
            crate::trust::describe_user(allowed),
            if allow_root && allowed != 0 { " and root" } else { "" },
            crate::trust::describe_user(uid),
        )),
        None => Err("permission denied: cannot determine the peer's uid".to_string()),
    }
}

/// Write `text` and its newline in one `write`: two made the client wake twice for every
/// answer (the line, then its end), and the sender make two system calls (issue 24).
async fn write_line(
    writer: &mut tokio::net::unix::OwnedWriteHalf,
    mut text: String,
    limits: &ServerLimits,
) -> std::io::Result<()> {
    text.push('\n');
    let write = async {
        writer.write_all(text.as_bytes()).await?;
        writer.flush().await
    };
    // A client that stops reading must not pin its task forever.
    match tokio::time::timeout(limits.idle_timeout, write).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "client did not read its response",
        )),
    }
}

/// A response's text with room for the newline [`write_line`] adds (no second copy).
fn reply_text(response: &str) -> String {
    let mut text = String::with_capacity(response.len() + 1);
    text.push_str(response);
    text
}

/// Build an error response line.
pub fn error_response(id: &Value, error: &RpcError) -> String {
    serde_json::json!({ "jsonrpc": "2.0", "error": error, "id": id }).to_string()
}

/// What a request line turned into.
#[derive(Debug)]
pub enum Dispatched {
    /// One response line, or nothing for a notification.
    Reply(Option<String>),
    /// A streaming subscription (a method registered with `register_subscription`): its
    /// notifications, in jsonrpsee's shape (see [`upstream_notification`]). Upstream sends
    /// no response with the request id for a stream (§8.21), so neither do we.
    Stream(tokio::sync::mpsc::Receiver<Box<serde_json::value::RawValue>>),
}

/// Validate one request line and dispatch it; `None` means "send nothing" (notification).
/// A streaming method's notifications are dropped here: see [`dispatch_line`].
pub async fn process_line(methods: &Methods, line: &[u8]) -> Option<String> {
    match dispatch_line(methods, line).await {
        Dispatched::Reply(reply) => reply,
        Dispatched::Stream(_) => None,
    }
}

/// Validate one request line and dispatch it.
///
/// Structural checks follow conductor.md §7.5 in order, because jsonrpsee rejects
/// notifications and malformed JSON with an `Err` and would name neither.
pub async fn dispatch_line(methods: &Methods, line: &[u8]) -> Dispatched {
    let reply = |text: String| Dispatched::Reply(Some(text));
    let Ok(text) = std::str::from_utf8(line) else {
        return reply(error_response(&Value::Null, &RpcError::parse_error()));
    };
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return reply(error_response(&Value::Null, &RpcError::parse_error()));
    };
    let Value::Object(mut request) = value else {
        let error = RpcError::invalid_request("missing 'method' field");
        return reply(error_response(&Value::Null, &error));
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let method = match check_request(&mut request, &id) {
        Ok(method) => method,
        Err(refusal) => return reply(error_response(&refusal.0, &refusal.1)),
    };
    let notification = id.is_null();
    let streaming = match methods.method(&method) {
        None if notification => return Dispatched::Reply(None),
        None => return reply(error_response(&id, &RpcError::method_not_found(&method))),
        Some(callback) => matches!(callback, jsonrpsee::MethodCallback::Subscription(_)),
    };
    if notification {
        // Upstream runs notifications but never answers them (§7.4).
        request.insert("id".into(), Value::from(0));
    }
    let request_text = Value::Object(request).to_string();
    let buffer = if streaming { STREAM_BUFFER } else { 1 };
    match methods.raw_json_request(&request_text, buffer).await {
        Ok((response, notifications)) if streaming => {
            // The subscription's acknowledgement carries a result; a refusal an error.
            let refused = serde_json::from_str::<Value>(response.get())
                .map(|v| v.get("error").is_some())
                .unwrap_or(true);
            if refused {
                Dispatched::Reply((!notification).then(|| reply_text(response.get())))
            } else {
                Dispatched::Stream(notifications)
            }
        }
        Ok((response, _)) => Dispatched::Reply((!notification).then(|| reply_text(response.get()))),
        Err(err) => {
            tracing::error!(%method, error = %err, "ipc.dispatch_failed");
            Dispatched::Reply(
                (!notification).then(|| error_response(&id, &RpcError::internal(err))),
            )
        }
    }
}

/// §7.5 steps 2–3: return the method name after filling in the defaults jsonrpsee needs,
/// or say which id to answer with and why the request is refused.
fn check_request(
    request: &mut Map<String, Value>,
    id: &Value,
) -> Result<String, Box<(Value, RpcError)>> {
    let method = match request.get("method") {
        Some(Value::String(method)) => method.clone(),
        Some(_) => {
            return Err(Box::new((
                id_or_null(id),
                RpcError::invalid_request("'method' must be a string"),
            )))
        }
        None => {
            return Err(Box::new((
                id_or_null(id),
                RpcError::invalid_request("missing 'method' field"),
            )))
        }
    };
    match request.get("jsonrpc") {
        None => {
            request.insert("jsonrpc".into(), Value::from("2.0"));
        }
        Some(Value::String(v)) if v == "2.0" => {}
        Some(other) => {
            return Err(Box::new((
                id_or_null(id),
                RpcError::invalid_request(format!("'jsonrpc' must be \"2.0\", got {other}")),
            )))
        }
    }
    match request.get("params") {
        None | Some(Value::Null) => {
            request.insert("params".into(), Value::Object(Map::new()));
        }
        Some(Value::Object(_)) => {}
        Some(_) => {
            return Err(Box::new((
                id_or_null(id),
                RpcError::invalid_request("'params' must be an object or null"),
            )))
        }
    }
    if !valid_id(id) {
        return Err(Box::new((
            Value::Null,
            RpcError::invalid_request("'id' must be an integer, a string or null"),
        )));
    }
    Ok(method)
}

fn valid_id(id: &Value) -> bool {
    match id {
        Value::Null | Value::String(_) => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    }
}

fn id_or_null(id: &Value) -> Value {
    if valid_id(id) {
        id.clone()
    } else {
        Value::Null
    }
}

/// Decode a method's params into `T`, mapping failures to `-32602 Invalid params: …`.
///
/// A missing field renders as upstream does (`Invalid params: 'job_id'`), which is what its
/// CLI shows to users.
pub fn parse_params<T: serde::de::DeserializeOwned>(
    params: &jsonrpsee::types::Params<'_>,
) -> Result<T, RpcError> {
    let raw = params.as_str().unwrap_or("{}");
    serde_json::from_str(raw).map_err(|err| {
        let text = err.to_string();
        match text
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            Some(field) => RpcError::invalid_params(format!("'{field}'")),
            None => RpcError::invalid_params(text),
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn module() -> Methods {
        let mut module = RpcModule::new(());
        module
            .register_method("echo.job", |params, _, _| {
                let p: crate::types::JobIdParams = parse_params(&params)?;
                Ok::<_, jsonrpsee::types::ErrorObjectOwned>(p.job_id)
            })
            .unwrap();
        module.into()
    }

    async fn reply(line: &str) -> Option<Value> {
        process_line(&module(), line.as_bytes())
            .await
            .map(|text| serde_json::from_str(&text).unwrap())
    }

    #[tokio::test]
    async fn structural_errors_follow_the_spec_order() {
        let r = reply("{not json").await.unwrap();
        assert_eq!(r["error"]["code"], -32700);
        assert_eq!(r["id"], Value::Null);
        let r = reply(r#"[1,2]"#).await.unwrap();
        assert_eq!(r["error"]["code"], -32600);
        let r = reply(r#"{"id": 7}"#).await.unwrap();
        assert_eq!(
            r["error"]["message"],
            "Invalid request: missing 'method' field"
        );
        assert_eq!(r["id"], 7);
        let r = reply(r#"{"jsonrpc":"1.0","method":"echo.job","id":1}"#)
            .await
            .unwrap();
        assert_eq!(r["error"]["code"], -32600);
        let r = reply(r#"{"method":"echo.job","params":[1],"id":1}"#)
            .await
            .unwrap();
        assert_eq!(r["error"]["code"], -32600);
        let r = reply(r#"{"method":"nope","id":"x"}"#).await.unwrap();
        assert_eq!(r["error"]["code"], -32601);
        assert_eq!(r["error"]["message"], "Method not found: nope");
        assert_eq!(r["error"]["data"]["method"], "nope");
        assert_eq!(r["id"], "x");
    }

    #[tokio::test]
    async fn notifications_get_no_reply_even_when_unknown() {
        assert!(reply(r#"{"jsonrpc":"2.0","method":"nope"}"#)
            .await
            .is_none());
        assert!(
            reply(r#"{"method":"echo.job","params":{"job_id":"a"},"id":null}"#)
                .await
                .is_none()
        );
    }

    #[tokio::test]
    async fn params_are_decoded_and_missing_keys_named_like_upstream() {
        let r = reply(r#"{"method":"echo.job","params":{"job_id":"a"},"id":3}"#)
            .await
            .unwrap();
        assert_eq!(r["result"], "a");
        assert_eq!(r["id"], 3);
        let r = reply(r#"{"method":"echo.job","id":4}"#).await.unwrap();
        assert_eq!(r["error"]["code"], -32602);
        assert_eq!(r["error"]["message"], "Invalid params: 'job_id'");
    }

    #[test]
    fn subscription_notifications_take_upstreams_shape() {
        let raw = r#"{"jsonrpc":"2.0","method":"monitor.event","params":{"subscription":7,"result":{"job_id":"a","sheet_num":1}}}"#;
        let line: Value = serde_json::from_str(&upstream_notification(raw).unwrap()).unwrap();
        assert_eq!(
            line,
            serde_json::json!({"jsonrpc": "2.0", "method": "monitor.event",
                               "params": {"job_id": "a", "sheet_num": 1}})
        );
        assert!(upstream_notification("{}").is_none());
    }

    #[tokio::test]
    async fn a_subscription_streams_over_the_socket_without_a_response_line() {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

        let mut module = RpcModule::new(());
        module
            .register_subscription(
                "test.stream",
                "test.event",
                "test.unsubscribe",
                |_, pending, _, _| async move {
                    let Ok(sink) = pending.accept().await else {
                        return;
                    };
                    for n in 0..3 {
                        let msg =
                            serde_json::value::to_raw_value(&serde_json::json!({"n": n})).unwrap();
                        if sink.send(msg).await.is_err() {
                            return;
                        }
                    }
                },
            )
            .unwrap();
        module
            .register_method("test.ping", |_, _, _| {
                Ok::<_, jsonrpsee::types::ErrorObjectOwned>("pong")
            })
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, module, ServerLimits::default(), async {
            let _ = stopped.await;
        }));

        let stream = UnixStream::connect(&path).await.unwrap();
        let (read, mut write) = stream.into_split();
        write
            .write_all(
                b"{\"jsonrpc\":\"2.0\",\"method\":\"test.stream\",\"params\":null,\"id\":1}\n",
            )
            .await
            .unwrap();
        let mut lines = BufReader::new(read).lines();
        for n in 0..3 {
            let line = lines.next_line().await.unwrap().unwrap();
            let msg: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(
                msg,
                serde_json::json!({"jsonrpc": "2.0", "method": "test.event", "params": {"n": n}})
            );
        }
        drop(write);
        drop(lines);
        // The server still serves other connections.
        let stream = UnixStream::connect(&path).await.unwrap();
        let (read, mut write) = stream.into_split();
        write
            .write_all(b"{\"method\":\"test.ping\",\"id\":2}\n")
            .await
            .unwrap();
        let line = BufReader::new(read)
            .lines()
            .next_line()
            .await
            .unwrap()
            .unwrap();
        assert!(line.contains("pong"), "{line}");
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    }

    #[test]
    fn peer_uid_must_match() {
        assert!(check_peer_uid(Some(1000), 1000, true).is_ok());
        let refused = check_peer_uid(Some(1001), 1000, true).unwrap_err();
        assert!(
            refused.contains("uid 1001") && refused.contains("uid 1000"),
            "{refused}"
        );
        assert!(check_peer_uid(None, 1000, true).is_err());
        assert!(check_peer_uid(Some(0), 1000, true).is_ok());
        assert!(check_peer_uid(Some(0), 1000, false).is_err());
    }
}
