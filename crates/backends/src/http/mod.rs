//! HTTP instruments: the Anthropic Messages API (instruments.md §3.2), a local Ollama
//! server (§3.3) and OpenAI-compatible chat completions for user profiles, plus what all
//! three share: the attempt itself (`HttpApi` says what differs, `execute` runs it), one
//! pooled client, the mapping of HTTP outcomes onto [`ExecutionResult`] fields the
//! classifier reads (execution.md §7.5), `retry-after` parsing, profile pricing (§4.6) and
//! the per-attempt log files.
//!
//! Deliberate differences from upstream (see the crate report / `docs/differences.md`):
//! * The request's timeout bounds the whole call (upstream ignored per-call timeouts).
//! * A 5xx, 408 or 409 answer and a dropped connection are transient (upstream reported the
//!   status as exit code, which its classifier turned into a fatal E999).
//! * A 429's `retry-after` (or Anthropic's `anthropic-ratelimit-*-reset`) becomes the
//!   rate-limit reset instant instead of the generic one-hour wait.
//! * Ollama answers with an HTTP error status instead of crashing the attempt.

mod anthropic;
mod ollama;
mod openai;
mod options;

pub use anthropic::{AnthropicApiBackend, AnthropicApiOptions};
pub use ollama::{OllamaBackend, OllamaOptions};
pub use openai::{OpenAiChatBackend, OpenAiChatOptions};
pub use options::{parse_retry_after, price_usd, FALLBACK_PRICING_PER_MILLION};

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use reqwest::{Client, StatusCode, Url};
use serde_json::Value;

use crate::redact::redact;
use crate::request::ExecutionRequest;
use crate::types::StreamKind;
use crate::types::{epoch_now, ExecutionResult, ExitReason, FailureKind, Progress};

/// How long establishing a TCP/TLS connection may take (upstream Ollama's connect timeout).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Most characters of an error body quoted in an error message.
const ERROR_BODY_CHARS: usize = 500;

/// A backend's two clients, built on first use: one honouring the proxy environment, one
/// direct for loopback hosts (a local Ollama or a test server must never go through a
/// corporate proxy). Kept per backend, not process-wide: a pooled connection belongs to
/// the tokio runtime that opened it and dies with it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClientCache(Arc<OnceLock<Result<Clients, String>>>);

#[derive(Debug)]
struct Clients {
    proxied: Client,
    direct: Client,
}

fn build_clients() -> Result<Clients, String> {
    let base = || {
        Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("mozart/", env!("CARGO_PKG_VERSION")))
    };
    let proxied = base().build().map_err(|e| error_chain(&e))?;
    let direct = base().no_proxy().build().map_err(|e| error_chain(&e))?;
    Ok(Clients { proxied, direct })
}

impl ClientCache {
    /// The pooled client for `url` (clones share one connection pool).
    pub(crate) fn client_for(&self, url: &Url) -> Result<Client, String> {
        let clients = self
            .0
            .get_or_init(build_clients)
            .as_ref()
            .map_err(|e| format!("cannot create the HTTP client: {e}"))?;
        Ok(if is_loopback(url) {
            clients.direct.clone()
        } else {
            clients.proxied.clone()
        })
    }
}

fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => bare.eq_ignore_ascii_case("localhost"),
    }
}

/// `base` + `endpoint` as a URL; only `http` and `https` are accepted.
pub(crate) fn join_url(base: &str, endpoint: &str) -> Result<Url, String> {
    let joined = format!(
        "{}/{}",
        base.trim_end_matches('/'),
        endpoint.trim_start_matches('/')
    );
    let url = Url::parse(&joined).map_err(|e| format!("invalid base URL '{base}': {e}"))?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => Err(format!(
            "invalid base URL '{base}': scheme '{other}' is not http or https"
        )),
    }
}

/// An error with its whole `source()` chain, so "connection refused" deep inside hyper
/// reaches the message (and the classifier's network patterns).
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// What came back from one HTTP call.
pub(crate) enum Reply {
    /// A complete response.
    Response {
        status: StatusCode,
        headers: HeaderMap,
        body: String,
    },
    /// The request's timeout elapsed first.
    TimedOut,
    /// No response: connection refused, reset, dropped mid-body, TLS failure…
    Connection(String),
}

