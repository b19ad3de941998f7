//! OpenAI-compatible chat completions (`schema_family: openai`, endpoint
//! `…/chat/completions`) for user `kind: http` profiles: vLLM, LM Studio, llama.cpp server,
//! gateways. Upstream could not execute any HTTP profile (instruments.md §4.7.5); this is
//! the profile schema's default family, so a profile that only sets `base_url` works.
//!
//! `instrument_config` / [`ExecutionRequest::options`] keys read per attempt: `model`,
//! `max_tokens` (≥ 1), `temperature` (0..=2), `system_prompt`, `base_url`. Other keys are
//! logged and ignored. [`ExecutionRequest::model`] beats the `model` key.

use std::sync::Arc;

use reqwest::{Client, RequestBuilder, Url};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::options::{lookup_env, price_usd, OptionReader};
use super::{answered_model, join_url, Call, ClientCache, Clock, HttpApi};
use crate::profile::{InstrumentProfile, ModelCapacity};
use crate::request::{Backend, ExecutionRequest};
use crate::types::{BoxFuture, ExecutionResult, HealthStatus};

/// How to call an OpenAI-compatible server (built from a profile's `http:` block).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiChatOptions {
    /// The backend's `name()`.
    pub display_name: String,
    /// Scheme, host and port (the `base_url` option overrides it).
    pub base_url: String,
    /// Path of the chat completions endpoint.
    pub endpoint: String,
    /// Variable holding a bearer token; `None` sends no `Authorization` header.
    pub api_key_env: Option<String>,
    /// Model when the attempt names none; `None` makes a model option mandatory.
    pub model: Option<String>,
    /// `max_tokens`, when set.
    pub max_tokens: Option<u64>,
    /// `temperature`, when set.
    pub temperature: Option<f64>,
    /// Optional system message.
    pub system_prompt: Option<String>,
    /// Pricing per model (the profile's `models`).
    pub models: Vec<ModelCapacity>,
}

impl Default for OpenAiChatOptions {
    fn default() -> Self {
        OpenAiChatOptions {
            display_name: "OpenAI-compatible API".into(),
            base_url: "http://localhost:8000".into(),
            endpoint: "/v1/chat/completions".into(),
            api_key_env: None,
            model: None,
            max_tokens: None,
            temperature: None,
            system_prompt: None,
            models: Vec::new(),
        }
    }
}

impl OpenAiChatOptions {
    /// Defaults overlaid with a profile's `http:` block, `default_model` and `models`.
    pub fn from_profile(profile: &InstrumentProfile) -> Self {
        let mut o = OpenAiChatOptions {
            display_name: profile.display_name.clone(),
            model: profile.default_model.clone(),
            models: profile.models.clone(),
            ..Default::default()
        };
        if let Some(http) = &profile.http {
            o.base_url = http.base_url.clone();
            o.endpoint = http.endpoint.clone();
            o.api_key_env = http.auth_env_var.clone();
        }
        o
    }
}

pub(crate) struct Params {
    max_tokens: Option<u64>,
    temperature: Option<f64>,
    system_prompt: Option<String>,
}

/// Calls `POST {base}/v1/chat/completions` with the prompt as one user message.
#[derive(Debug, Clone)]
pub struct OpenAiChatBackend {
    options: Arc<OpenAiChatOptions>,
    clients: ClientCache,
}

impl OpenAiChatBackend {
    /// A backend with these options.
    pub fn new(options: OpenAiChatOptions) -> Self {
        OpenAiChatBackend {
            options: Arc::new(options),
            clients: ClientCache::default(),
        }
    }

    /// The options.
    pub fn options(&self) -> &OpenAiChatOptions {
        &self.options
    }
}

impl HttpApi for OpenAiChatBackend {
    type Params = Params;

    fn api_name(&self) -> &str {
        &self.options.display_name
    }

    fn fallback_model(&self, req: &ExecutionRequest) -> String {
        req.model
            .clone()
            .or_else(|| self.options.model.clone())
            .unwrap_or_default()
    }

