//! Delivery to each channel, with a timeout and bounded retries.

use std::sync::OnceLock;
use std::time::Duration;

use mozart_config::model::{NotificationConfig, NotificationEvent, NotificationType};
use serde_json::{json, Map, Value};

use crate::message::{format_duration, title, Context};
use crate::{event_name, redact_url, Settings};

/// One HTTP client for every delivery (connection pooling); timeouts are per request.
fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .user_agent(concat!("mozart/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default()
    })
}

fn text(config: &NotificationConfig, key: &str) -> Option<String> {
    config
        .config
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// `url`, else the environment variable named by `url_env` (`default_env` when unset);
/// `Err` says what is missing, naming the key or the variable.
fn url_of(
    config: &NotificationConfig,
    key: &str,
    env_key: &str,
    default_env: Option<&str>,
) -> Result<String, String> {
    if let Some(url) = text(config, key) {
        return Ok(url);
    }
    let named = text(config, env_key);
    let Some(var) = named.clone().or(default_env.map(str::to_string)) else {
        return Err(format!(
            "no '{key}' or '{env_key}' in the notification config"
        ));
    };
    match std::env::var(&var) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(format!(
            "the environment variable {var} ({}) is not set in the conductor's environment; set it where 'mozart start' runs and restart the conductor, or give '{key}'",
            if named.is_some() {
                format!("named by '{env_key}'")
            } else {
                format!("the default of '{env_key}'")
            }
        )),
    }
}

/// Deliver `ctx` to one channel; `true` when it arrived. Failures are logged (with the
/// job's ID, so `mozart logs JOB` shows them), never raised.
pub(crate) async fn deliver(config: &NotificationConfig, ctx: &Context) -> bool {
    let event = event_name(ctx.event);
    let ok = match config.kind {
        NotificationType::Webhook => match url_of(config, "url", "url_env", None) {
            Ok(url) => {
                post(
                    config,
                    ctx,
                    &url,
                    &webhook_payload(config, ctx),
                    headers(config, ctx),
                    2,
                )
                .await
            }
            Err(why) => not_sent(ctx, "webhook", &why),
        },
        NotificationType::Slack => {
            match url_of(
                config,
                "webhook_url",
                "webhook_url_env",
                Some("SLACK_WEBHOOK_URL"),
            ) {
                // Slack answers 200 and nothing else on success.
                Ok(url) => {
                    post(
                        config,
                        ctx,
                        &url,
                        &slack_payload(config, ctx),
                        Vec::new(),
                        200,
                    )
                    .await
                }
                Err(why) => not_sent(ctx, "slack", &why),
            }
        }
        NotificationType::Desktop => desktop(config, ctx).await,
        NotificationType::Email => {
            tracing::warn!(event, job_id = %ctx.job_id, "notification.email_unsupported");
            false
        }
    };
    if ok {
        tracing::debug!(event, job_id = %ctx.job_id, kind = ?config.kind, "notification.sent");
    }
    ok
}

/// The warning of a notification that was not sent: which job, event and channel, and why.
fn not_sent(ctx: &Context, kind: &str, why: &str) -> bool {
    let event = event_name(ctx.event);
    tracing::warn!(
        event = "notification.failed",
        job_id = %ctx.job_id,
        kind,
        notification_event = event,
        "{kind} notification of {event} not sent: {why}"
    );
    false
}

/// Header values with `${VAR}` expanded from the environment (missing → empty, with a
/// warning naming the variable).
fn headers(config: &NotificationConfig, ctx: &Context) -> Vec<(String, String)> {
    static VAR: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let var = VAR.get_or_init(|| regex::Regex::new(r"\$\{(\w+)\}").ok());
    let Some(Value::Object(map)) = config.config.get("headers") else {
        return Vec::new();
    };
    map.iter()
        .filter_map(|(k, v)| {
            let raw = match v {
                Value::String(s) => s.clone(),
                Value::Null => return None,
                other => other.to_string(),
            };
            let value = match var {
                Some(re) => re
                    .replace_all(&raw, |c: &regex::Captures<'_>| {
                        std::env::var(&c[1]).unwrap_or_else(|_| {
                            tracing::warn!(
                                event = "notification.header_variable_unset",
                                job_id = %ctx.job_id,
                                header = %k,
                                "webhook header {k} uses ${{{}}}, which is not set in the conductor's environment: it is sent empty",
                                &c[1]
                            );
                            String::new()
                        })
                    })
                    .into_owned(),
                None => raw,
            };
            Some((k.clone(), value))
        })
        .collect()
}