/// Send a request and read its whole body, all within `timeout`. Dropping the returned
/// future aborts the call (reqwest closes the connection), which is how a cancelled
/// attempt stops.
pub(crate) async fn send(
    builder: reqwest::RequestBuilder,
    timeout: Duration,
    progress: &Progress,
) -> Reply {
    let call = async {
        // Without the URL: a port such as 42913 or 14011 would otherwise match the
        // classifier's `429` / `401` patterns and turn a dropped connection into a rate
        // limit or an auth failure.
        let response = builder
            .send()
            .await
            .map_err(|e| error_chain(&e.without_url()))?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| error_chain(&e.without_url()))?;
        progress.record(StreamKind::Stdout, bytes.len());
        Ok::<_, String>((
            status,
            headers,
            String::from_utf8_lossy(&bytes).into_owned(),
        ))
    };
    match tokio::time::timeout(timeout, call).await {
        Err(_) => Reply::TimedOut,
        Ok(Err(message)) => Reply::Connection(message),
        Ok(Ok((status, headers, body))) => Reply::Response {
            status,
            headers,
            body,
        },
    }
}

/// What differs between the HTTP instruments (Anthropic, OpenAI-compatible, Ollama);
/// [`execute`] is the attempt they share: resolve the options, find the key, join the URL,
/// send, and map the reply onto an [`ExecutionResult`].
pub(crate) trait HttpApi: Sync {
    /// This attempt's API-specific options.
    type Params: Sync;

    /// The API's name in messages ("Anthropic API", a profile's display name, "Ollama").
    fn api_name(&self) -> &str;
    /// The model a result names when the options cannot be resolved.
    fn fallback_model(&self, req: &ExecutionRequest) -> String;
    /// This attempt's options, or why they are invalid.
    fn call_for(&self, req: &ExecutionRequest) -> Result<Call<Self::Params>, String>;
    /// The endpoint path joined to the base URL.
    fn endpoint(&self) -> &str;
    /// The backend's pooled clients.
    fn clients(&self) -> &ClientCache;
    /// The API key, if the API takes one; `Err` is the message when it is missing.
    fn api_key(
        &self,
        req: &ExecutionRequest,
        call: &Call<Self::Params>,
    ) -> Result<Option<String>, String>;
    /// The request to send: method, headers and body.
    fn request(
        &self,
        client: &Client,
        url: Url,
        key: Option<String>,
        call: &Call<Self::Params>,
        req: &ExecutionRequest,
    ) -> reqwest::RequestBuilder;
    /// Appended to a 401/403 message: where the key came from.
    fn auth_hint(&self, call: &Call<Self::Params>) -> String;
    /// The answer read from a 2xx JSON body; `Err` says what the body lacks.
    fn answer(
        &self,
        clock: &Clock,
        call: &Call<Self::Params>,
        parsed: &Value,
    ) -> Result<ExecutionResult, String>;
}

/// One attempt's resolved options: where it goes, and what only its API reads.
pub(crate) struct Call<P> {
    /// The model asked for.
    pub(crate) model: String,
    /// The server's base URL.
    pub(crate) base_url: String,
    /// The API's own settings.
    pub(crate) params: P,
}

/// One attempt of an HTTP instrument; the answer or error text goes to the attempt's logs.
pub(crate) async fn execute<A: HttpApi>(api: &A, req: ExecutionRequest) -> ExecutionResult {
    let clock = Clock::start();
    let mut result = match api.call_for(&req) {
        Ok(call) => call_api(api, &req, &call, &clock).await,
        Err(message) => configuration_failure(&clock, &api.fallback_model(&req), &message),
    };
    // Like every instrument's result: what the model answered is kept and shown redacted.
    result.stdout = crate::redact::redact_owned(std::mem::take(&mut result.stdout));
    result.stderr = crate::redact::redact_owned(std::mem::take(&mut result.stderr));
    result.result_text = result.result_text.map(crate::redact::redact_owned);
    result.error_message = result.error_message.map(crate::redact::redact_owned);
    write_logs(
        req.output_log_base.as_ref(),
        req.output_log_unavailable.as_ref(),
        result.result_text.as_deref().unwrap_or(""),
        &result.stderr,
    )
    .await;
    result
}

