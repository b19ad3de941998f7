//! Claude Code CLI backend (instruments.md §3.1) with the output contract of
//! claude-code-output.md: prompt on stdin, json / stream-json parsing (result, cost,
//! tokens, session id, `rate_limit_event` with its reset time).
//!
//! Deliberate differences from upstream's `ClaudeCliBackend`: no literal `-` prompt
//! argument (it sent a stray `-` line, §1); `--verbose` is added for stream-json (the CLI
//! refuses stream-json without it); the system prompt file is passed with
//! `--system-prompt-file` (upstream passed the path string as the prompt text); json mode
//! fills `result_text` from `result`; "exit 0 without a result" is a failure in json modes.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::env::EnvPlan;
use crate::live::{Judgement, Verdict, Watch};
use crate::process::{LineSink, ProcessSpec};
use crate::request::{Backend, ExecutionRequest};
use crate::types::{BoxFuture, ExecutionResult, HealthStatus};

mod outcome;
use outcome::Outcome;

/// What Claude Code prints on stderr when run as root with permissions skipped.
pub const ROOT_REFUSAL: &str = "cannot be used with root/sudo privileges";

/// The classified explanation of [`ROOT_REFUSAL`].
pub const ROOT_REFUSAL_HINT: &str =
    "Claude Code refuses --dangerously-skip-permissions when run as root \
     (it exited 1 before calling the API). Set IS_SANDBOX=1 in the conductor's environment if \
     it runs in a container or CI sandbox, run the conductor as a non-root user, or set \
     `backend.skip_permissions: false` in the score";

/// The JSON string that turns every MCP server off.
pub const EMPTY_MCP_CONFIG: &str = r#"{"mcpServers":{}}"#;

/// `--output-format` of the Claude CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ClaudeOutputFormat {
    /// Plain answer text.
    Text,
    /// One result object.
    Json,
    /// NDJSON events (carries `rate_limit_event`, `api_retry`, tokens and cost as they
    /// come): the default (upstream's is `text`, which reports none of them).
    #[default]
    StreamJson,
}

impl ClaudeOutputFormat {
    /// The CLI's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ClaudeOutputFormat::Text => "text",
            ClaudeOutputFormat::Json => "json",
            ClaudeOutputFormat::StreamJson => "stream-json",
        }
    }
}

/// How to run Claude Code (the conductor maps a score's `backend:` section here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClaudeCliOptions {
    /// Executable name or path.
    pub executable: String,
    /// Pass `--dangerously-skip-permissions`.
    pub skip_permissions: bool,
    /// Pass `--strict-mcp-config --mcp-config {"mcpServers":{}}`.
    pub disable_mcp: bool,
    /// Output format.
    pub output_format: ClaudeOutputFormat,
    /// `--model`.
    pub cli_model: Option<String>,
    /// `--allowedTools` (joined with `,`).
    pub allowed_tools: Option<Vec<String>>,
    /// `--system-prompt-file`.
    pub system_prompt_file: Option<PathBuf>,
    /// Appended last.
    pub cli_extra_args: Vec<String>,
}

impl Default for ClaudeCliOptions {
    fn default() -> Self {
        ClaudeCliOptions {
            executable: "claude".into(),
            skip_permissions: true,
            disable_mcp: true,
            output_format: ClaudeOutputFormat::StreamJson,
            cli_model: None,
            allowed_tools: None,
            system_prompt_file: None,
            cli_extra_args: Vec::new(),
        }
    }
}

/// Runs the Claude Code CLI.
#[derive(Debug, Clone)]
pub struct ClaudeCliBackend {
    options: ClaudeCliOptions,
    /// Child environment and program path shared by every spawn (and by clones).
    spawn: Arc<OnceLock<crate::cli_backend::SpawnBase>>,
}

impl ClaudeCliBackend {
    /// A backend with these options.
    pub fn new(options: ClaudeCliOptions) -> Self {
        ClaudeCliBackend {
            options,
            spawn: Arc::default(),
        }
    }

