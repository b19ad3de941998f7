//! A local Ollama server as an instrument (instruments.md §3.3), non-streaming and without
//! MCP tools.
//!
//! `instrument_config` / [`ExecutionRequest::options`] keys read per attempt: `model`,
//! `base_url`, `num_ctx` (≥ 4096), `keep_alive`, `system_prompt`. Other keys are logged and
//! ignored. [`ExecutionRequest::model`] beats the `model` key.
//!
//! Not ported: the agentic MCP tool loop (`dynamic_tools`, `max_tool_iterations`,
//! `compression_level`): Mozart has no MCP proxy, so every call is a plain completion —
//! upstream's own behaviour when tool loading fails.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Client, RequestBuilder, Url};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::options::{price_usd, OptionReader};
use super::{answered_model, join_url, send, Call, ClientCache, Clock, HttpApi, Reply};
use crate::profile::{InstrumentProfile, ModelCapacity};
use crate::request::{Backend, ExecutionRequest};
use crate::types::{BoxFuture, ExecutionResult, HealthStatus, Progress};

/// Environment variable that redirects every Ollama call (tests, remote servers).
pub const BASE_URL_ENV: &str = "MOZART_OLLAMA_BASE_URL";

/// Timeout of the health check's `GET /api/tags` (upstream `health_check_timeout`).
pub const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

const API: &str = "Ollama";

/// How to call Ollama; the conductor maps a score's `backend.ollama` section here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OllamaOptions {
    /// The backend's `name()`.
    pub display_name: String,
    /// Server URL; [`BASE_URL_ENV`] and the `base_url` option override it.
    pub base_url: String,
    /// `/api/chat` (messages) or `/api/generate` (single prompt).
    pub endpoint: String,
    /// Model when the attempt names none.
    pub model: String,
    /// Context window requested from the server (`options.num_ctx`).
    pub num_ctx: u64,
    /// How long the server keeps the model loaded after the call.
    pub keep_alive: String,
    /// Optional system message.
    pub system_prompt: Option<String>,
    /// Pricing per model (the profile's `models`; local models are usually free).
    pub models: Vec<ModelCapacity>,
}

impl Default for OllamaOptions {
    fn default() -> Self {
        OllamaOptions {
            display_name: "Ollama".into(),
            base_url: "http://localhost:11434".into(),
            endpoint: "/api/chat".into(),
            model: "llama3.1:8b".into(),
            num_ctx: 32768,
            keep_alive: "5m".into(),
            system_prompt: None,
            models: Vec::new(),
        }
    }
}

impl OllamaOptions {
    /// Defaults overlaid with a profile's `http:` block, `default_model` and `models`.
    pub fn from_profile(profile: &InstrumentProfile) -> Self {
        let mut o = OllamaOptions {
            display_name: profile.display_name.clone(),
            models: profile.models.clone(),
            ..Default::default()
        };
        if let Some(model) = &profile.default_model {
            o.model = model.clone();
        }
        if let Some(http) = &profile.http {
            o.base_url = http.base_url.clone();
            o.endpoint = http.endpoint.clone();
        }
        o
    }

    fn generate_api(&self) -> bool {
        self.endpoint
            .trim_end_matches('/')
            .ends_with("/api/generate")
    }
}

pub(crate) struct Params {
    num_ctx: u64,
    keep_alive: String,
    system_prompt: Option<String>,
}

/// Calls `POST {base}/api/chat` (or `/api/generate`) with `stream: false`.
#[derive(Debug, Clone)]
pub struct OllamaBackend {
    options: Arc<OllamaOptions>,
    clients: ClientCache,
}

impl OllamaBackend {
    /// A backend with these options.
    pub fn new(options: OllamaOptions) -> Self {
        OllamaBackend {
            options: Arc::new(options),
            clients: ClientCache::default(),
        }
    }

    /// The options.
    pub fn options(&self) -> &OllamaOptions {
        &self.options
    }

    fn base_url(&self, option: Option<String>) -> String {
        option
            .or_else(|| {
                std::env::var(BASE_URL_ENV)
                    .ok()
                    .filter(|v| !v.trim().is_empty())
            })
            .unwrap_or_else(|| self.options.base_url.clone())
    }

    fn payload(&self, call: &Call<Params>, prompt: &str) -> Value {
        let mut body = json!({
            "model": call.model,
            "stream": false,
            "options": {"num_ctx": call.params.num_ctx},
            "keep_alive": call.params.keep_alive,
        });
        if self.options.generate_api() {
            body["prompt"] = Value::String(prompt.to_string());
            if let Some(system) = &call.params.system_prompt {
                body["system"] = Value::String(system.clone());
            }
        } else {
            let mut messages = Vec::new();
            if let Some(system) = &call.params.system_prompt {
                messages.push(json!({"role": "system", "content": system}));
            }
            messages.push(json!({"role": "user", "content": prompt}));
            body["messages"] = Value::Array(messages);
        }
        body
    }