async fn call_api<A: HttpApi>(
    api: &A,
    req: &ExecutionRequest,
    call: &Call<A::Params>,
    clock: &Clock,
) -> ExecutionResult {
    let name = api.api_name();
    let model = call.model.as_str();
    let key = match api.api_key(req, call) {
        Ok(key) => {
            // Read from the variable the score named, whatever its name looks like: an error
            // body that echoes it back is redacted all the same.
            if let Some(k) = &key {
                crate::redact::register_value("API_KEY", k);
            }
            key
        }
        // Worded so the classifier's auth patterns fire (E502, not retried).
        Err(message) => {
            return failure(clock, model, Some(1), FailureKind::Authentication, &message)
        }
    };
    let url = match join_url(&call.base_url, api.endpoint()) {
        Ok(u) => u,
        Err(message) => return configuration_failure(clock, model, &format!("{name}: {message}")),
    };
    let client = match api.clients().client_for(&url) {
        Ok(c) => c,
        Err(message) => return failure(clock, model, None, FailureKind::Exception, &message),
    };
    let target = url.clone();
    let builder = api.request(&client, url, key, call, req);
    match send(builder, req.timeout, &req.progress).await {
        Reply::TimedOut => timeout_failure(clock, model, name, req.timeout),
        Reply::Connection(detail) => connection_failure(clock, model, name, &target, &detail),
        Reply::Response {
            status,
            headers,
            body,
        } if !status.is_success() => {
            let hint = api.auth_hint(call);
            status_failure(clock, model, name, status, &headers, &body, &hint)
        }
        Reply::Response { body, .. } => {
            let answer = serde_json::from_str::<Value>(&body)
                .map_err(|err| err.to_string())
                .and_then(|parsed| api.answer(clock, call, &parsed));
            answer.unwrap_or_else(|why| malformed(clock, model, name, &body, &why))
        }
    }
}

/// The model an answer names, else the one asked for.
pub(crate) fn answered_model(parsed: &Value, asked: &str) -> String {
    parsed
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(asked)
        .to_string()
}

/// The start of an attempt, for durations and `started_at_epoch`.
pub(crate) struct Clock {
    started: Instant,
    started_epoch: f64,
}

impl Clock {
    pub(crate) fn start() -> Self {
        Clock {
            started: Instant::now(),
            started_epoch: epoch_now(),
        }
    }

    /// A successful answer: exit 0, the text as both stdout and result, usage and cost.
    pub(crate) fn answered(
        &self,
        model: &str,
        text: String,
        input_tokens: Option<u64>,
        output_tokens: Option<u64>,
        cost_usd: f64,
    ) -> ExecutionResult {
        let mut r = self.result(model);
        r.success = true;
        r.exit_code = Some(0);
        r.stdout_bytes = text.len() as u64;
        r.stdout = text.clone();
        r.result_text = Some(text);
        r.input_tokens = input_tokens;
        r.output_tokens = output_tokens;
        r.cost_usd = Some(cost_usd);
        r
    }

    /// A result stamped with this attempt's start and duration.
    pub(crate) fn result(&self, model: &str) -> ExecutionResult {
        ExecutionResult {
            started_at_epoch: self.started_epoch,
            duration_seconds: self.started.elapsed().as_secs_f64(),
            model: Some(model.to_string()),
            ..Default::default()
        }
    }
}

/// A failed attempt with `stderr` = the (redacted) message.
pub(crate) fn failure(
    clock: &Clock,
    model: &str,
    exit_code: Option<i32>,
    error_type: FailureKind,
    message: &str,
) -> ExecutionResult {
    let message = redact(message);
    let mut r = clock.result(model);
    r.success = false;
    r.exit_code = exit_code;
    r.exit_reason = ExitReason::Completed;
    r.stderr_bytes = message.len() as u64;
    r.stderr = message.clone();
    r.error_type = Some(error_type);
    r.error_message = Some(message);
    r
}

/// A request that never left: bad option, bad URL, missing key. Exit 2 plus "invalid
/// argument" makes the classifier call it non-transient (execution.md §7.4 step 4), so the
/// baton does not spend retries on a score that cannot work.
pub(crate) fn configuration_failure(clock: &Clock, model: &str, message: &str) -> ExecutionResult {
    let mut r = failure(
        clock,
        model,
        Some(2),
        FailureKind::Configuration,
        &format!("{message} (invalid argument)"),
    );
    r.exit_reason = ExitReason::Error;
    r
}

