//! A local mock of the model APIs the real AI CLIs call (issue 13): the Anthropic Messages
//! API (SSE and plain JSON), the Gemini API (`generateContent`, `streamGenerateContent`) and
//! the OpenAI Responses and Chat Completions APIs. It listens on 127.0.0.1 only.
//!
//! Plain threads and a hand-written HTTP/1.1 reader: the CLIs send one request per
//! connection-or-keep-alive and accept `Connection: close`, so a web framework would add a
//! dependency for nothing (and a hang is just a thread that sleeps).
//!
//! # Scripting a turn
//! The prompt carries directives, found anywhere in the request body:
//! - `mock-scenario:NAME`: `text` (default), `write`, `ratelimit`, `overload`, `auth`, `cut`,
//!   `hang`, `slow`, `badmodel`;
//! - `mock-file:/abs/path`: the file a `write` turn makes the CLI create;
//! - `mock-key:KEY`: names the state of windowed scenarios (one per test);
//! - `mock-ms:N`: for `ratelimit` / `overload` / `cut`, the window (from the first request with that
//!   key) during which every request fails, after which the turn behaves like `write`; for
//!   `slow`, the pause between streamed pieces;
//! - `mock-retry:N`: the seconds a `ratelimit` answer asks the client to wait (its
//!   `retry-after` header and the API's own words; default 2).
//!
//! `badmodel` answers 404 "model not found" in each API's words, for good.
//!
//! A `write` turn answers with the CLI's file-writing tool call; once the request carries the
//! tool's result, it answers with the final text [`FINAL_TEXT`].
//!
//! # Scripted conversations
//! [`MockApi::route`] scripts whole conversations instead, for prompts the test does not
//! write itself (a reviewer's, say): a request whose body contains every given text plays
//! the route's next [`Step`] — an answer, a file write or a shell command through the CLI's
//! own tools. Routes are tried in the order they were added, before the directives.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Text of a plain answer.
pub const TEXT_ANSWER: &str = "MOCK OK: nothing to do.";
/// Text of the answer after a tool call.
pub const FINAL_TEXT: &str = "MOCK DONE: the file is written.";
/// Content the `write` scenario puts in the file.
pub const FILE_CONTENT: &str = "written through the mock API\n";
/// Input tokens each mocked turn reports.
pub const INPUT_TOKENS: u64 = 1200;
/// Output tokens each mocked turn reports.
pub const OUTPUT_TOKENS: u64 = 34;

/// Which API a request spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// Gemini (`…:generateContent`, `…:streamGenerateContent`).
    Gemini,
    /// OpenAI Responses (`/v1/responses`).
    OpenAiResponses,
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    OpenAiChat,
    /// Anything else (answered 404, or 200 for `HEAD`).
    Other,
}

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct MockRequest {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The API it spoke.
    pub api: Api,
    /// The scenario it asked for.
    pub scenario: String,
    /// True when it carried a tool result (the second turn of `write`).
    pub tool_result: bool,
    /// Names of the tools the CLI offered.
    pub tools: Vec<String>,
    /// `stream` was requested (SSE).
    pub stream: bool,
    /// The status the mock answered (0 for a hang or a cut).
    pub status: u16,
    /// The scripted route that answered and its step (both from 0), if any.
    pub routed: Option<(usize, usize)>,
    /// Request headers, names in lower case.
    pub headers: Vec<(String, String)>,
}

#[derive(Default)]
struct State {
    requests: Vec<MockRequest>,
    first_seen: HashMap<String, Instant>,
    routes: Vec<Route>,
}

/// One scripted answer of a [`MockApi::route`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Answer with this text.
    Text(String),
    /// Call the CLI's file-writing tool (Codex: a `printf` through its shell). `{dir}` in the
    /// path stands for the request's `mock-dir:` directive (say, `mock-dir:{{ working_directory }}`
    /// in the template), as a model takes a path from its prompt.
    Write {
        /// The file, absolute once `{dir}` is replaced.
        path: String,
        /// Its content.
        content: String,
    },
    /// Call the CLI's shell tool with this command (it runs in the CLI's working directory).
    Shell(String),
}

#[derive(Debug)]
struct Route {
    contains: Vec<String>,
    steps: Vec<Step>,
    played: usize,
}

/// A running mock server; stops when dropped.
#[derive(Debug)]
pub struct MockApi {
    addr: SocketAddr,
    state: Arc<Mutex<StateBox>>,
    stop: Arc<AtomicBool>,
}