    /// The options.
    pub fn options(&self) -> &ClaudeCliOptions {
        &self.options
    }

    /// Arguments after the executable (instruments.md §3.1 order).
    pub fn build_args(&self, model: Option<&str>) -> Vec<String> {
        let o = &self.options;
        let mut args = vec!["-p".to_string()];
        if o.skip_permissions {
            args.push("--dangerously-skip-permissions".into());
        }
        args.push("--output-format".into());
        args.push(o.output_format.as_str().into());
        if o.output_format == ClaudeOutputFormat::StreamJson {
            args.push("--verbose".into());
        }
        if o.disable_mcp {
            args.extend([
                "--strict-mcp-config".into(),
                "--mcp-config".into(),
                EMPTY_MCP_CONFIG.into(),
            ]);
        }
        if let Some(model) = model {
            args.push("--model".into());
            args.push(model.into());
        }
        if let Some(tools) = &o.allowed_tools {
            args.push("--allowedTools".into());
            args.push(tools.join(","));
        }
        if let Some(file) = &o.system_prompt_file {
            args.push("--system-prompt-file".into());
            args.push(file.display().to_string());
        }
        args.extend(o.cli_extra_args.iter().cloned());
        args
    }

    fn model_for(&self, req: &ExecutionRequest) -> Option<String> {
        for key in req.options.keys() {
            if key != "model" && key != "cli_model" {
                tracing::warn!(option = %key, job = %req.job_id, sheet = req.sheet_num, "instrument_config option is not used by claude_cli; ignoring it");
            }
        }
        req.model
            .clone()
            .or_else(|| {
                ["model", "cli_model"].iter().find_map(|k| {
                    req.options
                        .get(*k)
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
            })
            .or_else(|| self.options.cli_model.clone())
    }

    async fn run(&self, req: ExecutionRequest) -> ExecutionResult {
        let model = self.model_for(&req);
        let state = Arc::new(Mutex::new(ClaudeStream::default()));
        let watch = Watch::new();
        let (spec, sink) = self.process_spec(&req, model.as_deref(), &state, &watch);
        let (process, _) = crate::placement::run(&req.placement, &req.placed(), spec, sink).await;
        let stream = std::mem::take(&mut *state.lock().unwrap_or_else(|p| p.into_inner()));
        // What the run said, read once; the verdict on it; the result worded from both.
        let outcome = Outcome::read(
            &process,
            stream,
            watch.verdict(),
            self.options.output_format,
            model,
        );
        let verdict = outcome.verdict();
        outcome::result(&outcome, verdict, req.timeout)
    }

    /// The process to start for `req`, with the sink that reads its json / stream-json
    /// output into `state` and lets `watch` stop it at a retry it must not make.
    fn process_spec(
        &self,
        req: &ExecutionRequest,
        model: Option<&str>,
        state: &Arc<Mutex<ClaudeStream>>,
        watch: &Arc<Watch>,
    ) -> (ProcessSpec, Option<Box<dyn LineSink>>) {
        let mut spec = ProcessSpec::new(
            self.options.executable.clone(),
            self.build_args(model),
            req.timeout,
        );
        spec.cwd = Some(req.working_dir.clone());
        let live = self.options.output_format == ClaudeOutputFormat::StreamJson;
        self.spawn
            .get_or_init(|| {
                crate::cli_backend::SpawnBase::new(&EnvPlan {
                    clear: false,
                    set: retry_cap(live, std::env::var_os(MAX_RETRIES_VAR).is_some()),
                    remove: vec![crate::env::NESTING_GUARD_VAR.into()],
                })
            })
            .prepare(&mut spec, &req.env);
        spec.stdin = Some(req.prompt.clone().into_bytes());
        spec.kill_grace = req.kill_grace;
        spec.owner = (!req.job_id.is_empty()).then(|| req.job_id.clone());
        spec.log_base = req.output_log_base.clone();
        spec.log_unavailable = req.output_log_unavailable.clone();
        if self.options.output_format == ClaudeOutputFormat::Text {
            return (spec, None);
        }
        let notify = Arc::new(tokio::sync::Notify::new());
        spec.result_seen = Some(Arc::clone(&notify));
        spec.stop = Some(watch.stop_signal());
        let sink = ClaudeSink {
            state: Arc::clone(state),
            result_seen: notify,
            progress: Arc::clone(&req.progress),
            seen_messages: Vec::new(),
            watch: Arc::clone(watch),
        };
        (spec, Some(Box::new(sink)))
    }
}

/// What to check after Claude Code's API refused the credentials.
pub const AUTH_HINT: &str = "Check the key Claude Code reads (ANTHROPIC_API_KEY) in the \
     conductor's environment, or log the CLI in";

/// The variable that caps Claude Code's own API retries (claude-code-output.md §11).
pub const MAX_RETRIES_VAR: &str = "CLAUDE_CODE_MAX_RETRIES";

/// The cap on the CLI's own retries in `text` and `json` mode, where it reports nothing until
/// it gives up: 2 retries (three requests) make a refused key fail in about 2 s and a 429 in
/// about 10 s, where the CLI's default ten take minutes; the conductor then decides.
pub const TEXT_MODE_MAX_RETRIES: &str = "2";

/// The environment the conductor adds for Claude Code: in `text` / `json` mode the retry cap,
/// unless the conductor's environment sets its own. In `stream-json` mode the CLI keeps its
/// defaults: the conductor watches each retry as it happens.
fn retry_cap(live: bool, set_by_user: bool) -> Vec<(String, String)> {
    if live || set_by_user {
        Vec::new()
    } else {
        vec![(MAX_RETRIES_VAR.into(), TEXT_MODE_MAX_RETRIES.into())]
    }
}

/// What a json / stream-json run reported, accumulated line by line.
#[derive(Debug, Default)]
pub struct ClaudeStream {
    /// The `result` event.
    pub result: Option<Value>,
    /// `session_id` of `system/init`.
    pub session_id: Option<String>,
    /// Model of `system/init`.
    pub model: Option<String>,
    /// A rejected `rate_limit_event` is in force (a later allowed one clears it).
    pub rejected: bool,
    /// Latest `resetsAt` among rejected windows (epoch seconds).
    pub rejected_reset: Option<f64>,
    /// `error` of the last assistant message that had one.
    pub assistant_error: Option<String>,
    /// Number of `system/api_retry` events.
    pub api_retries: u32,
    /// `retry_delay_ms` of the last `api_retry` for an HTTP 429 (the CLI honours the API's
    /// `retry-after` there), in seconds.
    pub rate_limit_retry_delay: Option<f64>,
}

impl ClaudeStream {
    /// Feed one stdout line (non-JSON lines are skipped, claude-code-output.md §5).
    pub fn feed(&mut self, line: &[u8]) -> bool {
        let trimmed = line.trim_ascii();
        if !(trimmed.starts_with(b"{") || trimmed.starts_with(b"[")) {
            return false;
        }
        let Ok(value) = serde_json::from_slice::<Value>(trimmed) else {
            return false;
        };
        match value {
            // `--verbose` with json prints an array of every message (§8.4).
            Value::Array(items) => {
                let mut saw_result = false;
                for item in items {
                    saw_result |= self.event(item);
                }
                saw_result
            }
            v => self.event(v),
        }
    }

    /// Handle one event; true when it was the final `result`.
    fn event(&mut self, ev: Value) -> bool {
        match ev.get("type").and_then(Value::as_str) {
            Some("system") => match ev.get("subtype").and_then(Value::as_str) {
                Some("init") => {
                    self.session_id = ev
                        .get("session_id")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                    self.model = ev.get("model").and_then(Value::as_str).map(str::to_string);
                }
                Some("api_retry") => {
                    self.api_retries += 1;
                    if ev.get("error_status").and_then(Value::as_u64) == Some(429) {
                        self.rate_limit_retry_delay = ev
                            .get("retry_delay_ms")
                            .and_then(Value::as_f64)
                            .map(|ms| ms / 1000.0);
                    }
                }
                _ => {}
            },
            Some("rate_limit_event") => {
                let info = ev.get("rate_limit_info");
                let status = info.and_then(|i| i.get("status")).and_then(Value::as_str);
                let resets = info.and_then(|i| i.get("resetsAt")).and_then(Value::as_f64);
                if status == Some("rejected") {
                    // Several rejected windows: wait for the latest (§6.1).
                    self.rejected = true;
                    self.rejected_reset = match (self.rejected_reset, resets) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    };
                } else if status.is_some() {
                    self.rejected = false;
                    self.rejected_reset = None;
                }
            }
            Some("assistant") => {
                if let Some(err) = ev.get("error").and_then(Value::as_str) {
                    self.assistant_error = Some(err.to_string());
                }
                if self.model.is_none() {
                    self.model = ev
                        .pointer("/message/model")
                        .and_then(Value::as_str)
                        .filter(|m| *m != "<synthetic>")
                        .map(str::to_string);
                }
            }
            Some("result") => {
                self.result = Some(ev);
                return true;
            }
            _ => {}
        }
        false
    }
}

struct ClaudeSink {
    state: Arc<Mutex<ClaudeStream>>,
    result_seen: Arc<tokio::sync::Notify>,
    /// Where `mozart status` reads the run's activity while it streams.
    progress: Arc<crate::types::Progress>,
    /// Ids of the API messages whose usage is already counted (one message can span
    /// several `assistant` lines, one per content block).
    seen_messages: Vec<String>,
    /// Where an `api_retry` the conductor will not let the CLI make is decided.
    watch: Arc<Watch>,
}

impl ClaudeSink {
    /// Live progress from one stream-json line (tool calls, tokens, CLI retries).
    fn note_activity(&mut self, line: &[u8]) {
        let trimmed = line.trim_ascii();
        if !trimmed.starts_with(b"{") {
            return;
        }
        let Ok(ev) = serde_json::from_slice::<Value>(trimmed) else {
            return;
        };
        match ev.get("type").and_then(Value::as_str) {
            Some("assistant") => {
                let id = ev
                    .pointer("/message/id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let new_message = !self.seen_messages.contains(&id);
                if new_message {
                    self.seen_messages.push(id);
                }
                let tools: Vec<String> = ev
                    .pointer("/message/content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
                    .filter_map(|b| b.get("name").and_then(Value::as_str).map(str::to_string))
                    .collect();
                let usage = |k: &str| {
                    ev.pointer(&format!("/message/usage/{k}"))
                        .and_then(crate::types::token_count)
                        .unwrap_or(0)
                };
                let (input, output) = (usage("input_tokens"), usage("output_tokens"));
                self.progress.update_activity(|a| {
                    if new_message {
                        a.input_tokens = a.input_tokens.saturating_add(input);
                        a.output_tokens = a.output_tokens.saturating_add(output);
                    }
                    for t in &tools {
                        a.tool_calls += 1;
                        a.last_event = Some(format!("tool call: {t}"));
                    }
                    if let Some(t) = tools.last() {
                        a.last_tool = Some(t.clone());
                    } else if a.last_event.is_none() {
                        a.last_event = Some("model answering".into());
                    }
                });
            }
            Some("system") if ev.get("subtype").and_then(Value::as_str) == Some("api_retry") => {
                let text = self.judge_retry(&ev);
                self.progress.update_activity(|a| {
                    a.api_retries += 1;
                    a.last_event = Some(text);
                });
            }
            Some("result") => {
                let usage = |k: &str| {
                    ev.pointer(&format!("/usage/{k}"))
                        .and_then(crate::types::token_count)
                };
                let (input, output) = (usage("input_tokens"), usage("output_tokens"));
                self.progress.update_activity(|a| {
                    // The result's totals are authoritative.
                    a.input_tokens = input.unwrap_or(a.input_tokens);
                    a.output_tokens = output.unwrap_or(a.output_tokens);
                    a.last_event = Some("finished".into());
                });
            }
            _ => {}
        }
    }
}

impl ClaudeSink {
    /// The conductor's decision on one `system/api_retry` event (claude-code-output.md §11:
    /// the CLI retries 401 and 429 ten times over minutes by itself): an auth failure or a
    /// rate limit stops the CLI now; anything else is the CLI's to retry. Returns the live
    /// progress words.
    fn judge_retry(&self, ev: &Value) -> String {
        let n = |k: &str| ev.get(k).and_then(Value::as_u64);
        let status = n("error_status").and_then(|s| u16::try_from(s).ok());
        let category = ev.get("error").and_then(Value::as_str).unwrap_or_default();
        let judgement = match (status, category) {
            (Some(401 | 403), _) | (None, "authentication_failed") => Judgement::Auth,
            (Some(429), _) | (None, "rate_limit") => Judgement::RateLimit,
            (Some(500..=599), _) | (None, "overloaded") => Judgement::Overload,
            _ => Judgement::Other,
        };
        let delay = n("retry_delay_ms").map(|ms| ms as f64 / 1000.0);
        let notice = crate::live::RetryNotice {
            attempt: n("attempt")
                .and_then(|a| u32::try_from(a).ok())
                .map(|a| (a, n("max_retries").and_then(|m| u32::try_from(m).ok()))),
            status,
            cause: category.to_string(),
            retry_after: delay.filter(|_| judgement == Judgement::RateLimit),
        };
        let what = match status {
            Some(s) if category.is_empty() => format!("HTTP {s}"),
            Some(s) => format!("HTTP {s} ({category})"),
            None if category.is_empty() => "a connection error".to_string(),
            None => category.to_string(),
        };
        match judgement {
            Judgement::Auth => self.watch.decide(Verdict::Auth {
                status,
                said: format!("the API refused the credentials ({what})"),
            }),
            Judgement::RateLimit => self.watch.decide(Verdict::RateLimit {
                status: status.or(Some(429)),
                retry_after: delay,
                said: format!("the API rate-limited the request ({what})"),
            }),
            Judgement::Overload | Judgement::Other => {}
        }
        if judgement == Judgement::Other {
            // The CLI retries a dropped connection or a server error by itself.
            let counts = notice
                .attempt
                .map(|(a, m)| format!(" {a}/{}", m.unwrap_or(0)))
                .unwrap_or_default();
            return format!(
                "API retry{counts} after {what}, next at {}",
                crate::live::clock_after(delay.unwrap_or(0.0))
            );
        }
        crate::live::retry_progress(judgement, &notice, delay)
    }
}

impl LineSink for ClaudeSink {
    fn line(&mut self, line: &[u8]) {
        self.note_activity(line);
        let done = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .feed(line);
        if done {
            self.result_seen.notify_one();
        }
    }
}

impl Backend for ClaudeCliBackend {
    fn name(&self) -> &str {
        "claude-cli"
    }

    fn execute(&self, req: ExecutionRequest) -> BoxFuture<'_, ExecutionResult> {
        Box::pin(self.run(req))
    }

    fn health_check(&self) -> BoxFuture<'_, HealthStatus> {
        Box::pin(async move {
            crate::cli_backend::binary_health(
                &self.options.executable,
                "claude CLI not found in PATH".into(),
            )
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {

    use super::outcome::text_api_status;
    use super::*;

    #[test]
    fn a_text_mode_api_error_names_its_status() {
        assert_eq!(
            text_api_status(
                "API Error: 529 Overloaded. This is a server-side issue, usually temporary"
            ),
            Some(529)
        );
        assert_eq!(
            text_api_status("API Error: 401 {\"type\":\"error\"}"),
            Some(401)
        );
        assert_eq!(
            text_api_status("I wrote about the API Error: 529 page"),
            None
        );
        assert_eq!(
            text_api_status(
                "API Error: Request rejected (429) · This request would exceed your account's \
                 rate limit. Please try again later."
            ),
            Some(429)
        );
        assert_eq!(text_api_status("done"), None);
    }

    /// The default instrument with no `claude` where the conductor looks: the sheet fails at
    /// once, as a profile instrument's does. Its "claude CLI not found in PATH" matched the
    /// retriable "binary or file not found" text, so the sheet spent its retries and their
    /// backoff (three attempts over 42 s) on a program that cannot appear.
    #[tokio::test]
    async fn a_missing_claude_is_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let b = ClaudeCliBackend::new(ClaudeCliOptions {
            executable: dir.path().join("no-claude").display().to_string(),
            ..Default::default()
        });
        let result = b
            .execute(ExecutionRequest::new(
                "hi".to_string(),
                dir.path(),
                std::time::Duration::from_secs(10),
            ))
            .await;
        let c = crate::classify::classify_for(&result, "claude_cli");
        assert_eq!(c.code, crate::classify::ErrorCode::E505, "{c:?}");
        assert!(!c.retriable, "{c:?}");
        assert!(
            c.message.contains("mozart instruments check claude_cli"),
            "{c:?}"
        );
    }

    #[test]
    fn command_line_follows_the_spec_order() {
        let b = ClaudeCliBackend::new(ClaudeCliOptions {
            output_format: ClaudeOutputFormat::StreamJson,
            allowed_tools: Some(vec!["Read".into(), "Bash(git log:*)".into()]),
            cli_extra_args: vec!["--max-turns".into(), "3".into()],
            ..Default::default()
        });
        assert_eq!(
            b.build_args(Some("opus")),
            [
                "-p",
                "--dangerously-skip-permissions",
                "--output-format",
                "stream-json",
                "--verbose",
                "--strict-mcp-config",
                "--mcp-config",
                EMPTY_MCP_CONFIG,
                "--model",
                "opus",
                "--allowedTools",
                "Read,Bash(git log:*)",
                "--max-turns",
                "3",
            ]
        );
        let plain = ClaudeCliBackend::new(ClaudeCliOptions {
            skip_permissions: false,
            disable_mcp: false,
            output_format: ClaudeOutputFormat::Text,
            ..Default::default()
        });
        assert_eq!(plain.build_args(None), ["-p", "--output-format", "text"]);
    }

    #[test]
    fn stream_parser_tracks_limits_and_result() {
        let mut s = ClaudeStream::default();
        let lines = [
            "[SandboxDebug] noise",
            r#"{"type":"system","subtype":"init","session_id":"s1","model":"claude-sonnet-4-5"}"#,
            r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1779202200}}"#,
            r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1779300000}}"#,
            r#"{"type":"assistant","message":{"model":"<synthetic>","content":[]},"error":"rate_limit"}"#,
        ];
        for l in lines {
            assert!(!s.feed(l.as_bytes()));
        }
        assert!(s.feed(br#"{"type":"result","is_error":true,"api_error_status":429}"#));
        assert!(s.rejected);
        assert_eq!(s.rejected_reset, Some(1779300000.0));
        assert_eq!(s.session_id.as_deref(), Some("s1"));
        assert_eq!(s.assistant_error.as_deref(), Some("rate_limit"));

        let mut warn = ClaudeStream::default();
        warn.feed(
            br#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1}}"#,
        );
        warn.feed(br#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","utilization":0.92}}"#);
        assert!(!warn.rejected && warn.rejected_reset.is_none());
    }
}