    async fn check(&self) -> HealthStatus {
        let not_ready = |detail: String| HealthStatus {
            ready: false,
            binary_path: None,
            detail,
        };
        let base = self.base_url(None);
        let url = match join_url(&base, "/api/tags") {
            Ok(u) => u,
            Err(e) => return not_ready(e),
        };
        let client = match self.clients.client_for(&url) {
            Ok(c) => c,
            Err(e) => return not_ready(e),
        };
        let progress = Progress::new();
        let body = match send(client.get(url), HEALTH_CHECK_TIMEOUT, &progress).await {
            Reply::Response { status, body, .. } if status.is_success() => body,
            Reply::Response { status, .. } => {
                return not_ready(format!("Ollama at {base} answered HTTP {status}"))
            }
            Reply::TimedOut => return not_ready(format!("Ollama at {base} did not answer")),
            Reply::Connection(e) => return not_ready(format!("Ollama at {base}: {e}")),
        };
        let wanted = self.options.model.split(':').next().unwrap_or_default();
        let names: Vec<String> = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v.get("models").and_then(Value::as_array).cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|m| m.get("name").and_then(Value::as_str).map(str::to_string))
            .collect();
        if names.iter().any(|n| n.starts_with(wanted)) {
            HealthStatus {
                ready: true,
                binary_path: None,
                detail: format!("Ollama at {base} has {}", self.options.model),
            }
        } else {
            not_ready(format!(
                "Ollama at {base} has no model '{}' (run `ollama pull {}`)",
                self.options.model, self.options.model
            ))
        }
    }
}

impl HttpApi for OllamaBackend {
    type Params = Params;

    fn api_name(&self) -> &str {
        API
    }

    fn fallback_model(&self, req: &ExecutionRequest) -> String {
        req.model
            .clone()
            .unwrap_or_else(|| self.options.model.clone())
    }

    fn call_for(&self, req: &ExecutionRequest) -> Result<Call<Params>, String> {
        let o = &self.options;
        let r = OptionReader::new(
            "ollama",
            &req.options,
            &[
                "model",
                "base_url",
                "num_ctx",
                "keep_alive",
                "system_prompt",
            ],
            &req.job_id,
            req.sheet_num,
        );
        let model = match req.model.clone() {
            Some(m) => m,
            None => r.string("model")?.unwrap_or_else(|| o.model.clone()),
        };
        Ok(Call {
            model,
            base_url: self.base_url(r.string("base_url")?),
            params: Params {
                num_ctx: r.count("num_ctx", 4096)?.unwrap_or(o.num_ctx),
                keep_alive: r
                    .string("keep_alive")?
                    .unwrap_or_else(|| o.keep_alive.clone()),
                system_prompt: r
                    .string("system_prompt")?
                    .or_else(|| o.system_prompt.clone()),
            },
        })
    }

    fn endpoint(&self) -> &str {
        &self.options.endpoint
    }

    fn clients(&self) -> &ClientCache {
        &self.clients
    }

    fn api_key(
        &self,
        _req: &ExecutionRequest,
        _call: &Call<Params>,
    ) -> Result<Option<String>, String> {
        Ok(None)
    }

    fn request(
        &self,
        client: &Client,
        url: Url,
        _key: Option<String>,
        call: &Call<Params>,
        req: &ExecutionRequest,
    ) -> RequestBuilder {
        tracing::debug!(model = %call.model, %url, prompt_len = req.prompt.len(),
            job = %req.job_id, sheet = req.sheet_num, "ollama request");
        client.post(url).json(&self.payload(call, &req.prompt))
    }

    fn auth_hint(&self, _call: &Call<Params>) -> String {
        String::new()
    }

    fn answer(
        &self,
        clock: &Clock,
        call: &Call<Params>,
        parsed: &Value,
    ) -> Result<ExecutionResult, String> {
        let pointer = if self.options.generate_api() {
            "/response"
        } else {
            "/message/content"
        };
        let Some(text) = parsed.pointer(pointer).and_then(Value::as_str) else {
            return Err(format!("no '{pointer}' text"));
        };
        let text = text.to_string();
        let input = parsed
            .get("prompt_eval_count")
            .and_then(crate::types::token_count)
            .unwrap_or(0);
        // Upstream estimates output tokens as chars / 4 when the server reports none (§3.3).
        let output = match parsed.get("eval_count").and_then(crate::types::token_count) {
            Some(n) if n > 0 => n,
            _ => text.chars().count() as u64 / 4,
        };
        let model = answered_model(parsed, &call.model);
        let cost = price_usd(
            &self.options.models,
            Some(&self.options.model),
            &model,
            input,
            output,
        );
        Ok(clock.answered(&model, text, Some(input), Some(output), cost))
    }
}

impl Backend for OllamaBackend {
    fn name(&self) -> &str {
        &self.options.display_name
    }

    fn execute(&self, req: ExecutionRequest) -> BoxFuture<'_, ExecutionResult> {
        Box::pin(super::execute(self, req))
    }

    /// `GET /api/tags`: ready when the server lists the model (spends no tokens).
    fn health_check(&self) -> BoxFuture<'_, HealthStatus> {
        Box::pin(self.check())
    }
}
