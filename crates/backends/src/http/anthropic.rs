//! The Anthropic Messages API as an instrument (instruments.md §3.2).
//!
//! `instrument_config` / [`ExecutionRequest::options`] keys read per attempt: `model`,
//! `max_tokens` (≥ 1), `temperature` (0..=1), `system_prompt`, `api_key_env`, `base_url`.
//! Other keys are logged and ignored. [`ExecutionRequest::model`] beats the `model` key.

use std::sync::Arc;

use reqwest::{Client, RequestBuilder, Url};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::options::{lookup_env, price_usd, OptionReader};
use super::{answered_model, Call, ClientCache, Clock, HttpApi};
use crate::profile::{InstrumentProfile, ModelCapacity};
use crate::request::{Backend, ExecutionRequest};
use crate::types::{BoxFuture, ExecutionResult, HealthStatus};

/// Environment variable that redirects every Anthropic call (tests, gateways).
pub const BASE_URL_ENV: &str = "MOZART_ANTHROPIC_BASE_URL";

/// The `anthropic-version` header Mozart speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

const API: &str = "Anthropic API";

/// How to call the Messages API; the conductor maps a score's `backend:` section
/// (`api_key_env`, `max_tokens`, `temperature`, `model`) onto these fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnthropicApiOptions {
    /// The backend's `name()`.
    pub display_name: String,
    /// Scheme, host and port; [`BASE_URL_ENV`] and the `base_url` option override it.
    pub base_url: String,
    /// Path of the Messages endpoint.
    pub endpoint: String,
    /// Environment variable holding the API key.
    pub api_key_env: String,
    /// Model when the attempt names none.
    pub model: String,
    /// `max_tokens` of the request.
    pub max_tokens: u64,
    /// Sampling temperature (0..=1).
    pub temperature: f64,
    /// Optional `system` prompt.
    pub system_prompt: Option<String>,
    /// `anthropic-version` header value.
    pub anthropic_version: String,
    /// Pricing per model (the profile's `models`).
    pub models: Vec<ModelCapacity>,
}

impl Default for AnthropicApiOptions {
    fn default() -> Self {
        AnthropicApiOptions {
            display_name: "Anthropic API".into(),
            base_url: "https://api.anthropic.com".into(),
            endpoint: "/v1/messages".into(),
            api_key_env: "ANTHROPIC_API_KEY".into(),
            model: "claude-sonnet-4-5-20250929".into(),
            max_tokens: 16384,
            temperature: 0.7,
            system_prompt: None,
            anthropic_version: ANTHROPIC_VERSION.into(),
            models: Vec::new(),
        }
    }
}

impl AnthropicApiOptions {
    /// Defaults overlaid with a profile's `http:` block, `default_model` and `models`.
    pub fn from_profile(profile: &InstrumentProfile) -> Self {
        let mut o = AnthropicApiOptions {
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
            if let Some(var) = &http.auth_env_var {
                o.api_key_env = var.clone();
            }
        }
        o
    }
}

/// One attempt's settings after applying `instrument_config`.
pub(crate) struct Params {
    max_tokens: u64,
    temperature: f64,
    system_prompt: Option<String>,
    api_key_env: String,
}

/// Calls `POST {base}/v1/messages` with the prompt as one user message.
#[derive(Debug, Clone)]
pub struct AnthropicApiBackend {
    options: Arc<AnthropicApiOptions>,
    clients: ClientCache,
}

impl AnthropicApiBackend {
    /// A backend with these options.
    pub fn new(options: AnthropicApiOptions) -> Self {
        AnthropicApiBackend {
            options: Arc::new(options),
            clients: ClientCache::default(),
        }
    }

    /// The options.
    pub fn options(&self) -> &AnthropicApiOptions {
        &self.options
    }
}

