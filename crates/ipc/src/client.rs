//! The client side: one connection, sequential calls, timeouts per conductor.md §7.8.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

use crate::framing::{read_line, LineRead, MAX_MESSAGE_BYTES};
use crate::{IpcError, RpcError};

/// A JSON-RPC answer with its parts left as text ([`Client::exchange`]).
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// Connect and response timeouts (§7.8: 5 s and 30 s).
#[derive(Debug, Clone, Copy)]
pub struct ClientTimeouts {
    /// Time allowed to connect.
    pub connect: Duration,
    /// Time allowed for each response.
    pub response: Duration,
}

impl Default for ClientTimeouts {
    fn default() -> Self {
        ClientTimeouts {
            connect: Duration::from_secs(5),
            response: Duration::from_secs(30),
        }
    }
}

/// Connect, retrying while the listener's accept queue is full: a non-blocking connect to
/// a busy Unix socket fails with `EAGAIN` instead of waiting (the caller bounds the wait).
async fn connect_patiently(path: &Path) -> std::io::Result<UnixStream> {
    loop {
        match UnixStream::connect(path).await {
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => return other,
        }
    }
}

/// Open a connection to the conductor at `socket`, the one way every client (the CLI, the
/// dashboard, the MCP server, streams) connects.
///
/// Before connecting it checks the socket's directory and file, after connecting the
/// listening process's uid ([`crate::trust`], architecture invariant 6): a socket another
/// user controls is [`IpcError::Untrusted`] and nothing is sent on it. A missing socket, a
/// refused connection or no connection within `connect_timeout` is [`IpcError::NotRunning`].
pub async fn connect_stream(
    socket: &Path,
    connect_timeout: Duration,
) -> Result<UnixStream, IpcError> {
    crate::paths::check_socket_path(socket)?;
    let trust = crate::trust::check_socket(socket)?;
    let not_running = |reason: String| IpcError::NotRunning {
        socket: socket.to_path_buf(),
        reason,
    };
    let stream = match tokio::time::timeout(connect_timeout, connect_patiently(socket)).await {
        Err(_) => return Err(not_running("connect timed out".into())),
        Ok(Err(err))
            if matches!(
                err.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
            ) =>
        {
            return Err(not_running(err.to_string()))
        }
        Ok(Err(err)) => {
            return Err(IpcError::Io {
                context: format!("cannot connect to {}", socket.display()),
                source: err,
            })
        }
        Ok(Ok(stream)) => stream,
    };
    // The listener's credentials as the kernel recorded them when it called listen(): a
    // socket swapped in by another user shows that user here, whatever the file says.
    let peer = stream.peer_cred().ok().map(|c| (c.uid(), c.pid()));
    trust.check_peer(peer)?;
    match peer.and_then(|(_, pid)| pid) {
        Some(pid) => tracing::debug!(socket = %socket.display(), pid, "ipc.connected"),
        None => tracing::debug!(socket = %socket.display(), "ipc.connected"),
    }
    Ok(stream)
}

/// A connection to the conductor.
#[derive(Debug)]
pub struct Client {
    socket: PathBuf,
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_id: u64,
    timeouts: ClientTimeouts,
    line: Vec<u8>,
}

impl Client {
    /// Connect with the default timeouts.
    pub async fn connect(path: impl AsRef<Path>) -> Result<Client, IpcError> {
        Self::connect_with(path, ClientTimeouts::default()).await
    }

    /// Connect with explicit timeouts. A missing socket file, a refused connection or a
    /// connect timeout are all [`IpcError::NotRunning`]; a socket another user controls is
    /// [`IpcError::Untrusted`] (see [`connect_stream`]).
    pub async fn connect_with(
        path: impl AsRef<Path>,
        timeouts: ClientTimeouts,
    ) -> Result<Client, IpcError> {
        let socket = path.as_ref().to_path_buf();
        let stream = connect_stream(&socket, timeouts.connect).await?;
        let (read_half, writer) = stream.into_split();
        Ok(Client {
            socket,
            reader: BufReader::new(read_half),
            writer,
            next_id: 1,
            timeouts,
            line: Vec::new(),
        })
    }

    /// The socket this client is connected to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Change the response timeout (e.g. 5 s for the stop-time probe, §7.8).
    pub fn set_response_timeout(&mut self, timeout: Duration) {
        self.timeouts.response = timeout;
    }

    /// Call `method` with `params` and decode its result.
    pub async fn call<P: Serialize, R: DeserializeOwned>(
        &mut self,
        method: &str,
        params: P,
    ) -> Result<R, IpcError> {
        let raw = self.call_raw(method, params).await?;
        // Straight from the answer's text: a large result (a job's status carries every
        // sheet) is not first built as a `Value` tree and then copied into `R`.
        serde_json::from_str(raw.get()).map_err(|err| IpcError::Protocol {
            method: method.to_string(),
            detail: format!("unexpected result shape: {err}"),
        })
    }

    /// Call `method` and return its raw JSON result.
    pub async fn call_value<P: Serialize>(
        &mut self,
        method: &str,
        params: P,
    ) -> Result<Value, IpcError> {
        let raw = self.call_raw(method, params).await?;
        serde_json::from_str(raw.get()).map_err(|err| IpcError::Protocol {
            method: method.to_string(),
            detail: format!("response is not JSON: {err}"),
        })
    }