/// The request's timeout elapsed (execution.md §7.4 step 2 → E001, retriable).
pub(crate) fn timeout_failure(
    clock: &Clock,
    model: &str,
    api: &str,
    timeout: Duration,
) -> ExecutionResult {
    let mut r = failure(
        clock,
        model,
        None,
        FailureKind::Timeout,
        &format!(
            "{api} timeout after {}s: no complete response",
            timeout.as_secs_f64()
        ),
    );
    r.exit_reason = ExitReason::Timeout;
    r.timed_out = true;
    r
}

/// No response at all. Exit code stays unset so the classifier treats it as transient
/// (E901 when the text names a refused/reset connection, else E999), never as a status.
/// The message names the host but not the port (see [`send`]).
pub(crate) fn connection_failure(
    clock: &Clock,
    model: &str,
    api: &str,
    url: &Url,
    detail: &str,
) -> ExecutionResult {
    let host = url.host_str().unwrap_or("the server");
    let mut r = failure(
        clock,
        model,
        None,
        FailureKind::Connection,
        &format!("Connection error: {api} at {host} did not answer: {detail}"),
    );
    // Nothing ran: like a spawn failure of a CLI instrument (instruments.md §2.1).
    r.exit_reason = ExitReason::Error;
    r
}

/// A 2xx whose body is not the API's answer: retriable (a proxy or gateway glitch), so no
/// exit code (execution.md §7.4 step 5).
pub(crate) fn malformed(
    clock: &Clock,
    model: &str,
    api: &str,
    body: &str,
    why: &str,
) -> ExecutionResult {
    let start: String = body.chars().take(200).collect();
    failure(
        clock,
        model,
        None,
        FailureKind::BadResponse,
        &format!("{api} returned a malformed response ({why}); body starts: {start}"),
    )
}

/// The error text inside an API error body: Anthropic's `error.message`, Ollama's `error`,
/// else the start of the body.
pub(crate) fn api_error_text(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let found = v
            .pointer("/error/message")
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .or_else(|| v.get("message"))
            .and_then(Value::as_str);
        if let Some(text) = found {
            let kind = v.pointer("/error/type").and_then(Value::as_str);
            return match kind {
                Some(kind) => format!("{kind}: {text}"),
                None => text.to_string(),
            };
        }
    }
    let trimmed = body.trim();
    if trimmed.is_empty() {
        return "(empty body)".into();
    }
    trimmed.chars().take(ERROR_BODY_CHARS).collect()
}

/// A non-2xx answer, mapped so `classify` decides as execution.md §7.5 intends:
/// 429 → rate limit (reset from `retry-after`), 401/403 → auth (fatal), 503/529 → capacity,
/// other 5xx / 408 / 409 → transient, remaining 4xx → fatal.
pub(crate) fn status_failure(
    clock: &Clock,
    model: &str,
    api: &str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &str,
    auth_hint: &str,
) -> ExecutionResult {
    let code = status.as_u16();
    let text = api_error_text(body);
    let (error_type, message, exit_code) = match code {
        429 => (
            FailureKind::RateLimit,
            format!("Rate limited: {api} answered HTTP 429: {text}"),
            Some(429),
        ),
        401 | 403 => (
            FailureKind::Authentication,
            format!("Authentication failed: {api} answered HTTP {code}: {text}{auth_hint}"),
            Some(i32::from(code)),
        ),
        400 => (
            FailureKind::BadRequest,
            format!("Bad request: {api} answered HTTP 400: {text}"),
            Some(400),
        ),
        // Transient statuses keep no exit code: a status in `exit_code` reaches the
        // classifier's "unknown exit code" branch, which is fatal (execution.md §7.4 step 6).
        408 | 409 | 500..=599 => (
            FailureKind::ApiError,
            format!("{api} answered HTTP {code}: {text}"),
            None,
        ),
        _ => (
            FailureKind::ApiError,
            format!("{api} answered HTTP {code}: {text}"),
            Some(i32::from(code)),
        ),
    };
    let mut r = failure(clock, model, exit_code, error_type, &message);
    r.api_error_status = Some(code);
    if code == 429 {
        r.rate_limited = true;
        r.rate_limit_reset = rate_limit_reset(headers, epoch_now());
    }
    r
}