/// POST `body` as JSON: success on 2xx (or exactly `want == 200`), retried on 5xx,
/// timeouts and transport errors, failed at once on other answers.
async fn post(
    config: &NotificationConfig,
    ctx: &Context,
    url: &str,
    body: &Value,
    headers: Vec<(String, String)>,
    want: u16,
) -> bool {
    let settings = Settings::of(config);
    let shown = redact_url(url);
    let mut last = String::new();
    for attempt in 0..=settings.max_retries {
        if attempt > 0 {
            tokio::time::sleep(settings.retry_delay).await;
        }
        let mut req = client().post(url).timeout(settings.timeout).json(body);
        for (k, v) in &headers {
            req = req.header(k.as_str(), v.as_str());
        }
        match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let good = if want == 200 {
                    status == 200
                } else {
                    (200..300).contains(&status)
                };
                if good {
                    return true;
                }
                let text: String = resp
                    .text()
                    .await
                    .unwrap_or_default()
                    .chars()
                    .take(100)
                    .collect();
                last = format!("HTTP {status}: {text}");
                if status < 500 {
                    break;
                }
            }
            Err(e) if e.is_timeout() => last = "Request timed out".into(),
            // The error text can contain the URL: keep only its kind.
            Err(e) if e.is_connect() => last = "connection failed".into(),
            Err(_) => last = "request failed".into(),
        }
        // Only a try that another follows is a retry; the last one's failure is said below.
        if attempt < settings.max_retries {
            tracing::info!(event = "notification.retry", job_id = %ctx.job_id, url = %shown, attempt = attempt + 1, error = %last, "notification to {shown} failed ({last}); trying again");
        }
    }
    tracing::warn!(
        event = "notification.failed",
        job_id = %ctx.job_id,
        url = %shown,
        kind = ?config.kind,
        error = %last,
        "notification delivery failed: {} of {} to {shown}: {last}",
        kind_name(config.kind),
        event_name(ctx.event)
    );
    false
}

fn kind_name(kind: NotificationType) -> &'static str {
    match kind {
        NotificationType::Webhook => "webhook",
        NotificationType::Slack => "slack",
        NotificationType::Desktop => "desktop",
        NotificationType::Email => "email",
    }
}

/// Upstream's webhook body: `{event_type, context, [metadata]}`.
pub fn webhook_payload(config: &NotificationConfig, ctx: &Context) -> Value {
    let mut body = json!({
        "event_type": event_name(ctx.event),
        "context": ctx.to_json(),
    });
    let include = config
        .config
        .get("include_metadata")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    if include {
        body["metadata"] = json!({"source": "mozart-ai-compose", "version": "1.0.0"});
    }
    body
}

/// Upstream's Slack attachment message, null keys removed.
pub fn slack_payload(config: &NotificationConfig, ctx: &Context) -> Value {
    let (color, emoji) = match ctx.event {
        NotificationEvent::JobComplete => ("#36a64f", ":white_check_mark:"),
        NotificationEvent::JobFailed => ("#d00000", ":x:"),
        NotificationEvent::SheetFailed => ("#ff9800", ":warning:"),
        NotificationEvent::JobPaused => ("#ffcc00", ":double_vertical_bar:"),
        _ => ("#439fe0", ":musical_score:"),
    };
    let t = title(ctx);
    let msg = ctx.message();
    let mut fields = Vec::new();
    if let (Some(n), Some(total)) = (ctx.sheet_num, ctx.total_sheets) {
        fields.push(
            json!({"title": "Progress", "value": format!("Sheet {n}/{total}"), "short": true}),
        );
    }
    if let (Some(s), Some(f)) = (ctx.success_count, ctx.failure_count) {
        fields.push(
            json!({"title": "Results", "value": format!("{s} passed, {f} failed"), "short": true}),
        );
    }
    if let Some(d) = ctx.duration_seconds {
        fields.push(json!({"title": "Duration", "value": format_duration(d), "short": true}));
    }
    if let Some(e) = &ctx.error_message {
        let short: String = e.chars().take(200).collect();
        fields.push(
            json!({"title": ctx.reason_label(), "value": format!("```{short}```"), "short": false}),
        );
    }
    let mut attachment = Map::new();
    attachment.insert("fallback".into(), json!(format!("{t}: {msg}")));
    attachment.insert("color".into(), json!(color));
    attachment.insert("title".into(), json!(format!("{emoji} {t}")));
    if fields.is_empty() {
        attachment.insert("text".into(), json!(msg));
    } else {
        attachment.insert("fields".into(), Value::Array(fields));
    }
    attachment.insert(
        "footer".into(),
        json!(format!("Job: {} ({})", ctx.job_name, ctx.job_id)),
    );
    attachment.insert("ts".into(), json!(ctx.timestamp as i64));
    let mut body = Map::new();
    body.insert(
        "username".into(),
        json!(text(config, "username").unwrap_or_else(|| "Mozart AI Compose".into())),
    );
    body.insert(
        "icon_emoji".into(),
        json!(text(config, "icon_emoji").unwrap_or_else(|| ":musical_score:".into())),
    );
    if let Some(channel) = text(config, "channel") {
        body.insert("channel".into(), json!(channel));
    }
    body.insert("attachments".into(), json!([Value::Object(attachment)]));
    Value::Object(body)
}