    /// Call `method` and return its result's JSON text (`null` when the answer has none).
    async fn call_raw<P: Serialize>(
        &mut self,
        method: &str,
        params: P,
    ) -> Result<Box<RawValue>, IpcError> {
        let id = self.next_id;
        self.next_id += 1;
        let params = serde_json::to_value(params).map_err(|err| IpcError::Protocol {
            method: method.to_string(),
            detail: format!("cannot encode params: {err}"),
        })?;
        let params = if params.is_null() {
            Value::Object(Default::default())
        } else {
            params
        };
        let request =
            serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id});
        let mut text = request.to_string();
        text.push('\n');
        let timeout = self.timeouts.response;
        tracing::debug!(%method, id, "ipc.request");
        let started = std::time::Instant::now();
        let result = match tokio::time::timeout(timeout, self.exchange(method, &text, id)).await {
            Ok(result) => result,
            Err(_) => Err(IpcError::Timeout {
                method: method.to_string(),
            }),
        };
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match &result {
            Ok(_) => tracing::debug!(%method, id, elapsed_ms, "ipc.response"),
            Err(err) => tracing::debug!(%method, id, elapsed_ms, error = %err, "ipc.failed"),
        }
        result
    }

    async fn exchange(
        &mut self,
        method: &str,
        request: &str,
        id: u64,
    ) -> Result<Box<RawValue>, IpcError> {
        let io_err = |source: std::io::Error| IpcError::Io {
            context: format!("talking to the conductor about '{method}'"),
            source,
        };
        self.writer
            .write_all(request.as_bytes())
            .await
            .map_err(io_err)?;
        self.writer.flush().await.map_err(io_err)?;
        loop {
            match read_line(&mut self.reader, &mut self.line, MAX_MESSAGE_BYTES)
                .await
                .map_err(io_err)?
            {
                LineRead::Line => {}
                LineRead::Eof => {
                    return Err(IpcError::Protocol {
                        method: method.to_string(),
                        detail: "the conductor closed the connection without answering".into(),
                    })
                }
                LineRead::TooLarge => {
                    return Err(IpcError::ResponseTooLarge {
                        method: method.to_string(),
                    })
                }
            }
            let protocol = |detail: String| IpcError::Protocol {
                method: method.to_string(),
                detail,
            };
            // The envelope only: the result stays text until the caller decodes it. (Only
            // an object is one: serde would read `[1, 2]` as a struct's fields in order.)
            let object = self.line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
            let parsed = if object {
                serde_json::from_slice::<Envelope<'_>>(&self.line).map_err(|e| e.to_string())
            } else {
                Err(String::new())
            };
            let message = match parsed {
                Ok(message) => message,
                Err(err) => {
                    // JSON that is no envelope (not an object) is no answer to us.
                    serde_json::from_slice::<serde::de::IgnoredAny>(&self.line).map_err(|e| {
                        let err = if err.is_empty() { e.to_string() } else { err };
                        protocol(format!("response is not JSON: {err}"))
                    })?;
                    continue;
                }
            };
            if let Some(error) = message.error {
                let error: RpcError = serde_json::from_str(error.get())
                    .map_err(|err| protocol(format!("malformed error object: {err}")))?;
                return Err(IpcError::Rpc {
                    method: method.to_string(),
                    error: Box::new(error),
                });
            }
            // Server notifications (e.g. monitor.event) carry no id: not our answer.
            let ours = message
                .id
                .and_then(|got| serde_json::from_str::<u64>(got.get()).ok())
                == Some(id);
            if !ours {
                continue;
            }
            return Ok(match message.result {
                Some(result) => result.to_owned(),
                None => {
                    RawValue::from_string("null".into()).map_err(|err| protocol(err.to_string()))?
                }
            });
        }
    }
}

/// A [`Client`] for synchronous code (the CLI), driving its own current-thread runtime.
#[derive(Debug)]
pub struct BlockingClient {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

impl BlockingClient {
    /// Connect with the default timeouts.
    pub fn connect(path: impl AsRef<Path>) -> Result<BlockingClient, IpcError> {
        Self::connect_with(path, ClientTimeouts::default())
    }

    /// Connect with explicit timeouts.
    pub fn connect_with(
        path: impl AsRef<Path>,
        timeouts: ClientTimeouts,
    ) -> Result<BlockingClient, IpcError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| IpcError::Io {
                context: "cannot start the IPC runtime".into(),
                source,
            })?;
        let client = runtime.block_on(Client::connect_with(path, timeouts))?;
        Ok(BlockingClient { runtime, client })
    }

    /// The socket this client is connected to.
    pub fn socket(&self) -> &Path {
        self.client.socket()
    }

    /// Change the response timeout.
    pub fn set_response_timeout(&mut self, timeout: Duration) {
        self.client.set_response_timeout(timeout);
    }

    /// Call `method` and decode its result.
    pub fn call<P: Serialize, R: DeserializeOwned>(
        &mut self,
        method: &str,
        params: P,
    ) -> Result<R, IpcError> {
        self.runtime.block_on(self.client.call(method, params))
    }

    /// Call `method` and return its raw JSON result.
    pub fn call_value<P: Serialize>(&mut self, method: &str, params: P) -> Result<Value, IpcError> {
        self.runtime
            .block_on(self.client.call_value(method, params))
    }
}