    fn call_for(&self, req: &ExecutionRequest) -> Result<Call<Params>, String> {
        let o = &self.options;
        let r = OptionReader::new(
            &o.display_name,
            &req.options,
            &[
                "model",
                "max_tokens",
                "temperature",
                "system_prompt",
                "base_url",
            ],
            &req.job_id,
            req.sheet_num,
        );
        let model = match req.model.clone() {
            Some(m) => Some(m),
            None => r.string("model")?.or_else(|| o.model.clone()),
        };
        let Some(model) = model else {
            return Err(format!(
                "instrument '{}' names no model: set default_model in its profile or \
                 instrument_config.model in the score",
                o.display_name
            ));
        };
        Ok(Call {
            model,
            params: Params {
                max_tokens: r.count("max_tokens", 1)?.or(o.max_tokens),
                temperature: r.number("temperature", 0.0, 2.0)?.or(o.temperature),
                system_prompt: r
                    .string("system_prompt")?
                    .or_else(|| o.system_prompt.clone()),
            },
            // Read after the other options, so a bad value is reported in the same order.
            base_url: r.string("base_url")?.unwrap_or_else(|| o.base_url.clone()),
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
        _call: &Call<Params>,
    ) -> Result<Option<String>, String> {
        match &self.options.api_key_env {
            None => Ok(None),
            Some(var) => match lookup_env(var, &req.env) {
                Some(key) => Ok(Some(key)),
                None => Err(format!(
                    "Authentication failed: API key not found in environment variable {var}"
                )),
            },
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
        let mut messages = Vec::new();
        if let Some(system) = &call.params.system_prompt {
            messages.push(json!({"role": "system", "content": system}));
        }
        messages.push(json!({"role": "user", "content": req.prompt}));
        let mut body = json!({"model": call.model, "messages": messages});
        if let Some(n) = call.params.max_tokens {
            body["max_tokens"] = json!(n);
        }
        if let Some(t) = call.params.temperature {
            body["temperature"] = json!(t);
        }
        let mut builder = client.post(url).json(&body);
        if let Some(key) = key {
            builder = builder.bearer_auth(key);
        }
        builder
    }

    fn auth_hint(&self, _call: &Call<Params>) -> String {
        self.options
            .api_key_env
            .as_ref()
            .map(|v| format!(" (key from {v})"))
            .unwrap_or_default()
    }

    fn answer(
        &self,
        clock: &Clock,
        call: &Call<Params>,
        parsed: &Value,
    ) -> Result<ExecutionResult, String> {
        let Some(text) = parsed
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
        else {
            return Err("no 'choices[0].message.content' text".into());
        };
        let text = text.to_string();
        let input = parsed
            .pointer("/usage/prompt_tokens")
            .and_then(crate::types::token_count);
        let output = parsed
            .pointer("/usage/completion_tokens")
            .and_then(crate::types::token_count);
        let model = answered_model(parsed, &call.model);
        let cost = price_usd(
            &self.options.models,
            self.options.model.as_deref(),
            &model,
            input.unwrap_or(0),
            output.unwrap_or(0),
        );
        let mut r = clock.answered(&model, text, input, output, cost);
        r.session_id = parsed.get("id").and_then(Value::as_str).map(str::to_string);
        Ok(r)
    }
}

impl Backend for OpenAiChatBackend {
    fn name(&self) -> &str {
        &self.options.display_name
    }

    fn execute(&self, req: ExecutionRequest) -> BoxFuture<'_, ExecutionResult> {
        Box::pin(super::execute(self, req))
    }

    /// Ready when the key variable (if any) is set and the URL is valid; spends nothing.
    fn health_check(&self) -> BoxFuture<'_, HealthStatus> {
        Box::pin(async move {
            let o = &self.options;
            let detail = match (join_url(&o.base_url, &o.endpoint), o.api_key_env.as_deref()) {
                (Err(e), _) => Err(e),
                (Ok(_), Some(var)) if lookup_env(var, &[]).is_none() => {
                    Err(format!("API key not found in environment variable {var}"))
                }
                (Ok(url), _) => Ok(crate::redact::redact(&format!("will call {url}"))),
            };
            HealthStatus {
                ready: detail.is_ok(),
                binary_path: None,
                detail: detail.unwrap_or_else(|e| e),
            }
        })
    }
}