/// When a 429 says the limit lifts: `retry-after` (seconds or HTTP date), else the latest
/// `anthropic-ratelimit-*-reset` instant (RFC 3339).
pub(crate) fn rate_limit_reset(headers: &HeaderMap, now: f64) -> Option<f64> {
    if let Some(at) = headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, now))
    {
        return Some(at);
    }
    headers
        .iter()
        .filter(|(name, _)| {
            let n = name.as_str();
            n.starts_with("anthropic-ratelimit-") && n.ends_with("-reset")
        })
        .filter_map(|(_, v)| v.to_str().ok())
        .filter_map(|v| v.trim().parse::<jiff::Timestamp>().ok())
        .map(|ts| ts.as_millisecond() as f64 / 1000.0)
        .filter(|at| *at > now)
        .reduce(f64::max)
}

/// Write the answer / error text to `{base}.stdout.log` / `{base}.stderr.log`, as the CLI
/// backends tee their streams. A log that cannot be written — its directory unusable
/// (`unavailable`: the logs' stem and why) or the write failed — is said in the conductor's
/// log as the CLI backends say it (the event `mozart logs` reports), and never fails the
/// attempt.
pub(crate) async fn write_logs(
    base: Option<&crate::output_log::LogBase>,
    unavailable: Option<&(std::path::PathBuf, String)>,
    stdout: &str,
    stderr: &str,
) {
    let logs = [(".stdout.log", stdout), (".stderr.log", stderr)];
    let Some(base) = base else {
        // Said for a text that needed its file, as a CLI's stream is once it prints.
        for (suffix, _) in logs.iter().filter(|(_, text)| !text.is_empty()) {
            if let Some((stem, why)) = unavailable {
                let mut path = stem.clone().into_os_string();
                path.push(suffix);
                crate::process::log_unwritten(
                    Some(std::path::Path::new(&path)),
                    &std::io::Error::other(why.clone()),
                );
            }
        }
        return;
    };
    for (suffix, text) in logs {
        let (base, text) = (base.clone(), text.to_string());
        // Private and redacted like the process instruments' logs (issue 21), in the logs
        // directory checked when the attempt started; small files, written off the
        // runtime's threads.
        let written = tokio::task::spawn_blocking(move || {
            base.write_redacted(suffix, &text)
                .map_err(|err| (base.path(suffix), err))
        })
        .await;
        if let Ok(Err((path, err))) = written {
            crate::process::log_unwritten(Some(&path), &err);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn urls_join_and_loopback_is_detected() {
        let u = join_url("http://127.0.0.1:9/", "/v1/messages").unwrap();
        assert_eq!(u.as_str(), "http://127.0.0.1:9/v1/messages");
        assert!(is_loopback(&u));
        assert!(is_loopback(
            &join_url("http://localhost:11434", "api/chat").unwrap()
        ));
        assert!(!is_loopback(
            &join_url("https://api.anthropic.com", "/v1/messages").unwrap()
        ));
        let err = join_url("ftp://x", "/a").unwrap_err();
        assert!(err.contains("scheme 'ftp'"), "{err}");
        assert!(join_url("not a url", "/a").is_err());
    }

    #[test]
    fn api_error_text_prefers_structured_messages() {
        assert_eq!(
            api_error_text(
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#
            ),
            "rate_limit_error: slow down"
        );
        assert_eq!(
            api_error_text(r#"{"error":"model 'x' not found"}"#),
            "model 'x' not found"
        );
        assert_eq!(api_error_text("  "), "(empty body)");
        assert_eq!(api_error_text(&"y".repeat(900)).len(), ERROR_BODY_CHARS);
    }

    #[test]
    fn reset_comes_from_retry_after_then_anthropic_headers() {
        let now = 1_700_000_000.0;
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("30"));
        h.insert(
            "anthropic-ratelimit-tokens-reset",
            HeaderValue::from_static("2023-11-14T22:20:00Z"),
        );
        assert_eq!(rate_limit_reset(&h, now), Some(now + 30.0));
        h.remove("retry-after");
        // 2023-11-14T22:20:00Z = 1699999200 + 1200 = 1700000400.
        assert_eq!(rate_limit_reset(&h, now), Some(1_700_000_400.0));
        h.insert(
            "anthropic-ratelimit-requests-reset",
            HeaderValue::from_static("2023-11-14T22:30:00Z"),
        );
        assert_eq!(rate_limit_reset(&h, now), Some(1_700_001_000.0));
        assert_eq!(rate_limit_reset(&HeaderMap::new(), now), None);
    }
}
