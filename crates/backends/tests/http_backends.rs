//! The Anthropic and Ollama backends against a canned HTTP/1.1 server on 127.0.0.1, and
//! what the classifier makes of each outcome (execution.md §7.5). No other address is
//! ever contacted.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use mozart_backends::{
    classify, epoch_now, AnthropicApiBackend, AnthropicApiOptions, Backend, ErrorCategory,
    ErrorCode, ExecutionRequest, ExecutionResult, ExitReason, FailureKind, InstrumentRegistry,
    OllamaBackend, OllamaOptions,
};
use serde_json::{json, Value};

/// What the server does with one connection.
#[derive(Clone)]
enum Canned {
    /// Answer with this status, extra headers and body.
    Reply(u16, Vec<(&'static str, String)>, String),
    /// Read the request, then close without answering.
    Drop,
    /// Send headers promising more body than arrives, then close.
    Truncated,
    /// Never answer; report when the client goes away.
    Hang,
}

/// One request as the server saw it.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A server answering one canned response per connection, in order.
struct Server {
    addr: SocketAddr,
    seen: mpsc::Receiver<Seen>,
    closed: mpsc::Receiver<()>,
}

impl Server {
    fn start(script: Vec<Canned>) -> Server {
        Server::start_on(TcpListener::bind("127.0.0.1:0").unwrap(), script)
    }

    fn start_on(listener: TcpListener, script: Vec<Canned>) -> Server {
        let addr = listener.local_addr().unwrap();
        let (seen_tx, seen) = mpsc::channel();
        let (closed_tx, closed) = mpsc::channel();
        thread::spawn(move || {
            for canned in script {
                let Ok((stream, _)) = listener.accept() else {
                    return;
                };
                serve(stream, canned, &seen_tx, &closed_tx);
            }
        });
        Server { addr, seen, closed }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn request(&self) -> Seen {
        self.seen.recv_timeout(Duration::from_secs(10)).unwrap()
    }
}

fn serve(stream: TcpStream, canned: Canned, seen: &mpsc::Sender<Seen>, closed: &mpsc::Sender<()>) {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap();
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.send(Seen {
        method,
        path,
        headers,
        body,
    })
    .unwrap();
    let mut stream = stream;
    match canned {
        Canned::Reply(status, extra, body) => {
            let mut out = format!(
                "HTTP/1.1 {status} Canned\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (k, v) in extra {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
            out.push_str("\r\n");
            out.push_str(&body);
            stream.write_all(out.as_bytes()).unwrap();
        }
        Canned::Drop => {}
        Canned::Truncated => {
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n{\"content\":")
                .unwrap();
        }
        Canned::Hang => {
            // Blocks until the client closes the connection (read returns 0 or fails).
            let mut buf = [0u8; 64];
            let _ = reader.read(&mut buf);
            let _ = closed.send(());
        }
    }
}

/// A base URL where nothing listens. It uses 127.0.0.2, where no test server binds, so a
/// parallel test cannot reuse the freed port (all of 127.0.0.0/8 is loopback on Linux).
fn refusing_url() -> String {
    let l = TcpListener::bind("127.0.0.2:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

fn request(prompt: &str, timeout: Duration) -> ExecutionRequest {
    ExecutionRequest::new(prompt, std::env::temp_dir(), timeout)
}

/// A request carrying the API key in the attempt's environment (never the process's).
fn keyed(prompt: &str) -> ExecutionRequest {
    let mut req = request(prompt, Duration::from_secs(10));
    req.env
        .push(("MOZART_TEST_ANTHROPIC_KEY".into(), "test-key-123".into()));
    req
}

fn anthropic(server: &Server) -> AnthropicApiBackend {
    let reg = InstrumentRegistry::builtin().unwrap();
    let mut options = AnthropicApiOptions::from_profile(reg.get("anthropic_api").unwrap());
    options.base_url = server.url();
    options.api_key_env = "MOZART_TEST_ANTHROPIC_KEY".into();
    AnthropicApiBackend::new(options)
}

fn anthropic_error(kind: &str, message: &str) -> String {
    json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
}

fn one(canned: Canned) -> Server {
    Server::start(vec![canned])
}

async fn run_anthropic(canned: Canned) -> (ExecutionResult, Server) {
    let server = one(canned);
    let result = anthropic(&server).execute(keyed("hi")).await;
    (result, server)
}

#[tokio::test]
async fn anthropic_success_reports_text_tokens_and_profile_cost() {
    let body = json!({
        "id": "msg_01", "type": "message", "role": "assistant",
        "model": "claude-opus-4-20250514",
        "content": [{"type": "text", "text": "Hello"}, {"type": "tool_use", "id": "t"}, {"type": "text", "text": ", world"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1000, "output_tokens": 2000}
    });
    let server = one(Canned::Reply(200, vec![], body.to_string()));
    let logs = tempfile::tempdir().unwrap();
    let mut req = keyed("Write a greeting");
    req.model = Some("claude-opus-4-20250514".into());
    req.options.insert("temperature".into(), json!(0.2));
    req.options.insert("max_tokens".into(), json!(512));
    req.options
        .insert("system_prompt".into(), json!("You are terse."));
    req.output_log_base =
        Some(mozart_backends::output_log::LogBase::at(&logs.path().join("sheet-1")).unwrap());
    let backend = anthropic(&server);
    assert_eq!(backend.name(), "Anthropic API");
    let r = backend.execute(req).await;

    assert!(r.success, "{r:?}");
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.output_text(), "Hello, world");
    assert_eq!((r.input_tokens, r.output_tokens), (Some(1000), Some(2000)));
    // Opus pricing from the native profile: 1k × $0.015 + 2k × $0.075.
    assert!(
        (r.cost_usd.unwrap() - 0.165).abs() < 1e-9,
        "{:?}",
        r.cost_usd
    );
    assert_eq!(r.model.as_deref(), Some("claude-opus-4-20250514"));
    assert_eq!(classify(&r).code, ErrorCode::E209);
    assert_eq!(
        std::fs::read_to_string(logs.path().join("sheet-1.stdout.log")).unwrap(),
        "Hello, world"
    );

    let seen = server.request();
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(seen.header("x-api-key"), Some("test-key-123"));
    assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(seen.body["model"], "claude-opus-4-20250514");
    assert_eq!(seen.body["max_tokens"], 512);
    assert_eq!(seen.body["temperature"], 0.2);
    assert_eq!(seen.body["system"], "You are terse.");
    assert_eq!(
        seen.body["messages"],
        json!([{"role": "user", "content": "Write a greeting"}])
    );
}

#[tokio::test]
async fn anthropic_429_parks_the_instrument_until_retry_after() {
    let (r, _server) = run_anthropic(Canned::Reply(
        429,
        vec![("retry-after", "120".into())],
        anthropic_error(
            "rate_limit_error",
            "Number of requests has exceeded your rate limit",
        ),
    ))
    .await;
    assert!(!r.success && r.rate_limited);
    assert_eq!(r.api_error_status, Some(429));
    assert_eq!(r.error_type.map(FailureKind::as_str), Some("rate_limit"));
    let reset = r.rate_limit_reset.unwrap();
    assert!((reset - (epoch_now() + 120.0)).abs() < 5.0, "{reset}");
    let c = classify(&r);
    assert_eq!(c.category, ErrorCategory::RateLimit);
    let wait = c.rate_limit.unwrap().wait_seconds;
    // The reset plus the classifier's structured slack, not the generic hour.
    assert!((170.0..=185.0).contains(&wait), "{wait}");
}

#[tokio::test]
async fn anthropic_429_without_retry_after_uses_the_ratelimit_reset_header() {
    let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(600);
    let (r, _server) = run_anthropic(Canned::Reply(
        429,
        vec![("anthropic-ratelimit-tokens-reset", at.to_string())],
        anthropic_error("rate_limit_error", "slow down"),
    ))
    .await;
    let reset = r.rate_limit_reset.unwrap();
    assert!((reset - (epoch_now() + 600.0)).abs() < 5.0, "{reset}");
    assert_eq!(classify(&r).category, ErrorCategory::RateLimit);
}

#[tokio::test]
async fn anthropic_401_is_a_fatal_auth_error_naming_the_key_variable() {
    let (r, _server) = run_anthropic(Canned::Reply(
        401,
        vec![],
        anthropic_error("authentication_error", "invalid x-api-key"),
    ))
    .await;
    assert_eq!(
        r.error_type.map(FailureKind::as_str),
        Some("authentication")
    );
    let msg = r.error_message.clone().unwrap();
    assert!(
        msg.contains("invalid x-api-key") && msg.contains("MOZART_TEST_ANTHROPIC_KEY"),
        "{msg}"
    );
    let c = classify(&r);
    assert_eq!((c.code, c.category), (ErrorCode::E502, ErrorCategory::Auth));
    assert!(!c.should_retry());
}

#[tokio::test]
async fn anthropic_missing_key_fails_before_any_request() {
    let server = one(Canned::Reply(200, vec![], "{}".into()));
    let mut options = AnthropicApiOptions {
        base_url: server.url(),
        api_key_env: "MOZART_TEST_KEY_THAT_IS_NEVER_SET".into(),
        ..Default::default()
    };
    options.models.clear();
    let backend = AnthropicApiBackend::new(options);
    let health = backend.health_check().await;
    assert!(!health.ready);
    assert!(health.detail.contains("MOZART_TEST_KEY_THAT_IS_NEVER_SET"));
    let r = backend.execute(request("hi", Duration::from_secs(5))).await;
    assert!(!r.success);
    assert!(r
        .error_message
        .as_deref()
        .unwrap()
        .contains("environment variable MOZART_TEST_KEY_THAT_IS_NEVER_SET"));
    let c = classify(&r);
    assert_eq!(c.category, ErrorCategory::Auth);
    assert!(!c.should_retry());
    assert!(
        server
            .seen
            .recv_timeout(Duration::from_millis(300))
            .is_err(),
        "no request may be sent without a key"
    );
}

#[tokio::test]
async fn anthropic_500_is_transient() {
    let (r, _server) = run_anthropic(Canned::Reply(
        500,
        vec![],
        anthropic_error("api_error", "Internal server error"),
    ))
    .await;
    assert_eq!(r.api_error_status, Some(500));
    assert!(r.error_message.as_deref().unwrap().contains("HTTP 500"));
    let c = classify(&r);
    assert_eq!(c.category, ErrorCategory::Transient, "{c:?}");
    assert!(c.should_retry());
}

#[tokio::test]
async fn anthropic_529_overload_is_retried_as_transient() {
    let (r, _server) = run_anthropic(Canned::Reply(
        529,
        vec![],
        anthropic_error("overloaded_error", "Overloaded"),
    ))
    .await;
    let c = classify(&r);
    // claude-code-output.md §6.5: retry with a short backoff, no plan-window park.
    assert_eq!(
        (c.code, c.category),
        (ErrorCode::E103, ErrorCategory::Transient)
    );
    assert!(c.should_retry());
    assert!(!r.rate_limited, "only a 429 is a rate limit of the account");
}

#[tokio::test]
async fn anthropic_400_bad_request_is_not_retried() {
    let (r, _server) = run_anthropic(Canned::Reply(
        400,
        vec![],
        anthropic_error("invalid_request_error", "max_tokens: too large"),
    ))
    .await;
    assert_eq!(r.error_type.map(FailureKind::as_str), Some("bad_request"));
    assert!(r.stderr.contains("max_tokens: too large"));
    assert!(!classify(&r).should_retry());
}

#[tokio::test]
async fn dropped_connections_are_transient() {
    for canned in [Canned::Drop, Canned::Truncated] {
        let (r, _server) = run_anthropic(canned).await;
        assert!(!r.success);
        assert_eq!(
            r.error_type.map(FailureKind::as_str),
            Some("connection"),
            "{r:?}"
        );
        assert_eq!(r.exit_code, None);
        assert_eq!(r.exit_reason, ExitReason::Error);
        let c = classify(&r);
        assert!(
            matches!(
                c.category,
                ErrorCategory::Transient | ErrorCategory::Network
            ),
            "{c:?}"
        );
        assert!(c.should_retry());
    }
}

#[tokio::test]
async fn a_port_that_looks_like_a_status_does_not_change_the_class() {
    // 127.0.0.3 keeps this fixed port clear of the other tests' servers.
    let Ok(listener) = TcpListener::bind("127.0.0.3:14290") else {
        eprintln!("127.0.0.3:14290 is taken; skipping");
        return;
    };
    let server = Server::start_on(listener, vec![Canned::Drop]);
    let r = anthropic(&server).execute(keyed("hi")).await;
    let c = classify(&r);
    assert_ne!(c.category, ErrorCategory::RateLimit, "{r:?}");
    assert!(c.should_retry(), "{c:?}");
    assert!(!r.error_message.unwrap().contains("14290"));
}

#[tokio::test]
async fn refused_connection_is_a_network_error() {
    let backend = AnthropicApiBackend::new(AnthropicApiOptions {
        base_url: refusing_url(),
        api_key_env: "MOZART_TEST_ANTHROPIC_KEY".into(),
        ..Default::default()
    });
    let r = backend.execute(keyed("hi")).await;
    let msg = r.error_message.clone().unwrap();
    assert!(msg.to_lowercase().contains("connection refused"), "{msg}");
    let c = classify(&r);
    assert_eq!(
        (c.code, c.category),
        (ErrorCode::E901, ErrorCategory::Network)
    );
}

#[tokio::test]
async fn malformed_json_fails_and_is_retried() {
    let (r, _server) = run_anthropic(Canned::Reply(200, vec![], "{not json".into())).await;
    assert!(!r.success);
    assert_eq!(r.error_type.map(FailureKind::as_str), Some("bad_response"));
    assert!(r.error_message.as_deref().unwrap().contains("malformed"));
    assert!(classify(&r).should_retry());

    let (r, _server) = run_anthropic(Canned::Reply(200, vec![], r#"{"id":"x"}"#.into())).await;
    assert!(!r.success);
    assert!(r.error_message.as_deref().unwrap().contains("content"));
}

// Multi-threaded: the connection task must run while this thread blocks on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_timeout_bounds_the_call() {
    let server = one(Canned::Hang);
    let mut req = keyed("hi");
    req.timeout = Duration::from_millis(300);
    let started = std::time::Instant::now();
    let r = anthropic(&server).execute(req).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(r.exit_reason, ExitReason::Timeout);
    assert!(r.timed_out);
    let c = classify(&r);
    assert_eq!(
        (c.code, c.category),
        (ErrorCode::E001, ErrorCategory::Timeout)
    );
    server
        .closed
        .recv_timeout(Duration::from_secs(5))
        .expect("the connection is closed after a timeout");
}

// Multi-threaded: the connection task must run while this thread blocks on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_future_closes_the_connection() {
    let server = one(Canned::Hang);
    let backend = anthropic(&server);
    let call = tokio::spawn(async move { backend.execute(keyed("hi")).await });
    server.request();
    call.abort();
    server
        .closed
        .recv_timeout(Duration::from_secs(5))
        .expect("cancelling the attempt closes its connection");
}

#[tokio::test]
async fn invalid_options_are_configuration_errors_that_are_not_retried() {
    let server = one(Canned::Reply(200, vec![], "{}".into()));
    let mut req = keyed("hi");
    req.options.insert("temperature".into(), json!("hot"));
    let r = anthropic(&server).execute(req).await;
    assert_eq!(r.error_type.map(FailureKind::as_str), Some("configuration"));
    let msg = r.error_message.clone().unwrap();
    assert!(
        msg.contains("temperature") && msg.contains("anthropic_api"),
        "{msg}"
    );
    assert!(!classify(&r).should_retry());
}

#[tokio::test]
async fn registry_backend_honours_the_base_url_option() {
    let body = json!({"content": [{"type": "text", "text": "ok"}], "usage": {"input_tokens": 10, "output_tokens": 5}});
    let server = one(Canned::Reply(200, vec![], body.to_string()));
    let reg = InstrumentRegistry::builtin().unwrap();
    let backend = reg.backend("anthropic_api").unwrap();
    let mut req = keyed("hi");
    req.options.insert("base_url".into(), json!(server.url()));
    req.options
        .insert("api_key_env".into(), json!("MOZART_TEST_ANTHROPIC_KEY"));
    let r = backend.execute(req).await;
    assert!(r.success, "{r:?}");
    // Default model (sonnet 4.5): 10 × 0.003/1k + 5 × 0.015/1k.
    assert!((r.cost_usd.unwrap() - 0.000105).abs() < 1e-12);
    assert_eq!(server.request().body["model"], "claude-sonnet-4-5-20250929");
}

fn ollama(server: &Server) -> OllamaBackend {
    let reg = InstrumentRegistry::builtin().unwrap();
    let mut options = OllamaOptions::from_profile(reg.get("ollama").unwrap());
    options.base_url = server.url();
    OllamaBackend::new(options)
}

#[tokio::test]
async fn ollama_chat_reports_content_and_eval_counts() {
    let body = json!({
        "model": "llama3.1:8b",
        "message": {"role": "assistant", "content": "Bonjour"},
        "done": true, "prompt_eval_count": 26, "eval_count": 7
    });
    let server = one(Canned::Reply(200, vec![], body.to_string()));
    let mut req = request("Say hello in French", Duration::from_secs(10));
    req.options.insert("num_ctx".into(), json!(8192));
    let backend = ollama(&server);
    assert_eq!(backend.name(), "Ollama");
    let r = backend.execute(req).await;
    assert!(r.success, "{r:?}");
    assert_eq!(r.output_text(), "Bonjour");
    assert_eq!((r.input_tokens, r.output_tokens), (Some(26), Some(7)));
    assert_eq!(r.cost_usd, Some(0.0));

    let seen = server.request();
    assert_eq!(seen.path, "/api/chat");
    assert_eq!(seen.body["stream"], false);
    assert_eq!(seen.body["model"], "llama3.1:8b");
    assert_eq!(seen.body["options"]["num_ctx"], 8192);
    assert_eq!(seen.body["keep_alive"], "5m");
    assert_eq!(
        seen.body["messages"],
        json!([{"role": "user", "content": "Say hello in French"}])
    );
}

#[tokio::test]
async fn ollama_without_eval_count_estimates_output_tokens() {
    let body = json!({"message": {"content": "x".repeat(40)}, "prompt_eval_count": 3});
    let server = one(Canned::Reply(200, vec![], body.to_string()));
    let r = ollama(&server)
        .execute(request("hi", Duration::from_secs(10)))
        .await;
    assert_eq!(r.output_tokens, Some(10));
}

#[tokio::test]
async fn ollama_missing_model_is_fatal_and_says_so() {
    let server = one(Canned::Reply(
        404,
        vec![],
        json!({"error": "model \"nope\" not found, try pulling it first"}).to_string(),
    ));
    let mut req = request("hi", Duration::from_secs(10));
    req.model = Some("nope".into());
    let r = ollama(&server).execute(req).await;
    assert!(!r.success);
    assert!(r.stderr.contains("try pulling it first"), "{}", r.stderr);
    assert!(!classify(&r).should_retry());
}

#[tokio::test]
async fn ollama_server_down_is_a_network_error() {
    let backend = OllamaBackend::new(OllamaOptions {
        base_url: refusing_url(),
        ..Default::default()
    });
    let r = backend
        .execute(request("hi", Duration::from_secs(10)))
        .await;
    assert_eq!(r.error_type.map(FailureKind::as_str), Some("connection"));
    assert_eq!(classify(&r).category, ErrorCategory::Network);
    let health = backend.health_check().await;
    assert!(!health.ready, "{health:?}");
}

#[tokio::test]
async fn ollama_health_check_looks_for_the_model() {
    let tags = json!({"models": [{"name": "llama3.1:latest"}, {"name": "qwen2.5:7b"}]}).to_string();
    let server = Server::start(vec![
        Canned::Reply(200, vec![], tags.clone()),
        Canned::Reply(200, vec![], json!({"models": []}).to_string()),
    ]);
    let backend = ollama(&server);
    let health = backend.health_check().await;
    assert!(health.ready, "{health:?}");
    assert_eq!(server.request().path, "/api/tags");
    let health = backend.health_check().await;
    assert!(!health.ready);
    assert!(
        health.detail.contains("ollama pull llama3.1:8b"),
        "{}",
        health.detail
    );
}

#[tokio::test]
async fn user_http_profiles_route_to_the_generate_api() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("local.yaml"),
        "name: local-gen\ndisplay_name: Local generate\nkind: http\ndefault_model: 'phi3:mini'\n\
         http:\n  base_url: http://127.0.0.1:1\n  endpoint: /api/generate\n",
    )
    .unwrap();
    let reg = InstrumentRegistry::load(home.path(), None).unwrap();
    let backend = reg.backend("local-gen").unwrap();
    assert_eq!(backend.name(), "Local generate");

    let server = one(Canned::Reply(
        200,
        vec![],
        json!({"response": "generated", "prompt_eval_count": 2, "eval_count": 1}).to_string(),
    ));
    let mut req = request("complete me", Duration::from_secs(10));
    req.options.insert("base_url".into(), json!(server.url()));
    req.options
        .insert("system_prompt".into(), json!("Be brief."));
    let r = backend.execute(req).await;
    assert!(r.success, "{r:?}");
    assert_eq!(r.output_text(), "generated");
    // No models listed: the $3 / $15 per million fallback (instruments.md §4.6).
    assert!((r.cost_usd.unwrap() - (2.0 * 3.0 + 15.0) / 1e6).abs() < 1e-12);
    let seen = server.request();
    assert_eq!(seen.path, "/api/generate");
    assert_eq!(seen.body["prompt"], "complete me");
    assert_eq!(seen.body["system"], "Be brief.");
    assert_eq!(seen.body["model"], "phi3:mini");

    std::fs::write(
        dir.join("gemini.yaml"),
        "name: gem\ndisplay_name: Gem\nkind: http\nhttp:\n  base_url: http://127.0.0.1:1\n  endpoint: /v1beta/models\n  schema_family: gemini\n",
    )
    .unwrap();
    let reg = InstrumentRegistry::load(home.path(), None).unwrap();
    let err = reg.backend("gem").err().unwrap().to_string();
    assert!(err.contains("'gem'") && err.contains("gemini"), "{err}");
}

/// A user profile of the default (OpenAI) family with a bearer key and pricing.
fn openai_profile(home: &std::path::Path, base_url: &str, key_env: &str) -> InstrumentRegistry {
    let dir = home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("vllm.yaml"),
        format!(
            "name: vllm\ndisplay_name: vLLM\nkind: http\ndefault_model: qwen\n\
             models:\n  - {{name: qwen, context_window: 32000, cost_per_1k_input: 0.001, cost_per_1k_output: 0.002}}\n\
             http:\n  base_url: {base_url}\n  auth_env_var: {key_env}\n"
        ),
    )
    .unwrap();
    InstrumentRegistry::load(home, None).unwrap()
}

#[tokio::test]
async fn openai_compatible_profiles_run_chat_completions() {
    let body = json!({
        "id": "chatcmpl-1", "model": "qwen",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hola"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 500}
    });
    let server = one(Canned::Reply(200, vec![], body.to_string()));
    let home = tempfile::tempdir().unwrap();
    let reg = openai_profile(home.path(), &server.url(), "MOZART_TEST_OPENAI_KEY");
    let backend = reg.backend("vllm").unwrap();
    assert_eq!(backend.name(), "vLLM");
    let mut req = request("Say hi in Spanish", Duration::from_secs(10));
    req.env
        .push(("MOZART_TEST_OPENAI_KEY".into(), "tok-abc".into()));
    req.options.insert("temperature".into(), json!(1.5));
    let r = backend.execute(req).await;
    assert!(r.success, "{r:?}");
    assert_eq!(r.output_text(), "hola");
    assert_eq!((r.input_tokens, r.output_tokens), (Some(1000), Some(500)));
    assert!((r.cost_usd.unwrap() - 0.002).abs() < 1e-12);
    let seen = server.request();
    assert_eq!(seen.path, "/v1/chat/completions");
    assert_eq!(seen.header("authorization"), Some("Bearer tok-abc"));
    assert_eq!(seen.body["model"], "qwen");
    assert_eq!(seen.body["temperature"], 1.5);
    assert!(seen.body.get("max_tokens").is_none());
}

#[tokio::test]
async fn openai_compatible_errors_classify_like_the_others() {
    let server = Server::start(vec![
        Canned::Reply(
            429,
            vec![("retry-after", "30".into())],
            json!({"error": {"message": "Rate limit reached", "type": "requests"}}).to_string(),
        ),
        Canned::Reply(
            401,
            vec![],
            json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}).to_string(),
        ),
    ]);
    let home = tempfile::tempdir().unwrap();
    let reg = openai_profile(home.path(), &server.url(), "MOZART_TEST_OPENAI_KEY");
    let backend = reg.backend("vllm").unwrap();
    let keyed = || {
        let mut req = request("hi", Duration::from_secs(10));
        req.env
            .push(("MOZART_TEST_OPENAI_KEY".into(), "tok-abc".into()));
        req
    };
    let r = backend.execute(keyed()).await;
    assert!(r.rate_limited);
    let wait = classify(&r).rate_limit.unwrap().wait_seconds;
    assert!((80.0..=95.0).contains(&wait), "{wait}");
    let r = backend.execute(keyed()).await;
    assert_eq!(classify(&r).category, ErrorCategory::Auth);
    // Without the key nothing is sent and the variable is named.
    let r = backend
        .execute(request("hi", Duration::from_secs(10)))
        .await;
    assert!(r.error_message.unwrap().contains("MOZART_TEST_OPENAI_KEY"));
}