/// `State` behind a Debug-able box.
struct StateBox(State);

impl std::fmt::Debug for StateBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} requests", self.0.requests.len())
    }
}

fn lock(state: &Mutex<StateBox>) -> std::sync::MutexGuard<'_, StateBox> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MockApi {
    /// Start on `127.0.0.1:port` (0 = any free port).
    ///
    /// # Errors
    /// When the port cannot be bound.
    pub fn start_on(port: u16) -> std::io::Result<MockApi> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(StateBox(State::default())));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (Arc::clone(&state), Arc::clone(&stop));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if sp.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let st = Arc::clone(&st);
                std::thread::spawn(move || serve_connection(conn, &st));
            }
        });
        Ok(MockApi { addr, state, stop })
    }

    /// Start on a free port.
    ///
    /// # Errors
    /// When no port can be bound.
    pub fn start() -> std::io::Result<MockApi> {
        Self::start_on(0)
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<MockRequest> {
        lock(&self.state).0.requests.clone()
    }

    /// Answer every model request whose body contains all of `contains` with the next of
    /// `steps` (one per request, tool results included; the last one repeats when they run
    /// out, so end with a [`Step::Text`]).
    pub fn route(&self, contains: &[&str], steps: Vec<Step>) {
        lock(&self.state).0.routes.push(Route {
            contains: contains.iter().map(|c| (*c).to_string()).collect(),
            steps,
            played: 0,
        });
    }
}

/// The step the first matching route plays for `body`, with the route's and step's index.
fn next_step(state: &Mutex<StateBox>, body: &str) -> Option<(usize, usize, Step)> {
    let mut st = lock(state);
    let (i, route) =
        st.0.routes
            .iter_mut()
            .enumerate()
            .find(|(_, r)| r.contains.iter().all(|c| body.contains(c.as_str())))?;
    let n = route.played.min(route.steps.len().checked_sub(1)?);
    route.played += 1;
    Some((i, n, route.steps[n].clone()))
}

impl Drop for MockApi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(n, 0);
        reader.read_exact(&mut body).ok()?;
    }
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}

fn serve_connection(conn: TcpStream, state: &Mutex<StateBox>) {
    let Ok(write_half) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    let mut out = write_half;
    // Keep-alive: answer requests until the client closes or a response closes.
    while let Some(req) = read_request(&mut reader) {
        if !respond(&req, &mut out, state) {
            break;
        }
    }
}

/// Value of `name:` in the body: the run of path-safe characters after it.
fn directive(body: &str, name: &str) -> Option<String> {
    let start = body.find(name)? + name.len();
    let value: String = body[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "_-./+".contains(*c))
        .collect();
    (!value.is_empty()).then_some(value)
}

struct Turn {
    api: Api,
    scenario: String,
    file: Option<String>,
    key: String,
    ms: u64,
    retry_secs: u64,
    tool_result: bool,
    stream: bool,
    tools: Vec<String>,
    model: String,
}

fn classify_request(req: &Request) -> (Api, Option<Value>) {
    let api = if req.path.contains("/messages") {
        Api::Anthropic
    } else if req.path.contains(":generateContent") || req.path.contains(":streamGenerateContent") {
        Api::Gemini
    } else if req.path.contains("/responses") {
        Api::OpenAiResponses
    } else if req.path.contains("/chat/completions") {
        Api::OpenAiChat
    } else {
        Api::Other
    };
    (api, serde_json::from_slice(&req.body).ok())
}

fn tool_names(api: Api, body: &Value) -> Vec<String> {
    let mut names = Vec::new();
    let tools = body.get("tools").and_then(Value::as_array);
    for t in tools.into_iter().flatten() {
        match api {
            Api::Gemini => {
                for f in t
                    .get("functionDeclarations")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(n) = f.get("name").and_then(Value::as_str) {
                        names.push(n.to_string());
                    }
                }
            }
            _ => {
                let n = t
                    .get("name")
                    .or_else(|| t.pointer("/function/name"))
                    .and_then(Value::as_str);
                if let Some(n) = n {
                    names.push(n.to_string());
                }
            }
        }
    }
    names
}