impl HttpApi for AnthropicApiBackend {
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
            "anthropic_api",
            &req.options,
            &[
                "model",
                "max_tokens",
                "temperature",
                "system_prompt",
                "api_key_env",
                "base_url",
            ],
            &req.job_id,
            req.sheet_num,
        );
        let model = match req.model.clone() {
            Some(m) => m,
            None => r.string("model")?.unwrap_or_else(|| o.model.clone()),
        };
        let base_url = match r.string("base_url")? {
            Some(url) => url,
            None => std::env::var(BASE_URL_ENV)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .unwrap_or_else(|| o.base_url.clone()),
        };
        Ok(Call {
            model,
            base_url,
            params: Params {
                max_tokens: r.count("max_tokens", 1)?.unwrap_or(o.max_tokens),
                temperature: r.number("temperature", 0.0, 1.0)?.unwrap_or(o.temperature),
                system_prompt: r
                    .string("system_prompt")?
                    .or_else(|| o.system_prompt.clone()),
                api_key_env: r
                    .string("api_key_env")?
                    .unwrap_or_else(|| o.api_key_env.clone()),
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
        req: &ExecutionRequest,
        call: &Call<Params>,
    ) -> Result<Option<String>, String> {
        match lookup_env(&call.params.api_key_env, &req.env) {
            Some(key) => Ok(Some(key)),
            None => Err(format!(
                "Authentication failed: API key not found in environment variable {} \
                 (set it, or name another variable with backend.api_key_env)",
                call.params.api_key_env
            )),
        }
    }

    fn request(
        &self,
        client: &Client,
        url: Url,
        key: Option<String>,
        call: &Call<Params>,
        req: &ExecutionRequest,
    ) -> RequestBuilder {
        let mut body = json!({
            "model": call.model,
            "max_tokens": call.params.max_tokens,
            "temperature": call.params.temperature,
            "messages": [{"role": "user", "content": req.prompt}],
        });
        if let Some(system) = &call.params.system_prompt {
            body["system"] = Value::String(system.clone());
        }
        tracing::debug!(model = %call.model, max_tokens = call.params.max_tokens, prompt_len = req.prompt.len(),
            job = %req.job_id, sheet = req.sheet_num, "anthropic api request");
        let mut builder = client.post(url);
        if let Some(key) = key {
            builder = builder.header("x-api-key", key);
        }
        builder
            .header("anthropic-version", &self.options.anthropic_version)
            .json(&body)
    }

    fn auth_hint(&self, call: &Call<Params>) -> String {
        format!(" (key from {})", call.params.api_key_env)
    }

    fn answer(
        &self,
        clock: &Clock,
        call: &Call<Params>,
        parsed: &Value,
    ) -> Result<ExecutionResult, String> {
        let Some(blocks) = parsed.get("content").and_then(Value::as_array) else {
            return Err("no 'content' list".into());
        };
        let text: String = blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        let input = parsed
            .pointer("/usage/input_tokens")
            .and_then(crate::types::token_count);
        let output = parsed
            .pointer("/usage/output_tokens")
            .and_then(crate::types::token_count);
        let model = answered_model(parsed, &call.model);
        if parsed.get("stop_reason").and_then(Value::as_str) == Some("max_tokens") {
            tracing::warn!(%model, max_tokens = call.params.max_tokens, "answer was cut at max_tokens");
        }
        let cost = price_usd(
            &self.options.models,
            Some(&self.options.model),
            &model,
            input.unwrap_or(0),
            output.unwrap_or(0),
        );
        let mut r = clock.answered(&model, text, input, output, cost);
        r.session_id = parsed.get("id").and_then(Value::as_str).map(str::to_string);
        Ok(r)
    }
}

impl Backend for AnthropicApiBackend {
    fn name(&self) -> &str {
        &self.options.display_name
    }

    fn execute(&self, req: ExecutionRequest) -> BoxFuture<'_, ExecutionResult> {
        Box::pin(super::execute(self, req))
    }

    /// Ready when the key variable is set; never calls the API (no quota spent).
    fn health_check(&self) -> BoxFuture<'_, HealthStatus> {
        Box::pin(async move {
            let var = &self.options.api_key_env;
            let ready = lookup_env(var, &[]).is_some();
            HealthStatus {
                ready,
                binary_path: None,
                detail: if ready {
                    format!("API key found in {var}")
                } else {
                    format!("API key not found in environment variable {var}")
                },
            }
        })
    }
}