/// A freedesktop notification (`org.freedesktop.Notifications.Notify`) on the session bus,
/// sent with `gdbus` (GLib's D-Bus client). No session bus or no `gdbus` → a warning.
async fn desktop(config: &NotificationConfig, ctx: &Context) -> bool {
    let app = text(config, "app_name").unwrap_or_else(|| "Mozart AI Compose".into());
    let timeout_ms = config
        .config
        .get("timeout")
        .and_then(Value::as_f64)
        .map_or(10_000, |s| (s * 1000.0) as i64);
    if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_none()
        && std::env::var_os("XDG_RUNTIME_DIR")
            .map(|d| std::path::Path::new(&d).join("bus"))
            .is_none_or(|p| !p.exists())
    {
        tracing::warn!(
            event = "notification.failed",
            job_id = %ctx.job_id,
            "desktop notification of {} skipped: no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS unset in the conductor's environment)",
            event_name(ctx.event)
        );
        return false;
    }
    let quote = |s: &str| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"));
    let mut cmd = tokio::process::Command::new("gdbus");
    cmd.args([
        "call",
        "--session",
        "--dest",
        "org.freedesktop.Notifications",
        "--object-path",
        "/org/freedesktop/Notifications",
        "--method",
        "org.freedesktop.Notifications.Notify",
    ])
    .arg(quote(&app))
    .arg("0")
    .arg("''")
    .arg(quote(&title(ctx)))
    .arg(quote(&ctx.message()))
    .arg("[]")
    .arg("{}")
    .arg(timeout_ms.to_string())
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .kill_on_drop(true);
    let run = tokio::time::timeout(Duration::from_secs(10), cmd.output()).await;
    match run {
        Ok(Ok(out)) if out.status.success() => true,
        Ok(Ok(out)) => {
            let err = String::from_utf8_lossy(&out.stderr);
            tracing::warn!(event = "notification.failed", job_id = %ctx.job_id, error = %err.trim(), "desktop notification failed: {}", err.trim());
            false
        }
        Ok(Err(e)) => {
            tracing::warn!(event = "notification.failed", job_id = %ctx.job_id, error = %e, "desktop notification failed: cannot run gdbus: {e}");
            false
        }
        Err(_) => {
            tracing::warn!(event = "notification.failed", job_id = %ctx.job_id, "desktop notification failed: gdbus did not answer in 10 s");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(kind: &str, extra: Value) -> NotificationConfig {
        let mut v =
            json!({"type": kind, "on_events": ["job_complete", "job_failed"], "config": extra});
        if v["config"].is_null() {
            v["config"] = json!({});
        }
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn done() -> Context {
        let mut c = Context::new(NotificationEvent::JobComplete, "j1", "My Job");
        c.success_count = Some(3);
        c.failure_count = Some(0);
        c.duration_seconds = Some(75.0);
        c
    }

    #[test]
    fn webhook_payload_has_upstreams_keys() {
        let body = webhook_payload(&config("webhook", json!({"url": "http://x/"})), &done());
        assert_eq!(body["event_type"], "job_complete");
        assert_eq!(body["metadata"]["source"], "mozart-ai-compose");
        let keys: Vec<&String> = body["context"]
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys.len(), 11);
        let bare = webhook_payload(
            &config(
                "webhook",
                json!({"url": "http://x/", "include_metadata": false}),
            ),
            &done(),
        );
        assert!(bare.get("metadata").is_none());
    }

    #[test]
    fn slack_payload_uses_fields_and_colour() {
        let body = slack_payload(
            &config("slack", json!({"webhook_url": "http://x/"})),
            &done(),
        );
        let a = &body["attachments"][0];
        assert_eq!(a["color"], "#36a64f");
        assert_eq!(a["fields"][0]["value"], "3 passed, 0 failed");
        assert_eq!(a["fields"][1]["value"], "1.2min");
        assert!(a.get("text").is_none());
        assert!(body.get("channel").is_none(), "null keys are removed");
    }

    /// A pause's reason (a cost limit's, the user's) is shown as the reason, not as an error.
    #[test]
    fn a_pause_gives_its_reason_not_an_error() {
        let mut c = Context::new(NotificationEvent::JobPaused, "j1", "My Job");
        c.error_message = Some("Cost limit: job cost $3.0000 exceeds limit $0.5000".into());
        let body = slack_payload(&config("slack", json!({"webhook_url": "http://x/"})), &c);
        let field = &body["attachments"][0]["fields"][0];
        assert_eq!(field["title"], "Reason");
        assert_eq!(
            c.message(),
            "Reason: Cost limit: job cost $3.0000 exceeds limit $0.5000"
        );
        c.event = NotificationEvent::JobFailed;
        assert!(c.message().starts_with("Error: "));
    }

    #[test]
    fn header_variables_expand_from_the_environment() {
        let c = config(
            "webhook",
            json!({"url": "http://x/", "headers": {"X-A": "Bearer ${MOZART_NOTIFY_TEST_UNSET_VAR}!"}}),
        );
        assert_eq!(
            headers(&c, &done()),
            [("X-A".to_string(), "Bearer !".to_string())]
        );
    }
}