/// True when the conversation's last user turn carries a tool result.
fn has_tool_result(api: Api, body: &Value) -> bool {
    match api {
        Api::Anthropic => body
            .get("messages")
            .and_then(Value::as_array)
            .and_then(|m| m.last())
            .and_then(|m| m.get("content"))
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            }),
        Api::Gemini => body
            .get("contents")
            .and_then(Value::as_array)
            .and_then(|m| m.last())
            .and_then(|m| m.get("parts"))
            .and_then(Value::as_array)
            .is_some_and(|p| p.iter().any(|b| b.get("functionResponse").is_some())),
        Api::OpenAiResponses => body
            .get("input")
            .and_then(Value::as_array)
            .is_some_and(|items| {
                items
                    .iter()
                    .any(|i| i.get("type").and_then(Value::as_str) == Some("function_call_output"))
            }),
        Api::OpenAiChat => body
            .get("messages")
            .and_then(Value::as_array)
            .and_then(|m| m.last())
            .is_some_and(|m| m.get("role").and_then(Value::as_str) == Some("tool")),
        Api::Other => false,
    }
}

fn respond(req: &Request, out: &mut TcpStream, state: &Mutex<StateBox>) -> bool {
    let (api, body) = classify_request(req);
    let text = String::from_utf8_lossy(&req.body);
    let body = body.unwrap_or(Value::Null);
    let stream = match api {
        Api::Gemini => req.path.contains("streamGenerateContent"),
        _ => body.get("stream").and_then(Value::as_bool).unwrap_or(false),
    };
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| {
            req.path
                .split("/models/")
                .nth(1)
                .and_then(|rest| rest.split(':').next())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "mock-model".into());
    let turn = Turn {
        api,
        scenario: directive(&text, "mock-scenario:").unwrap_or_else(|| "text".into()),
        file: directive(&text, "mock-file:"),
        key: directive(&text, "mock-key:").unwrap_or_default(),
        ms: directive(&text, "mock-ms:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(u64::MAX),
        retry_secs: directive(&text, "mock-retry:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(2),
        tool_result: has_tool_result(api, &body),
        stream,
        tools: tool_names(api, &body),
        model,
    };
    let mut record = MockRequest {
        method: req.method.clone(),
        path: req.path.clone(),
        api,
        scenario: turn.scenario.clone(),
        tool_result: turn.tool_result,
        tools: turn.tools.clone(),
        stream,
        status: 0,
        routed: None,
        headers: req.headers.clone(),
    };
    if std::env::var_os("MOCK_API_DEBUG").is_some() {
        eprintln!(
            "mock-api: {} {} api={:?} scenario={} tool_result={} stream={}",
            req.method, req.path, api, turn.scenario, turn.tool_result, stream
        );
    }

    if api == Api::Other {
        let (status, body) = if req.method == "HEAD" || req.path.starts_with("/api/hello") {
            (200, String::new())
        } else if req.path.ends_with("/models") || req.path.contains("/models?") {
            (200, json!({"data": [], "models": []}).to_string())
        } else {
            (404, json!({"error": {"message": "not mocked"}}).to_string())
        };
        record.status = status;
        lock(state).0.requests.push(record);
        return write_json(out, status, &[], &body, req.method == "HEAD");
    }

    if let Some((route, step, what)) = next_step(state, &text) {
        if std::env::var_os("MOCK_API_DEBUG").is_some() {
            eprintln!("mock-api: route {route} step {step}: {what:?}");
        }
        record.routed = Some((route, step));
        let what = match what {
            Step::Text(t) => Answer::Text(t),
            Step::Write { path, content } => Answer::Write {
                path: path.replace("{dir}", &directive(&text, "mock-dir:").unwrap_or_default()),
                content,
            },
            Step::Shell(command) => Answer::Shell(command),
        };
        let keep = answer(out, &turn, &what);
        record.status = 200;
        lock(state).0.requests.push(record);
        return keep;
    }

    // Windowed failures: fail while the key's window is open, then play `write`.
    let mut scenario = turn.scenario.as_str();
    if matches!(scenario, "ratelimit" | "overload" | "cut") {
        let key = format!("{scenario}/{}", turn.key);
        let first = *lock(state)
            .0
            .first_seen
            .entry(key)
            .or_insert_with(Instant::now);
        if first.elapsed() >= Duration::from_millis(turn.ms) {
            scenario = "write";
        }
    }
    let (status, keep) = match scenario {
        "ratelimit" => (429, error_response(out, &turn, 429)),
        "overload" => {
            let status = if api == Api::Anthropic { 529 } else { 503 };
            (status, error_response(out, &turn, status))
        }
        "auth" => (401, error_response(out, &turn, 401)),
        "badmodel" => (404, error_response(out, &turn, 404)),
        "hang" => {
            lock(state).0.requests.push(record);
            // Hold the connection open without a byte until the client goes away.
            std::thread::sleep(Duration::from_secs(3600));
            return false;
        }
        "cut" => {
            lock(state).0.requests.push(record);
            cut_stream(out, &turn);
            return false;
        }
        "write" | "slow" if !turn.tool_result && turn.file.is_some() => {
            let what = Answer::Write {
                path: turn.file.clone().unwrap_or_default(),
                content: FILE_CONTENT.into(),
            };
            (200, answer(out, &turn, &what))
        }
        "write" => (200, answer(out, &turn, &Answer::Text(FINAL_TEXT.into()))),
        "slow" => (200, answer(out, &turn, &Answer::Slow)),
        _ => (200, answer(out, &turn, &Answer::Text(TEXT_ANSWER.into()))),
    };
    record.status = status;
    lock(state).0.requests.push(record);
    keep
}

fn write_head(out: &mut TcpStream, status: u16, headers: &[(&str, String)]) -> bool {
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    };
    let mut head = format!("HTTP/1.1 {status} {reason}\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes()).is_ok()
}

/// A complete JSON (or empty) response; keeps the connection open.
fn write_json(
    out: &mut TcpStream,
    status: u16,
    extra: &[(&str, String)],
    body: &str,
    head_only: bool,
) -> bool {
    let mut headers = vec![
        ("content-type", "application/json".to_string()),
        ("content-length", body.len().to_string()),
    ];
    headers.extend(extra.iter().cloned());
    if !write_head(out, status, &headers) {
        return false;
    }
    if head_only {
        return out.flush().is_ok();
    }
    out.write_all(body.as_bytes()).is_ok() && out.flush().is_ok()
}

/// Start an SSE response (closed at the end: the body runs to the end of the connection).
fn sse_head(out: &mut TcpStream) -> bool {
    write_head(
        out,
        200,
        &[
            ("content-type", "text/event-stream".into()),
            ("cache-control", "no-cache".into()),
            ("connection", "close".into()),
        ],
    )
}

fn sse(out: &mut TcpStream, event: Option<&str>, data: &Value) -> bool {
    let mut frame = String::new();
    if let Some(e) = event {
        frame.push_str(&format!("event: {e}\n"));
    }
    frame.push_str(&format!("data: {data}\n\n"));
    out.write_all(frame.as_bytes()).is_ok() && out.flush().is_ok()
}

fn error_response(out: &mut TcpStream, turn: &Turn, status: u16) -> bool {
    let retry_secs = turn.retry_secs;
    let body = match (turn.api, status) {
        (Api::Anthropic, 404) => json!({"type": "error", "error": {"type": "not_found_error",
            "message": format!("model: {}", turn.model)}}),
        (Api::Gemini, 404) => json!({"error": {"code": 404,
            "message": format!("models/{} is not found for API version v1beta, or is not supported for generateContent.", turn.model),
            "status": "NOT_FOUND"}}),
        (_, 404) => {
            json!({"error": {"message": format!("The model `{}` does not exist or you do not have access to it.", turn.model),
            "type": "invalid_request_error", "param": null, "code": "model_not_found"}})
        }
        (Api::Anthropic, 429) => json!({"type": "error", "error": {"type": "rate_limit_error",
            "message": "This request would exceed your account's rate limit. Please try again later."}}),
        (Api::Anthropic, 401) => json!({"type": "error", "error": {"type": "authentication_error",
            "message": "invalid x-api-key"}}),
        (Api::Anthropic, _) => json!({"type": "error", "error": {"type": "overloaded_error",
            "message": "Overloaded"}}),
        (Api::Gemini, 429) => json!({"error": {"code": 429,
            "message": format!("Resource has been exhausted (e.g. check quota). Please retry in {retry_secs}s."),
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{retry_secs}s")}]}}),
        (Api::Gemini, 401) => json!({"error": {"code": 401,
            "message": "API key not valid. Please pass a valid API key.", "status": "UNAUTHENTICATED"}}),
        (Api::Gemini, _) => json!({"error": {"code": 503,
            "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}}),
        (_, 429) => {
            json!({"error": {"message": format!("Rate limit reached for requests on {}. Please try again in {retry_secs}s.", turn.model),
            "type": "requests", "param": null, "code": "rate_limit_exceeded"}})
        }
        (_, 401) => {
            json!({"error": {"message": "Incorrect API key provided: k. You can find your API key at https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})
        }
        (_, _) => json!({"error": {"message": "The server is overloaded or not ready yet.",
            "type": "server_error", "param": null, "code": null}}),
    };
    let mut headers: Vec<(&str, String)> = Vec::new();
    if status == 429 {
        headers.push(("retry-after", retry_secs.to_string()));
        headers.push(("anthropic-ratelimit-requests-limit", "50".into()));
        headers.push(("anthropic-ratelimit-requests-remaining", "0".into()));
        headers.push((
            "anthropic-ratelimit-requests-reset",
            "2026-11-25T00:00:02Z".into(),
        ));
        headers.push(("x-ratelimit-limit-requests", "50".into()));
        headers.push(("x-ratelimit-remaining-requests", "0".into()));
        headers.push(("x-ratelimit-reset-requests", format!("{retry_secs}s")));
    }
    if status == 529 || status == 503 {
        headers.push(("x-should-retry", "true".into()));
    }
    write_json(out, status, &headers, &body.to_string(), false)
}

/// What one mocked turn answers.
enum Answer {
    Text(String),
    Write { path: String, content: String },
    Shell(String),
    Slow,
}

impl Answer {
    fn is_tool_call(&self) -> bool {
        matches!(self, Answer::Write { .. } | Answer::Shell(_))
    }

    /// The shell command that does it, for a CLI whose one tool is a shell (Codex).
    fn command(&self) -> Option<String> {
        match self {
            Answer::Write { path, content } => Some(format!(
                "printf %s {} > {}",
                shell_quote(content),
                shell_quote(path)
            )),
            Answer::Shell(command) => Some(command.clone()),
            Answer::Text(_) | Answer::Slow => None,
        }
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn answer(out: &mut TcpStream, turn: &Turn, what: &Answer) -> bool {
    match turn.api {
        Api::Anthropic => anthropic(out, turn, what),
        Api::Gemini => gemini(out, turn, what),
        Api::OpenAiResponses => responses(out, turn, what),
        Api::OpenAiChat => chat(out, turn, what),
        Api::Other => false,
    }
}

fn slow_pause(turn: &Turn) {
    let ms = if turn.ms == u64::MAX { 400 } else { turn.ms };
    std::thread::sleep(Duration::from_millis(ms));
}

const SLOW_PIECES: [&str; 4] = ["MOCK ", "SLOW ", "ANSWER ", "DONE."];

// ---- Anthropic Messages ----------------------------------------------------------------

static MESSAGE_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn anthropic(out: &mut TcpStream, turn: &Turn, what: &Answer) -> bool {
    let n = MESSAGE_IDS.fetch_add(1, Ordering::Relaxed);
    let id = format!("msg_mock_{n}");
    let usage_in = json!({"input_tokens": INPUT_TOKENS, "output_tokens": 1,
        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    let tool = |name: &str, input: Value| json!({"type": "tool_use", "id": format!("toolu_mock_{n}"), "name": name, "input": input});
    let (block, stop_reason) = match what {
        Answer::Write { path, content } => (
            tool("Write", json!({"file_path": path, "content": content})),
            "tool_use",
        ),
        Answer::Shell(command) => (
            tool(
                "Bash",
                json!({"command": command, "description": "Run the scripted command"}),
            ),
            "tool_use",
        ),
        Answer::Text(t) => (json!({"type": "text", "text": t}), "end_turn"),
        Answer::Slow => (
            json!({"type": "text", "text": SLOW_PIECES.concat()}),
            "end_turn",
        ),
    };
    if !turn.stream {
        let body = json!({"id": id, "type": "message", "role": "assistant",
            "model": turn.model, "content": [block], "stop_reason": stop_reason,
            "stop_sequence": null,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS}});
        return write_json(out, 200, &[], &body.to_string(), false);
    }
    if !sse_head(out) {
        return false;
    }
    let mut ok = sse(
        out,
        Some("message_start"),
        &json!({"type": "message_start", "message": {"id": id, "type": "message",
            "role": "assistant", "model": turn.model, "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": usage_in}}),
    );
    let delta = |out: &mut TcpStream, delta: Value| {
        sse(
            out,
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        )
    };
    let start = |out: &mut TcpStream, block: Value| {
        sse(
            out,
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": 0, "content_block": block}),
        )
    };
    if what.is_tool_call() {
        // The input arrives as JSON text after an empty start, as the API streams it.
        let input = block["input"].to_string();
        let mut empty = block.clone();
        empty["input"] = json!({});
        ok &= start(out, empty);
        ok &= delta(
            out,
            json!({"type": "input_json_delta", "partial_json": input}),
        );
    } else {
        ok &= start(out, json!({"type": "text", "text": ""}));
        let slow = matches!(what, Answer::Slow);
        let whole = [block["text"].as_str().unwrap_or_default()];
        for piece in if slow { &SLOW_PIECES[..] } else { &whole[..] } {
            if slow {
                slow_pause(turn);
            }
            ok &= delta(out, json!({"type": "text_delta", "text": piece}));
        }
    }
    ok &= sse(
        out,
        Some("content_block_stop"),
        &json!({"type": "content_block_stop", "index": 0}),
    );
    ok &= sse(
        out,
        Some("message_delta"),
        &json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": OUTPUT_TOKENS}}),
    );
    let _ = ok & sse(out, Some("message_stop"), &json!({"type": "message_stop"}));
    false
}

// ---- Gemini --------------------------------------------------------------------------

fn gemini_chunk(parts: Value, finish: Option<&str>, model: &str) -> Value {
    let mut cand = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(f) = finish {
        cand["finishReason"] = json!(f);
    }
    json!({"candidates": [cand],
        "usageMetadata": {"promptTokenCount": INPUT_TOKENS, "candidatesTokenCount": OUTPUT_TOKENS,
            "totalTokenCount": INPUT_TOKENS + OUTPUT_TOKENS},
        "modelVersion": model, "responseId": "mock-response"})
}

fn gemini(out: &mut TcpStream, turn: &Turn, what: &Answer) -> bool {
    let parts = match what {
        Answer::Write { path, content } => json!([{"functionCall": {"name": "write_file",
            "args": {"file_path": path, "content": content}}}]),
        Answer::Shell(command) => json!([{"functionCall": {"name": "run_shell_command",
            "args": {"command": command, "description": "Run the scripted command"}}}]),
        Answer::Text(t) => json!([{"text": t}]),
        Answer::Slow => json!([{"text": SLOW_PIECES.concat()}]),
    };
    if !turn.stream {
        // The CLI's side calls (routing, next-speaker checks) ask for JSON: give one.
        let parts = if turn.tools.is_empty() && !what.is_tool_call() {
            json!([{"text": "{\"reasoning\": \"mock\", \"model_choice\": \"flash\", \"next_speaker\": \"user\"}"}])
        } else {
            parts
        };
        let body = gemini_chunk(parts, Some("STOP"), &turn.model);
        return write_json(out, 200, &[], &body.to_string(), false);
    }
    if !sse_head(out) {
        return false;
    }
    if let Answer::Slow = what {
        for (i, piece) in SLOW_PIECES.iter().enumerate() {
            slow_pause(turn);
            let last = i + 1 == SLOW_PIECES.len();
            if !sse(
                out,
                None,
                &gemini_chunk(
                    json!([{"text": piece}]),
                    last.then_some("STOP"),
                    &turn.model,
                ),
            ) {
                return false;
            }
        }
        return false;
    }
    let _ = sse(out, None, &gemini_chunk(parts, Some("STOP"), &turn.model));
    false
}

// ---- OpenAI Responses --------------------------------------------------------------------

fn responses(out: &mut TcpStream, turn: &Turn, what: &Answer) -> bool {
    let n = MESSAGE_IDS.fetch_add(1, Ordering::Relaxed);
    let item = match what {
        Answer::Write { .. } | Answer::Shell(_) => json!({"type": "function_call",
            "id": format!("fc_mock_{n}"), "call_id": format!("call_mock_{n}"),
            "name": "exec_command", "status": "completed",
            "arguments": json!({"cmd": what.command()}).to_string()}),
        Answer::Text(t) => json!({"type": "message", "id": "msg_mock_1", "role": "assistant",
            "status": "completed", "content": [{"type": "output_text", "text": t, "annotations": []}]}),
        Answer::Slow => json!({"type": "message", "id": "msg_mock_1", "role": "assistant",
            "status": "completed", "content": [{"type": "output_text", "text": SLOW_PIECES.concat(), "annotations": []}]}),
    };
    let usage = json!({"input_tokens": INPUT_TOKENS, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS});
    let response = |status: &str, output: Value| {
        json!({"id": "resp_mock_1", "object": "response", "created_at": 1_795_600_000,
            "status": status, "model": turn.model, "output": output, "usage": usage})
    };
    if !turn.stream {
        let body = response("completed", json!([item]));
        return write_json(out, 200, &[], &body.to_string(), false);
    }
    if !sse_head(out) {
        return false;
    }
    let mut ok = sse(
        out,
        Some("response.created"),
        &json!({"type": "response.created", "response": response("in_progress", json!([]))}),
    );
    ok &= sse(
        out,
        Some("response.output_item.added"),
        &json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
    );
    if let Answer::Slow = what {
        for piece in SLOW_PIECES {
            slow_pause(turn);
            ok &= sse(
                out,
                Some("response.output_text.delta"),
                &json!({"type": "response.output_text.delta", "item_id": "msg_mock_1",
                    "output_index": 0, "content_index": 0, "delta": piece}),
            );
        }
    }
    ok &= sse(
        out,
        Some("response.output_item.done"),
        &json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
    );
    let _ = ok
        & sse(
            out,
            Some("response.completed"),
            &json!({"type": "response.completed", "response": response("completed", json!([item]))}),
        );
    false
}

// ---- OpenAI Chat Completions -------------------------------------------------------------

fn chat(out: &mut TcpStream, turn: &Turn, what: &Answer) -> bool {
    let n = MESSAGE_IDS.fetch_add(1, Ordering::Relaxed);
    let message = match what {
        Answer::Write { .. } | Answer::Shell(_) => json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": format!("call_mock_{n}"), "type": "function",
            "function": {"name": "shell",
            "arguments": json!({"command": ["bash", "-lc", what.command()]}).to_string()}}]}),
        Answer::Text(t) => json!({"role": "assistant", "content": t}),
        Answer::Slow => json!({"role": "assistant", "content": SLOW_PIECES.concat()}),
    };
    let finish = if what.is_tool_call() {
        "tool_calls"
    } else {
        "stop"
    };
    let usage = json!({"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS,
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS});
    if !turn.stream {
        let body = json!({"id": "chatcmpl-mock", "object": "chat.completion", "created": 1_795_600_000,
            "model": turn.model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage});
        return write_json(out, 200, &[], &body.to_string(), false);
    }
    if !sse_head(out) {
        return false;
    }
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1_795_600_000,
            "model": turn.model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut delta = message.clone();
    if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for (i, c) in calls.iter_mut().enumerate() {
            c["index"] = json!(i);
        }
    }
    let mut ok = sse(out, None, &chunk(delta, None));
    ok &= sse(out, None, &chunk(json!({}), Some(finish)));
    let mut last = chunk(json!({}), None);
    last["choices"] = json!([]);
    last["usage"] = usage;
    ok &= sse(out, None, &last);
    let _ = ok && out.write_all(b"data: [DONE]\n\n").is_ok();
    false
}

/// Start a streamed answer and drop the connection half-way.
fn cut_stream(out: &mut TcpStream, turn: &Turn) {
    if !sse_head(out) {
        return;
    }
    match turn.api {
        Api::Anthropic => {
            let _ = sse(
                out,
                Some("message_start"),
                &json!({"type": "message_start", "message": {"id": "msg_mock", "type": "message",
                    "role": "assistant", "model": turn.model, "content": [], "stop_reason": null,
                    "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1}}}),
            );
            let _ = sse(
                out,
                Some("content_block_start"),
                &json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
            );
            let _ = sse(
                out,
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": "MOCK half an ans"}}),
            );
        }
        Api::Gemini => {
            let _ = sse(
                out,
                None,
                &gemini_chunk(json!([{"text": "MOCK half an ans"}]), None, &turn.model),
            );
        }
        _ => {
            let _ = sse(
                out,
                Some("response.created"),
                &json!({"type": "response.created", "response": {"id": "resp_mock_1", "status": "in_progress", "output": []}}),
            );
            let _ = sse(
                out,
                Some("response.output_text.delta"),
                &json!({"type": "response.output_text.delta", "item_id": "msg_mock_1",
                    "output_index": 0, "content_index": 0, "delta": "MOCK half an ans"}),
            );
        }
    }
    let _ = out.flush();
    let _ = out.shutdown(std::net::Shutdown::Both);
}
